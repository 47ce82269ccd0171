"""The engine and its adapter (KubeApi, over the real kubernetes client and urllib3) against
an HTTP server that misbehaves on purpose (issue 36): bodies trickled a byte at a time,
error bodies too, watches that stay open and bring only bookmarks or bytes that never make
an event, lists paged with ``metadata.continue``, 429 and 503 with ``Retry-After``.

Time bounds here say "bounded", never "fast": each is the deadline plus READ_GRACE plus a
generous 5 s, and every misbehaving answer would last far longer (20 s and more) without
the bound."""

import json
import threading
import time
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import api_client
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_wait import (
    ApiError, KubeApi, WaitFailed, Waiter, classify, objects, resource, retry_after_seconds)
from tests.unit.api_stub import QuietHandler, send_chunk, send_head
from tests.unit.k8s_fake import FakeCluster

NODES = resource("nodes", "v1", "nodes")
SLACK = 5.0  # what a loaded CI machine may add; far below what an unbounded read takes
TRICKLE_SECONDS = 25.0  # how long each trickled answer would take, read to its end


def node(name, gpus=0, rv="5", pad=0):
    meta = {"name": name, "resourceVersion": rv}
    if pad:
        meta["annotations"] = {"pad": "x" * pad}
    return {"metadata": meta, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def node_list(rv, *nodes, **meta):
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": dict(meta, resourceVersion=rv), "items": list(nodes)}


def has_gpus(count):
    def condition(cache):
        found = [int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in objects(cache, "nodes")]
        return bool(found) and min(found) >= count, found
    return condition


# ---------------------------------------------------------------- the misbehaving server

# Every answer says the connection closes after it, as the server then closes it: a client that
# reused it would send its next request into a socket being closed (a failure the server never
# sees, so the requests it records would not be the client's). CI saw that once, under load.
CLOSING = {"Connection": "close"}


class Hostile(object):
    """An API server on 127.0.0.1 answering from two queues of scripted answers, one for
    lists and one for watches (each a function of the request handler); when a queue is
    empty its last answer repeats. Records (time, path) of every request."""

    def __init__(self):
        self.lists = []
        self.watches = []
        self.requests = []
        self.stopping = threading.Event()
        hostile = self

        class Handler(QuietHandler):

            def do_GET(self):
                hostile.requests.append((time.monotonic(), self.path))
                queue = hostile.watches if "watch=true" in self.path else hostile.lists
                answer = queue.pop(0) if len(queue) > 1 else queue[0]
                try:
                    answer(self)
                except OSError:
                    pass  # the client went away (or shut the connection down): as it may
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def api(self):
        """The adapter on the client the modules make (k8s_connection: urllib3 retries
        nothing, so it honours no Retry-After behind the engine's back)."""
        host = "http://127.0.0.1:%d" % self.server.server_address[1]
        return KubeApi(api_client({"host": host}, environ={}))

    def paths(self, watch=None):
        return [p for _t, p in self.requests if watch is None or ("watch=true" in p) == watch]

    def close(self):
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # Answers -----------------------------------------------------------

    def json(self, status, body, headers=None, trickle=None):
        """A JSON answer; ``trickle``: its body one byte at a time over TRICKLE_SECONDS."""
        data = json.dumps(body).encode()

        def answer(handler):
            send_head(handler, status, dict(CLOSING, **(headers or {})), length=len(data))
            if not trickle:
                handler.wfile.write(data)
                return
            for i in range(len(data)):
                if self.stopping.wait(TRICKLE_SECONDS / len(data)):
                    return
                handler.wfile.write(data[i:i + 1])
                handler.wfile.flush()
        return answer

    def stream(self, events=(), then=None, every=0.2, raw=None):
        """A chunked watch: ``events``, then ``then`` (an event, or raw bytes with
        ``raw``) sent again every ``every`` seconds for TRICKLE_SECONDS: the watch stays
        busy and brings nothing."""
        def answer(handler):
            send_head(handler, 200, CLOSING, chunked=True)
            for event in events:
                send_chunk(handler, (json.dumps(event) + "\n").encode())
            ends = time.monotonic() + TRICKLE_SECONDS
            while (then or raw) and time.monotonic() < ends and not self.stopping.wait(every):
                send_chunk(handler, raw if raw else (json.dumps(then) + "\n").encode())
            if not self.stopping.is_set():
                self.stopping.wait(TRICKLE_SECONDS)
        return answer


@pytest.fixture
def hostile():
    server = Hostile()
    yield server
    server.close()


def bookmark(rv):
    return {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": rv}}}


def timed(function, *args):
    started = time.monotonic()
    try:
        return function(*args), time.monotonic() - started
    except ApiError as exc:
        return exc, time.monotonic() - started


# ---------------------------------------------------------------- slow bodies (issue 36, 3)

def test_a_trickled_list_body_ends_at_the_deadline(hostile):
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", pad=300)), trickle=True))
    error, took = timed(hostile.api().list, NODES, 2)
    assert isinstance(error, ApiError) and classify(error) == "transient"
    assert "not read by its deadline" in error.message
    assert took < 2 + k8s_wait.READ_GRACE + SLACK


def test_a_trickled_error_body_ends_at_the_deadline(hostile):
    # The kubernetes client reads a non-2xx body itself, to its end, before it raises.
    status = {"kind": "Status", "code": 503, "message": "x" * 300}
    hostile.lists.append(hostile.json(503, status, trickle=True))
    error, took = timed(hostile.api().list, NODES, 2)
    assert isinstance(error, ApiError) and "not read by its deadline" in error.message
    assert took < 2 + k8s_wait.READ_GRACE + SLACK


def test_a_wait_on_a_trickling_server_ends_at_its_deadline_and_names_the_kind_stale(hostile):
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", pad=300)), trickle=True))
    started = time.monotonic()
    result = Waiter(hostile.api(), [NODES], 2, backoff_initial=0.05).wait(has_gpus(2))
    took = time.monotonic() - started
    assert not result.done and result.stale == ["nodes"]
    assert took < 2 + k8s_wait.READ_GRACE + SLACK


def test_the_modules_deadline_cuts_a_trickled_body_too(hostile):
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", pad=300)), trickle=True))
    api = hostile.api()
    api.deadline = api.clock.now() + 1
    error, took = timed(api.list, NODES, k8s_wait.LIST_READ_TIMEOUT)
    assert isinstance(error, ApiError) and "not read by its deadline" in error.message
    assert took < 1 + k8s_wait.AFTER_DEADLINE_GRACE + SLACK


def test_a_request_cut_at_its_deadline_leaves_the_next_one_whole(hostile):
    # The cutoff shuts only its own connection: the pool serves the next request as usual.
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", pad=300)), trickle=True))
    hostile.lists.append(hostile.json(200, node_list("8", node("gpu-1", 2))))
    api = hostile.api()
    error, _took = timed(api.list, NODES, 1)
    assert isinstance(error, ApiError)
    items, version = api.list(NODES, 5)
    assert version == "8" and items[0]["status"]["allocatable"]["nvidia.com/gpu"] == "2"


# ---------------------------------------------------------------- frozen watches (issue 36, 5)

@pytest.mark.parametrize("frozen", ["bookmarks", "bytes"])
def test_a_watch_alive_without_events_is_dead_after_its_idle_time(hostile, frozen):
    if frozen == "bookmarks":
        hostile.watches.append(hostile.stream(then=bookmark("8")))
    else:
        # An event begun and never finished, a byte at a time.
        hostile.watches.append(hostile.stream(raw=b" "))
    stream = hostile.api().watch(NODES, "7", 60, 1.0)
    started = time.monotonic()
    with pytest.raises(ApiError, match="no event for 1 s") as info:
        list(stream)
    assert classify(info.value) == "transient"
    assert time.monotonic() - started < 1 + SLACK
    stream.close()


def test_events_keep_a_watch_alive_and_it_ends_quietly_at_its_own_end(hostile):
    modified = {"type": "MODIFIED", "object": node("gpu-1", 1, rv="9")}
    hostile.watches.append(hostile.stream(then=modified, every=0.3))
    stream = hostile.api().watch(NODES, "7", 2, 1.0)
    started = time.monotonic()
    events = list(stream)  # the server holds it open past timeoutSeconds: cut there, no error
    assert len(events) >= 3 and all(e["type"] == "MODIFIED" for e in events)
    assert time.monotonic() - started < 2 + k8s_wait.READ_GRACE + SLACK
    stream.close()


def test_a_frozen_watch_is_relisted_and_the_wait_sees_the_change(hostile, monkeypatch):
    # The watch brings only bookmarks while gpu-1 gets its GPUs: after the idle time the
    # kind is re-listed and the wait ends on the list, long before its deadline.
    monkeypatch.setattr(k8s_wait, "WATCH_IDLE_TIMEOUT", 1.0)
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 0))))
    hostile.lists.append(hostile.json(200, node_list("9", node("gpu-1", 2, rv="9"))))
    hostile.watches.append(hostile.stream(then=bookmark("8")))
    hostile.watches.append(hostile.stream())
    # The bookmarks go on past the deadline (TRICKLE_SECONDS): only the idle rule relists.
    result = Waiter(hostile.api(), [NODES], 15, backoff_initial=0.05).wait(has_gpus(2))
    assert result.done and result.detail == [2]
    # Re-listed before the deadline (the last look at the deadline is no relist).
    assert result.relists == 1 and result.elapsed < 15


