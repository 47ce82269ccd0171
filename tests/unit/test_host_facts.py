"""host_facts on fake host trees: what each kind of GPU host reports."""
import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import host_facts as hf
from tests.unit.fixtures.hosts.fake_host import (FakeHost, a10_host, cis_host, cpu_only_host, h100_preinstalled_host,
                                                 nouveau_host)


def test_a10_host_with_iommu(tmp_path):
    facts = hf.gather(str(a10_host(tmp_path).root))
    hw = facts["hardware"]
    assert hw["count"] == 2
    assert hw["pci_ids"] == "/usr/share/misc/pci.ids"
    first = hw["gpus"][0]
    assert first["address"] == "0000:17:00.0"
    assert (first["device_id"], first["class"], first["name"], first["name_source"]) == \
        ("2236", "0x030200", "GA102GL [A10]", "pci.ids")
    assert (first["model"], first["architecture"], first["iommu_group"]) == ("A10", "ampere", "20")
    assert first["sriov"] == {"capable": True, "total_vfs": 32, "num_vfs": 0}
    assert facts["iommu"] == {"enabled": True, "groups": 40, "cmdline": {"intel_iommu": "on", "iommu": "pt"}}
    assert facts["sriov"] == {"capable_gpus": 2, "total_vfs": 64}
    assert facts["host_driver"]["preinstalled"] is False
    assert facts["host_driver"]["loaded"] is False
    assert facts["nouveau"]["loaded"] is False
    assert facts["nouveau"]["blacklisted"] is True
    assert facts["os"] == {"id": "ubuntu", "version_id": "22.04", "pretty_name": "Ubuntu 22.04 LTS"}
    assert facts["kernel"]["release"] == "5.15.0-105-generic"
    assert facts["errors"] == []


def test_a10_host_without_iommu(tmp_path):
    facts = hf.gather(str(a10_host(tmp_path, iommu=False).root))
    assert facts["iommu"] == {"enabled": False, "groups": 0, "cmdline": {}}
    assert [g["iommu_group"] for g in facts["hardware"]["gpus"]] == [None, None]


def test_iommu_on_the_command_line_but_no_groups_is_not_enabled(tmp_path):
    # intel_iommu=on with VT-d off in the firmware: the kernel creates no groups.
    host = FakeHost(tmp_path).system(cmdline="ro intel_iommu=on").gpu("0000:17:00.0", "2236")
    facts = hf.gather(host.root)
    assert facts["iommu"]["enabled"] is False
    assert facts["iommu"]["cmdline"] == {"intel_iommu": "on"}


def test_h100_with_preinstalled_driver_and_nouveau_blacklisted(tmp_path):
    facts = hf.gather(h100_preinstalled_host(tmp_path).root)
    gpus = facts["hardware"]["gpus"]
    assert facts["hardware"]["count"] == 4
    assert facts["hardware"]["pci_ids"] is None
    # No pci.ids on the host: the built-in table names the card the way pci.ids does.
    assert set((g["name"], g["name_source"], g["model"], g["architecture"], g["driver"]) for g in gpus) == \
        {("GH100 [H100 PCIe]", "builtin", "H100", "hopper", "nvidia")}
    driver = facts["host_driver"]
    assert driver["loaded"] is True
    assert driver["version"] == "550.90.07"
    assert driver["kernel_module"] == "/lib/modules/5.14.0-427.13.1.el9_4.x86_64/extra/nvidia.ko.xz"
    assert driver["libnvidia_ml"] == "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    assert driver["nvidia_smi"] == "/usr/bin/nvidia-smi"
    assert (driver["operator_managed"], driver["preinstalled"]) == (False, True)
    assert facts["nouveau"] == {
        "loaded": False, "blacklisted": True,
        "blacklist_sources": ["/usr/lib/modprobe.d/nvidia-installer-disable-nouveau.conf: blacklist nouveau"]}
    assert facts["os"]["id"] == "rhel"
    assert facts["rke2"]["version"] == "v1.32.9+rke2r1"


