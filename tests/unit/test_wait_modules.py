"""The wait modules end to end on the scripted fake cluster: arguments in, JSON out, with
the cluster's events, outages and failures scripted in simulated time."""
import copy
import json
import os
import signal
import threading

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from ansible_collections.gpuplatform.rke2.plugins.modules import (
    cuda_sample, gpu_allocatable_wait, helmchart_wait, operand_readiness)
from tests.unit.k8s_fake import FakeCluster
from tests.unit.wait_builders import (
    CONTAINER_CHAIN, TRAINING_TAINT, chain_pods, clusterpolicy, daemonset, deployment, gpu_node, helmchart, job, job_pod,
    node, operand_pod, operator_pod)

PASSED_LOG = ("[Vector addition of 50000 elements]\nCopy input data from the host memory to the CUDA device\n"
              "CUDA kernel launch with 196 blocks of 256 threads\nTest PASSED\nDone\n")
FAILED_LOG = "[Vector addition of 50000 elements]\nFailed to allocate device vector A (error code no CUDA-capable device)!\n"


@pytest.fixture
def run(monkeypatch, capsys):
    """Run a module's main() against a fake cluster: (rc, result, connect calls)."""

    def runner(module, cluster, check_mode=False, **args):
        connects = []

        def connect(params):
            connects.append(params)
            return cluster

        monkeypatch.setattr(k8s_wait, "connect", connect)
        with patch_module_args(dict(args, _ansible_check_mode=check_mode)):
            with pytest.raises(SystemExit) as info:
                module.main()
        return info.value.code, json.loads(capsys.readouterr().out), connects

    return runner


def healthy_fleet():
    """The lab's container nodes: two healthy, one tainted against the operands, a CPU node."""
    nodes = [gpu_node("gpu-container-1"), gpu_node("gpu-container-2"),
             gpu_node("gpu-tainted-1", gpus=0, taints=[TRAINING_TAINT]), node("cpu-1", gpu=False)]
    pods = chain_pods("gpu-container-1") + chain_pods("gpu-container-2")
    return nodes, pods


# ---------------------------------------------------------------- gpu_allocatable_wait

def test_allocatable_holds_on_the_first_list(run):
    nodes, pods = healthy_fleet()
    rc, result, _connects = run(gpu_allocatable_wait, FakeCluster(nodes=nodes, pods=pods))
    assert rc == 0 and result["changed"] is False
    assert result["nodes"] == {"gpu-container-1": {"allocatable": 2, "capacity": 2, "ready": True},
                               "gpu-container-2": {"allocatable": 2, "capacity": 2, "ready": True}}
    assert result["ready_nodes"] == ["gpu-container-1", "gpu-container-2"]
    assert [s["node"] for s in result["skipped_nodes"]] == ["gpu-tainted-1"]
    assert [w["event"]["msg"] for w in result["warnings"]] == [
        "GPU node gpu-tainted-1 is not waited for: taint dedicated=training:NoSchedule is not tolerated by the operand "
        "DaemonSets"]
    # Nodes; the ClusterPolicy and the operand DaemonSets that decide the selection; the operand pods that say
    # whether each node's runtime chain works.
    assert result["api_requests"] == {"list": 4, "watch": 0, "total": 4}
    assert result["elapsed"] == 0


def test_the_connect_counts_in_the_one_deadline(run, monkeypatch):
    # Loading the kubeconfig took 2.5 s of the module's 3 (real time, k8s_wait.start_clock): the wait has the rest.
    real = iter([100.0, 102.5])
    monkeypatch.setattr(k8s_wait, "start_clock", lambda: next(real))
    nodes, pods = healthy_fleet()
    rc, result, _connects = run(gpu_allocatable_wait, FakeCluster(nodes=nodes, pods=pods), timeout=3)
    assert rc == 0 and result["elapsed"] == 2.5


def test_allocatable_waits_for_a_tainted_node_whose_taint_the_operands_tolerate(run):
    nodes, pods = healthy_fleet()
    tolerating = [daemonset(o, [dict(TRAINING_TAINT, operator="Equal")]) for o in CONTAINER_CHAIN]
    rc, result, _connects = run(gpu_allocatable_wait, FakeCluster(nodes=nodes, pods=pods, daemonsets=tolerating),
                                timeout=60)
    assert rc == 1 and result["skipped_nodes"] == []
    assert result["msg"].endswith("gpu-tainted-1: driver (driver): no pod")


