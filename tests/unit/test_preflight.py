"""preflight.decide on facts gathered from fake host trees: every decision and refusal."""
import os

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import host_facts as hf
from ansible_collections.gpuplatform.rke2.plugins.module_utils.preflight import (PreflightInputError, chart_decisions,
                                                                                 decide, render_psa_fixes)
from tests.unit.fixtures.hosts.fake_host import (RKE2_CIS_PSS, FakeHost, a10_host, cis_host, cpu_only_host,
                                                 h100_preinstalled_host, nouveau_host)

SANDBOX = {"sandbox_workloads_enabled": True}


def facts(tmp_path, build, name="host", **kwargs):
    return hf.gather(build(tmp_path / name, **kwargs).root)


def host(facts_, **inventory):
    return dict(inventory, facts=facts_)


def errors(result):
    return [(f["host"], f["fact"]) for f in result["findings"] if f["severity"] == "error"]


def warnings(result):
    return [(f["host"], f["fact"]) for f in result["findings"] if f["severity"] == "warning"]


def message(result, fact):
    return next(f["message"] for f in result["findings"] if f["fact"] == fact)


# ---------------------------------------------------------------- a clean host and its derived defaults

def test_clean_a10_container_host_passes_and_fills_the_inventory(tmp_path):
    result = decide({"gpu-1": host(facts(tmp_path, a10_host), gpu_workload_config="container")})
    assert result["ok"] is True
    assert result["findings"] == []
    # A 5.15 kernel has no /proc/sys/kernel/arch and the fake tree passes no uname -m: architecture unknown.
    assert result["nodes"]["gpu-1"] == {"workload_config": "container", "effective_workload_config": "container",
                                        "driver_operand": "expected", "deploy_driver_false": False,
                                        "driver_source": "container", "architecture": None, "gpu_models": ["A10"],
                                        "host_driver": {"version": None, "kernel_modules": None}}
    assert result["defaults"] == {"driver_enabled": True, "nodes": {"gpu-1": {
        "gpu_count": 2, "gpu_model": "A10", "gpu_pci_device_name": "GA102GL [A10]",
        "passthrough_resources": {"nvidia.com/GA102GL_A10": 2},
        "pci_vendor_selectors": {"nvidia.com/GA102GL_A10": "10DE:2236"},
        "gpu_operands_disabled": []}}}
    assert result["fixes"] == []


# ---------------------------------------------------------------- IOMMU and SR-IOV

@pytest.mark.parametrize("config", ["vm-passthrough", "vm-vgpu"])
def test_vm_workloads_on_a10_with_iommu_pass(tmp_path, config):
    result = decide({"gpu-vm": host(facts(tmp_path, a10_host), gpu_workload_config=config)}, SANDBOX)
    assert errors(result) == []
    assert result["nodes"]["gpu-vm"]["effective_workload_config"] == config
    assert result["nodes"]["gpu-vm"]["driver_operand"] == "n/a"


@pytest.mark.parametrize("config", ["vm-passthrough", "vm-vgpu"])
def test_vm_workloads_on_a10_without_iommu_are_refused(tmp_path, config):
    result = decide({"gpu-vm": host(facts(tmp_path, a10_host, iommu=False), gpu_workload_config=config)}, SANDBOX)
    assert errors(result) == [("gpu-vm", "iommu.enabled")]
    assert result["ok"] is False
    assert "%s needs the IOMMU" % config in message(result, "iommu.enabled")
    assert "intel_iommu=on" in message(result, "iommu.enabled")


def test_container_host_does_not_need_iommu(tmp_path):
    result = decide({"gpu-1": host(facts(tmp_path, a10_host, iommu=False), gpu_workload_config="container")})
    assert result["ok"] is True


def test_vgpu_on_ampere_without_sriov_is_refused(tmp_path):
    result = decide({"gpu-v": host(facts(tmp_path, a10_host, sriov=False), gpu_workload_config="vm-vgpu")}, SANDBOX)
    assert errors(result) == [("gpu-v", "sriov")]
    assert "GA102GL [A10]" in message(result, "sriov")
    assert "0000:17:00.0, 0000:65:00.0" in message(result, "sriov")


