"""helm's release records read as helm reads them (module_utils/k8s/helm_release.py), and
module helmchart_release: which revision is current and deployed, a failed upgrade above a
deployed revision found, and resumed only as it was read."""
import base64
import gzip
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s import helm_release as hr
from ansible_collections.gpuplatform.rke2.plugins.modules import helmchart_release
from tests.unit.k8s_fake import FakeCluster


def record(revision, status, chart_version="v26.3.2", name="gpu-operator", description=None, gzipped=True,
           values=None):
    """A release record Secret as the API returns it (helm's own encoding under the Secret's base64)."""
    body = {"name": name, "namespace": "gpu-operator", "version": revision, "config": values or {},
            "info": {"status": status, "description": description or "Upgrade complete"},
            "chart": {"metadata": {"name": "gpu-operator", "version": chart_version, "appVersion": chart_version}}}
    raw = json.dumps(body).encode()
    helm_text = base64.b64encode(gzip.compress(raw) if gzipped else raw)
    return {"metadata": {"name": "sh.helm.release.v1.%s.v%d" % (name, revision), "namespace": "gpu-operator",
                         "uid": "uid-%d" % revision, "resourceVersion": str(10 + revision),
                         "labels": {"owner": "helm", "name": name, "status": status, "version": str(revision)}},
            "type": hr.SECRET_TYPE, "data": {"release": base64.b64encode(helm_text).decode()}}


def test_history_is_ordered_by_revision_not_by_name():
    # v10 sorts before v9 as text; helm's order is the number.
    revisions = hr.history([record(10, "deployed"), record(9, "superseded"), record(2, "superseded")], "gpu-operator")
    assert [r["revision"] for r in revisions] == [2, 9, 10]
    assert hr.current(revisions)["revision"] == 10 and hr.last_deployed(revisions)["revision"] == 10


def test_records_of_another_release_and_plain_json_payloads():
    revisions = hr.history([record(1, "deployed", gzipped=False), record(3, "deployed", name="gpu-operator-extra")],
                           "gpu-operator")
    assert [(r["release"], r["revision"], r["chart_version"]) for r in revisions] == [("gpu-operator", 1, "v26.3.2")]


def test_a_failed_upgrade_is_the_failed_current_revision_above_a_deployed_one():
    assert hr.failure_report(hr.history([record(1, "deployed")], "gpu-operator")) is None
    revisions = hr.history([record(1, "superseded"), record(2, "deployed"),
                            record(3, "failed", "v26.3.3", description="Upgrade \"gpu-operator\" failed: x")],
                           "gpu-operator")
    failed, deployed = hr.failed_upgrade(revisions)
    assert (failed["revision"], failed["chart_version"], deployed["revision"]) == (3, "v26.3.3", 2)
    assert "failed: x" in failed["description"]
    assert hr.summary(failed) == "revision 3 (chart v26.3.3, failed)"


@pytest.mark.parametrize("statuses", [
    [],                                     # never installed
    ["deployed"],                           # nothing failed
    ["failed"],                             # a failed install: nothing deployed to go back to
    ["deployed", "failed", "deployed"],     # an older failure, since mended
    ["superseded", "pending-upgrade"],      # interrupted, not failed: klipper-helm resets it itself
])
def test_nothing_else_is_a_failed_upgrade(statuses):
    revisions = hr.history([record(i + 1, s) for i, s in enumerate(statuses)], "gpu-operator")
    assert hr.failed_upgrade(revisions) is None


def test_a_record_helm_did_not_write_is_refused():
    bad = record(1, "deployed")
    bad["data"]["release"] = base64.b64encode(b"not base64 at all!").decode()
    with pytest.raises(hr.RecordError, match="not a helm release record"):
        hr.history([bad], "gpu-operator")


def test_the_failure_report_names_the_values_the_failed_upgrade_changed():
    running = {"driver": {"enabled": True}, "operator": {"resources": {"limits": {"cpu": "500m"}}}}
    bad = {"driver": {"enabled": True}, "operator": {"resources": {"limits": {"cpu": "two-cores"}}}}
    report = hr.failure_report(hr.history([record(1, "deployed", values=running),
                                           record(2, "failed", "v26.3.3", values=bad)], "gpu-operator"))
    assert report["values_changed"] == {"operator.resources.limits.cpu": ["500m", "two-cores"]}
    assert (report["revision"], report["deployed_revision"], report["deployed_chart_version"]) == (2, 1, "v26.3.2")
    assert "values" not in report


