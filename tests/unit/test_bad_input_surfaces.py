"""Bad input never crashes the collection's other input surfaces (issue #19): the site file
the inventory renderer reads, the label plan's inputs, the chart values and overrides,
kubeconfig files for the merge, the host fact trees the preflight reads and the host files
host_facts.gather reads. Each generated input ends in a result or in that surface's
documented refusal (SiteError, MalformedObject, the module's failure naming the values,
KubeconfigError, PreflightInputError), never in another exception; damaged host files end
in facts the preflight reads, the damage listed under errors."""
import copy
import json
import os
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpuplatform.rke2.plugins.filter.site_render import gpu_label_plan
from ansible_collections.gpuplatform.rke2.plugins.module_utils import host_facts as hf
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import kubeconfig as kc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import manifest_yaml
from ansible_collections.gpuplatform.rke2.plugins.module_utils import preflight
from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_inventory as si
from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_render as sr
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_operator_chart
from tests.conftest import ROOT
from tests.unit.bad_input import JSON_VALUES, assert_refusal, examples, mutated
from tests.unit.fixtures.hosts.fake_host import RKE2_CIS_PSS, a10_host, dgx_spark_host

with open(os.path.join(ROOT, "sites", "tirosh-home", "site.yml")) as _handle:
    SITE = yaml.safe_load(_handle)
REFERENCE_VALUES = os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v26.3.2-values.yaml")


# ---------------------------------------------------------------- the site file and the inventory

def render_site(site):
    """What `make inventory/render` does with a site file: validate, then render."""
    try:
        si.validate(site, "sites/x/site.yml")
    except si.SiteError as exc:
        text = assert_refusal(exc, si.SiteError) if "\n" not in str(exc) else str(exc)
        assert text.startswith("sites/x/site.yml"), text
        return None
    si.render_problems(site)
    files = si.render(site, "sites/x/site.yml", yaml.safe_dump)
    for text in files.values():
        yaml.safe_load_all(text)
    return files


def test_the_example_site_renders():
    assert render_site(copy.deepcopy(SITE))


@examples(300)
@given(mutated(SITE, most=3))
def test_a_mutated_site_file_renders_or_is_refused_naming_the_file(site):
    render_site(site)


@examples(50)
@given(JSON_VALUES)
def test_any_document_as_a_site_file_is_refused_or_renders(site):
    render_site(site)


# ---------------------------------------------------------------- the label plan site/render writes

LABEL_PLAN_INPUTS = {
    "nodes": [{"host": "gpu-1", "name": "gpu-1", "desired": {"nvidia.com/gpu.workload.config": "container",
                                                             "nvidia.com/gpu.deploy.dcgm-exporter": "false"}},
              {"host": "gpu-2", "name": "gpu-2.lab", "desired": {"nvidia.com/gpu.workload.config": "vm-vgpu",
                                                                 "nvidia.com/vgpu.config": "A10-12Q"}},
              {"host": "gpu-3", "name": "gpu-3", "desired": {"nvidia.com/gpu.deploy.operands": "false"}}],
    "settings": [{"host": "gpu-1", "operands_disabled": ["dcgm-exporter"]},
                 {"host": "gpu-3", "isolated": True, "operands_disabled": ["vfio-manager"]}],
    "values": {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "container"}, "vgpuManager": {"enabled": True},
               "migManager": {"config": {"name": "", "default": "all-disabled"}}},
    "site_keys": {"gpu-1": "nodes[1]", "gpu-2": "nodes[2]", "gpu-3": "nodes[3]"},
    "source": "sites/x/site.yml", "site": "x"}


def plan_labels(inputs):
    """What the gpu_label_plan filter does with the other modules' results: the plan's text,
    or a refusal naming the input and the field."""
    try:
        text = sr.label_plan(*(inputs.get(key) for key in ("nodes", "settings", "values", "site_keys", "source",
                                                           "site")))
    except ko.MalformedObject as exc:
        message = assert_refusal(exc, ko.MalformedObject)
        assert re.split(r"[.\[ ]", message, maxsplit=1)[0] in LABEL_PLAN_INPUTS, message
        return message
    assert isinstance(yaml.safe_load(text.split("---\n", 1)[1])["nodes"], dict)
    return text


@examples(200)
@given(mutated(LABEL_PLAN_INPUTS, most=3))
def test_mutated_label_plan_inputs_render_or_are_refused_naming_the_input(inputs):
    plan_labels(inputs)


