"""The wait modules' conditions and timeout diagnosis (module_utils/readiness.py) on
hand-built API objects."""
import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from tests.unit.wait_builders import (
    A10_12Q, A10_PASSTHROUGH, CONTAINER_CHAIN, NS, SANDBOX_SPEC, TRAINING_TAINT, cache, chain_pods, clusterpolicy,
    daemonset, deployment, gpu_node, helmchart, job, job_pod, node, operand_pod, operator_pod)

GPU = om.CONTAINER_RESOURCE


def default_policy(spec=None):
    return node_check.policy_from_inputs([clusterpolicy(spec)] if spec else [], {})


# ---------------------------------------------------------------- node selection

def mixed_fleet():
    return [
        gpu_node("gpu-container-1"),
        gpu_node("gpu-container-2", gpus=0),
        gpu_node("gpu-tainted-1", taints=[TRAINING_TAINT]),
        gpu_node("gpu-plugin-off", labels={om.deploy_label("device-plugin"): "false"}),
        gpu_node("gpu-isolated", labels={om.OPERANDS_LABEL: "false"}),
        gpu_node("gpu-mig", allocatable={"nvidia.com/mig-1g.5gb": 7}),
        node("gpu-passthrough-1", config=om.VM_PASSTHROUGH, allocatable={A10_PASSTHROUGH: 2}),
        node("cpu-1", gpu=False),
    ]


def test_default_selection_is_the_gpu_nodes_whose_device_plugin_produces_the_resource():
    selected, skipped, missing = rd.select_nodes(mixed_fleet(), GPU, default_policy())
    # Sandbox workloads are off: the passthrough label is ignored and the node runs container operands.
    assert selected == ["gpu-container-1", "gpu-container-2", "gpu-passthrough-1"]
    assert missing == []
    assert skipped == [
        {"node": "gpu-isolated", "reason": "it is isolated (nvidia.com/gpu.deploy.operands=false)"},
        {"node": "gpu-mig", "reason": "it advertises nvidia.com/mig-1g.5gb instead"},
        {"node": "gpu-plugin-off",
         "reason": "device-plugin is switched off here (nvidia.com/gpu.deploy.device-plugin=false)"},
        {"node": "gpu-tainted-1", "reason": "taint dedicated=training:NoSchedule is not tolerated by the operand DaemonSets"},
    ]


