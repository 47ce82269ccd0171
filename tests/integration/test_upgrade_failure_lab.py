"""A failed upgrade of the GPU Operator chart, through the real helm-controller and helm
(issue 35): what each HelmChart failurePolicy does to the running release, and how the
collection resumes after one. The bad value is one no values check can catch: a quantity the
API server refuses, so `helm upgrade` fails half-way and records the new revision failed."""

import copy
import json

import pytest
from kubernetes import client

from tests.integration.conftest import FLEET_VALUES
from tests.integration.gpu_operator import helmchart, role_runner
from tests.integration.kube import wait_for
from tests.integration.modules import run_module

NS = "gpu-operator"
JOB = "helm-install-gpu-operator"
# The API server refuses the operator Deployment with it; nothing before the API can tell.
BAD_CPU = "two-cores"
# What the API server says of it. helm v3 (client-side apply) repeats the object with the value; helm v4's
# server-side apply error does not name the value, only the rule it breaks: the collection's report of the failed
# revision names it from helm's record of the values (helm_release.failure_report), on either line.
REFUSED = "quantities must match the regular expression"


def _bad_values():
    values = copy.deepcopy(FLEET_VALUES)
    values.setdefault("operator", {}).setdefault("resources", {}).setdefault("limits", {})["cpu"] = BAD_CPU
    return values


def _running(lab):
    """What the release runs: {kind/name: uid} of the operand DaemonSets, their pods, the
    operator Deployment and the ClusterPolicy."""
    apps = client.AppsV1Api(lab.api)
    found = dict(("daemonset/" + d.metadata.name, d.metadata.uid)
                 for d in apps.list_namespaced_daemon_set(NS).items)
    found.update(("pod/" + p.metadata.name, p.metadata.uid) for p in lab.core().list_namespaced_pod(NS).items
                 if any(o.kind == "DaemonSet" for o in p.metadata.owner_references or ()))
    found.update(("deployment/" + d.metadata.name, d.metadata.uid)
                 for d in apps.list_namespaced_deployment(NS).items)
    for policy in client.CustomObjectsApi(lab.api).list_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies")["items"]:
        found["clusterpolicy/" + policy["metadata"]["name"]] = policy["metadata"]["uid"]
    return found


def _release(lab, **args):
    return run_module("helmchart_release", dict({"name": "gpu-operator", "namespace": NS}, **args), lab.kubeconfig)


def _job_said(lab, text):
    """Waits until a run of the install Job ended saying ``text`` (its termination message)."""
    def said(pods):
        for pod in pods.values():
            for status in pod.status.container_statuses or ():
                for state in (status.state, status.last_state):
                    if state and state.terminated and text in (state.terminated.message or ""):
                        return True
        return False
    wait_for(lab.core().list_namespaced_pod, said, timeout=240, namespace="kube-system",
             label_selector="job-name=" + JOB)


def _installed(lab, failure_policy):
    """The fleet's values installed under ``failure_policy`` and settled: what then runs (_running)."""
    lab.install_operator(FLEET_VALUES, failure_policy=failure_policy)
    waited = run_module("helmchart_wait", {"name": "gpu-operator", "timeout": 240}, lab.kubeconfig)
    assert not waited.get("failed"), waited
    lab.wait_settled(timeout=240)
    return _running(lab)


@pytest.fixture
def release_lab(gpu_lab):
    yield gpu_lab
    # Whatever the test left (a failed upgrade, a failed install with no deployed revision to resume):
    # reinstall puts the fleet's values back from any of them.
    gpu_lab.install_operator(FLEET_VALUES, failure_policy="reinstall")
    assert run_module("helmchart_wait", {"name": "gpu-operator", "timeout": 300}, gpu_lab.kubeconfig).get("failed") \
        is None
    gpu_lab.wait_settled(timeout=240)


