"""gpuplatform.rke2.gpu_node_labels against a fake API: refusals change nothing, ownership,
idempotence, check and diff mode, and the drain before a workload switch."""
import copy
import json

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_labels as nl
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_node_labels as module
from tests.unit.k8s_fake import FakeCluster
from tests.unit.node_labels_helpers import merge_patch, run_main, warnings_of

GPU = {"limits": {"nvidia.com/gpu": "1"}}
FOREIGN = {"kubernetes.io/hostname": "x", "team": "ml", om.GPU_PRESENT_LABEL: "true"}


def node(name, labels=None, owned=None, unschedulable=None):
    annotations = {}
    if owned is not None:
        annotations[nl.OWNED_LABELS_ANNOTATION] = json.dumps(owned)
    obj = {"metadata": {"name": name, "labels": dict(FOREIGN, **(labels or {})), "annotations": annotations},
           "spec": {}}
    if unschedulable:
        obj["spec"]["unschedulable"] = True
    return obj


def pod(name, node_name, resources=None, labels=None, ns="default", phase="Running"):
    return {"metadata": {"name": name, "namespace": ns, "uid": "uid-" + name, "labels": labels or {}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": resources or {}}]},
            "status": {"phase": phase}}


class FakeCore(object):
    """CoreV1Api as far as the module uses it; answers dicts."""

    def __init__(self, nodes=(), pods=()):
        self.nodes = dict((n["metadata"]["name"], copy.deepcopy(n)) for n in nodes)
        self.pods = [copy.deepcopy(p) for p in pods]
        self.patches = []
        self.evictions = []
        self.refuse = {}
        self.calls = []

    def list_node(self):
        self.calls.append(("list", "nodes"))
        return {"metadata": {"resourceVersion": "7"}, "items": [copy.deepcopy(n) for n in self.nodes.values()]}

    def list_pod_for_all_namespaces(self, field_selector=None, limit=None, _continue=None):
        if field_selector is None:
            # A page of every pod: the continue token is the next offset.
            start = int(_continue or 0)
            self.calls.append(("list", "pods", start))
            items = self.pods[start:start + limit]
            more = str(start + limit) if start + limit < len(self.pods) else None
            return {"metadata": {"resourceVersion": "7", "continue": more}, "items": copy.deepcopy(items)}
        self.calls.append(("list", field_selector))
        node_name = field_selector.split("=", 1)[1]
        return {"metadata": {"resourceVersion": "7"},
                "items": [copy.deepcopy(p) for p in self.pods if p["spec"]["nodeName"] == node_name]}

    def patch_node(self, name, body, _content_type=None):
        assert _content_type == "application/merge-patch+json"
        self.patches.append((name, copy.deepcopy(body)))
        self.nodes[name] = merge_patch(self.nodes[name], body)
        return copy.deepcopy(self.nodes[name])

    def create_namespaced_pod_eviction(self, name, namespace, body):
        assert (body.metadata.name, body.metadata.namespace) == (name, namespace)
        self.evictions.append("%s/%s" % (namespace, name))
        if self.refuse.get(name):
            self.refuse[name] -= 1
            raise ApiException(status=429, reason="Too Many Requests")
        self.pods = [p for p in self.pods if p["metadata"]["name"] != name]

    def labels(self, name):
        return self.nodes[name]["metadata"]["labels"]


@pytest.fixture
def call(capsys, monkeypatch):
    def run(args, core=None, wait=None, check=False, diff=False):
        fake = None if core is None else (lambda: module.Cluster(core, wait or FakeCluster()))
        return run_main(module, "_cluster_factory", fake, args, capsys, monkeypatch, check, diff)
    return run


def spec(name, **settings):
    return dict(settings, name=name)


THREE = [spec("gpu-c", workload_config="container", operands_disabled=["dcgm-exporter"]),
         spec("gpu-p", workload_config="vm-passthrough"),
         spec("gpu-v", workload_config="vm-vgpu", vgpu_config="A10-12Q")]


def three_nodes():
    return FakeCore([node("gpu-c", {om.DEPLOY_LABEL_PREFIX + "dcgm-exporter": "true"}),
                     node("gpu-p", {om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"}), node("gpu-v")])


# ---------------------------------------------------------------- refusals: message, and nothing changed

@pytest.mark.parametrize("settings, sandbox, expected", [
    (dict(workload_config="vm-gpu"), True, "host gpu01: gpu_workload_config 'vm-gpu' is not a workload config"),
    (dict(workload_config="container", operands_disabled=["dcgm-exportr"]), True,
     "host gpu01: gpu_operands_disabled lists 'dcgm-exportr', which is not an operand"),
    (dict(workload_config="container", operands_disabled=["vfio-manager"]), True,
     "host gpu01: gpu_operands_disabled lists 'vfio-manager', which does not run on container nodes"),
    (dict(workload_config="vm-passthrough"), False,
     "host gpu01: gpu_workload_config 'vm-passthrough' while sandbox workloads are off"),
    (dict(workload_config="vm-vgpu", vgpu_config="twelve"), True,
     "host gpu01: gpu_vgpu_config 'twelve' is not a vGPU profile"),
    (dict(workload_config="container", operands_disabled=["operator-validator"]), True,
     "host gpu01: gpu_operands_disabled lists 'operator-validator', which is refused: the validator is a gate"),
    (dict(workload_config="vm-passthrough", operands_disabled=["sandbox-validator"]), True,
     "host gpu01: gpu_operands_disabled lists 'sandbox-validator', which is refused: the validator is a gate"),
])
@pytest.mark.parametrize("step", ["validate", "apply"])
def test_inventory_refusals_fail_before_contacting_the_cluster(call, settings, sandbox, expected, step):
    core = FakeCore([node("gpu01")])
    result = call({"nodes": [dict(settings, name="gpu01")], "sandbox_workloads_enabled": sandbox, "step": step},
                  core)
    assert result["failed"] is True
    assert expected in result["msg"]
    assert core.calls == [] and core.patches == []


def test_every_host_problem_is_reported_at_once_and_no_node_is_patched(call):
    core = FakeCore([node("a"), node("b"), node("c")])
    result = call({"nodes": [spec("a", workload_config="gpu"), spec("b", operands_disabled=["nope"]),
                             spec("c", workload_config="container")], "sandbox_workloads_enabled": True}, core)
    assert result["failed"] is True
    assert "host a: gpu_workload_config 'gpu'" in result["msg"]
    assert "host b: gpu_operands_disabled lists 'nope'" in result["msg"]
    assert core.patches == []


def test_the_fleet_is_read_in_one_list_whatever_its_size(call):
    # 50 hosts: one list of the nodes, then one patch per node that changes; a rerun lists once and patches nothing.
    names = ["gpu-%02d" % index for index in range(50)]
    core = FakeCore([node(name) for name in names])
    args = {"nodes": [spec(name, workload_config="container") for name in names], "sandbox_workloads_enabled": True,
            "step": "apply"}
    assert call(args, core)["changed"] is True
    assert core.calls == [("list", "nodes")] and sorted(name for name, _body in core.patches) == names
    core.calls, core.patches = [], []
    assert call(args, core)["changed"] is False
    assert core.calls == [("list", "nodes")] and core.patches == []


def test_the_pods_of_many_switching_nodes_come_from_one_paged_list(call, monkeypatch):
    # 30 nodes switch to vm-passthrough; one runs a GPU pod. Their pods are read in pages of every pod (3 here),
    # not one list per node, and the GPU pod still stops the switch.
    monkeypatch.setattr(module, "PODS_PAGE", 25)
    names = ["gpu-%02d" % index for index in range(30)]
    pods = [pod("bystander-%02d" % index, names[index % 30]) for index in range(60)]
    pods.append(pod("train", "gpu-07", {"limits": {"nvidia.com/gpu": "1"}}))
    core = FakeCore([node(name) for name in names], pods)
    result = call({"nodes": [spec(name, workload_config="vm-passthrough") for name in names],
                   "sandbox_workloads_enabled": True, "step": "apply"}, core)
    assert result["failed"] is True and "gpu-07" in result["msg"] and "train" in result["msg"]
    assert core.calls == [("list", "nodes"), ("list", "pods", 0), ("list", "pods", 25), ("list", "pods", 50)]
    assert core.patches == []


def test_a_node_missing_from_the_cluster_is_refused(call):
    core = FakeCore([node("gpu-c")])
    result = call({"nodes": [spec("gpu-c", workload_config="container"),
                             dict(spec("gpu-9", workload_config="container"), host="gpu09.site")]}, core)
    assert result["failed"] is True
    assert result["msg"] == ("host gpu09.site (node gpu-9): node gpu-9 is not in the cluster "
                             "(k8s_node_name defaults to the inventory hostname)")
    assert core.patches == []


def test_someone_elses_label_value_is_refused_and_left_alone(call):
    core = FakeCore([node("gpu-v", {om.VGPU_CONFIG_LABEL: "A10-4Q"})])
    result = call({"nodes": THREE[2:], "sandbox_workloads_enabled": True}, core)
    assert result["failed"] is True
    assert "host gpu-v: label nvidia.com/vgpu.config=A10-4Q on node gpu-v was not set by this collection" in result["msg"]
    assert core.patches == []
    assert core.labels("gpu-v")[om.VGPU_CONFIG_LABEL] == "A10-4Q"


def test_adopt_existing_takes_someone_elses_label_over(call):
    core = FakeCore([node("gpu-v", {om.VGPU_CONFIG_LABEL: "A10-4Q"})])
    result = call({"nodes": THREE[2:], "sandbox_workloads_enabled": True, "adopt_existing": True}, core)
    assert result["changed"] is True
    assert core.labels("gpu-v")[om.VGPU_CONFIG_LABEL] == "A10-12Q"


def test_a_malformed_ownership_annotation_is_refused(call):
    broken = node("gpu-c")
    broken["metadata"]["annotations"][nl.OWNED_LABELS_ANNOTATION] = "{oops"
    core = FakeCore([broken])
    result = call({"nodes": THREE[:1], "sandbox_workloads_enabled": True}, core)
    assert result["failed"] is True
    assert "host gpu-c: node gpu-c: annotation gpuplatform.rke2/owned-labels is '{oops'" in result["msg"]
    assert core.patches == []


@pytest.mark.parametrize("workload, named", [
    (pod("train", "gpu-c", GPU), "pod default/train using nvidia.com/gpu"),
    (pod("virt-launcher-win-x1", "gpu-c", {"limits": {"nvidia.com/NVIDIA_A10-12Q": "1"}}, ns="vms",
         labels={"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "win"}),
     "VM vms/win (pod virt-launcher-win-x1) using nvidia.com/NVIDIA_A10-12Q"),
])
@pytest.mark.parametrize("step", ["plan", "apply"])
def test_switching_under_gpu_workloads_is_refused(call, workload, named, step):
    core = FakeCore([node("gpu-c", {om.WORKLOAD_CONFIG_LABEL: "container"}, owned=[om.WORKLOAD_CONFIG_LABEL])],
                    [workload, pod("web", "gpu-c", {"limits": {"cpu": "1"}}),
                     pod("done", "gpu-c", GPU, phase="Succeeded")])
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True,
                   "step": step}, core)
    assert result["failed"] is True
    assert result["msg"] == (
        "host gpu-c: switching the workload config from container to vm-passthrough is refused while GPU "
        "workloads run there (the driver changes under them): %s. Set gpu_node_labels_drain: true to evict "
        "them first, or gpu_node_labels_force: true to switch anyway" % named)
    assert core.patches == [] and core.evictions == []
    assert core.labels("gpu-c")[om.WORKLOAD_CONFIG_LABEL] == "container"


def test_non_gpu_pods_do_not_block_a_switch(call):
    core = FakeCore([node("gpu-c")], [pod("web", "gpu-c", {"limits": {"cpu": "1"}})])
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True},
                  core)
    assert result["changed"] is True
    assert result["nodes"][0]["workload_switch"] == {"from": "container", "to": "vm-passthrough"}


def test_force_switches_under_gpu_workloads_without_evicting(call):
    core = FakeCore([node("gpu-c")], [pod("train", "gpu-c", GPU)])
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True,
                   "force": True}, core)
    assert result["changed"] is True
    assert core.evictions == []
    assert core.labels("gpu-c")[om.WORKLOAD_CONFIG_LABEL] == "vm-passthrough"


# ---------------------------------------------------------------- apply, ownership, idempotence

def test_three_workload_types_apply_then_settle(call):
    core = three_nodes()
    args = {"nodes": THREE, "sandbox_workloads_enabled": True}
    first = call(args, core)
    assert first["changed"] is True
    assert core.labels("gpu-c") == dict(FOREIGN, **{om.WORKLOAD_CONFIG_LABEL: "container",
                                                    om.DEPLOY_LABEL_PREFIX + "dcgm-exporter": "false"})
    assert core.labels("gpu-p") == dict(FOREIGN, **{om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"})
    assert core.labels("gpu-v") == dict(FOREIGN, **{om.WORKLOAD_CONFIG_LABEL: "vm-vgpu",
                                                    om.VGPU_CONFIG_LABEL: "A10-12Q"})
    # Each patch names only the keys it owns, never a foreign one.
    for _name, body in core.patches:
        assert not set(body["metadata"].get("labels", {})) & set(FOREIGN)
        assert set(body) == {"metadata"}
    # The passthrough node's existing equal label is adopted: ownership only, no label change.
    assert [p for p in core.patches if p[0] == "gpu-p"] == [
        ("gpu-p", {"metadata": {"annotations": {nl.OWNED_LABELS_ANNOTATION: '["nvidia.com/gpu.workload.config"]'}}})]

    patches = len(core.patches)
    second = call(args, core)
    assert second["changed"] is False
    assert len(core.patches) == patches
    assert all(n["changes"] == [] for n in second["nodes"])


def test_removing_a_variable_removes_only_the_label_it_set(call):
    core = three_nodes()
    call({"nodes": THREE, "sandbox_workloads_enabled": True}, core)
    core.nodes["gpu-v"]["metadata"]["labels"]["nvidia.com/vgpu.config.state"] = "success"
    result = call({"nodes": [spec("gpu-v", workload_config="vm-vgpu")], "sandbox_workloads_enabled": True}, core)
    assert result["changed"] is True
    assert core.patches[-1] == ("gpu-v", {"metadata": {
        "labels": {om.VGPU_CONFIG_LABEL: None},
        "annotations": {nl.OWNED_LABELS_ANNOTATION: '["nvidia.com/gpu.workload.config"]'}}})
    assert core.labels("gpu-v") == dict(FOREIGN, **{om.WORKLOAD_CONFIG_LABEL: "vm-vgpu",
                                                    "nvidia.com/vgpu.config.state": "success"})


def test_an_operand_dropped_from_the_inventory_is_switched_back_on(call):
    core = three_nodes()
    call({"nodes": THREE, "sandbox_workloads_enabled": True}, core)
    assert core.labels("gpu-c")[om.DEPLOY_LABEL_PREFIX + "dcgm-exporter"] == "false"
    result = call({"nodes": [spec("gpu-c", workload_config="container")], "sandbox_workloads_enabled": True}, core)
    assert result["changed"] is True
    # Set to true, not removed: the operator would not notice a removal for hours.
    assert core.patches[-1] == ("gpu-c", {"metadata": {
        "labels": {om.DEPLOY_LABEL_PREFIX + "dcgm-exporter": "true"},
        "annotations": {nl.OWNED_LABELS_ANNOTATION: '["nvidia.com/gpu.workload.config"]'}}})
    patches = len(core.patches)
    assert call({"nodes": [spec("gpu-c", workload_config="container")], "sandbox_workloads_enabled": True},
                core)["changed"] is False
    assert len(core.patches) == patches


def test_a_paused_label_is_left_alone_with_a_warning(call):
    key = om.DEPLOY_LABEL_PREFIX + "dcgm-exporter"
    core = FakeCore([node("gpu-c", {key: "paused-for-driver-upgrade"})])
    result = call({"nodes": [spec("gpu-c", host="gpu01", workload_config="container",
                                  operands_disabled=["dcgm-exporter"])]}, core)
    assert result.get("failed") is not True
    assert core.labels("gpu-c")[key] == "paused-for-driver-upgrade"
    assert core.patches == [("gpu-c", {"metadata": {
        "labels": {om.WORKLOAD_CONFIG_LABEL: "container"},
        "annotations": {nl.OWNED_LABELS_ANNOTATION: '["nvidia.com/gpu.workload.config"]'}}})]
    (node_result,) = result["nodes"]
    assert node_result["deferred"] == [w for w in warnings_of(result) if "paused-for-driver-upgrade" in w]
    assert node_result["deferred"][0].startswith(
        "host gpu01 (node gpu-c): label nvidia.com/gpu.deploy.dcgm-exporter=paused-for-driver-upgrade on node gpu-c "
        "is left alone: k8s-driver-manager is upgrading the driver")


def test_isolation_labels_the_node_without_cordoning_it(call):
    core = FakeCore([node("gpu-c", {om.DEPLOY_LABEL_PREFIX + "driver": "true"})])
    result = call({"nodes": [spec("gpu-c", isolated=True, operands_disabled=["dcgm-exporter"])]}, core)
    assert result["changed"] is True
    assert core.labels("gpu-c")[om.OPERANDS_LABEL] == "false"
    assert om.DEPLOY_LABEL_PREFIX + "dcgm-exporter" not in core.labels("gpu-c")
    assert core.labels("gpu-c")[om.DEPLOY_LABEL_PREFIX + "driver"] == "true"
    assert "unschedulable" not in core.nodes["gpu-c"]["spec"]
    # Rejoining: the isolation label goes, the held-back operand switch comes.
    call({"nodes": [spec("gpu-c", operands_disabled=["dcgm-exporter"])]}, core)
    assert om.OPERANDS_LABEL not in core.labels("gpu-c")
    assert core.labels("gpu-c")[om.DEPLOY_LABEL_PREFIX + "dcgm-exporter"] == "false"


def test_sandbox_off_warn_mode_labels_and_warns(call):
    core = FakeCore([node("gpu-p")])
    result = call({"nodes": [spec("gpu-p", workload_config="vm-passthrough")], "sandbox_off_action": "warn"}, core)
    assert result["changed"] is True
    assert any("host gpu-p: gpu_workload_config 'vm-passthrough' while sandbox workloads are off" in w
               for w in warnings_of(result))
    assert core.labels("gpu-p")[om.WORKLOAD_CONFIG_LABEL] == "vm-passthrough"


def test_check_mode_reports_and_changes_nothing(call):
    core = three_nodes()
    before = copy.deepcopy(core.nodes)
    result = call({"nodes": THREE, "sandbox_workloads_enabled": True}, core, check=True)
    assert result["changed"] is True
    assert core.patches == [] and core.nodes == before


def test_diff_lists_label_changes_per_node(call):
    core = three_nodes()
    result = call({"nodes": THREE, "sandbox_workloads_enabled": True}, core, check=True, diff=True)
    assert result["diff"] == [
        {"before_header": "node/gpu-c labels", "after_header": "node/gpu-c labels",
         "before": "nvidia.com/gpu.deploy.dcgm-exporter=true\n",
         "after": "nvidia.com/gpu.deploy.dcgm-exporter=false\nnvidia.com/gpu.workload.config=container\n"},
        {"before_header": "node/gpu-v labels", "after_header": "node/gpu-v labels",
         "before": "", "after": "nvidia.com/gpu.workload.config=vm-vgpu\nnvidia.com/vgpu.config=A10-12Q\n"},
    ]


def test_no_diff_without_diff_mode(call):
    result = call({"nodes": THREE, "sandbox_workloads_enabled": True}, three_nodes())
    assert "diff" not in result


# ---------------------------------------------------------------- drain

def test_drain_cordons_evicts_waits_then_switches_and_uncordons(call):
    train = pod("train", "gpu-c", GPU)
    core = FakeCore([node("gpu-c")], [train, pod("web", "gpu-c")])
    wait = FakeCluster(**{"pods:gpu-c": [train, pod("web", "gpu-c")]})
    wait.script("pods:gpu-c", [("advance", 3), ("DELETED", train)])
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True,
                   "drain": True}, core, wait)
    assert result["changed"] is True
    assert core.evictions == ["default/train"]
    assert result["nodes"][0]["drain"] == {"cordoned": True, "evicted": ["train"], "remaining": []}
    assert result["nodes"][0]["uncordoned"] is True
    cordon, switch = core.patches
    assert cordon == ("gpu-c", {"metadata": {"annotations": {nl.CORDONED_ANNOTATION: "container->vm-passthrough"}},
                                "spec": {"unschedulable": True}})
    assert switch[1]["spec"] == {"unschedulable": None}
    assert switch[1]["metadata"]["labels"] == {om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"}
    assert core.nodes["gpu-c"]["spec"] == {}
    assert nl.CORDONED_ANNOTATION not in core.nodes["gpu-c"]["metadata"]["annotations"]
    assert wait.count("watch") == 1


def test_drain_step_then_apply_step(call):
    train = pod("train", "gpu-c", GPU)
    core = FakeCore([node("gpu-c")], [train])
    wait = FakeCluster(**{"pods:gpu-c": [train]})
    wait.script("pods:gpu-c", [("DELETED", train)])
    args = {"nodes": [spec("gpu-c", workload_config="vm-vgpu", vgpu_config="A10-12Q")],
            "sandbox_workloads_enabled": True, "drain": True}
    drained = call(dict(args, step="drain"), core, wait)
    assert drained["changed"] is True
    assert core.nodes["gpu-c"]["spec"] == {"unschedulable": True}
    assert om.WORKLOAD_CONFIG_LABEL not in core.labels("gpu-c")
    applied = call(dict(args, step="apply"), core, wait)
    assert applied["changed"] is True and applied["nodes"][0]["uncordoned"] is True
    assert core.labels("gpu-c")[om.WORKLOAD_CONFIG_LABEL] == "vm-vgpu"
    assert core.nodes["gpu-c"]["spec"] == {}
    assert core.evictions == ["default/train"]
    assert call(dict(args, step="apply"), core, wait)["changed"] is False


def test_drain_leaves_an_existing_cordon_to_its_owner(call):
    train = pod("train", "gpu-c", GPU)
    core = FakeCore([node("gpu-c", unschedulable=True)], [train])
    wait = FakeCluster(**{"pods:gpu-c": [train]})
    wait.script("pods:gpu-c", [("DELETED", train)])
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True,
                   "drain": True}, core, wait)
    assert result["nodes"][0]["drain"]["cordoned"] is False
    assert result["nodes"][0]["uncordoned"] is False
    assert core.nodes["gpu-c"]["spec"] == {"unschedulable": True}


