"""Draining a node as kubectl drain does (module_utils/node_drain.py, module node_drain): which
pods go and which stay, refusals before anything changes, cordon, evictions a
PodDisruptionBudget refuses asked again, the evicted pods watched until gone, one deadline;
on the scripted fake cluster in simulated time, with cordon and evict recorded."""
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_drain as nd
from ansible_collections.gpuplatform.rke2.plugins.modules import node_drain
from tests.unit.k8s_fake import FakeCluster
from tests.unit.wait_builders import node


def pod(name, on="gpu-1", owner="ReplicaSet", phase="Running", annotations=None, volumes=None, uid=None):
    meta = {"name": name, "namespace": "apps", "uid": uid or "uid-" + name}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": name + "-owner", "controller": True}]
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"nodeName": on, "volumes": volumes or []}, "status": {"phase": phase}}


# ---------------------------------------------------------------- which pods go

def test_plan_follows_kubectl_drain():
    pods = [pod("web"), pod("agent", owner="DaemonSet"), pod("etcd", owner="Node",
                                                             annotations={"kubernetes.io/config.mirror": "x"}),
            pod("done", owner=None, phase="Succeeded"), pod("elsewhere", on="gpu-2")]
    steps = nd.plan(pods, "gpu-1")
    assert steps["evict"] == ["apps/done", "apps/web"]
    assert sorted(steps["skip"]) == ["apps/agent", "apps/etcd"]
    assert "static pod" in steps["skip"]["apps/etcd"] and "DaemonSet" in steps["skip"]["apps/agent"]
    assert steps["refuse"] == {}


def test_unowned_pods_and_emptydir_data_are_refused_unless_accepted():
    pods = [pod("bare", owner=None), pod("cache", volumes=[{"name": "c", "emptyDir": {}}])]
    steps = nd.plan(pods, "gpu-1")
    assert steps["evict"] == []
    assert "no controller owns it" in steps["refuse"]["apps/bare"]
    assert "emptyDir data would be lost" in steps["refuse"]["apps/cache"]
    assert nd.plan(pods, "gpu-1", delete_emptydir_data=True, force=True)["evict"] == ["apps/bare", "apps/cache"]


# ---------------------------------------------------------------- the module

class FakeRequests(object):
    """Cordon and evict on the fake cluster: ``evictions`` scripts each pod's answers
    (blocked, then evicted); an evicted pod is gone at once unless ``lingers``."""

    def __init__(self, cluster, evictions=None, lingers=()):
        self.cluster = cluster
        self.evictions = dict((k, list(v)) for k, v in (evictions or {}).items())
        self.lingers = set(lingers)
        self.calls = []

    def set_unschedulable(self, name, unschedulable, mark=None):
        self.calls.append(("cordon" if unschedulable else "uncordon", name) + (() if mark is None else (mark,)))
        obj = dict(self.cluster.world["nodes"][name])
        obj["spec"] = dict(obj.get("spec") or {}, unschedulable=unschedulable)
        if mark is not None:
            annotations = dict(obj["metadata"].get("annotations") or {}, **{nd.CORDON_MARK: mark})
            obj["metadata"] = dict(obj["metadata"], annotations=dict((k, v) for k, v in annotations.items() if v))
        self.cluster.apply("nodes", "MODIFIED", obj)

    def evict(self, namespace, name):
        key = "%s/%s" % (namespace, name)
        answer = (self.evictions.get(key) or ["evicted"]).pop(0)
        self.calls.append((answer, key))
        if answer == "evicted" and key not in self.lingers:
            self.cluster.apply("pods", "DELETED", self.cluster.world["pods"][key])
        return answer


@pytest.fixture
def drain(monkeypatch, capsys):
    def runner(cluster, requests, check_mode=False, **args):
        monkeypatch.setattr(k8s_wait, "connect", lambda params: cluster)
        monkeypatch.setattr(nd, "requests_for", lambda api: requests)
        with patch_module_args(dict(dict(name="gpu-1", timeout=60), _ansible_check_mode=check_mode, **args)):
            with pytest.raises(SystemExit) as info:
                node_drain.main()
        return info.value.code, json.loads(capsys.readouterr().out)

    return runner