def test_allocatable_waits_for_a_node_that_joins_mid_wait(run):
    cluster = FakeCluster(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2", gpus=0)])
    cluster.script("nodes", [("advance", 5), ("ADDED", gpu_node("gpu-3", gpus=0)), ("advance", 5),
                             ("MODIFIED", gpu_node("gpu-2")), ("advance", 5), ("MODIFIED", gpu_node("gpu-3"))])
    rc, result, _connects = run(gpu_allocatable_wait, cluster, timeout=600)
    assert rc == 0
    assert result["elapsed"] == 15
    assert result["ready_nodes"] == ["gpu-1", "gpu-2", "gpu-3"]
    # The first lists, the watches, and the lists that confirm the success.
    assert result["api_requests"] == {"list": 8, "watch": 4, "total": 12}


def test_allocatable_rides_through_an_api_server_restart(run):
    cluster = FakeCluster(nodes=[gpu_node("gpu-1", gpus=0)])
    cluster.script("nodes", [("advance", 3), ("silent", "MODIFIED", gpu_node("gpu-1")), ("drop", 0)])
    cluster.fail_list("nodes", None, k8s_wait.ApiError(0, "connection refused"),
                      k8s_wait.ApiError(503, "the server is currently unable to handle the request"))
    rc, result, _connects = run(gpu_allocatable_wait, cluster)
    assert rc == 0 and result["ready_nodes"] == ["gpu-1"]
    assert result["elapsed"] == 3 + 0.5 + 1 + 2


def test_allocatable_timeout_names_each_nodes_broken_layer(run):
    nodes = [gpu_node("gpu-container-1"), gpu_node("gpu-container-2", gpus=0), gpu_node("gpu-container-3", gpus=0)]
    pods = (chain_pods("gpu-container-1")
            + chain_pods("gpu-container-2", container_toolkit={"ready": False, "waiting": "CrashLoopBackOff"})
            + chain_pods("gpu-container-3", [o for o in CONTAINER_CHAIN if o != "device-plugin"])
            + [operand_pod("device-plugin", "gpu-container-3", waiting="ImagePullBackOff")])
    rc, result, _connects = run(gpu_allocatable_wait, FakeCluster(nodes=nodes, pods=pods), timeout=120)
    assert rc == 1
    assert result["msg"] == (
        "timed out after 120s waiting for nvidia.com/gpu: 1 of 3 wanted nodes have 1 nvidia.com/gpu allocatable. "
        "gpu-container-2: container-runtime (container-toolkit): CrashLoopBackOff; "
        "gpu-container-3: device-plugin (device-plugin): ImagePullBackOff")
    assert result["diagnosis"]["gpu-container-2"]["layer"] == om.LAYER_RUNTIME
    assert [f["layer"] for f in result["diagnosis"]["gpu-container-3"]["layer_failures"]] == [
        om.LAYER_DEVICE_PLUGIN, om.LAYER_ALLOCATABLE]
    # One list and one watch of each of the four kinds, then the failing wait's last look:
    # one more list of each (k8s_wait._last_look), so the message describes fresh data.
    assert result["elapsed"] == 120 and result["api_requests"] == {"list": 8, "watch": 4, "total": 12}


def test_allocatable_does_not_count_gpus_advertised_over_a_broken_toolkit(run):
    nodes, pods = healthy_fleet()
    pods = chain_pods("gpu-container-1") + chain_pods(
        "gpu-container-2", container_toolkit={"ready": False, "waiting": "CrashLoopBackOff"})
    cluster = FakeCluster(nodes=nodes, pods=pods, clusterpolicies=[clusterpolicy()])
    rc, result, _connects = run(gpu_allocatable_wait, cluster, timeout=60)
    assert rc == 1
    assert result["msg"] == (
        "timed out after 60s waiting for nvidia.com/gpu: 1 of 2 wanted nodes have 1 nvidia.com/gpu allocatable. "
        "gpu-container-2: container-runtime (container-toolkit): CrashLoopBackOff")
    assert result["nodes"]["gpu-container-2"] == {"allocatable": 2, "capacity": 2, "ready": False}
    assert result["ready_nodes"] == ["gpu-container-1"]


def test_allocatable_timeout_while_the_api_server_is_away_says_so(run):
    refused = k8s_wait.ApiError(0, "connection refused")
    cluster = FakeCluster(nodes=[gpu_node("gpu-1", gpus=0)])
    cluster.script("nodes", [("advance", 1), ("drop", 0)])
    cluster.fail_list("nodes", None, *([refused] * 50))
    cluster.fail_list("pods", *([refused] * 50))
    rc, result, _connects = run(gpu_allocatable_wait, cluster, timeout=30)
    assert rc == 1
    assert result["msg"] == (
        "timed out after 30s waiting for nvidia.com/gpu: 0 of 1 wanted nodes have 1 nvidia.com/gpu allocatable "
        "(the API server was unreachable at the end; last known state); no diagnosis: listing operand pods failed: "
        "connection refused")
    assert result["nodes"] == {"gpu-1": {"allocatable": 0, "capacity": 0, "ready": False}}


def test_allocatable_timeout_with_no_gpu_node_says_so(run):
    rc, result, _connects = run(gpu_allocatable_wait, FakeCluster(nodes=[node("cpu-1", gpu=False)]), timeout=30)
    assert rc == 1 and result["msg"] == "timed out after 30s waiting for nvidia.com/gpu: no node selected for nvidia.com/gpu"
    rc, result, _connects = run(gpu_allocatable_wait, FakeCluster(nodes=[node("cpu-1", gpu=False)]), allow_no_nodes=True)
    assert rc == 0 and result["nodes"] == {}


@pytest.mark.parametrize("args, message", [
    ({"resource": "gpu"}, "resource: 'gpu' is not an extended resource name"),
    ({"resource": "example.com/fpga"}, "resource: example.com/fpga is not a GPU Operator resource"),
    ({"min_per_node": 0}, "min_per_node must be 1 or more, got 0"),
    ({"min_nodes": -1}, "min_nodes must be 0 or more, got -1"),
    ({"timeout": -5}, "timeout must be zero or more seconds, got -5"),
    ({"names": ["gpu-1", ""]}, "names: node names must not be empty"),
])
def test_allocatable_rejects_bad_input_before_connecting(run, args, message):
    rc, result, connects = run(gpu_allocatable_wait, FakeCluster(), **args)
    assert rc == 1 and result["msg"].startswith(message) and connects == []


def test_allocatable_watches_what_the_options_select():
    def params(**kwargs):
        base = dict(resource=om.CONTAINER_RESOURCE, label_selector=None, names=None, operator_namespace="gpu-ops")
        base.update(kwargs)
        return base

    default = gpu_allocatable_wait.resources(params())
    assert [(r.key, r.optional) for r in default] == [("nodes", False), ("clusterpolicies", True),
                                                      ("daemonsets", False), ("pods", False)]
    assert (default[1].api_version, default[1].plural) == ("nvidia.com/v1", "clusterpolicies")
    assert (default[2].api_version, default[2].namespace) == ("apps/v1", "gpu-ops")
    assert (default[3].api_version, default[3].namespace) == ("v1", "gpu-ops")
    # Named nodes of a GPU Operator resource: their runtime chain decides too.
    one = gpu_allocatable_wait.resources(params(names=["gpu-1"]))
    assert [r.key for r in one] == ["nodes", "clusterpolicies", "daemonsets", "pods"]
    assert one[0].field_selector == "metadata.name=gpu-1"
    # Any other extended resource: the nodes alone.
    fpga = gpu_allocatable_wait.resources(params(resource="example.com/fpga", label_selector="fpga=true"))
    assert [r.key for r in fpga] == ["nodes"]
    selected = gpu_allocatable_wait.resources(params(label_selector="site=tirosh", names=["a", "b"]))
    assert selected[0].label_selector == "site=tirosh" and selected[0].field_selector is None
    rc_params = params(resource="example.com/fpga", label_selector="fpga=true", min_per_node=1, min_nodes=None,
                       timeout=1)
    assert gpu_allocatable_wait.check_params(rc_params) is None


# ---------------------------------------------------------------- operand_readiness

def test_operand_readiness_succeeds_at_once_on_a_ready_cluster(run):
    nodes, pods = healthy_fleet()
    cluster = FakeCluster(nodes=nodes, pods=pods + [operator_pod()], deployments=[deployment()],
                          clusterpolicies=[clusterpolicy()])
    rc, result, _connects = run(operand_readiness, cluster, require_reconciled=True)
    assert rc == 0 and result["step"] is None
    assert [(s["step"], s["done"], s["duration"]) for s in result["steps"]] == [
        ("operator", True, 0), ("cluster-policy", True, 0), ("operands", True, 0)]
    assert sorted(result["nodes"]) == ["gpu-container-1", "gpu-container-2"]
    assert result["nodes"]["gpu-container-1"]["chain"] == CONTAINER_CHAIN
    assert result["api_requests"] == {"list": 5, "watch": 0, "total": 5}


def test_operand_readiness_times_each_step_in_order(run):
    nodes = [gpu_node("gpu-1")]
    stuck = chain_pods("gpu-1", container_toolkit={"ready": False, "waiting": "CrashLoopBackOff"})
    cluster = FakeCluster(nodes=nodes, pods=stuck, deployments=[deployment(available=False)])
    cluster.script("deployments", [("advance", 5), ("MODIFIED", deployment()), ("open", "operator-up")])
    cluster.script("clusterpolicies", [("wait", "operator-up"), ("advance", 3), ("ADDED", clusterpolicy()),
                                       ("open", "policy-up")])
    cluster.script("pods", [("wait", "policy-up"), ("advance", 10),
                            ("MODIFIED", operand_pod("container-toolkit", "gpu-1"))])
    rc, result, _connects = run(operand_readiness, cluster, timeout=900)
    assert rc == 0
    assert [(s["step"], s["done_after"], s["duration"]) for s in result["steps"]] == [
        ("operator", 5, 5), ("cluster-policy", 8, 3), ("operands", 18, 10)]
    assert result["nodes"]["gpu-1"]["ready_after"] == 18
    assert result["elapsed"] == 18
    assert result["api_requests"] == {"list": 10, "watch": 5, "total": 15}


def test_operand_readiness_timeout_names_the_step_and_the_stuck_nodes(run):
    nodes, pods = healthy_fleet()
    pods = [p for p in pods if p["spec"].get("nodeName") != "gpu-container-2"]
    pods += chain_pods("gpu-container-2", container_toolkit={"ready": False, "waiting": "CrashLoopBackOff"})
    cluster = FakeCluster(nodes=nodes, pods=pods, deployments=[deployment()], clusterpolicies=[clusterpolicy()])
    rc, result, _connects = run(operand_readiness, cluster, timeout=300)
    assert rc == 1 and result["step"] == "operands"
    assert result["msg"] == ("timed out after 300s at step operands: 1 of 2 nodes run their operand chain; stuck: "
                             "gpu-container-2 at container-toolkit (container-runtime): CrashLoopBackOff")
    assert result["diagnosis"]["gpu-container-2"]["layer"] == om.LAYER_RUNTIME
    assert result["steps"][2]["done"] is False and result["steps"][2]["duration"] is None


def test_operand_readiness_timeout_at_the_operator_shows_its_pods(run):
    cluster = FakeCluster(nodes=[gpu_node("gpu-1")], pods=[operator_pod("ImagePullBackOff")],
                          deployments=[deployment(available=False)])
    rc, result, _connects = run(operand_readiness, cluster, timeout=60)
    assert rc == 1 and result["step"] == "operator"
    assert result["msg"] == (
        'timed out after 60s at step operator: Deployment gpu-operator/gpu-operator: 0/1 replicas available: '
        'ReplicaSet "gpu-operator-6c9b8d7f5" is progressing.; pods: gpu-operator-6c9b8d7f5-abcde: ImagePullBackOff')
    assert "diagnosis" not in result


def test_operand_readiness_watches_the_operators_objects():
    params = dict(namespace="gpu-ops", names=["gpu-1"], label_selector=None)
    res = dict((r.key, r) for r in operand_readiness.resources(params))
    assert res["deployments"].field_selector == "metadata.name=gpu-operator"
    assert (res["deployments"].api_version, res["deployments"].namespace) == ("apps/v1", "gpu-ops")
    assert res["pods"].namespace == "gpu-ops" and res["clusterpolicies"].optional
    assert res["nodes"].field_selector == "metadata.name=gpu-1"


# ---------------------------------------------------------------- cuda_sample

def finish(cluster, outcomes):
    """When a sample pod is created, script it: scheduled, running, then ended per
    ``outcomes``: node -> (phase, exit code, log) or "pending: <scheduler message>"."""

    def on_create(pod):
        name = pod["metadata"]["name"]
        terms = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        node_name = terms[0]["matchFields"][0]["values"][0] if terms else "gpu-container-1"
        outcome = outcomes[node_name]
        if isinstance(outcome, str):
            pending = copy.deepcopy(pod)
            pending["status"] = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": outcome}]}
            cluster.append_steps("pods", [("advance", 1), ("MODIFIED", pending)])
            return
        phase, code, log = outcome
        running = copy.deepcopy(pod)
        running["spec"]["nodeName"] = node_name
        running["status"] = {"phase": "Running", "containerStatuses": [
            {"name": "cuda-vectoradd", "ready": True, "state": {"running": {}}}]}
        ended = copy.deepcopy(running)
        ended["status"] = {"phase": phase, "containerStatuses": [
            {"name": "cuda-vectoradd", "ready": False,
             "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}}]}
        cluster.logs[name] = log
        cluster.append_steps("pods", [("advance", 2), ("MODIFIED", running), ("advance", 2), ("MODIFIED", ended)])

    cluster.on_create = on_create


def sample_cluster(**world):
    nodes, pods = healthy_fleet()
    world.setdefault("nodes", nodes)
    world.setdefault("pods", pods)
    return FakeCluster(**world)


def test_cuda_sample_runs_once_reads_the_log_and_cleans_up(run):
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG)})
    rc, result, _connects = run(cuda_sample, cluster)
    assert rc == 0 and result["changed"] is False
    assert result["pods"] == [{"name": "cuda-vectoradd", "node": "gpu-container-1", "phase": "Succeeded",
                               "passed": True, "reason": None, "duration": 4,
                               "log_tail": ["[Vector addition of 50000 elements]",
                                            "Copy input data from the host memory to the CUDA device",
                                            "CUDA kernel launch with 196 blocks of 256 threads", "Test PASSED", "Done"]}]
    created = cluster.created[0]
    assert created["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert created["spec"]["securityContext"]["runAsNonRoot"] is True
    assert cluster.deleted == ["cuda-vectoradd"]
    assert ("log", "pods", "cuda-vectoradd", "cuda-vectoradd", False) in cluster.calls
    assert result["api_requests"] == {"list": 2, "watch": 1, "total": 3}


def test_cuda_sample_per_node_fails_clearly_on_the_node_whose_sample_fails(run):
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG),
                     "gpu-container-2": ("Failed", 1, FAILED_LOG)})
    rc, result, _connects = run(cuda_sample, cluster, per_node=True, image="mirror.lan/nvidia/cuda-sample:vectoradd",
                                runtime_class_name="nvidia")
    assert rc == 1
    assert [(p["name"], p["node"], p["passed"]) for p in result["pods"]] == [
        ("cuda-vectoradd-gpu-container-1", "gpu-container-1", True),
        ("cuda-vectoradd-gpu-container-2", "gpu-container-2", False)]
    assert result["msg"] == (
        "1 of 2 CUDA sample pods failed: cuda-vectoradd-gpu-container-2 on gpu-container-2: Error, exit code 1, "
        "phase Failed: [Vector addition of 50000 elements] | Failed to allocate device vector A (error code no "
        "CUDA-capable device)!. Nodes: gpu-container-2: no broken layer found (operands Running and Ready, "
        "nvidia.com/gpu advertised)")
    assert sorted(result["diagnosis"]) == ["gpu-container-2"]
    assert [p["spec"]["runtimeClassName"] for p in cluster.created] == ["nvidia", "nvidia"]
    assert cluster.created[1]["spec"]["containers"][0]["image"] == "mirror.lan/nvidia/cuda-sample:vectoradd"
    assert sorted(cluster.deleted) == ["cuda-vectoradd-gpu-container-1", "cuda-vectoradd-gpu-container-2"]
    # gpu-tainted-1 advertises nothing and gets no pod.
    assert len(cluster.created) == 2


