"""KubeVirt's permitted host devices from the inventory: rendering, checks, ownership in
the KubeVirt CR, and the kubevirt_gpu_devices module against a fake API."""
import copy
import json

import pytest
from kubernetes.client.rest import ApiException

from ansible_collections.gpuplatform.rke2.plugins.module_utils import kubevirt as kv
from ansible_collections.gpuplatform.rke2.plugins.modules import kubevirt_gpu_devices as module
from tests.unit.node_labels_helpers import merge_patch, run_main

A10 = {"pci_vendor_selector": "10de:2236", "pci_device_name": "GA102GL [A10]", "memory_gb": 24}
MODELS = {"A10": A10}
NODES = [
    {"name": "gpu-container-1", "workload_config": "container"},
    {"name": "gpu-passthrough-1", "workload_config": "vm-passthrough"},
    {"name": "gpu-vgpu-1", "workload_config": "vm-vgpu", "vgpu_config": "A10-12Q"},
]
PASSTHROUGH = {"pciVendorSelector": "10DE:2236", "resourceName": "nvidia.com/GA102GL_A10",
               "externalResourceProvider": True}
VGPU = {"mdevNameSelector": "NVIDIA A10-12Q", "resourceName": "nvidia.com/NVIDIA_A10-12Q",
        "externalResourceProvider": True}
FOREIGN_PCI = {"pciVendorSelector": "8086:0D5C", "resourceName": "intel.com/qat", "externalResourceProvider": True}


def kubevirt_cr(devices=None, owned=None, version="v1.6.0", gates=None):
    annotations = {}
    if owned is not None:
        annotations[kv.OWNED_DEVICES_ANNOTATION] = json.dumps(owned)
    configuration = {"developerConfiguration": {"featureGates": list(gates or [])}}
    if devices is not None:
        configuration["permittedHostDevices"] = copy.deepcopy(devices)
    return {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt", "annotations": annotations},
            "spec": {"configuration": configuration},
            "status": {"observedKubeVirtVersion": version}}


# ---------------------------------------------------------------- rendering

def test_a10_passthrough_and_a10_12q_vgpu():
    assert kv.validate(MODELS, NODES) == []
    permitted = kv.permitted_host_devices(MODELS, NODES)
    assert permitted == {"pciHostDevices": [PASSTHROUGH], "mediatedDevices": [VGPU]}
    assert kv.rendered_patch(permitted) == {"spec": {"configuration": {"permittedHostDevices": permitted}}}


def test_example_vmis_ask_for_one_gpu_of_each_resource():
    vmis = kv.example_vmis(kv.permitted_host_devices(MODELS, NODES), "registry.site/containerdisks/ubuntu:24.04")
    assert [v["metadata"]["name"] for v in vmis] == ["gpu-example-ga102gl-a10", "gpu-example-nvidia-a10-12q"]
    assert [v["spec"]["domain"]["devices"]["gpus"] for v in vmis] == [
        [{"deviceName": "nvidia.com/GA102GL_A10", "name": "gpu1"}],
        [{"deviceName": "nvidia.com/NVIDIA_A10-12Q", "name": "gpu1"}],
    ]
    assert all(v["apiVersion"] == "kubevirt.io/v1" and v["kind"] == "VirtualMachineInstance" for v in vmis)
    assert vmis[0]["spec"]["volumes"] == [{"name": "containerdisk",
                                           "containerDisk": {"image": "registry.site/containerdisks/ubuntu:24.04"}}]


def test_only_the_workload_types_in_use_are_permitted():
    assert kv.permitted_host_devices(MODELS, NODES[:1]) == {"pciHostDevices": [], "mediatedDevices": []}
    assert kv.permitted_host_devices(MODELS, NODES[2:]) == {"pciHostDevices": [], "mediatedDevices": [VGPU]}
    nodes = NODES + [{"name": "v2", "workload_config": "vm-vgpu", "vgpu_config": "A10-4Q"},
                     {"name": "v3", "workload_config": "vm-vgpu", "vgpu_config": "A10-12Q"}]
    assert [e["mdevNameSelector"] for e in kv.permitted_host_devices(MODELS, nodes)["mediatedDevices"]] == [
        "NVIDIA A10-12Q", "NVIDIA A10-4Q"]


