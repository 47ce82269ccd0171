"""gpu_operator_chart: every supported combination renders (and the named ones exactly as
the expected manifests under expected/), every invalid one fails naming its key and
changes nothing; the role renders idempotently into a test-local site."""
import base64
import itertools
import json
import os
import subprocess
import sys

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan as ip
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_operator_chart
from tests.conftest import COLLECTIONS, ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "expected")
INPUTS = os.path.join(EXPECTED, "inputs")
# The chart's v26.3.2 values.yaml as the role ships it (upstream's file under a comment header).
REFERENCE_VALUES = os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v26.3.2-values.yaml")
ARCHIVE = os.path.join(INPUTS, "gpu-operator-v26.3.2-stub.tgz")
RKE2_IMAGES = os.path.join(INPUTS, "rke2-images.linux-amd64.txt")
MIRROR = "registry.site.example:5000"
SOCKET = {"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"}
NODES = [{"name": "gpu-c1", "workload_config": "container", "os_tag": "ubuntu22.04"},
         {"name": "gpu-p1", "workload_config": "vm-passthrough"},
         {"name": "gpu-v1", "workload_config": "vm-vgpu", "os_tag": "ubuntu22.04"}]
VGPU = {"repository": MIRROR + "/nvidia", "version": "580.126.20"}


def run(capsys, **args):
    """(rc, result) of the module's main() with ``args`` (reference values added)."""
    args.setdefault("chart_values_reference", REFERENCE_VALUES)
    args.setdefault("driver_os_tags", ["ubuntu22.04"])
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            gpu_operator_chart.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def expected(name):
    with open(os.path.join(EXPECTED, name)) as handle:
        return handle.read()


def values_of(result):
    manifest = yaml.safe_load(result["manifest_yaml"].split("---\n", 1)[1])
    return yaml.safe_load(manifest["spec"]["valuesContent"])


# ---------------------------------------------------------------- named combinations

