"""The watch-based wait engine (module_utils/k8s_wait.py) on a scripted API stream and
simulated time; the real adapter (KubeApi) against a local HTTP stub of the API."""
import json
import socket
import threading
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_wait import (
    ApiError, KubeApi, WaitFailed, Waiter, by_name, classify, objects, resource)
from tests.unit.api_stub import QuietHandler, send_chunk, send_head, send_json
from tests.unit.k8s_fake import FakeCluster

NODES = resource("nodes", "v1", "nodes")
PODS = resource("pods", "v1", "pods", namespace="gpu-operator")


def node(name, gpus=0):
    return {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def gpus(obj):
    return int(obj["status"]["allocatable"]["nvidia.com/gpu"])


def all_nodes_have(count, at_least=1):
    def condition(cache):
        nodes = objects(cache, "nodes")
        ready = [n["metadata"]["name"] for n in nodes if gpus(n) >= count]
        return len(nodes) >= at_least and len(ready) == len(nodes), {"ready": ready, "nodes": len(nodes)}
    return condition


def run(cluster, resources, condition, timeout=300, progress=None):
    return Waiter(cluster, resources, timeout).wait(condition, progress)


def watches(cluster, key=None):
    return [c for c in cluster.calls if c[0] == "watch" and (key is None or c[1] == key)]


# ---------------------------------------------------------------- the basic cycle

def test_condition_true_on_the_first_list_returns_without_a_watch():
    cluster = FakeCluster(nodes=[node("gpu-1", 2)])
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert result.detail == {"ready": ["gpu-1"], "nodes": 1}
    assert result.api_requests == {"list": 1, "watch": 0, "total": 1}
    assert result.elapsed == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("k8s-wait:")]


def test_becomes_true_after_events_and_watches_from_the_lists_resource_version():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    list_version = str(cluster.rv)
    cluster.script("nodes", [("advance", 4), ("MODIFIED", node("gpu-1", 1)), ("advance", 3),
                             ("MODIFIED", node("gpu-1", 2)), ("advance", 50), ("MODIFIED", node("gpu-1", 0))])
    seen = []
    result = run(cluster, [NODES], all_nodes_have(2), progress=lambda detail, t: seen.append((t, detail["ready"])))
    assert result.done
    assert result.elapsed == 7
    assert seen == [(0, []), (4, []), (7, ["gpu-1"])]
    # The first list, the watch, and the list that confirms the success seen on the watch.
    assert result.api_requests == {"list": 2, "watch": 1, "total": 3}
    assert watches(cluster)[0][2] == list_version
    # The watch lasts as long as the wait may (under its 5 to 10 minute renewal); a
    # silence past the bookmark interval ends it.
    assert watches(cluster)[0][3:] == (300, k8s_wait.WATCH_IDLE_TIMEOUT)


def test_a_deleted_object_leaves_the_cache():
    cluster = FakeCluster(nodes=[node("gpu-1", 2), node("gpu-2", 0)])
    cluster.script("nodes", [("advance", 1), ("DELETED", node("gpu-2", 0))])
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done and result.detail == {"ready": ["gpu-1"], "nodes": 1}
    assert list(result.cache["nodes"]) == ["gpu-1"]


def test_a_node_joining_mid_wait_counts():
    cluster = FakeCluster(nodes=[node("gpu-1", 2)])
    cluster.script("nodes", [("advance", 20), ("ADDED", node("gpu-2", 0)), ("advance", 5), ("MODIFIED", node("gpu-2", 2))])
    result = run(cluster, [NODES], all_nodes_have(2, at_least=2))
    assert result.done
    assert result.elapsed == 25
    assert result.detail["ready"] == ["gpu-1", "gpu-2"]


def test_a_bookmark_moves_the_resource_version_of_the_next_watch():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("advance", 30), ("silent", "pods", "ADDED", {"metadata": {"name": "p"}}), ("BOOKMARK",),
                             ("end",)],
                   [("MODIFIED", node("gpu-1", 2))])
    bookmark = str(cluster.rv + 1)
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert [w[2] for w in watches(cluster)] == [str(cluster.rv - 2), bookmark]
    # A watch the server ends after its time is routine: no relist, no backoff.
    assert cluster.count("list") == 2 and cluster.clock.sleeps == []
    assert result.relists == 0


