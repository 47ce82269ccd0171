"""The lab's seed behaviours, with the real DaemonSet controller and scheduler: the
facts every check and wait of the collection relies on."""

import json
import os
import subprocess
import uuid

import pytest
from kubernetes import client

from tests.integration.kube import pods_on, wait_for

NS = "gpu-operator"
DRIVER = "nvidia-driver-daemonset"


def _apps(lab):
    return client.AppsV1Api(lab.api)


def _pod(name, resources, node_selector=None):
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "registry.lab.invalid/workload:1",
                                 "resources": {"limits": resources}}],
                 "nodeSelector": node_selector or {}},
    }


def _scheduled(name):
    def predicate(objects):
        pod = objects.get(name)
        return pod is not None and (pod.spec.node_name or any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for c in (pod.status.conditions or [])))
    return predicate


def test_kubectl_lists_fleet_and_reports_pinned_version(lab):
    kubectl = os.path.join(lab.bin_dir, "kubectl")
    env = dict(os.environ, KUBECONFIG=lab.kubeconfig)
    nodes = subprocess.run([kubectl, "get", "nodes", "-o", "json"], env=env, check=True,
                           stdout=subprocess.PIPE, universal_newlines=True)
    names = sorted(n["metadata"]["name"] for n in json.loads(nodes.stdout)["items"])
    assert names == sorted(lab.fleet())
    version = subprocess.run([kubectl, "version", "-o", "json"], env=env, check=True,
                             stdout=subprocess.PIPE, universal_newlines=True)
    with open(os.path.join(os.path.dirname(__file__), "..", "lab", "build.sh")) as handle:
        pinned = [line.split("=")[1].split()[0] for line in handle if line.startswith("K8S_VERSION=")][0]
    assert json.loads(version.stdout)["serverVersion"]["gitVersion"] == pinned


def test_switching_off_driver_label_deletes_that_nodes_driver_pod(gpu_lab):
    core = gpu_lab.core()
    before = wait_for(core.list_namespaced_pod, lambda o: pods_on(o, "gpu-container-1", DRIVER), namespace=NS)
    other = [p.metadata.name for p in pods_on(before, "gpu-container-2", DRIVER)]
    core.patch_node("gpu-container-1", {"metadata": {"labels": {"nvidia.com/gpu.deploy.driver": "false"}}})
    after = wait_for(core.list_namespaced_pod, lambda o: not pods_on(o, "gpu-container-1", DRIVER), namespace=NS)
    # Only that node's driver pod goes; the label value the operator found is kept.
    assert [p.metadata.name for p in pods_on(after, "gpu-container-2", DRIVER)] == other
    assert core.read_node("gpu-container-1").metadata.labels["nvidia.com/gpu.deploy.driver"] == "false"


def test_tainted_gpu_node_is_left_out_of_desired_number_scheduled(gpu_lab):
    node = gpu_lab.core().read_node("gpu-tainted-1")
    # The node is labelled for the driver like the others ...
    assert node.metadata.labels["nvidia.com/gpu.deploy.driver"] == "true"
    ds = _apps(gpu_lab).read_namespaced_daemon_set(DRIVER, NS)
    # Container nodes that take the driver container (gpu-spark-1 brings its own: deploy.driver=false).
    container_nodes = [n for n, v in gpu_lab.fleet().items() if v.get("gpu_workload_config") == "container"
                       and "driver" not in (v.get("gpu_operands_disabled") or ())]
    # ... yet the DaemonSet does not count it: its status looks complete without it.
    assert ds.status.desired_number_scheduled == len(container_nodes) - 1
    assert ds.status.number_ready == ds.status.desired_number_scheduled
    pods = gpu_lab.core().list_namespaced_pod(NS, field_selector="spec.nodeName=gpu-tainted-1").items
    assert pods == []