def test_cuda_sample_failure_diagnosis_names_the_broken_layer(run):
    nodes, pods = healthy_fleet()
    pods = [p for p in pods if p["spec"].get("nodeName") != "gpu-container-2"]
    pods += chain_pods("gpu-container-2", container_toolkit={"ready": False, "waiting": "CrashLoopBackOff"})
    cluster = sample_cluster(pods=pods)
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG),
                     "gpu-container-2": ("Failed", 1, FAILED_LOG)})
    rc, result, _connects = run(cuda_sample, cluster, per_node=True)
    assert rc == 1
    assert result["msg"].endswith("Nodes: gpu-container-2: container-runtime (container-toolkit): CrashLoopBackOff")


def test_cuda_sample_reports_a_pending_pod_with_the_schedulers_reason(run):
    message = "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity."
    nodes, pods = healthy_fleet()
    cluster = sample_cluster(nodes=[gpu_node("gpu-container-1", gpus=0), gpu_node("gpu-container-2", gpus=0)] + nodes[2:],
                             pods=pods)
    finish(cluster, {"gpu-container-1": message})
    rc, result, _connects = run(cuda_sample, cluster, timeout=60)
    assert rc == 1
    assert result["pods"][0]["reason"] == "at the deadline: Pending: %s" % message
    assert result["msg"].startswith("1 of 1 CUDA sample pods failed (timed out after 60s): cuda-vectoradd: at the deadline: "
                                    "Pending: 0/4 nodes are available: 2 Insufficient nvidia.com/gpu")
    # No node placed it: the diagnosis covers the GPU nodes that should advertise the resource.
    assert sorted(result["diagnosis"]) == ["gpu-container-1", "gpu-container-2"]
    assert result["diagnosis"]["gpu-container-1"]["layer"] == om.LAYER_ALLOCATABLE
    assert cluster.deleted == ["cuda-vectoradd"]