def test_drain_retries_an_eviction_a_disruption_budget_refuses(call):
    train = pod("train", "gpu-c", GPU)
    core = FakeCore([node("gpu-c")], [train])
    core.refuse["train"] = 1
    wait = FakeCluster(**{"pods:gpu-c": [train]})
    wait.script("pods:gpu-c", [], [("DELETED", train)])
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True,
                   "drain": True}, core, wait)
    assert result["changed"] is True
    assert core.evictions == ["default/train", "default/train"]
    assert core.labels("gpu-c")[om.WORKLOAD_CONFIG_LABEL] == "vm-passthrough"
    assert wait.clock.now() == pytest.approx(module.EVICTION_RETRY_S)


def test_drain_timeout_fails_names_the_workload_and_keeps_the_labels(call):
    train = pod("train", "gpu-c", GPU)
    core = FakeCore([node("gpu-c", {om.WORKLOAD_CONFIG_LABEL: "container"}, owned=[om.WORKLOAD_CONFIG_LABEL])],
                    [train])
    core.refuse["train"] = 100
    wait = FakeCluster(**{"pods:gpu-c": [train]})
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True,
                   "drain": True, "drain_timeout": 12}, core, wait)
    assert result["failed"] is True
    assert result["msg"].startswith("host gpu-c: drain did not finish within 12s; still there: pod default/train "
                                    "using nvidia.com/gpu (eviction refused: 429 Too Many Requests)")
    assert core.labels("gpu-c")[om.WORKLOAD_CONFIG_LABEL] == "container"
    assert [name for name, _body in core.patches] == ["gpu-c"]  # the cordon only
    assert core.nodes["gpu-c"]["spec"] == {"unschedulable": True}
    assert wait.clock.now() == pytest.approx(12)


