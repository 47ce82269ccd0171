"""module_utils/image_plan: the images the operator will run, the mirror, the escape check.
The chart defaults are the real v26.3.2 values.yaml (the role's copy under
roles/gpu_operator/files)."""
import os

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan as ip
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from tests.conftest import ROOT

# The chart's v26.3.2 values.yaml as the role ships it (upstream's file under a comment header).
REFERENCE_VALUES = os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v26.3.2-values.yaml")
MIRROR = "registry.site.example:5000"

# What the v26.3.2 values.yaml enables on container nodes, read off the file by hand:
# operator (version: appVersion), NFD subchart 0.18.3, driver 580.126.20 with its
# k8s-driver-manager, toolkit, device plugin (gfd and the MPS control daemon share its
# image), dcgm-exporter, MIG manager; the validator runs the operator's image. dcgm and
# nodeStatusExporter are off.
CONTAINER_DEFAULTS = [
    ("nvcr.io/nvidia/gpu-operator:v26.3.2", ["operator", "operator-validator"]),
    ("registry.k8s.io/nfd/node-feature-discovery:v0.18.3", ["node-feature-discovery"]),
    ("nvcr.io/nvidia/driver:580.126.20-ubuntu22.04", ["driver"]),
    ("nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.11.0", ["driver"]),
    ("nvcr.io/nvidia/k8s/container-toolkit:v1.19.1", ["container-toolkit"]),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.19.2", ["device-plugin", "mps-control-daemon", "gpu-feature-discovery"]),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless", ["dcgm-exporter"]),
    ("nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.14.2", ["mig-manager"]),
]


@pytest.fixture(scope="module")
def defaults():
    with open(REFERENCE_VALUES) as handle:
        return yaml.safe_load(handle)


def plan(defaults, values=None, nodes=(), os_tags=("ubuntu22.04",), kernels=(), nfd_version="0.18.3"):
    effective = ov.effective_values(defaults, values or {})
    return ip.plan_images(effective, "v26.3.2", list(nodes), list(os_tags), list(kernels), nfd_version)


def sources(images):
    return [(i["source"], i["components"]) for i in images]


@pytest.mark.parametrize("ref, parts", [
    ("nvcr.io/nvidia/driver:580-ubuntu22.04", ("nvcr.io", "nvidia/driver", "580-ubuntu22.04", None)),
    ("registry.local:5000/a/b@sha256:abc", ("registry.local:5000", "a/b", None, "sha256:abc")),
    ("rancher/rke2-runtime:v1.33.5-rke2r1", ("docker.io", "rancher/rke2-runtime", "v1.33.5-rke2r1", None)),
    ("busybox", ("docker.io", "library/busybox", None, None)),
    ("localhost/img:1", ("localhost", "img", "1", None)),
])
def test_split_reference(ref, parts):
    assert ip.split_reference(ref) == parts


def test_mirror_reference_keeps_the_path_under_the_mirror():
    assert ip.mirror_reference("nvcr.io/nvidia/driver:580-ubuntu22.04", MIRROR) == \
        MIRROR + "/nvidia/driver:580-ubuntu22.04"
    assert ip.mirror_reference("docker.io/rancher/rke2-runtime:v1", "harbor.site/rke2/") == \
        "harbor.site/rke2/rancher/rke2-runtime:v1"
    assert ip.mirror_reference(MIRROR + "/nvidia/x:1", MIRROR) == MIRROR + "/nvidia/x:1"
    assert not ip.within("registry.site.example:50001/x", MIRROR)


@pytest.mark.parametrize("block, kwargs, ref", [
    ({"repository": "nvcr.io/nvidia", "image": "gpu-operator"}, {"app_version": "v26.3.2"},
     "nvcr.io/nvidia/gpu-operator:v26.3.2"),
    ({"repository": "nvcr.io/nvidia", "image": "driver", "version": "sha256:ab12"}, {"os_tag": "ubuntu22.04"},
     "nvcr.io/nvidia/driver@sha256:ab12"),
    ({"repository": "nvcr.io/nvidia", "image": "driver", "version": "580"},
     {"os_tag": "ubuntu22.04", "kernel": "5.15.0-1056-azure"}, "nvcr.io/nvidia/driver:580-5.15.0-1056-azure-ubuntu22.04"),
    ({"repository": "", "image": "quay.io/x/driver@sha256:1"}, {}, "quay.io/x/driver@sha256:1"),
    ({"repository": "", "image": "vgpu-manager", "version": ""}, {}, None),
    ({"repository": "nvcr.io/nvidia", "image": "k8s-device-plugin"}, {}, None),
])
def test_block_reference_follows_the_operator(block, kwargs, ref):
    assert ip.block_reference(block, **kwargs) == ref