def test_cuda_sample_without_a_node_that_advertises_the_resource_fails_at_once(run):
    nodes = [gpu_node("gpu-container-1", gpus=0)]
    pods = chain_pods("gpu-container-1", container_toolkit={"ready": False, "waiting": "CrashLoopBackOff"})
    cluster = FakeCluster(nodes=nodes, pods=pods)
    rc, result, _connects = run(cuda_sample, cluster, per_node=True)
    assert rc == 1 and cluster.created == []
    assert result["msg"] == ("no Ready node advertises 1 nvidia.com/gpu allocatable. "
                             "gpu-container-1: container-runtime (container-toolkit): CrashLoopBackOff")


def test_cuda_sample_check_mode_creates_nothing(run):
    cluster = sample_cluster()
    rc, result, _connects = run(cuda_sample, cluster, check_mode=True, per_node=True)
    assert rc == 0 and result["changed"] is False
    assert [(p["name"], p["node"]) for p in result["pods"]] == [
        ("cuda-vectoradd-gpu-container-1", "gpu-container-1"), ("cuda-vectoradd-gpu-container-2", "gpu-container-2")]
    assert cluster.created == [] and cluster.deleted == []
    rc, result, _connects = run(cuda_sample, cluster, check_mode=True, keep_pods=True)
    assert rc == 0 and result["changed"] is True and cluster.created == []


def test_cuda_sample_keep_pods_leaves_them_and_the_next_run_replaces_them(run):
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG)})
    rc, result, _connects = run(cuda_sample, cluster, keep_pods=True)
    assert rc == 0 and result["changed"] is True and cluster.deleted == []
    rc, result, _connects = run(cuda_sample, cluster)
    assert rc == 0 and result["changed"] is False
    assert cluster.deleted == ["cuda-vectoradd", "cuda-vectoradd"]
    assert len(cluster.created) == 2


def test_cuda_sample_does_not_touch_a_pod_it_did_not_create(run):
    foreign = {"metadata": {"name": "cuda-vectoradd", "namespace": "default", "labels": {"app": "mine"}},
               "spec": {}, "status": {"phase": "Running"}}
    cluster = sample_cluster(pods=[foreign])
    rc, result, _connects = run(cuda_sample, cluster)
    assert rc == 1 and result["msg"] == ("pod default/cuda-vectoradd exists and was not created by cuda_sample; "
                                         "choose another name_prefix")
    assert cluster.created == [] and cluster.deleted == []


def test_cuda_sample_with_an_unreadable_log_fails(run):
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG)})
    cluster.on_create, on_create = None, cluster.on_create

    def without_log(pod):
        on_create(pod)
        cluster.logs[pod["metadata"]["name"]] = k8s_wait.ApiError(403, "pods/log is forbidden")

    cluster.on_create = without_log
    rc, result, _connects = run(cuda_sample, cluster)
    assert rc == 1 and result["pods"][0]["reason"] == "log not readable: HTTP 403: pods/log is forbidden"


def fleet_sample_cluster(size):
    """``size`` healthy container GPU nodes whose samples all pass."""
    names = ["gpu-container-%d" % index for index in range(1, size + 1)]
    pods = []
    for name in names:
        pods.extend(chain_pods(name))
    cluster = FakeCluster(nodes=[gpu_node(name) for name in names], pods=pods)
    finish(cluster, dict((name, ("Succeeded", 0, PASSED_LOG)) for name in names))
    return cluster, names