def test_passthrough_resource_lands_on_passthrough_node_and_gpu_request_never_does(gpu_lab):
    core = gpu_lab.core()
    vm = "vm-" + uuid.uuid4().hex[:6]
    gpu = "gpu-" + uuid.uuid4().hex[:6]
    core.create_namespaced_pod("default", _pod(vm, {"nvidia.com/GA102GL_A10": "1"}))
    core.create_namespaced_pod("default", _pod(gpu, {"nvidia.com/gpu": "1"},
                                               {"kubernetes.io/hostname": "gpu-passthrough-1"}))
    try:
        pods = wait_for(core.list_namespaced_pod, lambda o: _scheduled(vm)(o) and _scheduled(gpu)(o),
                        namespace="default")
        assert pods[vm].spec.node_name == "gpu-passthrough-1"
        assert pods[gpu].spec.node_name is None
        condition = [c for c in pods[gpu].status.conditions if c.type == "PodScheduled"][0]
        assert "Insufficient nvidia.com/gpu" in condition.message
    finally:
        for name in (vm, gpu):
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_resource_nobody_advertises_stays_pending_with_scheduler_reason(gpu_lab):
    core = gpu_lab.core()
    name = "nobody-" + uuid.uuid4().hex[:6]
    core.create_namespaced_pod("default", _pod(name, {"nvidia.com/H100_SXM5_80GB": "1"}))
    try:
        pods = wait_for(core.list_namespaced_pod, _scheduled(name), namespace="default")
        pod = pods[name]
        assert pod.status.phase == "Pending"
        condition = [c for c in pod.status.conditions if c.type == "PodScheduled"][0]
        assert condition.reason == "Unschedulable"
        assert "0/%d nodes are available" % len(gpu_lab.fleet()) in condition.message
        assert "Insufficient nvidia.com/H100_SXM5_80GB" in condition.message
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_node_added_after_start_gets_its_operands(gpu_lab):
    gpu_lab.add_node("gpu-late-1", workload_config="container", gpus=2)
    core = gpu_lab.core()
    wanted = {"nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", "nvidia-device-plugin-daemonset"}

    def operands_running(objects):
        running = set((p.metadata.labels or {}).get("app") for p in pods_on(objects, "gpu-late-1")
                      if p.status.phase == "Running")
        return wanted <= running
    wait_for(core.list_namespaced_pod, operands_running, namespace=NS)
    nodes = wait_for(core.list_node, lambda o: (o["gpu-late-1"].status.allocatable or {}).get("nvidia.com/gpu") == "2")
    assert nodes["gpu-late-1"].metadata.labels["nvidia.com/gpu.present"] == "true"


def test_the_arm64_dgx_spark_runs_the_same_daemonsets_without_a_driver_pod(gpu_lab):
    """gpu-spark-1: arm64, one GB10, its own driver 580.142. The real operator's DaemonSets
    select no architecture: it gets every container operand but the driver, advertises its one
    GPU, and GFD reports the host's driver. Without the deploy.driver=false the inventory gives
    it, the driver pod comes, and k8s-driver-manager marks the node pre-installed instead."""
    core, spark = gpu_lab.core(), "gpu-spark-1"
    node = core.read_node(spark)
    assert node.metadata.labels["kubernetes.io/arch"] == "arm64" and node.status.node_info.architecture == "arm64"
    assert node.metadata.labels["nvidia.com/gpu.deploy.driver"] == "false"
    wanted = {"nvidia-container-toolkit-daemonset", "nvidia-device-plugin-daemonset", "nvidia-operator-validator",
              "gpu-feature-discovery", "nvidia-dcgm-exporter"}

    def operands(objects):
        return set((p.metadata.labels or {}).get("app") for p in pods_on(objects, spark) if p.status.phase == "Running"
                   and all(c.ready for c in p.status.container_statuses or ()))
    wait_for(core.list_namespaced_pod, lambda o: operands(o) >= wanted and DRIVER not in operands(o), namespace=NS)
    nodes = wait_for(core.list_node, lambda o: (o[spark].status.allocatable or {}).get("nvidia.com/gpu") == "1" and
                     (o[spark].metadata.labels or {}).get("nvidia.com/cuda.driver-version.full") == "580.142")
    labels = nodes[spark].metadata.labels
    # GB10 shares the host's memory: GFD sets no memory label for it.
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GB10" and "nvidia.com/gpu.memory" not in labels

    # Unlabelled: the operator writes true, the driver pod lands, k8s-driver-manager answers.
    core.patch_node(spark, {"metadata": {"labels": {"nvidia.com/gpu.deploy.driver": None,
                                                    "nvidia.com/gpu.present": None}}})
    nodes = wait_for(core.list_node, lambda o: (o[spark].metadata.labels or {}).get(
        "nvidia.com/gpu.deploy.driver") == "pre-installed")
    wait_for(core.list_namespaced_pod, lambda o: not pods_on(o, spark, DRIVER), namespace=NS)
    # The driver DaemonSet counts the A10 container nodes only (not the tainted one, not the Spark).
    takers = len([n for n, v in gpu_lab.fleet().items() if v.get("gpu_workload_config") == "container"]) - 2
    wait_for(_apps(gpu_lab).list_namespaced_daemon_set,
             lambda o: o[DRIVER].status.desired_number_scheduled == takers, namespace=NS)