def test_a_failing_wait_reports_fresh_data_not_what_a_frozen_watch_left(hostile):
    # Shorter than the idle time: the watch is never taken as dead; the wait's last look
    # (one list) shows the node as it is now.
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 0))))
    hostile.lists.append(hostile.json(200, node_list("9", node("gpu-1", 1, rv="9"))))
    hostile.watches.append(hostile.stream(then=bookmark("8")))
    started = time.monotonic()
    result = Waiter(hostile.api(), [NODES], 2).wait(has_gpus(2))
    assert not result.done and result.detail == [1] and result.stale == []
    assert result.api_requests == {"list": 2, "watch": 1, "total": 3}
    assert time.monotonic() - started < 2 + k8s_wait.READ_GRACE + SLACK


def test_the_last_look_finds_a_success_the_frozen_watch_hid():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("advance", 5), ("silent", "MODIFIED", node("gpu-1", 2)), ("BOOKMARK",)])
    result = Waiter(cluster, [NODES], 60).wait(has_gpus(2))
    assert result.done and result.detail == [2] and result.elapsed == 60


def test_the_last_look_names_a_kind_it_could_not_list_stale():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.script("nodes", [("advance", 5), ("silent", "MODIFIED", node("gpu-1", 1))])
    cluster.fail_list("nodes", None, ApiError(0, "connection refused"))
    result = Waiter(cluster, [NODES], 60).wait(has_gpus(2))
    assert not result.done and result.stale == ["nodes"] and result.detail == [0]


