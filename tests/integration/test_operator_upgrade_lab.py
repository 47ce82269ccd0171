"""Chart upgrades and a rollback with the real operators and the real charts (issue 35).

One lab, started at v26.3.2 whatever GPU_OPERATOR_VERSION says, walks the path the
collection supports: v26.3.2 -> v26.3.3 -> v26.7.0, then back to v26.3.3 (the previous
version and its values). Each step changes the gpu-operator HelmChart the way the
gpu_operator role does (its ``spec.version`` and the values the collection renders for that
chart line); the real helm-controller runs the real helm upgrade from one real chart to the
other (its pre-upgrade hook applies the new CRDs), the chart's Deployment changes its image,
and the lab runs that version's operator in the old one's place (tests/lab/operator_pods.py).
After each step, with the collection's own waits (helmchart_wait, operand_readiness,
gpu_allocatable_wait):

- helm's release record is at the new chart version, deployed;
- the running operator process is the new version's binary (and says so in its log);
- the CRDs are the new chart's (the upgrade hook applied them);
- every operand DaemonSet rolled to the new chart's images (observedGeneration ==
  generation, updatedNumberScheduled == desiredNumberScheduled == numberReady);
- the ClusterPolicy is Ready (Reconciled), and nvidia.com/gpu is allocatable on every GPU
  node the device plugin serves;
- from v26.7.0 on, the operator's new node label nvidia.com/gpu.deploy.client.
"""

import os
import re

import pytest
import yaml
from kubernetes import client

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import default_decisions, render_values
from tests.integration.conftest import require_real_operator, started_lab
from tests.integration.modules import run_module
from tests.lab import upstream
from tests.lab import helm_record
from tests.lab.lab import ROOT, Lab, LabError, opt_chart_files

NAMESPACE = om.DEFAULT_NAMESPACE
START = "v26.3.2"
# (what, chart version) in order: each step upgrades (or rolls back) the HelmChart to that version.
PATH = (("upgrade", "v26.3.3"), ("upgrade", "v26.7.0"), ("rollback", "v26.3.3"))
CLIENT_LABEL = om.DEPLOY_LABEL_PREFIX + "client"
# A step's waits: a first upgrade to a version builds its operator (minutes when cold) before its pod is Ready.
WAIT_S = 900


# The driver DaemonSet is OnDelete: the operator's driver upgrade controller replaces its pods node by node
# (cordon, pod restart, validation, uncordon), one at a time by default and one state a node every 2 minutes
# (controllers/upgrade_controller.go plannedRequeueInterval): about 8 minutes a step on the lab's four driver
# nodes. A site may let it upgrade every node at once (extra_values), which this test does to stay short.
PARALLEL_DRIVER_UPGRADE = {"driver": {"upgradePolicy": {"maxParallelUpgrades": 0, "maxUnavailable": "100%"}}}


def values_for(version):
    """The chart values the collection renders for a site of the default decisions on ``version``
    (with every driver node upgraded at once)."""
    decisions = default_decisions()
    decisions["chart_version"] = version
    decisions["extra_values"] = PARALLEL_DRIVER_UPGRADE
    return render_values(decisions)