def test_a_taint_the_operand_daemonsets_tolerate_does_not_leave_a_node_out():
    tolerating = [daemonset(o, [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
                  for o in CONTAINER_CHAIN]
    fleet = [gpu_node("gpu-tainted-1", taints=[TRAINING_TAINT])]
    assert rd.select_nodes(fleet, GPU, default_policy(), daemonsets=tolerating)[0] == ["gpu-tainted-1"]
    done, detail = rd.operand_readiness_condition(NS)(
        cache(nodes=fleet, pods=chain_pods("gpu-tainted-1"), deployments=[deployment()],
              clusterpolicies=[clusterpolicy()], daemonsets=tolerating))
    assert done and list(detail["nodes"]) == ["gpu-tainted-1"] and detail["skipped"] == []


def test_with_sandbox_workloads_each_config_has_its_own_nodes():
    fleet = mixed_fleet() + [node("gpu-vgpu-1", config=om.VM_VGPU, labels={om.VGPU_CONFIG_LABEL: "A10-12Q"},
                                  allocatable={A10_12Q: 4})]
    policy = default_policy(SANDBOX_SPEC)
    selected, skipped, _missing = rd.select_nodes(fleet, A10_PASSTHROUGH, policy)
    assert selected == ["gpu-passthrough-1"]
    assert {"node": "gpu-container-1",
            "reason": "its workload config is container, which does not produce nvidia.com/GA102GL_A10"} in skipped
    assert rd.select_nodes(fleet, A10_12Q, policy)[0] == ["gpu-vgpu-1"]
    assert "gpu-passthrough-1" not in rd.select_nodes(fleet, GPU, policy)[0]


def test_a_vgpu_node_with_another_profile_is_left_out():
    fleet = [node("gpu-vgpu-1", config=om.VM_VGPU, allocatable={"nvidia.com/NVIDIA_A10-4Q": 12})]
    selected, skipped, _missing = rd.select_nodes(fleet, A10_12Q, default_policy(SANDBOX_SPEC))
    assert selected == [] and skipped == [{"node": "gpu-vgpu-1", "reason": "it advertises nvidia.com/NVIDIA_A10-4Q instead"}]


def test_an_operand_disabled_in_the_clusterpolicy_leaves_its_nodes_out():
    policy = default_policy({"devicePlugin": {"enabled": False}})
    selected, skipped, _missing = rd.select_nodes([gpu_node("gpu-1")], GPU, policy)
    assert selected == [] and skipped == [{"node": "gpu-1", "reason": "device-plugin is not enabled in the ClusterPolicy"}]


def test_explicit_selection_takes_the_nodes_given_and_names_the_missing_ones():
    fleet = mixed_fleet()
    assert rd.select_nodes(fleet, "example.com/fpga", default_policy(), ["cpu-1", "gpu-new"], explicit=True) == (
        ["cpu-1"], [], ["gpu-new"])
    selected, _skipped, _missing = rd.select_nodes(fleet, GPU, default_policy(), None, explicit=True)
    assert selected == sorted(n["metadata"]["name"] for n in fleet)


# ---------------------------------------------------------------- allocatable

def test_allocatable_waits_for_every_selected_node():
    condition = rd.allocatable_condition(GPU)
    done, detail = condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2", gpus=0)]))
    assert not done
    assert detail["ready"] == ["gpu-1"] and detail["wanted"] == 2
    assert detail["waiting"] == {"gpu-2": "allocatable nvidia.com/gpu: 0, wanted 1"}
    assert detail["nodes"]["gpu-2"] == {"allocatable": 0, "capacity": 0, "ready": False}
    assert detail["message"] == "1 of 2 wanted nodes have 1 nvidia.com/gpu allocatable"
    done, detail = condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")]))
    assert done and detail["ready"] == ["gpu-1", "gpu-2"]


def test_a_notready_node_does_not_count_even_with_gpus_advertised():
    done, detail = rd.allocatable_condition(GPU)(cache(nodes=[gpu_node("gpu-1", ready=False)]))
    assert not done
    assert detail["waiting"] == {"gpu-1": "NotReady: Kubelet stopped posting node status."}


def test_min_per_node_and_min_nodes():
    nodes = [gpu_node("gpu-1", gpus=4), gpu_node("gpu-2", gpus=2), gpu_node("gpu-3", gpus=1)]
    assert not rd.allocatable_condition(GPU, min_per_node=2)(cache(nodes=nodes))[0]
    done, detail = rd.allocatable_condition(GPU, min_per_node=2, min_nodes=2)(cache(nodes=nodes))
    assert done and detail["ready"] == ["gpu-1", "gpu-2"]
    assert not rd.allocatable_condition(GPU, min_per_node=4, min_nodes=2)(cache(nodes=nodes))[0]


def test_a_node_joining_raises_what_is_wanted():
    condition = rd.allocatable_condition(GPU)
    assert condition(cache(nodes=[gpu_node("gpu-1")]))[0]
    done, detail = condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-new", gpus=0)]))
    assert not done and detail["wanted"] == 2
    # min_nodes above the fleet waits for nodes to join.
    condition = rd.allocatable_condition(GPU, min_nodes=2)
    assert not condition(cache(nodes=[gpu_node("gpu-1")]))[0]
    assert condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-new")]))[0]


def test_no_selected_node_waits_unless_allowed():
    nodes = [node("cpu-1", gpu=False)]
    done, detail = rd.allocatable_condition(GPU)(cache(nodes=nodes))
    assert not done and detail["message"] == "no node selected for nvidia.com/gpu"
    assert rd.allocatable_condition(GPU, allow_no_nodes=True)(cache(nodes=nodes))[0]
    assert rd.allocatable_condition(GPU, min_nodes=0)(cache(nodes=nodes))[0]


def test_named_nodes_not_yet_joined_are_waited_for():
    condition = rd.allocatable_condition(GPU, names=["gpu-1", "gpu-9"], explicit=True)
    done, detail = condition(cache(nodes=[gpu_node("gpu-1")]))
    assert not done and detail["waiting"] == {"gpu-9": "not in the cluster"} and detail["wanted"] == 2
    assert condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-9")]))[0]


def test_the_clusterpolicy_in_the_cache_decides_the_default_selection():
    condition = rd.allocatable_condition(A10_PASSTHROUGH)
    nodes = [node("gpu-passthrough-1", config=om.VM_PASSTHROUGH, allocatable={A10_PASSTHROUGH: 2})]
    assert not condition(cache(nodes=nodes, clusterpolicies=[]))[0]
    assert condition(cache(nodes=nodes, clusterpolicies=[clusterpolicy(SANDBOX_SPEC)]))[0]


def test_a_node_whose_runtime_chain_broke_does_not_count_whatever_it_advertises():
    nodes = [gpu_node("gpu-container-1"), gpu_node("gpu-container-2")]
    healthy = chain_pods("gpu-container-1")
    no_toolkit = healthy + chain_pods("gpu-container-2", container_toolkit={"ready": False, "waiting": "CrashLoopBackOff"})
    condition = rd.allocatable_condition(GPU)
    done, detail = condition(cache(nodes=nodes, pods=no_toolkit, clusterpolicies=[clusterpolicy()]))
    assert not done and detail["ready"] == ["gpu-container-1"]
    assert detail["nodes"]["gpu-container-2"] == {"allocatable": 2, "capacity": 2, "ready": False}
    assert detail["waiting"] == {"gpu-container-2": "container-runtime (container-toolkit): CrashLoopBackOff; "
                                                    "the 2 nvidia.com/gpu it advertises are not usable"}
    no_driver = healthy + chain_pods("gpu-container-2", CONTAINER_CHAIN[1:])
    done, detail = condition(cache(nodes=nodes, pods=no_driver, clusterpolicies=[clusterpolicy()]))
    assert not done and detail["waiting"]["gpu-container-2"].startswith("driver (driver): no pod; ")
    unplugged = [gpu_node("gpu-container-1"), gpu_node("gpu-container-2", gpus=0)]
    done, detail = condition(cache(nodes=unplugged, pods=no_driver, clusterpolicies=[clusterpolicy()]))
    assert detail["waiting"]["gpu-container-2"] == "driver (driver): no pod"
    # Layers above the device plugin do not make the GPUs unusable.
    no_exporter = healthy + chain_pods("gpu-container-2", dcgm_exporter={"ready": False, "waiting": "CrashLoopBackOff"})
    assert condition(cache(nodes=nodes, pods=no_exporter, clusterpolicies=[clusterpolicy()]))[0]
    # Without a ClusterPolicy the operator manages no chain there: the count alone decides.
    assert condition(cache(nodes=nodes, pods=no_toolkit, clusterpolicies=[]))[0]
    assert condition(cache(nodes=nodes, pods=healthy + chain_pods("gpu-container-2"),
                           clusterpolicies=[clusterpolicy()]))[0]


# ---------------------------------------------------------------- diagnosis

def test_diagnosis_names_the_lowest_broken_layer_per_node():
    nodes = [gpu_node("gpu-1", gpus=0), gpu_node("gpu-2", gpus=0), gpu_node("gpu-3", gpus=0, ready=False),
             gpu_node("gpu-4", gpus=1)]
    pods = (chain_pods("gpu-1", container_toolkit={"waiting": "CrashLoopBackOff"})
            + chain_pods("gpu-2", ["driver", "container-toolkit", "operator-validator", "dcgm-exporter",
                                   "gpu-feature-discovery"])
            + [operand_pod("device-plugin", "gpu-2", unschedulable="0/6 nodes are available: 1 Too many pods.")]
            + chain_pods("gpu-3") + chain_pods("gpu-4"))
    result = rd.diagnose(nodes, pods, default_policy(), ["gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-9"], GPU, 2)
    assert (result["gpu-1"]["layer"], result["gpu-1"]["operand"], result["gpu-1"]["reason"]) == (
        om.LAYER_RUNTIME, "container-toolkit", "CrashLoopBackOff")
    assert [f["layer"] for f in result["gpu-1"]["layer_failures"]] == [om.LAYER_RUNTIME, om.LAYER_ALLOCATABLE]
    assert (result["gpu-2"]["layer"], result["gpu-2"]["operand"]) == (om.LAYER_DEVICE_PLUGIN, "device-plugin")
    assert result["gpu-2"]["reason"] == "Pending: 0/6 nodes are available: 1 Too many pods."
    assert (result["gpu-3"]["layer"], result["gpu-3"]["reason"]) == (
        rd.LAYER_NODE, "NotReady: Kubelet stopped posting node status.")
    assert (result["gpu-4"]["layer"], result["gpu-4"]["operand"], result["gpu-4"]["reason"]) == (
        om.LAYER_ALLOCATABLE, "device-plugin", "allocatable nvidia.com/gpu: 1 (capacity 1), fewer than 2")
    assert result["gpu-9"]["reason"] == "the node is not in the cluster"
    text = rd.diagnosis_text(result)
    assert text.startswith("gpu-1: container-runtime (container-toolkit): CrashLoopBackOff; gpu-2: device-plugin")
    assert rd.diagnosis_text(result, most=2).endswith("; and 3 more")


def test_device_plugin_without_toolkit_is_a_runtime_failure_not_an_allocatable_one():
    nodes = [gpu_node("gpu-container-2", gpus=2)]
    pods = chain_pods("gpu-container-2", container_toolkit={"ready": False, "waiting": "CrashLoopBackOff"})
    result = rd.diagnose(nodes, pods, default_policy(), ["gpu-container-2"], GPU, 1)
    assert result["gpu-container-2"]["layer"] == om.LAYER_RUNTIME
    assert result["gpu-container-2"]["operand"] == "container-toolkit"


def test_a_healthy_node_has_no_broken_layer():
    result = rd.diagnose([gpu_node("gpu-1")], chain_pods("gpu-1"), default_policy(), ["gpu-1"], GPU, 1)
    assert result["gpu-1"]["layer"] is None
    assert rd.diagnosis_text(result) == (
        "gpu-1: no broken layer found (operands Running and Ready, nvidia.com/gpu advertised)")


# ---------------------------------------------------------------- operand readiness

def readiness_cache(nodes, pods, deployments=None, clusterpolicies=None):
    return cache(nodes=nodes, pods=pods,
                 deployments=[deployment()] if deployments is None else deployments,
                 clusterpolicies=[clusterpolicy()] if clusterpolicies is None else clusterpolicies)


def test_the_operator_step_comes_first_and_shows_its_pods_reasons():
    condition = rd.operand_readiness_condition(NS)
    done, detail = condition(readiness_cache([gpu_node("gpu-1")], [operator_pod("ImagePullBackOff")],
                                             deployments=[deployment(available=False)]))
    assert not done and detail["step"] == rd.STEP_OPERATOR
    assert detail["operator_pods"] == {"gpu-operator-6c9b8d7f5-abcde": "ImagePullBackOff"}
    assert detail["steps"][rd.STEP_OPERATOR]["message"] == (
        'Deployment gpu-operator/gpu-operator: 0/1 replicas available: ReplicaSet "gpu-operator-6c9b8d7f5" is progressing.')
    assert detail["steps"][rd.STEP_CLUSTER_POLICY] == {"done": False, "message": "waiting for operator"}
    done, detail = condition(readiness_cache([], [], deployments=[]))
    assert detail["steps"][rd.STEP_OPERATOR]["message"] == "Deployment gpu-operator/gpu-operator: Deployment not found"


@pytest.mark.parametrize("kwargs, message", [
    # The new ReplicaSet's pod not ready yet: the old one keeps the Deployment Available.
    (dict(updated=0, old=1), "rollout in progress: 0 of 1 replicas updated"),
    (dict(updated=1, old=1), "rollout in progress: 1 old replicas pending termination"),
])
def test_an_operator_deployment_mid_upgrade_is_not_available(kwargs, message):
    # Condition Available=True, availableReplicas >= 1: what the old check accepted.
    mid_upgrade = deployment(**kwargs)
    assert mid_upgrade["status"]["availableReplicas"] >= 1
    assert rd.deployment_available(mid_upgrade) == (False, message)


def test_an_operator_deployment_whose_updated_replicas_are_not_available_is_not_available():
    rolled = deployment()
    rolled["status"]["availableReplicas"] = 0
    assert rd.deployment_available(rolled) == (False, "0/1 replicas available")


def test_a_deployment_whose_new_generation_is_not_observed_is_not_available():
    assert rd.deployment_available(deployment(generation=3, observed=2)) == (
        False, "rollout of generation 3 not observed yet")
    assert rd.deployment_available(deployment())[0]


def test_the_clusterpolicy_step_with_and_without_reconciled():
    nodes, pods = [gpu_node("gpu-1")], chain_pods("gpu-1")
    no_gpus = clusterpolicy(reason="NoGPUNodes")
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache(nodes, pods, clusterpolicies=[]))
    assert not done and detail["step"] == rd.STEP_CLUSTER_POLICY
    assert detail["steps"][rd.STEP_CLUSTER_POLICY]["message"] == "no ClusterPolicy"
    assert rd.operand_readiness_condition(NS)(readiness_cache(nodes, pods, clusterpolicies=[no_gpus]))[0]
    done, detail = rd.operand_readiness_condition(NS, require_reconciled=True)(
        readiness_cache(nodes, pods, clusterpolicies=[no_gpus]))
    assert not done and detail["steps"][rd.STEP_CLUSTER_POLICY]["message"] == (
        "ClusterPolicy cluster-policy: Ready=True reason NoGPUNodes: ClusterPolicy is ready")
    assert rd.operand_readiness_condition(NS, require_reconciled=True)(readiness_cache(nodes, pods))[0]
    assert not rd.clusterpolicy_ready(clusterpolicy(conditions=False), True)[0]


def test_each_node_waits_for_its_chain_in_order():
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    pods = chain_pods("gpu-1") + chain_pods("gpu-2", container_toolkit={"init_waiting": "CrashLoopBackOff"})
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache(nodes, pods))
    assert not done and detail["step"] == rd.STEP_OPERANDS
    assert detail["nodes"]["gpu-1"]["ready"] and detail["nodes"]["gpu-1"]["chain"] == CONTAINER_CHAIN
    stuck = detail["nodes"]["gpu-2"]
    assert (stuck["stuck_at"], stuck["layer"], stuck["reason"]) == ("container-toolkit", om.LAYER_RUNTIME,
                                                                    "Init:CrashLoopBackOff: init")
    assert stuck["ready_operands"] == ["driver", "operator-validator", "device-plugin", "dcgm-exporter",
                                       "gpu-feature-discovery"]
    assert detail["steps"][rd.STEP_OPERANDS]["message"] == "1 of 2 nodes run their operand chain"


