"""A DGX Spark host (tests/unit/fixtures/hosts/fake_host.py: dgx_spark_host) through host_facts
and the preflight: what it reports and what the preflight decides for it, alone and in a
mixed site with an A10 host that needs the driver container."""
import os

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import host_facts as hf
from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan as ip
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from ansible_collections.gpuplatform.rke2.plugins.module_utils import verify_report as vr
from ansible_collections.gpuplatform.rke2.plugins.module_utils.preflight import decide
from tests.conftest import ROOT
from tests.unit.fixtures.hosts.fake_host import (DGX_SPARK_DRIVER, NVIDIA_PROPRIETARY_VERSION, FakeHost, a10_host,
                                                 dgx_spark_host)

CHART_VALUES = os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v26.3.2-values.yaml")

SANDBOX = {"sandbox_workloads_enabled": True}
SPARK = "tirosh-spark-1"


def spark_facts(tmp_path, **kwargs):
    return hf.gather(dgx_spark_host(tmp_path / "spark", **kwargs).root)


def by_fact(result, severity=None):
    return dict((f["fact"], f["message"]) for f in result["findings"] if severity in (None, f["severity"]))


def errors(result):
    return sorted((f["host"], f["fact"]) for f in result["findings"] if f["severity"] == "error")


# ---------------------------------------------------------------- what the host reports

def test_dgx_spark_facts(tmp_path):
    facts = spark_facts(tmp_path)
    assert facts["architecture"] == {"machine": "aarch64", "kubernetes": "arm64", "source": "/proc/sys/kernel/arch"}
    gpu, = facts["hardware"]["gpus"]
    assert (gpu["address"], gpu["device_id"], gpu["class"], gpu["name"], gpu["model"], gpu["architecture"]) == \
        ("000f:01:00.0", "2e12", "0x030000", "GB20B [GB10]", "GB10", "blackwell")
    assert gpu["sriov"] == {"capable": False, "total_vfs": 0, "num_vfs": 0}
    driver = facts["host_driver"]
    assert (driver["loaded"], driver["version"], driver["kernel_modules"], driver["preinstalled"]) == \
        (True, DGX_SPARK_DRIVER, "open", True)
    assert driver["packages"] == {"nvidia-driver-580-open": "580.142-0ubuntu0.24.04.1"}
    assert driver["libnvidia_ml"] == "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1"
    assert facts["docker"] == {
        "installed": True, "binary": "/usr/bin/dockerd", "version": "29.2.1",
        "version_source": "/var/lib/dpkg/status (docker-ce 5:29.2.1-1~ubuntu.24.04~noble)",
        "daemon_json": "/etc/docker/daemon.json", "runtimes": ["nvidia"], "default_runtime": "nvidia"}
    assert facts["container_toolkit"] == {
        "installed": True, "nvidia_ctk": "/usr/bin/nvidia-ctk", "runtime": "/usr/bin/nvidia-container-runtime",
        "version": "1.19.0", "version_source": "/var/lib/dpkg/status (nvidia-container-toolkit 1.19.0-1)",
        "config": "/etc/nvidia-container-runtime/config.toml", "cdi_specs": ["/var/run/cdi/nvidia.yaml"]}
    assert facts["os"]["id"] == "ubuntu" and facts["os"]["version_id"] == "24.04"
    assert facts["kernel"]["release"] == "6.17.0-1014-nvidia"
    # The SMMU makes IOMMU groups, but nothing asks for passthrough.
    assert facts["iommu"]["enabled"] is True and facts["iommu"]["cmdline"] == {}
    assert facts["errors"] == []


def test_proprietary_kernel_modules_are_told_apart(tmp_path):
    host = FakeHost(tmp_path).system().host_driver(version="550.144.03", version_text=NVIDIA_PROPRIETARY_VERSION)
    assert hf.gather(host.root)["host_driver"]["kernel_modules"] == "proprietary"


def test_architecture_from_uname_when_the_kernel_has_no_arch_file(tmp_path):
    host = FakeHost(tmp_path).system()
    assert hf.gather(host.root, machine="x86_64")["architecture"] == {
        "machine": "x86_64", "kubernetes": "amd64", "source": "uname -m"}
    assert hf.gather(host.root)["architecture"] == {"machine": None, "kubernetes": None, "source": None}