def test_the_deadline_ends_the_wait_with_the_last_state():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("advance", 10), ("MODIFIED", node("gpu-1", 1))])
    result = run(cluster, [NODES], all_nodes_have(2), timeout=120)
    assert not result.done
    assert result.elapsed == 120
    assert result.detail == {"ready": [], "nodes": 1}
    assert gpus(result.cache["nodes"]["gpu-1"]) == 1
    # The list, the watch, and the failing wait's last look: one fresh list.
    assert result.api_requests == {"list": 2, "watch": 1, "total": 3} and result.stale == []


def test_every_watch_timeout_derives_from_the_time_left():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("advance", 100.5), ("end",)], [("advance", 150), ("end",)])
    result = run(cluster, [NODES], all_nodes_have(2), timeout=300)
    assert not result.done and result.elapsed == 300
    assert [w[3] for w in watches(cluster)] == [300, 200, 50]
    assert [w[4] for w in watches(cluster)] == [k8s_wait.WATCH_IDLE_TIMEOUT] * 3


def test_zero_timeout_evaluates_once():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    result = run(cluster, [NODES], all_nodes_have(2), timeout=0)
    assert not result.done and result.detail == {"ready": [], "nodes": 1}
    assert result.api_requests == {"list": 1, "watch": 0, "total": 1}


# ---------------------------------------------------------------- 410, errors, restarts

def test_a_410_error_event_relists_at_once_and_watches_from_the_new_list():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("advance", 5), ("silent", "MODIFIED", node("gpu-1", 2)), ("ERROR", 410)])
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done and result.elapsed == 5
    assert cluster.count("list") == 3 and result.relists == 1
    assert cluster.clock.sleeps == []
    assert result.reconnects == 0


def test_an_http_410_on_the_watch_request_relists():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.fail_watch("nodes", ApiError(410, "too old resource version"))
    cluster.script("nodes", [("MODIFIED", node("gpu-1", 2))])
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert cluster.count("list") == 3 and len(watches(cluster)) == 2
    assert watches(cluster)[1][2] == str(cluster.rv - 1)


def test_410s_in_a_row_back_off():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("ERROR", 410)], [("ERROR", 410)], [("ERROR", 410)], [("MODIFIED", node("gpu-1", 2))])
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert cluster.clock.sleeps == [1.0, 2.0]
    assert cluster.count("list") == 5


def test_a_dropped_connection_reconnects_with_capped_exponential_backoff():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    refused = ApiError(0, "connection refused")
    cluster.script("nodes", [("advance", 2), ("drop", 0)], [("advance", 1), ("MODIFIED", node("gpu-1", 2))])
    cluster.fail_list("nodes", None, *([refused] * 6))
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert cluster.clock.sleeps == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert result.elapsed == 2 + sum(cluster.clock.sleeps) + 1
    assert result.reconnects == 7 and result.relists == 1
    assert result.api_requests == {"list": 9, "watch": 2, "total": 11}


def test_an_api_server_restart_mid_wait_is_ridden_through():
    cluster = FakeCluster(nodes=[node("gpu-1", 0), node("gpu-2", 0)])
    cluster.script(
        "nodes",
        # gpu-1 gets its GPUs, then the API server goes away (RKE2 restarts).
        [("advance", 3), ("MODIFIED", node("gpu-1", 2)), ("advance", 1), ("drop", 0)],
        # Back: the fresh list shows gpu-1 and a change of gpu-2 made during the outage.
        [("advance", 2), ("MODIFIED", node("gpu-2", 2))],
    )
    cluster.fail_list("nodes", None, ApiError(0, "connection refused"), ApiError(503, "apiserver is starting"))
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert result.detail["ready"] == ["gpu-1", "gpu-2"]
    assert cluster.clock.sleeps == [0.5, 1.0, 2.0]
    assert result.elapsed == 3 + 1 + 3.5 + 2
    assert result.reconnects == 3


def test_server_errors_on_the_watch_request_back_off_and_relist():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.fail_watch("nodes", ApiError(500, "etcdserver: leader changed"), ApiError(504, "timeout"))
    cluster.script("nodes", [("MODIFIED", node("gpu-1", 2))])
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert cluster.clock.sleeps == [0.5, 1.0]
    assert cluster.count("list") == 4