@pytest.mark.parametrize("models, nodes, expected", [
    ({"A10": dict(A10, pci_vendor_selector="10DE-2236")}, [], "gpu_models.A10.pci_vendor_selector is '10DE-2236'"),
    ({"A10": dict(A10, pci_device_name="")}, [], "gpu_models.A10.pci_device_name is ''"),
    ({"A10": dict(A10, memory_gb="24GB")}, [], "gpu_models.A10.memory_gb is '24GB'"),
    ({"A10": dict(A10, vendor="nvidia")}, [], "gpu_models.A10 has unknown keys: vendor"),
    ({"A10": A10}, [{"name": "v", "host": "gpu07", "workload_config": "vm-vgpu", "vgpu_config": "L4-12Q"}],
     "host gpu07: gpu_vgpu_config 'L4-12Q' names GPU model 'L4', which gpu_models does not declare (declared: A10)"),
    ({"A10": A10}, [{"name": "v", "workload_config": "vm-vgpu", "vgpu_config": "A10-48Q"}],
     "host v: gpu_vgpu_config 'A10-48Q' needs more frame buffer than the A10's 24 GB"),
    ({}, [{"name": "p", "workload_config": "vm-passthrough"}],
     "hosts p run vm-passthrough, but gpu_models declares no GPU model to permit in KubeVirt"),
])
def test_inventory_errors_name_the_key(models, nodes, expected):
    errors = kv.validate(models, nodes)
    assert len(errors) == 1 and expected in errors[0]


# ---------------------------------------------------------------- merging into the KubeVirt CR

def desired():
    return kv.permitted_host_devices(MODELS, NODES)


def test_merge_keeps_foreign_entries_and_owns_its_own():
    obj = kubevirt_cr({"pciHostDevices": [FOREIGN_PCI], "usb": [{"resourceName": "kubevirt.io/storage"}]})
    plan = kv.plan_devices(obj, desired())
    assert plan["refusals"] == []
    assert plan["devices"] == {"pciHostDevices": [FOREIGN_PCI, PASSTHROUGH], "mediatedDevices": [VGPU]}
    patch = kv.devices_patch(obj, plan)
    assert patch == {
        "spec": {"configuration": {"permittedHostDevices": {"pciHostDevices": [FOREIGN_PCI, PASSTHROUGH],
                                                            "mediatedDevices": [VGPU]}}},
        "metadata": {"annotations": {kv.OWNED_DEVICES_ANNOTATION:
                                     '["nvidia.com/GA102GL_A10","nvidia.com/NVIDIA_A10-12Q"]'}},
    }
    after = merge_patch(obj, patch)
    assert after["spec"]["configuration"]["permittedHostDevices"]["usb"] == [{"resourceName": "kubevirt.io/storage"}]
    assert after["spec"]["configuration"]["developerConfiguration"] == {"featureGates": []}
    second = kv.plan_devices(after, desired())
    assert second["changed"] is False
    assert kv.devices_patch(after, second) is None


def test_a_profile_no_longer_declared_is_removed_and_foreign_entries_stay():
    start = kubevirt_cr({"pciHostDevices": [FOREIGN_PCI]})
    obj = merge_patch(start, kv.devices_patch(start, kv.plan_devices(start, desired())))
    plan = kv.plan_devices(obj, kv.permitted_host_devices(MODELS, NODES[:2]))
    patch = kv.devices_patch(obj, plan)
    assert patch["spec"]["configuration"]["permittedHostDevices"] == {"mediatedDevices": None}
    after = merge_patch(obj, patch)
    assert after["spec"]["configuration"]["permittedHostDevices"] == {"pciHostDevices": [FOREIGN_PCI, PASSTHROUGH]}
    assert json.loads(after["metadata"]["annotations"][kv.OWNED_DEVICES_ANNOTATION]) == ["nvidia.com/GA102GL_A10"]