def test_versions_from_the_binaries_when_dpkg_does_not_know_them(tmp_path):
    host = FakeHost(tmp_path).system().docker().container_toolkit(cdi=False)
    outputs = {"dockerd": "Docker version 27.5.1, build 4c9b3b0\n",
               "nvidia-ctk": "NVIDIA Container Toolkit CLI version 1.19.0\ncommit: 6b7bd5b\n"}
    facts = hf.gather(host.root, run=lambda argv: (0, outputs[argv[0].rsplit("/", 1)[1]], ""))
    assert (facts["docker"]["version"], facts["docker"]["version_source"]) == ("27.5.1", "/usr/bin/dockerd --version")
    assert (facts["docker"]["daemon_json"], facts["docker"]["runtimes"]) == (None, [])
    assert (facts["container_toolkit"]["version"], facts["container_toolkit"]["cdi_specs"]) == ("1.19.0", [])


def test_a_broken_daemon_json_is_an_error_not_a_crash(tmp_path):
    host = FakeHost(tmp_path).system().docker("{not json")
    facts = hf.gather(host.root)
    assert facts["docker"]["runtimes"] == []
    assert [e["path"] for e in facts["errors"]] == ["/etc/docker/daemon.json"]


def test_host_without_docker_or_toolkit(tmp_path):
    facts = hf.gather(a10_host(tmp_path).root)
    assert facts["docker"]["installed"] is False and facts["container_toolkit"]["installed"] is False


@pytest.mark.parametrize("machine, arch", [("aarch64", "arm64"), ("x86_64", "amd64"), ("riscv64", None)])
def test_kubernetes_architecture(machine, arch):
    assert hf.kubernetes_architecture(machine) == arch


# ---------------------------------------------------------------- the decisions

def test_dgx_spark_alone_wants_driver_enabled_false_and_keeps_the_toolkit(tmp_path):
    result = decide({SPARK: {"facts": spark_facts(tmp_path), "gpu_workload_config": "container", "gpu_model": "GB10",
                             "gpu_count": 1, "arch": "arm64"}}, {"driver_enabled": False})
    assert result["ok"] is True
    assert errors(result) == []
    assert result["nodes"][SPARK] == {
        "workload_config": "container", "effective_workload_config": "container", "driver_operand": "host",
        "deploy_driver_false": False, "driver_source": "host", "architecture": "arm64", "gpu_models": ["GB10"],
        "host_driver": {"version": DGX_SPARK_DRIVER, "kernel_modules": "open"}}
    assert result["defaults"]["driver_enabled"] is False
    docker = by_fact(result, "info")["docker"]
    assert "Docker 29.2.1 (runtimes nvidia, default nvidia, /etc/docker/daemon.json)" in docker
    assert "the NVIDIA Container Toolkit 1.19.0" in docker
    assert "run on RKE2's containerd (/run/k3s/containerd/containerd.sock)" in docker
    assert "reads neither /etc/docker/daemon.json nor the toolkit's Docker runtime settings" in docker
    assert result["explanations"] == [
        "driver.enabled is false: no driver container runs; the GPU nodes bring their own driver: "
        "%s (driver 580.142, open kernel modules)" % SPARK,
        "toolkit.enabled stays true: Docker and the NVIDIA Container Toolkit on %s configure Docker's runtime, not "
        "RKE2's containerd (/run/k3s/containerd/containerd.sock), where Kubernetes runs the pods" % SPARK]


def test_dgx_spark_with_the_driver_container_on_is_refused_naming_what_the_driver_manager_would_do(tmp_path):
    result = decide({SPARK: {"facts": spark_facts(tmp_path), "gpu_workload_config": "container"}})
    assert errors(result) == [(SPARK, "host_driver.preinstalled")]
    message = by_fact(result)["host_driver.preinstalled"]
    assert "the host already has driver 580.142 (/lib/modules/6.17.0-1014-nvidia/updates/dkms/nvidia.ko.zst, " \
           "open kernel modules)" in message
    assert "nvidia.com/gpu.deploy.driver=pre-installed, wait 60 s and fail" in message
    assert result["defaults"]["driver_enabled"] is False


def test_mixed_site_keeps_the_driver_container_and_labels_the_spark(tmp_path):
    """The example site: an A10 host needs the driver container, the DGX Spark brings its own."""
    hosts = {"tirosh-gpu-1": {"facts": hf.gather(a10_host(tmp_path / "a10").root), "gpu_workload_config": "container"},
             SPARK: {"facts": spark_facts(tmp_path), "gpu_workload_config": "container",
                     "gpu_operands_disabled": ["driver"]}}
    result = decide(hosts, SANDBOX)
    assert errors(result) == []
    assert result["defaults"]["driver_enabled"] is True
    assert result["defaults"]["nodes"][SPARK]["gpu_operands_disabled"] == ["driver"]
    assert (result["nodes"]["tirosh-gpu-1"]["driver_source"], result["nodes"][SPARK]["driver_source"]) == \
        ("container", "host")
    assert result["explanations"][0].startswith(
        "driver.enabled stays true for tirosh-gpu-1, which need the driver container; %s (driver 580.142, open "
        "kernel modules) bring their own driver and get nvidia.com/gpu.deploy.driver=false" % SPARK)
    # Follow mode gives the same labels when the inventory does not say.
    del hosts[SPARK]["gpu_operands_disabled"]
    followed = decide(hosts, SANDBOX, follow_hosts=True)
    assert errors(followed) == [] and followed["nodes"][SPARK]["deploy_driver_false"] is True
    assert followed["chart"]["driver_enabled"] is True


