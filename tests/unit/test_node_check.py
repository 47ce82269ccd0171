"""node_check on hand-built snapshots: every finding code, the layer diagnosis, the input
parsing, and the module and CLI around it."""

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check as nc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_node_check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB_SNAPSHOT = os.path.join(ROOT, "tests", "unit", "snapshots", "lab-fleet.yaml")
CLI = os.path.join(ROOT, "scripts", "gpu-node-check")
NS = om.DEFAULT_NAMESPACE
CONTAINER_CHAIN = ["driver", "container-toolkit", "operator-validator", "device-plugin", "dcgm-exporter",
                   "gpu-feature-discovery"]
A10_PASSTHROUGH = "nvidia.com/GA102GL_A10"
A10_12Q = "nvidia.com/NVIDIA_A10-12Q"
TAINT = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}


# ---------------------------------------------------------------- builders

def operator_labels(config, labels=None):
    """The deploy labels the operator leaves on a GPU node of ``config`` (all "true")."""
    return om.deploy_labels_for(config, labels or {}, om.policy())


def node(name, config=None, gpu=True, labels=None, allocatable=None, taints=None, labelled_as=None):
    """A node as the API returns it; ``config`` sets the workload config label. A GPU node
    carries the deploy labels the operator writes for ``labelled_as`` (default: ``config``,
    else container), under ``labels``."""
    node_labels = {"kubernetes.io/hostname": name}
    if gpu:
        node_labels.update({om.NFD_GPU_LABELS[0]: "true", om.GPU_PRESENT_LABEL: "true"})
        node_labels.update(operator_labels(labelled_as or config or om.CONTAINER, labels))
    if config:
        node_labels[om.WORKLOAD_CONFIG_LABEL] = config
    node_labels.update(labels or {})
    resources = dict((k, str(v)) for k, v in (allocatable or {}).items())
    resources.setdefault("cpu", "16")
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


def pod(operand_name, node_name, phase="Running", ready=True, waiting=None, terminating=False, namespace=NS,
        scheduled=True, unschedulable_message=None, suffix="x1"):
    """An operand pod; ``scheduled=False`` gives a Pending DaemonSet pod pinned by affinity only."""
    o = om.operand(operand_name)
    key, value = o.pod_selector
    spec = {"containers": [{"name": "main"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}}}
    if scheduled:
        spec["nodeName"] = node_name
    status = {"phase": phase}
    if phase == "Running":
        state = {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2026-11-30T10:00:00Z"}}
        status["containerStatuses"] = [{"name": "main", "ready": ready, "restartCount": 0, "state": state}]
    if unschedulable_message:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": unschedulable_message}]
    metadata = {"name": "%s-%s" % (o.daemonset, suffix), "namespace": namespace, "labels": {key: value}}
    if terminating:
        metadata["deletionTimestamp"] = "2026-11-30T10:05:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def pods_for(node_name, operands):
    return [pod(name, node_name, suffix=node_name) for name in operands]


def policy(clusterpolicies=(), **overrides):
    return nc.policy_from_inputs(list(clusterpolicies), overrides)


def sandbox_policy(**overrides):
    return policy(sandbox_workloads_enabled=True, **overrides)


def evaluate(nodes, pods, policy_=None, daemonsets=None):
    return nc.evaluate(nodes, pods, policy_ or policy(), daemonsets)


def codes(result, node_name=None):
    return [f["code"] for f in result["findings"] if node_name is None or f["node"] == node_name]


def findings(result, code):
    return [f for f in result["findings"] if f["code"] == code]


def container_node(name="gpu-1", **kwargs):
    kwargs.setdefault("allocatable", {om.CONTAINER_RESOURCE: 2})
    return node(name, **kwargs)


def daemonset(operand_name, tolerations):
    o = om.operand(operand_name)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": o.daemonset, "namespace": NS},
            "spec": {"template": {"spec": {"tolerations": tolerations}}}}


# ---------------------------------------------------------------- a healthy fleet

def test_healthy_container_node_reports_its_chain_and_resources():
    result = evaluate([container_node()], pods_for("gpu-1", CONTAINER_CHAIN))
    report = result["nodes"]["gpu-1"]
    assert result["findings"] == []
    assert report["ok"] is True
    assert report["gpu_node"] is True
    assert report["workload_config"] == om.CONTAINER
    assert report["expected_operands"] == CONTAINER_CHAIN
    assert report["running_operands"] == ["driver", "container-toolkit", "operator-validator", "device-plugin",
                                          "dcgm-exporter", "gpu-feature-discovery"]
    assert report["not_running"] == {}
    assert report["advertised"] == {om.CONTAINER_RESOURCE: 2}
    assert report["capacity"] == {om.CONTAINER_RESOURCE: 2}
    assert report["layer_failures"] == []
    assert nc.first_broken_layer(report) is None


def test_healthy_vm_nodes_with_sandbox_workloads():
    nodes = [
        node("pt-1", om.VM_PASSTHROUGH, allocatable={A10_PASSTHROUGH: 2}),
        node("vgpu-1", om.VM_VGPU, labels={om.VGPU_CONFIG_LABEL: "A10-12Q"}, allocatable={A10_12Q: 4}),
    ]
    pods = (pods_for("pt-1", ["vfio-manager", "sandbox-validator", "sandbox-device-plugin"])
            + pods_for("vgpu-1", ["vgpu-device-manager", "sandbox-validator", "sandbox-device-plugin"]))
    result = evaluate(nodes, pods, sandbox_policy())
    assert result["findings"] == []
    assert result["nodes"]["pt-1"]["expected_operands"] == ["vfio-manager", "sandbox-validator", "sandbox-device-plugin"]
    # vgpu-manager is off by default (it needs the user's image): the host driver stands in for it.
    assert result["nodes"]["vgpu-1"]["expected_operands"] == ["vgpu-device-manager", "sandbox-validator",
                                                              "sandbox-device-plugin"]
    assert result["nodes"]["vgpu-1"]["operand_states"]["vgpu-manager"] == "disabled"


def test_cpu_node_expects_nothing():
    result = evaluate([node("cpu-1", gpu=False)], [])
    report = result["nodes"]["cpu-1"]
    assert (report["gpu_node"], report["workload_config"], report["expected_operands"], report["ok"]) == (
        False, None, [], True)
    assert result["findings"] == []


def test_nodes_come_out_in_name_order():
    result = evaluate([container_node("b"), container_node("a")], pods_for("a", CONTAINER_CHAIN) + pods_for("b", CONTAINER_CHAIN))
    assert list(result["nodes"]) == ["a", "b"]


# ---------------------------------------------------------------- missing-operand

def test_node_added_after_daemonsets_settled_is_missing_every_operand():
    # NFD found the GPU, the operator has not labelled the node yet and no DaemonSet targets
    # it: DaemonSet counts would not include it at all.
    nodes = [container_node("old"), node("new", gpu=False, labels={om.NFD_GPU_LABELS[0]: "true"}, allocatable={})]
    result = evaluate(nodes, pods_for("old", CONTAINER_CHAIN))
    new = result["nodes"]["new"]
    assert new["expected_operands"] == CONTAINER_CHAIN
    assert new["unlabelled_operands"] == CONTAINER_CHAIN
    assert new["not_running"]["driver"] == (
        "nvidia.com/gpu.deploy.driver is absent: the operator has not labelled this GPU node yet (no "
        "nvidia.com/gpu.present=true); it does on its next reconcile, so check that the gpu-operator pod runs")
    assert [f["operand"] for f in findings(result, nc.MISSING_OPERAND)] == CONTAINER_CHAIN
    assert all(f["node"] == "new" and f["severity"] == nc.ERROR for f in findings(result, nc.MISSING_OPERAND))
    assert new["ok"] is False and result["nodes"]["old"]["ok"] is True


def test_node_with_only_the_nfd_label_is_a_gpu_node():
    fresh = node("fresh", gpu=False, labels={om.NFD_GPU_LABELS[1]: "true"})
    result = evaluate([fresh], [])
    assert result["nodes"]["fresh"]["gpu_node"] is True
    assert result["nodes"]["fresh"]["expected_operands"] == CONTAINER_CHAIN


def test_pending_pod_is_missing_with_the_schedulers_message():
    message = "0/6 nodes are available: 1 Insufficient cpu, 5 node(s) didn't match Pod's node affinity/selector."
    pods = pods_for("gpu-1", [n for n in CONTAINER_CHAIN if n != "dcgm-exporter"])
    pods.append(pod("dcgm-exporter", "gpu-1", phase="Pending", scheduled=False, unschedulable_message=message))
    result = evaluate([container_node()], pods)
    assert result["nodes"]["gpu-1"]["not_running"] == {"dcgm-exporter": "Pending: " + message}
    assert [(f["code"], f["operand"]) for f in result["findings"]] == [(nc.MISSING_OPERAND, "dcgm-exporter")]