def test_an_equal_unowned_entry_is_adopted_and_a_different_one_refused():
    plan = kv.plan_devices(kubevirt_cr({"pciHostDevices": [PASSTHROUGH]}), desired())
    assert plan["refusals"] == [] and plan["owned"] == ["nvidia.com/GA102GL_A10", "nvidia.com/NVIDIA_A10-12Q"]
    other = dict(PASSTHROUGH, pciVendorSelector="10DE:1EB8")
    plan = kv.plan_devices(kubevirt_cr({"pciHostDevices": [other]}), desired())
    assert len(plan["refusals"]) == 1
    assert plan["refusals"][0].startswith("KubeVirt kubevirt/kubevirt: spec.configuration.permittedHostDevices."
                                          "pciHostDevices already has")
    assert "gpu_node_labels_adopt_existing: true" in plan["refusals"][0]
    plan = kv.plan_devices(kubevirt_cr({"pciHostDevices": [other]}), desired(), adopt_existing=True)
    assert plan["refusals"] == [] and plan["devices"]["pciHostDevices"] == [PASSTHROUGH]


def test_gpu_gate_warning_only_for_old_kubevirt_without_the_gate():
    assert kv.gpu_gate_warning(kubevirt_cr(version="v1.6.0")) is None
    assert kv.gpu_gate_warning(kubevirt_cr(version="v1.4.2", gates=["GPU"])) is None
    assert "lack GPU" in kv.gpu_gate_warning(kubevirt_cr(version="v1.4.2", gates=["HostDevices"]))


# ---------------------------------------------------------------- the module

class FakeCustom(object):
    def __init__(self, items=None, crd=True):
        self.items = [copy.deepcopy(i) for i in items or []]
        self.crd = crd
        self.patches = []
        self.lists = 0

    def list_cluster_custom_object(self, group, version, plural):
        assert (group, version, plural) == kv.KUBEVIRT_API
        self.lists += 1
        if not self.crd:
            raise ApiException(status=404, reason="Not Found")
        return {"items": copy.deepcopy(self.items)}

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body, _content_type=None):
        assert _content_type == "application/merge-patch+json"
        self.patches.append(copy.deepcopy(body))
        for i, item in enumerate(self.items):
            if (item["metadata"]["namespace"], item["metadata"]["name"]) == (namespace, name):
                self.items[i] = merge_patch(item, body)
                return self.items[i]
        raise ApiException(status=404, reason="Not Found")


@pytest.fixture
def call(capsys, monkeypatch):
    def run(args, custom=None, check=False, diff=False):
        args = dict({"gpu_models": MODELS, "nodes": NODES}, **args)
        fake = None if custom is None else (lambda: custom)
        return run_main(module, "_custom_factory", fake, args, capsys, monkeypatch, check, diff)
    return run


def test_module_renders_without_kubevirt(call):
    result = call({}, FakeCustom(crd=False))
    assert result["changed"] is False and result["kubevirt"] is None
    assert result["permitted_host_devices"] == {"pciHostDevices": [PASSTHROUGH], "mediatedDevices": [VGPU]}
    assert len(result["rendered"]["example_vmis"]) == 2


def test_module_never_contacts_the_cluster_with_apply_never(call):
    result = call({"apply": "never"})
    assert result["changed"] is False and result["rendered"]["permitted_host_devices"]


def test_module_requires_kubevirt_when_told(call):
    result = call({"apply": "required"}, FakeCustom())
    assert result["failed"] is True and "no KubeVirt CR" in result["msg"]


def test_module_merges_into_kubevirt_once(call):
    custom = FakeCustom([kubevirt_cr({"pciHostDevices": [FOREIGN_PCI]})])
    first = call({}, custom, diff=True)
    assert first["changed"] is True and first["kubevirt"] == {"name": "kubevirt", "namespace": "kubevirt"}
    assert first["diff"]["after"] == {"pciHostDevices": [FOREIGN_PCI, PASSTHROUGH], "mediatedDevices": [VGPU]}
    assert len(custom.patches) == 1
    second = call({}, custom)
    assert second["changed"] is False and len(custom.patches) == 1


def test_module_check_mode_patches_nothing(call):
    custom = FakeCustom([kubevirt_cr()])
    result = call({}, custom, check=True)
    assert result["changed"] is True and custom.patches == []