@pytest.mark.parametrize("config", ["vm-passthrough", "vm-vgpu"])
def test_vm_workloads_on_gb10_are_refused_naming_the_host(tmp_path, config):
    result = decide({SPARK: {"facts": spark_facts(tmp_path), "gpu_workload_config": config}},
                    dict(SANDBOX, driver_enabled=False))
    assert (SPARK, "hardware.gpus.capabilities") in errors(result)
    message = by_fact(result)["hardware.gpus.capabilities"]
    assert message.startswith("%s is declared %s but its GB10 (10de:2e12) cannot run it" % (SPARK, config))
    assert "set gpu_workload_config: container" in message


@pytest.mark.parametrize("labels", [{"nvidia.com/mig.config": "all-1g.10gb"}, {"nvidia.com/mig.capable": "true"}])
def test_mig_on_gb10_is_refused(tmp_path, labels):
    result = decide({SPARK: {"facts": spark_facts(tmp_path), "gpu_workload_config": "container",
                             "node_labels": labels}}, {"driver_enabled": False})
    assert errors(result) == [(SPARK, "hardware.gpus.mig")]
    assert "%s asks for MIG (%s=%s) but its GB10 (10de:2e12) has no MIG" % ((SPARK,) + next(iter(labels.items()))) \
        in by_fact(result)["hardware.gpus.mig"]


def test_mig_disabled_on_gb10_is_fine(tmp_path):
    result = decide({SPARK: {"facts": spark_facts(tmp_path), "gpu_workload_config": "container",
                             "node_labels": {"nvidia.com/mig.config": "all-disabled"}}}, {"driver_enabled": False})
    assert errors(result) == []


def test_declared_architecture_must_be_the_hosts(tmp_path):
    result = decide({SPARK: {"facts": spark_facts(tmp_path), "gpu_workload_config": "container", "arch": "amd64"}},
                    {"driver_enabled": False})
    assert errors(result) == [(SPARK, "architecture.kubernetes")]
    assert "declares rke2_arch amd64 but the host is arm64 (aarch64)" in by_fact(result)["architecture.kubernetes"]


def test_toolkit_off_needs_a_runtime_on_the_host(tmp_path):
    hosts = {"gpu-1": {"facts": hf.gather(a10_host(tmp_path).root), "gpu_workload_config": "container"}}
    result = decide(hosts, {"toolkit_enabled": False})
    assert errors(result) == [("gpu-1", "container_toolkit.runtime")]
    # The DGX Spark has one: its toolkit off is allowed, with the note that Docker's setup is not RKE2's.
    spark = decide({SPARK: {"facts": spark_facts(tmp_path), "gpu_workload_config": "container"}},
                   {"toolkit_enabled": False, "driver_enabled": False})
    assert errors(spark) == []
    assert "RKE2's containerd must already have the NVIDIA runtime" in by_fact(spark, "info")["docker"]


# ---------------------------------------------------------------- the verification report

def _checked(operand_states, **node):
    names = ["container-toolkit", "operator-validator", "device-plugin"]
    return dict({"gpu_node": True, "workload_config": "container", "expected_operands": names,
                 "running_operands": names, "not_running": {}, "advertised": {"nvidia.com/gpu": 1}, "capacity": {},
                 "untolerated_taints": [], "layer_failures": [], "operand_states": operand_states}, **node)


