"""What the API leaves out of objects nothing has filled in yet (issue 19), produced by the
lab's real kube-apiserver: each object is created directly through the API and read back
as the API returns it, without a kubelet, kwok or a controller having touched it. The
node is not kwok's (kwok manages only the fleet's annotated nodes), its pod is bound to it
and so never started, and the DaemonSet, Deployment, HelmChart and Job are taken as the
create call returned them, before their controllers write a status.

Each is read by k8s_objects without a refusal and by the checks and the waits with the
API's defaults: a node without allocatable or conditions, a pod without containerStatuses,
a DaemonSet without observedGeneration, a Deployment, a HelmChart and a suspended Job
without status. Then gpu-node-check checks the node over the live API, node_ready_wait
waits for it, and gpu_node_labels plans its labels, reading the pod bound to it."""

import json
import os
import subprocess
import sys

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check as nc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_labels as nl
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from tests.integration.modules import ROOT, run_module

NS = "bad-input-19"
# The API server's TaintNodesByCondition admission gives a node it creates this taint; the
# DaemonSet controller's own tolerations do not cover it, so no operand pod lands yet.
NOT_READY = "node.kubernetes.io/not-ready:NoSchedule"
NODE = "bad-input-gpu-1"
CLI = os.path.join(ROOT, "scripts", "gpu-node-check")
DRIVER = om.operand("driver")


def _raw(response):
    """The object as the API's JSON, the way the modules read it (no client models)."""
    return json.loads(response.data)


