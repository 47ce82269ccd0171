"""Bad Kubernetes objects never crash (issue #19): snapshot files, live objects as the waits
(node_ready_wait's among them) and gpu_node_labels see them, and the report's inputs end
in a result or in a refusal naming the object and the field (k8s_objects.MalformedObject),
proven on generated inputs; and what the API leaves out is read as absent, never refused."""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check as nc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_labels as nl
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import verify_report as vr
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_node_check, gpu_node_labels, node_ready_wait
from tests.unit.bad_input import assert_refusal, examples, mutated
from tests.unit.node_labels_helpers import merge_patch
from tests.unit.wait_builders import (
    NS, chain_pods, clusterpolicy, daemonset, deployment, gpu_node, helmchart, job, job_pod, node, operand_pod,
    operator_pod)
from tests.unit.wait_builders import cache as make_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "scripts", "gpu-node-check")
with open(os.path.join(ROOT, "tests", "unit", "snapshots", "lab-fleet.yaml")) as _handle:
    LAB_LIST = yaml.safe_load(_handle)
# Every file gpu_node_check reads in these tests is written here (one per form).
WORK = tempfile.mkdtemp(prefix="gpuplatform-bad-input-")


# ---------------------------------------------------------------- k8s_objects itself

@pytest.mark.parametrize("kind, obj, message", [
    ("Pod", {"metadata": {"name": "nvidia-driver-daemonset-x", "namespace": NS, "labels": ["app"]}},
     "Pod gpu-operator/nvidia-driver-daemonset-x: metadata.labels is a list, expected a mapping"),
    ("Node", {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.present": True}}},
     'Node gpu-1: metadata.labels["nvidia.com/gpu.present"] is a boolean (true), expected a string'),
    ("Pod", {"metadata": {"name": "p", "namespace": NS}, "status": {"containerStatuses": [{"state": "Running"}]}},
     "Pod gpu-operator/p: status.containerStatuses[0].state is a string ('Running'), expected a mapping"),
    ("Node", {"metadata": {"labels": {}}}, "Node: metadata.name is missing"),
    ("Node", {"kind": "Node"}, "Node: metadata is missing"),
    ("Node", ["gpu-1"], "Node: the object is a list, expected a mapping"),
    ("Node", {"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"nvidia.com/gpu": [2]}}},
     'Node gpu-1: status.allocatable["nvidia.com/gpu"] is a list, expected a quantity'),
    ("ClusterPolicy", {"metadata": {"name": "cluster-policy"}, "spec": {"driver": {"enabled": "false"}}},
     "ClusterPolicy cluster-policy: spec.driver.enabled is a string ('false'), expected a boolean"),
    ("Node", {"metadata": {"name": "two\nlines"}, "spec": []}, 'Node "two\\nlines": spec is a list'),
])
def test_a_refusal_names_the_object_and_the_field(kind, obj, message):
    with pytest.raises(ko.MalformedObject) as caught:
        ko.read(kind, obj)
    assert str(caught.value).startswith(message)
    assert_refusal(caught.value, ko.MalformedObject)


def test_a_list_refusal_names_the_index():
    pods = [operand_pod("driver", "gpu-1"), operand_pod("driver", "gpu-2")]
    pods[1]["metadata"]["labels"] = ["app"]
    with pytest.raises(ko.MalformedObject, match=r"^pods\[1\] gpu-operator/nvidia-driver-daemonset-gpu-2: "
                                                 r"metadata.labels is a list, expected a mapping$"):
        ko.read_all("Pod", pods, "pods")


@pytest.mark.parametrize("kind, obj", [
    # What the API returns before a controller or the kubelet has filled anything in.
    ("Node", {"metadata": {"name": "just-registered"}}),
    ("Pod", {"metadata": {"name": "just-created", "namespace": NS}, "spec": {"containers": [{"name": "c"}]}}),
    ("DaemonSet", {"metadata": {"name": "nvidia-driver-daemonset", "namespace": NS}, "spec": {}}),
    ("Deployment", {"metadata": {"name": "gpu-operator", "namespace": NS, "generation": 1}}),
    ("Job", {"metadata": {"name": "helm-install-gpu-operator", "namespace": "kube-system"}}),
    ("HelmChart", {"metadata": {"name": "gpu-operator", "namespace": "kube-system"}, "spec": {}}),
    ("ClusterPolicy", {"metadata": {"name": "cluster-policy"}, "spec": {}}),
    # A snapshot may spell an absent field as null.
    ("Pod", {"metadata": {"name": "p", "labels": None}, "status": {"containerStatuses": None, "phase": None}}),
])
def test_what_the_api_leaves_out_reads_as_absent(kind, obj):
    assert ko.read(kind, obj) is obj


def test_pods_of_other_namespaces_are_not_read():
    other = {"metadata": {"name": "trainer", "namespace": "team-a", "labels": ["not", "read"]}}
    driver = operand_pod("driver", "gpu-1")
    assert ko.read_namespaced("Pod", [other, driver], NS, "pods") == [driver]


# ---------------------------------------------------------------- snapshot files

def _stream(doc):
    """The List as a YAML document stream, one object a document."""
    items = doc.get("items") if isinstance(doc, dict) and isinstance(doc.get("items"), list) else [doc]
    return yaml.dump_all(items, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))


def _typed_lists(doc):
    """The List as kubectl's typed lists (NodeList, PodList, ...), as JSON."""
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return json.dumps(doc)
    by_kind = {}
    for item in items:
        kind = item.get("kind") if isinstance(item, dict) and isinstance(item.get("kind"), str) else "Node"
        stripped = dict(item, kind=None) if isinstance(item, dict) else item
        by_kind.setdefault(kind, []).append(stripped)
    return yaml.dump_all([{"kind": kind + "List", "items": objs} for kind, objs in sorted(by_kind.items())],
                         Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))


