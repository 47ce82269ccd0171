"""Issue 34: the chart versions the collection knows (v26.3.2, v26.3.3, v26.7.0), each with its own values.yaml
(its key check), image plan and known issues; a version it does not know is refused naming these; the choices
v26.7.0 makes for a site are made on purpose; the example site renders for each version."""
import os
import subprocess

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan as ip
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from tests.conftest import ROOT
from tests.unit.test_gpu_operator_chart import run

FILES = os.path.join(ROOT, "roles", "gpu_operator", "files")
SITE = "tirosh-home"
SITE_FILE = os.path.join(ROOT, "sites", SITE, "site.yml")
MIRROR = "registry.tirosh-home.example:5000"
NODES = [{"name": "gpu-1", "workload_config": "container", "os_tag": "ubuntu24.04"}]

# Each version's images for the example site, read off its chart (deployments/gpu-operator/values.yaml and the
# node-feature-discovery dependency of Chart.yaml) in shared/upstream/gpu-operator-<version>.tar.gz.
IMAGES = {
    "v26.3.2": {"nfd": "v0.18.3", "driver": "580.126.20", "toolkit": "v1.19.1", "device-plugin": "v0.19.2",
                "dcgm-exporter": "4.5.3-4.8.2-distroless", "mig-manager": "v0.14.2"},
    "v26.3.3": {"nfd": "v0.18.3", "driver": "580.126.20", "toolkit": "v1.19.1", "device-plugin": "v0.19.3",
                "dcgm-exporter": "4.5.3-4.8.2-distroless", "mig-manager": "v0.14.2"},
    "v26.7.0": {"nfd": "v0.19.0", "driver": "595.91.07", "toolkit": "v1.20.0", "device-plugin": "v0.20.0",
                "dcgm-exporter": "4.6.0-4.8.3-distroless", "mig-manager": "v0.15.0"},
}


def values_file(version):
    return os.path.join(FILES, "gpu-operator-%s-values.yaml" % version)


def reference(version):
    with open(values_file(version)) as handle:
        return yaml.safe_load(handle)


def paths(values, prefix=""):
    for key, value in values.items():
        yield prefix + key
        if isinstance(value, dict) and value:
            yield from paths(value, prefix + key + ".")


def outermost(keys):
    """The keys that do not lie below another of them."""
    return set(k for k in keys if not any(k.startswith(other + ".") for other in keys))


def problems(version, **extra):
    decisions = dict(ov.default_decisions(), chart_version=version, **extra)
    found = ov.decision_problems(decisions)
    values = ov.render_values(decisions)
    return found + ov.values_problems(values, decisions, reference(version))


# ---------------------------------------------------------------- the versions and their values files

def test_every_known_version_ships_its_values_file_and_nfd_version():
    assert ov.KNOWN_CHART_VERSIONS == ("v26.3.2", "v26.3.3", "v26.7.0")
    for version in ov.KNOWN_CHART_VERSIONS:
        with open(values_file(version)) as handle:
            header = handle.read().split("\n\n", 1)[0]
        assert "chart %s\n" % version in header and "at tag %s" % version in header, header
        assert ip.NFD_CHART_VERSIONS[version] == IMAGES[version]["nfd"][1:]
        assert ov.version_problems(version) == []


@pytest.mark.parametrize("version", ["v26.3.0", "v26.3.4", "v26.7.1", "v26.8.0", "v27.1.0"])
def test_a_version_the_collection_does_not_know_is_refused_naming_the_ones_it_knows(version):
    found = ov.version_problems(version)
    assert len(found) == 1 and found[0].startswith("chart_version: %s is not " % version)
    assert "v26.3.2, v26.3.3, v26.7.0" in found[0]


def test_the_versioned_keys_are_what_the_values_files_differ_in():
    """VERSIONED_KEYS, checked against the shipped files: what v26.7.0's values.yaml adds (and the keys its
    templates read that it only shows commented out); no v26.3.x key is gone from it."""
    new = set(paths(reference("v26.7.0")))
    for old_version in ("v26.3.2", "v26.3.3"):
        old = set(paths(reference(old_version)))
        assert old - new == set()
        added = outermost(new - old) | set(ov.CHART_KEYS_OUTSIDE_VALUES_BY_LINE[(26, 7)])
        assert added == set(ov.VERSIONED_KEYS)
    assert set(v for versions in ov.VERSIONED_KEYS.values() for v in versions) == {"v26.7.0"}