def test_drain_cordons_evicts_and_leaves_daemonset_pods(drain):
    # The fake answers every list with all it has: the node and the pods are picked by name.
    cluster = FakeCluster(nodes=[node("gpu-0", unschedulable=True), node("gpu-1")],
                          pods=[pod("web"), pod("agent", owner="DaemonSet"), pod("db", on="gpu-0")])
    requests = FakeRequests(cluster)
    rc, result = drain(cluster, requests)
    assert rc == 0, result
    assert requests.calls == [("cordon", "gpu-1"), ("evicted", "apps/web")]
    assert result["changed"] and result["cordoned"] and result["evicted"] == ["apps/web"]
    assert list(result["skipped"]) == ["apps/agent"]


def test_evictions_a_budget_refuses_are_asked_again_every_5_seconds(drain):
    cluster = FakeCluster(nodes=[node("gpu-1")], pods=[pod("web")])
    requests = FakeRequests(cluster, evictions={"apps/web": ["blocked", "blocked", "evicted"]})
    rc, result = drain(cluster, requests)
    assert rc == 0, result
    assert [c[0] for c in requests.calls] == ["cordon", "blocked", "blocked", "evicted"]
    assert cluster.clock.sleeps[:2] == [5.0, 5.0]


def test_the_drain_waits_for_the_pod_to_go(drain):
    web = pod("web")
    cluster = FakeCluster(nodes=[node("gpu-1")], pods=[web])
    cluster.script("pods", [("advance", 20), ("DELETED", web)])
    rc, result = drain(cluster, FakeRequests(cluster, lingers=["apps/web"]))
    assert rc == 0, result
    assert 20 <= result["elapsed"] < 60
    assert result["api_requests"]["watch"] >= 1


def test_a_pod_that_stays_fails_at_the_deadline_naming_it(drain):
    cluster = FakeCluster(nodes=[node("gpu-1")], pods=[pod("web")])
    rc, result = drain(cluster, FakeRequests(cluster, lingers=["apps/web"]), timeout=30)
    assert rc == 1
    assert result["msg"] == "gpu-1 not drained within 30s: apps/web still there; the node stays cordoned"


def test_a_budget_that_never_yields_fails_naming_the_pod(drain):
    cluster = FakeCluster(nodes=[node("gpu-1")], pods=[pod("web")])
    rc, result = drain(cluster, FakeRequests(cluster, evictions={"apps/web": ["blocked"] * 20}), timeout=12)
    assert rc == 1
    assert "evicting apps/web is refused by a PodDisruptionBudget (429)" in result["msg"]


def test_refusals_come_before_anything_changes(drain):
    cluster = FakeCluster(nodes=[node("gpu-1")], pods=[pod("web"), pod("bare", owner=None)])
    requests = FakeRequests(cluster)
    rc, result = drain(cluster, requests)
    assert rc == 1
    assert result["msg"].startswith("gpu-1 cannot be drained: apps/bare: no controller owns it")
    assert requests.calls == []


def test_check_mode_reports_and_changes_nothing(drain):
    cluster = FakeCluster(nodes=[node("gpu-1")], pods=[pod("web")])
    requests = FakeRequests(cluster)
    rc, result = drain(cluster, requests, check_mode=True)
    assert rc == 0 and result["changed"] and result["evicted"] == ["apps/web"]
    assert requests.calls == []


def test_a_drained_node_drains_again_without_change_and_uncordons(drain):
    cluster = FakeCluster(nodes=[node("gpu-1", unschedulable=True)], pods=[pod("agent", owner="DaemonSet")])
    requests = FakeRequests(cluster)
    rc, result = drain(cluster, requests)
    assert rc == 0 and not result["changed"] and requests.calls == []
    rc, result = drain(cluster, requests, state="uncordoned")
    assert rc == 0 and result["changed"] and requests.calls == [("uncordon", "gpu-1")]
    rc, result = drain(cluster, requests, state="uncordoned")
    assert rc == 0 and not result["changed"]


