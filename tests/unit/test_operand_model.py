"""The operand model against the GPU Operator's own manifests and chart values, and the
label semantics the checks rely on."""

import os

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The operator's own manifests: the repository's copy of upstream (tests/lab/reference), the
# lab's offline fallback. The chart values: the role's copy of the chart's values.yaml.
REFERENCE = os.path.join(ROOT, "tests", "lab", "reference", "gpu-operator-v26.3.2")
CHART_VALUES = os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v26.3.2-values.yaml")
GPU = {om.GPU_PRESENT_LABEL: "true"}


def reference_daemonset(asset):
    with open(os.path.join(REFERENCE, "assets", asset)) as handle:
        (ds,) = [d for d in yaml.safe_load_all(handle) if d and d.get("kind") == "DaemonSet"]
    return ds


def chart_values():
    with open(CHART_VALUES) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("operand_", [o for o in om.OPERANDS if o.asset], ids=lambda o: o.name)
def test_operand_matches_the_operators_manifest(operand_):
    ds = reference_daemonset(operand_.asset)
    template = ds["spec"]["template"]
    key, value = operand_.pod_selector
    assert ds["metadata"]["name"] == operand_.daemonset
    assert template["metadata"]["labels"][key] == value
    assert ds["spec"]["selector"]["matchLabels"][key] == value
    assert template["spec"]["nodeSelector"] == om.node_selector(operand_)
    assert (template["spec"]["nodeSelector"] == {om.deploy_label(operand_.name): om.DEPLOY_TRUE}) is (
        operand_.capability_label is None)


@pytest.mark.parametrize("operand_", om.OPERANDS, ids=lambda o: o.name)
def test_enabled_default_matches_the_chart(operand_):
    section = chart_values()[operand_.values_key]
    # The validator has no enabled switch: it always runs.
    assert section.get("enabled", True) is operand_.enabled_by_default


def test_every_operand_daemonset_of_the_operator_is_modelled():
    # Every DaemonSet manifest the operator ships (the reference copy of assets/) is an operand here.
    assets = sorted(name for name in os.listdir(os.path.join(REFERENCE, "assets")) if name.endswith(".yaml"))
    assert assets == sorted(o.asset for o in om.OPERANDS if o.asset)


def test_chart_defaults_match_the_chart():
    values = chart_values()
    policy = om.policy_from_spec(values)
    for key in ("sandbox_workloads_enabled", "default_workload", "driver_enabled", "toolkit_enabled"):
        assert policy[key] == om.CHART_DEFAULTS[key], key
    assert list(values["daemonsets"]["tolerations"]) == list(om.DEFAULT_OPERAND_TOLERATIONS)


def test_every_pod_selector_names_one_operand():
    selectors = [o.pod_selector for o in om.OPERANDS]
    assert len(set(selectors)) == len(selectors)
    for o in om.OPERANDS:
        assert om.operand_of_pod(dict([o.pod_selector])) is o
    assert om.operand_of_pod({"app": "nvidia-vfio-manager"}) is None


def test_chains_put_dependencies_first():
    assert om.chain_for_workload(om.CONTAINER)[:4] == ("driver", "container-toolkit", "operator-validator",
                                                       "device-plugin")
    assert om.chain_for_workload(om.VM_PASSTHROUGH)[:3] == ("vfio-manager", "sandbox-validator",
                                                            "sandbox-device-plugin")
    assert om.chain_for_workload(om.VM_VGPU)[:4] == ("vgpu-manager", "vgpu-device-manager", "sandbox-validator",
                                                     "sandbox-device-plugin")
    for config in om.WORKLOAD_CONFIGS:
        chain = om.chain_for_workload(config)
        assert sorted(chain) == sorted(o.name for o in om.operands_for_workload(config))
        for name in chain:
            for dep in om.operand(name).depends_on:
                if dep in chain:
                    assert chain.index(dep) < chain.index(name), (config, name, dep)


@pytest.mark.parametrize("sandbox, label, config", [
    (False, None, om.CONTAINER),
    (False, om.VM_PASSTHROUGH, om.CONTAINER),
    (True, None, om.VM_VGPU),
    (True, om.VM_PASSTHROUGH, om.VM_PASSTHROUGH),
    # The operator applies the default workload to a value it does not know.
    (True, "vm-bogus", om.VM_VGPU),
])
def test_effective_workload_config(sandbox, label, config):
    policy = om.policy_from_spec({"sandboxWorkloads": {"enabled": sandbox, "defaultWorkload": om.VM_VGPU}})
    labels = {om.WORKLOAD_CONFIG_LABEL: label} if label else {}
    assert om.effective_workload_config(labels, policy) == (config, label)


def test_invalid_default_workload_falls_back_to_container():
    policy = om.policy_from_spec({"sandboxWorkloads": {"enabled": True, "defaultWorkload": "vm-bogus"}})
    assert om.effective_workload_config({}, policy) == (om.CONTAINER, None)


def test_sandbox_override_enables_the_sandbox_operands():
    # Derived flags follow the overrides: sandbox on through an option, not the spec.
    policy = om.policy({"sandbox_workloads_enabled": True})
    assert policy["operands_enabled"]["vfio-manager"] is True
    assert policy["operands_enabled"]["sandbox-device-plugin"] is True
    assert om.policy()["operands_enabled"]["vfio-manager"] is False


