"""The wait modules (operand_readiness, gpu_allocatable_wait, cuda_sample, helmchart_wait)
against the lab, run as Ansible runs them: on the clean fleet, on the "device plugin
without toolkit" node, across a kube-apiserver restart in the middle of a wait, with a
node that joins while a wait runs, and with CUDA samples that fail."""

import pytest
from kubernetes import client

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from tests.integration.kube import wait_for
from tests.integration.modules import finish_module, run_module, start_module
from tests.lab.lab import LabError

NS = om.DEFAULT_NAMESPACE
GPU = om.CONTAINER_RESOURCE
BROKEN = "gpu-container-2"
TAINTED = "gpu-tainted-1"
CONTAINER_NODES = ["gpu-container-1", "gpu-container-2", "gpu-spark-1"]
# nvidia.com/gpu per container node: 2 x A10, and the DGX Spark's one GB10 (arm64).
GPUS = {"gpu-container-1": 2, "gpu-container-2": 2, "gpu-spark-1": 1}
# What each module watches: it holds one API server connection per kind while it waits.
WATCHED_KINDS = {"gpu_allocatable_wait": 4, "operand_readiness": 5}


def _operand_pods_on(objects, node, operand_name):
    key, value = om.operand(operand_name).pod_selector
    return [p for p in objects.values() if p.spec.node_name == node and (p.metadata.labels or {}).get(key) == value]


def _not_ready(pod):
    return not any(s.ready for s in (pod.status.container_statuses or ()))


def _wait_operand_not_ready(lab, node, operand_name):
    wait_for(lab.core().list_namespaced_pod, lambda o: any(
        _not_ready(p) for p in _operand_pods_on(o, node, operand_name)), namespace=NS)


def _wait_allocatable(lab, node, predicate):
    wait_for(lab.core().list_node, lambda o: node in o and predicate(
        rd.count(o[node].status.allocatable, GPU)))


def _start_waiting(lab, name, args):
    """Starts a module whose condition is false and returns once it is in its watch
    phase (its first lists done, one watch per kind open)."""
    proc = start_module(name, args, lab.kubeconfig)
    try:
        lab.wait_api_connections(proc.pid, WATCHED_KINDS[name])
    except LabError as exc:
        pytest.fail("%s: %s" % (exc, finish_module(proc)))
    return proc


def _sample_pods(lab):
    selector = "%s=%s" % (rd.SAMPLE_LABEL_MANAGED_BY, rd.MANAGED_BY)
    pods = lab.core().list_namespaced_pod("default", label_selector=selector).items
    return sorted(p.metadata.name for p in pods)


def _operands_ready_on(objects, nodes):
    pods = [p for p in objects.values() if p.spec.node_name in nodes and om.operand_of_pod(p.metadata.labels)]
    return bool(pods) and not any(_not_ready(p) for p in pods)


@pytest.fixture
def clean_fleet(gpu_lab):
    """gpu_lab once the container nodes' operands are Ready again and their GPUs advertised:
    the simulator may still be releasing what the previous test held down."""
    wait_for(gpu_lab.core().list_namespaced_pod, lambda o: _operands_ready_on(o, CONTAINER_NODES), namespace=NS)
    for name in CONTAINER_NODES:
        _wait_allocatable(gpu_lab, name, lambda gpus, want=GPUS[name]: gpus == want)
    return gpu_lab


@pytest.fixture
def no_toolkit(clean_fleet):
    """gpu-container-2 with its toolkit held down under a running device plugin: it still
    advertises its GPUs, but no container can use them."""
    clean_fleet.hold_down(BROKEN, "container-toolkit")
    _wait_operand_not_ready(clean_fleet, BROKEN, "container-toolkit")
    _wait_allocatable(clean_fleet, BROKEN, lambda gpus: gpus == 2)
    return clean_fleet


# ---------------------------------------------------------------- the clean fleet