@pytest.fixture(scope="module")
def fresh(lab):
    api = lab.api_client()
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": NS}})
    labels = {om.NFD_GPU_LABELS[0]: "true", om.GPU_PRESENT_LABEL: "true"}
    labels.update(om.deploy_labels_for(om.CONTAINER, labels, om.policy()))
    key, value = DRIVER.pod_selector
    template = {"metadata": {"labels": {key: value}}, "spec": {"containers": [{"name": "main", "image": "x"}]}}
    try:
        objects = {
            "Node": _raw(core.create_node({"metadata": {"name": NODE, "labels": labels}}, _preload_content=False)),
            "Pod": _raw(core.create_namespaced_pod(NS, {
                "metadata": {"name": "nvidia-driver-daemonset-x1", "labels": {key: value}},
                "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "x"}]}}, _preload_content=False)),
            "DaemonSet": _raw(apps.create_namespaced_daemon_set(NS, {
                "metadata": {"name": DRIVER.daemonset},
                "spec": {"selector": {"matchLabels": {key: value}}, "template": dict(template, spec=dict(
                    template["spec"], nodeSelector={"lab.gpuplatform.invalid/none": "x"},
                    tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]))}},
                _preload_content=False)),
            "Deployment": _raw(apps.create_namespaced_deployment(NS, {
                "metadata": {"name": om.OPERATOR_DEPLOYMENT},
                "spec": {"replicas": 0, "selector": {"matchLabels": {key: value}}, "template": template}},
                _preload_content=False)),
            "HelmChart": custom.create_namespaced_custom_object("helm.cattle.io", "v1", NS, "helmcharts", {
                "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart", "metadata": {"name": "bad-input"},
                "spec": {"chart": "bad-input", "repo": "http://127.0.0.1:1/"}}),
            "Job": _raw(batch.create_namespaced_job(NS, {
                "metadata": {"name": "bad-input-suspended"},
                "spec": {"suspend": True, "template": dict(template, spec=dict(template["spec"],
                                                                               restartPolicy="Never"))}},
                _preload_content=False)),
        }
        yield objects
    finally:
        for call, args in ((core.delete_namespace, (NS,)), (core.delete_node, (NODE,))):
            try:
                call(*args)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def test_every_fresh_object_reads_without_a_refusal(fresh):
    for kind, obj in fresh.items():
        assert ko.read(kind, obj) is obj, kind


def test_a_node_that_just_registered_has_no_allocatable_and_no_ready_condition(fresh):
    node = fresh["Node"]
    assert "allocatable" not in node.get("status", {}) and "conditions" not in node.get("status", {})
    assert rd.node_ready(node) == (False, "no Ready condition yet")
    assert rd.sample_nodes([node], om.CONTAINER_RESOURCE, 1) == ([], [])
    report = nc.evaluate([node], [], nc.policy_from_inputs([], {"namespace": NS}))["nodes"][NODE]
    assert report["gpu_node"] and report["advertised"] == {} and report["capacity"] == {}
    assert report["untolerated_taints"] == [NOT_READY]
    assert report["not_running"]["driver"] == "no pod: taint %s not tolerated" % NOT_READY


def test_a_pod_just_bound_has_no_container_statuses(fresh):
    pod = fresh["Pod"]
    assert "containerStatuses" not in pod.get("status", {})
    assert nc.pod_status_reason(pod) == "Pending" and not nc.is_running(pod)
    assert rd.sample_state(pod) == (False, "Pending")
    report = nc.evaluate([fresh["Node"]], [pod], nc.policy_from_inputs([], {"namespace": NS}))["nodes"][NODE]
    assert report["not_running"]["driver"] == "Pending"


def test_a_daemonset_its_controller_has_not_seen_has_no_observed_generation(fresh):
    daemonset = fresh["DaemonSet"]
    assert "observedGeneration" not in daemonset.get("status", {})
    policy = nc.policy_from_inputs([], {}, [daemonset])
    assert policy["namespace"] == NS  # the one namespace holding operand DaemonSets
    # Its template's toleration of the not-ready taint is read: the driver is not kept off.
    report = nc.evaluate([fresh["Node"]], [], policy, [daemonset])["nodes"][NODE]
    assert report["not_running"]["driver"] == "no pod"
    assert report["not_running"]["container-toolkit"] == "no pod: taint %s not tolerated" % NOT_READY


def test_a_deployment_just_created_has_no_status(fresh):
    deployment = fresh["Deployment"]
    assert not deployment.get("status")
    assert rd.deployment_available(deployment) == (False, "rollout of generation 1 not observed yet")


def test_a_helmchart_and_a_suspended_job_have_no_status(fresh):
    chart, job = fresh["HelmChart"], fresh["Job"]
    assert not chart.get("status") and not job.get("status")
    done, detail = rd.helmchart_condition("bad-input", NS)({"helmcharts": {NS + "/bad-input": chart}, "jobs": {}})
    assert not done and detail["message"] == "helm-controller has not taken up the HelmChart yet (no status.jobName)"
    chart = dict(chart, status={"jobName": job["metadata"]["name"]})
    done, detail = rd.helmchart_condition("bad-input", NS)({
        "helmcharts": {NS + "/bad-input": chart}, "jobs": {NS + "/" + job["metadata"]["name"]: job}, "pods": {}})
    # helm-controller creates each install Job suspended: one is never done, whatever its pods say.
    assert not done and detail["message"] == ("Job bad-input-suspended is suspended: helm-controller has not started "
                                              "it, or is replacing it")


def test_the_live_check_reads_the_fresh_node_and_pod(fresh, lab_env):
    proc = subprocess.run([sys.executable, CLI, "--kubeconfig", lab_env["KUBECONFIG"], "--namespace", NS,
                           "--node", NODE, "--json", "--no-fail"], capture_output=True, text=True, env=lab_env,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)["nodes"][NODE]
    # Pending as created; Terminating once the node lifecycle controller evicts it from a node
    # no kubelet answers for (a kubelet would confirm the deletion; none does here). The operator
    # (offline: the simulator) may have taken its labels off first, the node having no NFD PCI
    # labels: then the check names the missing deploy label instead. Which comes first is a race.
    state = report["not_running"]["driver"]
    assert state in ("Pending", "Terminating") or state.startswith(
        "nvidia.com/gpu.deploy.driver is absent: the operator has not labelled this GPU node yet"), state
    assert report["advertised"] == {}


def test_the_node_wait_reads_a_node_no_kubelet_runs(fresh, lab_env):
    # As created: no status.conditions, and a status.nodeInfo of empty strings (a struct, not
    # a pointer, in the API: no kubelet has posted its versions).
    node = fresh["Node"]
    assert "conditions" not in node["status"] and node["status"]["nodeInfo"]["kubeletVersion"] == ""
    assert rke2.nodes_ready([node], [NODE, "bad-input-gone"], "v1.34.1+rke2r1") == (False, {
        NODE: {"ready": False, "state": "no Ready condition yet"},
        "bad-input-gone": {"ready": False, "state": "not registered"}})
    result = run_module("node_ready_wait", {"names": [NODE], "timeout": 5}, lab_env["KUBECONFIG"])
    assert result["failed"] and result["msg"].startswith("nodes not ready after 5s"), result
    # Unknown once the node lifecycle controller has marked a node no kubelet ever updated.
    state = result["nodes"][NODE]["state"]
    assert state == "no Ready condition yet" or state.startswith("Ready=Unknown (NodeStatusNeverUpdated"), state


def test_the_labels_read_a_fresh_node_and_the_pod_bound_to_it(fresh, lab_env):
    # As created: no annotations (no ownership record) and no spec.unschedulable (false is omitted).
    node, pod = fresh["Node"], fresh["Pod"]
    assert "annotations" not in node["metadata"] and "unschedulable" not in node.get("spec", {})
    plan = nl.plan_labels(node, {om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"})
    assert plan["owned_before"] == [] and plan["refusals"] == [] and nl.cordon_patch(node, ("container", "x"))
    assert nl.gpu_workloads([pod]) == [] and nl.remaining_workloads([], [pod]) == []
    result = run_module("gpu_node_labels", {
        "nodes": [{"name": NODE, "workload_config": "vm-passthrough"}], "step": "plan",
        "sandbox_workloads_enabled": True}, lab_env["KUBECONFIG"])
    assert not result.get("failed"), result.get("msg")
    (report,) = result["nodes"]
    assert report["changes"] == [{"key": om.WORKLOAD_CONFIG_LABEL, "before": None, "after": "vm-passthrough",
                                  "action": "set"}]
    # The switch to vm-passthrough reads the pods on the node: the bound one asks for no GPU.
    assert report["workload_switch"] == {"from": om.CONTAINER, "to": "vm-passthrough"} and report["gpu_workloads"] == []
