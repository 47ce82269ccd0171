"""node_labels: inventory -> desired labels, the checks, ownership and the label patch."""
import json

import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_labels as nl
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from tests.unit.node_labels_helpers import merge_patch

SANDBOX_ON = nl.sandbox_policy(True)
SANDBOX_OFF = nl.sandbox_policy(False)


def node_obj(name="gpu-1", labels=None, owned=None, unschedulable=None, annotations=None):
    annotations = dict(annotations or {})
    if owned is not None:
        annotations[nl.OWNED_LABELS_ANNOTATION] = json.dumps(owned)
    obj = {"metadata": {"name": name, "labels": dict(labels or {}), "annotations": annotations}, "spec": {}}
    if unschedulable is not None:
        obj["spec"]["unschedulable"] = unschedulable
    return obj


def settle(obj, desired, **kw):
    """Apply the planned patch to obj, as the API server would."""
    patch = nl.label_patch(nl.plan_labels(obj, desired, **kw))
    return merge_patch(obj, patch) if patch else obj


# ---------------------------------------------------------------- desired labels

def test_desired_labels_use_the_operand_model_keys():
    node = {"name": "n", "workload_config": "vm-vgpu", "operands_disabled": ["vgpu-device-manager"],
            "isolated": False, "vgpu_config": "A10-12Q"}
    assert nl.desired_labels(node) == {
        om.WORKLOAD_CONFIG_LABEL: "vm-vgpu",
        om.DEPLOY_LABEL_PREFIX + "vgpu-device-manager": "false",
        om.VGPU_CONFIG_LABEL: "A10-12Q",
    }


def test_isolation_sets_operands_false_and_holds_back_operand_switches():
    node = {"name": "n", "workload_config": "container", "operands_disabled": ["dcgm-exporter"], "isolated": True}
    assert nl.desired_labels(node) == {om.WORKLOAD_CONFIG_LABEL: "container", om.OPERANDS_LABEL: "false"}


def test_nothing_declared_means_no_labels():
    assert nl.desired_labels({"name": "n", "operands_disabled": [], "isolated": False}) == {}


# ---------------------------------------------------------------- checks

def test_unknown_workload_config_names_host_and_value():
    errors, _warnings = nl.validate_nodes([{"host": "gpu01", "name": "gpu-1", "workload_config": "vm-gpu"}], SANDBOX_ON)
    assert errors == ["host gpu01 (node gpu-1): gpu_workload_config 'vm-gpu' is not a workload config "
                      "(one of: container, vm-passthrough, vm-vgpu)"]


def test_unknown_operand_names_host_and_operand():
    errors, _warnings = nl.validate_nodes([{"host": "gpu01", "name": "gpu01", "workload_config": "container",
                                            "operands_disabled": ["dcgm-exportr"]}], SANDBOX_ON)
    assert len(errors) == 1
    assert errors[0].startswith("host gpu01: gpu_operands_disabled lists 'dcgm-exportr', which is not an operand")


def test_operand_of_another_workload_config_is_refused():
    errors, _warnings = nl.validate_nodes([{"host": "gpu01", "name": "gpu01", "workload_config": "container",
                                            "operands_disabled": ["vfio-manager"]}], SANDBOX_ON)
    assert len(errors) == 1
    assert "'vfio-manager', which does not run on container nodes" in errors[0]


def test_operand_check_uses_the_default_workload_when_the_node_declares_none():
    policy_ = nl.sandbox_policy(True, "vm-passthrough")
    errors, _warnings = nl.validate_nodes([{"name": "n", "operands_disabled": ["vfio-manager"]}], policy_)
    assert errors == []
    errors, _warnings = nl.validate_nodes([{"name": "n", "operands_disabled": ["driver"]}], policy_)
    assert "which does not run on vm-passthrough nodes" in errors[0]


def test_vm_config_with_sandbox_off_fails_by_default_and_warns_when_told():
    nodes = [{"host": "gpu02", "name": "gpu02", "workload_config": "vm-passthrough"}]
    errors, warnings = nl.validate_nodes(nodes, SANDBOX_OFF)
    assert warnings == []
    assert len(errors) == 1
    assert errors[0].startswith("host gpu02: gpu_workload_config 'vm-passthrough' while sandbox workloads are off")
    errors, warnings = nl.validate_nodes(nodes, SANDBOX_OFF, "warn")
    assert errors == []
    assert len(warnings) == 1 and "sandbox workloads are off" in warnings[0]