def test_operand_readiness_succeeds_on_the_clean_fleet(gpu_lab):
    result = run_module("operand_readiness", {"require_reconciled": True, "timeout": 120}, gpu_lab.kubeconfig)
    assert not result.get("failed"), result.get("msg")
    assert [(s["step"], s["done"]) for s in result["steps"]] == [
        (rd.STEP_OPERATOR, True), (rd.STEP_CLUSTER_POLICY, True), (rd.STEP_OPERANDS, True)]
    assert result["steps"][1]["message"] == "ClusterPolicy %s Ready (Reconciled)" % om.CLUSTER_POLICY_NAME
    fleet = gpu_lab.fleet()
    operand_nodes = sorted(n for n, v in fleet.items() if v.get("gpu_workload_config") and n != TAINTED)
    assert sorted(result["nodes"]) == operand_nodes
    for name, info in result["nodes"].items():
        config = fleet[name]["gpu_workload_config"]
        assert info["workload_config"] == config
        assert info["ready"] and info["ready_operands"] == info["chain"], (name, info)
        # The node's chain in the model's order, up to the device plugin that makes its GPUs allocatable.
        assert info["chain"] == [o for o in om.chain_for_workload(config) if o in info["chain"]]
        assert om.RESOURCE_PLUGIN[config] in info["chain"]
        assert info["ready_after"] is not None
    assert [s["node"] for s in result["skipped_nodes"]] == [TAINTED]


def test_gpu_allocatable_wait_succeeds_on_the_clean_fleet_and_names_the_tainted_node(gpu_lab):
    result = run_module("gpu_allocatable_wait", {"timeout": 120}, gpu_lab.kubeconfig)
    assert not result.get("failed"), result.get("msg")
    assert result["ready_nodes"] == CONTAINER_NODES
    assert result["nodes"] == dict((n, {"allocatable": GPUS[n], "capacity": GPUS[n], "ready": True})
                                   for n in CONTAINER_NODES)
    tainted = [s for s in result["skipped_nodes"] if s["node"] == TAINTED]
    assert tainted == [{"node": TAINTED, "reason": "taint dedicated=training:NoSchedule is not tolerated by the "
                                                   "operand DaemonSets"}]


def test_cuda_sample_passes_on_each_container_node_and_deletes_its_pods(clean_fleet):
    result = run_module("cuda_sample", {"per_node": True, "timeout": 120}, clean_fleet.kubeconfig)
    assert not result.get("failed"), result.get("msg")
    assert sorted(p["node"] for p in result["pods"]) == CONTAINER_NODES
    for pod in result["pods"]:
        assert pod["phase"] == "Succeeded" and pod["passed"], pod
        assert "Test PASSED" in pod["log_tail"]
    assert result["changed"] is False
    assert not set(p["name"] for p in result["pods"]) & set(_sample_pods(clean_fleet))


def test_helmchart_wait_succeeds_on_the_installed_operator(gpu_lab):
    result = run_module("helmchart_wait", {"name": "gpu-operator", "timeout": 120}, gpu_lab.kubeconfig)
    assert not result.get("failed"), result.get("msg")
    assert result["job"] == "helm-install-gpu-operator"
    assert result["message"] == "Job helm-install-gpu-operator complete"


# ---------------------------------------------------------------- device plugin without toolkit

def test_operand_readiness_names_the_node_and_the_runtime_layer(no_toolkit):
    result = run_module("operand_readiness", {"timeout": 5}, no_toolkit.kubeconfig)
    assert result["failed"]
    assert result["step"] == rd.STEP_OPERANDS
    assert "%s at container-toolkit (%s): CrashLoopBackOff" % (BROKEN, om.LAYER_RUNTIME) in result["msg"]
    assert [n for n, info in result["nodes"].items() if not info["ready"]] == [BROKEN]
    diagnosis = result["diagnosis"][BROKEN]
    assert (diagnosis["layer"], diagnosis["operand"], diagnosis["reason"]) == (
        om.LAYER_RUNTIME, "container-toolkit", "CrashLoopBackOff")