def _yaml(doc):
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))


FORMS = {"json": json.dumps, "yaml": _yaml, "stream": _stream, "typed": _typed_lists}


def check_snapshot_text(text, name):
    """The module's whole run on one snapshot file: a result, or its ValueError."""
    path = os.path.join(WORK, name)
    with open(path, "w") as handle:
        handle.write(text)
    try:
        result = gpu_node_check.run({"snapshot": [path], "nodes": None, "isolated_nodes": []})
    except ValueError as exc:
        return assert_refusal(exc)
    nc.format_table(result)
    nc.failure_message(result)
    json.dumps(result)
    return result


@examples(250)
@given(st.sampled_from(sorted(FORMS)), mutated(LAB_LIST, most=3))
def test_a_mutated_snapshot_file_ends_in_a_result_or_a_refusal(form, doc):
    check_snapshot_text(FORMS[form](doc), "snapshot." + form)


@examples(150)
@given(st.text(max_size=200) | st.builds(lambda cut: json.dumps(LAB_LIST)[:cut], st.integers(0, 4000))
       | st.builds(lambda cut: yaml.safe_dump(LAB_LIST)[:cut], st.integers(0, 4000)))
def test_any_text_or_a_cut_off_snapshot_ends_in_a_result_or_a_refusal(text):
    outcome = check_snapshot_text(text, "snapshot.txt")
    if isinstance(outcome, str) and "not JSON or YAML" in outcome:
        assert outcome.startswith(os.path.join(WORK, "snapshot.txt") + ": not JSON or YAML: line ")


def _not_a_name(path):
    """Paths a drop must keep: an object's kind, metadata and name (the API always sets them)."""
    return path[-1] == "kind" or path[-1] == "metadata" or path[-2:] == ("metadata", "name")


@examples(200)
@given(mutated(LAB_LIST, most=6, drop_only=True, keep=_not_a_name))
def test_a_snapshot_missing_optional_fields_is_checked_not_refused(doc):
    result = check_snapshot_text(json.dumps(doc), "partial.json")
    assert isinstance(result, dict), result


def test_the_cli_prints_a_refusal_on_one_line_and_exits_2(tmp_path):
    doc = copy.deepcopy(LAB_LIST)
    doc["items"][0]["metadata"]["labels"] = ["gpu"]
    doc["items"][1].pop("metadata")
    cases = {"labels.json": json.dumps(doc), "notes.txt": "just some words\n"}
    expected = {"labels.json": "nodes[0] gpu-container-1: metadata.labels is a list, expected a mapping",
                "notes.txt": "not JSON or YAML: line 1: a string ('just some words')"}
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        proc = subprocess.run([sys.executable, CLI, "--snapshot", str(path)], capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert expected[name] in proc.stderr


def test_the_module_fails_with_the_refusal_as_msg(tmp_path):
    doc = copy.deepcopy(LAB_LIST)
    doc["items"][1]["status"]["allocatable"] = "2"
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"^nodes\[1\] gpu-container-2: status.allocatable is a string \('2'\), "
                                         r"expected a mapping$"):
        gpu_node_check.run({"snapshot": [str(path)], "nodes": None, "isolated_nodes": []})


