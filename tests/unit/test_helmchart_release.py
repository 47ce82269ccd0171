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
    def delete_secret(self, namespace, name, uid, resource_version):
        self.calls.append(("delete", name, uid, resource_version))
        self.apply("secrets", "DELETED", self.world["secrets"][namespace + "/" + name])
        return True


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