def test_a_missing_operand_pod_and_a_validation_operand_are_waited_for():
    pods = chain_pods("gpu-1", [o for o in CONTAINER_CHAIN if o != "operator-validator"])
    detail = rd.operand_readiness_condition(NS)(readiness_cache([gpu_node("gpu-1")], pods))[1]
    assert (detail["nodes"]["gpu-1"]["stuck_at"], detail["nodes"]["gpu-1"]["layer"],
            detail["nodes"]["gpu-1"]["reason"]) == ("operator-validator", "validation", "no pod")


def test_switched_off_operands_and_a_preinstalled_driver_are_not_waited_for():
    # pre-installed: k8s-driver-manager (driver.enabled=true) found a working host driver.
    switches = {om.deploy_label("driver"): om.DEPLOY_PRE_INSTALLED, om.deploy_label("dcgm-exporter"): "false"}
    node_ = gpu_node("gpu-1", labels=switches)
    chain = ["container-toolkit", "operator-validator", "device-plugin", "gpu-feature-discovery"]
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache([node_], chain_pods("gpu-1", chain)))
    assert done and detail["nodes"]["gpu-1"]["chain"] == chain and detail["step"] is None


def test_a_driver_disabled_in_the_clusterpolicy_is_not_waited_for():
    chain = CONTAINER_CHAIN[1:]
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache(
        [gpu_node("gpu-1")], chain_pods("gpu-1", chain), clusterpolicies=[clusterpolicy({"driver": {"enabled": False}})]))
    assert done and detail["nodes"]["gpu-1"]["chain"] == chain