# ---------------------------------------------------------------- live objects, as the waits see them

def live_cache():
    """The engine's cache of a small cluster in every state the conditions read: a healthy
    node, one whose toolkit crash-loops, one that just joined; the operator, its
    ClusterPolicy and DaemonSets, a HelmChart with its install Job and pod, a sample pod."""
    pods = chain_pods("gpu-1") + chain_pods("gpu-2")[:1] + [
        operand_pod("container-toolkit", "gpu-2", ready=False, waiting="CrashLoopBackOff", init_waiting="driver"),
        operator_pod("ImagePullBackOff"), job_pod(state={"terminated": {"exitCode": 1, "reason": "Error"}}),
        operand_pod("device-plugin", "gpu-3", phase="Pending")]
    sample = operand_pod("driver", "gpu-1")
    sample["metadata"].update(name="cuda-vectoradd-gpu-1", labels={rd.SAMPLE_LABEL_NAME: "cuda-sample"})
    return make_cache(
        nodes=[gpu_node("gpu-1"), gpu_node("gpu-2", gpus=0), gpu_node("gpu-3", gpus=0, ready=False),
               node("cpu-1", gpu=False)],
        pods=pods + [sample], deployments=[deployment(available=False)],
        clusterpolicies=[clusterpolicy()], daemonsets=[daemonset("driver", [{"operator": "Exists"}])],
        helmcharts=[helmchart(job_name="helm-install-gpu-operator", spec_time="2026-11-30T09:59:00Z")],
        jobs=[job()])


LIVE = live_cache()
CONDITIONS = (
    rd.allocatable_condition("nvidia.com/gpu"),
    rd.allocatable_condition("nvidia.com/gpu", names=["gpu-1", "gpu-9"], explicit=True),
    rd.operand_readiness_condition(NS),
    rd.helmchart_condition("gpu-operator", "kube-system"),
    rd.sample_condition(NS, ["cuda-vectoradd-gpu-1"]),
)


def run_waits(cache):
    """What the wait modules do with one cache: every condition, then the timeout diagnosis."""
    for condition in CONDITIONS:
        done, detail = condition(cache)
        assert isinstance(done, bool) and isinstance(detail, dict)
    nodes, pods = rd.objects(cache, "nodes"), rd.objects(cache, "pods")
    policy = rd.policy_from_cache(cache)
    rd.diagnose(nodes, pods, policy, sorted(rd.node_check.evaluate(nodes, [], policy)["nodes"]) + ["gpu-9"],
                "nvidia.com/gpu", daemonsets=rd.objects(cache, "daemonsets"))
    rd.sample_nodes(nodes, "nvidia.com/gpu", 1)
    for pod in pods:
        rd.sample_state(pod)
        rd.job_attempt_failure(pod)


def _cache_structure(path):
    # The cache's own layout (kind -> key -> object) is the engine's, not the API's.
    return len(path) <= 2


@examples(300)
@given(mutated(LIVE, most=3, keep=_cache_structure))
def test_mutated_live_objects_end_in_a_wait_result_or_a_refusal(cache):
    try:
        run_waits(cache)
    except ko.MalformedObject as exc:
        assert_refusal(exc, ko.MalformedObject)


@examples(150)
@given(mutated(LIVE, most=6, drop_only=True, keep=lambda p: _cache_structure(p) or _not_a_name(p)))
def test_live_objects_missing_optional_fields_never_stop_a_wait(cache):
    run_waits(cache)


def test_a_wait_refuses_an_object_it_cannot_read_naming_it():
    cache = live_cache()
    cache["nodes"]["gpu-2"]["status"]["conditions"] = {"type": "Ready"}
    with pytest.raises(ko.MalformedObject, match=r"^nodes\[2\] gpu-2: status.conditions is a mapping, expected a "
                                                 r"list$"):
        rd.allocatable_condition("nvidia.com/gpu")(cache)