def test_container_with_sandbox_off_is_fine():
    errors, warnings = nl.validate_nodes([{"name": "n", "workload_config": "container"}], SANDBOX_OFF)
    assert (errors, warnings) == ([], [])


def test_vgpu_profile_must_be_a_profile():
    errors, _warnings = nl.validate_nodes([{"host": "gpu03", "name": "gpu03", "workload_config": "vm-vgpu",
                                            "vgpu_config": "default"}], SANDBOX_ON)
    assert len(errors) == 1
    assert "gpu_vgpu_config 'default' is not a vGPU profile" in errors[0]


def test_vgpu_warnings():
    _errors, warnings = nl.validate_nodes([{"host": "a", "name": "a", "workload_config": "container",
                                            "vgpu_config": "A10-12Q"},
                                           {"host": "b", "name": "b", "workload_config": "vm-vgpu"}], SANDBOX_ON)
    assert len(warnings) == 2
    assert "host a: gpu_vgpu_config 'A10-12Q' is set on a container node" in warnings[0]
    assert "host b: vm-vgpu node without gpu_vgpu_config" in warnings[1]


def test_two_hosts_on_one_node_are_refused():
    errors, _warnings = nl.validate_nodes([{"host": "a", "name": "gpu-1"}, {"host": "b", "name": "gpu-1"}], SANDBOX_ON)
    assert errors == ["host b (node gpu-1): k8s_node_name 'gpu-1' is also the node of host a"]


def test_unknown_sandbox_off_action():
    errors, _warnings = nl.validate_nodes([], SANDBOX_ON, "ignore")
    assert errors == ["gpu_node_labels_sandbox_off_action is 'ignore' (one of: fail, warn)"]


# ---------------------------------------------------------------- ownership

DESIRED = {om.WORKLOAD_CONFIG_LABEL: "vm-vgpu", om.VGPU_CONFIG_LABEL: "A10-12Q"}


def test_fresh_node_sets_and_owns_and_patch_names_only_those_keys():
    obj = node_obj(labels={"kubernetes.io/hostname": "gpu-1", "team": "ml"})
    plan = nl.plan_labels(obj, DESIRED)
    assert [(c["key"], c["action"]) for c in plan["changes"]] == [
        (om.WORKLOAD_CONFIG_LABEL, "set"), (om.VGPU_CONFIG_LABEL, "set")]
    patch = nl.label_patch(plan)
    assert patch == {"metadata": {
        "labels": DESIRED,
        "annotations": {nl.OWNED_LABELS_ANNOTATION: json.dumps(sorted(DESIRED), separators=(",", ":"))}}}


def test_second_plan_after_applying_is_empty():
    obj = settle(node_obj(labels={"team": "ml"}), DESIRED)
    plan = nl.plan_labels(obj, DESIRED)
    assert plan["changes"] == []
    assert nl.label_patch(plan) is None
    assert nl.label_diff("gpu-1", plan) is None


def test_removing_a_variable_removes_only_its_own_label():
    obj = settle(node_obj(labels={"team": "ml", om.GPU_PRESENT_LABEL: "true"}), DESIRED)
    plan = nl.plan_labels(obj, {om.WORKLOAD_CONFIG_LABEL: "vm-vgpu"})
    assert plan["changes"] == [{"key": om.VGPU_CONFIG_LABEL, "before": "A10-12Q", "after": None, "action": "remove"}]
    after = merge_patch(obj, nl.label_patch(plan))
    assert after["metadata"]["labels"] == {"team": "ml", om.GPU_PRESENT_LABEL: "true",
                                           om.WORKLOAD_CONFIG_LABEL: "vm-vgpu"}
    assert json.loads(after["metadata"]["annotations"][nl.OWNED_LABELS_ANNOTATION]) == [om.WORKLOAD_CONFIG_LABEL]


def test_removing_every_variable_removes_the_annotation_too():
    obj = settle(node_obj(), DESIRED)
    after = settle(obj, {})
    assert om.WORKLOAD_CONFIG_LABEL not in after["metadata"]["labels"]
    assert nl.OWNED_LABELS_ANNOTATION not in after["metadata"]["annotations"]


