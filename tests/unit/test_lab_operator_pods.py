"""The player of the GPU Operator image's pods (tests/lab/operator_pods.py): which version an
image runs, what the upgrade hook's manage-crds is given, which pods are left alone."""

import pytest

from tests.lab import operator_pods as op


@pytest.mark.parametrize("image, version", [
    ("nvcr.io/nvidia/gpu-operator:v26.3.3", "v26.3.3"),
    ("registry.lab.invalid:5000/nvidia/gpu-operator:26.7.0", "v26.7.0"),
    ("nvcr.io/nvidia/gpu-operator:v26.3.1", None),
    ("nvcr.io/nvidia/gpu-operator:main-latest", None),
    ("registry.lab.invalid:5000/nvidia/gpu-operator", None),
    ("nvcr.io/nvidia/gpu-operator@sha256:" + "0" * 64, None),
])
def test_the_image_tag_names_the_version_the_lab_runs(image, version):
    assert op.image_version(image) == version


def test_the_upgrade_hook_files_are_read_from_its_arguments():
    container = {"command": ["/usr/bin/manage-crds"], "args": [
        "apply", "--filepath=/opt/gpu-operator/nvidia.com_clusterpolicies.yaml",
        "--filepath", "/opt/gpu-operator/nfd-api-crds.yaml"]}
    assert op.crd_files(container) == ["/opt/gpu-operator/nvidia.com_clusterpolicies.yaml",
                                       "/opt/gpu-operator/nfd-api-crds.yaml"]
    assert op.crd_files({"command": ["/usr/bin/manage-crds"], "args": ["delete", "--filepath=/x"]}) is None
    assert op.crd_files({"command": ["gpu-operator"], "args": ["--leader-elect"]}) is None


def _pod(**status):
    return {"metadata": {"name": "p", "uid": "u"}, "spec": {"nodeName": "cpu-1"}, "status": status}


def test_only_a_scheduled_live_pod_not_yet_played_is_played():
    assert not op.handled(_pod(phase="Pending"))
    assert op.handled(_pod(phase="Running", conditions=[{"type": "Ready", "status": "True"}]))
    assert op.handled(_pod(phase="Succeeded"))
    unscheduled = _pod(phase="Pending")
    unscheduled["spec"] = {}
    assert op.handled(unscheduled)
    going = _pod(phase="Pending")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert op.handled(going)


def test_a_finished_hook_pod_says_its_exit_status():
    container = {"name": "upgrade-crd", "image": "nvcr.io/nvidia/gpu-operator:v26.3.3"}
    ok = op.finished(container, 0, "applied", "now")["status"]
    failed = op.finished(container, 1, "refused", "now")["status"]
    assert ok["phase"] == "Succeeded" and ok["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert failed["phase"] == "Failed" and failed["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    ready = op.running(container, "now")["status"]
    assert ready["phase"] == "Running" and {"type": "Ready", "status": "True", "lastTransitionTime": "now"} in \
        ready["conditions"]
