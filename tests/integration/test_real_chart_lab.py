"""The real chart, helm-controller and Argo CD's schema judge what the collection renders.

- ``helm template`` of the real GPU Operator chart (as the lab's repository serves it)
  succeeds for every values combination the gpu_operator role renders for chart line
  v26.3, and for the example site's committed HelmChart; the ClusterPolicy each renders
  is accepted by the lab API server with the operator's real CRD (server-side dry run).
- A value the chart refuses fails helm-controller's install Job with helm's message, and
  helmchart_wait reports it at once.
- Every Argo CD Application and AppProject a site renders passes Argo CD's real CRD.
"""

import glob
import json
import os
import subprocess

import pytest
import yaml
from kubernetes import client

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from tests.integration.modules import run_module
from tests.lab.fleet import ROOT, LAB_OPERATOR_VALUES
from tests.lab import upstream
from tests.lab.upstream import OPERATOR_TAG
from tests.unit import test_gpu_operator_chart as chart_tests

NAMESPACE = om.DEFAULT_NAMESPACE


def _committed(paths):
    """The paths git does not ignore: what make demo renders for the lab site (sites/lab/, ignored) is output of
    whatever version it ran (make demo GPU_OPERATOR_VERSION=v26.7.0), not a committed site."""
    paths = sorted(paths)
    if not paths:
        return paths
    ignored = subprocess.run(["git", "-C", ROOT, "check-ignore", "--stdin"], input="\n".join(paths),
                             stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout.split("\n")
    return [p for p in paths if p not in set(ignored)]


SITE_HELMCHARTS = _committed(glob.glob(os.path.join(ROOT, "sites", "*", "rke2", "gpu-operator.helmchart.yaml")))
SITE_ARGOCD = _committed(glob.glob(os.path.join(ROOT, "sites", "*", "argocd", "**", "*.yaml"), recursive=True))


def _role_renderings():
    """(name, module arguments) of every chart-line-v26.3 rendering the gpu_operator role's
    unit tests make (tests/unit/test_gpu_operator_chart.py)."""
    args = [("named-%s" % name, dict(kwargs)) for name, kwargs in sorted(chart_tests.SCENARIOS.items())
            if kwargs.get("chart_version", "v26.3.2") == "v26.3.2"]
    args += [("combination-%s" % "-".join(str(x) for x in c[1:]), chart_tests._combination_args(*c))
             for c in chart_tests.COMBINATIONS if c[0] == "v26.3.2"]
    return args


def _values_of_manifest(text):
    charts = [d for d in yaml.safe_load_all(text) if d and d.get("kind") == "HelmChart"]
    assert len(charts) == 1, "expected one HelmChart, found %d" % len(charts)
    return charts[0], yaml.safe_load(charts[0]["spec"].get("valuesContent") or "") or {}


def _helm_template(lab, values, tmp_path, name):
    helm = os.path.join(lab.state()["helm_tools"], "helm")
    package = os.path.join(lab.workdir, "chart-repo", "charts", "gpu-operator-%s.tgz" % OPERATOR_TAG)
    values_file = tmp_path / ("%s.values.yaml" % name)
    values_file.write_text(yaml.safe_dump(values))
    proc = subprocess.run([helm, "template", "gpu-operator", package, "--namespace", NAMESPACE,
                           "--kube-version", "v1.34.4", "-f", str(values_file)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert proc.returncode == 0, "%s: helm template of the real chart failed: %s" % (name, proc.stderr.strip())
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _cluster_policy_accepted(lab, documents, name):
    policies = [d for d in documents if d.get("kind") == "ClusterPolicy"]
    assert len(policies) == 1, "%s: the chart rendered %d ClusterPolicies" % (name, len(policies))
    policy = policies[0]
    policy["metadata"]["name"] = "dry-run-%s" % len(name)
    return client.CustomObjectsApi(lab.api).create_cluster_custom_object(
        *(om.CLUSTER_POLICY_API + (policy,)), dry_run="All")


def test_the_real_chart_renders_every_values_combination_the_role_renders(real_operator, capsys, tmp_path):
    seen = {}
    for name, kwargs in _role_renderings():
        rc, result = chart_tests.run(capsys, **kwargs)
        if rc != 0:
            continue  # refused by the role (its unit tests assert why): nothing reaches helm
        _chart, values = _values_of_manifest(result["manifest_yaml"])
        key = json.dumps(values, sort_keys=True)
        if key in seen:
            continue
        seen[key] = name
        accepted = _cluster_policy_accepted(real_operator, _helm_template(real_operator, values, tmp_path, name), name)
        # What the role decided is what the API server kept, with the real CRD's pruning.
        assert accepted["spec"]["driver"]["enabled"] is values["driver"]["enabled"], name
        assert accepted["spec"]["sandboxWorkloads"]["enabled"] is values["sandboxWorkloads"]["enabled"], name
        assert accepted["spec"]["cdi"].get("nriPluginEnabled", False) is values["cdi"].get("nriPluginEnabled", False)
    # Driver on/off x NRI x sandbox x time-slicing x MIG x mirror: 64 distinct value sets.
    assert len(seen) == 64, sorted(seen.values())


@pytest.mark.parametrize("path", SITE_HELMCHARTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_a_sites_committed_helmchart_renders_with_the_real_chart(real_operator, tmp_path, path):
    with open(path) as handle:
        chart, values = _values_of_manifest(handle.read())
    assert chart["spec"]["version"] == OPERATOR_TAG
    _cluster_policy_accepted(real_operator, _helm_template(real_operator, values, tmp_path, "site"), path)
    # helm-controller's own CRD accepts the HelmChart as committed.
    client.CustomObjectsApi(real_operator.api).create_namespaced_custom_object(
        "helm.cattle.io", "v1", chart["metadata"].get("namespace") or "kube-system", "helmcharts", chart,
        dry_run="All")


def test_a_value_the_chart_refuses_fails_the_install_job_with_helms_message(real_operator):
    """As on RKE2: helm-controller's install Job runs helm, the chart's template fails, the
    Job pod crash-loops with helm's message in its log, and helmchart_wait says so at once."""
    real_operator.install_operator({"cdi": {"enabled": False, "nriPluginEnabled": True}})
    try:
        result = run_module("helmchart_wait", {"name": "gpu-operator", "timeout": 120}, real_operator.kubeconfig)
        assert result.get("failed"), result
        assert result["job"] == "helm-install-gpu-operator"
        assert any("the NRI Plugin cannot be enabled when CDI is disabled" in line for line in result["log_tail"]), \
            result["log_tail"]
        assert "the NRI Plugin cannot be enabled when CDI is disabled" in result["msg"]
    finally:
        real_operator.install_operator(LAB_OPERATOR_VALUES)
        real_operator.wait_settled(timeout=180)


@pytest.mark.parametrize("path", SITE_ARGOCD, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_argo_cd_object_a_site_renders_passes_argo_cds_own_schema(real_operator, path):
    if not real_operator.state().get("argocd_crds"):
        if upstream.upstream_required():
            pytest.fail("LAB_REQUIRE_UPSTREAM=1, yet the lab has no Argo CD CRDs")
        pytest.skip("the lab found no Argo CD CRDs (ARGOCD_CRDS or ../shared/upstream/argo-cd-v3.5.1-crds)")
    with open(path) as handle:
        documents = [d for d in yaml.safe_load_all(handle) if d]
    assert documents, path
    api = client.CustomObjectsApi(real_operator.api)
    for doc in documents:
        kind = doc["kind"]
        assert kind in ("Application", "AppProject", "ApplicationSet"), "%s: %s is not an Argo CD object" % (path, kind)
        namespace = doc["metadata"].get("namespace") or "argocd"
        try:
            real_operator.core().create_namespace({"metadata": {"name": namespace}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        accepted = api.create_namespaced_custom_object("argoproj.io", "v1alpha1", namespace,
                                                       kind.lower() + "s", doc, dry_run="All")
        # Nothing the site wrote was pruned as unknown to Argo CD's schema.
        assert _kept(doc["spec"], accepted["spec"]), "%s: Argo CD's CRD dropped fields of %s %s" % (
            path, kind, doc["metadata"]["name"])


def _kept(wanted, got):
    if isinstance(wanted, dict):
        return isinstance(got, dict) and all(k in got and _kept(v, got[k]) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(got, list) and len(got) == len(wanted) and all(_kept(a, b) for a, b in zip(wanted, got))
    return wanted == got