def test_terminating_pod_does_not_count_as_running():
    pods = pods_for("gpu-1", [n for n in CONTAINER_CHAIN if n != "gpu-feature-discovery"])
    pods.append(pod("gpu-feature-discovery", "gpu-1", terminating=True))
    result = evaluate([container_node()], pods)
    assert result["nodes"]["gpu-1"]["not_running"] == {"gpu-feature-discovery": "Terminating"}
    assert codes(result) == [nc.MISSING_OPERAND]


def test_rolling_update_with_a_ready_replacement_counts_as_running():
    pods = pods_for("gpu-1", CONTAINER_CHAIN)
    pods.append(pod("device-plugin", "gpu-1", terminating=True, suffix="old"))
    assert evaluate([container_node()], pods)["findings"] == []


@pytest.mark.parametrize("pod_kwargs, reason", [
    (dict(ready=False, waiting="CrashLoopBackOff"), "CrashLoopBackOff"),
    (dict(ready=False), "Running, not ready"),
    (dict(phase="Failed"), "Failed"),
])
def test_not_ready_pod_reasons(pod_kwargs, reason):
    pods = pods_for("gpu-1", [n for n in CONTAINER_CHAIN if n != "driver"])
    pods.append(pod("driver", "gpu-1", **pod_kwargs))
    result = evaluate([container_node()], pods)
    assert result["nodes"]["gpu-1"]["not_running"]["driver"] == reason