def test_passthrough_on_ampere_without_sriov_is_fine(tmp_path):
    result = decide({"gpu-p": host(facts(tmp_path, a10_host, sriov=False), gpu_workload_config="vm-passthrough")},
                    SANDBOX)
    assert result["ok"] is True


def test_vgpu_on_turing_needs_no_sriov(tmp_path):
    t4 = FakeHost(tmp_path / "t4").system(cmdline="ro intel_iommu=on").pci_ids().iommu_groups(4)
    t4.gpu("0000:17:00.0", "1eb8", pci_class="0x030200")
    result = decide({"t4": host(hf.gather(t4.root), gpu_workload_config="vm-vgpu")}, SANDBOX)
    assert errors(result) == []


def test_vgpu_on_unknown_architecture_is_a_warning(tmp_path):
    card = FakeHost(tmp_path / "x").system(cmdline="ro").iommu_groups(4).gpu("0000:17:00.0", "2bb5")
    result = decide({"x": host(hf.gather(card.root), gpu_workload_config="vm-vgpu")}, SANDBOX)
    assert result["ok"] is True
    assert ("x", "hardware.gpus.architecture") in warnings(result)


def test_vm_config_with_sandbox_workloads_off_is_treated_as_container(tmp_path):
    result = decide({"gpu-vm": host(facts(tmp_path, a10_host), gpu_workload_config="vm-passthrough")})
    assert warnings(result) == [("gpu-vm", "gpu_workload_config")]
    assert result["nodes"]["gpu-vm"]["effective_workload_config"] == "container"
    assert result["nodes"]["gpu-vm"]["driver_operand"] == "expected"


# ---------------------------------------------------------------- host driver, both ways

def test_operator_driver_on_host_with_preinstalled_driver_is_refused(tmp_path):
    result = decide({"h100": host(facts(tmp_path, h100_preinstalled_host))})
    assert errors(result) == [("h100", "host_driver.preinstalled")]
    text = message(result, "host_driver.preinstalled")
    assert "driver 550.90.07" in text and "nvidia.com/gpu.deploy.driver=false" in text
    assert result["defaults"]["driver_enabled"] is False


def test_preinstalled_driver_with_deploy_driver_false_passes(tmp_path):
    result = decide({"h100": host(facts(tmp_path, h100_preinstalled_host), gpu_operands_disabled=["driver"])})
    assert result["ok"] is True
    assert result["nodes"]["h100"]["driver_operand"] == "host"
    assert result["defaults"]["nodes"]["h100"]["gpu_operands_disabled"] == ["driver"]


def test_preinstalled_driver_with_driver_disabled_passes(tmp_path):
    result = decide({"h100": host(facts(tmp_path, h100_preinstalled_host))}, {"driver_enabled": False})
    assert result["ok"] is True
    assert result["nodes"]["h100"]["driver_operand"] == "host"
    assert result["defaults"]["nodes"]["h100"]["passthrough_resources"] == {"nvidia.com/GH100_H100_PCIE": 4}


def test_driver_disabled_without_host_driver_is_refused(tmp_path):
    result = decide({"a10": host(facts(tmp_path, a10_host))}, {"driver_enabled": False})
    assert errors(result) == [("a10", "host_driver.preinstalled")]
    assert message(result, "host_driver.preinstalled").startswith("gpu_operator_driver_enabled is false but the host "
                                                                  "has no NVIDIA driver")
    assert result["defaults"]["driver_enabled"] is True


def test_deploy_driver_false_without_host_driver_is_refused(tmp_path):
    result = decide({"a10": host(facts(tmp_path, a10_host), gpu_operands_disabled=["driver"])})
    assert errors(result) == [("a10", "host_driver.preinstalled")]
    assert "the node gets nvidia.com/gpu.deploy.driver=false" in message(result, "host_driver.preinstalled")