def test_a_wait_that_never_watched_does_not_list_again():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    result = Waiter(cluster, [NODES], 0).wait(has_gpus(2))
    assert not result.done and result.api_requests == {"list": 1, "watch": 0, "total": 1}


# ---------------------------------------------------------------- metadata.continue (issue 36, 6)

def test_a_paged_list_is_followed_to_its_last_page(hostile):
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 2), **{"continue": "page-2"})))
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-2", 2), **{"continue": "page-3"})))
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-3", 0))))
    items, version = hostile.api().list(resource("nodes", "v1", "nodes", label_selector="gpu=true"), 5)
    assert [n["metadata"]["name"] for n in items] == ["gpu-1", "gpu-2", "gpu-3"] and version == "7"
    queries = [parse_qs(urlsplit(p).query) for p in hostile.paths()]
    assert [q.get("continue") for q in queries] == [None, ["page-2"], ["page-3"]]
    assert all(q["labelSelector"] == ["gpu=true"] for q in queries)


def test_a_wait_decides_on_every_page_not_the_first(hostile):
    # Not "all nodes have GPUs" on the first page alone: the last page's node has none.
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 2), **{"continue": "page-2"})))
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-2", 0))))
    result = Waiter(hostile.api(), [NODES], 0).wait(has_gpus(2))
    assert not result.done and result.detail == [2, 0]


def test_a_continue_token_answered_twice_is_refused(hostile):
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 2), **{"continue": "again"})))
    with pytest.raises(WaitFailed, match="listing nodes failed: the list of nodes does not end: the server answered "
                                         "metadata.continue 'again' twice"):
        Waiter(hostile.api(), [NODES], 5).wait(has_gpus(2))
    assert len(hostile.paths()) == 2


def test_an_expired_continue_token_lists_again_from_the_start(hostile):
    expired = {"kind": "Status", "code": 410, "reason": "Expired", "message": "continue token expired"}
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 2), **{"continue": "page-2"})))
    hostile.lists.append(hostile.json(410, expired))
    hostile.lists.append(hostile.json(200, node_list("9", node("gpu-1", 2), node("gpu-2", 2))))
    result = Waiter(hostile.api(), [NODES], 10, backoff_initial=0.05).wait(has_gpus(2))
    assert result.done and result.detail == [2, 2]
    assert "continue" not in hostile.paths()[2]