def test_gpu_allocatable_wait_does_not_count_the_gpus_advertised_over_a_broken_toolkit(no_toolkit):
    result = run_module("gpu_allocatable_wait", {"timeout": 5}, no_toolkit.kubeconfig)
    assert result["failed"]
    # Advertised, yet not counted.
    assert result["nodes"][BROKEN] == {"allocatable": 2, "capacity": 2, "ready": False}
    assert result["ready_nodes"] == [n for n in CONTAINER_NODES if n != BROKEN]
    assert result["msg"].endswith("%s: %s (container-toolkit): CrashLoopBackOff" % (BROKEN, om.LAYER_RUNTIME))
    assert list(result["diagnosis"]) == [BROKEN]
    assert result["diagnosis"][BROKEN]["layer"] == om.LAYER_RUNTIME


def test_cuda_sample_fails_on_the_node_without_toolkit_naming_the_runtime_layer(no_toolkit):
    result = run_module("cuda_sample", {"per_node": True, "timeout": 120}, no_toolkit.kubeconfig)
    assert result["failed"]
    by_node = dict((p["node"], p) for p in result["pods"])
    assert by_node["gpu-container-1"]["passed"] and by_node["gpu-spark-1"]["passed"]
    assert not by_node[BROKEN]["passed"] and by_node[BROKEN]["phase"] == "Failed"
    assert result["msg"].startswith("1 of %d CUDA sample pods failed: cuda-vectoradd-%s on %s: " % (
        len(CONTAINER_NODES), BROKEN, BROKEN))
    assert result["msg"].endswith("Nodes: %s: %s (container-toolkit): CrashLoopBackOff" % (BROKEN, om.LAYER_RUNTIME))
    assert list(result["diagnosis"]) == [BROKEN]
    assert _sample_pods(no_toolkit) == []


# ---------------------------------------------------------------- kube-apiserver restart mid-wait

@pytest.mark.parametrize("module, args", [
    ("gpu_allocatable_wait", {"timeout": 300}),
    ("operand_readiness", {"require_reconciled": True, "timeout": 300}),
])
def test_a_wait_rides_through_an_api_server_restart(clean_fleet, module, args):
    clean_fleet.hold_down(BROKEN, "*")
    _wait_allocatable(clean_fleet, BROKEN, lambda gpus: gpus == 0)
    proc = _start_waiting(clean_fleet, module, args)
    clean_fleet.restart_apiserver(down_seconds=2.0)
    # The outage ended nothing: the module is still waiting, on a fresh list and new watches.
    assert proc.poll() is None, finish_module(proc)
    clean_fleet.wait_api_connections(proc.pid, WATCHED_KINDS[module])
    assert proc.poll() is None, finish_module(proc)
    clean_fleet.release(BROKEN)
    result = finish_module(proc)
    assert not result.get("failed"), result.get("msg")
    assert BROKEN in (result["ready_nodes"] if module == "gpu_allocatable_wait" else
                      [n for n, info in result["nodes"].items() if info["ready"]])
    kinds = WATCHED_KINDS[module]
    # One list and one watch per kind had the API server stayed up; the restart costs a
    # re-list and a new watch of each.
    assert result["api_requests"]["list"] >= 2 * kinds, result["api_requests"]
    assert result["api_requests"]["watch"] >= 2 * kinds, result["api_requests"]


# ---------------------------------------------------------------- a node joins mid-wait

@pytest.mark.parametrize("selection", ["min_nodes", "names"])
def test_gpu_allocatable_wait_sees_a_node_that_joins_while_it_waits(clean_fleet, selection):
    joining = "gpu-join-" + selection.replace("_", "-")
    args = {"timeout": 300}
    if selection == "names":
        args["names"] = [joining]
    else:
        args["min_nodes"] = len(CONTAINER_NODES) + 1
    proc = _start_waiting(clean_fleet, "gpu_allocatable_wait", args)
    assert proc.poll() is None, finish_module(proc)
    clean_fleet.add_node(joining, workload_config="container", gpus=2)
    result = finish_module(proc)
    assert not result.get("failed"), result.get("msg")
    assert joining in result["ready_nodes"]
    assert result["nodes"][joining] == {"allocatable": 2, "capacity": 2, "ready": True}
    # The node's arrival came over the open watches, not by asking again: the first list
    # of each kind and the one that confirms the success.
    assert result["api_requests"]["list"] == 2 * WATCHED_KINDS["gpu_allocatable_wait"]