def test_v26_3_2_defaults_plan_matches_what_the_values_enable(defaults):
    images, problems = plan(defaults, nodes=[{"name": "gpu-1", "workload_config": "container"}])
    assert problems == []
    assert sources(images) == CONTAINER_DEFAULTS


def test_driver_disabled_drops_the_driver_and_its_manager(defaults):
    images, problems = plan(defaults, {"driver": {"enabled": False}}, os_tags=())
    assert problems == []
    assert sources(images) == [entry for entry in CONTAINER_DEFAULTS if entry[1] != ["driver"]]


def test_driver_image_per_node_os_and_precompiled_per_kernel(defaults):
    nodes = [{"name": "a", "workload_config": "container", "os_tag": "ubuntu24.04", "kernel": "6.8.0-50-generic"},
             {"name": "b", "workload_config": "container", "os_tag": "ubuntu22.04", "kernel": "5.15.0-127-generic"}]
    images, problems = plan(defaults, nodes=nodes, os_tags=())
    assert [s for s, c in sources(images) if s.startswith("nvcr.io/nvidia/driver:")] == [
        "nvcr.io/nvidia/driver:580.126.20-ubuntu24.04", "nvcr.io/nvidia/driver:580.126.20-ubuntu22.04"]
    images, problems = plan(defaults, {"driver": {"usePrecompiled": True, "version": "580"}}, nodes=nodes, os_tags=())
    assert problems == []
    assert [s for s, c in sources(images) if s.startswith("nvcr.io/nvidia/driver:")] == [
        "nvcr.io/nvidia/driver:580-6.8.0-50-generic-ubuntu24.04",
        "nvcr.io/nvidia/driver:580-5.15.0-127-generic-ubuntu22.04"]


def test_missing_os_and_kernel_are_plan_problems_naming_the_key(defaults):
    images, problems = plan(defaults, os_tags=())
    assert problems == ["driver_os_tags: the driver image is tagged per OS (<version>-<os>, for example "
                        "ubuntu22.04); give the GPU nodes' OS (gpu_os_tag on each host or driver_os_tags)"]
    images, problems = plan(defaults, {"driver": {"usePrecompiled": True, "version": "580"}})
    assert problems == ["driver_kernels: driver uses precompiled images, tagged <branch>-<kernel>-<os>; give the GPU "
                        "nodes' kernels (gpu_kernel_version on each host or driver_kernels)"]


def test_sandbox_on_adds_the_vm_operands_of_the_configs_present(defaults):
    values = {"sandboxWorkloads": {"enabled": True},
              "vgpuManager": {"enabled": True, "repository": "registry.site.example:5000/nvidia", "version": "580.126.20"}}
    nodes = [{"name": "p", "workload_config": "vm-passthrough"},
             {"name": "v", "workload_config": "vm-vgpu", "os_tag": "ubuntu22.04"}]
    images, problems = plan(defaults, values, nodes=nodes, os_tags=())
    assert problems == []
    assert sources(images) == [
        ("nvcr.io/nvidia/gpu-operator:v26.3.2", ["operator", "sandbox-validator"]),
        ("registry.k8s.io/nfd/node-feature-discovery:v0.18.3", ["node-feature-discovery"]),
        ("registry.site.example:5000/nvidia/vgpu-manager:580.126.20-ubuntu22.04", ["vgpu-manager"]),
        ("nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.11.0", ["vgpu-manager", "vfio-manager"]),
        ("nvcr.io/nvidia/cloud-native/vgpu-device-manager:v0.4.2", ["vgpu-device-manager"]),
        ("nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.5.0", ["sandbox-device-plugin"]),
    ]
    # cc-manager runs only in kata mode (isStateEnabled), whatever ccManager.enabled says.
    assert not any("k8s-cc-manager" in s for s, c in sources(images))