def test_follow_hosts_all_preinstalled_turns_the_driver_off(tmp_path):
    result = decide({"h100": host(facts(tmp_path, h100_preinstalled_host))}, follow_hosts=True)
    assert result["ok"] is True
    assert result["chart"]["driver_enabled"] is False
    assert result["nodes"]["h100"]["driver_operand"] == "host"


def test_follow_hosts_mixed_sets_deploy_driver_false_where_a_driver_is(tmp_path):
    hosts = {"h100": host(facts(tmp_path, h100_preinstalled_host, "h")),
             "a10": host(facts(tmp_path, a10_host, "a"))}
    refused = decide(hosts)
    assert errors(refused) == [("h100", "host_driver.preinstalled")]
    assert refused["defaults"]["driver_enabled"] is True
    assert refused["defaults"]["nodes"]["h100"]["gpu_operands_disabled"] == ["driver"]
    assert refused["defaults"]["nodes"]["a10"]["gpu_operands_disabled"] == []
    followed = decide(hosts, follow_hosts=True)
    assert followed["ok"] is True
    assert followed["chart"]["driver_enabled"] is True
    assert followed["nodes"]["h100"]["deploy_driver_false"] is True
    assert followed["nodes"]["a10"]["driver_operand"] == "expected"


def test_isolated_node_runs_no_driver_so_no_driver_refusal(tmp_path):
    result = decide({"h100": host(facts(tmp_path, h100_preinstalled_host), gpu_node_isolated=True)})
    assert result["ok"] is True
    assert result["nodes"]["h100"]["driver_operand"] == "isolated"


def test_host_driver_without_libnvidia_ml_is_a_warning(tmp_path):
    h = h100_preinstalled_host(tmp_path)
    os.unlink(h.path("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"))
    result = decide({"h100": host(hf.gather(h.root))}, {"driver_enabled": False})
    assert result["ok"] is True
    assert warnings(result) == [("h100", "host_driver.libnvidia_ml")]


# ---------------------------------------------------------------- nouveau

def test_nouveau_loaded_where_the_operator_installs_the_driver_is_refused(tmp_path):
    result = decide({"nv": host(facts(tmp_path, nouveau_host))})
    assert errors(result) == [("nv", "nouveau.loaded")]
    assert "blacklist nouveau" in message(result, "nouveau.loaded")


def test_nouveau_loaded_on_a_passthrough_node_is_not_the_driver_containers_problem(tmp_path):
    result = decide({"nv": host(facts(tmp_path, nouveau_host), gpu_workload_config="vm-passthrough")}, SANDBOX)
    assert errors(result) == []


def test_nouveau_not_blacklisted_is_a_warning(tmp_path):
    card = FakeHost(tmp_path / "n").system().pci_ids().gpu("0000:17:00.0", "2236")
    result = decide({"n": host(hf.gather(card.root))})
    assert result["ok"] is True
    assert warnings(result) == [("n", "nouveau.blacklisted")]


# ---------------------------------------------------------------- CPU-only hosts, inventory mismatches

def test_cpu_only_host_in_the_gpu_group_is_refused(tmp_path):
    result = decide({"cpu-1": host(facts(tmp_path, cpu_only_host))})
    assert errors(result) == [("cpu-1", "hardware.count")]
    assert result["defaults"]["nodes"]["cpu-1"]["gpu_count"] == 0


def test_cpu_only_host_outside_the_gpu_group_only_adds_cluster_facts(tmp_path):
    result = decide({"server-1": host(facts(tmp_path, cpu_only_host), gpu_node=False)})
    assert result == dict(result, ok=True, findings=[], nodes={})


def test_missing_facts_are_refused(tmp_path):
    assert errors(decide({"gpu-1": {"gpu_workload_config": "container"}})) == [("gpu-1", "facts")]