# ---------------------------------------------------------------- a wanted node drops out mid-wait

@pytest.mark.parametrize("how, why", [
    ("deleted", "selected earlier in this wait, is gone from the cluster"),
    ("pruned", "selected earlier in this wait, is no longer a GPU node (no NFD PCI label of vendor 10de: NFD pruned "
               "its labels)"),
])
def test_gpu_allocatable_wait_does_not_forget_a_node_that_drops_out_while_it_waits(clean_fleet, how, why):
    """Issue 36 item 1: a GPU node the wait selected, deleted (to be re-created) or with its NFD
    labels pruned for a moment, drops out of the default selection; the wait must not then
    succeed on the others without a word. It stays wanted, and the wait fails naming it."""
    dropping = "gpu-drop-" + how
    # Joined, its operands held from Ready: it advertises no GPU yet, so the wait waits for it.
    clean_fleet.add_node(dropping, workload_config="container", gpus=2, hold=True)
    wait_for(clean_fleet.core().list_node, lambda o: dropping in o and om.is_gpu_node(o[dropping].metadata.labels))
    proc = _start_waiting(clean_fleet, "gpu_allocatable_wait", {"timeout": 20})
    assert proc.poll() is None, finish_module(proc)
    if how == "deleted":
        clean_fleet.delete_node(dropping)
    else:
        clean_fleet.core().patch_node(dropping, {"metadata": {"labels": dict((k, None) for k in om.NFD_GPU_LABELS)}})
    result = finish_module(proc)
    assert result.get("failed"), result
    assert result["lost_nodes"] == {dropping: why}, result["lost_nodes"]
    assert "%s %s" % (dropping, why) in result["msg"], result["msg"]
    # The nodes that were ready all along are still said to be.
    assert set(CONTAINER_NODES) <= set(result["ready_nodes"]), result["ready_nodes"]


# ---------------------------------------------------------------- CUDA sample failures

def test_cuda_sample_fails_clearly_on_the_node_whose_sample_fails(clean_fleet):
    clean_fleet.fail_cuda_sample("gpu-container-1")
    result = run_module("cuda_sample", {"per_node": True, "timeout": 120}, clean_fleet.kubeconfig)
    assert result["failed"]
    by_node = dict((p["node"], p) for p in result["pods"])
    failed = by_node["gpu-container-1"]
    assert (failed["phase"], failed["passed"]) == ("Failed", False)
    assert any("no CUDA-capable device is detected" in line for line in failed["log_tail"])
    assert by_node["gpu-container-2"]["passed"] and by_node["gpu-spark-1"]["passed"]
    assert result["msg"].startswith("1 of %d CUDA sample pods failed: cuda-vectoradd-gpu-container-1 on "
                                    "gpu-container-1: Error, exit code 1" % len(CONTAINER_NODES))
    assert "no CUDA-capable device is detected" in result["msg"]
    assert _sample_pods(clean_fleet) == []


def test_cuda_sample_reports_the_schedulers_reason_when_no_node_advertises_the_resource(gpu_lab):
    resource = "nvidia.com/H100_SXM5_80GB"
    result = run_module("cuda_sample", {"resource": resource, "timeout": 10}, gpu_lab.kubeconfig)
    assert result["failed"]
    [pod] = result["pods"]
    assert pod["node"] is None and pod["phase"] == "Pending"
    assert "0/%d nodes are available" % len(gpu_lab.fleet()) in result["msg"]
    assert "Insufficient %s" % resource in result["msg"]
    assert _sample_pods(gpu_lab) == []
    with pytest.raises(client.ApiException) as gone:
        gpu_lab.core().read_namespaced_pod(pod["name"], "default")
    assert gone.value.status == 404