@pytest.mark.parametrize("key", sorted(ov.VERSIONED_KEYS))
def test_a_v26_7_key_is_refused_on_v26_3_naming_the_key_and_the_versions(key):
    for version in ("v26.3.2", "v26.3.3"):
        assert problems(version, extra_values=ov.nested(key, "x")) == [
            "%s: a value of chart v26.7.0, not of chart %s (chart_version): its values.yaml has no %s"
            % (key, version, key)]


def test_a_key_below_a_v26_7_key_is_named_by_that_key():
    assert problems("v26.3.3", extra_values={"draDriver": {"version": "v0.5.0"}}) == [
        "draDriver: a value of chart v26.7.0, not of chart v26.3.3 (chart_version): its values.yaml has no draDriver"]


def test_v26_7_keys_are_accepted_on_v26_7():
    extra = {"operator": {"env": [{"name": "A", "value": "b"}], "nodeSelector": {"kubernetes.io/os": "linux"},
                          "metrics": {"serviceMonitor": {"interval": "30s"}}},
             "hostPaths": {"kubeletRootDir": "/var/lib/kubelet"},
             "dcgmExporter": {"serviceMonitor": {"scrapeTimeout": "5s"}},
             "draDriver": {"featureGates": {"MPSSupport": True}}}
    assert problems("v26.7.0", extra_values=extra) == []


@pytest.mark.parametrize("extra, key", [
    ({"operator": {"initContainer": {"repository": "nvcr.io/nvidia"}}}, "operator.initContainer"),
    ({"cdi": {"default": True}}, "cdi.default"),
    ({"driver": {"nvidiaDriverCRD": {"nodeSelector": {"pool": "a"}}}}, "driver.nvidiaDriverCRD.nodeSelector"),
])
def test_keys_v26_7_ignores_are_refused_there(extra, key):
    found = problems("v26.7.0", extra_values=extra)
    assert len(found) == 1 and found[0].startswith("%s: chart v26.7.0 ignores it: " % key), found
    if key == "driver.nvidiaDriverCRD.nodeSelector":
        assert problems("v26.3.3", extra_values=extra) == []  # v26.3.x's default NVIDIADriver takes it


# ---------------------------------------------------------------- v26.7.0's choices, made on purpose

def test_v26_7_renders_the_service_monitor_and_the_gpu_cluster_off():
    values = ov.render_values(dict(ov.default_decisions(), chart_version="v26.7.0"))
    assert values["dcgmExporter"] == {"serviceMonitor": {"enabled": False}}
    assert values["gpuCluster"] == {"deployCR": False}
    assert reference("v26.7.0")["dcgmExporter"]["serviceMonitor"]["enabled"] is True  # the chart's own default
    for version in ("v26.3.2", "v26.3.3"):
        values = ov.render_values(dict(ov.default_decisions(), chart_version=version))
        assert "dcgmExporter" not in values and "gpuCluster" not in values
    asked = ov.render_values(dict(ov.default_decisions(), chart_version="v26.7.0",
                                  extra_values={"dcgmExporter": {"serviceMonitor": {"enabled": True}}}))
    assert asked["dcgmExporter"]["serviceMonitor"]["enabled"] is True


def test_a_gpu_cluster_beside_a_cluster_policy_is_refused():
    found = problems("v26.7.0", extra_values={"gpuCluster": {"deployCR": True}})
    assert found[0].startswith("gpuCluster.deployCR: true beside clusterPolicy.deployCR: true (true unless set): "
                               "the GPUCluster (DRA) stack cannot run beside a ClusterPolicy")
    assert found[1].startswith("gpuCluster.deployCR: the GPUCluster stack runs the driver through the NVIDIADriver "
                               "CRD: set driver.nvidiaDriverCRD.enabled: true")
    assert len(found) == 2
    dra = {"gpuCluster": {"deployCR": True}, "clusterPolicy": {"deployCR": False},
           "driver": {"nvidiaDriverCRD": {"enabled": True}}}
    assert problems("v26.7.0", extra_values=dra) == []