@pytest.mark.parametrize("operand_name, labels, spec, state", [
    ("dcgm-exporter", {}, {}, "expected"),
    ("dcgm-exporter", {"nvidia.com/gpu.deploy.dcgm-exporter": "true"}, {}, "expected"),
    ("dcgm-exporter", {"nvidia.com/gpu.deploy.dcgm-exporter": "false"}, {}, "off"),
    ("driver", {"nvidia.com/gpu.deploy.driver": "pre-installed"}, {}, "host"),
    ("driver", {"nvidia.com/gpu.deploy.driver": "false"}, {}, "host"),
    ("driver", {}, {"driver": {"enabled": False}}, "host"),
    ("dcgm", {}, {}, "disabled"),
    ("device-plugin", {om.OPERANDS_LABEL: "false"}, {}, "isolated"),
    ("mig-manager", {}, {}, "n/a"),
    ("mig-manager", {om.MIG_CAPABLE_LABEL: "true"}, {}, "expected"),
    ("vfio-manager", {}, {}, "n/a"),
])
def test_operand_state_on_a_container_node(operand_name, labels, spec, state):
    policy = om.policy_from_spec(spec)
    assert om.operand_state_on_node(om.operand(operand_name), dict(GPU, **labels), policy, om.CONTAINER) == state


def test_expected_operands_of_a_non_gpu_node_is_empty():
    assert om.expected_operands({}, om.policy()) == ()
    assert om.expected_operands({om.NFD_GPU_LABELS[2]: "true"}, om.policy())[0] == "driver"


def test_deploy_labels_keep_existing_values_and_never_write_pre_installed():
    # driver.enabled=false: no driver DaemonSet, and deploy.driver stays "true"; only
    # k8s-driver-manager (with driver.enabled=true) writes pre-installed.
    labels = dict(GPU, **{"nvidia.com/gpu.deploy.dcgm-exporter": "false"})
    result = om.deploy_labels_for(om.CONTAINER, labels, om.policy({"driver_enabled": False}))
    assert result["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"
    assert result["nvidia.com/gpu.deploy.driver"] == om.DEPLOY_TRUE
    assert result["nvidia.com/gpu.deploy.device-plugin"] == om.DEPLOY_TRUE
    assert "nvidia.com/gpu.deploy.mig-manager" not in result
    assert om.deploy_labels_for(om.CONTAINER, {om.OPERANDS_LABEL: "false"}, om.policy()) == {}


@pytest.mark.parametrize("name, config", [
    ("nvidia.com/gpu", om.CONTAINER),
    ("nvidia.com/gpu.shared", om.CONTAINER),
    ("nvidia.com/mig-1g.10gb", om.CONTAINER),
    ("nvidia.com/GA102GL_A10", om.VM_PASSTHROUGH),
    ("nvidia.com/NVIDIA_A10-12Q", om.VM_VGPU),
    ("amd.com/gpu", None),
])
def test_resource_workload_config(name, config):
    assert om.resource_workload_config(name) == config


def test_resource_names_per_config():
    assert om.passthrough_resource_name("GA102GL [A10]") == "nvidia.com/GA102GL_A10"
    assert om.passthrough_resource_name("GH100 [H100 SXM5 80GB]") == "nvidia.com/GH100_H100_SXM5_80GB"
    assert om.vgpu_resource_name(om.vgpu_type_name("A10-12Q")) == "nvidia.com/NVIDIA_A10-12Q"
    assert om.vgpu_count("A10-12Q", 24, 2) == 4
    assert om.vgpu_count("A10-4Q", 24, 2) == 12
    assert om.gpu_resources({"nvidia.com/gpu": "2", "cpu": "8", "nvidia.com/GA102GL_A10": "0"}) == {
        "nvidia.com/gpu": 2}


@pytest.mark.parametrize("taint, tolerated", [
    ({"key": "nvidia.com/gpu", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, True),
    ({"key": "dedicated", "value": "training", "effect": "NoSchedule"}, False),
    ({"key": "dedicated", "value": "training", "effect": "NoExecute"}, False),
    ({"key": "dedicated", "value": "training", "effect": "PreferNoSchedule"}, True),
    ({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}, True),
])
def test_untolerated_taints_with_the_default_tolerations(taint, tolerated):
    assert om.untolerated_taints([taint]) == ([] if tolerated else [taint])


def test_toleration_operators():
    taint = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    assert om.tolerates([{"key": "dedicated", "operator": "Equal", "value": "training"}], taint)
    assert not om.tolerates([{"key": "dedicated", "operator": "Equal", "value": "inference"}], taint)
    assert not om.tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], taint)
    assert om.tolerates([{"operator": "Exists"}], taint)


# ---------------------------------------------------------------- issue 15: the model read against v26.3.2

CRD = os.path.join(REFERENCE, "nvidia.com_clusterpolicies.yaml")
NFD_GPU = {om.NFD_GPU_LABELS[0]: "true"}


def crd_spec_properties():
    with open(CRD) as handle:
        crd = yaml.safe_load(handle)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