# ---------------------------------------------------------------- the report's inputs

def report_inputs():
    snapshot = nc.split_snapshot([copy.deepcopy(LAB_LIST)])
    policy = nc.policy_from_inputs(snapshot["clusterpolicies"], {}, snapshot["daemonsets"])
    check = nc.check(snapshot, policy)
    diagnosis = rd.diagnose(snapshot["nodes"], snapshot["pods"], policy, ["gpu-container-2", "gpu-gone"])
    return {
        "step_gate": {"changed": False, "message": "step 6 may start", "elapsed": 0.2,
                      "observed": {"api_error": None, "nodes": {"gpu-container-1": "Ready"}}},
        "node_check": check,
        "operand_readiness": {"failed": True, "msg": "timed out", "diagnosis": diagnosis},
        "allocatable": [{"failed": False, "msg": "", "nodes": {
            "gpu-container-1": {"allocatable": 2, "capacity": 2, "ready": True},
            "gpu-container-2": {"allocatable": 2, "capacity": 2, "ready": False}}}],
        "cuda_sample": {"failed": True, "pods": [
            {"node": "gpu-container-1", "passed": True, "phase": "Succeeded", "log_tail": ["Test PASSED"]},
            {"node": "gpu-container-2", "passed": False, "phase": "Failed", "reason": None,
             "log_tail": ["Test FAILED"]}]},
        "host_facts": {"gpu-container-1": {
            "hardware": {"gpus": [{"model": "A10", "vendor_id": "10de", "device_id": "2236"}]},
            "host_driver": {"preinstalled": False, "loaded": False}}},
    }


REPORT_INPUTS = report_inputs()


def build(inputs):
    report = vr.build_report("lab", inputs.get("node_check"), inputs.get("operand_readiness"),
                             inputs.get("allocatable"), inputs.get("cuda_sample"), inputs.get("host_facts"),
                             step_gate=inputs.get("step_gate"))
    vr.to_json(report)
    vr.to_markdown(report)
    vr.to_html(report)
    vr.failure_message(report)
    return report


def test_a_failed_sample_without_a_reason_is_reported_by_its_last_log_line():
    layer = build(REPORT_INPUTS)["nodes"]["gpu-container-2"]["layers"]["cuda-sample"]
    assert layer == {"state": vr.FAILED, "detail": "phase Failed: Test FAILED"}


@examples(300)
@given(mutated(REPORT_INPUTS, most=3, keep=lambda path: len(path) == 1))
def test_mutated_module_results_end_in_a_report_or_a_refusal(inputs):
    try:
        build(inputs)
    except ko.MalformedObject as exc:
        text = assert_refusal(exc, ko.MalformedObject)
        assert re.split(r"[.\[ ]", text, maxsplit=1)[0] in REPORT_INPUTS, text


def test_a_report_input_it_cannot_read_is_refused_naming_option_and_field():
    inputs = copy.deepcopy(REPORT_INPUTS)
    inputs["node_check"]["nodes"]["gpu-container-1"]["layer_failures"] = ["driver"]
    with pytest.raises(ko.MalformedObject, match=r'^node_check.nodes\["gpu-container-1"\].layer_failures\[0\] is a '
                                                 r"string \('driver'\), expected a mapping$"):
        build(inputs)


# ---------------------------------------------------------------- nodes as node_ready_wait sees them

NO_CNI = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
          "message:Network plugin returns error: cni plugin not initialized")
KUBELET = "v1.34.1+rke2r1"


def _with_kubelet(obj, version=KUBELET, ready=None):
    obj["status"]["nodeInfo"] = {"kubeletVersion": version}
    if ready is not None:
        obj["status"]["conditions"] = [{"type": "MemoryPressure", "status": "False"}, ready]
    return obj