def test_a_watch_the_server_closes_at_once_is_backed_off():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("end",)], [("end",)], [("end",)], [("advance", 2), ("MODIFIED", node("gpu-1", 2))])
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert cluster.clock.sleeps == [0.5, 1.0, 2.0]
    assert cluster.count("list") == 2 and len(watches(cluster)) == 4


def test_an_error_retrying_cannot_mend_fails_the_wait_with_its_message():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("advance", 1), ("ERROR", 403)])
    with pytest.raises(WaitFailed, match="watching nodes failed: HTTP 403"):
        run(cluster, [NODES], all_nodes_have(2))


def test_a_feeder_that_dies_of_an_unforeseen_error_fails_the_wait_at_once():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.fail_watch("nodes", ValueError("Cannot shutdown socket"))
    with pytest.raises(WaitFailed, match="watching nodes failed: ValueError: Cannot shutdown socket"):
        run(cluster, [NODES], all_nodes_have(2))
    assert cluster.clock.now() < 300


def test_a_forbidden_first_list_fails_at_once():
    cluster = FakeCluster(nodes=[])
    cluster.fail_list("nodes", ApiError(403, 'nodes is forbidden: User "x" cannot list resource "nodes"'))
    with pytest.raises(WaitFailed, match="listing nodes failed: HTTP 403: nodes is forbidden"):
        run(cluster, [NODES], all_nodes_have(2))


def test_an_unreachable_api_at_the_start_is_retried():
    cluster = FakeCluster(nodes=[node("gpu-1", 2)])
    cluster.fail_list("nodes", ApiError(0, "connection refused"), ApiError(0, "connection refused"))
    result = run(cluster, [NODES], all_nodes_have(2))
    assert result.done
    assert cluster.clock.sleeps == [0.5]
    assert result.reconnects == 2


def test_a_timeout_during_an_outage_names_the_stale_kind():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("drop", 0)])
    cluster.fail_list("nodes", None, *([ApiError(0, "connection refused")] * 100))
    result = run(cluster, [NODES], all_nodes_have(2), timeout=30)
    assert not result.done and result.elapsed == 30
    assert result.stale == ["nodes"]
    assert max(cluster.clock.sleeps) == 5.0


# ---------------------------------------------------------------- several kinds

def device_plugin_pod(ready):
    return {"metadata": {"name": "nvidia-device-plugin-daemonset-x", "namespace": "gpu-operator"},
            "status": {"phase": "Running", "containerStatuses": [{"ready": ready}]}}


def gpus_and_plugin(cache):
    pods = objects(cache, "pods")
    plugin_ready = bool(pods) and all(cs["ready"] for p in pods for cs in p["status"]["containerStatuses"])
    ready = [n["metadata"]["name"] for n in objects(cache, "nodes") if gpus(n) >= 2]
    return bool(ready) and plugin_ready, {"ready": ready, "plugin_ready": plugin_ready}


def test_several_kinds_are_watched_together():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)], pods=[device_plugin_pod(False)])
    cluster.script("pods", [("advance", 2), ("MODIFIED", device_plugin_pod(True)), ("open", "plugin-ready")])
    cluster.script("nodes", [("wait", "plugin-ready"), ("advance", 1), ("MODIFIED", node("gpu-1", 2))])
    result = run(cluster, [NODES, PODS], gpus_and_plugin)
    assert result.done and result.elapsed == 3
    assert result.api_requests == {"list": 4, "watch": 2, "total": 6}


def test_success_is_never_decided_on_a_stale_kind():
    # The device plugin pod was Ready when the pods watch broke; during the outage it
    # went into CrashLoopBackOff. The node's GPUs arrive while pods are stale: the old
    # pod cache would say "done"; the fresh list says otherwise.
    cluster = FakeCluster(nodes=[node("gpu-1", 0)], pods=[device_plugin_pod(True)])
    cluster.script("pods", [("advance", 1), ("silent", "MODIFIED", device_plugin_pod(False)), ("drop", 0)])
    cluster.gate_list("pods", 2, "node-event-sent")
    cluster.script("nodes", [("wait", "pods-list-2"), ("MODIFIED", node("gpu-1", 2)), ("open", "node-event-sent")])
    result = run(cluster, [NODES, PODS], gpus_and_plugin, timeout=60)
    assert not result.done
    assert result.detail == {"ready": ["gpu-1"], "plugin_ready": False}
    assert result.stale == []