# kubevirt-gpu-device-plugin v1.5.0 getDeviceName, rule by rule: TrimSpace, upper case, "/" and
# "." to "_", each run of blanks to one "_", then everything outside [a-zA-Z0-9_.] dropped.
@pytest.mark.parametrize("pci_name, resource", [
    # The examples.
    ("GH100 [GH200 120GB / 480GB]", "nvidia.com/GH100_GH200_120GB___480GB"),
    ("GA100 [A800-SXM4-80GB]", "nvidia.com/GA100_A800SXM480GB"),
    ("GA102GL [A10]", "nvidia.com/GA102GL_A10"),
    # Brackets go, the blank before them becomes "_".
    ("AD102GL [L40S]", "nvidia.com/AD102GL_L40S"),
    # Upper case.
    ("GH100 [H100 PCIe]", "nvidia.com/GH100_H100_PCIE"),
    ("TU104GL [Tesla T4]", "nvidia.com/TU104GL_TESLA_T4"),
    # "." and "/" each become "_"; no run of "_" is collapsed, none is trimmed.
    ("GK210GL [Tesla K80] rev. a1", "nvidia.com/GK210GL_TESLA_K80_REV__A1"),
    ("A/B", "nvidia.com/A_B"),
    ("X / Y", "nvidia.com/X___Y"),
    ("[A] ", "nvidia.com/A"),
    # Hyphens go and leave nothing behind.
    ("GA100-[A100-PCIE-40GB]", "nvidia.com/GA100A100PCIE40GB"),
    # Leading and trailing blanks are trimmed first; inner runs of blanks (tabs too) are one "_".
    ("  GA102GL\t [A10]  ", "nvidia.com/GA102GL_A10"),
    # Other punctuation is dropped.
    ("GP100GL (Tesla P100 16GB), v2+", "nvidia.com/GP100GL_TESLA_P100_16GB_V2"),
])
def test_passthrough_resource_names_follow_get_device_name(pci_name, resource):
    assert om.passthrough_resource_name(pci_name) == resource
    assert om.resource_workload_config(resource) == om.VM_PASSTHROUGH


@pytest.mark.parametrize("pci_name", [
    "GH100 [GH200 120GB / 480GB]", "GA100 [A800-SXM4-80GB]", "GK210GL [Tesla K80] rev. a1", "a-b/c.d e\tf",
    "  x  ", "[]{}()<>!@#$%^&*", u"GA102GL [A10] \u00e9\u00df",
])
def test_passthrough_names_use_only_the_characters_get_device_name_keeps(pci_name):
    name = om.passthrough_device_name(pci_name)
    assert set(name) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
    assert "-" not in name and "." not in name and " " not in name
    assert om.passthrough_device_name(name) == name  # a name it produced is a fixed point


def test_kubevirt_and_kata_modes_run_different_device_plugins():
    assert [o.name for o in om.operands_for_workload(om.VM_PASSTHROUGH, "kubevirt")] == [
        "sandbox-validator", "vfio-manager", "sandbox-device-plugin", "kata-manager"]
    assert [o.name for o in om.operands_for_workload(om.VM_PASSTHROUGH, "kata")] == [
        "sandbox-validator", "vfio-manager", "kata-sandbox-device-plugin", "kata-manager", "cc-manager"]
    assert [o.name for o in om.operands_for_workload(om.VM_VGPU, "kata")] == [
        "vgpu-manager", "vgpu-device-manager", "sandbox-validator", "cc-manager"]
    assert om.resource_plugin(om.VM_PASSTHROUGH) == "sandbox-device-plugin"
    kata = om.policy_from_values({"sandboxWorkloads": {"enabled": True, "mode": "kata"}})
    assert om.resource_plugin(om.VM_PASSTHROUGH, kata) == "kata-sandbox-device-plugin"
    assert om.resource_plugin(om.VM_VGPU, kata) is None
    assert om.resource_plugin(om.CONTAINER, kata) == "device-plugin"
    assert kata["operands_enabled"]["sandbox-device-plugin"] is False
    assert kata["operands_enabled"]["kata-sandbox-device-plugin"] is True
    assert kata["operands_enabled"]["cc-manager"] is True
    kubevirt = om.policy_from_values({"sandboxWorkloads": {"enabled": True}})
    assert kubevirt["sandbox_mode"] == "kubevirt"
    assert kubevirt["operands_enabled"]["kata-sandbox-device-plugin"] is False
    assert kubevirt["operands_enabled"]["cc-manager"] is False