READY_NODES = make_cache(nodes=[
    _with_kubelet(node("cp-1", gpu=False)),
    _with_kubelet(node("gpu-1", config="container"), ready={"type": "Ready", "status": "False",
                                                            "reason": "KubeletNotReady", "message": NO_CNI}),
    _with_kubelet(gpu_node("gpu-2", taints=[{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]),
                  version="v1.33.5+rke2r1"),
    node("gpu-3", ready=False)])
READY_NAMES = ["cp-1", "gpu-1", "gpu-2", "gpu-3", "gpu-9"]


def wait_for_nodes(cache, kubelet_version, without_cni):
    """What node_ready_wait's condition and its failure make of one cache."""
    done, states = rke2.nodes_ready(k8s_wait.objects(cache, "nodes"), READY_NAMES, kubelet_version, without_cni)
    assert isinstance(done, bool) and sorted(states) == sorted(READY_NAMES)
    assert "\n" not in rke2.not_ready_message(states, 600)
    return done, states


@examples(200)
@given(mutated(READY_NODES, most=3, keep=_cache_structure),
       st.sampled_from([None, KUBELET]), st.booleans())
def test_mutated_nodes_end_in_a_node_wait_result_or_a_refusal(cache, kubelet_version, without_cni):
    try:
        wait_for_nodes(cache, kubelet_version, without_cni)
    except ko.MalformedObject as exc:
        assert re.match(r"^nodes\[\d\]( \S+)?: \S", assert_refusal(exc, ko.MalformedObject)), exc


@examples(100)
@given(mutated(READY_NODES, most=6, drop_only=True, keep=lambda p: _cache_structure(p) or _not_a_name(p)),
       st.sampled_from([None, KUBELET]), st.booleans())
def test_nodes_missing_optional_fields_never_stop_a_node_wait(cache, kubelet_version, without_cni):
    wait_for_nodes(cache, kubelet_version, without_cni)


def test_the_node_wait_refuses_a_node_it_cannot_read_naming_it():
    cache = copy.deepcopy(READY_NODES)
    cache["nodes"]["gpu-1"]["status"]["conditions"][1] = "Ready"
    with pytest.raises(ko.MalformedObject, match=r"^nodes\[1\] gpu-1: status.conditions\[1\] is a string "
                                                 r"\('Ready'\), expected a mapping$"):
        wait_for_nodes(cache, KUBELET, False)


def test_the_node_wait_module_fails_with_the_refusal_as_msg(monkeypatch, capsys):
    cache = copy.deepcopy(READY_NODES)
    cache["nodes"]["cp-1"]["status"]["nodeInfo"] = {"kubeletVersion": 134}

    def wait(_api, names, kubelet_version, _timeout, without_cni=False, etcd_voter=False):
        return rke2.nodes_ready(k8s_wait.objects(cache, "nodes"), names, kubelet_version, without_cni, etcd_voter)

    monkeypatch.setattr(node_ready_wait, "wait", wait)
    monkeypatch.setattr(k8s_wait, "connect", lambda params: type("Api", (), {"clock": k8s_wait.Clock()})())
    with patch_module_args({"names": ["cp-1"], "kubeconfig": "/nonexistent"}):
        with pytest.raises(SystemExit):
            node_ready_wait.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and result["msg"] == (
        "nodes[0] cp-1: status.nodeInfo.kubeletVersion is an integer (134), expected a string")


# ---------------------------------------------------------------- nodes and pods as gpu_node_labels reads them

def _labelled(name, config, owned, cordoned=False):
    obj = node(name, config=config)
    obj["metadata"]["annotations"] = {nl.OWNED_LABELS_ANNOTATION: json.dumps(owned)}
    if cordoned:
        obj["metadata"]["annotations"][nl.CORDONED_ANNOTATION] = "vm-passthrough->container"
        obj["spec"]["unschedulable"] = True
    return obj


def _workload(name, resources, phase="Running", labels=None, annotations=None, init=False):
    containers = [{"name": "main", "resources": resources}]
    return {"metadata": {"name": name, "namespace": "team-a", "uid": "uid-" + name, "labels": labels or {},
                         "annotations": annotations or {}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "side"}] if init else containers,
                     "initContainers": containers if init else []},
            "status": {"phase": phase}}