def in_init(pod, steps, at):
    """``pod`` sitting in init container ``at`` of ``steps`` (those before it done)."""
    pod["status"] = {"phase": "Pending", "initContainerStatuses": [
        {"name": name, "ready": False,
         "state": {"terminated": {"exitCode": 0}} if index < steps.index(at) else (
             {"running": {}} if name == at else {"waiting": {"reason": "PodInitializing"}})}
        for index, name in enumerate(steps)]}
    return pod


def test_a_rollout_stuck_at_the_validator_names_the_device_plugin_below_it():
    # The operator-validator turns Ready only once the device plugin advertises GPUs: the
    # first operand of the chain that is not up is the validator, the cause is lower.
    validator = in_init(operand_pod("operator-validator", "gpu-1"),
                        ["driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"],
                        "plugin-validation")
    pods = chain_pods("gpu-1", ["driver", "container-toolkit", "dcgm-exporter", "gpu-feature-discovery"]) + [
        validator, operand_pod("device-plugin", "gpu-1", waiting="CrashLoopBackOff")]
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache([gpu_node("gpu-1", gpus=0)], pods))
    stuck = detail["nodes"]["gpu-1"]
    assert not done
    assert (stuck["stuck_at"], stuck["layer"], stuck["reason"]) == (
        "device-plugin", om.LAYER_DEVICE_PLUGIN, "CrashLoopBackOff")
    diagnosis = rd.diagnose([gpu_node("gpu-1", gpus=0)], pods, default_policy(), ["gpu-1"], GPU)
    assert (diagnosis["gpu-1"]["layer"], diagnosis["gpu-1"]["operand"]) == (om.LAYER_DEVICE_PLUGIN, "device-plugin")