def test_cuda_sample_log_is_served_through_the_pod_log_endpoint(gpu_lab):
    core = gpu_lab.core()
    name = "cuda-" + uuid.uuid4().hex[:6]
    body = _pod(name, {"nvidia.com/gpu": "1"}, {"kubernetes.io/hostname": "gpu-container-1"})
    body["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
    body["spec"]["restartPolicy"] = "OnFailure"
    core.create_namespaced_pod("default", body)
    try:
        pods = wait_for(core.list_namespaced_pod,
                        lambda o: name in o and o[name].status.phase in ("Succeeded", "Failed"), namespace="default")
        assert pods[name].status.phase == "Succeeded"
        assert "Test PASSED" in core.read_namespaced_pod_log(name, "default")
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


@pytest.mark.parametrize("fault", ["cuda-switch", "toolkit-held-down"])
def test_cuda_sample_fails_on_a_broken_node(gpu_lab, fault):
    core = gpu_lab.core()
    if fault == "cuda-switch":
        gpu_lab.fail_cuda_sample("gpu-container-2")
        # The lab's barrier: the node agent has read the node with its switch before the pod
        # exists (else it can run the pod from a node list read just before the switch).
        gpu_lab.wait_settled()
    else:
        gpu_lab.hold_down("gpu-container-2", "container-toolkit")
        wait_for(core.list_namespaced_pod, lambda o: any(
            not p.status.container_statuses[0].ready
            for p in pods_on(o, "gpu-container-2", "nvidia-container-toolkit-daemonset")), namespace=NS)
    name = "cuda-" + uuid.uuid4().hex[:6]
    body = _pod(name, {"nvidia.com/gpu": "1"}, {"kubernetes.io/hostname": "gpu-container-2"})
    body["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
    core.create_namespaced_pod("default", body)
    try:
        pods = wait_for(core.list_namespaced_pod,
                        lambda o: name in o and o[name].status.phase in ("Succeeded", "Failed"), namespace="default")
        assert pods[name].status.phase == "Failed"
        assert "Test PASSED" not in core.read_namespaced_pod_log(name, "default")
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_api_server_restart_keeps_the_cluster(gpu_lab):
    gpu_lab.restart_apiserver()
    nodes = gpu_lab.core().list_node().items
    assert sorted(n.metadata.name for n in nodes) == sorted(gpu_lab.fleet())
    # The simulator rides through the restart and still reacts.
    gpu_lab.hold_down("gpu-container-1", "dcgm-exporter")
    wait_for(gpu_lab.core().list_namespaced_pod, lambda o: any(
        not p.status.container_statuses[0].ready
        for p in pods_on(o, "gpu-container-1", "nvidia-dcgm-exporter")), namespace=NS)


def _ready(name, status):
    def predicate(objects):
        pod = objects.get(name)
        return pod is not None and pod.status.phase == "Running" and any(
            c.type == "Ready" and c.status == status for c in (pod.status.conditions or []))
    return predicate


def test_a_pod_marked_not_ready_by_the_node_lifecycle_controller_is_ready_again(gpu_lab):
    # What kube-controller-manager does to every pod of a node whose Lease lapsed (an API
    # server restart longer than the node monitor grace period): Ready goes False, the
    # containers are untouched. A kubelet re-reports Ready once it is back; so must kwok.
    core = gpu_lab.core()
    name = "lapsed-" + uuid.uuid4().hex[:6]
    core.create_namespaced_pod("default", _pod(name, {}))
    try:
        wait_for(core.list_namespaced_pod, _ready(name, "True"), namespace="default")
        marked = core.patch_namespaced_pod_status(name, "default", {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "NodeNotReady"}]}})
        assert [c.status for c in marked.status.conditions if c.type == "Ready"] == ["False"]
        pods = wait_for(core.list_namespaced_pod, _ready(name, "True"), namespace="default")
        kinds = dict((c.type, c.status) for c in pods[name].status.conditions)
        assert kinds["ContainersReady"] == "True" and kinds["Initialized"] == "True"
        assert pods[name].status.container_statuses[0].state.running is not None
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