def test_cuda_sample_requests_per_fleet_do_not_grow_but_for_the_creates_and_logs(run):
    # 40 nodes: one list of the nodes, one of the namespace's pods (earlier runs' pods holding the names), a create,
    # a log read and a delete per pod (as it ends), a list and a watch of the run's pods and the list that confirms
    # they ended; no read per pod, and no delete of the run's pods by label when every pod's delete went through.
    # The watch: one, and one more when the reaper's deletes land before the list that confirms the end (the
    # engine's _confirm finds the list ahead of the watched cache and watches on from it; a real API server's
    # DELETED events race that list the same way). Seen once in 12 runs beside a CPU hog; it does not grow with the
    # fleet either way, as the lab's scale test allows one more watch per kind.
    cluster, names = fleet_sample_cluster(40)
    rc, result, _connects = run(cuda_sample, cluster, per_node=True, concurrency=4)
    assert rc == 0 and all(p["passed"] for p in result["pods"]) and len(result["pods"]) == 40
    verbs = {}
    for call in cluster.calls:
        verbs[call[0]] = verbs.get(call[0], 0) + 1
    assert verbs.pop("watch") in (1, 2), cluster.calls
    assert verbs == {"list": 4, "create": 40, "log": 40, "delete": 40}
    # Each pod's log is read before its delete.
    for name in names:
        pod = "cuda-vectoradd-" + name
        order = [c[0] for c in cluster.calls if c[0] in ("log", "delete") and c[2] == pod]
        assert order == ["log", "delete"], (pod, order)
    assert sorted(cluster.deleted) == sorted("cuda-vectoradd-" + name for name in names)
    assert not cluster.world["pods"].keys() & set("default/cuda-vectoradd-" + name for name in names)


def test_cuda_sample_creates_at_most_concurrency_pods_at_a_time(run, monkeypatch):
    cluster, _names = fleet_sample_cluster(12)
    state = {"now": 0, "most": 0}
    real_create = cluster.create_pod

    def create(namespace, body):
        with cluster.cond:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            # Let the other creates of the pool start meanwhile, if it would let them.
            threading.Event().wait(0.02)
            return real_create(namespace, body)
        finally:
            with cluster.cond:
                state["now"] -= 1

    monkeypatch.setattr(cluster, "create_pod", create)
    rc, result, _connects = run(cuda_sample, cluster, per_node=True, concurrency=3)
    assert rc == 0 and len(result["pods"]) == 12
    assert state["most"] == 3


def test_cuda_sample_deletes_each_ended_pod_during_the_wait_and_the_rest_by_the_runs_label(run):
    # gpu-container-2's pod never leaves Pending: the ended one is deleted as it ends, by name; the pending one at the
    # deadline, with the run's one delete by label.
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG),
                     "gpu-container-2": "0/4 nodes are available: 1 Insufficient nvidia.com/gpu."})
    rc, result, _connects = run(cuda_sample, cluster, per_node=True, timeout=30)
    assert rc == 1
    assert [(p["node"], p["phase"], p["passed"]) for p in result["pods"]] == [
        ("gpu-container-1", "Succeeded", True), (None, "Pending", False)]
    assert result["pods"][0]["log_tail"][-2:] == ["Test PASSED", "Done"]
    deletes = [c for c in cluster.calls if c[0] in ("delete", "deletecollection")]
    assert deletes[0] == ("delete", "pods", "cuda-vectoradd-gpu-container-1")
    assert deletes[1][0] == "deletecollection" and len(deletes) == 2
    assert cluster.deleted == ["cuda-vectoradd-gpu-container-1", "cuda-vectoradd-gpu-container-2"]
    assert result["changed"] is False


def test_cuda_sample_keep_pods_deletes_none_during_the_wait(run):
    cluster, _names = fleet_sample_cluster(3)
    rc, result, _connects = run(cuda_sample, cluster, per_node=True, keep_pods=True)
    assert rc == 0 and result["changed"] is True
    assert cluster.deleted == [] and not [c for c in cluster.calls if c[0] in ("delete", "deletecollection")]


def test_cuda_sample_deletes_one_by_one_when_the_one_delete_fails(run, monkeypatch):
    # The delete of one ended pod fails during the wait; the run's delete by label is refused: that pod is deleted by
    # name at the end, with a warning.
    cluster, names = fleet_sample_cluster(3)
    real_delete = cluster.delete_pod
    refused = []

    def delete_pod(namespace, name):
        if name == "cuda-vectoradd-gpu-container-2" and not refused:
            refused.append(name)
            raise k8s_wait.ApiError(500, "etcdserver: request timed out")
        return real_delete(namespace, name)

    def refuse(namespace, label_selector):
        raise k8s_wait.ApiError(403, "deletecollection is forbidden")

    monkeypatch.setattr(cluster, "delete_pod", delete_pod)
    monkeypatch.setattr(cluster, "delete_pods", refuse)
    rc, result, _connects = run(cuda_sample, cluster, per_node=True)
    assert rc == 0 and result["changed"] is False and refused
    assert sorted(cluster.deleted) == sorted("cuda-vectoradd-" + name for name in names)
    assert [w["event"]["msg"] for w in result["warnings"]] == [
        "could not delete the run's pods in one request (HTTP 403: deletecollection is forbidden): deleting them one "
        "by one"]