@pytest.mark.parametrize("mode, config, present, absent", [
    # getEffectiveStateLabels: kata swaps the device plugin label on vm-passthrough nodes only.
    ("kubevirt", om.VM_PASSTHROUGH, ["sandbox-device-plugin", "cc-manager", "kata-manager"],
     ["kata-sandbox-device-plugin"]),
    ("kata", om.VM_PASSTHROUGH, ["kata-sandbox-device-plugin", "cc-manager", "kata-manager"],
     ["sandbox-device-plugin"]),
    ("kata", om.VM_VGPU, ["sandbox-device-plugin", "cc-manager", "vgpu-device-manager"],
     ["kata-sandbox-device-plugin"]),
    ("kubevirt", om.VM_VGPU, ["sandbox-device-plugin", "cc-manager"], ["kata-sandbox-device-plugin"]),
])
def test_the_operator_writes_the_deploy_labels_of_the_config_and_mode(mode, config, present, absent):
    policy = om.policy_from_values({"sandboxWorkloads": {"enabled": True, "mode": mode}})
    labels = dict(NFD_GPU, **{om.WORKLOAD_CONFIG_LABEL: config})
    result = om.deploy_labels_for(config, labels, policy)
    for name in present:
        assert result[om.DEPLOY_LABEL_PREFIX + name] == om.DEPLOY_TRUE, name
    for name in absent:
        assert om.DEPLOY_LABEL_PREFIX + name not in result, name
    # The labels are the operator's gpuStateLabels, whether or not the operand is deployed.
    assert set(result) == set(om.DEPLOY_LABEL_PREFIX + n for n in om.state_label_operands(config, mode))


def test_cc_manager_runs_on_every_vm_node_in_kata_mode_without_cc_capable():
    kata = om.policy_from_values({"sandboxWorkloads": {"enabled": True, "mode": "kata"}})
    cc = om.operand("cc-manager")
    assert om.node_selector(cc) == {"nvidia.com/gpu.deploy.cc-manager": "true"}
    for config in om.VM_CONFIGS:
        labels = dict(NFD_GPU, **{om.WORKLOAD_CONFIG_LABEL: config})
        assert om.operand_state_on_node(cc, labels, kata, config) == "expected"
        assert "cc-manager" in om.expected_operands(labels, kata)
    kubevirt = om.policy_from_values({"sandboxWorkloads": {"enabled": True}})
    labels = dict(NFD_GPU, **{om.WORKLOAD_CONFIG_LABEL: om.VM_PASSTHROUGH, om.CC_CAPABLE_LABEL: "true"})
    assert om.operand_state_on_node(cc, labels, kubevirt, om.VM_PASSTHROUGH) == "n/a"
    assert "kata" in om.not_applicable_reason(cc, labels, kubevirt, om.VM_PASSTHROUGH)


def test_a_vgpu_node_in_kata_mode_expects_no_device_plugin():
    kata = om.policy_from_values({"sandboxWorkloads": {"enabled": True, "mode": "kata",
                                                       "defaultWorkload": om.VM_VGPU}})
    labels = dict(NFD_GPU, **{"nvidia.com/gpu.deploy.sandbox-device-plugin": "true"})
    expected = om.expected_operands(labels, kata)
    assert "sandbox-device-plugin" not in expected and "kata-sandbox-device-plugin" not in expected
    assert om.operand_state_on_node(om.operand("sandbox-device-plugin"), labels, kata, om.VM_VGPU) == "n/a"


# IsEnabled() of each spec in api/nvidia/v1/clusterpolicy_types.go when `enabled` is missing.
OPERATOR_UNSET_ENABLED = {
    "driver": True, "toolkit": True, "devicePlugin": True, "dcgm": True, "dcgmExporter": True, "gfd": True,
    "migManager": True, "nodeStatusExporter": False, "vgpuManager": False, "vgpuDeviceManager": False,
    "vfioManager": False, "sandboxDevicePlugin": False, "kataSandboxDevicePlugin": False, "kataManager": False,
    "ccManager": False,
}


def test_every_switch_is_listed_with_the_operators_unset_default():
    keys = set(o.values_key for o in om.OPERANDS if o.enabled_if_unset is not None)
    assert keys == set(OPERATOR_UNSET_ENABLED)
    for o in om.OPERANDS:
        if o.enabled_if_unset is not None:
            assert o.enabled_if_unset is OPERATOR_UNSET_ENABLED[o.values_key], o.name
    # The CRD gives `enabled` no default, so a live object without it stays without it and
    # IsEnabled() decides; the validator has no switch at all.
    properties = crd_spec_properties()
    for key in OPERATOR_UNSET_ENABLED:
        assert "default" not in properties[key]["properties"]["enabled"], key
    assert "enabled" not in properties["validator"].get("properties", {})


@pytest.mark.parametrize("operand_", [o for o in om.OPERANDS if o.enabled_if_unset is not None], ids=lambda o: o.name)
def test_a_live_cluster_policy_without_enabled_reads_as_the_operator_reads_it(operand_):
    spec = {"sandboxWorkloads": {"enabled": True, "mode": "kata" if operand_.sandbox_modes == ("kata",) else "kubevirt"}}
    live = om.policy_from_cluster_policy(spec)
    assert live["operands_enabled"][operand_.name] is operand_.enabled_if_unset
    # Chart values leave the same key to the chart's default instead.
    values = om.policy_from_values(spec)
    assert values["operands_enabled"][operand_.name] is operand_.enabled_by_default
    # An explicit value wins on both paths.
    explicit = dict(spec, **{operand_.values_key: {"enabled": not operand_.enabled_if_unset}})
    assert om.policy_from_cluster_policy(explicit)["operands_enabled"][operand_.name] is (
        not operand_.enabled_if_unset)


