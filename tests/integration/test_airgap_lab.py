"""Air-gapped site against the lab (issue 10): the simulated nodes pull only from the site
mirror (the HelmChart annotation lab.gpuplatform.invalid/mirror-registry), so an operand
whose image is outside it sits in ImagePullBackOff, as on a hospital site. The role with
gpu_operator_image_registry runs with every image in the mirror; an image the plan missed
shows up in gpu_node_check as a failure of that operand's layer on each node that runs it."""

import json
import os

import pytest
import yaml
from kubernetes import client

from tests.integration.gpu_operator import (HELMCHART, assert_applied, helmchart, manifest_values, role_runner,
                                            running_operands, wait_mirror_enforced, without_operator)
from tests.integration.modules import run_module
from tests.lab.gpu_operator_sim import CHART_VALUES
from tests.lab.node_agent import MIRROR_ANNOTATION

NS = "gpu-operator"
MIRROR = "registry.lab.invalid"
# The lab's GPU nodes the operand DaemonSets reach (gpu-tainted-1's taint keeps them off).
REACHABLE = ("gpu-container-1", "gpu-container-2", "gpu-passthrough-1", "gpu-vgpu-1", "gpu-spark-1")
CONTAINER_NODES = ("gpu-container-1", "gpu-container-2", "gpu-spark-1")
# gpu-spark-1 (arm64) brings its own driver: no driver pod there.
HOST_DRIVER_NODES = ("gpu-spark-1",)
# The lab's nodes have no OS labels; the driver image plan needs the OS tag.
AIRGAP_ARGS = ("-e", "gpu_operator_image_registry=%s" % MIRROR, "-e", '{"gpu_operator_driver_os_tags": ["ubuntu22.04"]}')


@pytest.fixture(scope="module")
def airgap_lab(lab):
    without_operator(lab)
    yield lab
    without_operator(lab)


@pytest.fixture
def role(airgap_lab, tmp_path):
    return role_runner(airgap_lab, tmp_path)


def _chart_default_image(block):
    with open(CHART_VALUES) as handle:
        values = yaml.safe_load(handle)[block]
    return "%s/%s:%s" % (values["repository"], values["image"], values["version"])


def _resource_version(obj):
    return (obj or {}).get("metadata", {}).get("resourceVersion")


def _annotate_mirror(lab, mirror):
    client.CustomObjectsApi(lab.api).patch_namespaced_custom_object(
        *(HELMCHART + ({"metadata": {"annotations": {MIRROR_ANNOTATION: mirror}}},)))


def _pull_failures(lab):
    """[(node, pod, image, reason)] of operand pods whose containers wait on an image pull."""
    failures = []
    for pod in lab.core().list_namespaced_pod(NS).items:
        for status in pod.status.container_statuses or []:
            waiting = status.state.waiting if status.state else None
            if waiting and waiting.reason in ("ImagePullBackOff", "ErrImagePull"):
                failures.append((pod.spec.node_name, pod.metadata.name, status.image, waiting.reason))
    return failures


def test_the_role_puts_every_reference_in_the_mirror_or_refuses_before_changing_anything(airgap_lab, role):
    before = helmchart(airgap_lab)
    # An image no repository rewrite reaches: refused, naming where it is, before any change.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
           "spec": {"containers": [{"name": "probe", "image": "docker.io/library/busybox:1"}]}}
    refused = role(*(AIRGAP_ARGS + ("-e", json.dumps({"gpu_operator_extra_values": {"extraObjects": [pod]}}))))
    assert refused.returncode != 0
    assert "extraObjects[0].spec.containers[0].image: docker.io/library/busybox:1 is outside the mirror %s" % MIRROR \
        in refused.stdout, str(refused)
    assert refused.recap["changed"] == 0
    assert _resource_version(helmchart(airgap_lab)) == _resource_version(before)
    assert not os.path.exists(role.manifest)

    # A repository outside the mirror, even in the extra values, is rewritten into it.
    outside = {"gpu_operator_extra_values": {"devicePlugin": {"repository": "nvcr.io/nvidia"}}}
    rendered = role(*(AIRGAP_ARGS + ("-e", json.dumps(outside), "-e", "gpu_operator_delivery=none")))
    assert rendered.returncode == 0, str(rendered)
    assert manifest_values(role.manifest)["devicePlugin"]["repository"] == MIRROR + "/nvidia"
    assert _resource_version(helmchart(airgap_lab)) == _resource_version(before)