def test_module_refusals_patch_nothing(call):
    custom = FakeCustom([kubevirt_cr({"pciHostDevices": [dict(PASSTHROUGH, pciVendorSelector="10DE:1EB8")]})])
    result = call({}, custom)
    assert result["failed"] is True and "already has" in result["msg"] and custom.patches == []
    result = call({"gpu_models": {"A10": dict(A10, memory_gb=0)}}, custom)
    assert result["failed"] is True and "gpu_models.A10.memory_gb is 0" in result["msg"]
    assert custom.patches == [] and custom.lists == 1


def test_module_asks_which_kubevirt_when_there_are_two(call):
    second = kubevirt_cr()
    second["metadata"]["namespace"] = "kubevirt-2"
    custom = FakeCustom([kubevirt_cr(), second])
    result = call({}, custom)
    assert result["failed"] is True and "2 KubeVirt CRs match" in result["msg"]
    result = call({"kubevirt_name": "kubevirt", "kubevirt_namespace": "kubevirt-2"}, custom)
    assert result["kubevirt"] == {"name": "kubevirt", "namespace": "kubevirt-2"}


def test_passthrough_permits_the_models_of_the_passthrough_hosts():
    models = dict(MODELS, L4={"pci_vendor_selector": "10DE:27B8", "pci_device_name": "AD104GL [L4]", "memory_gb": 24})
    nodes = [{"name": "p1", "workload_config": "vm-passthrough", "gpu_model": "A10"},
             {"name": "c1", "workload_config": "container", "gpu_model": "L4"}]
    assert kv.validate(models, nodes) == []
    assert kv.permitted_host_devices(models, nodes)["pciHostDevices"] == [PASSTHROUGH]
    nodes.append({"name": "p2", "workload_config": "vm-passthrough"})
    assert [e["resourceName"] for e in kv.permitted_host_devices(models, nodes)["pciHostDevices"]] == [
        "nvidia.com/GA102GL_A10", "nvidia.com/AD104GL_L4"]


def test_host_gpu_model_must_be_declared_and_match_its_profile():
    assert kv.validate(MODELS, [{"name": "x", "gpu_model": "H100"}]) == [
        "host x: gpu_model 'H100' is not declared in gpu_models (declared: A10)"]
    models = dict(MODELS, L4={"pci_vendor_selector": "10DE:27B8", "pci_device_name": "AD104GL [L4]", "memory_gb": 24})
    assert kv.validate(models, [{"name": "v", "workload_config": "vm-vgpu", "gpu_model": "L4",
                                 "vgpu_config": "A10-12Q"}]) == [
        "host v: gpu_vgpu_config 'A10-12Q' is a profile of A10, but the host's gpu_model is L4"]


def test_malformed_ownership_annotation_names_the_kubevirt_cr():
    obj = kubevirt_cr()
    obj["metadata"]["annotations"][kv.OWNED_DEVICES_ANNOTATION] = "nvidia.com/GA102GL_A10"
    with pytest.raises(ValueError, match="KubeVirt kubevirt/kubevirt: annotation gpuplatform.rke2/owned-host-devices"):
        kv.plan_devices(obj, desired())


# ---------------------------------------------------------------- issue 15: names and vGPU configs

GH200 = {"pci_vendor_selector": "10DE:2342", "pci_device_name": "GH100 [GH200 120GB / 480GB]", "memory_gb": 96}
A800 = {"pci_vendor_selector": "10DE:20F5", "pci_device_name": "GA100 [A800-SXM4-80GB]", "memory_gb": 80}
# The vGPU device manager's configs (parsed vgpu-configs of its ConfigMap): a profile-named
# config, the default config with a per-card entry, and a custom name.
VGPU_CONFIGS = {
    "A10-12Q": [{"devices": "all", "vgpu-devices": {"A10-12Q": 2}}],
    "default": [{"device-filter": "0x223610DE", "devices": "all", "vgpu-devices": {"A10-4Q": 6}},
                {"device-filter": "0x1DB110DE", "devices": "all", "vgpu-devices": {"V100X-8Q": 2}}],
    "inference": [{"devices": "all", "vgpu-devices": {"A10-6Q": 4}}],
}


