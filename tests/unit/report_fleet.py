"""A generated GPU fleet for the verification report's tests: the cluster objects of ``n`` GPU
nodes (nodes, operand pods with their images, the operator's pod) with a mix of the failures
a large site shows at once, run through gpu_node_check's own logic, and the registered
results of the waits and the CUDA sample that go with them: what gpu_verify_report is given.
Deterministic: node ``i``'s workload config and fault follow from ``i`` alone."""
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check as nc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from tests.unit.wait_builders import (A10_12Q, A10_PASSTHROUGH, CONTAINER_CHAIN, SANDBOX_SPEC, TRAINING_TAINT,
                                      chain_pods, clusterpolicy, gpu_node, node, operator_pod)

RKE2 = "v1.34.1+rke2r1"
# A site mid-upgrade: a few nodes still on the previous RKE2.
RKE2_PREVIOUS = "v1.33.5+rke2r1"
DRIVER = "580.126.20"
IMAGES = {
    "gpu-operator": "nvcr.io/nvidia/gpu-operator:v26.3.2",
    "driver": "nvcr.io/nvidia/driver:580.126.20-ubuntu22.04",
    "container-toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v1.18.1",
    "device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
    "operator-validator": "nvcr.io/nvidia/gpu-operator:v26.3.2",
    "dcgm-exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04",
    "gpu-feature-discovery": "nvcr.io/nvidia/k8s-device-plugin:v0.18.1",
    "vfio-manager": "nvcr.io/nvidia/cuda:13.0.1-base-ubi9",
    "vgpu-device-manager": "nvcr.io/nvidia/cloud-native/vgpu-device-manager:v0.4.1",
    "sandbox-validator": "nvcr.io/nvidia/gpu-operator:v26.3.2",
    "sandbox-device-plugin": "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.4.0",
}
PASSTHROUGH_CHAIN = ["vfio-manager", "sandbox-validator", "sandbox-device-plugin"]
VGPU_CHAIN = ["vgpu-device-manager", "sandbox-validator", "sandbox-device-plugin"]

# Per 1,000 GPU nodes, the container nodes with each fault (about 7% of the fleet failing or paused).
FAULTS_PER_1000 = (
    ("driver-crash", 12), ("driver-image-pull", 5), ("toolkit-crash", 10), ("device-plugin-crash", 8),
    ("nothing-allocatable", 5), ("workload-label-typo", 3), ("cuda-sample-fails", 8), ("untolerated-taint", 3),
    ("isolated-by-inventory", 10),
)
# Kept off by a taint on a node the inventory isolates (gpu_node_isolated): warnings, not failing.
ISOLATED = "isolated-by-inventory"
# What each fault breaks first, as the report must say.
FIRST_FAILED = {"driver-crash": "driver", "driver-image-pull": "driver", "toolkit-crash": "container-runtime",
                "device-plugin-crash": "device-plugin", "nothing-allocatable": "allocatable",
                "workload-label-typo": "workload-label", "cuda-sample-fails": "cuda-sample",
                "untolerated-taint": "driver"}


def node_name(i):
    return "gpu-%04d" % i