SCENARIOS = {
    "v26.3.2-defaults": {},
    "v26.3.2-nri-host-driver": dict(nri_plugin_enabled=True, driver_enabled=False, rke2_version="v1.33.5+rke2r1"),
    "v25.10.1-defaults": dict(chart_version="v25.10.1"),
    "v25.3.4-defaults": dict(chart_version="v25.3.4"),
    "v25.3.4-host-runtime": dict(chart_version="v25.3.4", toolkit_enabled=False),
    "v26.3.2-sandbox-vgpu": dict(sandbox_workloads={"enabled": True}, vgpu_manager=VGPU, gpu_nodes=NODES),
    "v26.3.2-time-slicing-mig-mixed": dict(time_slicing={"replicas": 4}, mig_strategy="mixed"),
    "v26.3.2-mirror": dict(image_registry=MIRROR),
    "v26.3.2-airgapped": dict(image_registry=MIRROR, chart_archive=ARCHIVE, rke2_image_lists=[RKE2_IMAGES],
                              sandbox_workloads={"enabled": True}, vgpu_manager=VGPU, gpu_nodes=NODES),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_named_combinations_render_the_expected_manifest(capsys, name):
    rc, result = run(capsys, **SCENARIOS[name])
    assert rc == 0, result.get("msg")
    assert not result["changed"]
    assert result["manifest_yaml"] == expected(name + ".helmchart.yaml")


def test_airgapped_site_plan_and_chart_content(capsys):
    rc, result = run(capsys, **SCENARIOS["v26.3.2-airgapped"])
    assert rc == 0, result.get("msg")
    assert result["images_txt"] == expected("v26.3.2-airgapped.images.txt")
    with open(ARCHIVE, "rb") as handle:
        assert result["manifest"]["spec"]["chartContent"] == base64.b64encode(handle.read()).decode()
    assert "repo" not in result["manifest"]["spec"]
    effective = ov.effective_values(yaml.safe_load(open(REFERENCE_VALUES)), values_of(result))
    assert ip.escaping_references(effective, MIRROR) == []


def test_argocd_application_of_the_same_values(capsys):
    rc, result = run(capsys, **SCENARIOS["v26.3.2-nri-host-driver"])
    assert result["application_yaml"] == expected("v26.3.2-nri-host-driver.application.yaml")
    assert result["application"]["spec"]["source"]["helm"]["valuesObject"] == values_of(result)


# ---------------------------------------------------------------- every combination

LINES = ("v25.3.4", "v25.10.1", "v26.3.2")
COMBINATIONS = list(itertools.product(LINES, (False, True), (True, False), (False, True), (None, 4),
                                      (None, "mixed"), (None, MIRROR), (False, True)))


def _combination_args(line, nri, driver, sandbox, slicing, mig, mirror, archive):
    args = dict(chart_version=line, nri_plugin_enabled=nri, driver_enabled=driver,
                sandbox_workloads={"enabled": sandbox}, image_registry=mirror)
    if mig:
        args["mig_strategy"] = mig
    if slicing:
        args["time_slicing"] = {"replicas": slicing}
    if sandbox:
        args.update(vgpu_manager=VGPU, gpu_nodes=NODES)
    if archive:
        # The stub archive says v26.3.2: on other lines it must be refused.
        args["chart_archive"] = ARCHIVE
    return args


@pytest.mark.parametrize("combination", COMBINATIONS, ids=lambda c: "-".join(str(x) for x in c))
def test_every_combination_renders_rke2_correct_values_or_fails_naming_the_key(capsys, combination):
    line, nri, driver, sandbox, slicing, mig, mirror, archive = combination
    rc, result = run(capsys, **_combination_args(*combination))
    refusals = []
    if nri and line != "v26.3.2":
        refusals.append("cdi.nriPluginEnabled: the NRI plugin needs chart v26.3.0 or later (chart_version is %s)"
                        % line)
    if archive and line != "v26.3.2":
        refusals.append("chart_archive: holds chart gpu-operator v26.3.2, not gpu-operator %s" % line)
    if mirror and line != "v26.3.2" and not archive:
        # The collection knows the NFD subchart's version of v26.3.2 only; a mirror needs it.
        refusals.append("node-feature-discovery.image.tag: the NFD image's tag follows the NFD subchart's version, "
                        "which is not known for this chart version: give the chart archive (chart_archive) or set "
                        "node-feature-discovery.image.tag")
    if refusals:
        assert rc == 1 and result["failed"]
        assert sorted(result["problems"]) == sorted(refusals)
        assert "manifest" not in result
        return
    assert rc == 0, result.get("msg")
    values = values_of(result)
    assert values == result["values"]
    toolkit_env = values["toolkit"].get("env")
    if nri:
        assert toolkit_env is None and values["cdi"]["nriPluginEnabled"] is True
    elif line == "v25.3.4":
        assert [e["name"] for e in toolkit_env] == [
            "CONTAINERD_SOCKET", "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED",
            "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS"]
        assert values["devicePlugin"]["env"] == [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]
        assert result["workload_runtime_class"] == "nvidia"
    else:
        assert toolkit_env == [SOCKET]
        assert "env" not in values.get("devicePlugin", {})
    assert "nriPluginEnabled" in values["cdi"] if line == "v26.3.2" else "nriPluginEnabled" not in values["cdi"]
    assert values["driver"]["enabled"] is driver
    assert values["sandboxWorkloads"]["enabled"] is sandbox
    assert values.get("mig", {}).get("strategy") == mig
    config = values.get("devicePlugin", {}).get("config")
    if slicing:
        data = yaml.safe_load(config["data"][config["default"]])
        assert data["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": slicing}]
        assert data["flags"]["migStrategy"] == (mig or "none")
    else:
        assert config is None
    assert (result["manifest"]["spec"].get("chartContent") is not None) is archive
    reference = yaml.safe_load(open(REFERENCE_VALUES))
    assert ov.unknown_keys(values, reference) == []
    components = [c for image in result["images"] for c in image["components"]]
    assert ("driver" in components) is driver
    assert ("vgpu-manager" in components) is sandbox
    if mirror:
        assert ip.escaping_references(ov.effective_values(reference, values), mirror) == []
        assert all(i["mirror"].startswith(mirror + "/") for i in result["images"])