def test_declared_count_and_pci_name_must_match_the_host(tmp_path):
    result = decide({"gpu-1": host(facts(tmp_path, a10_host), gpu_count=4, gpu_pci_device_name="GA100 [A100 PCIe 80GB]",
                                   gpu_model="a10")})
    assert errors(result) == [("gpu-1", "hardware.count"), ("gpu-1", "hardware.gpus.name")]
    assert "gpu_count is 4 but the host has 2" in message(result, "hardware.count")
    assert "nvidia.com/GA102GL_A10, not nvidia.com/GA100_A100_PCIE_80GB" in message(result, "hardware.gpus.name")
    assert warnings(result) == []  # gpu_model compares case-insensitively


def test_declared_model_mismatch_is_a_warning(tmp_path):
    result = decide({"gpu-1": host(facts(tmp_path, a10_host), gpu_model="L40S")})
    assert result["ok"] is True
    assert warnings(result) == [("gpu-1", "hardware.gpus.model")]


@pytest.mark.parametrize("key, value", [("gpu_workload_config", "vm"), ("gpu_count", "two"),
                                        ("gpu_operands_disabled", "driver"), ("gpu_node_isolated", "maybe")])
def test_bad_inventory_values_are_refused_naming_the_key(tmp_path, key, value):
    result = decide({"gpu-1": host(facts(tmp_path, a10_host), **{key: value})})
    assert (("gpu-1", key)) in errors(result)
    assert repr(value) in message(result, key)


# ---------------------------------------------------------------- NRI and containerd

def test_nri_on_rke2_with_containerd_2_1_passes(tmp_path):
    assert decide({"a10": host(facts(tmp_path, a10_host))}, {"cdi_nri_plugin_enabled": True})["ok"] is True


def test_nri_on_containerd_1_7_is_refused(tmp_path):
    h = a10_host(tmp_path / "old")
    h.file("/var/lib/rancher/rke2/agent/containerd/containerd.log",
           'level=info msg="starting containerd" revision=x version=v1.7.27-k3s1\n')
    result = decide({"a10": host(hf.gather(h.root))}, {"cdi_nri_plugin_enabled": True})
    assert errors(result) == [("a10", "containerd.version")]
    assert "runs containerd v1.7.27-k3s1" in message(result, "containerd.version")


@pytest.mark.parametrize("version, refused", [("v1.31.12+rke2r1", True), ("v1.30.14+rke2r1", True),
                                              ("v1.33.5+rke2r1", False), ("v1.35.0+rke2r1", False)])
def test_nri_without_containerd_log_follows_the_rke2_release(tmp_path, version, refused):
    h = FakeHost(tmp_path).system().pci_ids().blacklist_nouveau().rke2(version=version, containerd=None)
    h.gpu("0000:17:00.0", "2236")
    result = decide({"a10": host(hf.gather(h.root))}, {"cdi_nri_plugin_enabled": True})
    assert errors(result) == ([("a10", "rke2.version")] if refused else [])


def test_nri_when_no_version_is_known_is_a_warning(tmp_path):
    h = FakeHost(tmp_path).system().pci_ids().blacklist_nouveau().gpu("0000:17:00.0", "2236")
    result = decide({"a10": host(hf.gather(h.root))}, {"cdi_nri_plugin_enabled": True})
    assert result["ok"] is True
    assert warnings(result) == [("a10", "containerd.version")]


def test_old_containerd_is_fine_without_nri(tmp_path):
    h = FakeHost(tmp_path).system().pci_ids().blacklist_nouveau().rke2(version="v1.30.4+rke2r1", containerd=None)
    h.gpu("0000:17:00.0", "2236")
    assert decide({"a10": host(hf.gather(h.root))})["ok"] is True


# ---------------------------------------------------------------- CIS profile and Pod Security