def test_a_live_cluster_policy_gets_the_crd_defaults_and_no_chart_defaults():
    live = om.policy_from_cluster_policy({"sandboxWorkloads": {"enabled": True}}, namespace="gpu")
    assert (live["namespace"], live["sandbox_mode"], live["default_workload"]) == ("gpu", "kubevirt", "container")
    assert live["operands_enabled"]["sandbox-device-plugin"] is False  # the chart omits it when false
    assert live["operands_enabled"]["vfio-manager"] is False
    assert live["operands_enabled"]["dcgm"] is True  # chart default false, IsEnabled() true
    assert live["operands_enabled"]["sandbox-validator"] is True
    assert live["mig_config_default"] is None  # no migManager.config: no mig.config label
    assert om.policy_from_cluster_policy({"migManager": {"config": {"name": "x"}}})["mig_config_default"] == (
        om.MIG_CONFIG_DISABLED)
    # The chart renders sandboxDevicePlugin.enabled only when true, the others always.
    chart = om.policy_from_values({"sandboxWorkloads": {"enabled": True}})
    assert chart["operands_enabled"]["sandbox-device-plugin"] is True
    assert chart["operands_enabled"]["dcgm"] is False
    assert chart["mig_config_default"] == om.MIG_CONFIG_DISABLED
    # node_check's live path: overrides on top of the spec.
    assert om.policy({"driver_enabled": False}, {"driver": {}}, live=True)["operands_enabled"]["driver"] is False


@pytest.mark.parametrize("labels, capable", [
    ({}, False),
    ({om.MIG_CAPABLE_LABEL: "true"}, True),
    ({om.MIG_CAPABLE_LABEL: "false", om.GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}, False),
    ({om.GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}, True),
    ({om.GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}, True),
    ({om.GPU_PRODUCT_LABEL: "NVIDIA-A30"}, True),
    ({om.GPU_PRODUCT_LABEL: "NVIDIA-A10"}, False),
    # A vGPU host is never MIG-capable for the operator, whatever the other labels say.
    ({om.VGPU_HOST_DRIVER_LABEL: "580.126.20", om.MIG_CAPABLE_LABEL: "true"}, False),
    ({om.VGPU_HOST_DRIVER_LABEL: "", om.MIG_CAPABLE_LABEL: "true"}, True),
])
def test_has_mig_capable_gpu_follows_the_operator(labels, capable):
    assert om.has_mig_capable_gpu(labels) is capable
    mig = om.operand("mig-manager")
    state = om.operand_state_on_node(mig, dict(NFD_GPU, **labels), om.policy(), om.CONTAINER)
    assert state == ("expected" if capable else "n/a")
    assert (om.DEPLOY_LABEL_PREFIX + "mig-manager" in om.deploy_labels_for(om.CONTAINER, labels, om.policy())) is capable


def test_the_mig_manager_label_stays_on_a_container_node_once_set():
    labels = dict(NFD_GPU, **{"nvidia.com/gpu.deploy.mig-manager": "true", om.MIG_CAPABLE_LABEL: "false"})
    assert om.deploy_labels_for(om.CONTAINER, labels, om.policy())["nvidia.com/gpu.deploy.mig-manager"] == "true"
    assert om.operand_state_on_node(om.operand("mig-manager"), labels, om.policy(), om.CONTAINER) == "expected"
    sandbox = om.policy({"sandbox_workloads_enabled": True})
    assert "nvidia.com/gpu.deploy.mig-manager" not in om.deploy_labels_for(om.VM_PASSTHROUGH, labels, sandbox)


def test_the_operator_writes_mig_config_all_disabled_on_a_mig_capable_node():
    a100 = dict(NFD_GPU, **{om.GPU_PRODUCT_LABEL: "NVIDIA-A100-PCIE-40GB"})
    assert om.mig_config_label_for(a100, om.policy()) == {om.MIG_CONFIG_LABEL: "all-disabled"}
    assert om.mig_config_label_for(dict(a100, **{om.MIG_CONFIG_LABEL: "all-1g.5gb"}), om.policy()) == {}
    assert om.mig_config_label_for(a100, om.policy_from_values({"migManager": {"enabled": False}})) == {}
    assert om.mig_config_label_for(a100, om.policy_from_cluster_policy({})) == {}
    assert om.operator_node_labels(a100, om.policy())[om.MIG_CONFIG_LABEL] == "all-disabled"


def test_mps_control_daemon_comes_with_the_device_plugin_where_mps_capable():
    mps = om.operand("mps-control-daemon")
    assert om.node_selector(mps) == {"nvidia.com/gpu.deploy.device-plugin": "true", om.MPS_CAPABLE_LABEL: "true"}
    assert not om.has_own_deploy_label("mps-control-daemon") and om.has_own_deploy_label("device-plugin")
    assert om.operand_state_on_node(mps, NFD_GPU, om.policy(), om.CONTAINER) == "n/a"
    capable = dict(NFD_GPU, **{om.MPS_CAPABLE_LABEL: "true"})
    assert om.operand_state_on_node(mps, capable, om.policy(), om.CONTAINER) == "expected"
    off = om.policy_from_values({"devicePlugin": {"enabled": False}})
    assert off["operands_enabled"]["mps-control-daemon"] is False
    assert om.operand_for_daemonset("nvidia-device-plugin-mps-control-daemon") is mps
    assert om.operand_of_pod({"app": "nvidia-device-plugin-mps-control-daemon"}) is mps
    # No label of its own: the operator writes none for it.
    assert "nvidia.com/gpu.deploy.mps-control-daemon" not in om.deploy_labels_for(om.CONTAINER, capable, om.policy())