def plan(n, faults_per_1000=FAULTS_PER_1000):
    """{node name: (workload config, fault or None)} for ``n`` GPU nodes: every tenth a
    vm-passthrough node, every 25th a vm-vgpu one, the rest container nodes; the faults
    spread over the container nodes by a stride, so that they do not bunch up in name order."""
    configs = dict((node_name(i), om.VM_PASSTHROUGH if i % 10 == 8 else om.VM_VGPU if i % 25 == 9 else om.CONTAINER)
                   for i in range(n))
    container = [name for name, config in sorted(configs.items()) if config == om.CONTAINER]
    wanted = [kind for kind, per_1000 in faults_per_1000 for _index in range(max(1, per_1000 * n // 1000))]
    stride = 7 if len(container) % 7 else 11
    faults = dict((container[(k * stride) % len(container)], kind) for k, kind in enumerate(wanted[:len(container)]))
    return dict((name, (config, faults.get(name))) for name, config in configs.items())


def _with_images(pods):
    for pod in pods:
        operand_ = om.operand_of_pod(pod["metadata"]["labels"])
        pod["spec"]["containers"][0]["image"] = IMAGES[operand_.name]
    return pods


def _container_node(name, i, fault):
    """(node, pods) of one container GPU node with ``fault``."""
    labels = {om.ARCH_LABEL: "amd64", om.GPU_PRODUCT_LABEL: "NVIDIA-A10", om.DRIVER_VERSION_LABEL: DRIVER}
    gpus, taints, operands, overrides = 2, None, list(CONTAINER_CHAIN), {}
    stuck = dict((o.replace("-", "_"), {"init_waiting": "PodInitializing"}) for o in CONTAINER_CHAIN)
    if fault in ("driver-crash", "driver-image-pull"):
        gpus, overrides = 0, dict(stuck, driver={"waiting": "CrashLoopBackOff" if fault == "driver-crash"
                                                 else "ImagePullBackOff"})
        del labels[om.DRIVER_VERSION_LABEL]
    elif fault == "toolkit-crash":
        gpus = 0
        overrides = dict((k, v) for k, v in stuck.items() if k != "driver")
        overrides["container_toolkit"] = {"waiting": "CrashLoopBackOff"}
    elif fault == "device-plugin-crash":
        gpus, overrides = 0, {"device_plugin": {"waiting": "CrashLoopBackOff"}}
    elif fault == "nothing-allocatable":
        gpus = 0
    elif fault == "workload-label-typo":
        labels[om.WORKLOAD_CONFIG_LABEL] = "vm-passthru"
    elif fault in ("untolerated-taint", ISOLATED):
        gpus, taints, operands = 0, [TRAINING_TAINT], []
    obj = gpu_node(name, gpus=gpus, labels=labels, taints=taints, capacity={om.CONTAINER_RESOURCE: 2})
    return obj, chain_pods(name, operands, **overrides)


def cluster(n, faults_per_1000=FAULTS_PER_1000):
    """The snapshot gpu_node_check reads: ``n`` GPU nodes of plan(), n/20 CPU nodes, the
    operand pods and the operator's pod."""
    nodes, pods = [], [operator_pod()]
    pods[0]["spec"]["containers"][0]["image"] = IMAGES["gpu-operator"]
    for i, (name, (config, fault)) in enumerate(sorted(plan(n, faults_per_1000).items())):
        if config == om.VM_PASSTHROUGH:
            obj, node_pods = node(name, om.VM_PASSTHROUGH, allocatable={A10_PASSTHROUGH: 2}), \
                chain_pods(name, PASSTHROUGH_CHAIN)
        elif config == om.VM_VGPU:
            obj, node_pods = node(name, om.VM_VGPU, labels={om.VGPU_CONFIG_LABEL: "A10-12Q"},
                                  allocatable={A10_12Q: 4}), chain_pods(name, VGPU_CHAIN)
        else:
            obj, node_pods = _container_node(name, i, fault)
        obj["metadata"]["labels"].setdefault(om.ARCH_LABEL, "amd64")
        obj["status"]["nodeInfo"] = {"kubeletVersion": RKE2_PREVIOUS if i % 100 == 42 else RKE2}
        nodes.append(obj)
        pods.extend(_with_images(node_pods))
    for i in range(max(1, n // 20)):
        cpu = node("cpu-%03d" % i, gpu=False)
        cpu["status"]["nodeInfo"] = {"kubeletVersion": RKE2}
        nodes.append(cpu)
    return {"nodes": nodes, "pods": pods, "daemonsets": [], "clusterpolicies": [clusterpolicy(SANDBOX_SPEC)]}


def inputs(n, faults_per_1000=FAULTS_PER_1000):
    """gpu_verify_report's inputs (build_report's keyword arguments but the site) for ``n`` GPU
    nodes: gpu_node_check's result, and the waits' and the CUDA sample's as they register them
    when the operand wait and the allocatable wait ran out on the broken nodes."""
    snapshot = cluster(n, faults_per_1000)
    policy = nc.policy_from_inputs(snapshot["clusterpolicies"], {}, snapshot["daemonsets"])
    faults = plan(n, faults_per_1000)
    check = nc.check(snapshot, policy, isolated_nodes=sorted(name for name, (_config, f) in faults.items() if f == ISOLATED))
    check["elapsed"] = 0.9
    # The waits' default selection leaves out the GPU nodes kept off by a taint.
    tainted = ("untolerated-taint", ISOLATED)
    stuck = dict((name, dict(nc.first_broken_layer(r), workload_config=r["workload_config"]))
                 for name, r in check["nodes"].items() if r["gpu_node"] and nc.first_broken_layer(r)
                 and faults[name][1] not in tainted)
    readiness = {"failed": bool(stuck), "elapsed": 600.4, "diagnosis": stuck,
                 "msg": "operands: %d of %d nodes do not run their operand chain after 600 s" % (len(stuck), n)
                 if stuck else "",
                 "steps": [{"step": "operator", "done": True, "duration": 0.1,
                            "message": "Deployment gpu-operator/gpu-operator: 1/1 replicas available"},
                           {"step": "cluster-policy", "done": True, "duration": 0.0,
                            "message": "ClusterPolicy cluster-policy Ready (Reconciled)"},
                           {"step": "operands", "done": not stuck, "duration": 600.3,
                            "message": "%d of %d nodes run their operand chain" % (n - len(stuck), n)}]}
    container = dict((name, r) for name, r in check["nodes"].items()
                     if r["gpu_node"] and r["workload_config"] == om.CONTAINER and faults[name][1] not in tainted)
    alloc_nodes = dict((name, {"ready": bool(r["advertised"].get(om.CONTAINER_RESOURCE)),
                               "allocatable": r["advertised"].get(om.CONTAINER_RESOURCE, 0),
                               "capacity": r["capacity"].get(om.CONTAINER_RESOURCE, 0)})
                       for name, r in container.items())
    not_ready = sorted(name for name, entry in alloc_nodes.items() if not entry["ready"])
    allocatable = {"failed": bool(not_ready), "elapsed": 600.2, "nodes": alloc_nodes,
                   "msg": "%d of %d nodes without allocatable nvidia.com/gpu after 600 s" % (
                       len(not_ready), len(alloc_nodes)) if not_ready else "",
                   "diagnosis": dict((name, stuck[name]) for name in not_ready if name in stuck)}
    pods = []
    for name, entry in sorted(alloc_nodes.items()):
        if not entry["ready"]:
            continue
        if faults[name][1] == "cuda-sample-fails":
            pods.append({"node": name, "passed": False, "phase": "Failed", "reason": None, "log_tail": [
                "[Vector addition of 50000 elements]",
                "Failed to allocate device vector A (error code CUDA-capable device(s) is/are busy or unavailable)!"]})
        else:
            pods.append({"node": name, "passed": True, "phase": "Succeeded", "reason": None,
                         "log_tail": ["Test PASSED", "Done"]})
    failed_pods = [p for p in pods if not p["passed"]]
    cuda = {"failed": bool(failed_pods), "elapsed": 48.7, "pods": pods,
            "msg": "%d of %d sample pods failed" % (len(failed_pods), len(pods)) if failed_pods else ""}
    gate = {"changed": False, "elapsed": 0.4, "message": "step 5 (GPU Operator) is verified: step 6 may start",
            "observed": {"api_error": None, "nodes": dict((name, "Ready") for name in alloc_nodes)}}
    return {"node_check": check, "readiness": readiness, "allocatable_results": [allocatable], "cuda": cuda,
            "step_gate": gate}