class Cluster(FakeCluster):
    replaced_once = ()

    def delete_secret(self, namespace, name, uid, resource_version):
        self.calls.append(("delete", name, uid, resource_version))
        self.apply("secrets", "DELETED", self.world["secrets"][namespace + "/" + name])
        return True

    def suspend_job(self, namespace, name, uid):
        # The job controller's answer: the Job's pods go (and the record still stands then).
        assert "sh.helm.release.v1.gpu-operator.v3" in "".join(self.world["secrets"]), "suspended after the removal"
        replaced = self.replaced_once.pop() if self.replaced_once else None
        if replaced:
            # helm-controller replaced the Job (same name) between the read and this write.
            self.calls.append(("suspend-refused", name, uid))
            raise k8s_wait.ApiError(409, "Precondition failed: UID in precondition: %s" % uid)
        self.calls.append(("suspend", name, uid))
        for key, pod in list(self.world.get("pods", {}).items()):
            self.apply("pods", "DELETED", pod)

    def delete_job(self, namespace, name, uid):
        assert any(c[0] == "delete" and c[1].startswith("sh.helm") for c in self.calls), "deleted after the record"
        self.calls.append(("delete-job", name, uid))
        self.apply("jobs", "DELETED", self.world["jobs"]["%s/%s" % (namespace, name)])
        return True


VALUES_OK = "operator:\n  resources: {}\n"
VALUES_BAD = "operator:\n  resources:\n    limits:\n      cpu: two-cores\n"


def helmchart(values, job="helm-install-gpu-operator"):
    return {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "gpu-operator", "namespace": "kube-system"},
            "spec": {"chart": "gpu-operator", "version": "v26.3.3", "valuesContent": values},
            "status": {"jobName": job}}


def install_job(complete=False):
    status = {"failed": 2, "active": 1}
    if complete:
        status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    return {"metadata": {"name": "helm-install-gpu-operator", "namespace": "kube-system", "uid": "job-uid"},
            "spec": {"suspend": False}, "status": status}