LABELS_CLUSTER = {
    "nodes": {"gpu-1": _labelled("gpu-1", om.CONTAINER, [om.WORKLOAD_CONFIG_LABEL]),
              "gpu-2": _labelled("gpu-2", om.CONTAINER, [], cordoned=True)},
    "pods": {"gpu-1": [
        _workload("trainer", {"limits": {om.CONTAINER_RESOURCE: "1"}, "requests": {"cpu": "2"}}),
        _workload("virt-launcher-vm-a", {"requests": {"nvidia.com/GA102GL_A10": "1"}},
                  labels={"kubevirt.io": "virt-launcher"}, annotations={"kubevirt.io/domain": "vm-a"}),
        _workload("done", {"limits": {om.CONTAINER_RESOURCE: "1"}}, phase="Succeeded"),
        _workload("init-gpu", {"limits": {om.CONTAINER_RESOURCE: "1"}}, init=True)]},
}
LABELS_PARAMS = {
    "nodes": [{"name": "gpu-1", "host": "gpu-1", "workload_config": "vm-passthrough", "operands_disabled": [],
               "isolated": False, "vgpu_config": None},
              {"name": "gpu-2", "host": "gpu-2", "workload_config": om.CONTAINER,
               "operands_disabled": ["dcgm-exporter"], "isolated": False, "vgpu_config": None}],
    "step": "apply", "sandbox_workloads_enabled": True, "default_workload": None, "sandbox_off_action": "fail",
    "adopt_existing": False, "force": True, "drain": False, "drain_timeout": 600}


class LabelsCluster(object):
    """gpu_node_labels' Cluster over one generated document, recording every change."""

    def __init__(self, doc):
        self.doc = doc
        self.changes = []

    def nodes(self):
        return self.doc["nodes"]

    def pods_on(self, name):
        return self.doc["pods"].get(name) or []

    def patch_node(self, name, patch):
        self.changes.append(("patch", name, patch))
        return merge_patch(self.doc["nodes"][name], patch)

    def evict(self, workload):
        self.changes.append(("evict", workload["name"]))
        return True, None


def label_nodes(doc, check_mode, drain):
    """The module's run over the document: its result, or its Failure having changed nothing."""
    cluster = LabelsCluster(doc)
    params = dict(LABELS_PARAMS, drain=drain)
    try:
        result = gpu_node_labels.run(params, check_mode, lambda: cluster, lambda message: None)
    except gpu_node_labels.Failure as exc:
        assert cluster.changes == [] and exc.msg
        for line in exc.msg.split("\n"):
            assert line.startswith(("host gpu-1: ", "host gpu-2: ")), line
        return exc.msg
    json.dumps(result)
    if check_mode:
        assert cluster.changes == []
    for plan in result["nodes"]:
        nl.remaining_workloads(plan["gpu_workloads"], cluster.pods_on(plan["name"]))
    return result


def _labels_structure(path):
    # The fake's layout (nodes/pods by node name) is the test's, not the API's.
    return len(path) <= 2


@examples(200)
@given(mutated(LABELS_CLUSTER, most=3, keep=_labels_structure),
       st.sampled_from([(False, False), (True, False), (True, True)]))
def test_mutated_nodes_and_pods_are_labelled_or_refused_before_any_change(doc, mode):
    label_nodes(doc, *mode)


def _labels_kept(path):
    """What a drop must keep: the structure, names, and the ownership record (without it the
    module rightly refuses to take over a label it did set)."""
    return _labels_structure(path) or _not_a_name(path) or path[-1] in ("annotations", nl.OWNED_LABELS_ANNOTATION)


@examples(100)
@given(mutated(LABELS_CLUSTER, most=6, drop_only=True, keep=_labels_kept))
def test_nodes_and_pods_missing_optional_fields_are_labelled(doc):
    assert isinstance(label_nodes(doc, False, False), dict)


def test_the_labels_refuse_a_node_or_a_pod_they_cannot_read_naming_it():
    doc = copy.deepcopy(LABELS_CLUSTER)
    doc["nodes"]["gpu-2"]["metadata"]["annotations"][nl.CORDONED_ANNOTATION] = True
    doc["pods"]["gpu-1"][1]["spec"]["containers"][0]["resources"] = [om.CONTAINER_RESOURCE]
    assert label_nodes(doc, False, False) == (
        "host gpu-1: the pods on node gpu-1: pods[1] team-a/virt-launcher-vm-a: spec.containers[0].resources is a "
        "list, expected a mapping\n"
        'host gpu-2: Node gpu-2: metadata.annotations["%s"] is a boolean (true), expected a string'
        % nl.CORDONED_ANNOTATION)