def test_a_foreign_label_with_the_same_key_but_not_desired_is_untouched():
    # k8s-driver-manager put deploy.driver=pre-installed there; the inventory says nothing about it.
    obj = node_obj(labels={om.DEPLOY_LABEL_PREFIX + "driver": "pre-installed"}, owned=[])
    plan = nl.plan_labels(obj, {om.WORKLOAD_CONFIG_LABEL: "container"})
    assert [c["key"] for c in plan["changes"]] == [om.WORKLOAD_CONFIG_LABEL]
    assert om.DEPLOY_LABEL_PREFIX + "driver" not in nl.label_patch(plan)["metadata"]["labels"]


def test_existing_equal_value_is_adopted_without_a_label_change():
    obj = node_obj(labels={om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"})
    plan = nl.plan_labels(obj, {om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"})
    assert plan["changes"] == [{"key": om.WORKLOAD_CONFIG_LABEL, "before": "vm-passthrough",
                                "after": "vm-passthrough", "action": "adopt"}]
    patch = nl.label_patch(plan)
    assert "labels" not in patch["metadata"]
    assert json.loads(patch["metadata"]["annotations"][nl.OWNED_LABELS_ANNOTATION]) == [om.WORKLOAD_CONFIG_LABEL]
    assert nl.label_diff("gpu-1", plan) is None


def test_operator_written_deploy_label_is_taken_over():
    key = om.DEPLOY_LABEL_PREFIX + "dcgm-exporter"
    plan = nl.plan_labels(node_obj(labels={key: "true"}), {key: "false"})
    assert plan["refusals"] == []
    assert plan["changes"] == [{"key": key, "before": "true", "after": "false", "action": "set"}]


def test_someone_elses_value_is_refused_unless_adopt_existing():
    obj = node_obj(labels={om.VGPU_CONFIG_LABEL: "A10-4Q"})
    plan = nl.plan_labels(obj, {om.VGPU_CONFIG_LABEL: "A10-12Q"}, where="host gpu03")
    assert plan["refusals"] == [
        "host gpu03: label nvidia.com/vgpu.config=A10-4Q on node gpu-1 was not set by this collection; the "
        "inventory wants 'A10-12Q'. Remove the label, or set gpu_node_labels_adopt_existing: true to take it over"]
    assert plan["owned"] == []
    plan = nl.plan_labels(obj, {om.VGPU_CONFIG_LABEL: "A10-12Q"}, adopt_existing=True)
    assert plan["refusals"] == []
    assert plan["owned"] == [om.VGPU_CONFIG_LABEL]


def test_preinstalled_is_taken_over_on_the_drivers_label_only():
    # k8s-driver-manager writes it on deploy.driver where the host driver works; nobody
    # writes it anywhere else, so elsewhere it is someone's choice.
    driver, dcgm = om.deploy_label("driver"), om.deploy_label("dcgm-exporter")
    assert nl.operator_written(driver, om.DEPLOY_PRE_INSTALLED)
    assert not nl.operator_written(dcgm, om.DEPLOY_PRE_INSTALLED)
    plan = nl.plan_labels(node_obj(labels={driver: om.DEPLOY_PRE_INSTALLED}), {driver: "false"})
    assert plan["refusals"] == [] and plan["changes"][0]["after"] == "false"
    assert nl.plan_labels(node_obj(labels={dcgm: om.DEPLOY_PRE_INSTALLED}), {dcgm: "false"})["refusals"]


def test_isolation_label_is_not_an_operator_default():
    obj = node_obj(labels={om.OPERANDS_LABEL: "true"})
    assert nl.plan_labels(obj, {om.OPERANDS_LABEL: "false"})["refusals"]


def test_owned_label_changed_by_hand_is_set_back():
    obj = settle(node_obj(), DESIRED)
    obj["metadata"]["labels"][om.VGPU_CONFIG_LABEL] = "A10-4Q"
    plan = nl.plan_labels(obj, DESIRED)
    assert plan["refusals"] == []
    assert plan["changes"] == [{"key": om.VGPU_CONFIG_LABEL, "before": "A10-4Q", "after": "A10-12Q", "action": "set"}]


def test_owned_label_already_gone_only_updates_the_annotation():
    obj = node_obj(labels={}, owned=[om.DEPLOY_LABEL_PREFIX + "dcgm-exporter"])
    plan = nl.plan_labels(obj, {})
    assert plan["changes"] == []
    assert nl.label_patch(plan) == {"metadata": {"annotations": {nl.OWNED_LABELS_ANNOTATION: None}}}


def test_malformed_annotation_is_an_error_naming_the_node():
    obj = node_obj(annotations={nl.OWNED_LABELS_ANNOTATION: "nvidia.com/vgpu.config"})
    with pytest.raises(ValueError, match="node gpu-1: annotation gpuplatform.rke2/owned-labels is"):
        nl.plan_labels(obj, DESIRED)


def test_diff_lists_before_and_after_of_changed_keys():
    obj = settle(node_obj(labels={"team": "ml"}), DESIRED)
    plan = nl.plan_labels(obj, {om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"})
    assert nl.label_diff("gpu-1", plan) == {
        "before_header": "node/gpu-1 labels", "after_header": "node/gpu-1 labels",
        "before": "nvidia.com/gpu.workload.config=vm-vgpu\nnvidia.com/vgpu.config=A10-12Q\n",
        "after": "nvidia.com/gpu.workload.config=vm-passthrough\n",
    }


# ---------------------------------------------------------------- switching an operand back on

DCGM_EXPORTER = om.deploy_label("dcgm-exporter")
CONTAINER_NODE = {"kubernetes.io/hostname": "gpu-1", om.NFD_GPU_LABELS[0]: "true", om.GPU_PRESENT_LABEL: "true"}


def test_an_operand_dropped_from_the_list_is_switched_back_on_with_true():
    # Removing the false would leave the operand off for hours: the operator does not
    # reconcile a node when a deploy label goes.
    obj = settle(node_obj(labels=dict(CONTAINER_NODE, **{DCGM_EXPORTER: "true"})), {DCGM_EXPORTER: "false"})
    assert obj["metadata"]["labels"][DCGM_EXPORTER] == "false"
    plan = nl.plan_labels(obj, {})
    assert plan["changes"] == [{"key": DCGM_EXPORTER, "before": "false", "after": "true", "action": "set"}]
    assert plan["owned"] == []
    assert nl.label_patch(plan) == {"metadata": {"labels": {DCGM_EXPORTER: "true"},
                                                 "annotations": {nl.OWNED_LABELS_ANNOTATION: None}}}
    after = settle(obj, {})
    assert after["metadata"]["labels"][DCGM_EXPORTER] == "true"
    # "true" is the operator's own value: nothing more to do, nothing owned.
    assert nl.plan_labels(after, {})["changes"] == []


def test_an_operand_of_the_config_the_node_leaves_is_removed_not_switched_on():
    vfio = om.deploy_label("vfio-manager")
    desired = {om.WORKLOAD_CONFIG_LABEL: om.VM_PASSTHROUGH, vfio: "false"}
    obj = settle(node_obj(labels=dict(CONTAINER_NODE)), desired, policy_=SANDBOX_ON)
    plan = nl.plan_labels(obj, {om.WORKLOAD_CONFIG_LABEL: om.CONTAINER}, policy_=SANDBOX_ON)
    # The operator drops the labels of the old config itself; "true" there would place a
    # vfio-manager pod on a container node until it does.
    assert {"key": vfio, "before": "false", "after": None, "action": "remove"} in plan["changes"]


def test_switches_of_a_node_being_isolated_are_removed():
    obj = settle(node_obj(labels=dict(CONTAINER_NODE)), {DCGM_EXPORTER: "false"})
    plan = nl.plan_labels(obj, {om.OPERANDS_LABEL: "false"})
    assert {"key": DCGM_EXPORTER, "before": "false", "after": None, "action": "remove"} in plan["changes"]


def test_mig_manager_comes_back_on_only_where_the_gpu_is_mig_capable():
    mig = om.deploy_label("mig-manager")
    for capable, after in (("true", "true"), ("false", None)):
        labels = dict(CONTAINER_NODE, **{om.MIG_CAPABLE_LABEL: capable, mig: "true"})
        obj = settle(node_obj(labels=labels), {mig: "false"})
        (change,) = nl.plan_labels(obj, {})["changes"]
        assert (change["key"], change["after"]) == (mig, after)


@pytest.mark.parametrize("validator, files, waiting", [
    ("operator-validator", "/run/nvidia/validations/toolkit-ready",
     "device-plugin, mps-control-daemon, gpu-feature-discovery, dcgm, dcgm-exporter, mig-manager"),
    ("sandbox-validator", "/run/nvidia/validations/vfio-pci-ready, /run/nvidia/validations/vgpu-devices-ready, "
                          "/run/nvidia/validations/vgpu-manager-ready",
     "sandbox-device-plugin, vgpu-device-manager"),
])
def test_a_validator_cannot_be_switched_off(validator, files, waiting):
    config = om.CONTAINER if validator == "operator-validator" else om.VM_PASSTHROUGH
    errors, _warnings = nl.validate_nodes([{"host": "gpu01", "name": "gpu01", "workload_config": config,
                                            "operands_disabled": [validator]}], SANDBOX_ON)
    assert errors == [
        "host gpu01: gpu_operands_disabled lists %r, which is refused: the validator is a gate, not a leaf. It writes "
        "%s, which %s wait for in their init containers; they keep running now, but after the node's next reboot "
        "(/run starts empty) they hang in Init. Remove it from gpu_operands_disabled; to take the node out of the "
        "GPU layer, set gpu_node_isolated: true" % (validator, files, waiting)]


def test_an_operand_without_a_deploy_label_of_its_own_cannot_be_switched_off():
    errors, _warnings = nl.validate_nodes([{"host": "gpu01", "name": "gpu01", "workload_config": "container",
                                            "operands_disabled": ["mps-control-daemon"]}], SANDBOX_ON)
    assert errors == ["host gpu01: gpu_operands_disabled lists 'mps-control-daemon', which has no deploy label of its "
                      "own (its DaemonSet selects nvidia.com/gpu.deploy.device-plugin): switching it off would switch "
                      "that off too"]


# ---------------------------------------------------------------- paused labels

def test_a_paused_label_is_left_alone_without_a_refusal():
    obj = node_obj(labels=dict(CONTAINER_NODE, **{DCGM_EXPORTER: "paused-for-driver-upgrade"}))
    plan = nl.plan_labels(obj, {DCGM_EXPORTER: "false"}, where="host gpu01")
    assert plan["changes"] == [] and plan["refusals"] == [] and plan["owned"] == []
    assert nl.label_patch(plan) is None
    assert plan["deferred"] == [
        "host gpu01: label nvidia.com/gpu.deploy.dcgm-exporter=paused-for-driver-upgrade on node gpu-1 is left alone: "
        "k8s-driver-manager is upgrading the driver, and it sets the label back to true when done. The inventory "
        "wants 'false'; run again once that is done"]
    # Back to true after the upgrade: taken over as usual.
    obj["metadata"]["labels"][DCGM_EXPORTER] = "true"
    assert nl.plan_labels(obj, {DCGM_EXPORTER: "false"})["changes"][0]["after"] == "false"


def test_an_owned_label_that_is_paused_stays_owned_and_untouched():
    obj = settle(node_obj(labels=dict(CONTAINER_NODE)), {DCGM_EXPORTER: "false"})
    obj["metadata"]["labels"][DCGM_EXPORTER] = "paused-for-mig-change"
    for desired in ({DCGM_EXPORTER: "false"}, {}):
        plan = nl.plan_labels(obj, desired)
        assert plan["changes"] == [] and plan["owned"] == [DCGM_EXPORTER] and len(plan["deferred"]) == 1
    assert "mig-parted is applying a MIG configuration" in plan["deferred"][0]
    assert "The inventory wants the operand on" in plan["deferred"][0]


# ---------------------------------------------------------------- workload switches

def test_switch_from_default_container_to_vm():
    assert nl.workload_switch({}, {om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"}, SANDBOX_ON) == \
        ("container", "vm-passthrough")
    assert nl.workload_switch({om.WORKLOAD_CONFIG_LABEL: "container"}, {}, SANDBOX_ON) is None
    assert nl.workload_switch({om.WORKLOAD_CONFIG_LABEL: "vm-vgpu"}, {om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"},
                              SANDBOX_ON) == ("vm-vgpu", "vm-passthrough")


def test_no_switch_while_the_operator_ignores_the_label():
    assert nl.workload_switch({}, {om.WORKLOAD_CONFIG_LABEL: "vm-passthrough"}, SANDBOX_OFF) is None


def pod(name, phase="Running", resources=None, init_resources=None, labels=None, uid=None, ns="default"):
    spec = {"containers": [{"name": "c", "resources": resources or {}}]}
    if init_resources:
        spec["initContainers"] = [{"name": "i", "resources": init_resources}]
    return {"metadata": {"name": name, "namespace": ns, "uid": uid or "uid-" + name, "labels": labels or {}},
            "spec": spec, "status": {"phase": phase}}


def test_gpu_workloads_are_pods_holding_nvidia_resources():
    pods = [
        pod("train", resources={"limits": {"nvidia.com/gpu": "1"}}),
        pod("pending", phase="Pending", resources={"requests": {"nvidia.com/gpu": "1"}}),
        pod("done", phase="Succeeded", resources={"limits": {"nvidia.com/gpu": "1"}}),
        pod("crashed", phase="Failed", resources={"limits": {"nvidia.com/gpu": "1"}}),
        pod("web", resources={"limits": {"cpu": "1"}}),
        pod("init", init_resources={"limits": {"nvidia.com/gpu": "1"}}),
        pod("virt-launcher-vm1-abcde", ns="vms", resources={"limits": {"nvidia.com/GA102GL_A10": "1"}},
            labels={"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "vm1"}),
        pod("virt-launcher-plain", ns="vms", labels={"kubevirt.io": "virt-launcher"}),
    ]
    found = nl.gpu_workloads(pods)
    assert [(w["name"], w["vm"], w["resources"]) for w in found] == [
        ("train", None, ["nvidia.com/gpu"]),
        ("pending", None, ["nvidia.com/gpu"]),
        ("init", None, ["nvidia.com/gpu"]),
        ("virt-launcher-vm1-abcde", "vm1", ["nvidia.com/GA102GL_A10"]),
    ]
    assert nl.describe_workload(found[-1]) == "VM vms/vm1 (pod virt-launcher-vm1-abcde) using nvidia.com/GA102GL_A10"


def test_switch_refusal_names_host_switch_and_workloads():
    workloads = nl.gpu_workloads([pod("p%d" % i, resources={"limits": {"nvidia.com/gpu": "1"}}) for i in range(12)])
    message = nl.switch_refusal("host gpu01", ("container", "vm-passthrough"), workloads)
    assert message.startswith("host gpu01: switching the workload config from container to vm-passthrough is "
                              "refused while GPU workloads run there")
    assert "pod default/p0 using nvidia.com/gpu" in message
    assert "p10" not in message and "and 2 more" in message
    assert "gpu_node_labels_drain: true" in message and "gpu_node_labels_force: true" in message


def test_remaining_workloads_go_by_uid():
    evicted = nl.gpu_workloads([pod("train", resources={"limits": {"nvidia.com/gpu": "1"}})])
    assert nl.remaining_workloads(evicted, [pod("train", uid="uid-train")]) == evicted
    assert nl.remaining_workloads(evicted, [pod("train", uid="a-new-one")]) == []
    assert nl.remaining_workloads(evicted, [pod("train", uid="uid-train", phase="Succeeded")]) == []


def test_cordon_only_a_schedulable_node_and_lift_only_our_cordon():
    patch = nl.cordon_patch(node_obj(), ("container", "vm-vgpu"))
    assert patch == {"metadata": {"annotations": {nl.CORDONED_ANNOTATION: "container->vm-vgpu"}},
                     "spec": {"unschedulable": True}}
    assert nl.cordon_patch(node_obj(unschedulable=True), ("container", "vm-vgpu")) is None
    cordoned = merge_patch(node_obj(), patch)
    after = merge_patch(cordoned, nl.uncordon_patch(cordoned))
    assert after["spec"] == {} and nl.CORDONED_ANNOTATION not in after["metadata"]["annotations"]
    assert nl.uncordon_patch(node_obj(unschedulable=True)) is None