def test_with_every_image_in_the_mirror_no_operand_waits_on_a_pull(airgap_lab, role):
    assert_applied(role(*AIRGAP_ARGS))
    # The plan the site mirrors: every source image with its place in the mirror.
    with open(role.images) as handle:
        plan = [l.split("  #")[0].split(" -> ") for l in handle.read().splitlines() if l and not l.startswith("#")]
    assert plan and all(len(p) == 2 and p[1].startswith(MIRROR + "/") for p in plan), plan
    assert [_chart_default_image("devicePlugin"), MIRROR + "/nvidia/k8s-device-plugin:" +
            _chart_default_image("devicePlugin").rsplit(":", 1)[1]] in plan
    # The fleet's arm64 DGX Spark runs the device plugin but keeps its own driver.
    with open(role.images) as handle:
        platforms = dict((l.split(" -> ")[0], l.rsplit("[", 1)[1].rstrip("]")) for l in handle.read().splitlines()
                         if l.endswith("]"))
    assert platforms[_chart_default_image("devicePlugin")] == "linux/amd64, linux/arm64"
    assert [v for k, v in platforms.items() if "/driver:" in k] == ["linux/amd64"]

    # From now on the nodes reach nothing but the mirror.
    _annotate_mirror(airgap_lab, MIRROR)
    wait_mirror_enforced(airgap_lab, MIRROR)
    assert _pull_failures(airgap_lab) == []
    images = [c.image for p in airgap_lab.core().list_namespaced_pod(NS).items
              for c in (p.spec.init_containers or []) + p.spec.containers]
    assert images and all(i.startswith(MIRROR + "/") for i in images), images
    check = run_module("gpu_node_check", {"nodes": list(REACHABLE)}, kubeconfig=airgap_lab.kubeconfig)
    assert not check.get("failed"), check.get("findings")

    # The role again, with the mirror enforced: nothing to change, and its waits pass.
    again = role(*AIRGAP_ARGS)
    assert_applied(again)
    assert again.recap["changed"] == 0, str(again)


def test_an_image_the_plan_missed_is_a_device_plugin_layer_failure_on_each_node_that_runs_it(airgap_lab, role):
    rendered = role(*(AIRGAP_ARGS + ("-e", "gpu_operator_delivery=none")))
    assert rendered.returncode == 0, str(rendered)
    values = manifest_values(role.manifest)
    assert values["devicePlugin"]["repository"] == MIRROR + "/nvidia"
    # The one image left out of the mirror: the device plugin at the chart's default.
    values["devicePlugin"]["repository"] = "nvcr.io/nvidia"
    missed = _chart_default_image("devicePlugin")
    # A first install: on an upgrade the DaemonSet controller replaces one node's pod at a
    # time (RollingUpdate, maxUnavailable 1) and stops at the first that never turns Ready,
    # so only one node would show the missed image while the others keep the old pods.
    without_operator(airgap_lab)
    airgap_lab.install_operator(values, annotations={MIRROR_ANNOTATION: MIRROR})
    wait_mirror_enforced(airgap_lab, MIRROR)
    # Only the device plugin's pods (both their containers run that image) wait on the pull.
    failures = _pull_failures(airgap_lab)
    assert sorted(set((f[0], f[2]) for f in failures)) == [(n, missed) for n in CONTAINER_NODES]
    assert all(f[1].startswith("nvidia-device-plugin-daemonset-") for f in failures), failures

    check = run_module("gpu_node_check", {}, kubeconfig=airgap_lab.kubeconfig)
    assert check["failed"]
    for node in CONTAINER_NODES:
        report = check["nodes"][node]
        # The node's first broken layer is the device plugin's, stuck on the pull, naming the image.
        first = report["layer_failures"][0]
        assert (first["layer"], first["operand"]) == ("device-plugin", "device-plugin"), report
        assert first["reason"] == "ImagePullBackOff: %s" % missed, first
        assert [f["message"] for f in check["findings"] if f["node"] == node and f.get("operand") == "device-plugin"
                and f["code"] == "missing-operand"] == [
            "device-plugin is not running: %s" % first["reason"]]
        # Everything below it runs.
        below = {"container-toolkit"} if node in HOST_DRIVER_NODES else {"driver", "container-toolkit"}
        assert below <= running_operands(airgap_lab)[node]
    for node in ("gpu-passthrough-1", "gpu-vgpu-1"):
        assert check["nodes"][node]["ok"] and check["nodes"][node]["layer_failures"] == [], node