@pytest.mark.parametrize("kernel, sanitized", [
    # controllers/object_controls_test.go TestGetSanitizedKernelVersion
    ("5.14.0-427.37.1.el9_4.aarch64_64k", "5.14.0-427.37.1.el9.4"),
    ("5.14.0-427.37.1.el9_4.aarch64", "5.14.0-427.37.1.el9.4"),
    ("5.14.0-427.37.1.el9_4.x86_64_64k", "5.14.0-427.37.1.el9.4"),
    ("5.14.0-427.37.1.el9_4.x86_64", "5.14.0-427.37.1.el9.4"),
    ("5.15.0-1056-azure", "5.15.0-1056-azure"),
])
def test_precompiled_driver_daemonsets_are_named_per_kernel_and_os(kernel, sanitized):
    assert om.sanitized_kernel_version(kernel) == sanitized
    name = om.precompiled_driver_daemonset(kernel, "rhel9.4")
    assert name == "nvidia-driver-daemonset-%s-rhel9.4" % sanitized
    assert om.operand_for_daemonset(name).name == "driver"


@pytest.mark.parametrize("name, operand_name", [
    ("nvidia-driver-daemonset", "driver"),
    ("nvidia-driver-daemonset-5.15.0-127-generic-ubuntu22.04", "driver"),
    # NVIDIADriver CRD (internal/state/driver.go getDriverAppName; its tests' names).
    ("nvidia-gpu-driver-ubuntu20.04-67cc6dbb79", "driver"),
    ("nvidia-gpu-driver-redhatCoreOS4.14-414.92.2023092822-59b779bcc5", "driver"),
    ("nvidia-vgpu-driver-ubuntu22.04-7c6d7bd86b", "driver"),
    ("nvidia-vgpu-host-manager-driver-ubuntu22.04-7c6d7bd86b", "vgpu-manager"),
    ("nvidia-vgpu-manager-daemonset", "vgpu-manager"),
    ("nvidia-device-plugin-mps-control-daemon", "mps-control-daemon"),
    ("nvidia-kata-sandbox-device-plugin-daemonset", "kata-sandbox-device-plugin"),
    ("nvidia-driver", None),
    ("gpu-operator", None),
    ("nvidia-gpu-driver", None),
])
def test_driver_variants_are_recognised_as_the_driver(name, operand_name):
    found = om.operand_for_daemonset(name)
    assert (found.name if found else None) == operand_name
    # Their pods: precompiled ones keep app=nvidia-driver-daemonset, the CRD's carry their DaemonSet's name.
    pod = om.operand_of_pod({"app": name})
    assert (pod.name if pod else None) == operand_name


@pytest.mark.parametrize("labels, gpu", [
    ({om.NFD_GPU_LABELS[0]: "true"}, True),
    ({om.NFD_GPU_LABELS[1]: "true"}, True),
    ({om.NFD_GPU_LABELS[2]: "true"}, True),
    ({om.NFD_GPU_LABELS[0]: "false"}, False),
    # gpu.present is the operator's echo of the NFD labels: alone it makes no GPU node.
    ({om.GPU_PRESENT_LABEL: "true"}, False),
    ({"feature.node.kubernetes.io/pci-1002.present": "true"}, False),
    ({}, False),
])
def test_a_gpu_node_is_what_the_nfd_pci_labels_say(labels, gpu):
    assert om.is_gpu_node(labels) is gpu
    assert bool(om.expected_operands(labels, om.policy())) is gpu


def test_a_node_that_lost_its_nfd_labels_is_relabelled_as_the_operator_does():
    labels = {om.GPU_PRESENT_LABEL: "true", "nvidia.com/gpu.deploy.driver": "true",
              "nvidia.com/gpu.deploy.device-plugin": "false", "nvidia.com/gpu.deploy.somebody-else": "x"}
    assert om.operator_node_labels(labels, om.policy()) == {
        om.GPU_PRESENT_LABEL: "false", "nvidia.com/gpu.deploy.driver": None,
        "nvidia.com/gpu.deploy.device-plugin": None}
    assert om.operator_node_labels({}, om.policy()) == {}
    fresh = om.operator_node_labels(dict(NFD_GPU, **{"nvidia.com/gpu.deploy.vfio-manager": "true"}), om.policy())
    assert fresh[om.GPU_PRESENT_LABEL] == "true" and fresh["nvidia.com/gpu.deploy.vfio-manager"] is None
    assert fresh["nvidia.com/gpu.deploy.driver"] == "true"