def test_h200_vm_as_read_on_real_hardware(tmp_path):
    # The layout an H200 VM showed (Ubuntu 24.04, open kernel module 580.159.04 loaded from outside
    # /lib/modules, no IOMMU groups, no SR-IOV files, no pci.ids).
    host = FakeHost(tmp_path).system(version_id="24.04", kernel="6.18.44-fc-v657-gpu")
    host.gpu("0000:00:06.0", "2335", pci_class="0x030200", driver="nvidia")
    host.file("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  "
              "Release Build  (nixbld@)  \nGCC version:  gcc version 15.3.0 (GCC) \n")
    host.modules("nvidia_uvm", "nvidia").file("/usr/lib/libnvidia-ml.so.1", "x").file("/usr/bin/nvidia-smi", "x")
    facts = hf.gather(host.root)
    gpu = facts["hardware"]["gpus"][0]
    assert (gpu["name"], gpu["model"], gpu["architecture"], gpu["driver"], gpu["iommu_group"]) == \
        ("GH100 [H200 SXM 141GB]", "H200", "hopper", "nvidia", None)
    assert gpu["sriov"] == {"capable": False, "total_vfs": 0, "num_vfs": 0}
    assert facts["host_driver"] == {"loaded": True, "version": "580.159.04", "kernel_modules": "open",
                                    "packages": {}, "kernel_module": None, "libnvidia_ml": "/usr/lib/libnvidia-ml.so.1", "nvidia_smi": "/usr/bin/nvidia-smi",
                                    "operator_managed": False, "preinstalled": True}
    assert facts["iommu"]["enabled"] is False


def test_driver_of_the_operator_container_is_not_a_host_driver(tmp_path):
    host = FakeHost(tmp_path).system().gpu("0000:17:00.0", "2236", driver="nvidia")
    host.host_driver(module_path=None).file("/run/nvidia/validations/.driver-ctr-ready")
    driver = hf.gather(host.root)["host_driver"]
    assert (driver["loaded"], driver["operator_managed"], driver["preinstalled"]) == (True, True, False)


def test_installed_but_unloaded_driver_is_a_host_driver(tmp_path):
    host = FakeHost(tmp_path).system().host_driver(loaded=False, module_path="kernel/drivers/video/nvidia.ko")
    driver = hf.gather(host.root)["host_driver"]
    assert (driver["loaded"], driver["version"], driver["preinstalled"]) == (False, None, True)


def test_driver_for_another_kernel_does_not_count(tmp_path):
    host = FakeHost(tmp_path).system(kernel="6.8.0-45-generic")
    host.file("/lib/modules/6.5.0-1-generic/updates/dkms/nvidia.ko", "x")
    assert hf.gather(host.root)["host_driver"]["kernel_module"] is None


def test_nouveau_loaded(tmp_path):
    facts = hf.gather(nouveau_host(tmp_path).root)
    assert facts["nouveau"] == {"loaded": True, "blacklisted": False, "blacklist_sources": []}
    assert facts["hardware"]["gpus"][0]["driver"] == "nouveau"


def test_nouveau_blacklisted_on_the_kernel_command_line_and_by_install_rule(tmp_path):
    host = FakeHost(tmp_path).system(cmdline="ro modprobe.blacklist=nouveau,radeon")
    host.file("/etc/modprobe.d/nouveau.conf", "install nouveau /bin/false  # never\n")
    host.file("/etc/modprobe.d/other.conf.disabled", "blacklist nouveau\n")
    facts = hf.gather(host.root)
    assert facts["nouveau"]["blacklist_sources"] == [
        "/etc/modprobe.d/nouveau.conf: install nouveau /bin/false",
        "/proc/cmdline: modprobe.blacklist=nouveau,radeon",
    ]


def test_cpu_only_host(tmp_path):
    facts = hf.gather(cpu_only_host(tmp_path).root)
    assert facts["hardware"]["count"] == 0
    assert facts["hardware"]["gpus"] == []
    assert facts["sriov"] == {"capable_gpus": 0, "total_vfs": 0}


def test_sriov_virtual_functions_are_not_gpus(tmp_path):
    host = FakeHost(tmp_path).system().pci_ids()
    host.gpu("0000:17:00.0", "2236", total_vfs=32)
    host.gpu("0000:17:00.4", "2236", physfn="0000:17:00.0")
    facts = hf.gather(host.root)
    assert [g["address"] for g in facts["hardware"]["gpus"]] == ["0000:17:00.0"]


def test_unknown_device_without_pci_ids_has_no_name(tmp_path):
    host = FakeHost(tmp_path).system().gpu("0000:17:00.0", "2bb5", pci_class="0x030200")
    gpu = hf.gather(host.root)["hardware"]["gpus"][0]
    assert (gpu["name"], gpu["name_source"], gpu["model"], gpu["architecture"]) == (None, None, None, None)