def test_cuda_sample_cleans_up_what_it_created_when_a_create_fails(run, monkeypatch):
    # The third create is refused for good: no further create starts, and the pods created so far are deleted.
    cluster, _names = fleet_sample_cluster(6)
    real_create = cluster.create_pod

    def create(namespace, body):
        if body["metadata"]["name"] == "cuda-vectoradd-gpu-container-3":
            raise k8s_wait.ApiError(403, "pods is forbidden", fatal=True)
        return real_create(namespace, body)

    monkeypatch.setattr(cluster, "create_pod", create)
    rc, result, _connects = run(cuda_sample, cluster, per_node=True, concurrency=1)
    assert rc == 1 and "pods is forbidden" in result["msg"]
    assert [p["metadata"]["name"] for p in cluster.created] == [
        "cuda-vectoradd-gpu-container-1", "cuda-vectoradd-gpu-container-2"]
    assert sorted(cluster.deleted) == ["cuda-vectoradd-gpu-container-1", "cuda-vectoradd-gpu-container-2"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_cuda_sample_deletes_its_pods_and_says_so_when_a_signal_interrupts_it(run, monkeypatch, signum):
    # The signal comes (to this process, as Ctrl-C on ansible-playbook or an async timeout sends it) while the third
    # pod is created: no further create starts, the three pods go with the run's delete, and the module ends with a
    # result, not a traceback. Its handlers are the process's own again afterwards.
    cluster, _names = fleet_sample_cluster(6)
    real_create = cluster.create_pod

    def create(namespace, body):
        created = real_create(namespace, body)
        if body["metadata"]["name"] == "cuda-vectoradd-gpu-container-3":
            os.kill(os.getpid(), signum)
        return created

    monkeypatch.setattr(cluster, "create_pod", create)
    before = dict((s, signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
    rc, result, _connects = run(cuda_sample, cluster, per_node=True, concurrency=1)
    names = ["cuda-vectoradd-gpu-container-%d" % i for i in (1, 2, 3)]
    assert rc == 1 and result["changed"] is False
    # The pods whose create was sent; those never attempted do not exist and are not named.
    assert result["msg"] == "interrupted by %s: pods %s deleted" % (signal.Signals(signum).name, ", ".join(names))
    assert [p["metadata"]["name"] for p in cluster.created] == names
    assert sorted(cluster.deleted) == names
    assert dict((s, signal.getsignal(s)) for s in before) == before


def test_cuda_sample_interrupted_before_any_create_says_that_no_pod_was_created(run, monkeypatch):
    cluster, _names = fleet_sample_cluster(3)
    real_bounded = cuda_sample.bounded

    def interrupted_first(function, items, concurrency):
        os.kill(os.getpid(), signal.SIGTERM)
        return real_bounded(function, items, concurrency)

    monkeypatch.setattr(cuda_sample, "bounded", interrupted_first)
    rc, result, _connects = run(cuda_sample, cluster, per_node=True)
    assert rc == 1 and result["msg"] == "interrupted by SIGTERM: no pod was created"
    assert cluster.created == [] and cluster.deleted == [] and result["changed"] is False


def test_cuda_sample_per_node_fails_a_sample_that_ran_on_another_node(run):
    # The pod for gpu-container-2 was placed on gpu-container-1 and passed there: that says nothing of gpu-container-2.
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG), "gpu-container-2": ("Succeeded", 0, PASSED_LOG)})
    on_create = cluster.on_create

    def misplaced(pod):
        if pod["metadata"]["name"] == "cuda-vectoradd-gpu-container-2":
            pod = copy.deepcopy(pod)
            terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] = ["gpu-container-1"]
        on_create(pod)

    cluster.on_create = misplaced
    rc, result, _connects = run(cuda_sample, cluster, per_node=True)
    assert rc == 1
    assert [(p["name"], p["node"], p["passed"], p["reason"]) for p in result["pods"]] == [
        ("cuda-vectoradd-gpu-container-1", "gpu-container-1", True, None),
        ("cuda-vectoradd-gpu-container-2", "gpu-container-1", False,
         "ran on gpu-container-1, not on gpu-container-2, the node it was for")]
    assert result["msg"].startswith(
        "1 of 2 CUDA sample pods failed: cuda-vectoradd-gpu-container-2 on gpu-container-1: "
        "ran on gpu-container-1, not on gpu-container-2, the node it was for")


def test_cuda_sample_needs_exit_code_0_as_well_as_the_log(run):
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": ("Succeeded", 3, PASSED_LOG)})
    rc, result, _connects = run(cuda_sample, cluster)
    assert rc == 1 and result["pods"][0]["passed"] is False and result["pods"][0]["reason"] == "exit code 3"


def sample_of_another_run(phase, keep=False):
    pod = rd.sample_pod("cuda-vectoradd", "default", "other-run")
    if keep:
        pod["metadata"]["labels"]["gpuplatform.rke2/cuda-sample-keep"] = "true"
    pod["spec"]["nodeName"] = "gpu-container-2"
    pod["status"] = {"phase": phase}
    return pod


def test_cuda_sample_does_not_delete_a_pod_another_run_may_still_use(run):
    # Two runs with one name_prefix: the second finds the first's pod running under its name. It fails naming the pod,
    # its run and the command that removes it (should that run have been killed), and deletes nothing.
    nodes, pods = healthy_fleet()
    cluster = sample_cluster(pods=pods + [sample_of_another_run("Running")])
    rc, result, _connects = run(cuda_sample, cluster)
    assert rc == 1 and result["msg"] == (
        "pods cuda-vectoradd (run other-run, Running) belong to another cuda_sample run, which may still use them: "
        "wait for it to end or choose another name_prefix; pods a killed run left are removed with: "
        "kubectl delete pods -n default -l gpuplatform.rke2/cuda-sample-run=other-run")
    assert cluster.created == [] and cluster.deleted == [] and not result.get("changed")


def test_cuda_sample_replaces_only_a_kept_pod_that_ended(run):
    nodes, pods = healthy_fleet()
    cluster = sample_cluster(pods=pods + [sample_of_another_run("Running", keep=True)])
    rc, result, _connects = run(cuda_sample, cluster)
    assert rc == 1 and "(run other-run, Running) belong to another cuda_sample run" in result["msg"]
    assert cluster.deleted == []
    cluster = sample_cluster(pods=pods + [sample_of_another_run("Succeeded", keep=True)])
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG)})
    rc, result, _connects = run(cuda_sample, cluster)
    assert rc == 0 and cluster.deleted == ["cuda-vectoradd", "cuda-vectoradd"]


def test_cuda_sample_keep_pods_names_the_pods_it_leaves_and_how_to_remove_them(run):
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": ("Succeeded", 0, PASSED_LOG)})
    rc, result, _connects = run(cuda_sample, cluster, keep_pods=True)
    assert rc == 0 and result["changed"] is True and result["left_pods"] == ["cuda-vectoradd"]
    assert result["remove_command"] == (
        "kubectl delete pods -n default -l gpuplatform.rke2/cuda-sample-run=%s" % result["run_id"])
    assert cluster.created[0]["metadata"]["labels"][rd.SAMPLE_LABEL_KEEP] == "true"


def test_cuda_sample_deletes_by_name_only_a_pod_of_its_own_run(run, monkeypatch):
    # The delete by the run's label fails after the pod went and another run created one under its name: the delete
    # by name leaves that one alone.
    cluster = sample_cluster()
    finish(cluster, {"gpu-container-1": "0/4 nodes are available: 1 Insufficient nvidia.com/gpu."})
    ours = []

    def replaced_then_refused(namespace, label_selector):
        pod = cluster.world["pods"]["default/cuda-vectoradd"]
        ours.append(pod["metadata"]["labels"][rd.SAMPLE_LABEL_RUN])
        cluster.apply("pods", "MODIFIED", dict(sample_of_another_run("Pending"), metadata=dict(
            pod["metadata"], labels=dict(pod["metadata"]["labels"], **{rd.SAMPLE_LABEL_RUN: "other-run"}))))
        raise k8s_wait.ApiError(500, "etcdserver: request timed out")

    monkeypatch.setattr(cluster, "delete_pods", replaced_then_refused)
    rc, result, _connects = run(cuda_sample, cluster, timeout=30)
    assert rc == 1 and len(ours) == 1
    assert cluster.deleted == []
    assert cluster.world["pods"]["default/cuda-vectoradd"]["metadata"]["labels"][rd.SAMPLE_LABEL_RUN] == "other-run"
    assert result["left_pods"] == [] and result["changed"] is False and result["run_id"] == ours[0]


