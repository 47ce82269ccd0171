"""Role gpu_operator against the lab (issue 6): the playbook an operator runs
(`make rke2/gpu/operator/apply SITE=lab`) rolls the simulated GPU Operator out through
helm-controller, a values change changes what runs, a second run changes nothing, a bad
combination is refused before anything changes, and `state=absent` removes it all."""

import json
import os

import pytest
import yaml
from kubernetes import client

from tests.integration.gpu_operator import (assert_applied, helmchart, manifest_values, role_runner, running_operands,
                                            without_operator)
from tests.integration.kube import wait_for
from tests.integration.modules import run_module
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

NS = "gpu-operator"
DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
# What each workload config of the lab fleet runs with the lab site's values (sandbox workloads on,
# a vGPU manager image; MIG and CC managers need capable cards, the lab's A10s are neither).
CONTAINER = {"driver", "container-toolkit", "operator-validator", "device-plugin", "gpu-feature-discovery",
             "dcgm-exporter"}
OPERANDS = {
    "gpu-container-1": CONTAINER,
    "gpu-container-2": CONTAINER,
    "gpu-passthrough-1": {"vfio-manager", "sandbox-device-plugin", "sandbox-validator"},
    "gpu-vgpu-1": {"vgpu-manager", "vgpu-device-manager", "sandbox-device-plugin", "sandbox-validator"},
    # arm64, its own driver (gpu_operands_disabled: [driver]): the same DaemonSets, no driver pod.
    "gpu-spark-1": CONTAINER - {"driver"},
}
# The fleet's GPU node whose taint the operand DaemonSets do not tolerate: it never runs them.
TAINTED = "gpu-tainted-1"
CONTAINER_NODES = ("gpu-container-1", "gpu-container-2", "gpu-spark-1", TAINTED)


@pytest.fixture(scope="module")
def operator_lab(lab):
    """The fleet with its workload labels and no GPU Operator; left the same way."""
    without_operator(lab)
    yield lab
    without_operator(lab)


@pytest.fixture
def role(operator_lab, tmp_path):
    return role_runner(operator_lab, tmp_path)


def _read(path):
    with open(path) as handle:
        return handle.read()


def _driver_gone(objects):
    return not any((p.metadata.labels or {}).get("app") == "nvidia-driver-daemonset" for p in objects.values())


def _remove(role):
    removed = role("-e", "gpu_operator_state=absent")
    assert removed.returncode == 0, str(removed)
    return removed


def test_role_rolls_the_operator_out_and_a_second_run_changes_nothing(operator_lab, role):
    _remove(role)
    first = role()
    assert_applied(first)
    assert first.outcomes("Apply the HelmChart through the API (server-side apply)") == ["changed"]

    chart = helmchart(operator_lab)
    assert chart["spec"]["chart"] == "gpu-operator" and chart["spec"]["targetNamespace"] == NS
    # helm-controller's install Job for this HelmChart succeeded.
    job = client.BatchV1Api(operator_lab.api).read_namespaced_job(chart["status"]["jobName"], "kube-system")
    assert job.status.succeeded == 1
    # The manifest the cluster got is the one written into the site.
    assert [d["kind"] for d in yaml.safe_load_all(_read(role.manifest)) if d] == ["HelmChart"]
    assert yaml.safe_load(chart["spec"]["valuesContent"]) == manifest_values(role.manifest)

    # Right after the role: every reachable GPU node runs its workload config's operands, the
    # tainted one none, the CPU node none.
    running = running_operands(operator_lab)
    for node, operands in OPERANDS.items():
        assert running.get(node, set()) == operands, node
    assert TAINTED not in running and "cpu-1" not in running
    nodes = wait_for(operator_lab.core().list_node, lambda o: all(
        (o[n].status.allocatable or {}).get("nvidia.com/gpu") == "2" for n in ("gpu-container-1", "gpu-container-2")))
    assert (nodes["gpu-passthrough-1"].status.allocatable or {}).get("nvidia.com/gpu") is None

    second = role()
    assert second.returncode == 0, str(second)
    assert second.recap["changed"] == 0, str(second)
    assert helmchart(operator_lab)["metadata"]["resourceVersion"] == chart["metadata"]["resourceVersion"]


def test_switching_the_driver_off_changes_what_runs(operator_lab, role):
    assert_applied(role())
    assert "driver" in running_operands(operator_lab)["gpu-container-1"]

    off = role("-e", "gpu_operator_driver_enabled=false", "--diff")
    assert_applied(off)
    # --diff shows the values line that changes, in the site's file and in the live object.
    assert off.stdout.count("-      enabled: true\n+      enabled: false") == 2, str(off)
    assert "+++ after: HelmChart kube-system/gpu-operator (applied)" in off.stdout
    # The manifest it replaced is kept for a rollback.
    assert "driver:\n      enabled: true" in _read(role.previous)
    assert "driver:\n      enabled: false" in _read(role.manifest)

    # The operator drops the driver DaemonSet; the host driver stands in for it on every node.
    wait_for(client.AppsV1Api(operator_lab.api).list_namespaced_daemon_set,
             lambda o: "nvidia-driver-daemonset" not in o and "nvidia-device-plugin-daemonset" in o, namespace=NS)
    wait_for(operator_lab.core().list_namespaced_pod, _driver_gone, namespace=NS)
    running = running_operands(operator_lab)
    for node in ("gpu-container-1", "gpu-container-2"):
        assert running[node] == CONTAINER - {"driver"}, node
    check = run_module("gpu_node_check", {"nodes": sorted(OPERANDS)}, kubeconfig=operator_lab.kubeconfig)
    assert not check.get("failed"), check.get("msg")
    assert check["nodes"]["gpu-container-1"]["operand_states"]["driver"] == "host"

    again = role("-e", "gpu_operator_driver_enabled=false")
    assert again.returncode == 0 and again.recap["changed"] == 0, str(again)