def test_the_same_story_without_the_outage_succeeds():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)], pods=[device_plugin_pod(True)])
    cluster.script("nodes", [("advance", 1), ("MODIFIED", node("gpu-1", 2))])
    result = run(cluster, [NODES, PODS], gpus_and_plugin, timeout=60)
    assert result.done and result.elapsed == 1


def test_an_optional_kind_that_is_not_served_counts_as_none_until_it_is():
    policies = resource("clusterpolicies", "nvidia.com/v1", "clusterpolicies", optional=True)
    cluster = FakeCluster(nodes=[node("gpu-1", 2)], clusterpolicies=[{"metadata": {"name": "cluster-policy"}}])
    cluster.fail_list("clusterpolicies", ApiError(404, "the server could not find the requested resource"),
                      ApiError(404, "the server could not find the requested resource"))

    def condition(cache):
        return bool(objects(cache, "clusterpolicies")), len(objects(cache, "clusterpolicies"))

    result = run(cluster, [NODES, policies], condition)
    assert result.done
    assert cluster.count("list", "clusterpolicies") == 4
    assert cluster.clock.sleeps == [0.5]


def test_a_missing_kind_that_is_not_optional_fails():
    cluster = FakeCluster(nodes=[])
    cluster.fail_list("nodes", ApiError(404, "the server could not find the requested resource"))
    with pytest.raises(WaitFailed, match="404"):
        run(cluster, [NODES], all_nodes_have(2))


# ---------------------------------------------------------------- cost against polling

def polled_requests(length, interval=5):
    """The baseline: `kubectl get` every ``interval`` seconds until it sees the change
    that happens ``length`` seconds into the wait."""
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    requests = 0
    while True:
        if cluster.clock.now() >= length:
            cluster.apply("nodes", "MODIFIED", node("gpu-1", 2))
        items, _rv = cluster.list(NODES, 30)
        requests += 1
        if all_nodes_have(2)({"nodes": dict((o["metadata"]["name"], o) for o in items)})[0]:
            return requests
        cluster.clock.advance(interval)


@pytest.mark.parametrize("length", [10, 100, 1000])
def test_the_request_count_does_not_grow_with_the_waits_length(length):
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("advance", length), ("MODIFIED", node("gpu-1", 2))])
    result = run(cluster, [NODES], all_nodes_have(2), timeout=3600)
    assert result.done and result.elapsed == length
    # One list and the confirming one; the watch is renewed every 5 to 10 minutes.
    assert result.api_requests["list"] == 2
    assert 1 + length // (2 * k8s_wait.WATCH_RENEW_MIN) <= result.api_requests["watch"] <= 1 + length // k8s_wait.WATCH_RENEW_MIN
    # Polling every 5 s pays one request per interval, and notices up to 5 s late.
    assert polled_requests(length) == length // 5 + 1


# ---------------------------------------------------------------- input checks and helpers

def test_keys_must_be_unique_and_the_timeout_not_negative():
    cluster = FakeCluster()
    with pytest.raises(ValueError, match="unique"):
        Waiter(cluster, [NODES, NODES], 10)
    with pytest.raises(ValueError, match="timeout"):
        Waiter(cluster, [NODES], -1)


def test_classify_and_by_name():
    assert [classify(ApiError(s, "")) for s in (410, 404, 0, 429, 500, 503, 504, 401, 403, 422)] == [
        "gone", "not-found", "transient", "transient", "transient", "transient", "transient", "fatal", "fatal", "fatal"]
    res = by_name("deployment", "apps/v1", "deployments", "gpu-operator", namespace="gpu-operator")
    assert res.field_selector == "metadata.name=gpu-operator" and res.namespace == "gpu-operator"


# ---------------------------------------------------------------- the real adapter over HTTP