def test_cuda_sample_passes_and_names_the_pods_its_failing_deletes_left(run, monkeypatch):
    cluster, _names = fleet_sample_cluster(2)

    def refuse(*args):
        raise k8s_wait.ApiError(503, "the server is currently unable to handle the request")

    monkeypatch.setattr(cluster, "delete_pod", refuse)
    monkeypatch.setattr(cluster, "delete_pods", refuse)
    rc, result, _connects = run(cuda_sample, cluster, per_node=True)
    names = ["cuda-vectoradd-gpu-container-1", "cuda-vectoradd-gpu-container-2"]
    assert rc == 0 and result["changed"] is True
    command = "kubectl delete pods -n default -l gpuplatform.rke2/cuda-sample-run=%s" % result["run_id"]
    assert result["left_pods"] == names
    assert result["remove_command"] == command
    assert result["warnings"][-1]["event"]["msg"] == "pods %s may be left; remove them with: %s" % (
        ", ".join(names), command)


@pytest.mark.parametrize("args, message", [
    ({"nodes": ["gpu-1"]}, "nodes needs per_node: true"),
    ({"pattern": "Test (PASSED"}, "pattern: 'Test (PASSED' is not a regular expression"),
    ({"name_prefix": "CUDA_sample"}, "name_prefix: 'CUDA_sample' must be a DNS label"),
    ({"count": 0}, "count must be 1 or more, got 0"),
    ({"resource": "gpu"}, "resource: 'gpu' is not an extended resource name"),
    ({"tolerations": [{"key": "a", "operater": "Exists"}]}, "tolerations[0]: unknown keys operater"),
])
def test_cuda_sample_rejects_bad_input_before_connecting(run, args, message):
    rc, result, connects = run(cuda_sample, FakeCluster(), **args)
    assert rc == 1 and result["msg"].startswith(message) and connects == []


# ---------------------------------------------------------------- helmchart_wait

def test_helmchart_wait_returns_when_the_install_job_completes(run):
    cluster = FakeCluster(helmcharts=[helmchart(job_name="helm-install-gpu-operator")], jobs=[job()], pods=[job_pod()])
    cluster.script("jobs", [("advance", 20), ("MODIFIED", job(complete=True))])
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator")
    assert rc == 0
    assert (result["job"], result["message"], result["elapsed"]) == (
        "helm-install-gpu-operator", "Job helm-install-gpu-operator complete", 20)
    assert result["api_requests"] == {"list": 6, "watch": 3, "total": 9}


def test_helmchart_wait_reports_a_failed_attempt_at_once_with_its_log(run):
    crashing = job_pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, restarts=1,
                       last_state={"terminated": {"exitCode": 1, "reason": "Error"}})
    cluster = FakeCluster(helmcharts=[helmchart(job_name="helm-install-gpu-operator")], jobs=[job()], pods=[crashing])
    cluster.logs[crashing["metadata"]["name"]] = "helm install\nError: INSTALLATION FAILED: chart not found\n"
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator")
    assert rc == 1 and result["elapsed"] == 0
    assert result["msg"] == ("installing HelmChart kube-system/gpu-operator failed: Job helm-install-gpu-operator: pod "
                             "helm-install-gpu-operator-x7k2p: Error, exit code 1 (restarted 1 times). "
                             "Log: helm install | Error: INSTALLATION FAILED: chart not found")
    assert result["log_tail"] == ["helm install", "Error: INSTALLATION FAILED: chart not found"]
    assert ("log", "pods", "helm-install-gpu-operator-x7k2p", "helm", True) in cluster.calls


def test_helmchart_wait_reads_the_current_log_when_the_failed_attempt_has_no_previous_one(run):
    # After its first failure the container waits in CrashLoopBackOff: the kubelet has no
    # previous instance yet, the failed attempt's log is the current one.
    crashing = job_pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, restarts=1,
                       last_state={"terminated": {"exitCode": 1, "reason": "Error"}})
    name = crashing["metadata"]["name"]
    cluster = FakeCluster(helmcharts=[helmchart(job_name="helm-install-gpu-operator")], jobs=[job()], pods=[crashing])
    cluster.logs[(name, True)] = k8s_wait.ApiError(400, "previous terminated container \"helm\" in pod %s not found" % name)
    cluster.logs[(name, False)] = "Error: UPGRADE FAILED: the NRI Plugin cannot be enabled when CDI is disabled\n"
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator")
    assert rc == 1
    assert result["log_tail"] == ["Error: UPGRADE FAILED: the NRI Plugin cannot be enabled when CDI is disabled"]
    assert [c[4] for c in cluster.calls if c[0] == "log"] == [True, False]


def test_helmchart_wait_waits_for_the_job_of_the_new_values(run):
    chart = helmchart(job_name="helm-install-gpu-operator", spec_time="2026-11-30T11:00:00Z")
    old = job(uid="old", created="2026-11-30T10:00:00Z", complete=True)
    new = job(uid="new", created="2026-11-30T11:00:03Z")
    cluster = FakeCluster(helmcharts=[chart], jobs=[old])
    cluster.script("jobs", [("advance", 2), ("DELETED", old), ("advance", 1), ("ADDED", new), ("advance", 30),
                            ("MODIFIED", dict(new, status={"succeeded": 1}))])
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator")
    assert rc == 0 and result["elapsed"] == 33


def revised(obj, revision, **metadata):
    """``obj`` as one API server's storage wrote it at ``revision``."""
    obj = copy.deepcopy(obj)
    obj["metadata"].update(metadata, resourceVersion=str(revision))
    return obj


def test_helmchart_wait_does_not_take_a_job_suspended_for_its_replacement_for_done(run):
    # helm-controller suspends the old, complete Job after the change, before it replaces it.
    chart = helmchart(job_name="helm-install-gpu-operator", spec_time="2026-11-30T10:00:00Z")
    old = dict(job(uid="old", created="2026-11-30T10:00:01Z", complete=True), spec={"suspend": True})
    new = job(uid="new", created="2026-11-30T10:00:05Z")
    cluster = FakeCluster(helmcharts=[chart], jobs=[old])
    cluster.script("jobs", [("advance", 3), ("DELETED", old), ("ADDED", new), ("advance", 10),
                            ("MODIFIED", dict(new, status={"succeeded": 1}))])
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator")
    assert rc == 0 and result["elapsed"] == 13


def test_helmchart_wait_takes_an_installed_chart_whose_status_was_written_after_its_job(run):
    # What the real helm-controller leaves (seen in the lab): it creates the Job, then writes the chart's status, so
    # the installed chart's revision is above its Job's: the revisions do not order the two, the times do.
    chart = revised(helmchart(job_name="helm-install-gpu-operator", spec_time="2026-11-30T10:00:00Z"), 815,
                    generation=1)
    done = revised(job(created="2026-11-30T10:00:01Z", complete=True), 457)
    cluster = FakeCluster(helmcharts=[chart], jobs=[done])
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator", timeout=30)
    assert rc == 0 and result["message"] == "Job helm-install-gpu-operator complete" and result["elapsed"] == 0