def test_init_container_failure_is_reported_like_kubectl():
    p = pod("device-plugin", "gpu-1", phase="Pending")
    p["status"]["initContainerStatuses"] = [
        {"name": "toolkit-validation", "ready": False, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    assert nc.pod_status_reason(p) == "Init:CrashLoopBackOff"
    p["status"]["initContainerStatuses"] = [
        {"name": "a", "ready": True, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
        {"name": "b", "ready": False, "state": {"running": {}}}]
    assert nc.pod_status_reason(p) == "Init:1/2"


def init_pod(operand_name, node_name, steps, at, state=None):
    """A pod of ``operand_name`` in its init containers ``steps``: those before ``at`` done,
    ``at`` in ``state`` (running by default)."""
    p = pod(operand_name, node_name, phase="Pending", suffix="init")
    statuses = []
    for index, name in enumerate(steps):
        if index < steps.index(at):
            statuses.append({"name": name, "ready": True, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}})
        elif name == at:
            statuses.append({"name": name, "ready": False, "state": state or {"running": {"startedAt": "2026-11-30T10:00:00Z"}}})
        else:
            statuses.append({"name": name, "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}})
    p["status"]["initContainerStatuses"] = statuses
    return p


VALIDATOR_STEPS = ["driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"]


def test_a_pod_waiting_at_its_gate_names_the_status_file_and_the_validator():
    # The device plugin does not wait for the toolkit: it waits for toolkit-ready, which only
    # the operator-validator's toolkit-validation writes. The diagnosis says so, and how the
    # validator stands; the lowest broken layer is still the toolkit's.
    pods = pods_for("gpu-1", ["driver"]) + [
        pod("container-toolkit", "gpu-1", ready=False, waiting="CrashLoopBackOff"),
        init_pod("operator-validator", "gpu-1", VALIDATOR_STEPS, "toolkit-validation"),
        init_pod("device-plugin", "gpu-1", ["toolkit-validation", "config-manager-init"], "toolkit-validation"),
    ]
    report = evaluate([container_node(allocatable={})], pods)["nodes"]["gpu-1"]
    assert report["not_running"]["operator-validator"] == (
        "Init:1/4: toolkit-validation checks the container toolkit, then writes toolkit-ready "
        "(container-toolkit: CrashLoopBackOff)")
    assert report["not_running"]["device-plugin"] == (
        "Init:0/2: toolkit-validation waits for /run/nvidia/validations/toolkit-ready, which operator-validator "
        "writes (operator-validator: Init:1/4: toolkit-validation checks the container toolkit, then writes "
        "toolkit-ready)")
    assert nc.first_broken_layer(report) == {
        "layer": om.LAYER_RUNTIME, "operand": "container-toolkit", "reason": "CrashLoopBackOff"}


def test_a_validator_stuck_in_plugin_validation_has_its_cause_in_the_device_plugin():
    # The operator-validator turns Ready only once the device plugin advertises GPUs: stuck
    # there, it names the device plugin, and the diagnosis names the device-plugin layer.
    pods = pods_for("gpu-1", ["driver", "container-toolkit", "dcgm-exporter", "gpu-feature-discovery"]) + [
        init_pod("operator-validator", "gpu-1", VALIDATOR_STEPS, "plugin-validation"),
        pod("device-plugin", "gpu-1", ready=False, waiting="CrashLoopBackOff"),
    ]
    report = evaluate([container_node(allocatable={})], pods)["nodes"]["gpu-1"]
    assert report["not_running"]["operator-validator"] == (
        "Init:3/4: plugin-validation waits until the node advertises GPUs (device-plugin: CrashLoopBackOff)")
    first = nc.first_broken_layer(report)
    assert (first["layer"], first["operand"]) == (om.LAYER_DEVICE_PLUGIN, "device-plugin")
    assert "operator-validator" not in [f["operand"] for f in report["layer_failures"]]


def test_an_init_container_that_fails_is_named():
    failing = init_pod("gpu-feature-discovery", "gpu-1", ["toolkit-validation", "config-manager-init"],
                       "config-manager-init", state={"waiting": {"reason": "CrashLoopBackOff"}})
    pods = pods_for("gpu-1", [n for n in CONTAINER_CHAIN if n != "gpu-feature-discovery"]) + [failing]
    report = evaluate([container_node()], pods)["nodes"]["gpu-1"]
    assert report["not_running"] == {"gpu-feature-discovery": "Init:CrashLoopBackOff: config-manager-init"}


def test_the_sandbox_gates_name_the_sandbox_validator():
    pt = node("pt-1", om.VM_PASSTHROUGH, allocatable={})
    pods = pods_for("pt-1", ["vfio-manager"]) + [
        init_pod("sandbox-validator", "pt-1", ["cc-manager-validation", "vfio-pci-validation"], "vfio-pci-validation"),
        init_pod("sandbox-device-plugin", "pt-1", ["vfio-pci-validation", "vgpu-devices-validation"],
                 "vfio-pci-validation"),
    ]
    report = evaluate([pt], pods, sandbox_policy())["nodes"]["pt-1"]
    assert report["not_running"]["sandbox-device-plugin"].startswith(
        "Init:0/2: vfio-pci-validation waits for /run/nvidia/validations/vfio-pci-ready, which sandbox-validator "
        "writes (sandbox-validator: Init:1/2: vfio-pci-validation waits for the GPUs to be bound to vfio-pci")


def test_pods_of_other_namespaces_and_other_apps_are_ignored():
    pods = [pod(n, "gpu-1", namespace="elsewhere") for n in CONTAINER_CHAIN]
    workload = pod("driver", "gpu-1")
    workload["metadata"]["labels"] = {"app": "trainer"}
    result = evaluate([container_node()], pods + [workload])
    assert result["nodes"]["gpu-1"]["running_operands"] == []
    assert len(findings(result, nc.MISSING_OPERAND)) == len(CONTAINER_CHAIN)


def test_namespace_comes_from_the_policy():
    pods = [pod(n, "gpu-1", namespace="nvidia-gpu-operator") for n in CONTAINER_CHAIN]
    result = evaluate([container_node()], pods, policy(namespace="nvidia-gpu-operator"))
    assert result["findings"] == []


def test_selector_by_name_label_finds_vfio_manager():
    # vfio-manager, kata-manager and cc-manager pods carry name=..., not app=...
    pods = pods_for("pt-1", ["vfio-manager", "sandbox-validator", "sandbox-device-plugin"])
    assert pods[0]["metadata"]["labels"] == {"name": "nvidia-vfio-manager"}
    result = evaluate([node("pt-1", om.VM_PASSTHROUGH, allocatable={A10_PASSTHROUGH: 2})], pods, sandbox_policy())
    assert "vfio-manager" in result["nodes"]["pt-1"]["running_operands"]
    assert result["findings"] == []


# ---------------------------------------------------------------- deploy labels

def without_label(obj, operand_name):
    del obj["metadata"]["labels"][om.deploy_label(operand_name)]
    return obj


ABSENT_DCGM_EXPORTER = (
    "nvidia.com/gpu.deploy.dcgm-exporter is absent, so its DaemonSet places no pod here, and the operator does not "
    "put a removed deploy label back (it reconciles a node only when its GPU, MIG, operands or workload-config labels "
    "change; the next full resync can be hours away). Set nvidia.com/gpu.deploy.dcgm-exporter=true")


def test_operand_label_false_versus_absent():
    # Both keep the DaemonSet's pod off the node. "false" is a decision; an absent label was
    # removed (the operator writes it on every GPU node) and nothing puts it back soon: the
    # operand is missing, and the fix is to set "true", not to wait.
    off = container_node("off", labels={om.deploy_label("dcgm-exporter"): om.DEPLOY_FALSE})
    absent = without_label(container_node("absent"), "dcgm-exporter")
    chain_without = [n for n in CONTAINER_CHAIN if n != "dcgm-exporter"]
    result = evaluate([off, absent], pods_for("off", chain_without) + pods_for("absent", chain_without))
    assert result["nodes"]["off"]["ok"] is True
    assert "dcgm-exporter" not in result["nodes"]["off"]["expected_operands"]
    assert result["nodes"]["off"]["operand_states"]["dcgm-exporter"] == "off"
    report = result["nodes"]["absent"]
    assert report["operand_states"]["dcgm-exporter"] == "expected"
    assert report["unlabelled_operands"] == ["dcgm-exporter"]
    assert report["not_running"] == {"dcgm-exporter": ABSENT_DCGM_EXPORTER}
    (finding,) = [f for f in result["findings"] if f["node"] == "absent"]
    assert (finding["code"], finding["severity"], finding["operand"]) == (nc.MISSING_OPERAND, nc.ERROR, "dcgm-exporter")
    assert finding["message"] == "dcgm-exporter is not running: " + ABSENT_DCGM_EXPORTER
    assert report["ok"] is False


def test_a_pod_whose_deploy_label_was_removed_is_missing_not_running():
    # The DaemonSet controller deletes the pod of a node its selector no longer matches: the
    # pod still Running in the snapshot is on its way out, and the layer is broken.
    unlabelled = without_label(container_node(), "device-plugin")
    result = evaluate([unlabelled], pods_for("gpu-1", CONTAINER_CHAIN))
    report = result["nodes"]["gpu-1"]
    assert "device-plugin" not in report["running_operands"]
    assert report["not_running"]["device-plugin"].startswith("nvidia.com/gpu.deploy.device-plugin is absent")
    assert nc.first_broken_layer(report) == {
        "layer": om.LAYER_DEVICE_PLUGIN, "operand": "device-plugin", "reason": report["not_running"]["device-plugin"]}
    assert report["not_running"]["device-plugin"].endswith("Set nvidia.com/gpu.deploy.device-plugin=true")


def test_an_absent_mig_manager_label_is_one_the_operator_restores():
    # The one deploy label whose absence makes the operator reconcile the node (on a
    # MIG-capable GPU): missing for now, but no hand fix needed.
    mig = without_label(container_node(labels={om.MIG_CAPABLE_LABEL: "true"}), "mig-manager")
    result = evaluate([mig], pods_for("gpu-1", CONTAINER_CHAIN))
    assert result["nodes"]["gpu-1"]["not_running"] == {"mig-manager": (
        "nvidia.com/gpu.deploy.mig-manager is absent: the operator sets it again on its next reconcile of this "
        "MIG-capable node")}


def test_pod_of_a_switched_off_operand_is_unexpected():
    off = container_node(labels={om.deploy_label("dcgm-exporter"): om.DEPLOY_FALSE})
    result = evaluate([off], pods_for("gpu-1", CONTAINER_CHAIN))
    (finding,) = result["findings"]
    assert (finding["code"], finding["operand"], finding["severity"]) == (nc.UNEXPECTED_OPERAND, "dcgm-exporter", nc.ERROR)
    assert "nvidia.com/gpu.deploy.dcgm-exporter=false" in finding["message"]


def test_preinstalled_driver_satisfies_the_chain():
    # driver.enabled=true; k8s-driver-manager found a working host driver on this node and
    # wrote pre-installed: the driver DaemonSet leaves it, the host driver stands in.
    labelled = container_node(labels={om.deploy_label("driver"): om.DEPLOY_PRE_INSTALLED})
    result = evaluate([labelled], pods_for("gpu-1", CONTAINER_CHAIN[1:]))
    report = result["nodes"]["gpu-1"]
    assert result["findings"] == []
    assert report["expected_operands"] == CONTAINER_CHAIN[1:]
    assert report["operand_states"]["driver"] == "host"


def test_driver_pod_on_a_preinstalled_node_is_unexpected():
    labelled = container_node(labels={om.deploy_label("driver"): om.DEPLOY_PRE_INSTALLED})
    result = evaluate([labelled], pods_for("gpu-1", CONTAINER_CHAIN))
    assert [(f["code"], f.get("operand")) for f in result["findings"]] == [(nc.UNEXPECTED_OPERAND, "driver")]


def test_driver_disabled_cluster_wide_host_driver_satisfies_the_chain():
    # driver.enabled=false: no driver DaemonSet, and deploy.driver stays "true" (the operator
    # never writes pre-installed): the label says nothing here, the policy decides.
    nodes = [container_node()]
    assert nodes[0]["metadata"]["labels"][om.deploy_label("driver")] == om.DEPLOY_TRUE
    result = evaluate(nodes, pods_for("gpu-1", CONTAINER_CHAIN[1:]), policy(driver_enabled=False))
    assert result["findings"] == []
    assert result["nodes"]["gpu-1"]["operand_states"]["driver"] == "host"
    assert result["nodes"]["gpu-1"]["unlabelled_operands"] == []


def test_driver_pod_while_driver_disabled_is_unexpected():
    result = evaluate([container_node()], pods_for("gpu-1", CONTAINER_CHAIN), policy(driver_enabled=False))
    (finding,) = result["findings"]
    assert (finding["code"], finding["operand"]) == (nc.UNEXPECTED_OPERAND, "driver")
    assert "driver.enabled is false" in finding["message"]


def test_isolated_node_without_leftover_pods_is_ok():
    isolated = container_node(labels={om.OPERANDS_LABEL: om.DEPLOY_FALSE}, allocatable={})
    result = evaluate([isolated], [])
    report = result["nodes"]["gpu-1"]
    assert (report["expected_operands"], report["ok"], result["findings"]) == ([], True, [])
    assert set(report["operand_states"].values()) == {"isolated"}


def test_isolated_node_with_leftover_pods_reports_each():
    isolated = container_node(labels={om.OPERANDS_LABEL: om.DEPLOY_FALSE})
    result = evaluate([isolated], pods_for("gpu-1", ["driver", "device-plugin"]))
    assert [(f["code"], f["operand"]) for f in result["findings"]] == [
        (nc.UNEXPECTED_OPERAND, "driver"), (nc.UNEXPECTED_OPERAND, "device-plugin")]
    assert all("isolated" in f["message"] for f in result["findings"])


def test_isolated_node_whose_pods_are_terminating_is_ok():
    isolated = container_node(labels={om.OPERANDS_LABEL: om.DEPLOY_FALSE})
    pods = [pod("driver", "gpu-1", terminating=True), pod("device-plugin", "gpu-1", terminating=True)]
    assert evaluate([isolated], pods)["findings"] == []


def test_operand_of_another_workload_config_is_unexpected():
    pt = node("pt-1", om.VM_PASSTHROUGH, allocatable={A10_PASSTHROUGH: 2})
    pods = pods_for("pt-1", ["vfio-manager", "sandbox-validator", "sandbox-device-plugin", "device-plugin"])
    result = evaluate([pt], pods, sandbox_policy())
    (finding,) = result["findings"]
    assert (finding["code"], finding["operand"]) == (nc.UNEXPECTED_OPERAND, "device-plugin")
    assert "vm-passthrough does not run it" in finding["message"]


def test_operand_pod_on_a_cpu_node_is_unexpected():
    result = evaluate([node("cpu-1", gpu=False)], [pod("dcgm-exporter", "cpu-1")])
    assert [(f["code"], f["operand"]) for f in result["findings"]] == [(nc.UNEXPECTED_OPERAND, "dcgm-exporter")]


def test_capability_operand_needs_its_label():
    mig = container_node("mig", labels={om.MIG_CAPABLE_LABEL: "true"})
    plain = container_node("plain")
    result = evaluate([mig, plain], pods_for("mig", CONTAINER_CHAIN) + pods_for("plain", CONTAINER_CHAIN + ["mig-manager"]))
    assert result["nodes"]["mig"]["not_running"] == {"mig-manager": "no pod"}
    assert [(f["node"], f["code"]) for f in result["findings"]] == [
        ("mig", nc.MISSING_OPERAND), ("plain", nc.UNEXPECTED_OPERAND)]


# ---------------------------------------------------------------- order-violation

def test_device_plugin_without_toolkit_is_an_order_violation():
    pods = pods_for("gpu-1", [n for n in CONTAINER_CHAIN if n != "container-toolkit"])
    pods.append(pod("container-toolkit", "gpu-1", ready=False, waiting="CrashLoopBackOff"))
    result = evaluate([container_node()], pods)
    violations = findings(result, nc.ORDER_VIOLATION)
    assert [f["operand"] for f in violations] == ["operator-validator", "device-plugin", "dcgm-exporter",
                                                  "gpu-feature-discovery"]
    device_plugin = violations[1]
    assert "container-toolkit" in device_plugin["message"] and "CrashLoopBackOff" in device_plugin["message"]
    assert nc.first_broken_layer(result["nodes"]["gpu-1"]) == {
        "layer": om.LAYER_RUNTIME, "operand": "container-toolkit", "reason": "CrashLoopBackOff"}


def test_toolkit_without_operator_managed_driver_is_an_order_violation():
    pods = pods_for("gpu-1", ["container-toolkit"])
    result = evaluate([container_node(allocatable={})], pods)
    assert [f["operand"] for f in findings(result, nc.ORDER_VIOLATION)] == ["container-toolkit"]
    assert nc.first_broken_layer(result["nodes"]["gpu-1"])["layer"] == om.LAYER_DRIVER


def test_toolkit_without_driver_pod_is_fine_when_the_host_has_the_driver():
    result = evaluate([container_node()], pods_for("gpu-1", CONTAINER_CHAIN[1:]), policy(driver_enabled=False))
    assert findings(result, nc.ORDER_VIOLATION) == []


def test_order_through_a_host_provided_toolkit_still_needs_the_driver():
    # toolkit.enabled=false: the device plugin waits for the driver through the host runtime.
    pods = pods_for("gpu-1", ["device-plugin", "operator-validator"])
    result = evaluate([container_node()], pods, policy(toolkit_enabled=False))
    violations = findings(result, nc.ORDER_VIOLATION)
    assert [f["operand"] for f in violations] == ["operator-validator", "device-plugin"]
    assert all("driver" in f["message"] for f in violations)


def test_sandbox_device_plugin_without_vfio_manager_is_an_order_violation():
    pt = node("pt-1", om.VM_PASSTHROUGH, allocatable={A10_PASSTHROUGH: 2})
    result = evaluate([pt], pods_for("pt-1", ["sandbox-validator", "sandbox-device-plugin"]), sandbox_policy())
    assert [f["operand"] for f in findings(result, nc.ORDER_VIOLATION)] == ["sandbox-validator", "sandbox-device-plugin"]
    assert nc.first_broken_layer(result["nodes"]["pt-1"])["operand"] == "vfio-manager"


# ---------------------------------------------------------------- workload label

def test_sandbox_disabled_vm_label_is_ignored():
    # The operator labels it as what it runs: a container node.
    vm = container_node("vm-1", config=om.VM_PASSTHROUGH, labelled_as=om.CONTAINER)
    result = evaluate([vm], pods_for("vm-1", CONTAINER_CHAIN))
    report = result["nodes"]["vm-1"]
    assert report["workload_config"] == om.CONTAINER
    assert report["workload_label"] == om.VM_PASSTHROUGH
    assert report["expected_operands"] == CONTAINER_CHAIN
    (finding,) = result["findings"]
    assert (finding["code"], finding["severity"]) == (nc.LABEL_IGNORED, nc.ERROR)
    assert "vm-passthrough" in finding["message"]


def test_container_label_with_sandbox_disabled_is_not_ignored():
    result = evaluate([container_node(config=om.CONTAINER)], pods_for("gpu-1", CONTAINER_CHAIN))
    assert result["findings"] == []


def test_unknown_workload_label_falls_back_to_the_default_workload():
    bogus = node("gpu-1", "vm-bogus", allocatable={A10_PASSTHROUGH: 2}, labelled_as=om.VM_PASSTHROUGH)
    result = evaluate([bogus], pods_for("gpu-1", ["vfio-manager", "sandbox-validator", "sandbox-device-plugin"]),
                      sandbox_policy(default_workload=om.VM_PASSTHROUGH))
    report = result["nodes"]["gpu-1"]
    assert report["workload_config"] == om.VM_PASSTHROUGH
    assert report["workload_label"] == "vm-bogus"
    assert codes(result) == [nc.UNKNOWN_WORKLOAD_CONFIG]
    assert "vm-bogus" in result["findings"][0]["message"]


def test_invalid_default_workload_is_reported_and_container_applies():
    cp = {"kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
          "spec": {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "vm-nonsense"}}}
    result = evaluate([container_node()], pods_for("gpu-1", CONTAINER_CHAIN), policy([cp]))
    assert result["nodes"]["gpu-1"]["workload_config"] == om.CONTAINER
    (finding,) = result["findings"]
    assert finding["code"] == nc.UNKNOWN_WORKLOAD_CONFIG and "vm-nonsense" in finding["message"]


# ---------------------------------------------------------------- resources

def test_vgpu_node_advertising_nvidia_com_gpu_is_a_resource_mismatch():
    vgpu = node("vgpu-1", om.VM_VGPU, allocatable={om.CONTAINER_RESOURCE: 2})
    result = evaluate([vgpu], pods_for("vgpu-1", ["vgpu-device-manager", "sandbox-validator", "sandbox-device-plugin"]),
                      sandbox_policy())
    mismatches = findings(result, nc.RESOURCE_MISMATCH)
    assert [f["severity"] for f in mismatches] == [nc.ERROR, nc.ERROR]
    assert "advertises nvidia.com/gpu (container) but its workload config is vm-vgpu" in mismatches[0]["message"]
    assert "sandbox-device-plugin runs but the node advertises no" in mismatches[1]["message"]
    assert nc.MIXED_WORKLOAD not in codes(result)
    assert nc.first_broken_layer(result["nodes"]["vgpu-1"])["layer"] == om.LAYER_ALLOCATABLE


def test_vgpu_profile_label_decides_the_resource_name():
    vgpu = node("vgpu-1", om.VM_VGPU, labels={om.VGPU_CONFIG_LABEL: "A10-4Q"}, allocatable={A10_12Q: 4})
    result = evaluate([vgpu], pods_for("vgpu-1", ["vgpu-device-manager", "sandbox-validator", "sandbox-device-plugin"]),
                      sandbox_policy())
    messages = [f["message"] for f in findings(result, nc.RESOURCE_MISMATCH)]
    assert messages[0] == "advertises %s but %s=A10-4Q produces nvidia.com/NVIDIA_A10-4Q" % (A10_12Q, om.VGPU_CONFIG_LABEL)


def test_device_plugin_running_but_nothing_allocatable_is_a_mismatch():
    result = evaluate([container_node(allocatable={})], pods_for("gpu-1", CONTAINER_CHAIN))
    (finding,) = result["findings"]
    assert (finding["code"], finding["operand"]) == (nc.RESOURCE_MISMATCH, "device-plugin")
    assert nc.first_broken_layer(result["nodes"]["gpu-1"]) == {
        "layer": om.LAYER_ALLOCATABLE, "operand": "device-plugin", "reason": finding["message"]}


def test_zero_allocatable_counts_as_nothing():
    result = evaluate([container_node(allocatable={om.CONTAINER_RESOURCE: 0})], pods_for("gpu-1", CONTAINER_CHAIN))
    assert codes(result) == [nc.RESOURCE_MISMATCH]
    assert result["nodes"]["gpu-1"]["advertised"] == {}


def test_nothing_allocatable_while_the_plugin_is_down_is_a_layer_failure_not_a_mismatch():
    pods = pods_for("gpu-1", [n for n in CONTAINER_CHAIN if n != "device-plugin"])
    result = evaluate([container_node(allocatable={})], pods)
    assert codes(result) == [nc.MISSING_OPERAND]
    assert [(f["layer"], f["operand"]) for f in result["nodes"]["gpu-1"]["layer_failures"]] == [
        (om.LAYER_DEVICE_PLUGIN, "device-plugin"), (om.LAYER_ALLOCATABLE, "device-plugin")]


def test_two_workload_types_on_one_node_is_mixed_workload():
    pt = node("pt-1", om.VM_PASSTHROUGH, allocatable={A10_PASSTHROUGH: 1, om.CONTAINER_RESOURCE: 1})
    result = evaluate([pt], pods_for("pt-1", ["vfio-manager", "sandbox-validator", "sandbox-device-plugin"]),
                      sandbox_policy())
    assert codes(result) == [nc.MIXED_WORKLOAD, nc.RESOURCE_MISMATCH]
    assert "nvidia.com/gpu (container)" in result["findings"][0]["message"]


def test_cpu_node_advertising_gpus_is_a_warning():
    result = evaluate([node("cpu-1", gpu=False, allocatable={om.CONTAINER_RESOURCE: 1})], [])
    (finding,) = result["findings"]
    assert (finding["code"], finding["severity"]) == (nc.RESOURCE_MISMATCH, nc.WARNING)
    assert result["nodes"]["cpu-1"]["ok"] is True


# ---------------------------------------------------------------- paused operands

MIG_PAUSED = ["device-plugin", "dcgm-exporter", "gpu-feature-discovery"]


def test_paused_operands_are_paused_not_switched_off_and_not_errors():
    # mig-parted pauses the device plugin, GFD and dcgm* while it repartitions the GPUs:
    # their pods leave, the GPUs go away for a while, and the labels come back to "true".
    labels = dict((om.deploy_label(n), "paused-for-mig-change") for n in MIG_PAUSED)
    paused = container_node(labels=labels, allocatable={})
    result = evaluate([paused], pods_for("gpu-1", ["driver", "container-toolkit", "operator-validator"]))
    report = result["nodes"]["gpu-1"]
    assert [report["operand_states"][n] for n in MIG_PAUSED] == [nc.PAUSED] * 3
    assert report["expected_operands"] == CONTAINER_CHAIN
    assert report["paused_operands"] == dict((n, "paused-for-mig-change") for n in MIG_PAUSED)
    assert report["not_running"]["device-plugin"] == (
        "paused: nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change (mig-parted is applying a MIG "
        "configuration; it sets the label back to true when done)")
    (finding,) = result["findings"]
    assert (finding["code"], finding["severity"]) == (nc.OPERAND_PAUSED, nc.WARNING)
    assert finding["message"] == (
        "paused, not switched off: device-plugin, dcgm-exporter, gpu-feature-discovery "
        "(nvidia.com/gpu.deploy.<operand>=paused-for-mig-change: mig-parted is applying a MIG configuration); the "
        "labels go back to true when that is done, and the operands return")
    # Nothing advertised while the device plugin is paused is no broken layer either.
    assert report["layer_failures"] == [] and report["ok"] is True


def test_a_paused_toolkit_is_paused_not_provided_by_the_host():
    # The model reads any value but "true" on the toolkit's label as "the host runtime
    # stands in"; a driver upgrade's pause is not that.
    labels = dict((om.deploy_label(n), "paused-for-driver-upgrade")
                  for n in ["container-toolkit", "operator-validator", "device-plugin", "dcgm-exporter",
                            "gpu-feature-discovery"])
    result = evaluate([container_node(labels=labels, allocatable={})], [])
    report = result["nodes"]["gpu-1"]
    assert report["operand_states"]["container-toolkit"] == nc.PAUSED
    assert report["paused_operands"]["container-toolkit"] == "paused-for-driver-upgrade"
    # The driver's own pod is being replaced: that one is missing.
    assert [(f["code"], f.get("operand")) for f in result["findings"]] == [
        (nc.OPERAND_PAUSED, None), (nc.MISSING_OPERAND, "driver")]
    assert "k8s-driver-manager is upgrading the driver" in result["findings"][0]["message"]


def test_a_paused_operands_leftover_pod_is_neither_unexpected_nor_running_against_order():
    labels = {om.deploy_label("device-plugin"): "paused-for-mig-change"}
    pods = pods_for("gpu-1", CONTAINER_CHAIN)
    result = evaluate([container_node(labels=labels)], pods)
    assert codes(result) == [nc.OPERAND_PAUSED]


def test_a_pause_value_on_an_operand_disabled_in_the_policy_stays_disabled():
    labels = {om.deploy_label("dcgm"): "paused-for-driver-upgrade"}
    report = evaluate([container_node(labels=labels)], pods_for("gpu-1", CONTAINER_CHAIN))["nodes"]["gpu-1"]
    assert report["operand_states"]["dcgm"] == "disabled" and report["paused_operands"] == {}


# ---------------------------------------------------------------- vGPU config state

def vgpu_node(state, config="A10-12Q", allocatable=None):
    labels = {om.VGPU_CONFIG_STATE_LABEL: state}
    if config:
        labels[om.VGPU_CONFIG_LABEL] = config
    return node("vgpu-1", om.VM_VGPU, labels=labels, allocatable={A10_12Q: 4} if allocatable is None else allocatable)


VGPU_PODS = ["vgpu-device-manager", "sandbox-validator", "sandbox-device-plugin"]


def test_a_failed_vgpu_config_is_an_error_on_that_node():
    result = evaluate([vgpu_node("failed")], pods_for("vgpu-1", VGPU_PODS), sandbox_policy())
    report = result["nodes"]["vgpu-1"]
    (finding,) = result["findings"]
    assert (finding["code"], finding["severity"], finding["operand"]) == (nc.VGPU_CONFIG, nc.ERROR, "vgpu-device-manager")
    assert finding["message"].startswith(
        "nvidia.com/vgpu.config.state=failed: the vGPU device manager could not apply nvidia.com/vgpu.config=A10-12Q "
        "on this node")
    assert report["vgpu_config_state"] == "failed" and report["ok"] is False
    assert nc.first_broken_layer(report)["operand"] == "vgpu-device-manager"


def test_a_pending_vgpu_config_is_not_done_yet():
    result = evaluate([vgpu_node("pending", config=None, allocatable={})], pods_for("vgpu-1", VGPU_PODS),
                      sandbox_policy())
    report = result["nodes"]["vgpu-1"]
    assert report["vgpu_config_state"] == "pending"
    vgpu = findings(result, nc.VGPU_CONFIG)[0]
    assert (vgpu["severity"], vgpu["message"]) == (nc.WARNING, (
        "nvidia.com/vgpu.config.state=pending: the vGPU device manager has not applied its default vGPU config "
        "(no nvidia.com/vgpu.config) yet"))
    # No vGPU advertised yet is part of not being done, not a fault of its own.
    assert codes(result) == [nc.VGPU_CONFIG] and report["ok"] is True


def test_a_vgpu_config_name_that_is_no_profile_is_not_read_as_one():
    # "default" (or a custom name) is a config of the vGPU device manager's ConfigMap: it
    # does not name the type the node advertises.
    custom = vgpu_node("success", config="default")
    assert evaluate([custom], pods_for("vgpu-1", VGPU_PODS), sandbox_policy())["findings"] == []


def test_a_successful_vgpu_config_says_nothing():
    assert evaluate([vgpu_node("success")], pods_for("vgpu-1", VGPU_PODS), sandbox_policy())["findings"] == []


# ---------------------------------------------------------------- taints

TAINT_FIXES = (
    "either add a toleration to the chart's daemonsets.tolerations (gpu_operator_extra_values; for example "
    "{key: dedicated, operator: Exists, effect: NoSchedule}, keeping the default one for nvidia.com/gpu), or take "
    "the node out of the GPU layer (gpu_node_isolated: true in the inventory, which sets "
    "nvidia.com/gpu.deploy.operands=false)")


def test_untolerated_taint_is_an_error_naming_the_taint_and_both_fixes():
    # The taint leaves the node out of desiredNumberScheduled: nothing but this check says
    # that a GPU node has no operands. Without a decision to leave it out, it is broken.
    tainted = container_node(allocatable={}, taints=[TAINT])
    result = evaluate([tainted], [])
    report = result["nodes"]["gpu-1"]
    taint = result["findings"][0]
    assert (taint["code"], taint["severity"]) == (nc.UNTOLERATED_TAINT, nc.ERROR)
    assert taint["message"] == (
        "taint dedicated=training:NoSchedule is not tolerated by the operand DaemonSets: their pods will never be "
        "placed on this GPU node, so it has no GPU operands: " + TAINT_FIXES)
    assert report["untolerated_taints"] == ["dedicated=training:NoSchedule"]
    assert report["expected_operands"] == list(CONTAINER_CHAIN)
    assert report["not_running"]["driver"] == "no pod: taint dedicated=training:NoSchedule not tolerated"
    missing = findings(result, nc.MISSING_OPERAND)
    assert [f["operand"] for f in missing] == CONTAINER_CHAIN
    assert set(f["severity"] for f in missing) == {nc.ERROR}
    assert nc.first_broken_layer(report) == {
        "layer": om.LAYER_DRIVER, "operand": "driver", "reason": "no pod: taint dedicated=training:NoSchedule not tolerated"}
    assert report["ok"] is False


def test_a_tainted_node_isolated_by_its_label_is_ok():
    isolated = container_node(allocatable={}, taints=[TAINT], labels={om.OPERANDS_LABEL: om.DEPLOY_FALSE})
    result = evaluate([isolated], [])
    assert result["findings"] == [] and result["nodes"]["gpu-1"]["ok"] is True


def test_a_tainted_node_the_inventory_isolates_is_a_warning_until_labelled():
    # gpu_node_isolated in the inventory is the decision; the labels role has not set
    # deploy.operands=false yet. Missing operands are reported, not errors.
    tainted = container_node(allocatable={}, taints=[TAINT])
    result = nc.evaluate([tainted], [], policy(), isolated_nodes=["gpu-1"])
    report = result["nodes"]["gpu-1"]
    assert report["ok"] is True and report["layer_failures"] == []
    assert set(f["severity"] for f in result["findings"]) == {nc.WARNING}
    taint = findings(result, nc.UNTOLERATED_TAINT)[0]
    assert taint["message"] == (
        "taint dedicated=training:NoSchedule is not tolerated by the operand DaemonSets, and the inventory leaves the "
        "node out of the GPU layer (gpu_node_isolated), but it lacks nvidia.com/gpu.deploy.operands=false: run the "
        "gpu_node_labels role")
    # Only the taint is excused: a node the inventory isolates is not one the check ignores.
    other = container_node("gpu-2", allocatable={})
    assert nc.evaluate([other], [], policy(), isolated_nodes=["gpu-1"])["nodes"]["gpu-2"]["ok"] is False


def test_operand_pod_stuck_on_a_tainted_node_is_still_an_error():
    tainted = container_node(allocatable={}, taints=[TAINT])
    stuck = [pod("driver", "gpu-1", ready=False, waiting="CrashLoopBackOff")]
    result = evaluate([tainted], stuck)
    driver = [f for f in findings(result, nc.MISSING_OPERAND) if f["operand"] == "driver"][0]
    assert driver["severity"] == nc.ERROR
    assert result["nodes"]["gpu-1"]["layer_failures"][0]["layer"] == om.LAYER_DRIVER


def test_operands_tolerate_the_gpu_taint_and_the_daemonset_controllers_own():
    taints = [{"key": om.GPU_TAINT_KEY, "effect": "NoSchedule"},
              {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
              {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]
    result = evaluate([container_node(taints=taints)], pods_for("gpu-1", CONTAINER_CHAIN))
    assert result["findings"] == []


def test_daemonset_tolerations_in_the_input_are_used():
    tolerations = list(om.DEFAULT_OPERAND_TOLERATIONS) + [{"key": "dedicated", "operator": "Exists"}]
    daemonsets = [daemonset(name, tolerations) for name in CONTAINER_CHAIN if name != "dcgm-exporter"]
    tainted = container_node(taints=[TAINT])
    pods = pods_for("gpu-1", [n for n in CONTAINER_CHAIN if n != "dcgm-exporter"])
    result = evaluate([tainted], pods, daemonsets=daemonsets)
    taint_finding = findings(result, nc.UNTOLERATED_TAINT)[0]
    assert "dcgm-exporter" in taint_finding["message"] and "driver" not in taint_finding["message"]
    assert result["nodes"]["gpu-1"]["not_running"] == {
        "dcgm-exporter": "no pod: taint dedicated=training:NoSchedule not tolerated"}


def test_taint_added_after_the_pods_run_is_a_warning():
    # NoSchedule evicts nothing: the node has its operands now, and loses each one for good
    # once its pod is deleted.
    result = evaluate([container_node(taints=[TAINT])], pods_for("gpu-1", CONTAINER_CHAIN))
    (finding,) = result["findings"]
    assert (finding["code"], finding["severity"]) == (nc.UNTOLERATED_TAINT, nc.WARNING)
    assert finding["message"].endswith("will not be placed here again once deleted; " + TAINT_FIXES)
    assert result["nodes"]["gpu-1"]["ok"] is True


def test_a_taint_that_keeps_one_operand_off_is_an_error_for_that_one():
    pods = pods_for("gpu-1", [n for n in CONTAINER_CHAIN if n != "dcgm-exporter"])
    tolerations = list(om.DEFAULT_OPERAND_TOLERATIONS) + [{"key": "dedicated", "operator": "Exists"}]
    daemonsets = [daemonset(name, tolerations) for name in CONTAINER_CHAIN if name != "dcgm-exporter"]
    result = evaluate([container_node(taints=[TAINT])], pods, daemonsets=daemonsets)
    assert [(f["code"], f["severity"], f.get("operand")) for f in result["findings"]] == [
        (nc.UNTOLERATED_TAINT, nc.ERROR, None), (nc.MISSING_OPERAND, nc.ERROR, "dcgm-exporter")]
    assert "the DaemonSets of dcgm-exporter" in result["findings"][0]["message"]


def test_taint_on_a_cpu_node_is_not_a_finding():
    assert evaluate([node("cpu-1", gpu=False, taints=[TAINT])], [])["findings"] == []


# ---------------------------------------------------------------- layers

def test_layer_failures_are_bottom_up_and_skip_monitoring():
    pods = [pod("dcgm-exporter", "gpu-1", ready=False, waiting="ImagePullBackOff", suffix="a")]
    result = evaluate([container_node(allocatable={})], pods)
    layers = [(f["layer"], f["operand"]) for f in result["nodes"]["gpu-1"]["layer_failures"]]
    assert layers == [
        (om.LAYER_DRIVER, "driver"), (om.LAYER_RUNTIME, "container-toolkit"),
        (om.LAYER_DEVICE_PLUGIN, "device-plugin"), (om.LAYER_DEVICE_PLUGIN, "gpu-feature-discovery"),
        (om.LAYER_ALLOCATABLE, "device-plugin")]
    assert result["nodes"]["gpu-1"]["not_running"]["dcgm-exporter"] == "ImagePullBackOff"


def test_first_broken_layer_of_an_empty_report():
    assert nc.first_broken_layer({}) is None


# ---------------------------------------------------------------- input

def test_split_snapshot_takes_lists_typed_lists_and_single_objects():
    cp = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}}
    v1_list = {"apiVersion": "v1", "kind": "List", "items": [
        container_node("a"), pod("driver", "a"), daemonset("driver", []),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "skipped"}}]}
    node_list = {"apiVersion": "v1", "kind": "NodeList", "items": [{"metadata": {"name": "b"}}]}
    result = nc.split_snapshot([v1_list, None, node_list, cp])
    assert [n["metadata"]["name"] for n in result["nodes"]] == ["a", "b"]
    assert len(result["pods"]) == 1 and len(result["daemonsets"]) == 1
    assert result["clusterpolicies"] == [cp]


@pytest.mark.parametrize("documents, message", [
    ([["not", "an", "object"]], "document 1 is a list"),
    ([{"kind": "List", "items": [{"metadata": {}}]}], r"document 1 items\[0\] has no kind"),
    ([{"kind": "List", "items": {"a": 1}}], "document 1: items is a mapping, expected a list"),
    ([{"kind": ["Node"]}], "document 1: kind is a list, expected a string"),
    ([{"metadata": {"name": "x"}}], "document 1 has no kind"),
])
def test_split_snapshot_names_what_is_wrong(documents, message):
    with pytest.raises(ValueError, match=message):
        nc.split_snapshot(documents)


def test_parse_documents_json_and_multi_document_yaml():
    assert nc.parse_documents('{"kind": "List", "items": []}') == [{"kind": "List", "items": []}]
    text = "kind: Node\nmetadata: {name: a}\n---\n---\nkind: Pod\nmetadata: {name: b}\n"
    assert [d["kind"] for d in nc.parse_documents(text)] == ["Node", "Pod"]
    with pytest.raises(ValueError, match="^broken.yaml: not JSON or YAML: line 2: "):
        nc.parse_documents("kind: [unclosed\n", "broken.yaml")


@pytest.mark.parametrize("text, message", [
    ("just some words\n", "notes.txt: not JSON or YAML: line 1: a string ('just some words'), not a Kubernetes object"),
    ("kind: Node\n---\n\n42\n", "notes.txt: not JSON or YAML: line 4: an integer (42), not a Kubernetes object"),
    ('{\n "kind": "List"\n "items": []}', "notes.txt: not JSON or YAML: line 3: Expecting ',' delimiter"),
])
def test_text_that_holds_no_object_is_not_json_or_yaml(text, message):
    with pytest.raises(ValueError) as caught:
        nc.parse_documents(text, "notes.txt")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


# ---------------------------------------------------------------- policy

def test_policy_without_clusterpolicy_is_the_chart_defaults():
    p = policy()
    assert (p["namespace"], p["sandbox_workloads_enabled"], p["default_workload"], p["driver_enabled"],
            p["toolkit_enabled"]) == (om.DEFAULT_NAMESPACE, False, om.CONTAINER, True, True)


def test_policy_reads_the_clusterpolicy_and_options_win():
    cp = {"kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
          "spec": {"sandboxWorkloads": {"enabled": True, "defaultWorkload": om.VM_PASSTHROUGH},
                   "driver": {"enabled": False}},
          "status": {"namespace": "nvidia-gpu-operator", "state": "ready"}}
    p = nc.policy_from_inputs([cp], {})
    assert (p["namespace"], p["sandbox_workloads_enabled"], p["default_workload"], p["driver_enabled"]) == (
        "nvidia-gpu-operator", True, om.VM_PASSTHROUGH, False)
    p = nc.policy_from_inputs([cp], {"namespace": "ops", "driver_enabled": True, "default_workload": None})
    assert (p["namespace"], p["driver_enabled"], p["default_workload"]) == ("ops", True, om.VM_PASSTHROUGH)


def test_policy_uses_the_clusterpolicy_the_operator_acts_on():
    old = {"kind": "ClusterPolicy", "metadata": {"name": "first", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"driver": {"enabled": False}}, "status": {"state": "ready"}}
    ignored = {"kind": "ClusterPolicy", "metadata": {"name": "second", "creationTimestamp": "2025-01-01T00:00:00Z"},
               "spec": {"driver": {"enabled": True}}, "status": {"state": "ignored"}}
    assert nc.policy_from_inputs([ignored, old], {})["driver_enabled"] is False


def test_sandbox_option_switches_the_sandbox_operands_on():
    p = policy(sandbox_workloads_enabled=True)
    assert p["sandbox_workloads_enabled"] is True
    assert p["operands_enabled"]["vfio-manager"] is True
    assert p["operands_enabled"]["sandbox-device-plugin"] is True


def test_namespace_from_operand_daemonsets_when_nothing_else_says():
    ds = daemonset("driver", [])
    ds["metadata"]["namespace"] = "nvidia-gpu-operator"
    assert nc.policy_from_inputs([], {}, [ds])["namespace"] == "nvidia-gpu-operator"


# ---------------------------------------------------------------- check() and its summary

def lab_snapshot():
    with open(LAB_SNAPSHOT) as handle:
        return nc.split_snapshot(nc.parse_documents(handle.read(), LAB_SNAPSHOT))


def test_check_on_the_lab_snapshot():
    snapshot = lab_snapshot()
    result = nc.check(snapshot, nc.policy_from_inputs(snapshot["clusterpolicies"], {}, snapshot["daemonsets"]))
    assert result["policy"]["sandbox_workloads_enabled"] is True
    bad = sorted(name for name, report in result["nodes"].items() if not report["ok"])
    # The tainted node has a GPU and no operands, and nothing decided to leave it out.
    assert bad == ["gpu-container-2", "gpu-tainted-1"]
    assert result["nodes"]["gpu-container-2"]["codes"] == [nc.MISSING_OPERAND, nc.ORDER_VIOLATION]
    assert result["nodes"]["gpu-tainted-1"]["codes"] == [nc.UNTOLERATED_TAINT, nc.MISSING_OPERAND]
    summary = result["summary"]
    assert (summary["nodes"], summary["gpu_nodes"], summary["ok_nodes"], summary["warnings"]) == (6, 5, 4, 0)
    assert summary["errors"] == 12
    assert summary["by_code"] == {nc.MISSING_OPERAND: 7, nc.ORDER_VIOLATION: 4, nc.UNTOLERATED_TAINT: 1}
    message = nc.failure_message(result)
    assert message.startswith("12 error findings on 2 of 6 nodes: ")
    assert "gpu-container-2 (missing-operand, order-violation)" in message
    assert "gpu-tainted-1 (untolerated-taint, missing-operand)" in message


def test_check_on_the_lab_snapshot_with_the_tainted_node_isolated_by_the_inventory():
    snapshot = lab_snapshot()
    result = nc.check(snapshot, nc.policy_from_inputs(snapshot["clusterpolicies"], {}, snapshot["daemonsets"]),
                      isolated_nodes=["gpu-tainted-1"])
    assert result["nodes"]["gpu-tainted-1"]["ok"] is True
    assert (result["summary"]["errors"], result["summary"]["warnings"]) == (5, 7)


def test_check_limits_the_report_to_named_nodes():
    snapshot = lab_snapshot()
    result = nc.check(snapshot, policy(sandbox_workloads_enabled=True), ["gpu-container-1", "cpu-1"])
    assert list(result["nodes"]) == ["cpu-1", "gpu-container-1"]
    assert result["findings"] == []
    with pytest.raises(ValueError, match="nodes not in the cluster: nope"):
        nc.check(snapshot, policy(), ["gpu-container-1", "nope"])


def test_format_table_has_a_row_per_node():
    snapshot = lab_snapshot()
    result = nc.check(snapshot, nc.policy_from_inputs(snapshot["clusterpolicies"], {}))
    lines = nc.format_table(result).splitlines()
    assert lines[0].split() == ["NODE", "WORKLOAD", "RUNNING/EXPECTED", "ADVERTISED", "FINDINGS"]
    rows = dict((line.split()[0], line.split()[1:]) for line in lines[1:7])
    assert rows["gpu-container-2"] == ["container", "5/6", "nvidia.com/gpu=2", "missing-operand,", "order-violation"]
    assert rows["gpu-vgpu-1"] == ["vm-vgpu", "3/3", "nvidia.com/NVIDIA_A10-12Q=4", "ok"]
    assert rows["cpu-1"] == ["-", "-", "-", "ok"]


# ---------------------------------------------------------------- the module

def run_module(args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_node_check.main()


def module_result(capsys, args, check_mode=False):
    run_module(args, check_mode)
    return json.loads(capsys.readouterr().out)


def test_module_fails_on_error_findings_naming_nodes_and_codes(capsys):
    result = module_result(capsys, {"snapshot": [LAB_SNAPSHOT]})
    assert result["failed"] is True and result["changed"] is False
    assert "gpu-container-2 (missing-operand, order-violation)" in result["msg"]
    assert "gpu-tainted-1 (untolerated-taint, missing-operand)" in result["msg"]
    assert len(result["findings"]) == 12


def test_module_takes_the_nodes_the_inventory_isolates(capsys):
    result = module_result(capsys, {"snapshot": [LAB_SNAPSHOT], "isolated_nodes": ["gpu-tainted-1"]})
    assert result["failed"] is True
    assert "gpu-tainted-1" not in result["msg"]
    assert result["nodes"]["gpu-tainted-1"]["ok"] is True


def test_module_reports_without_failing_and_runs_in_check_mode(capsys):
    result = module_result(capsys, {"snapshot": [LAB_SNAPSHOT], "fail_on_findings": False}, check_mode=True)
    assert result.get("failed") is not True and result["changed"] is False
    assert result["nodes"]["gpu-container-2"]["not_running"] == {"container-toolkit": "CrashLoopBackOff"}
    assert result["policy"]["namespace"] == NS


def test_module_options_override_the_clusterpolicy(capsys):
    # Sandbox workloads off: the VM nodes' labels are ignored and they miss the container operands.
    result = module_result(capsys, {"snapshot": [LAB_SNAPSHOT], "sandbox_workloads_enabled": False,
                                    "nodes": ["gpu-passthrough-1"]})
    assert result["failed"] is True
    report = result["nodes"]["gpu-passthrough-1"]
    assert report["workload_config"] == om.CONTAINER
    assert report["codes"][0] == nc.LABEL_IGNORED


def test_module_snapshot_in_several_files(capsys, tmp_path):
    with open(LAB_SNAPSHOT) as handle:
        fleet = yaml.safe_load(handle)
    clusterpolicy = [item for item in fleet["items"] if item["kind"] == "ClusterPolicy"][0]
    fleet["items"] = [item for item in fleet["items"] if item["kind"] != "ClusterPolicy"]
    fleet_file, cp_file = tmp_path / "fleet.json", tmp_path / "cp.yaml"
    fleet_file.write_text(json.dumps(fleet))
    cp_file.write_text(yaml.safe_dump(clusterpolicy))
    without_cp = module_result(capsys, {"snapshot": [str(fleet_file)], "fail_on_findings": False})
    with_cp = module_result(capsys, {"snapshot": [str(fleet_file), str(cp_file)], "fail_on_findings": False})
    # The ClusterPolicy enables sandbox workloads; without it the chart default (off) applies.
    assert without_cp["nodes"]["gpu-vgpu-1"]["codes"][0] == nc.LABEL_IGNORED
    assert with_cp["nodes"]["gpu-vgpu-1"]["ok"] is True


@pytest.mark.parametrize("args, message", [
    ({"snapshot": [LAB_SNAPSHOT], "kubeconfig": "/tmp/kubeconfig"}, "mutually exclusive: snapshot|kubeconfig"),
    ({"snapshot": [LAB_SNAPSHOT], "default_workload": "vm"}, "default_workload must be one of"),
    ({"snapshot": ["/nonexistent/snap.json"]}, "cannot read snapshot /nonexistent/snap.json"),
    ({"snapshot": [LAB_SNAPSHOT], "nodes": ["gpu-9"]}, "nodes not in the cluster: gpu-9"),
])
def test_module_rejects_bad_input(capsys, args, message):
    result = module_result(capsys, args)
    assert result["failed"] is True
    assert message in result["msg"]
    assert "findings" not in result


def test_module_documentation_matches_its_argument_spec():
    from ansible_collections.gpuplatform.rke2.plugins.doc_fragments.k8s_connection import ModuleDocFragment

    options = dict(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])
    options.update(yaml.safe_load(gpu_node_check.DOCUMENTATION)["options"])
    spec = gpu_node_check.argument_spec()
    assert sorted(options) == sorted(spec)
    for name, doc in options.items():
        arg = spec[name]
        assert doc["type"] == arg["type"], name
        assert doc.get("default") == arg.get("default"), name
        assert doc.get("choices") == arg.get("choices"), name
        assert doc.get("elements") == arg.get("elements"), name
        assert doc.get("aliases") == arg.get("aliases"), name


# ---------------------------------------------------------------- live mode with a fake API

class FakeResponse(object):
    def __init__(self, body):
        self.data = json.dumps(body).encode()


class FakeApi(object):
    """Serves lists in pages of one item, records the calls."""

    calls = []
    objects = {}

    def __init__(self, client):
        self.client = client

    def _page(self, what, **kwargs):
        FakeApi.calls.append((what, kwargs.get("_continue")))
        if isinstance(FakeApi.objects[what], Exception):
            raise FakeApi.objects[what]
        items = FakeApi.objects[what]
        start = int(kwargs.get("_continue") or 0)
        more = start + 1 < len(items)
        return FakeResponse({"items": items[start:start + 1], "metadata": {"continue": str(start + 1) if more else None}})

    def list_cluster_custom_object(self, group, version, plural, **kwargs):
        return self._page("clusterpolicies", **kwargs)

    def list_node(self, **kwargs):
        return self._page("nodes", **kwargs)

    def list_namespaced_pod(self, namespace, **kwargs):
        return self._page("pods/" + namespace, **kwargs)

    def list_namespaced_daemon_set(self, namespace, **kwargs):
        return self._page("daemonsets/" + namespace, **kwargs)


class FakeClient(object):
    closed = False

    def close(self):
        FakeClient.closed = True


@pytest.fixture
def fake_cluster(monkeypatch):
    from kubernetes.client.rest import ApiException

    class K8s(object):
        CustomObjectsApi = CoreV1Api = AppsV1Api = FakeApi

    monkeypatch.setattr(gpu_node_check, "k8s_client", K8s)
    monkeypatch.setattr(gpu_node_check, "api_client", lambda params: FakeClient())
    FakeApi.calls = []
    FakeClient.closed = False
    snapshot = lab_snapshot()
    FakeApi.objects = {
        "clusterpolicies": ApiException(status=404, reason="Not Found"),
        "nodes": snapshot["nodes"],
        "pods/gpu-operator": [p for p in snapshot["pods"] if p["metadata"]["namespace"] == NS],
        "daemonsets/gpu-operator": snapshot["daemonsets"],
    }
    return snapshot


def test_live_mode_reads_every_page(fake_cluster):
    result = gpu_node_check.run({"fail_on_findings": True, "sandbox_workloads_enabled": True})
    assert sorted(result["nodes"]) == sorted(n["metadata"]["name"] for n in fake_cluster["nodes"])
    assert ("nodes", "5") in FakeApi.calls and ("pods/gpu-operator", "17") in FakeApi.calls
    assert [r["node"] for r in result["nodes"].values() if not r["ok"]] == ["gpu-container-2", "gpu-tainted-1"]
    assert FakeClient.closed


def test_live_mode_without_the_crd_uses_the_chart_defaults(fake_cluster):
    result = gpu_node_check.run({})
    assert result["policy"]["sandbox_workloads_enabled"] is False
    assert result["nodes"]["gpu-vgpu-1"]["codes"][0] == nc.LABEL_IGNORED


def test_live_mode_lists_pods_in_the_clusterpolicys_namespace(fake_cluster):
    cp = copy.deepcopy(fake_cluster["clusterpolicies"][0])
    cp["status"]["namespace"] = "nvidia-gpu-operator"
    FakeApi.objects["clusterpolicies"] = [cp]
    FakeApi.objects["pods/nvidia-gpu-operator"] = []
    FakeApi.objects["daemonsets/nvidia-gpu-operator"] = []
    result = gpu_node_check.run({})
    assert result["policy"]["namespace"] == "nvidia-gpu-operator"
    assert ("pods/nvidia-gpu-operator", None) in FakeApi.calls
    assert result["nodes"]["gpu-container-1"]["not_running"]["driver"] == "no pod"


def test_live_mode_api_errors_name_what_could_not_be_listed(fake_cluster):
    from kubernetes.client.rest import ApiException

    FakeApi.objects["nodes"] = ApiException(status=403, reason="Forbidden")
    with pytest.raises(ValueError, match="cannot list nodes: 403 Forbidden"):
        gpu_node_check.run({})


# ---------------------------------------------------------------- the CLI

def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".build", "collections"))
    return subprocess.run([sys.executable, CLI] + list(args), capture_output=True, text=True, env=env, check=False)