# ---------------------------------------------------------------- Retry-After (issue 36, 6)

def test_retry_after_is_read_as_client_go_reads_it():
    assert retry_after_seconds(429, "3") == 3.0
    assert retry_after_seconds(503, " 0 ") == 0.0
    assert retry_after_seconds(429, None, {"retryAfterSeconds": 2}) == 2.0
    assert retry_after_seconds(429, "Wed, 21 Oct 2026 07:28:00 GMT") is None
    assert retry_after_seconds(429, "-1") is None and retry_after_seconds(429, "1.5") is None
    assert retry_after_seconds(404, "3") is None and retry_after_seconds(410, "3") is None
    assert retry_after_seconds(500, None, "details") is None


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_on_a_list_holds_the_next_request(hostile, status):
    busy = {"kind": "Status", "code": status, "reason": "TooManyRequests", "message": "too many requests"}
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 0))))
    hostile.lists.append(hostile.json(status, busy, headers={"Retry-After": "2"}))
    hostile.lists.append(hostile.json(200, node_list("9", node("gpu-1", 2, rv="9"))))
    # The watch breaks at once: the re-list meets the busy server.
    hostile.watches.append(hostile.json(500, {"kind": "Status", "code": 500, "message": "etcd leader changed"}))
    hostile.watches.append(hostile.stream())
    result = Waiter(hostile.api(), [NODES], 20, backoff_initial=0.05).wait(has_gpus(2))
    assert result.done
    times = [t for t, _p in hostile.requests]
    refused = [i for i, (_t, p) in enumerate(hostile.requests) if "watch=true" not in p][1]
    # The next request came no sooner than the server asked (the backoff alone: 0.1 s).
    assert times[refused + 1] - times[refused] >= 1.9


@pytest.mark.parametrize("refusal", ["header", "error-event"])
def test_retry_after_on_a_watch_holds_the_re_list(hostile, refusal):
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 0))))
    hostile.lists.append(hostile.json(200, node_list("9", node("gpu-1", 2, rv="9"))))
    if refusal == "header":
        hostile.watches.append(hostile.json(429, {"kind": "Status", "code": 429, "message": "throttled"},
                                            headers={"Retry-After": "2"}))
    else:
        # The API server's watch ends with an ERROR event carrying a Status.
        status = {"kind": "Status", "code": 429, "message": "throttled", "details": {"retryAfterSeconds": 2}}
        hostile.watches.append(hostile.stream(events=[{"type": "ERROR", "object": status}]))
    hostile.watches.append(hostile.stream())
    result = Waiter(hostile.api(), [NODES], 20, backoff_initial=0.05).wait(has_gpus(2))
    assert result.done
    # The refused watch is the first the server saw; the next list is the re-list it held.
    t_watch = [t for t, path in hostile.requests if "watch=true" in path][0]
    t_list = [t for t, path in hostile.requests if "watch=true" not in path and t > t_watch][0]
    assert t_list - t_watch >= 1.9


def test_retry_after_past_the_deadline_ends_the_wait_at_the_deadline_without_a_last_look(hostile):
    hostile.lists.append(hostile.json(200, node_list("7", node("gpu-1", 0))))
    hostile.watches.append(hostile.json(429, {"kind": "Status", "code": 429, "message": "throttled"},
                                        headers={"Retry-After": "3600"}))
    started = time.monotonic()
    result = Waiter(hostile.api(), [NODES], 2).wait(has_gpus(2))
    assert not result.done and result.stale == ["nodes"]
    assert len(hostile.requests) == 2
    assert time.monotonic() - started < 2 + k8s_wait.READ_GRACE + SLACK


def test_retry_after_holds_the_next_request_in_simulated_time():
    # The backoff (0.5 s) is part of the hold, not added to it.
    cluster = FakeCluster(nodes=[node("gpu-1", 0)])
    cluster.fail_watch("nodes", ApiError(429, "throttled", retry_after=7.0))
    cluster.script("nodes", [("MODIFIED", node("gpu-1", 2))])
    result = Waiter(cluster, [NODES], 60).wait(has_gpus(2))
    assert result.done
    assert cluster.clock.sleeps == [0.5, 6.5] and result.elapsed == 7