def test_a_mirror_on_an_older_line_with_the_nfd_tag_given(capsys):
    rc, result = run(capsys, chart_version="v25.10.1", image_registry=MIRROR,
                     extra_values={"node-feature-discovery": {"image": {"tag": "v0.18.2"}}})
    assert rc == 0, result.get("msg")
    assert result["values"]["node-feature-discovery"] == {"image": {
        "repository": MIRROR + "/nfd/node-feature-discovery", "tag": "v0.18.2"}}
    assert "registry.k8s.io/nfd/node-feature-discovery:v0.18.2 -> %s/nfd/node-feature-discovery:v0.18.2" % MIRROR \
        in result["images_txt"]


# ---------------------------------------------------------------- invalid input


@pytest.mark.parametrize("args, problem", [
    (dict(nri_plugin_enabled=True, cdi_enabled=False),
     "cdi.nriPluginEnabled: the NRI plugin needs cdi.enabled: true (the chart rejects it without CDI)"),
    (dict(nri_plugin_enabled=True, rke2_version="v1.34.0+rke2r1"),
     "cdi.nriPluginEnabled: RKE2 v1.34.0+rke2r1 ships containerd older than 2.1"),
    (dict(gpu_nodes=[{"name": "gpu-v1", "workload_config": "vm-vgpu"}], sandbox_workloads={"enabled": True}),
     "vgpuManager.repository: hosts gpu-v1 are vm-vgpu nodes but no vGPU manager image is set"),
    (dict(gpu_nodes=[{"name": "gpu-p1", "workload_config": "vm-passthrough"}]),
     "sandboxWorkloads.enabled: false, but hosts gpu-p1 have a vm-* gpu_workload_config"),
    (dict(gpu_nodes=[{"name": "gpu-x", "workload_config": "vm-kata"}]),
     "gpu_workload_config: host gpu-x has 'vm-kata', not one of container, vm-passthrough, vm-vgpu"),
    (dict(extra_values={"sandboxWorkloads": {"defaultWorkload": "vm"}}),
     "sandboxWorkloads.defaultWorkload: 'vm' is not one of container, vm-passthrough, vm-vgpu"),
    (dict(extra_values={"toolkit": {"env": [SOCKET, {"name": "CONTAINERD_CONFIG", "value":
                                                     "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl"}]}}),
     "toolkit.env[1] CONTAINERD_CONFIG: the obsolete containerd-config recipe is refused on RKE2"),
    (dict(extra_values={"toolkit": {"env": [SOCKET, {"name": "CONTAINERD_SET_AS_DEFAULT", "value": "true"}]}}),
     "toolkit.env[1] CONTAINERD_SET_AS_DEFAULT: the obsolete containerd-config recipe is refused on RKE2"),
    (dict(extra_values={"devicePlugin": {"configs": {}}}),
     "devicePlugin.configs: not a value of the chart (its values.yaml has no such key)"),
    (dict(extra_values={"operator": {"defaultRuntime": "containerd"}}),
     "operator.defaultRuntime: not a value of the chart (its values.yaml has no such key)"),
    (dict(image_registry=MIRROR, extra_values={"extraObjects": [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
         "spec": {"containers": [{"name": "c", "image": "docker.io/library/busybox:1"}]}}]}),
     "extraObjects[0].spec.containers[0].image: docker.io/library/busybox:1 is outside the mirror " + MIRROR),
    (dict(image_registry=MIRROR, driver_os_tags=[]),
     "driver_os_tags: the driver image is tagged per OS"),
    (dict(image_registry="http://registry.site"), "image_registry: 'http://registry.site' is not a registry"),
    (dict(name="GPU-Operator"), "name: 'GPU-Operator' is not an RFC 1123 name"),
    (dict(chart_version="v24.9.2"), "chart_version: v24.9.2 is not on a supported chart line"),
    (dict(chart_version="v26.3.3", chart_archive=ARCHIVE),
     "chart_archive: holds chart gpu-operator v26.3.2, not gpu-operator v26.3.3"),
    (dict(chart_version="v26.3.1"), "chart_version: v26.3.1 is not a version this collection knows (v26.3.2, "
                                    "v26.3.3, v26.7.0)"),
    (dict(chart_version="v26.7.1", chart_values_reference="/nonexistent/gpu-operator-v26.7.1-values.yaml"),
     "chart_version: v26.7.1 is not a version this collection knows (v26.3.2, v26.3.3, v26.7.0)"),
    (dict(chart_archive=RKE2_IMAGES), "chart_archive: not a chart archive"),
])
def test_invalid_combinations_fail_naming_the_key(capsys, args, problem):
    rc, result = run(capsys, **args)
    assert rc == 1 and result["failed"] and not result.get("changed")
    assert any(p.startswith(problem) for p in result["problems"]), result["problems"]
    assert result["msg"].startswith("GPU Operator values refused: ")