def test_a_gpu_cluster_plans_the_dra_driver_and_only_what_it_runs():
    effective = ov.effective_values(reference("v26.7.0"), {"gpuCluster": {"deployCR": True},
                                                           "clusterPolicy": {"deployCR": False}})
    images, plan_problems = ip.plan_images(effective, "v26.7.0", NODES, nfd_version="0.19.0")
    components = dict((c, i["source"]) for i in images for c in i["components"])
    assert plan_problems == []
    assert components["dra-driver"] == "nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0"
    assert components["dra-validation"] == "nvcr.io/nvidia/gpu-operator:v26.7.0"
    assert set(components) == {"operator", "node-feature-discovery", "dra-driver", "dra-validation", "driver",
                               "dcgm-exporter"}
    default = ip.plan_images(ov.effective_values(reference("v26.7.0"), {}), "v26.7.0", NODES, nfd_version="0.19.0")
    assert "dra-driver" not in [c for i in default[0] for c in i["components"]]


def test_nri_without_the_toolkit_is_refused_by_the_collection_on_v26_7_first():
    nri = dict(nri_plugin_enabled=True, toolkit_enabled=False)
    assert problems("v26.7.0", **nri) == [
        'cdi.nriPluginEnabled: chart v26.7.0 refuses the NRI plugin with toolkit.enabled: false ("the NRI Plugin '
        'cannot be enabled when the Container Toolkit is disabled"): keep the toolkit on (with NRI it leaves '
        "containerd's config alone) or turn the NRI plugin off"]
    assert problems("v26.3.3", **nri) == []  # v26.3's validations.yaml has no such rule
    assert problems("v26.7.0", nri_plugin_enabled=True) == []


def test_a_device_plugin_config_to_create_needs_its_name_and_data_on_v26_7():
    extra = {"devicePlugin": {"config": {"create": True, "name": "", "data": {}}}}
    assert problems("v26.7.0", extra_values=extra) == [
        "devicePlugin.config.name: chart v26.7.0 refuses devicePlugin.config.create: true with an empty name",
        "devicePlugin.config.data: chart v26.7.0 refuses devicePlugin.config.create: true with an empty data"]
    assert problems("v26.7.0", time_slicing={"replicas": 2}) == []


@pytest.mark.parametrize("os_tag, version, tag", [
    ("rhel9.4", "v26.7.0", "rhel9"), ("rocky9.4", "v26.7.0", "rocky9"), ("ol9.4", "v26.7.0", "ol9"),
    ("ubuntu24.04", "v26.7.0", "ubuntu24.04"), ("rhel9.4", "v26.3.2", "rhel9.4"), ("rhel10.1", "v26.3.3", "rhel10"),
    ("rocky9.4", "v26.3.3", "rocky9"), ("ol9.4", "v26.3.3", "ol9.4"), ("rhel9.4", "v25.10.1", "rhel9.4"),
])
def test_driver_images_carry_the_os_as_the_versions_operator_tags_it(os_tag, version, tag):
    assert ip.image_os_tag(os_tag, version) == tag
    effective = ov.effective_values(reference("v26.7.0" if version == "v26.7.0" else "v26.3.3"), {})
    images = ip.plan_images(effective, version, [dict(NODES[0], os_tag=os_tag)], nfd_version="0.19.0")[0]
    assert [i["source"].rsplit("-", 1)[1] for i in images if i["values_keys"] == ["driver"]] == [tag]


# ---------------------------------------------------------------- known issues

@pytest.mark.parametrize("version", ov.KNOWN_CHART_VERSIONS)
def test_the_module_warns_once_about_the_known_issues_of_the_version(capsys, version):
    rc, result = run(capsys, chart_version=version, chart_values_reference=values_file(version))
    assert rc == 0, result
    warned = [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]
    warned = [w for w in warned if "known issue" in w]
    if version == "v26.3.2":
        assert len(warned) == 1, warned
        assert warned[0].startswith("GPU Operator v26.3.2, known issue of its device plugin v0.19.2: it injects "
                                    "every InfiniBand device (/dev/infiniband/uverbs*) into every GPU container")
        assert "Fixed in v26.3.3 (set chart_version: v26.3.3)" in warned[0]
        assert "https://github.com/NVIDIA/k8s-device-plugin/issues/1692" in warned[0]
    else:
        assert warned == []