def test_the_label_plan_filter_refuses_an_input_naming_it():
    nodes = copy.deepcopy(LABEL_PLAN_INPUTS["nodes"])
    nodes[1]["desired"] = ["nvidia.com/vgpu.config"]
    with pytest.raises(AnsibleFilterError, match=r"^gpu_label_plan: nodes\[1\].desired is a list, expected a mapping$"):
        gpu_label_plan(nodes, values={"driver": {"enabled": "no"}})
    with pytest.raises(AnsibleFilterError, match=r"^gpu_label_plan: values.driver.enabled is a string \('no'\), "
                                                 r"expected a boolean$"):
        gpu_label_plan(LABEL_PLAN_INPUTS["nodes"], values={"driver": {"enabled": "no"}})


# ---------------------------------------------------------------- chart values and overrides

with open(REFERENCE_VALUES) as _handle:
    REFERENCE = yaml.safe_load(_handle)
OVERRIDES = {"driver": {"enabled": False, "version": "580.95.05"}, "devicePlugin": {"env": [{"name": "X", "value": "1"}]},
             "toolkit": {"env": [{"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"}]},
             "daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}


@pytest.fixture(scope="module")
def reference_read_once():
    """The module parses its 90 KB reference values.yaml on every run (0.6 s of the 0.7 s
    a run takes here); the overrides' property reads each text once."""
    parsed = {}
    original = manifest_yaml.load_mapping

    def load_mapping(text):
        if text not in parsed:
            parsed[text] = original(text)
        return copy.deepcopy(parsed[text])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest_yaml, "load_mapping", load_mapping)
        yield


def render_chart(capsys, extra_values, tmp_dir, reference=None):
    """The gpu_operator_chart module run with ``extra_values`` (and a reference values file)."""
    args = {"chart_values_reference": REFERENCE_VALUES, "driver_os_tags": ["ubuntu22.04"],
            "extra_values": extra_values, "sandbox_workloads": {"enabled": True}}
    if reference is not None:
        path = os.path.join(tmp_dir, "values.yaml")
        with open(path, "w") as handle:
            handle.write(yaml.safe_dump(reference))
        args["chart_values_reference"] = path
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_operator_chart.main()
    result = json.loads(capsys.readouterr().out)
    if result.get("failed"):
        assert result["msg"].startswith(("GPU Operator values refused: ", "chart_values_reference: ")), result["msg"]
    return result


@examples(300)
@given(mutated(OVERRIDES, most=3) | st.dictionaries(st.sampled_from(sorted(REFERENCE)), JSON_VALUES, max_size=3))
def test_any_overrides_render_or_are_refused_naming_the_values(capsys, tmp_path, reference_read_once, extra_values):
    assert reference_read_once is None
    render_chart(capsys, extra_values, str(tmp_path))


@examples(10)
@given(mutated(REFERENCE, most=2))
def test_a_mutated_reference_values_file_renders_or_is_refused(capsys, tmp_path, reference):
    render_chart(capsys, {}, str(tmp_path), reference)


# ---------------------------------------------------------------- kubeconfig files for the merge