def test_unreadable_reference_is_named(capsys, tmp_path):
    rc, result = run(capsys, chart_values_reference=str(tmp_path / "missing-values.yaml"))
    assert rc == 1 and result["msg"].startswith("chart_values_reference: cannot read %s" % (tmp_path / "missing"))
    (tmp_path / "bad.yaml").write_text("- a\n- b\n")
    rc, result = run(capsys, chart_values_reference=str(tmp_path / "bad.yaml"))
    assert rc == 1 and "is not a chart values.yaml" in result["msg"]


def test_choices_are_enforced_by_the_argument_spec(capsys):
    rc, result = run(capsys, mig_strategy="both")
    assert rc == 1 and "mig_strategy" in result["msg"] and "both" in result["msg"]


def test_nfd_version_comes_from_the_archive(tmp_path, capsys):
    # The chart's own NFD version wins over the collection's table.
    rc, result = run(capsys, chart_archive=ARCHIVE)
    assert [i["source"] for i in result["images"] if "node-feature-discovery" in i["components"]] == [
        "registry.k8s.io/nfd/node-feature-discovery:v0.18.3"]
    metadata, nfd = gpu_operator_chart.chart_archive_metadata(open(ARCHIVE, "rb").read())
    assert (metadata["name"], metadata["version"], nfd) == ("gpu-operator", "v26.3.2", "v0.18.3")


# ---------------------------------------------------------------- the role, on a test-local site


def _playbook(site_dir, *extra, **kwargs):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
               ANSIBLE_HOME=str(site_dir.parent / "ansible-home"), ANSIBLE_LOCAL_TEMP=str(site_dir.parent / "tmp"),
               ANSIBLE_NOCOLOR="1", PYTHONPATH=COLLECTIONS)
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
               "-i", str(site_dir.parent / "hosts.yml"), os.path.join(ROOT, "playbooks", "gpu_operator.yml"),
               "-e", "gpu_operator_site_dir=%s" % site_dir, "-e", "gpu_operator_delivery=none",
               "-e", "gpu_operator_chart_values_reference=%s" % REFERENCE_VALUES] + list(extra)
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False, **kwargs)


def _recap(proc):
    line = [l for l in proc.stdout.splitlines() if l.startswith("localhost")][-1]
    return dict(part.split("=") for part in line.split(":", 1)[1].split())


@pytest.fixture
def site(tmp_path):
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": {"site_name": "unit"}, "children": {
        "gpu_nodes": {"hosts": {"gpu-c1": {"gpu_workload_config": "container", "gpu_os_tag": "ubuntu22.04"},
                                "gpu-p1": {"gpu_workload_config": "vm-passthrough"}}}}}}))
    return tmp_path / "site"