def test_a_device_plugin_waiting_at_its_gate_is_diagnosed_at_the_gate():
    # The validator itself cannot start (its image): the device plugin sits in its
    # toolkit-validation init container waiting for toolkit-ready.
    plugin = in_init(operand_pod("device-plugin", "gpu-1"), ["toolkit-validation", "config-manager-init"],
                     "toolkit-validation")
    pods = chain_pods("gpu-1", ["driver", "container-toolkit"]) + [
        operand_pod("operator-validator", "gpu-1", init_waiting="ImagePullBackOff"), plugin]
    detail = rd.operand_readiness_condition(NS)(readiness_cache([gpu_node("gpu-1", gpus=0)], pods))[1]
    stuck = detail["nodes"]["gpu-1"]
    assert (stuck["stuck_at"], stuck["layer"]) == ("device-plugin", om.LAYER_DEVICE_PLUGIN)
    assert stuck["reason"] == (
        "Init:0/2: toolkit-validation waits for /run/nvidia/validations/toolkit-ready, which operator-validator "
        "writes (operator-validator: Init:ImagePullBackOff: init)")


MIG_CHANGE = dict((om.deploy_label(o), "paused-for-mig-change")
                  for o in ["device-plugin", "dcgm-exporter", "gpu-feature-discovery"])


def test_a_node_whose_operands_are_paused_is_waited_for_not_skipped():
    paused = gpu_node("gpu-1", gpus=0, labels=MIG_CHANGE)
    pods = chain_pods("gpu-1", ["driver", "container-toolkit", "operator-validator"])
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache([paused], pods))
    assert not done and detail["skipped"] == []
    stuck = detail["nodes"]["gpu-1"]
    assert (stuck["ready"], stuck["stuck_at"]) == (False, "device-plugin")
    assert stuck["reason"].startswith("paused: nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change")
    # Back to "true", the pods return: the wait ends.
    back = gpu_node("gpu-1")
    assert rd.operand_readiness_condition(NS)(readiness_cache([back], chain_pods("gpu-1")))[0]
    diagnosis = rd.diagnose([paused], pods, default_policy(), ["gpu-1"], GPU)
    assert diagnosis["gpu-1"]["operand"] == "device-plugin" and diagnosis["gpu-1"]["reason"].startswith("paused: ")


def test_allocatable_waits_for_a_paused_node_whatever_it_advertises():
    # The kubelet may still show the GPUs a paused device plugin registered: they are
    # about to change (a MIG change) and do not count.
    paused = gpu_node("gpu-1", gpus=2, labels=MIG_CHANGE)
    selected, skipped, _missing = rd.select_nodes([paused], GPU, default_policy())
    assert (selected, skipped) == (["gpu-1"], [])
    done, detail = rd.allocatable_condition(GPU)(cache(nodes=[paused]))
    assert not done and detail["nodes"]["gpu-1"]["ready"] is False
    assert detail["waiting"]["gpu-1"] == (
        "paused: nvidia.com/gpu.deploy.dcgm-exporter=paused-for-mig-change, "
        "nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change, "
        "nvidia.com/gpu.deploy.gpu-feature-discovery=paused-for-mig-change")


def test_allocatable_waits_for_a_vgpu_config_to_be_applied():
    def vgpu(state):
        return node("gpu-vgpu-1", config=om.VM_VGPU, allocatable={A10_12Q: 4},
                    labels={om.VGPU_CONFIG_LABEL: "A10-12Q", om.VGPU_CONFIG_STATE_LABEL: state})
    condition = rd.allocatable_condition(A10_12Q)
    spec = [clusterpolicy(SANDBOX_SPEC)]
    done, detail = condition(cache(nodes=[vgpu("pending")], clusterpolicies=spec))
    assert not done and detail["waiting"] == {"gpu-vgpu-1": "nvidia.com/vgpu.config.state=pending"}
    assert not condition(cache(nodes=[vgpu("failed")], clusterpolicies=spec))[0]
    assert condition(cache(nodes=[vgpu("success")], clusterpolicies=spec))[0]


def test_an_operand_whose_deploy_label_was_removed_is_waited_for_and_the_fix_named():
    unlabelled = gpu_node("gpu-1")
    del unlabelled["metadata"]["labels"][om.deploy_label("device-plugin")]
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache([unlabelled], chain_pods("gpu-1")))
    stuck = detail["nodes"]["gpu-1"]
    assert not done and stuck["stuck_at"] == "device-plugin"
    assert stuck["reason"].endswith("Set nvidia.com/gpu.deploy.device-plugin=true")


def test_vm_nodes_wait_for_their_own_chains():
    nodes = [node("gpu-passthrough-1", config=om.VM_PASSTHROUGH),
             node("gpu-vgpu-1", config=om.VM_VGPU, labels={om.VGPU_CONFIG_LABEL: "A10-12Q"})]
    pods = (chain_pods("gpu-passthrough-1", ["vfio-manager", "sandbox-validator", "sandbox-device-plugin"])
            + chain_pods("gpu-vgpu-1", ["vgpu-device-manager", "sandbox-validator"]))
    done, detail = rd.operand_readiness_condition(NS)(
        readiness_cache(nodes, pods, clusterpolicies=[clusterpolicy(SANDBOX_SPEC)]))
    assert not done
    assert detail["nodes"]["gpu-passthrough-1"]["ready"]
    assert detail["nodes"]["gpu-passthrough-1"]["chain"] == ["vfio-manager", "sandbox-validator", "sandbox-device-plugin"]
    assert (detail["nodes"]["gpu-vgpu-1"]["stuck_at"], detail["nodes"]["gpu-vgpu-1"]["layer"]) == (
        "sandbox-device-plugin", om.LAYER_DEVICE_PLUGIN)