@pytest.mark.parametrize("name, config", [
    ("nvidia.com/gpu", om.CONTAINER),
    ("nvidia.com/gpu.shared", om.CONTAINER),
    ("nvidia.com/mig-1g.10gb", om.CONTAINER),
    ("nvidia.com/mig-3g.40gb.shared", om.CONTAINER),
    ("nvidia.com/mig-1g.10gb+me", om.CONTAINER),
    ("nvidia.com/GA102GL_A10", om.VM_PASSTHROUGH),
    ("nvidia.com/GH100_GH200_120GB___480GB", om.VM_PASSTHROUGH),
    ("nvidia.com/2236", om.VM_PASSTHROUGH),  # a device pci.ids does not name: its device id
    ("nvidia.com/NVIDIA_A10-12Q", om.VM_VGPU),
    ("nvidia.com/GRID_T4-16Q", om.VM_VGPU),
    ("nvidia.com/NVIDIA_A100-1-5CME", om.VM_VGPU),
    # Other NVIDIA components' resources (the network operator's) are no operand's of this model.
    ("nvidia.com/hostdev", None),
    ("nvidia.com/rdma_shared_device_a", None),
    ("nvidia.com/sriov_rdma_vf", None),
    ("nvidia.com/gpu-custom-rename", None),
    ("amd.com/gpu", None),
])
def test_resources_are_classified_by_the_operators_own_names(name, config):
    assert om.resource_workload_config(name) == config
    assert om.is_gpu_operator_resource(name) is (config is not None)


def test_foreign_nvidia_resources_are_left_out_of_the_gpu_resources():
    allocatable = {"nvidia.com/gpu": "2", "nvidia.com/hostdev": "4", "cpu": "8", "nvidia.com/GA102GL_A10": "0"}
    assert om.gpu_resources(allocatable) == {"nvidia.com/gpu": 2}
    assert om.other_nvidia_resources(allocatable) == {"nvidia.com/hostdev": 4}


# The vGPU device manager's config file, as the default ConfigMap writes it (two entries of
# assets/state-vgpu-device-manager/0500_configmap.yaml) plus a custom and a MIG-backed config.
VGPU_FILE = {"version": "v1", "vgpu-configs": {
    "A10-12Q": [{"devices": "all", "vgpu-devices": {"A10-12Q": 2}}],
    "A10-4Q": [{"devices": "all", "vgpu-devices": {"A10-4Q": 6}}],
    "A100-1-5CME": [{"devices": "all", "vgpu-devices": {"A100-1-5CME": 1}}],
    "default": [{"device-filter": "0x1DB110DE", "devices": "all", "vgpu-devices": {"V100X-8Q": 2}},
                {"device-filter": "0x223610DE", "devices": "all", "vgpu-devices": {"A10-12Q": 2}}],
    "training": [{"devices": [0, 1], "vgpu-devices": {"A10-24Q": 1}}],
}}


def test_vgpu_config_names_resolve_through_the_configmap():
    configs = om.vgpu_device_configs(VGPU_FILE)
    assert om.resolve_vgpu_config("A10-12Q", configs, "10DE:2236", cards=2)["devices"] == {"A10-12Q": 4}
    assert om.resolve_vgpu_config("A10-4Q", configs, cards=2)["devices"] == {"A10-4Q": 12}
    # The default config picks the entry of the card's PCI id.
    assert om.resolve_vgpu_config("default", configs, "10DE:2236", cards=2)["devices"] == {"A10-12Q": 4}
    assert om.resolve_vgpu_config("default", configs, "0x223610de", cards=1)["devices"] == {"A10-12Q": 2}
    # Without the card's id every entry might apply, with no count.
    assert om.resolve_vgpu_config("default", configs)["devices"] == {"A10-12Q": None, "V100X-8Q": None}
    # A custom name, and a MIG-backed profile whose count the ConfigMap knows.
    assert om.resolve_vgpu_config("training", configs, cards=4)["devices"] == {"A10-24Q": 2}
    assert om.resolve_vgpu_config("A100-1-5CME", configs, cards=1)["devices"] == {"A100-1-5CME": 1}


def test_a_vgpu_config_the_configmap_lacks_is_refused_naming_the_configmap():
    configs = om.vgpu_device_configs(VGPU_FILE)
    with pytest.raises(ValueError) as error:
        om.resolve_vgpu_config("A10-8Q", configs, configmap="gpu-operator/default-vgpu-devices-config")
    assert str(error.value).startswith("nvidia.com/vgpu.config=A10-8Q: the vGPU device manager's ConfigMap "
                                       "gpu-operator/default-vgpu-devices-config has no config 'A10-8Q'")
    assert "A10-12Q" in str(error.value)
    with pytest.raises(ValueError):
        om.vgpu_device_configs({"vgpu-configs": []})


def test_plain_profiles_keep_working_without_the_configmap():
    assert om.resolve_vgpu_config("A10-12Q", memory_gb=24, cards=2) == {
        "config": "A10-12Q", "devices": {"A10-12Q": 4}, "source": "profile"}
    assert om.resolve_vgpu_config("A10-12Q")["devices"] == {"A10-12Q": None}
    # A MIG-backed profile's count follows the MIG geometry: only the ConfigMap knows it.
    assert om.resolve_vgpu_config("A100-1-5C", memory_gb=40, cards=1)["devices"] == {"A100-1-5C": None}
    # Any other name cannot be resolved without the ConfigMap.
    assert om.resolve_vgpu_config("training")["devices"] is None
    assert om.resolve_vgpu_config("default")["devices"] is None