def test_cis_profile_without_exemption_is_refused_with_rendered_fixes(tmp_path):
    result = decide({"gpu-cis": host(facts(tmp_path, cis_host))})
    assert errors(result) == [("gpu-cis", "rke2.pod_security")]
    assert "does not exempt namespace gpu-operator" in message(result, "rke2.pod_security")
    values, admission, dropin = result["fixes"]
    assert values["variables"] == {"gpu_operator_extra_values": {"psa": {"enabled": True}}}
    assert yaml.safe_load(values["content"]) == {"psa": {"enabled": True}}
    assert admission["path"] == "/etc/rancher/rke2/gpu-operator-pss.yaml"
    config = yaml.safe_load(admission["content"])["plugins"][0]["configuration"]
    assert config["defaults"]["enforce"] == "restricted"
    assert config["exemptions"]["namespaces"] == ["kube-system", "cis-operator-system", "tigera-operator",
                                                  "gpu-operator"]
    assert yaml.safe_load(dropin["content"]) == {
        "pod-security-admission-config-file": "/etc/rancher/rke2/gpu-operator-pss.yaml"}


def test_cis_profile_with_chart_psa_enabled_passes(tmp_path):
    result = decide({"gpu-cis": host(facts(tmp_path, cis_host))}, {"psa_enabled": True})
    assert result["ok"] is True
    assert result["fixes"] == []


def test_cis_agent_without_psa_file_is_refused_from_rke2_defaults(tmp_path):
    result = decide({"agent": host(facts(tmp_path, cis_host, psa_file=None))}, {"namespace": "nvidia-gpu"})
    assert errors(result) == [("agent", "rke2.profile")]
    assert "namespace nvidia-gpu" in message(result, "rke2.profile")
    config = yaml.safe_load(result["fixes"][1]["content"])["plugins"][0]["configuration"]
    assert config["exemptions"]["namespaces"][-1] == "nvidia-gpu"


def test_cis_agent_passes_when_the_server_exempts_the_namespace(tmp_path):
    exempting = RKE2_CIS_PSS.replace("tigera-operator]", "tigera-operator, gpu-operator]")
    hosts = {"agent": host(facts(tmp_path, cis_host, "agent", psa_file=None)),
             "server": host(facts(tmp_path, cis_host, "server", psa_file=exempting), gpu_node=False)}
    result = decide(hosts)
    assert result["ok"] is True
    assert "server" not in result["nodes"]


def test_fixes_keep_what_the_servers_exempt():
    fixes = render_psa_fixes("gpu-operator", ("baseline", ["kube-system", "longhorn-system"]))
    config = yaml.safe_load(fixes[1]["content"])["plugins"][0]["configuration"]
    assert config["defaults"]["enforce"] == "baseline"
    assert config["exemptions"]["namespaces"] == ["kube-system", "longhorn-system", "gpu-operator"]


def test_default_profile_needs_no_psa_fix(tmp_path):
    unrestricted = RKE2_CIS_PSS.replace('enforce: "restricted"', 'enforce: "privileged"')
    result = decide({"a10": host(facts(tmp_path, a10_host))})
    assert result["fixes"] == []
    h = a10_host(tmp_path / "u").file("/etc/rancher/rke2/rke2-pss.yaml", unrestricted)
    assert decide({"a10": host(hf.gather(h.root))})["fixes"] == []


# ---------------------------------------------------------------- chart decisions

def test_chart_defaults():
    assert chart_decisions() == {"driver_enabled": True, "toolkit_enabled": True, "sandbox_workloads_enabled": False,
                                 "cdi_nri_plugin_enabled": False, "psa_enabled": False, "namespace": "gpu-operator"}
    assert chart_decisions({"driver_enabled": "false", "psa_enabled": None})["driver_enabled"] is False


@pytest.mark.parametrize("chart, text", [
    ({"driver": True}, "unknown chart decision(s) driver"),
    ({"driver_enabled": "perhaps"}, "gpu_operator_driver_enabled must be a boolean, got 'perhaps'"),
    ({"namespace": "GPU_Operator"}, "gpu_operator_namespace must be a namespace name, got 'GPU_Operator'"),
])
def test_bad_chart_decisions_raise_naming_the_key(chart, text):
    with pytest.raises(PreflightInputError) as exc:
        decide({}, chart)
    assert text in str(exc.value)


def test_hosts_must_be_a_mapping():
    with pytest.raises(PreflightInputError, match="hosts must be a mapping"):
        decide(["gpu-1"])