def test_tainted_and_isolated_gpu_nodes_are_skipped_unless_named():
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-tainted-1", taints=[TRAINING_TAINT]),
             gpu_node("gpu-isolated", labels={om.OPERANDS_LABEL: "false"}), node("cpu-1", gpu=False)]
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache(nodes, chain_pods("gpu-1")))
    assert done and sorted(detail["nodes"]) == ["gpu-1"]
    assert [s["node"] for s in detail["skipped"]] == ["gpu-isolated", "gpu-tainted-1"]
    assert "dedicated=training:NoSchedule" in detail["skipped"][1]["reason"]
    done, detail = rd.operand_readiness_condition(NS, names=["gpu-tainted-1", "gpu-9"], explicit=True)(
        readiness_cache(nodes, chain_pods("gpu-1")))
    assert not done
    assert detail["nodes"]["gpu-tainted-1"]["reason"] == "no pod: taint dedicated=training:NoSchedule not tolerated"
    assert detail["nodes"]["gpu-9"]["reason"] == "the node is not in the cluster"


def test_no_gpu_node_waits_unless_allowed():
    fleet = [node("cpu-1", gpu=False)]
    done, detail = rd.operand_readiness_condition(NS)(readiness_cache(fleet, []))
    assert not done and detail["steps"][rd.STEP_OPERANDS]["message"] == "no GPU node selected"
    assert rd.operand_readiness_condition(NS, allow_no_nodes=True)(readiness_cache(fleet, []))[0]


def test_step_times_record_when_each_step_and_node_was_first_done():
    condition = rd.operand_readiness_condition(NS)
    times = rd.StepTimes()
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    times(condition(readiness_cache(nodes, [], deployments=[deployment(available=False)]))[1], 0.0)
    times(condition(readiness_cache(nodes, [], clusterpolicies=[]))[1], 2.0)
    times(condition(readiness_cache(nodes, chain_pods("gpu-1")))[1], 5.5)
    times(condition(readiness_cache(nodes, chain_pods("gpu-1") + chain_pods("gpu-2")))[1], 9.25)
    assert times.durations() == [
        {"step": "operator", "done_after": 2.0, "duration": 2.0},
        {"step": "cluster-policy", "done_after": 5.5, "duration": 3.5},
        {"step": "operands", "done_after": 9.25, "duration": 3.75},
    ]
    assert times.node_done == {"gpu-1": 5.5, "gpu-2": 9.25}


# ---------------------------------------------------------------- CUDA sample

def test_the_sample_pod_is_nvidias_vectoradd_unprivileged_and_pinned_by_affinity():
    pod = rd.sample_pod("cuda-vectoradd-gpu-1", "default", "run1", resource=A10_PASSTHROUGH, count_=2, node="gpu-1",
                        runtime_class_name="nvidia", tolerations=[{"key": "dedicated", "operator": "Exists"}])
    spec = pod["spec"]
    container = spec["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
    assert container["resources"] == {"limits": {A10_PASSTHROUGH: "2"}}
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                            "capabilities": {"drop": ["ALL"]}}
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"}
    assert spec["restartPolicy"] == "Never" and spec["runtimeClassName"] == "nvidia"
    assert "nodeName" not in spec
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                   {"key": "dedicated", "operator": "Exists"}]
    assert rd.is_sample_pod(pod) and pod["metadata"]["labels"][rd.SAMPLE_LABEL_RUN] == "run1"
    single = rd.sample_pod("cuda-vectoradd", "default", "run1")
    assert "affinity" not in single["spec"] and "runtimeClassName" not in single["spec"]
    assert single["spec"]["containers"][0]["resources"] == {"limits": {GPU: "1"}}


def test_sample_pod_names_are_dns_labels():
    assert rd.sample_pod_name("cuda-vectoradd") == "cuda-vectoradd"
    assert rd.sample_pod_name("cuda-vectoradd", "GPU_Node.1.lab") == "cuda-vectoradd-gpu-node-1-lab"
    long_name = rd.sample_pod_name("cuda-vectoradd", "n" * 80)
    assert len(long_name) == 63


def test_sample_nodes_are_ready_schedulable_nodes_with_enough_of_the_resource():
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2", gpus=1), gpu_node("gpu-3", ready=False),
             gpu_node("gpu-4", unschedulable=True), node("cpu-1", gpu=False)]
    assert rd.sample_nodes(nodes, GPU, 2) == (["gpu-1"], [
        {"node": "gpu-3", "reason": "NotReady: Kubelet stopped posting node status."},
        {"node": "gpu-4", "reason": "cordoned"}])
    assert rd.sample_nodes(nodes, GPU, 1, names=["gpu-2", "cpu-1"]) == (
        ["gpu-2"], [{"node": "cpu-1", "reason": "allocatable nvidia.com/gpu: 0"}])


def sample(phase="Pending", terminated=None, waiting=None, unschedulable=None, node_name="gpu-1"):
    pod = rd.sample_pod("cuda-vectoradd", "default", "run1")
    pod["spec"]["nodeName"] = node_name
    status = {"phase": phase}
    if terminated is not None:
        status["containerStatuses"] = [{"name": "cuda-vectoradd", "ready": False, "state": {"terminated": terminated}}]
    if waiting:
        status["containerStatuses"] = [{"name": "cuda-vectoradd", "ready": False,
                                        "state": {"waiting": {"reason": waiting, "message": "back-off pulling"}}}]
    if unschedulable:
        del pod["spec"]["nodeName"]
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": unschedulable}]
    pod["status"] = status
    return pod