class _StubApi(object):
    """A tiny HTTP API server: /api/v1/nodes lists and watches from scripts."""

    def __init__(self):
        self.lists = []
        self.watches = []
        self.requests = []
        stub = self

        class Handler(QuietHandler):

            def do_GET(self):
                stub.requests.append(self.path)
                if "watch=true" in self.path:
                    lines, hold = stub.watches.pop(0)
                    send_head(self, 200, chunked=True)
                    try:
                        for line in lines:
                            send_chunk(self, (json.dumps(line) + "\n").encode())
                        if hold == "cut":
                            # The API server goes away mid-watch: no terminating chunk.
                            self.connection.shutdown(socket.SHUT_RDWR)
                            self.close_connection = True
                            return
                        if hold:
                            # Keep the watch open until the client goes away.
                            self.connection.settimeout(30)
                            self.connection.recv(1)
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                status, body = stub.lists.pop(0)
                send_json(self, status, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def host(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    server = _StubApi()
    yield server
    server.close()


def _kube_api(host):
    from kubernetes import client
    configuration = client.Configuration()
    configuration.host = host
    return KubeApi(client.ApiClient(configuration))


def _node_list(rv, *nodes):
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": list(nodes)}


def test_kube_api_lists_and_watches_plain_dicts_over_http(stub):
    stub.lists.append((200, _node_list("7", node("gpu-1", 0))))
    modified = dict(node("gpu-1", 2), metadata={"name": "gpu-1", "resourceVersion": "9"})
    stub.watches.append(([{"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "8"}}},
                          {"type": "MODIFIED", "object": modified}], True))
    # The list that confirms what the watch showed.
    stub.lists.append((200, _node_list("9", modified)))
    result = Waiter(_kube_api(stub.host), [resource("nodes", "v1", "nodes", label_selector="nvidia.com/gpu.present=true")],
                    60).wait(all_nodes_have(2))
    assert result.done
    assert result.api_requests == {"list": 2, "watch": 1, "total": 3}
    path, query = stub.requests[0].split("?")
    assert (path, parse_qs(query)) == ("/api/v1/nodes", {"labelSelector": ["nvidia.com/gpu.present=true"]})
    path, query = stub.requests[1].split("?")
    assert (path, parse_qs(query)) == ("/api/v1/nodes", {
        "labelSelector": ["nvidia.com/gpu.present=true"], "watch": ["true"], "allowWatchBookmarks": ["true"],
        "resourceVersion": ["7"], "timeoutSeconds": ["60"]})


def test_kube_api_relists_after_an_expired_watch_over_http(stub):
    stub.lists.append((200, _node_list("7", node("gpu-1", 0))))
    stub.lists.append((200, _node_list("20", node("gpu-1", 0))))
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 7 (15)"}
    stub.watches.append(([{"type": "ERROR", "object": expired}], False))
    modified = dict(node("gpu-1", 2), metadata={"name": "gpu-1", "resourceVersion": "21"})
    stub.watches.append(([{"type": "MODIFIED", "object": modified}], True))
    stub.lists.append((200, _node_list("21", modified)))
    result = Waiter(_kube_api(stub.host), [NODES], 60).wait(all_nodes_have(2))
    assert result.done and result.relists == 1
    assert "resourceVersion=20" in stub.requests[3]


def test_kube_api_relists_after_the_server_cut_a_watch_over_http(stub):
    # urllib3 closes a response whose connection broke; closing the stream again must not
    # kill the kind's feeder, or the wait would sit out its deadline on a frozen cache.
    stub.lists.append((200, _node_list("7", node("gpu-1", 0))))
    stub.lists.append((200, _node_list("30", node("gpu-1", 0))))
    stub.watches.append(([{"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "8"}}}],
                         "cut"))
    modified = dict(node("gpu-1", 2), metadata={"name": "gpu-1", "resourceVersion": "31"})
    stub.watches.append(([{"type": "MODIFIED", "object": modified}], True))
    stub.lists.append((200, _node_list("31", modified)))
    result = Waiter(_kube_api(stub.host), [NODES], 60, backoff_initial=0.01).wait(all_nodes_have(2))
    assert result.done and result.reconnects == 1 and result.relists == 1
    assert result.api_requests == {"list": 3, "watch": 2, "total": 5}
    assert "resourceVersion=30" in stub.requests[3]


def test_kube_api_drops_managed_fields_but_where_a_wait_reads_them(stub):
    # A fleet's pods and nodes are held without their managedFields (half their memory); a HelmChart keeps them
    # (helmchart_wait reads when its spec last changed). Nothing else of the object changes.
    fields = [{"manager": "kwok", "operation": "Update", "time": "2026-01-01T00:00:00Z", "fieldsV1": {"f:status": {}}}]
    listed = dict(node("gpu-1", 0), metadata={"name": "gpu-1", "resourceVersion": "5", "managedFields": fields,
                                              "labels": {"a": "b"}})
    stub.lists.append((200, _node_list("7", listed)))
    modified = dict(node("gpu-1", 2), metadata={"name": "gpu-1", "resourceVersion": "9", "managedFields": fields})
    stub.watches.append(([{"type": "MODIFIED", "object": modified}], False))
    api = _kube_api(stub.host)
    items, _version = api.list(NODES, 5)
    assert items[0]["metadata"] == {"name": "gpu-1", "resourceVersion": "5", "labels": {"a": "b"}}
    assert [e["object"]["metadata"] for e in api.watch(NODES, "7", 5, 5)] == [{"name": "gpu-1", "resourceVersion": "9"}]
    chart = {"metadata": {"name": "gpu-operator", "namespace": "kube-system", "managedFields": fields}, "spec": {}}
    stub.lists.append((200, {"metadata": {"resourceVersion": "3"}, "items": [chart]}))
    charts, _version = api.list(resource("helmcharts", "helm.cattle.io/v1", "helmcharts", namespace="kube-system"), 5)
    assert charts == [chart]


def test_kube_api_turns_http_and_connection_failures_into_api_errors(stub):
    stub.lists.append((403, {"kind": "Status", "code": 403, "message": 'nodes is forbidden: User "x"'}))
    api = _kube_api(stub.host)
    with pytest.raises(ApiError) as info:
        api.list(NODES, 5)
    assert info.value.status == 403 and 'nodes is forbidden: User "x"' in info.value.message

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    closed = _kube_api("http://127.0.0.1:%d" % port)
    with pytest.raises(ApiError) as info:
        closed.list(NODES, 5)
    assert info.value.status == 0 and classify(info.value) == "transient"


def test_kube_api_maps_every_core_kind_to_the_clients_list_function():
    from kubernetes import client
    api = KubeApi(client.ApiClient(client.Configuration()))
    for plural, (_singular, namespaced) in k8s_wait._CORE_KINDS.items():
        for namespace in (("gpu-operator", None) if namespaced else (None,)):
            function, args = api._list_function(resource(plural, "v1", plural, namespace=namespace))
            assert callable(function) and args == ((namespace,) if namespace else ())
    function, args = api._list_function(resource("jobs", "batch/v1", "jobs", namespace="kube-system"))
    assert function == api.custom.list_namespaced_custom_object and args == ("batch", "v1", "kube-system", "jobs")
    with pytest.raises(ValueError, match="does not know the core kind 'bindings'"):
        api._list_function(resource("bindings", "v1", "bindings"))


def test_a_waiter_waits_once():
    waiter = Waiter(FakeCluster(nodes=[node("gpu-1", 2)]), [NODES], 10)
    assert waiter.wait(all_nodes_have(2)).done
    with pytest.raises(RuntimeError, match="waits once"):
        waiter.wait(all_nodes_have(2))


def test_connect_builds_the_adapter_from_connection_options(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "lab", "user": {"token": "t"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}],
    }))
    api = k8s_wait.connect({"kubeconfig": str(kubeconfig)})
    assert isinstance(api, KubeApi)
    assert api.core.api_client.configuration.host == "https://127.0.0.1:6443"


def _operand_pod(name, node_name, **spec):
    """An operand pod as the API serves it: most of its spec is volumes, env and mounts."""
    container = {"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:580.95.05",
                 "resources": {"limits": {"memory": "1Gi"}}, "env": [{"name": "DRIVER_VERSION", "value": "580"}],
                 "volumeMounts": [{"name": "run-nvidia", "mountPath": "/run/nvidia"}],
                 "securityContext": {"privileged": True}, "startupProbe": {"exec": {"command": ["true"]}}}
    body = {"nodeName": node_name, "containers": [container], "initContainers": [dict(container, name="k8s-driver-manager")],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}},
            "nodeSelector": {"nvidia.com/gpu.deploy.driver": "true"},
            "volumes": [{"name": "run-nvidia", "hostPath": {"path": "/run/nvidia"}}], "hostPID": True,
            "serviceAccountName": "nvidia-driver"}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "gpu-operator", "resourceVersion": "4", "labels": {"app": name},
                         "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {}}]},
            "spec": body,
            "status": {"phase": "Running", "containerStatuses": [{"name": "nvidia-driver-ctr", "ready": True,
                                                                  "image": "nvcr.io/nvidia/driver:580.95.05"}]}}