def test_every_known_issue_names_known_versions_and_its_source():
    for issue in ov.KNOWN_ISSUES:
        assert set(issue["versions"]) <= set(ov.KNOWN_CHART_VERSIONS) and issue["fixed_in"] in ov.KNOWN_CHART_VERSIONS
        assert issue["source"].startswith("https://github.com/NVIDIA/")


# ---------------------------------------------------------------- the example site, rendered for each version

def render_site(root, version):
    """``make site/render SITE=tirosh-home`` on a copy of the example site with ``gpu_operator.chart_version``."""
    os.makedirs(os.path.join(root, "sites", SITE))
    with open(SITE_FILE) as handle:
        text = handle.read()
    assert "\ngpu_operator:\n" in text
    if version != ov.DEFAULT_CHART_VERSION:
        text = text.replace("\ngpu_operator:\n", "\ngpu_operator:\n  chart_version: %s\n" % version, 1)
    with open(os.path.join(root, "sites", SITE, "site.yml"), "w") as handle:
        handle.write(text)
    proc = subprocess.run(["make", "-s", "site/render", "SITE=%s" % SITE, "SITE_ROOT=%s" % root], cwd=ROOT,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1"), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return proc.stdout


def read(root, path):
    with open(os.path.join(root, "sites", SITE, path)) as handle:
        return handle.read()


@pytest.mark.parametrize("version", ov.KNOWN_CHART_VERSIONS)
def test_the_example_site_renders_for_each_version_with_its_images(tmp_path, version):
    root = str(tmp_path)
    output = render_site(root, version)
    plan = read(root, "airgap/images.txt")
    tags = IMAGES[version]
    for source in ("nvcr.io/nvidia/gpu-operator:%s" % version,
                   "registry.k8s.io/nfd/node-feature-discovery:%s" % tags["nfd"],
                   "nvcr.io/nvidia/driver:%s-ubuntu24.04" % tags["driver"],
                   "nvcr.io/nvidia/k8s/container-toolkit:%s" % tags["toolkit"],
                   "nvcr.io/nvidia/k8s-device-plugin:%s" % tags["device-plugin"],
                   "nvcr.io/nvidia/k8s/dcgm-exporter:%s" % tags["dcgm-exporter"],
                   "nvcr.io/nvidia/cloud-native/k8s-mig-manager:%s" % tags["mig-manager"]):
        assert "\n%s -> %s/" % (source, MIRROR) in plan, (source, plan)
    assert "# GPU Operator %s: images the values enable\n" % version in plan
    others = [v for v in ov.KNOWN_CHART_VERSIONS if v != version]
    assert not any("gpu-operator:%s" % other in plan for other in others)

    manifest = yaml.safe_load(read(root, "rke2/gpu-operator.helmchart.yaml").split("---\n", 1)[1])
    assert manifest["spec"]["version"] == version
    values = yaml.safe_load(manifest["spec"]["valuesContent"])
    assert ("gpuCluster" in values) == (version == "v26.7.0")
    if version == "v26.7.0":
        assert values["dcgmExporter"]["serviceMonitor"] == {"enabled": False}
        assert values["gpuCluster"] == {"deployCR": False}
        # The DRA driver's image is in the mirror too, though the GPUCluster is off.
        assert values["draDriver"] == {"repository": MIRROR + "/nvidia"}
    assert ("known issue of its device plugin v0.19.2" in output) == (version == "v26.3.2")
    if version == ov.DEFAULT_CHART_VERSION:
        # The committed example is this version's rendering.
        for path in ("airgap/images.txt", "rke2/gpu-operator.helmchart.yaml"):
            with open(os.path.join(SITE_FILE.rsplit("/", 1)[0], path)) as handle:
                assert read(root, path) == handle.read()
