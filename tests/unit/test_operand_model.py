"""The operand model against the GPU Operator's own manifests and chart values, and the
label semantics the checks rely on."""

import os

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The same copy of upstream that the lab's simulated operator reads (tests/lab/lab.py).
REFERENCE = os.path.join(os.path.dirname(ROOT), "shared", "reference", "gpu-operator-v26.3.2")
GPU = {om.GPU_PRESENT_LABEL: "true"}


def reference_daemonset(asset):
    with open(os.path.join(REFERENCE, "assets", asset)) as handle:
        (ds,) = [d for d in yaml.safe_load_all(handle) if d and d.get("kind") == "DaemonSet"]
    return ds


def chart_values():
    with open(os.path.join(REFERENCE, "values.yaml")) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("operand_", [o for o in om.OPERANDS if o.asset], ids=lambda o: o.name)
def test_operand_matches_the_operators_manifest(operand_):
    ds = reference_daemonset(operand_.asset)
    template = ds["spec"]["template"]
    key, value = operand_.pod_selector
    assert ds["metadata"]["name"] == operand_.daemonset
    assert template["metadata"]["labels"][key] == value
    assert ds["spec"]["selector"]["matchLabels"][key] == value
    assert template["spec"]["nodeSelector"] == {om.deploy_label(operand_.name): om.DEPLOY_TRUE}


@pytest.mark.parametrize("operand_", om.OPERANDS, ids=lambda o: o.name)
def test_enabled_default_matches_the_chart(operand_):
    section = chart_values()[operand_.values_key]
    # The validator has no enabled switch: it always runs.
    assert section.get("enabled", True) is operand_.enabled_by_default


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


def test_deploy_labels_keep_existing_values_and_mark_a_host_driver():
    labels = dict(GPU, **{"nvidia.com/gpu.deploy.dcgm-exporter": "false"})
    result = om.deploy_labels_for(om.CONTAINER, labels, om.policy({"driver_enabled": False}))
    assert result["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"
    assert result["nvidia.com/gpu.deploy.driver"] == om.DEPLOY_PRE_INSTALLED
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