def job_pod():
    return {"metadata": {"name": "helm-install-gpu-operator-x", "namespace": "kube-system",
                         "labels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
            "status": {"phase": "Running"}}


def aborting_release(chart_values=VALUES_BAD, complete=False):
    """A failed upgrade whose install Job (made for ``chart_values``) still retries."""
    cluster = failed_release()
    cluster.world["helmcharts"] = {"kube-system/gpu-operator": helmchart(chart_values)}
    cluster.world["jobs"] = {"kube-system/helm-install-gpu-operator": install_job(complete)}
    cluster.world["pods"] = {} if complete else {"kube-system/helm-install-gpu-operator-x": job_pod()}
    return cluster


def test_the_job_of_the_values_that_failed_is_held_before_the_record_goes(module):
    """The fixed chart is delivered next: the suspended Job stays for helm-controller to replace."""
    cluster = aborting_release()
    rc, result = module(cluster, resume_failed_upgrade=True, chart=helmchart(VALUES_OK))
    assert rc == 0 and result["changed"], result
    acts = [c[:2] for c in cluster.calls if c[0] in ("suspend", "delete", "delete-job")]
    assert acts == [("suspend", "helm-install-gpu-operator"), ("delete", "sh.helm.release.v1.gpu-operator.v3")]
    assert result["install_job"] == {"name": "helm-install-gpu-operator", "action": "hold"}


def test_a_chart_that_stays_gets_its_job_restarted_after_the_record_goes(module, tmp_path):
    cluster = aborting_release(chart_values=VALUES_OK)
    src = tmp_path / "gpu-operator.yaml"
    src.write_text("# rendered\n---\n" + json.dumps(helmchart(VALUES_OK)))
    rc, result = module(cluster, resume_failed_upgrade=True, chart_src=str(src))
    assert rc == 0 and result["install_job"] == {"name": "helm-install-gpu-operator", "action": "restart"}, result
    acts = [c[:2] for c in cluster.calls if c[0] in ("suspend", "delete", "delete-job")]
    assert acts == [("suspend", "helm-install-gpu-operator"), ("delete", "sh.helm.release.v1.gpu-operator.v3"),
                    ("delete-job", "helm-install-gpu-operator")]
    assert [c for c in cluster.calls if c[0] == "delete-job"][0][2] == "job-uid"


def test_a_job_replaced_between_the_read_and_the_suspension_is_read_again(module):
    cluster = aborting_release()
    cluster.replaced_once = ["job-uid"]
    rc, result = module(cluster, resume_failed_upgrade=True, chart=helmchart(VALUES_OK))
    assert rc == 0 and result["install_job"]["action"] == "hold", result
    assert [c[0] for c in cluster.calls if c[0].startswith("suspend")] == ["suspend-refused", "suspend"]
    assert cluster.count("list", "jobs") == 2


def test_check_mode_names_the_job_it_would_hold_and_touches_nothing(module):
    cluster = aborting_release()
    rc, result = module(cluster, check_mode=True, resume_failed_upgrade=True, chart=helmchart(VALUES_OK))
    assert rc == 0 and result["changed"] and result["install_job"]["action"] == "hold"
    assert not [c for c in cluster.calls if c[0] in ("suspend", "delete", "delete-job")]


def test_a_finished_job_is_left_alone(module):
    cluster = aborting_release(complete=True)
    rc, result = module(cluster, resume_failed_upgrade=True, chart=helmchart(VALUES_OK))
    assert rc == 0 and result["changed"] and result["install_job"] is None
    assert [c[0] for c in cluster.calls if c[0] in ("suspend", "delete", "delete-job")] == ["delete"]


def test_an_unreadable_chart_src_is_named_before_anything_changes(module, tmp_path):
    cluster = aborting_release()
    src = tmp_path / "two.yaml"
    src.write_text("a: 1\n---\nb: 2\n")
    rc, result = module(cluster, resume_failed_upgrade=True, chart_src=str(src))
    assert rc == 1 and result["msg"].startswith("chart_src: %s cannot be read as a HelmChart" % src), result
    assert not [c for c in cluster.calls if c[0] in ("suspend", "delete", "delete-job")]


@pytest.mark.parametrize("job, next_chart, action", [
    (None, None, None),
    (install_job(complete=True), helmchart(VALUES_OK), None),
    (install_job(), None, hr.JOB_RESTART),
    (install_job(), helmchart(VALUES_BAD, job="another-status"), hr.JOB_RESTART),
    (install_job(), helmchart(VALUES_OK), hr.JOB_HOLD),
])
def test_install_job_action(job, next_chart, action):
    assert hr.install_job_action(helmchart(VALUES_BAD), job, next_chart) == action


def test_a_job_failed_for_good_is_finished():
    failed = {"status": {"failed": 7, "conditions": [{"type": "Failed", "status": "True"}]}}
    assert hr.job_finished(failed) and not hr.job_finished(install_job())


def test_a_pod_being_deleted_may_still_run():
    ended = {"status": {"phase": "Failed"}}
    terminating = {"metadata": {"deletionTimestamp": "2026-12-05T00:00:00Z"}, "status": {"phase": "Running"}}
    assert hr.job_pods_stopped([]) and hr.job_pods_stopped([ended])
    assert not hr.job_pods_stopped([ended, terminating])


@pytest.fixture
def module(monkeypatch, capsys):
    def runner(cluster, check_mode=False, diff=False, **args):
        monkeypatch.setattr(k8s_wait, "connect", lambda params: cluster)
        args = dict(dict(name="gpu-operator", namespace="gpu-operator"), _ansible_check_mode=check_mode,
                    _ansible_diff=diff, **args)
        with patch_module_args(args):
            with pytest.raises(SystemExit) as info:
                helmchart_release.main()
        return info.value.code, json.loads(capsys.readouterr().out)
    return runner


def failed_release():
    return Cluster(secrets=[record(1, "superseded"), record(2, "deployed", values={"a": 1}),
                            record(3, "failed", "v26.3.3", values={"a": 2})])


def test_the_module_reports_and_changes_nothing_by_default(module):
    cluster = failed_release()
    rc, result = module(cluster)
    assert rc == 0 and not result["changed"] and result["removed"] is None
    assert (result["current"]["revision"], result["deployed"]["revision"], result["failed_upgrade"]["revision"]) \
        == (3, 2, 3)
    assert result["deployed_values"] == {"a": 1} and result["failed_upgrade"]["values_changed"] == {"a": [1, 2]}
    assert not any("values" in rev for rev in result["revisions"])
    assert not [c for c in cluster.calls if c[0] == "delete"]


def test_check_mode_names_the_record_it_would_remove(module):
    cluster = failed_release()
    rc, result = module(cluster, check_mode=True, diff=True, resume_failed_upgrade=True)
    assert rc == 0 and result["changed"] and result["removed"] == "sh.helm.release.v1.gpu-operator.v3"
    assert result["diff"] == {"before": "revision 3 (chart v26.3.3, failed)\n",
                              "after": "revision 2 (chart v26.3.2, deployed)\n"}
    assert not [c for c in cluster.calls if c[0] == "delete"]


def test_resume_removes_the_failed_record_as_it_was_read_and_then_changes_nothing(module):
    cluster = failed_release()
    rc, result = module(cluster, resume_failed_upgrade=True)
    assert rc == 0 and result["changed"], result
    deletes = [c for c in cluster.calls if c[0] == "delete"]
    # Preconditions: the uid and resourceVersion of the record as listed.
    assert deletes == [("delete", "sh.helm.release.v1.gpu-operator.v3", "uid-3", "13")]
    assert result["current"]["revision"] == 2 and result["current"]["status"] == "deployed"
    rc, again = module(cluster, resume_failed_upgrade=True)
    assert rc == 0 and not again["changed"] and again["failed_upgrade"] is None


def test_a_failed_install_is_not_resumed(module):
    cluster = Cluster(secrets=[record(1, "failed")])
    rc, result = module(cluster, resume_failed_upgrade=True)
    assert rc == 0 and not result["changed"] and result["deployed"] is None
    assert not [c for c in cluster.calls if c[0] == "delete"]


@pytest.mark.parametrize("args, message", [
    ({"name": "GPU_operator"}, "name must be an RFC 1123 name, got 'GPU_operator'"),
    ({"namespace": ""}, "namespace must be an RFC 1123 name, got ''"),
    ({"timeout": 0}, "timeout must be a positive number of seconds, got 0"),
])
def test_bad_options_are_named_before_connecting(module, args, message):
    cluster = failed_release()
    rc, result = module(cluster, **args)
    assert rc == 1 and result["msg"] == message
    assert cluster.calls == []