@pytest.mark.parametrize("pod, expected", [
    (sample("Succeeded", {"exitCode": 0, "reason": "Completed"}), (True, "Completed")),
    (sample("Failed", {"exitCode": 1, "reason": "Error"}), (True, "Error, exit code 1")),
    (sample(waiting="InvalidImageName"), (True, "InvalidImageName: back-off pulling")),
    # The kubelet retries these: a mirror that comes up, a runtime back from its restart.
    (sample(waiting="ImagePullBackOff"), (False, "ImagePullBackOff")),
    (sample(waiting="CreateContainerError"), (False, "CreateContainerError")),
    (sample(waiting="ContainerCreating"), (False, "ContainerCreating")),
    (sample(unschedulable="0/6 nodes are available: 6 Insufficient nvidia.com/gpu."),
     (False, "Pending: 0/6 nodes are available: 6 Insufficient nvidia.com/gpu.")),
    (None, (True, "the pod was deleted")),
])
def test_sample_state(pod, expected):
    assert rd.sample_state(pod) == expected


def test_the_sample_condition_holds_when_every_pod_has_ended():
    condition = rd.sample_condition("default", ["cuda-vectoradd"])
    done, detail = condition(cache(pods=[sample("Running")]))
    assert not done and detail["pods"]["cuda-vectoradd"]["phase"] == "Running"
    done, detail = condition(cache(pods=[sample("Succeeded", {"exitCode": 0, "reason": "Completed"})]))
    assert done and detail["pods"]["cuda-vectoradd"] == {"finished": True, "reason": "Completed",
                                                         "phase": "Succeeded", "node": "gpu-1", "exit_code": 0}


def test_the_sample_condition_follows_each_event_in_one_cache():
    """The engine keeps one cache and replaces a pod's object on each event: one condition,
    evaluated after every event, reports each pod's latest object, a deletion and a re-creation."""
    condition = rd.sample_condition("default", ["cuda-vectoradd", "other"])
    other = sample("Running", node_name="gpu-2")
    other["metadata"]["name"] = "other"
    live = cache(pods=[sample("Running"), other])
    done, detail = condition(live)
    assert not done and detail["pods"]["other"]["phase"] == "Running"
    ended = sample("Succeeded", {"exitCode": 0, "reason": "Completed"}, node_name="gpu-2")
    ended["metadata"]["name"] = "other"
    live["pods"]["default/other"] = ended
    done, detail = condition(live)
    assert not done
    assert detail["pods"]["other"]["reason"] == "Completed"
    assert detail["pods"]["cuda-vectoradd"]["phase"] == "Running"
    del live["pods"]["default/cuda-vectoradd"]
    done, detail = condition(live)
    assert done and detail["pods"]["cuda-vectoradd"]["reason"] == "the pod was deleted"
    live["pods"]["default/cuda-vectoradd"] = sample("Pending")
    done, detail = condition(live)
    assert not done and detail["pods"]["cuda-vectoradd"]["phase"] == "Pending"


def test_the_sample_condition_keeps_the_end_of_a_pod_deleted_after_it_ended():
    """cuda_sample deletes each sample once it ended and its log is read: the pod's end
    stays its state; a pod deleted before it ended is reported as deleted, and a pod that
    comes back under the name is read again."""
    condition = rd.sample_condition("default", ["cuda-vectoradd", "other"])
    other = sample("Running", node_name="gpu-2")
    other["metadata"]["name"] = "other"
    live = cache(pods=[sample("Failed", {"exitCode": 1, "reason": "Error"}), other])
    done, detail = condition(live)
    assert not done and detail["pods"]["cuda-vectoradd"]["phase"] == "Failed"
    del live["pods"]["default/cuda-vectoradd"]
    done, detail = condition(live)
    assert not done and detail["pods"]["cuda-vectoradd"] == {"finished": True, "reason": "Error, exit code 1",
                                                             "phase": "Failed", "node": "gpu-1", "exit_code": 1}
    del live["pods"]["default/other"]
    done, detail = condition(live)
    assert done and detail["pods"]["other"] == {"finished": True, "reason": "the pod was deleted", "phase": None,
                                                "node": None, "exit_code": None}
    live["pods"]["default/cuda-vectoradd"] = sample("Pending")
    done, detail = condition(live)
    assert not done and detail["pods"]["cuda-vectoradd"]["phase"] == "Pending"


def test_sample_verdict_and_log_tail():
    log = "[Vector addition of 50000 elements]\nCUDA kernel launch\nTest PASSED\nDone\n"
    assert rd.sample_verdict("Succeeded", log, "Test PASSED", 0) == (True, None)
    assert rd.sample_verdict("Succeeded", "Test FAILED\n", "Test PASSED", 0) == (False, "log lacks 'Test PASSED'")
    assert rd.sample_verdict("Failed", log, "Test PASSED", 1) == (False, "phase Failed")
    assert rd.sample_verdict("Succeeded", None, "Test PASSED", 0) == (False, "log not readable")
    assert rd.sample_verdict("Succeeded", log, r"^Test PASSED$", 0) == (True, None)
    assert rd.log_tail(log, 2) == ["Test PASSED", "Done"]