def test_a_fresh_install_without_the_driver_labels_the_driver_true_and_runs_no_driver(operator_lab, role):
    _remove(role)
    # The operator leaves its deploy labels behind when it is uninstalled; a site that never
    # ran it has none: take them off, so what the install writes is what the test reads.
    core = operator_lab.core()
    for node in core.list_node().items:
        stale = dict((k, None) for k in node.metadata.labels or {} if k.startswith(om.DEPLOY_LABEL_PREFIX))
        if stale:
            core.patch_node(node.metadata.name, {"metadata": {"labels": stale}})
    for node in core.list_node().items:
        assert DRIVER_LABEL not in (node.metadata.labels or {}), node.metadata.name

    assert_applied(role("-e", "gpu_operator_driver_enabled=false"))
    nodes = dict((n.metadata.name, n) for n in operator_lab.core().list_node().items)
    # The operator writes true on every container GPU node whatever driver.enabled says, never
    # pre-installed (only k8s-driver-manager, which runs in the driver's own pod, writes that).
    for name in CONTAINER_NODES:
        assert nodes[name].metadata.labels.get(DRIVER_LABEL) == om.DEPLOY_TRUE, name
    for name in ("gpu-passthrough-1", "gpu-vgpu-1", "cpu-1"):
        assert DRIVER_LABEL not in (nodes[name].metadata.labels or {}), name
    assert not any(om.DEPLOY_PRE_INSTALLED in (n.metadata.labels or {}).values() for n in nodes.values())
    # With no driver DaemonSet, that true selects nothing: the host driver stands in.
    assert "nvidia-driver-daemonset" not in [
        d.metadata.name for d in client.AppsV1Api(operator_lab.api).list_namespaced_daemon_set(NS).items]
    running = running_operands(operator_lab)
    assert running["gpu-container-1"] == CONTAINER - {"driver"}
    check = run_module("gpu_node_check", {"nodes": ["gpu-container-1"]}, kubeconfig=operator_lab.kubeconfig)
    assert not check.get("failed"), check.get("msg")
    assert check["nodes"]["gpu-container-1"]["operand_states"]["driver"] == "host"


def test_an_invalid_combination_fails_naming_the_key_and_changes_nothing(operator_lab, role):
    assert_applied(role())
    before = helmchart(operator_lab)["metadata"]["resourceVersion"]
    manifest = _read(role.manifest)

    refused = role("-e", "gpu_operator_nri_plugin_enabled=true", "-e", "gpu_operator_cdi_enabled=false")
    assert refused.returncode != 0
    assert "cdi.nriPluginEnabled: the NRI plugin needs cdi.enabled: true" in refused.stdout, str(refused)
    assert refused.recap["changed"] == 0
    assert refused.outcomes("Render and validate the GPU Operator chart values") == ["fatal"]
    assert helmchart(operator_lab)["metadata"]["resourceVersion"] == before
    assert _read(role.manifest) == manifest
    assert not os.path.exists(role.previous)


def test_a_servicemonitor_without_the_prometheus_operators_crd_is_refused_before_anything_changes(operator_lab, role):
    # The lab serves no monitoring.coreos.com API, as a cluster without the Prometheus Operator.
    assert_applied(role())
    before = helmchart(operator_lab)["metadata"]["resourceVersion"]
    manifest = _read(role.manifest)
    refused = role("-e", json.dumps({"gpu_operator_extra_values": {"dcgmExporter": {"serviceMonitor": {
        "enabled": True}}}}))
    assert refused.returncode != 0
    assert refused.outcomes("Refuse a ServiceMonitor on a cluster without the Prometheus Operator's CRD") == \
        ["fatal"], str(refused)
    assert "does not serve monitoring.coreos.com/v1 servicemonitors; install the Prometheus Operator " \
           "(dcgmExporter.serviceMonitor.enabled is true; or leave it false) first" in refused.stdout, str(refused)
    assert refused.recap["changed"] == 0
    assert helmchart(operator_lab)["metadata"]["resourceVersion"] == before
    assert _read(role.manifest) == manifest


def test_absent_removes_the_chart_the_operators_objects_and_the_manifest(operator_lab, role):
    assert_applied(role())
    manifest = _read(role.manifest)
    apps = client.AppsV1Api(operator_lab.api)
    assert apps.list_namespaced_daemon_set(NS).items

    removed = _remove(role)
    assert removed.outcomes("Delete the HelmChart and wait until helm-controller uninstalled the release") == [
        "changed"]
    # The module waited for helm-controller's uninstall (the finalizer): the object is gone now.
    assert helmchart(operator_lab) is None
    # helm uninstall deleted the ClusterPolicy; the garbage collector deletes the DaemonSets it owned in the
    # background (and retries while their status moves: seen in the lab's kube-controller-manager log).
    wait_for(apps.list_namespaced_daemon_set, lambda daemonsets: not daemonsets, namespace=NS)
    assert not [d for d in apps.list_namespaced_deployment(NS).items if d.metadata.name == om.OPERATOR_DEPLOYMENT]
    policies = client.CustomObjectsApi(operator_lab.api).list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies")
    assert policies["items"] == []
    # The site's manifest went, kept as the rollback target.
    assert not os.path.exists(role.manifest)
    assert _read(role.previous) == manifest

    again = _remove(role)
    assert again.recap["changed"] == 0, str(again)