def test_operand_pods_are_held_with_only_the_spec_the_checks_read(stub):
    # At a thousand GPU nodes the waits hold some 8,000 operand pods; their volumes, env and mounts are most of them.
    pod = _operand_pod("nvidia-driver-daemonset-a", "gpu-1")
    stub.lists.append((200, {"metadata": {"resourceVersion": "7"}, "items": [pod]}))
    stub.watches.append(([{"type": "MODIFIED", "object": pod}], False))
    api = _kube_api(stub.host)
    pods = k8s_wait.operand_pods("gpu-operator")
    listed, _version = api.list(pods, 5)
    watched = [event["object"] for event in api.watch(pods, "7", 5, 5)]
    for got in (listed[0], watched[0]):
        assert sorted(got["spec"]) == ["affinity", "containers", "initContainers", "nodeName", "nodeSelector",
                                       "tolerations"]
        assert got["spec"]["containers"] == [{"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:580.95.05",
                                              "resources": {"limits": {"memory": "1Gi"}}}]
        assert got["spec"]["initContainers"][0]["name"] == "k8s-driver-manager"
        assert got["spec"]["affinity"] == pod["spec"]["affinity"] and got["spec"]["nodeName"] == "gpu-1"
        # Metadata and status whole, managedFields dropped as for every kind.
        assert got["metadata"] == {"name": "nvidia-driver-daemonset-a", "namespace": "gpu-operator",
                                   "resourceVersion": "4", "labels": {"app": "nvidia-driver-daemonset-a"}}
        assert got["status"] == pod["status"]
    # A pod read as any other kind (node_drain reads a pod's volumes) keeps its spec.
    stub.lists.append((200, {"metadata": {"resourceVersion": "8"}, "items": [pod]}))
    whole, _version = api.list(resource("pods", "v1", "pods", namespace="gpu-operator"), 5)
    assert whole[0]["spec"] == pod["spec"]