def test_role_renders_idempotently_keeps_the_previous_manifest_and_refuses_before_changing(site):
    sandbox = ["-e", '{"gpu_operator_sandbox_workloads": {"enabled": true}}', "-e", "gpu_operator_argocd=true"]
    first = _playbook(site, *sandbox)
    assert first.returncode == 0, first.stdout[-3000:]
    manifest = site / "rke2" / "gpu-operator.helmchart.yaml"
    rendered = manifest.read_text()
    assert "sandboxWorkloads:\n      defaultWorkload: container\n      enabled: true" in rendered
    application = yaml.safe_load((site / "argocd" / "gpu-operator.application.yaml").read_text())
    values = yaml.safe_load(yaml.safe_load(rendered.split("---\n", 1)[1])["spec"]["valuesContent"])
    assert application["spec"]["source"]["helm"]["valuesObject"] == values
    assert not (site / "rke2" / "gpu-operator.helmchart.previous.yaml").exists()

    second = _playbook(site, *sandbox)
    assert second.returncode == 0 and _recap(second)["changed"] == "0", second.stdout[-3000:]

    # Check mode with --diff shows the values change and writes nothing.
    check = _playbook(site, *(sandbox + ["-e", "gpu_operator_driver_enabled=false", "--check", "--diff"]))
    assert check.returncode == 0, check.stdout[-3000:]
    assert "-      enabled: true\n+      enabled: false" in check.stdout
    assert manifest.read_text() == rendered

    # A vm-* node with sandbox workloads off: refused before anything is written.
    refused = _playbook(site)
    assert refused.returncode != 0
    assert "sandboxWorkloads.enabled: false, but hosts gpu-p1 have a vm-* gpu_workload_config" in refused.stdout
    assert manifest.read_text() == rendered

    # A values change rolls forward and keeps the manifest it replaces for rollback.
    changed = _playbook(site, *(sandbox + ["-e", "gpu_operator_driver_enabled=false"]))
    assert changed.returncode == 0, changed.stdout[-3000:]
    assert (site / "rke2" / "gpu-operator.helmchart.previous.yaml").read_text() == rendered
    assert "driver:\n      enabled: false" in manifest.read_text()


def test_role_refuses_a_rollback_without_a_previous_manifest(site):
    proc = _playbook(site, "-e", "gpu_operator_rollback=true")
    assert proc.returncode != 0
    assert "gpu_operator_rollback: there is no %s" % (site / "rke2" / "gpu-operator.helmchart.previous.yaml") \
        in proc.stdout
    assert not site.exists()


def test_expected_manifests_are_valid_helmcharts():
    # The expected files are what RKE2's helm-controller reads: check their shape against its CRD's fields.
    crd = yaml.safe_load(open(os.path.join(ROOT, "tests", "lab", "reference", "helm-controller-v0.16.26",
                                           "helm.cattle.io_helmcharts.yaml")))
    fields = set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])
    names = [n for n in os.listdir(EXPECTED) if n.endswith(".helmchart.yaml")]
    assert sorted(n[:-len(".helmchart.yaml")] for n in names) == sorted(SCENARIOS)
    for name in names:
        docs = [d for d in yaml.safe_load_all(expected(name)) if d]
        assert len(docs) == 1 and docs[0]["kind"] == "HelmChart", name
        assert set(docs[0]["spec"]) <= fields, name
        assert isinstance(yaml.safe_load(docs[0]["spec"]["valuesContent"]), dict), name


# ---------------------------------------------------------------- upgrades

REFERENCE_V26_7 = os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v26.7.0-values.yaml")


def test_a_change_that_skips_a_chart_line_is_refused_naming_the_running_release(capsys):
    rc, result = run(capsys, chart_version="v26.7.0", chart_values_reference=REFERENCE_V26_7,
                     running_release={"chart_version": "v25.10.1", "values": {}})
    assert rc == 1
    assert "running_release: v25.10.1 -> v26.7.0 skips the chart line v26.3" in result["msg"], result["msg"]


def test_the_upgrade_says_what_changes_and_whether_the_driver_restarts(capsys):
    rc, first = run(capsys)
    assert rc == 0 and first["upgrade"]["kind"] == "install" and not first["upgrade"]["driver_restart"]
    running = {"chart_version": "v26.3.2", "values": first["values"]}
    rc, same = run(capsys, running_release=running, running_values_reference=REFERENCE_VALUES)
    assert rc == 0 and same["upgrade"]["kind"] == "values" and same["upgrade"]["values_changed"] == {}
    assert not same["upgrade"]["driver_restart"]
    rc, line = run(capsys, chart_version="v26.7.0", chart_values_reference=REFERENCE_V26_7, running_release=running,
                   running_values_reference=REFERENCE_VALUES)
    assert rc == 0, line["msg"]
    upgrade = line["upgrade"]
    assert (upgrade["from"], upgrade["to"], upgrade["kind"]) == ("v26.3.2", "v26.7.0", "line")
    # v26.7.0's chart brings its own driver (595.91.07), so every driver node restarts its driver.
    assert upgrade["driver_changed"]["driver.version"][1] == "595.91.07" and upgrade["driver_restart"]
    assert upgrade["values_changed"]["dcgmExporter.serviceMonitor.enabled"] == [None, False]