def test_drain_rides_through_a_lost_watch(call):
    train = pod("train", "gpu-c", GPU)
    core = FakeCore([node("gpu-c")], [train])
    wait = FakeCluster(**{"pods:gpu-c": [train]})
    wait.script("pods:gpu-c", [("ERROR", 410)], [("drop", 0)], [("DELETED", train)])
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True,
                   "drain": True}, core, wait)
    assert result["changed"] is True
    assert core.labels("gpu-c")[om.WORKLOAD_CONFIG_LABEL] == "vm-passthrough"
    # The first list, one re-list after the 410, one after the dropped watch, and the fresh
    # list that confirms the drained node before the wait says so (docs/waits.md).
    assert wait.count("list") == 4


def test_drain_in_check_mode_touches_nothing(call):
    core = FakeCore([node("gpu-c")], [pod("train", "gpu-c", GPU)])
    before = copy.deepcopy(core.nodes)
    result = call({"nodes": [spec("gpu-c", workload_config="vm-passthrough")], "sandbox_workloads_enabled": True,
                   "drain": True}, core, check=True)
    assert result["changed"] is True
    assert result["nodes"][0]["drain"] == {"cordoned": True, "evicted": ["train"], "remaining": []}
    assert core.patches == [] and core.evictions == [] and core.nodes == before