@pytest.mark.parametrize("name, profile, board", [
    ("A10-12Q", True, "A10"), ("A100-1-5C", True, "A100"), ("A100-1-5CME", True, "A100"),
    ("RTX6000-Ada-12Q", True, "RTX6000-Ada"), ("A10", False, None), ("default", False, None),
    ("training", False, None),
])
def test_vgpu_profile_names(name, profile, board):
    assert om.is_vgpu_profile(name) is profile
    assert om.vgpu_profile_board(name) == board


def test_the_vgpu_config_of_a_node_and_its_state_label():
    policy = om.policy_from_values({})
    assert (policy["vgpu_devices_configmap"], policy["vgpu_default_config"]) == (
        "default-vgpu-devices-config", "default")
    custom = om.policy_from_cluster_policy({"vgpuDeviceManager": {"config": {"name": "site-vgpu", "default": "A10-4Q"}}})
    assert (custom["vgpu_devices_configmap"], custom["vgpu_default_config"]) == ("site-vgpu", "A10-4Q")
    assert om.effective_vgpu_config({}, policy) == "default"
    assert om.effective_vgpu_config({om.VGPU_CONFIG_LABEL: "training"}, custom) == "training"
    assert om.effective_vgpu_config({}, custom) == "A10-4Q"
    assert om.VGPU_CONFIG_STATE_LABEL == "nvidia.com/vgpu.config.state"
    assert om.VGPU_CONFIG_FAILED in om.VGPU_CONFIG_STATES


@pytest.mark.parametrize("status, reconciled, reason, error_reason", [
    ({"state": "ready", "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"},
                                       {"type": "Error", "status": "False", "reason": "Ready"}]},
     True, "Reconciled", None),
    ({"state": "ready", "conditions": [{"type": "Ready", "status": "True", "reason": "NoGPUNodes"}]},
     False, "NoGPUNodes", None),
    ({"state": "ready", "conditions": [{"type": "Ready", "status": "True", "reason": "NFDLabelsMissing"}]},
     False, "NFDLabelsMissing", None),
    ({"state": "notReady", "conditions": [
        {"type": "Ready", "status": "False", "reason": "Error"},
        {"type": "Error", "status": "True", "reason": "OperandNotReady",
         "message": "ClusterPolicy is not ready, states not ready: [state-driver]"}]},
     False, "Error", "OperandNotReady"),
    ({"state": "notReady", "conditions": [
        {"type": "Ready", "status": "False", "reason": "Error"},
        {"type": "Error", "status": "True", "reason": "ReconcileFailed", "message": "Failed to reconcile"}]},
     False, "Error", "ReconcileFailed"),
    ({}, False, None, None),
])
def test_cluster_policy_status_in_the_operators_words(status, reconciled, reason, error_reason):
    result = om.cluster_policy_status({"status": status})
    assert result["operands_reconciled"] is reconciled
    assert (result["reason"], result["error_reason"]) == (reason, error_reason)
    assert result["state"] in om.CLUSTER_POLICY_STATES + (None,)
    if error_reason:
        assert result["message"]
    assert "ignored" not in om.CLUSTER_POLICY_STATES
    assert set(om.READY_REASONS) == {"Reconciled", "NoGPUNodes", "NFDLabelsMissing"}
    assert set(om.ERROR_REASONS) == {"ReconcileFailed", "OperandNotReady"}


# ---------------------------------------------------------------- issue 34: v26.7.0's client label

@pytest.mark.parametrize("version, written", [(None, False), ("v26.3.2", False), ("v26.3.3", False),
                                              ("v26.7.0", True), ("26.7.0", True), ("v27.1.0", True),
                                              ("not a version", False)])
@pytest.mark.parametrize("config", om.WORKLOAD_CONFIGS)
def test_the_client_label_is_written_on_every_gpu_node_from_v26_7(version, written, config):
    policy = om.policy_from_values({"sandboxWorkloads": {"enabled": True}}, operator_version=version)
    labels = dict(NFD_GPU, **{om.WORKLOAD_CONFIG_LABEL: config})
    result = om.operator_node_labels(labels, policy)
    assert result.get(om.CLIENT_LABEL) == (om.DEPLOY_TRUE if written else None)
    assert (om.CLIENT_LABEL in om.deploy_labels_for(config, labels, policy)) is written


def test_the_client_label_keeps_a_value_set_and_goes_with_the_other_state_labels():
    policy = om.policy_from_values({}, operator_version="v26.7.0")
    paused = dict(NFD_GPU, **{om.CLIENT_LABEL: "false"})
    assert om.operator_node_labels(paused, policy)[om.CLIENT_LABEL] == "false"
    # deploy.operands=false: removeAllGPUStateLabels takes it with the operands' labels.
    isolated = dict(NFD_GPU, **{om.CLIENT_LABEL: "true", om.OPERANDS_LABEL: "false"})
    assert om.operator_node_labels(isolated, policy)[om.CLIENT_LABEL] is None
    # A node that lost its GPU labels: gone with gpu.present=false.
    gone = {om.GPU_PRESENT_LABEL: "true", om.CLIENT_LABEL: "true"}
    assert om.operator_node_labels(gone, policy) == {om.GPU_PRESENT_LABEL: "false", om.CLIENT_LABEL: None}
    # A v26.3 model never removes a label it does not know of.
    assert om.CLIENT_LABEL not in om.operator_node_labels(gone, om.policy_from_values({}))
