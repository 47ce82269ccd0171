"""Bad input never crashes the collection's other input surfaces (issue #19): the site file
the inventory renderer reads, the chart values and overrides, kubeconfig files for the
merge, and the host fact trees the preflight reads. Each generated input ends in a result
or in that surface's documented refusal (SiteError, the module's failure naming the
values, KubeconfigError, PreflightInputError), never in another exception."""
import copy
import json
import os

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpuplatform.rke2.plugins.module_utils import host_facts as hf
from ansible_collections.gpuplatform.rke2.plugins.module_utils import kubeconfig as kc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import manifest_yaml
from ansible_collections.gpuplatform.rke2.plugins.module_utils import preflight
from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_inventory as si
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_operator_chart
from tests.conftest import ROOT
from tests.unit.bad_input import JSON_VALUES, assert_refusal, examples, mutated
from tests.unit.fixtures.hosts.fake_host import a10_host

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