def test_hwdata_pci_ids_is_read_when_misc_is_absent(tmp_path):
    host = FakeHost(tmp_path).system().pci_ids("/usr/share/hwdata/pci.ids").gpu("0000:17:00.0", "26b9")
    facts = hf.gather(host.root)
    assert facts["hardware"]["pci_ids"] == "/usr/share/hwdata/pci.ids"
    assert facts["hardware"]["gpus"][0]["name"] == "AD102GL [L40S]"
    assert facts["hardware"]["gpus"][0]["architecture"] == "ada-lovelace"


def test_rke2_versions_and_profile_from_files(tmp_path):
    host = a10_host(tmp_path)
    facts = hf.gather(host.root)
    rke2 = facts["rke2"]
    assert rke2["installed"] is True
    assert rke2["binary"] == "/usr/local/bin/rke2"
    assert rke2["version"] == "v1.31.13+rke2r1"
    assert rke2["version_source"].startswith("/var/lib/rancher/rke2/bin -> /var/lib/rancher/rke2/data/v1.31.13-rke2r1-")
    assert rke2["profile"] is None
    assert facts["containerd"] == {"version": "v2.1.4-k3s1",
                                   "source": "/var/lib/rancher/rke2/agent/containerd/containerd.log"}


def test_rke2_never_started_asks_the_binaries(tmp_path):
    host = FakeHost(tmp_path).system().rke2(version="v1.30.4+rke2r1", started=False)
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "rke2 version v1.30.4+rke2r1 (0a1b2c3d)\ngo version go1.22.5 X:boringcrypto\n", ""

    facts = hf.gather(host.root, run=run)
    assert calls == [[host.path("/usr/local/bin/rke2"), "--version"]]
    assert (facts["rke2"]["version"], facts["rke2"]["version_source"]) == \
        ("v1.30.4+rke2r1", "/usr/local/bin/rke2 --version")
    assert facts["containerd"] == {"version": None, "source": None}
    assert hf.gather(host.root)["rke2"]["version"] is None  # nothing is run without a runner


def test_containerd_version_from_its_binary_when_no_log(tmp_path):
    host = FakeHost(tmp_path).system().rke2(containerd=None)

    def run(argv):
        assert argv[0].endswith("/containerd")
        return 0, "containerd github.com/k3s-io/containerd v1.7.27-k3s1 05044ec0\n", ""

    assert hf.gather(host.root, run=run)["containerd"]["version"] == "v1.7.27-k3s1"


def test_failed_version_command_is_recorded(tmp_path):
    host = FakeHost(tmp_path).system().rke2(started=False)
    facts = hf.gather(host.root, run=lambda argv: (126, "", "exec format error"))
    assert facts["rke2"]["version"] is None
    assert facts["errors"] == [{"path": host.path("/usr/local/bin/rke2"), "error": "exit 126: exec format error"}]


def test_last_containerd_start_wins(tmp_path):
    host = FakeHost(tmp_path).system().rke2(containerd="v1.7.27-k3s1")
    log = host.path("/var/lib/rancher/rke2/agent/containerd/containerd.log")
    with open(log, "a") as handle:
        handle.write('time="x" level=info msg="starting containerd" revision=9f8e version=v2.1.4-k3s1\n')
    assert hf.gather(host.root)["containerd"]["version"] == "v2.1.4-k3s1"


def test_cis_profile_and_pod_security(tmp_path):
    facts = hf.gather(cis_host(tmp_path).root)
    assert facts["rke2"]["profile"] == "cis"
    assert facts["rke2"]["config_files"] == ["/etc/rancher/rke2/config.yaml"]
    assert facts["rke2"]["pod_security"] == {
        "config_file": "/etc/rancher/rke2/rke2-pss.yaml", "default_enforce": "restricted",
        "exempt_namespaces": ["kube-system", "cis-operator-system", "tigera-operator"]}