RKE2_YAML = {"apiVersion": "v1", "kind": "Config", "current-context": "default", "preferences": {},
             "clusters": [{"name": "default", "cluster": {"server": "https://127.0.0.1:6443",
                                                          "certificate-authority-data": "Q0E="}}],
             "users": [{"name": "default", "user": {"client-certificate-data": "Q0VSVA==",
                                                    "client-key-data": "S0VZ"}}],
             "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}]}
TARGET = {"apiVersion": "v1", "kind": "Config", "current-context": "other",
          "clusters": [{"name": "other", "cluster": {"server": "https://10.0.0.1:6443"}},
                       {"name": "tirosh-home", "cluster": {"server": "https://192.0.2.11:6443"}}],
          "users": [{"name": "other", "user": {"token": "abc"}}],
          "contexts": [{"name": "other", "context": {"cluster": "other", "user": "other"}}]}


def merge_kubeconfig(source, target):
    try:
        entries = kc.site_entries(source, "tirosh-home", api_address="192.0.2.11")
        merged = kc.merge(target, entries, what="~/.kube/config")
    except kc.KubeconfigError as exc:
        return assert_refusal(exc, kc.KubeconfigError)
    kc.redact(merged)
    yaml.safe_dump(merged)
    return merged


def test_the_example_kubeconfigs_merge():
    assert merge_kubeconfig(copy.deepcopy(RKE2_YAML), copy.deepcopy(TARGET))["current-context"] == "other"


@examples(300)
@given(mutated(RKE2_YAML, most=3), mutated(TARGET, most=2) | st.just(TARGET))
def test_mutated_kubeconfigs_merge_or_are_refused(source, target):
    merge_kubeconfig(source, copy.deepcopy(target))


# ---------------------------------------------------------------- host fact trees for the preflight

@pytest.fixture(scope="module")
def a10_facts(tmp_path_factory):
    return hf.gather(a10_host(tmp_path_factory.mktemp("a10")).root)


def decide(facts):
    hosts = {"gpu-1": {"facts": facts, "gpu_workload_config": "container", "gpu_model": "A10", "gpu_count": 2},
             "gpu-2": {"facts": facts, "gpu_workload_config": "vm-vgpu", "gpu_vgpu_config": "A10-12Q"}}
    try:
        return preflight.decide(hosts, {"sandbox_workloads_enabled": True})
    except preflight.PreflightInputError as exc:
        return assert_refusal(exc, preflight.PreflightInputError)


def test_the_example_facts_decide(a10_facts):
    assert isinstance(decide(a10_facts), dict)


@examples(300)
@given(data=st.data())
def test_mutated_host_facts_end_in_findings_or_a_refusal(a10_facts, data):
    decide(data.draw(mutated(a10_facts, most=3)))


# ---------------------------------------------------------------- the files host_facts.gather reads

def fuzz_host(root):
    """A host with every file gather reads: a DGX Spark (dpkg, Docker's daemon.json, the
    toolkit, /proc/sys/kernel/arch) with an SR-IOV A10 beside its GB10, RKE2 with profile
    cis, a config.yaml.d drop-in and a Pod Security file."""
    host = dgx_spark_host(root)
    host.gpu("0000:65:00.0", "2236", iommu_group=30, total_vfs=32)
    host.file("/etc/rancher/rke2/config.yaml", "token-file: /etc/rancher/rke2/token\nprofile: cis\n"
              "pod-security-admission-config-file: /etc/rancher/rke2/rke2-pss.yaml\n")
    host.file("/etc/rancher/rke2/config.yaml.d/50-data-dir.yaml", "data-dir: /var/lib/rancher/rke2\n")
    host.file("/etc/rancher/rke2/rke2-pss.yaml", RKE2_CIS_PSS)
    return host.root


def _tree(root):
    """{path on the host: ("file", bytes) or ("link", target)} of every file under root."""
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            path = "/" + os.path.relpath(full, root)
            if os.path.islink(full):
                found[path] = ("link", os.readlink(full))
            else:
                with open(full, "rb") as handle:
                    found[path] = ("file", handle.read())
    return found


@pytest.fixture(scope="module")
def fuzz_tree(tmp_path_factory):
    root = fuzz_host(tmp_path_factory.mktemp("fuzz-host"))
    return root, _tree(root)


def _structured(original, path):
    """A YAML or JSON file's document mutated (a key dropped, a value of another type), as text."""
    try:
        document = yaml.safe_load(original.decode("utf-8"))
    except (ValueError, yaml.YAMLError):
        document = None
    if not isinstance(document, (dict, list)):
        return st.just(original)
    dump = json.dumps if path.endswith(".json") else yaml.safe_dump
    return mutated(document, most=2).map(lambda doc: dump(doc).encode("utf-8"))


@st.composite
def file_damage(draw, tree):
    """1 to 3 of the tree's files damaged: missing, empty, cut off at any byte, garbage text,
    binary, huge, a directory or a dangling link in its place, or (YAML and JSON) a document
    of another shape."""
    damage = {}
    for _n in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(sorted(tree)))
        # A document of another shape is what the parsers see least often by chance: thrice as often.
        how = draw(st.sampled_from(["missing", "empty", "cut", "text", "binary", "huge", "directory", "dangling"]
                                   + ["structured"] * 3))
        if how == "structured":
            path = draw(st.sampled_from([p for p in sorted(tree) if p.endswith((".yaml", ".json"))]))
        kind, original = tree[path]
        original = original if kind == "file" else b""
        if how == "cut":
            damage[path] = ("file", original[:draw(st.integers(0, max(0, len(original) - 1)))])
        elif how == "text":
            damage[path] = ("file", draw(st.text(max_size=80)).encode("utf-8"))
        elif how == "binary":
            damage[path] = ("file", draw(st.binary(max_size=80)))
        elif how == "huge":
            damage[path] = ("file", b"9" * 5000 + b"\n" + b"\xff" * 100000)
        elif how == "empty":
            damage[path] = ("file", b"")
        elif how == "structured":
            damage[path] = ("file", draw(_structured(original, path)))
        else:
            damage[path] = (how, None)
    return damage


def _put(full, kind, content):
    if os.path.islink(full) or os.path.isfile(full):
        os.remove(full)
    elif os.path.isdir(full):
        os.rmdir(full)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    if kind == "file":
        with open(full, "wb") as handle:
            handle.write(content)
    elif kind == "link":
        os.symlink(content, full)
    elif kind == "directory":
        os.mkdir(full)
    elif kind == "dangling":
        os.symlink("/nonexistent/gpuplatform-fuzz", full)