def test_sandbox_on_with_container_nodes_keeps_the_container_operands(defaults):
    values = {"sandboxWorkloads": {"enabled": True}}
    nodes = [{"name": "c", "workload_config": "container"}, {"name": "p", "workload_config": "vm-passthrough"}]
    images, problems = plan(defaults, values, nodes=nodes)
    assert problems == []
    found = [s for s, c in sources(images)]
    assert [s for s, c in CONTAINER_DEFAULTS] == [s for s in found if s in dict(CONTAINER_DEFAULTS)]
    assert "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.5.0" in found
    assert not any("vgpu" in s for s in found)


def test_sandbox_off_treats_vm_labelled_nodes_as_container(defaults):
    images, _problems = plan(defaults, nodes=[{"name": "p", "workload_config": "vm-passthrough"}])
    assert sources(images) == CONTAINER_DEFAULTS


def test_kata_mode_uses_the_kata_device_plugin_on_passthrough_nodes(defaults):
    values = {"sandboxWorkloads": {"enabled": True, "mode": "kata", "defaultWorkload": "vm-passthrough"}}
    images, problems = plan(defaults, values)
    found = [s for s, c in sources(images)]
    assert "nvcr.io/nvidia/cloud-native/nvidia-sandbox-device-plugin:v0.0.3" in found
    assert "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.5.0" not in found


def test_kata_mode_gives_vgpu_nodes_no_device_plugin_and_every_vm_node_the_cc_manager(defaults):
    values = {"sandboxWorkloads": {"enabled": True, "mode": "kata"},
              "vgpuManager": {"enabled": True, "repository": "registry.site.example:5000/nvidia", "version": "580.126.20"}}
    vgpu_only = [{"name": "v", "workload_config": "vm-vgpu", "os_tag": "ubuntu22.04"}]
    images, problems = plan(defaults, values, nodes=vgpu_only, os_tags=())
    assert problems == []
    found = dict(sources(images))
    assert "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.5.0" not in found
    assert "nvcr.io/nvidia/cloud-native/nvidia-sandbox-device-plugin:v0.0.3" not in found
    assert found["nvcr.io/nvidia/cloud-native/k8s-cc-manager:v0.4.0"] == ["cc-manager"]
    both = vgpu_only + [{"name": "p", "workload_config": "vm-passthrough"}]
    found = dict(sources(plan(defaults, values, nodes=both, os_tags=())[0]))
    assert found["nvcr.io/nvidia/cloud-native/nvidia-sandbox-device-plugin:v0.0.3"] == ["kata-sandbox-device-plugin"]
    assert "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.5.0" not in found


def test_kata_device_plugin_switched_off_is_not_planned(defaults):
    values = {"sandboxWorkloads": {"enabled": True, "mode": "kata", "defaultWorkload": "vm-passthrough"},
              "kataSandboxDevicePlugin": {"enabled": False}}
    found = [s for s, c in sources(plan(defaults, values)[0])]
    assert not any("sandbox-device-plugin" in s or "kubevirt-gpu-device-plugin" in s for s in found)


def test_an_enabled_operand_without_an_image_is_a_plan_problem(defaults):
    values = {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "vm-passthrough"},
              "kataManager": {"enabled": True}}
    _images, problems = plan(defaults, values)
    assert problems == ["kataManager: kata-manager is enabled but its image is incomplete: set "
                        "kataManager.repository, kataManager.image, kataManager.version"]


def test_nfd_image_from_values_or_subchart_version(defaults):
    images, problems = plan(defaults, {"nfd": {"enabled": False}})
    assert "node-feature-discovery" not in [c for i in images for c in i["components"]]
    _images, problems = plan(defaults, nfd_version=None)
    assert problems == ["node-feature-discovery.image.tag: the NFD image's tag follows the NFD subchart's version, "
                        "which is not known for this chart version: give the chart archive (chart_archive) or set "
                        "node-feature-discovery.image.tag"]
    images, problems = plan(defaults, {"node-feature-discovery": {"image": {"tag": "v0.18.9"}}}, nfd_version=None)
    assert problems == [] and images[1]["source"] == "registry.k8s.io/nfd/node-feature-discovery:v0.18.9"