def test_a_marked_drain_is_undone_by_a_later_run_and_a_cordon_of_someone_else_stays(drain):
    # The role's retry after a failed upgrade: the run that drained did not get to its uncordon.
    cluster = FakeCluster(nodes=[node("gpu-1"), node("gpu-2", unschedulable=True)], pods=[pod("web")])
    requests = FakeRequests(cluster)
    rc, result = drain(cluster, requests, mark="rke2-upgrade")
    assert rc == 0 and result["cordoned"] and requests.calls[0] == ("cordon", "gpu-1", "rke2-upgrade")
    assert cluster.world["nodes"]["gpu-1"]["metadata"]["annotations"] == {nd.CORDON_MARK: "rke2-upgrade"}
    rc, result = drain(cluster, requests, state="uncordoned", mark="rke2-upgrade")
    assert rc == 0 and result["changed"] and requests.calls[-1] == ("uncordon", "gpu-1", "")
    assert not cluster.world["nodes"]["gpu-1"]["metadata"].get("annotations")
    rc, result = drain(cluster, requests, state="uncordoned", mark="rke2-upgrade")
    assert rc == 0 and not result["changed"]
    calls = list(requests.calls)
    rc, result = drain(cluster, requests, name="gpu-2", state="uncordoned", mark="rke2-upgrade")
    assert rc == 0 and not result["changed"] and requests.calls == calls


def test_an_unknown_node_is_named(drain):
    cluster = FakeCluster(nodes=[node("gpu-2")], pods=[])
    rc, result = drain(cluster, FakeRequests(cluster))
    assert rc == 1 and result["msg"] == "name: there is no node gpu-1 in the cluster"


class _Core(object):
    def __init__(self, error=None):
        self.error = error
        self.calls = []

    def patch_node(self, name, body):
        self.calls.append(("patch_node", name, body))

    def create_namespaced_pod_eviction(self, name, namespace, body):
        self.calls.append(("evict", namespace, name, body))
        if self.error:
            raise self.error


class _Api(object):
    """KubeApi's request path as Requests uses it: core's methods through _call."""

    def __init__(self, error=None):
        self.core = _Core(error)

    @staticmethod
    def _call(function, *args):
        return function(*args)


@pytest.mark.parametrize("error, outcome", [(None, "evicted"), (k8s_wait.ApiError(429, "budget"), "blocked"),
                                            (k8s_wait.ApiError(404, "gone"), "gone")])
def test_requests_send_policy_v1_evictions_and_read_the_answer(error, outcome):
    api = _Api(error)
    assert nd.Requests(api).evict("apps", "web") == outcome
    assert api.core.calls == [("evict", "apps", "web", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                        "metadata": {"name": "web", "namespace": "apps"}})]


def test_requests_raise_other_errors_and_cordon_with_a_patch():
    with pytest.raises(k8s_wait.ApiError):
        nd.Requests(_Api(k8s_wait.ApiError(403, "forbidden"))).evict("apps", "web")
    api = _Api()
    nd.Requests(api).set_unschedulable("gpu-1", True)
    assert api.core.calls == [("patch_node", "gpu-1", {"spec": {"unschedulable": True}})]


def test_a_pod_the_drain_cannot_read_is_named(drain):
    bad = pod("web")
    bad["metadata"]["ownerReferences"] = {"kind": "ReplicaSet"}
    cluster = FakeCluster(nodes=[node("gpu-1")], pods=[bad])
    requests = FakeRequests(cluster)
    rc, result = drain(cluster, requests)
    assert rc == 1 and "pods[0] apps/web: metadata.ownerReferences is a mapping, expected a list" in result["msg"]
    assert requests.calls == []