def test_report_shows_architecture_gpu_model_and_where_the_driver_comes_from(tmp_path):
    check = {"findings": [], "summary": {}, "nodes": {
        # The Spark with the preflight's facts; an A10 node known only from what it says of itself.
        SPARK: _checked({"driver": "host"}, architecture="arm64", gpu_product="NVIDIA-GB10", driver_version="580.142"),
        "tirosh-gpu-1": _checked({"driver": "expected"}, architecture="amd64", gpu_product="NVIDIA-A10",
                                 driver_version="580.126.20"),
        "tirosh-gpu-2": _checked({}, workload_config="vm-passthrough", architecture="amd64"),
    }}
    report = vr.build_report("tirosh-home", check, host_facts={SPARK: spark_facts(tmp_path)})
    spark, a10, vm = (report["nodes"][n] for n in (SPARK, "tirosh-gpu-1", "tirosh-gpu-2"))
    assert (spark["architecture"], spark["gpu_model"], spark["driver"]) == (
        "arm64", "GB10", {"source": "host", "version": "580.142", "kernel_modules": "open"})
    assert spark["layers"]["host-driver"] == {"state": vr.OK, "detail": "host driver 580.142"}
    assert (a10["architecture"], a10["gpu_model"], a10["driver"]) == (
        "amd64", "NVIDIA-A10", {"source": "container", "version": "580.126.20"})
    assert (vm["architecture"], vm["gpu_model"], vm["driver"]) == ("amd64", None, {"source": None, "version": None})
    markdown = vr.to_markdown(report)
    assert "| node | arch | GPU | driver | workload config | advertised |" in markdown
    assert "| %s | arm64 | GB10 | 580.142 (host) | container | nvidia.com/gpu=1 |" % SPARK in markdown
    assert "| tirosh-gpu-1 | amd64 | NVIDIA-A10 | 580.126.20 (container) | container |" in markdown
    assert "| tirosh-gpu-2 | amd64 | - | - | vm-passthrough |" in markdown
    assert "<td>arm64</td><td>GB10</td><td>580.142 (host)</td>" in vr.to_html(report)


# ---------------------------------------------------------------- the air-gap plan of a mixed site

def effective_values(values):
    """Chart v26.3.2's values.yaml (the role's copy) with ``values`` on top."""
    with open(CHART_VALUES) as handle:
        return ov.effective_values(yaml.safe_load(handle), values)


def test_image_plan_names_the_platforms_each_image_needs():
    effective = effective_values({"sandboxWorkloads": {"enabled": True}})
    nodes = [{"name": "tirosh-gpu-1", "workload_config": "container", "os_tag": "ubuntu24.04", "arch": "amd64"},
             {"name": "tirosh-gpu-2", "workload_config": "vm-passthrough", "os_tag": "ubuntu24.04", "arch": "amd64"},
             {"name": SPARK, "workload_config": "container", "os_tag": "ubuntu24.04", "arch": "arm64",
              "operands_disabled": ["driver"]}]
    images, problems = ip.plan_images(effective, "v26.3.2", nodes, [], [], "0.18.3", ["amd64"])
    assert problems == []
    got = dict((i["source"], i["platforms"]) for i in images)
    both, amd64 = ["linux/amd64", "linux/arm64"], ["linux/amd64"]
    assert got["nvcr.io/nvidia/gpu-operator:v26.3.2"] == both
    assert got["registry.k8s.io/nfd/node-feature-discovery:v0.18.3"] == both
    assert got["nvcr.io/nvidia/k8s/container-toolkit:v1.19.1"] == both
    assert got["nvcr.io/nvidia/k8s-device-plugin:v0.19.2"] == both
    # The Spark keeps its own driver: the driver image (tagged for the hosts that run it) is amd64 only.
    assert got["nvcr.io/nvidia/driver:580.126.20-ubuntu24.04"] == amd64
    assert got["nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.5.0"] == amd64
    text = ip.images_txt([("GPU Operator", ip.with_mirror(images, "registry.site:5000"))], "registry.site:5000")
    assert "nvcr.io/nvidia/k8s-device-plugin:v0.19.2 -> registry.site:5000/nvidia/k8s-device-plugin:v0.19.2  # " \
           "device-plugin, mps-control-daemon, gpu-feature-discovery [linux/amd64, linux/arm64]" in text


def test_driver_tag_follows_the_os_of_the_hosts_that_run_it():
    effective = effective_values({})
    # A DGX Spark whose driver the operator runs: DGX OS tags it ubuntu24.04, arm64.
    spark = {"name": SPARK, "workload_config": "container", "os_tag": "ubuntu24.04", "arch": "arm64"}
    old = {"name": "gpu-old", "workload_config": "container", "os_tag": "ubuntu22.04", "arch": "amd64"}
    images = dict((i["source"], i["platforms"]) for i in ip.plan_images(effective, "v26.3.2", [spark, old], [], [],
                                                                        "0.18.3")[0])
    assert images["nvcr.io/nvidia/driver:580.126.20-ubuntu24.04"] == ["linux/arm64"]
    assert images["nvcr.io/nvidia/driver:580.126.20-ubuntu22.04"] == ["linux/amd64"]
    # Its manager is one image for both.
    assert images["nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.11.0"] == ["linux/amd64", "linux/arm64"]