def chart_images(version):
    """Every image the chart of ``version`` names (repository/image:version; a component without a
    version runs the chart's appVersion, the release tag)."""
    with open(os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-%s-values.yaml" % version)) as handle:
        defaults = yaml.safe_load(handle)
    images = set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("repository") and node.get("image"):
                images.add("%s/%s:%s" % (node["repository"], node["image"], node.get("version") or version))
            for child in node.values():
                walk(child)
    walk(defaults)
    return images


def helm_release(lab):
    """helm's latest release record of gpu-operator (its Secret, as helm list reads it)."""
    secrets = lab.api.sanitize_for_serialization(lab.core().list_namespaced_secret(
        NAMESPACE, label_selector=helm_record.selector("gpu-operator"),
        field_selector="type=" + helm_record.SECRET_TYPE))["items"]
    record = helm_record.latest_record(secrets)
    assert record is not None, "no helm release record of gpu-operator in %s" % NAMESPACE
    return helm_record.record_of_secret(record)


def operator_log_version(lab):
    with open(os.path.join(lab.logs_dir, "gpu-operator.log"), errors="replace") as handle:
        versions = re.findall(r'"version: (v[\w.-]+)"', handle.read())
    return versions[-1] if versions else None


def crds_not_of(lab, version):
    """The CRDs the chart's upgrade hook applies (those the image of ``version`` holds in /opt) whose
    versions and schemas in the cluster are not that chart's."""
    ext = client.ApiextensionsV1Api(lab.api)
    source = upstream.resolve_operator_source(version)
    differ = []
    for path, _target in opt_chart_files(source):
        with open(os.path.join(source.tree, path)) as handle:
            for doc in yaml.safe_load_all(handle):
                if not doc:
                    continue
                live = lab.api.sanitize_for_serialization(ext.read_custom_resource_definition(doc["metadata"]["name"]))
                wanted = [(v["name"], v.get("schema")) for v in doc["spec"]["versions"]]
                if [(v["name"], v.get("schema")) for v in live["spec"]["versions"]] != wanted:
                    differ.append(doc["metadata"]["name"])
    return differ


def wait_step(lab, version):
    """The collection's waits, in the role's order, after the HelmChart changed to ``version``."""
    result = run_module("helmchart_wait", {"name": "gpu-operator", "timeout": WAIT_S}, lab.kubeconfig)
    assert not result.get("failed"), "helmchart_wait (%s): %s" % (version, result.get("msg"))
    # The chart's images: the operand wait holds until the new operator has rewritten every template.
    readiness = run_module("operand_readiness", {"require_reconciled": True, "images": sorted(chart_images(version)),
                                                 "timeout": WAIT_S}, lab.kubeconfig)
    assert not readiness.get("failed"), "operand_readiness (%s): %s" % (version, readiness.get("msg"))
    allocatable = run_module("gpu_allocatable_wait", {"timeout": WAIT_S}, lab.kubeconfig)
    assert not allocatable.get("failed"), "gpu_allocatable_wait (%s): %s" % (version, allocatable.get("msg"))
    return allocatable


def assert_end_state(lab, version, allocatable):
    release = helm_release(lab)
    assert (release["chart"]["metadata"]["version"], release["info"]["status"]) == (version, "deployed"), (
        "helm release gpu-operator revision %s" % release.get("version"))
    assert release["chart"]["metadata"]["appVersion"] == version

    state = lab.state()
    assert state["operator_version"] == version
    pid = lab.processes()["gpu-operator"]
    assert pid, "the operator process is not running"
    assert os.path.realpath("/proc/%d/exe" % pid) == os.path.realpath(state["operator_bin"])
    assert operator_log_version(lab) == version

    assert crds_not_of(lab, version) == []

    apps = client.AppsV1Api(lab.api)
    operator = apps.read_namespaced_deployment("gpu-operator", NAMESPACE)
    assert operator.spec.template.spec.containers[0].image.endswith(":" + version)
    images = chart_images(version)
    operands = [ds for ds in lab.api.sanitize_for_serialization(apps.list_namespaced_daemon_set(NAMESPACE))["items"]
                if om.operand_for_daemonset(ds["metadata"]["name"])]
    assert operands
    for ds in operands:
        status = ds["status"]
        name = ds["metadata"]["name"]
        assert rd.foreign_images(ds, images) == [], name
        assert status.get("observedGeneration") == ds["metadata"]["generation"], name
        assert status.get("updatedNumberScheduled", 0) == status["desiredNumberScheduled"] == \
            status.get("numberReady", 0), (name, status)

    assert lab.cluster_policy_status() == "ClusterPolicy cluster-policy ready (Reconciled)"

    nodes = dict((n.metadata.name, n) for n in lab.core().list_node().items)
    assert allocatable["ready_nodes"], allocatable
    assert sorted(allocatable["ready_nodes"]) == sorted(allocatable["nodes"])
    for name in allocatable["ready_nodes"]:
        assert int((nodes[name].status.allocatable or {}).get("nvidia.com/gpu", "0")) > 0, name
    return nodes


@pytest.fixture(scope="module")
def upgrade_lab():
    with started_lab(operator_version=START) as lab:
        require_real_operator(lab, "chart upgrades need the GPU Operator's upstream sources (../shared/upstream)")
        served = lab.state().get("chart_versions", ())
        missing = [version for version in (START,) + tuple(step[1] for step in PATH) if version not in served]
        if missing:
            if upstream.upstream_required():
                pytest.fail("LAB_REQUIRE_UPSTREAM=1, yet the lab's chart repository has no %s" % ", ".join(missing))
            pytest.skip("the lab's chart repository has no %s (their sources are not at hand)" % ", ".join(missing))
        yield lab


def test_chart_upgrades_and_a_rollback_with_the_real_operators(upgrade_lab):
    lab = upgrade_lab
    lab.apply_fleet_labels()
    lab.install_operator(values_for(START), version=START)
    assert_end_state(lab, START, wait_step(lab, START))
    seen = {}
    for what, version in PATH:
        lab.install_operator(values_for(version), version=version)
        nodes = assert_end_state(lab, version, wait_step(lab, version))
        seen[(what, version)] = dict((name, (n.metadata.labels or {}).get(CLIENT_LABEL)) for name, n in nodes.items()
                                     if (n.metadata.labels or {}).get(om.DEPLOY_LABEL_PREFIX + "device-plugin"))
    # v26.7.0's operator writes the client deploy label on every GPU node it deploys the device plugin to.
    client_labels = seen[("upgrade", "v26.7.0")]
    assert client_labels and all(client_labels.values()), client_labels
    # lab-up of the start version refuses this lab, which runs v26.3.3 now, and leaves it running.
    with pytest.raises(LabError, match="runs GPU Operator v26.3.3, not v26.3.2"):
        Lab(workdir=lab.workdir, operator_version=START).up()
    assert lab.is_up()