def _resumed_chart_and_releases(config):
    """A chart changed after its (old, complete) Job, and helm's records in gpu-operator: revision 2
    deployed with ``config``, what a resumed failed upgrade leaves."""
    from tests.unit.test_helmchart_release import record
    chart = helmchart(job_name="helm-install-gpu-operator", spec_time="2026-11-30T11:00:00Z")
    chart["spec"]["version"] = "v26.3.2"
    old = job(uid="old", created="2026-11-30T10:00:00Z", complete=True)
    return FakeCluster(helmcharts=[chart], jobs=[old], releases=[record(1, "superseded"),
                                                                 record(2, "deployed", values=config)])


def test_helmchart_wait_takes_a_chart_the_deployed_release_already_carries(run):
    # helm-controller runs no Job for a chart whose deployed release has its config; RKE2's own global values
    # (set by its helm-controller) do not count against the chart's.
    cluster = _resumed_chart_and_releases({"driver": {"enabled": False}, "global": {"systemDefaultRegistry": "r"}})
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator", release_namespace="gpu-operator",
                                timeout=30)
    assert rc == 0, result
    assert result["message"].startswith("the deployed release gpu-operator/gpu-operator already has the HelmChart's "
                                        "version and values (Job helm-install-gpu-operator (created ")
    # Without the release namespace, or with other values deployed, the old Job is still not the chart's.
    rc, result, _connects = run(helmchart_wait, _resumed_chart_and_releases({"driver": {"enabled": False}}),
                                name="gpu-operator", timeout=30)
    assert rc == 1 and "waiting for helm-controller to replace it" in result["msg"]
    rc, result, _connects = run(helmchart_wait, _resumed_chart_and_releases({"driver": {"enabled": True}}),
                                name="gpu-operator", release_namespace="gpu-operator", timeout=30)
    assert rc == 1 and "waiting for helm-controller to replace it" in result["msg"]


def _hashed(record, config_hash):
    record["metadata"]["labels"]["helmcharts.helm.cattle.io/configHash"] = config_hash
    return record


def test_helmchart_wait_with_a_release_namespace_takes_a_complete_job_only_with_the_chart_deployed(run):
    # The entry script ends 0 without helm when the release revision is not the one helm-controller
    # expected (its cache, stale right after a resume): a complete Job, the old values still deployed.
    from tests.unit.test_helmchart_release import record
    chart = helmchart(job_name="helm-install-gpu-operator", spec_time="2026-11-30T11:00:00Z")
    chart["spec"]["version"] = "v26.3.2"
    skipped = job(uid="skipped", created="2026-11-30T11:00:02Z", complete=True, config_hash="SHA256=new")
    rerun = job(uid="rerun", created="2026-11-30T11:00:09Z", config_hash="SHA256=new")
    old_values = [record(1, "superseded"), _hashed(record(2, "deployed"), "SHA256=old")]
    upgraded = _hashed(record(3, "deployed"), "SHA256=new")
    cluster = FakeCluster(helmcharts=[chart], jobs=[skipped], releases=old_values)
    cluster.script("jobs", [("advance", 5), ("DELETED", skipped), ("ADDED", rerun), ("advance", 10),
                            ("MODIFIED", dict(rerun, status={"succeeded": 1}))])
    cluster.script("releases", [("advance", 40), ("ADDED", upgraded)])
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator", release_namespace="gpu-operator",
                                timeout=60)
    assert rc == 0 and result["message"] == "Job helm-install-gpu-operator complete", result
    # Not when the rerun completed (15 s in), only once the release carried the chart.
    assert result["elapsed"] > 15
    # Had the upgrade never come, the timeout says why the complete Job is not the install.
    cluster = FakeCluster(helmcharts=[chart], jobs=[skipped], releases=old_values)
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator", release_namespace="gpu-operator",
                                timeout=30)
    assert rc == 1 and "is not a deployed one made from it (config hash SHA256=new)" in result["msg"], result
    # Without the release namespace the skipped run counts (helm's record is not read).
    cluster = FakeCluster(helmcharts=[chart], jobs=[skipped], releases=old_values)
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator", timeout=60)
    assert rc == 0 and result["elapsed"] == 0


def test_helmchart_wait_timeout_says_what_it_saw_last(run):
    pending = job_pod(phase="Pending")
    pending["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."}]}
    cluster = FakeCluster(helmcharts=[helmchart(job_name="helm-install-gpu-operator")], jobs=[job()], pods=[pending])
    rc, result, _connects = run(helmchart_wait, cluster, name="gpu-operator", timeout=30)
    assert rc == 1
    assert result["msg"] == (
        "timed out after 30s waiting for HelmChart kube-system/gpu-operator: Job helm-install-gpu-operator running: "
        "pod helm-install-gpu-operator-x7k2p Pending: 0/3 nodes are available: 3 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }.")


def test_helmchart_wait_watches_the_chart_its_jobs_and_their_pods():
    res = dict((r.key, r) for r in helmchart_wait.resources({"name": "gpu-operator", "namespace": "kube-system"}))
    assert (res["helmcharts"].api_version, res["helmcharts"].field_selector) == (
        "helm.cattle.io/v1", "metadata.name=gpu-operator")
    assert res["jobs"].label_selector == res["pods"].label_selector == "helmcharts.helm.cattle.io/chart=gpu-operator"
    assert "releases" not in res
    res = dict((r.key, r) for r in helmchart_wait.resources({"name": "gpu-operator", "namespace": "kube-system",
                                                             "release_namespace": "gpu-operator"}))
    assert (res["releases"].plural, res["releases"].namespace, res["releases"].label_selector) == (
        "secrets", "gpu-operator", "owner=helm,name=gpu-operator")


@pytest.mark.parametrize("args, message", [
    ({"name": "GPU_Operator"}, "name: 'GPU_Operator' is not an RFC 1123 name"),
    ({"name": "gpu-operator", "timeout": -1}, "timeout must be zero or more seconds, got -1"),
    ({"name": "gpu-operator", "release_namespace": "GPU"}, "release_namespace: 'GPU' is not an RFC 1123 name"),
])
def test_helmchart_wait_rejects_bad_input_before_connecting(run, args, message):
    rc, result, connects = run(helmchart_wait, FakeCluster(), **args)
    assert rc == 1 and result["msg"] == message and connects == []


def test_the_sample_default_image_is_the_documented_one():
    assert rd.SAMPLE_IMAGE == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