def test_mirror_rewrite_leaves_no_reference_outside_the_mirror(defaults):
    effective = ov.effective_values(defaults, {})
    before = ip.escaping_references(effective, MIRROR)
    assert "operator.repository: nvcr.io/nvidia/gpu-operator is outside the mirror %s" % MIRROR in before
    assert "node-feature-discovery.image.repository: registry.k8s.io/nfd/node-feature-discovery is outside the " \
           "mirror %s" % MIRROR in before
    overrides = ip.mirror_overrides(effective, MIRROR)
    assert overrides["driver"] == {"repository": MIRROR + "/nvidia", "manager": {
        "repository": MIRROR + "/nvidia/cloud-native"}}
    mirrored = ov.effective_values(defaults, overrides)
    assert ip.escaping_references(mirrored, MIRROR) == []
    # Every image block of the chart, enabled or not, now names the mirror.
    for path, block in ip.image_blocks(mirrored):
        assert not block["repository"] or block["repository"].startswith(MIRROR + "/"), path


def test_the_plan_on_mirrored_values_is_the_mirror_side_of_the_plan(defaults):
    values = {"sandboxWorkloads": {"enabled": True}}
    nodes = [{"name": "c", "workload_config": "container"}, {"name": "p", "workload_config": "vm-passthrough"}]
    images, _problems = plan(defaults, values, nodes=nodes)
    mirrored_values = ov.deep_merge(values, ip.mirror_overrides(ov.effective_values(defaults, values), MIRROR))
    mirrored, _problems = plan(defaults, mirrored_values, nodes=nodes)
    assert [i["mirror"] for i in ip.with_mirror(images, MIRROR)] == [i["source"] for i in mirrored]


def test_images_outside_image_blocks_are_caught(defaults):
    values = {"extraObjects": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                                "spec": {"containers": [{"name": "c", "image": "quay.io/team/tool:1"}]}}]}
    effective = ov.effective_values(defaults, values)
    mirrored = ov.effective_values(defaults, ov.deep_merge(values, ip.mirror_overrides(effective, MIRROR)))
    assert ip.escaping_references(mirrored, MIRROR) == [
        "extraObjects[0].spec.containers[0].image: quay.io/team/tool:1 is outside the mirror %s" % MIRROR]


def test_mirror_must_be_a_registry_reference():
    assert ip.mirror_problems("https://registry.site") == [
        "image_registry: 'https://registry.site' is not a registry host[:port][/path] (no scheme, no trailing "
        "slash, lower-case path)"]
    assert ip.mirror_problems("registry.site:5000/gpu") == []


def test_images_txt_and_image_lists():
    text = ip.images_txt([("GPU Operator", [{"source": "nvcr.io/nvidia/gpu-operator:v26.3.2",
                                             "components": ["operator"]}]),
                          ("RKE2", [{"source": "docker.io/rancher/rke2-runtime:v1.33.5-rke2r1"}])],
                         MIRROR, header="plan")
    assert text == ("# plan\n\n# GPU Operator\n"
                    "nvcr.io/nvidia/gpu-operator:v26.3.2 -> %s/nvidia/gpu-operator:v26.3.2  # operator\n\n# RKE2\n"
                    "docker.io/rancher/rke2-runtime:v1.33.5-rke2r1 -> %s/rancher/rke2-runtime:v1.33.5-rke2r1\n"
                    % (MIRROR, MIRROR))
    assert ip.parse_image_list("docker.io/rancher/a:1\n\n# c\ndocker.io/rancher/b:2  # x\ndocker.io/rancher/a:1\n") \
        == ["docker.io/rancher/a:1", "docker.io/rancher/b:2"]


@pytest.mark.parametrize("key, value", [("image", 5), ("repository", ["nvcr.io"]), ("version", True)])
def test_an_image_field_that_is_not_text_is_refused_naming_it(defaults, key, value):
    # A corrupted values file (the chart's or the overrides) once escaped as an AttributeError.
    with pytest.raises(ip.MalformedBlock) as refused:
        plan(defaults, {"toolkit": {key: value}})
    assert str(refused.value) == "toolkit.%s is %r, expected a string" % (key, value)


def test_a_numeric_version_is_read_as_text(defaults):
    assert "nvcr.io/nvidia/k8s/container-toolkit:1.5" in [source for source, _components in sources(
        plan(defaults, {"toolkit": {"version": 1.5}})[0])]