def test_sample_verdict_needs_exit_code_0_and_the_planned_node():
    log = "Test PASSED\n"
    # The log alone is not the sample's word: a Succeeded phase with a non-zero or no exit code fails.
    assert rd.sample_verdict("Succeeded", log, "Test PASSED", 3) == (False, "exit code 3")
    assert rd.sample_verdict("Succeeded", log, "Test PASSED", None) == (False, "exit code not reported")
    # A per-node sample that ran elsewhere says nothing of its node.
    assert rd.sample_verdict("Succeeded", log, "Test PASSED", 0, "gpu-2", "gpu-1") == (
        False, "ran on gpu-2, not on gpu-1, the node it was for")
    assert rd.sample_verdict("Succeeded", log, "Test PASSED", 0, "gpu-1", "gpu-1") == (True, None)
    # One pod anywhere: no node was planned.
    assert rd.sample_verdict("Succeeded", log, "Test PASSED", 0, "gpu-2", None) == (True, None)


# ---------------------------------------------------------------- HelmChart install

def chart_state(chart=None, jobs=(), pods=()):
    return rd.helmchart_condition("gpu-operator", "kube-system")(
        cache(helmcharts=[chart] if chart else [], jobs=list(jobs), pods=list(pods)))


def test_helmchart_waits_for_the_chart_and_its_job():
    assert chart_state()[1]["message"] == "HelmChart kube-system/gpu-operator not found"
    done, detail = chart_state(helmchart())
    assert not done and detail["message"] == "helm-controller has not taken up the HelmChart yet (no status.jobName)"
    done, detail = chart_state(helmchart(job_name="helm-install-gpu-operator"))
    assert not done and detail["message"] == "helm-controller has not created Job helm-install-gpu-operator yet"
    done, detail = chart_state(helmchart(job_name="helm-install-gpu-operator"), [job()], [job_pod()])
    assert not done and detail["message"] == "Job helm-install-gpu-operator running: pod helm-install-gpu-operator-x7k2p Running"
    done, detail = chart_state(helmchart(job_name="helm-install-gpu-operator"), [job(complete=True)])
    assert done and not detail["failed"] and detail["message"] == "Job helm-install-gpu-operator complete"


def test_a_failed_condition_on_the_chart_ends_the_wait_at_once():
    done, detail = chart_state(helmchart(failed=("Job create failed", "Failed to generate Job: bad values")))
    assert done and detail["failed"]
    assert detail["message"] == ("HelmChart kube-system/gpu-operator Failed: Job create failed: "
                                 "Failed to generate Job: bad values")


def test_a_failed_attempt_ends_the_wait_at_once_with_the_pod_to_read():
    crashing = job_pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, restarts=3,
                       last_state={"terminated": {"exitCode": 1, "reason": "Error"}})
    done, detail = chart_state(helmchart(job_name="helm-install-gpu-operator"), [job()], [crashing])
    assert done and detail["failed"]
    assert (detail["pod"], detail["container"], detail["previous"]) == ("helm-install-gpu-operator-x7k2p", "helm", True)
    assert detail["message"] == ("Job helm-install-gpu-operator: pod helm-install-gpu-operator-x7k2p: "
                                 "Error, exit code 1 (restarted 3 times)")
    exited = job_pod(state={"terminated": {"exitCode": 1, "reason": "Error"}})
    done, detail = chart_state(helmchart(job_name="helm-install-gpu-operator"), [job()], [exited])
    assert done and detail["previous"] is False and detail["message"].endswith("Error, exit code 1")
    failed_pod = job_pod(phase="Failed", state={"terminated": {"exitCode": 1, "reason": "Error"}})
    chart = helmchart(job_name="helm-install-gpu-operator")
    assert chart_state(chart, [job(failed=1)], [failed_pod])[1]["failed"]
    done, detail = chart_state(chart, [job(failed=2)])
    assert done and detail["message"] == "Job helm-install-gpu-operator failed: 2 failed attempts"


def test_pods_of_a_replaced_job_are_not_this_jobs_attempts():
    old_pod = job_pod(job_uid="old-uid", state={"terminated": {"exitCode": 1, "reason": "Error"}})
    done, detail = chart_state(helmchart(job_name="helm-install-gpu-operator"), [job(uid="new-uid")], [old_pod])
    assert not done and detail["message"] == "Job helm-install-gpu-operator has no pod yet"


def test_a_job_older_than_the_charts_last_spec_change_is_waited_past():
    chart = helmchart(job_name="helm-install-gpu-operator", spec_time="2026-11-30T10:05:00Z")
    done, detail = chart_state(chart, [job(complete=True, created="2026-11-30T10:00:00Z")])
    assert not done
    assert detail["message"] == ("Job helm-install-gpu-operator (created 2026-11-30T10:00:00Z) predates the HelmChart's "
                                 "last change (2026-11-30T10:05:00Z): waiting for helm-controller to replace it")
    assert chart_state(chart, [job(complete=True, created="2026-11-30T10:05:00Z")])[0]
    assert chart_state(chart, [job(complete=True, created="2026-11-30T10:05:02Z")])[0]


def test_spec_changed_at_reads_only_spec_owning_entries():
    chart = helmchart(spec_time="2026-11-30T10:05:00Z")
    chart["metadata"]["managedFields"].append({"manager": "helm-controller", "operation": "Update",
                                               "time": "2026-11-30T11:00:00Z",
                                               "fieldsV1": {"f:metadata": {"f:annotations": {}}}})
    assert rd.spec_changed_at(chart).isoformat() == "2026-11-30T10:05:00"
    assert rd.spec_changed_at(helmchart()) is None


def test_a_chart_being_deleted_is_not_waited_for():
    done, detail = chart_state(helmchart(deleting=True, job_name="helm-delete-gpu-operator"))
    assert done and detail["failed"]
    assert detail["message"] == "HelmChart kube-system/gpu-operator is being deleted (since 2026-11-30T10:00:00Z)"