VERSION_OUTPUTS = st.sampled_from([(0, "rke2 version v1.34.1+rke2r1 (abc)\n", ""), (1, "", "boom"),
                                   (0, "Docker version 29.2.1, build 1234567\n", ""), (127, "", "")]) | st.tuples(
    st.integers(-1, 2), st.text(max_size=40), st.text(max_size=40)) | st.just(OSError(2, "No such file"))


@examples(150)
@given(data=st.data())
def test_damaged_host_files_give_facts_the_preflight_reads(fuzz_tree, data):
    root, tree = fuzz_tree
    damage = data.draw(file_damage(tree))
    answer = data.draw(VERSION_OUTPUTS)

    def run(_argv):
        if isinstance(answer, OSError):
            raise answer
        return answer

    try:
        for path, (kind, content) in damage.items():
            _put(os.path.join(root, path.lstrip("/")), kind, content)
        facts = hf.gather(root, run=run, machine=data.draw(st.sampled_from([None, "x86_64", "", "\x00"])))
    finally:
        for path in damage:
            _put(os.path.join(root, path.lstrip("/")), *tree[path])
    json.dumps(facts)
    # Whatever the files say, gather writes the fact tree the preflight reads: never refused.
    assert preflight.read_facts("gpu-1", facts) is facts
    for error in facts["errors"]:
        assert isinstance(error["path"], str) and isinstance(error["error"], str)
    assert isinstance(decide(facts), dict)


def test_the_fuzz_host_restored_gives_its_facts(fuzz_tree):
    root, tree = fuzz_tree
    assert _tree(root) == tree
    facts = hf.gather(root)
    assert facts["hardware"]["count"] == 2 and facts["rke2"]["profile"] == "cis" and facts["errors"] == []


PARSERS = {
    "os-release": hf.parse_os_release, "proc/modules": hf.parse_proc_modules, "cmdline": hf.parse_cmdline,
    "nvidia version": hf.parse_nvidia_version, "kernel modules": hf.parse_nvidia_kernel_modules,
    "dpkg status": lambda text: hf.parse_dpkg_status(text, ("docker-ce", "nvidia-container-toolkit")),
    "tool version": hf.parse_tool_version, "pci.ids": hf.parse_pci_ids,
    "modprobe.d": hf.nouveau_blacklist_lines, "runtime tag": hf.parse_runtime_tag,
    "containerd version": hf.parse_containerd_version, "flat yaml": hf.flat_yaml,
    "package version": hf.upstream_version,
    "arch": hf.kubernetes_architecture, "pci name": hf.architecture_of,
}
RESULT_TYPES = (dict, set, list, str, int, type(None))


@examples(300)
@given(st.sampled_from(sorted(PARSERS)), st.text(max_size=200) | st.binary(max_size=200).map(
    lambda raw: raw.decode("utf-8", "replace")) | st.just("9" * 5000) | st.none())
def test_every_host_file_parser_reads_any_text(name, text):
    assert isinstance(PARSERS[name](text), RESULT_TYPES)


@pytest.mark.parametrize("path, text, fact, read_as, error", [
    ("/etc/rancher/rke2/config.yaml.d/50-data-dir.yaml", "data-dir: [/data]\n", ("rke2", "data_dir"),
     "/var/lib/rancher/rke2", "data-dir is a list, not a path: read as unset"),
    ("/etc/rancher/rke2/config.yaml", "profile: cis\npod-security-admission-config-file: 7\n",
     ("rke2", "pod_security", "config_file"), "/etc/rancher/rke2/rke2-pss.yaml",
     "pod-security-admission-config-file is an integer (7), not a path: read as unset"),
    ("/etc/docker/daemon.json", '{"default-runtime": ["nvidia"]}', ("docker", "default_runtime"), None,
     "default-runtime is a list, not a runtime name"),
    ("/etc/rancher/rke2/rke2-pss.yaml", RKE2_CIS_PSS.replace("[kube-system, cis-operator-system, tigera-operator]",
                                                             "kube-system"),
     ("rke2", "pod_security", "exempt_namespaces"), None, "cannot read the PodSecurity configuration: "
     "defaults.enforce must be a level and exemptions.namespaces a list of namespace names"),
])
def test_a_host_file_of_another_shape_is_read_as_unset_and_named(tmp_path, path, text, fact, read_as, error):
    root = fuzz_host(tmp_path)
    with open(os.path.join(root, path.lstrip("/")), "w") as handle:
        handle.write(text)
    facts = hf.gather(root)
    value = facts
    for key in fact:
        value = value[key]
    assert value == read_as
    assert {"path": path, "error": error} in facts["errors"]