def test_with_abort_a_failed_upgrade_leaves_the_running_release_alone(real_operator, release_lab):
    lab = release_lab
    before = _installed(lab, "abort")
    deployed = _release(lab)["deployed"]
    assert deployed and deployed["chart_version"] == lab.operator_version(), deployed

    lab.install_operator(_bad_values(), failure_policy="abort")
    waited = run_module("helmchart_wait", {"name": "gpu-operator", "timeout": 240}, lab.kubeconfig)
    assert waited.get("failed"), waited
    assert REFUSED in waited["msg"], waited["msg"]
    # The next run of the Job finds the release failed and, told to abort, changes nothing.
    _job_said(lab, "failure policy is 'abort'")
    release = _release(lab)
    assert release["failed_upgrade"]["revision"] == release["current"]["revision"], release
    assert release["deployed"]["revision"] == deployed["revision"], release
    assert REFUSED in release["failed_upgrade"]["description"], release
    assert 'operator.resources.limits.cpu null -> "%s"' % BAD_CPU in release["failed_upgrade"]["message"], release
    # Same objects, same pods: nothing was deleted or replaced.
    assert _running(lab) == before

    # The way out: the fixed values, and the failed record resumed.
    lab.install_operator(FLEET_VALUES, failure_policy="abort")
    checked = run_module("helmchart_release", {"name": "gpu-operator", "namespace": NS, "resume_failed_upgrade": True,
                                               "_ansible_check_mode": True}, lab.kubeconfig)
    assert checked["changed"] and checked["removed"] == release["failed_upgrade"]["record"], checked
    assert _release(lab)["current"]["status"] == "failed"
    resumed = _release(lab, resume_failed_upgrade=True)
    assert resumed["changed"] and resumed["current"]["revision"] == deployed["revision"], resumed
    # Installed: the Job of the fixed chart complete AND helm's deployed revision carrying the
    # chart's version and values (release_namespace). The fix is the values that ran before: the
    # same revision when helm-controller finds nothing to run, or an upgrade to the same values.
    waited = run_module("helmchart_wait", {"name": "gpu-operator", "release_namespace": NS, "timeout": 240},
                        lab.kubeconfig)
    assert waited.get("failed") is None, waited
    after = _release(lab)
    assert after["current"]["status"] == "deployed" and after["failed_upgrade"] is None, after
    assert _release(lab, resume_failed_upgrade=True)["changed"] is False
    lab.wait_settled(timeout=240)
    assert _running(lab) == before


def test_with_reinstall_a_failed_upgrade_uninstalls_the_release(real_operator, release_lab):
    """helm-controller's default: the next Job run uninstalls the failed release and installs it
    again. The uninstall deletes the ClusterPolicy (the operand DaemonSets it owns go with it)
    and the operator Deployment; the new install fails on the same value, so no operator is left.
    (In the lab the operator runs outside its Deployment and adopts the DaemonSets for the new
    ClusterPolicy before the garbage collector removes them; on a node its pod is gone too.)"""
    lab = release_lab
    before = _installed(lab, "reinstall")
    assert "clusterpolicy/cluster-policy" in before and "deployment/gpu-operator" in before, sorted(before)

    lab.install_operator(_bad_values(), failure_policy="reinstall")
    _job_said(lab, "Uninstalling failed helm chart")
    # The install after the uninstall fails on the same value: helm's history starts again at 1.
    release = _release(lab)
    assert [(rev["revision"], rev["status"]) for rev in release["revisions"]] == [(1, "failed")], release
    assert release["deployed"] is None and release["failed_upgrade"] is None, release
    after = _running(lab)
    assert "deployment/gpu-operator" not in after, sorted(after)
    assert after.get("clusterpolicy/cluster-policy") not in (None, before["clusterpolicy/cluster-policy"]), after


def test_the_role_names_the_failing_value_refuses_to_build_on_it_and_resumes(real_operator, release_lab, tmp_path):
    lab = release_lab
    role = role_runner(lab, tmp_path)
    first = role()
    assert first.returncode == 0, str(first)
    before = _running(lab)
    deployed = _release(lab)["deployed"]

    bad = role("-e", json.dumps({"gpu_operator_extra_values": {"operator": {"resources": {"limits": {"cpu": BAD_CPU}}}}}))
    assert bad.returncode != 0
    # The wait's failure names helm's message, the value the upgrade changed, what still runs and the way back.
    assert "operator.resources.limits.cpu null -> \"%s\"" % BAD_CPU in bad.stdout, str(bad)
    assert "revision %d (chart %s) still runs" % (deployed["revision"], deployed["chart_version"]) in bad.stdout
    assert REFUSED in bad.stdout
    assert "gpu_operator_rollback=true -e gpu_operator_resume_failed_upgrade=true" in bad.stdout
    assert _running(lab) == before

    # Fixed, but not told to resume: refused before anything is delivered.
    refused = role()
    assert refused.returncode != 0
    assert refused.outcomes("Refuse to build on a failed upgrade unless told to resume it") == ["fatal"], str(refused)
    assert refused.outcomes("Apply the HelmChart through the API (server-side apply)") == []
    assert BAD_CPU in helmchart(lab)["spec"]["valuesContent"]

    resumed = role("-e", "gpu_operator_resume_failed_upgrade=true")
    assert resumed.returncode == 0, str(resumed)
    assert resumed.outcomes("Resume after the failed upgrade (remove its record; the deployed revision becomes "
                            "current)") == ["changed"]
    release = _release(lab)
    assert release["current"]["status"] == "deployed" and release["failed_upgrade"] is None, release
    assert BAD_CPU not in helmchart(lab)["spec"]["valuesContent"]
    lab.wait_settled(timeout=240)
    assert _running(lab) == before
    # Nothing left to resume: the option changes nothing on the next run.
    again = role("-e", "gpu_operator_resume_failed_upgrade=true")
    assert again.returncode == 0 and again.recap["changed"] == 0, str(again)