def test_a_pod_spec_of_another_shape_is_left_for_the_read_to_refuse():
    from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
    for spec in ({"containers": "nvidia-driver-ctr"}, {"containers": [5], "volumes": "x"}, {"nodeName": 3}):
        text = json.dumps(dict(_operand_pod("p", "gpu-1"), spec=spec))
        decoded = json.loads(text, object_hook=k8s_wait.with_pod_spec_read)
        with pytest.raises(ko.MalformedObject):
            ko.read("Pod", decoded)


def test_the_check_reads_the_same_fleet_from_operand_pods_held_so():
    # Every verdict, layer, reason and image of the check over the lab's fleet is the same when its pods are
    # decoded as the waits and the check hold them.
    import os
    from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check
    path = os.path.join(os.path.dirname(__file__), "snapshots", "lab-fleet.yaml")
    with open(path) as handle:
        snapshot = node_check.split_snapshot(node_check.parse_documents(handle.read(), path))
    policy = node_check.policy_from_inputs(snapshot["clusterpolicies"], {}, snapshot["daemonsets"])
    # The lab's pods, each with an operand pod's volumes, env and mounts besides.
    extra = _operand_pod("x", "gpu-1")["spec"]
    for pod in snapshot["pods"]:
        spec = pod.setdefault("spec", {})
        for key in ("volumes", "hostPID", "serviceAccountName"):
            spec.setdefault(key, extra[key])
        for container in spec.get("containers") or ():
            container.setdefault("env", extra["containers"][0]["env"])
    held = dict(snapshot, pods=json.loads(json.dumps(snapshot["pods"]), object_hook=k8s_wait.with_pod_spec_read))
    assert all("volumes" not in pod["spec"] for pod in held["pods"]) and held["pods"]
    assert node_check.check(held, policy) == node_check.check(snapshot, policy)