def test_passthrough_resource_names_are_get_device_names():
    models = {"GH200": GH200, "A800": A800, "A10": A10}
    nodes = [{"name": "p%d" % i, "workload_config": "vm-passthrough", "gpu_model": m}
             for i, m in enumerate(("GH200", "A800", "A10"))]
    assert kv.validate(models, nodes) == []
    assert [(e["pciVendorSelector"], e["resourceName"]) for e in kv.permitted_host_devices(models, nodes)[
        "pciHostDevices"]] == [("10DE:2236", "nvidia.com/GA102GL_A10"), ("10DE:20F5", "nvidia.com/GA100_A800SXM480GB"),
                               ("10DE:2342", "nvidia.com/GH100_GH200_120GB___480GB")]


def test_a_vgpu_config_name_is_resolved_through_the_device_managers_configmap():
    nodes = [{"name": "v1", "workload_config": "vm-vgpu", "gpu_model": "A10", "vgpu_config": "inference"},
             {"name": "v2", "workload_config": "vm-vgpu", "gpu_model": "A10", "vgpu_config": "default"},
             {"name": "v3", "workload_config": "vm-vgpu", "gpu_model": "A10", "vgpu_config": "A10-12Q"}]
    assert kv.validate(MODELS, nodes, VGPU_CONFIGS) == []
    mediated = kv.permitted_host_devices(MODELS, nodes, VGPU_CONFIGS)["mediatedDevices"]
    # default picks the A10's entry (its PCI id), not the V100's.
    assert [(e["mdevNameSelector"], e["resourceName"]) for e in mediated] == [
        ("NVIDIA A10-12Q", "nvidia.com/NVIDIA_A10-12Q"), ("NVIDIA A10-4Q", "nvidia.com/NVIDIA_A10-4Q"),
        ("NVIDIA A10-6Q", "nvidia.com/NVIDIA_A10-6Q")]


def test_a_vgpu_config_the_configmap_lacks_is_refused_naming_the_configmap():
    nodes = [{"name": "v", "host": "gpu07", "workload_config": "vm-vgpu", "gpu_model": "A10", "vgpu_config": "A10-8Q"}]
    (error,) = kv.validate(MODELS, nodes, VGPU_CONFIGS, configmap="gpu-operator/site-vgpu-configs")
    assert error.startswith("host gpu07: gpu_vgpu_config 'A10-8Q': nvidia.com/vgpu.config=A10-8Q: the vGPU device "
                            "manager's ConfigMap gpu-operator/site-vgpu-configs has no config 'A10-8Q'")
    assert kv.permitted_host_devices(MODELS, nodes, VGPU_CONFIGS)["mediatedDevices"] == []
    # A config without an entry for the host's card creates nothing there.
    v100_only = {"v100": [{"device-filter": "0x1DB110DE", "devices": "all", "vgpu-devices": {"V100X-8Q": 2}}]}
    nodes[0]["vgpu_config"] = "v100"
    assert kv.validate(MODELS, nodes, v100_only) == [
        "host gpu07: gpu_vgpu_config 'v100': config 'v100' of ConfigMap default-vgpu-devices-config creates no "
        "vGPU device on the A10 (10de:2236)"]


def test_a_config_name_without_the_configmap_cannot_be_permitted_but_a_profile_can():
    nodes = [{"name": "v", "workload_config": "vm-vgpu", "vgpu_config": "inference"}]
    (error,) = kv.validate(MODELS, nodes)
    assert "not a vGPU profile (like A10-12Q) but a config name of the vGPU device manager's ConfigMap " \
           "default-vgpu-devices-config, which is not known here" in error
    assert kv.permitted_host_devices(MODELS, nodes)["mediatedDevices"] == []
    assert kv.validate(MODELS, NODES) == [] and kv.permitted_host_devices(MODELS, NODES)["mediatedDevices"] == [VGPU]


def test_a_mig_backed_profile_is_of_its_board():
    assert kv.profile_model("A100-1-5C") == "A100" and kv.profile_model("A10-12Q") == "A10"