def test_cli_prints_a_table_and_fails_on_error_findings():
    proc = run_cli("--snapshot", LAB_SNAPSHOT)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["NODE", "WORKLOAD"]
    assert [line.split()[0] for line in lines[1:7]] == [
        "cpu-1", "gpu-container-1", "gpu-container-2", "gpu-passthrough-1", "gpu-tainted-1", "gpu-vgpu-1"]
    assert "error   gpu-container-2 order-violation: device-plugin runs while container-toolkit" in proc.stdout
    assert lines[-1] == "6 nodes (5 GPU), 4 ok; 12 errors, 0 warnings"
    proc = run_cli("--snapshot", LAB_SNAPSHOT, "--isolated-node", "gpu-tainted-1")
    assert proc.stdout.splitlines()[-1] == "6 nodes (5 GPU), 5 ok; 5 errors, 7 warnings"


def test_cli_json_is_the_module_result():
    proc = run_cli("--snapshot", LAB_SNAPSHOT, "--json", "--no-fail")
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    expected = gpu_node_check.run({"snapshot": [LAB_SNAPSHOT]})
    assert printed["findings"] == expected["findings"]
    assert printed["nodes"] == expected["nodes"]
    assert (printed["changed"], printed["failed"]) == (False, False)


def test_cli_options_reach_the_policy():
    proc = run_cli("--snapshot", LAB_SNAPSHOT, "--json", "--no-sandbox-workloads-enabled", "--node", "gpu-vgpu-1")
    assert proc.returncode == 1
    printed = json.loads(proc.stdout)
    assert list(printed["nodes"]) == ["gpu-vgpu-1"]
    assert printed["nodes"]["gpu-vgpu-1"]["codes"][0] == nc.LABEL_IGNORED
    # label-ignored, 6 container operands missing, 3 VM operands unexpected, the vGPU resource.
    assert printed["msg"] == ("11 error findings on 1 of 1 nodes: gpu-vgpu-1 (label-ignored, missing-operand, "
                              "unexpected-operand, resource-mismatch)")


@pytest.mark.parametrize("args, message", [
    (("--snapshot", "/nonexistent.json"), "cannot read snapshot /nonexistent.json"),
    (("--snapshot", LAB_SNAPSHOT, "--kubeconfig", "k"), "mutually exclusive"),
    (("--snapshot", LAB_SNAPSHOT, "--default-workload", "vm"), "invalid choice"),
])
def test_cli_bad_input_exits_2(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