def test_config_yaml_d_overrides_and_custom_psa_file(tmp_path):
    host = a10_host(tmp_path)
    host.file("/etc/rancher/rke2/config.yaml", "profile: cis\n")
    host.file("/etc/rancher/rke2/config.yaml.d/10-psa.yaml",
              "pod-security-admission-config-file: /etc/rancher/rke2/custom-pss.yaml\n")
    host.file("/etc/rancher/rke2/config.yaml.d/20-profile.yaml", "profile: cis-1.23\n")
    host.file("/etc/rancher/rke2/config.yaml.d/README", "profile: ignored\n")
    host.file("/etc/rancher/rke2/custom-pss.yaml", "apiVersion: apiserver.config.k8s.io/v1\n"
              "kind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: pss.yaml\n")
    host.file("/etc/rancher/rke2/pss.yaml", "apiVersion: pod-security.admission.config.k8s.io/v1\n"
              "kind: PodSecurityConfiguration\ndefaults:\n  enforce: baseline\nexemptions:\n"
              "  namespaces:\n  - kube-system\n  - gpu-operator\n")
    rke2 = hf.gather(host.root)["rke2"]
    assert rke2["profile"] == "cis-1.23"
    assert rke2["config_files"] == ["/etc/rancher/rke2/config.yaml", "/etc/rancher/rke2/config.yaml.d/10-psa.yaml",
                                    "/etc/rancher/rke2/config.yaml.d/20-profile.yaml"]
    assert rke2["pod_security"] == {"config_file": "/etc/rancher/rke2/custom-pss.yaml", "default_enforce": "baseline",
                                    "exempt_namespaces": ["kube-system", "gpu-operator"]}


def test_broken_config_is_an_error_not_a_crash(tmp_path):
    host = a10_host(tmp_path).file("/etc/rancher/rke2/config.yaml", "profile: [cis\n")
    facts = hf.gather(host.root)
    assert facts["rke2"]["profile"] is None
    assert facts["errors"][0]["path"] == "/etc/rancher/rke2/config.yaml"
    assert facts["errors"][0]["error"].startswith("not YAML")


def test_host_without_rke2(tmp_path):
    rke2 = hf.gather(FakeHost(tmp_path).system().root)["rke2"]
    assert (rke2["installed"], rke2["version"], rke2["profile"], rke2["config_files"]) == (False, None, None, [])
    assert rke2["pod_security"] == {"config_file": None, "default_enforce": None, "exempt_namespaces": None}


def test_empty_root_gives_empty_facts(tmp_path):
    facts = hf.gather(str(tmp_path))
    assert facts["hardware"]["count"] == 0
    assert facts["kernel"] == {"release": None, "cmdline": ""}
    assert facts["os"] == {"id": None, "version_id": None, "pretty_name": None}
    assert facts["errors"] == []


@pytest.mark.parametrize("text, version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.07  Sat Feb 17 22:55:48 UTC 2024\n", "535.161.07"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n", "550.54.15"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  570.86.15  Thu Jan 23 2025\n", "570.86.15"),
    ("garbage", None),
])
def test_parse_nvidia_version(text, version):
    assert hf.parse_nvidia_version(text) == version


@pytest.mark.parametrize("tag, version", [
    ("v1.31.13-rke2r1-0123456789ab", "v1.31.13+rke2r1"),
    ("v1.34.1-rke2r2-abcdefabcdef", "v1.34.1+rke2r2"),
    ("5f2a0c0e9b1d", None),  # a runtime image pinned by digest names no version
])
def test_parse_runtime_tag(tag, version):
    assert hf.parse_runtime_tag(tag) == version


@pytest.mark.parametrize("name, arch", [
    ("GA102GL [A10]", "ampere"), ("GH100 [H100 PCIe]", "hopper"), ("AD102GL [L40S]", "ada-lovelace"),
    ("TU104GL [Tesla T4]", "turing"), ("GB100 [B200]", "blackwell"), ("GV100GL [Tesla V100 PCIe 32GB]", "volta"),
    (None, None), ("Something", None),
])
def test_architecture_of(name, arch):
    assert hf.architecture_of(name) == arch


def test_parse_pci_ids_reads_only_the_vendor_and_skips_subsystems():
    from tests.unit.fixtures.hosts.fake_host import PCI_IDS_SAMPLE
    assert hf.parse_pci_ids(PCI_IDS_SAMPLE) == {"1eb8": "TU104GL [Tesla T4]", "2236": "GA102GL [A10]",
                                                "2331": "GH100 [H100 PCIe]", "26b9": "AD102GL [L40S]"}


def test_flat_yaml_fallback_reads_rke2_config():
    text = "# rke2\ntoken-file: /etc/rancher/rke2/token\nprofile: \"cis\"  # hardened\ntls-san:\n  - a.example\n"
    assert hf.flat_yaml(text) == {"token-file": "/etc/rancher/rke2/token", "profile": "cis"}


def test_psa_from_admission_config_without_pod_security_plugin():
    assert hf.psa_from_admission_config({"kind": "AdmissionConfiguration", "plugins": []}) == (None, None)
    assert hf.psa_from_admission_config("text") == (None, None)
