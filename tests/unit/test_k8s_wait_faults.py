"""The engine under the faults of issue 21, with the scripted cluster and over HTTP: a
watch that falls silently behind cannot fake a success, an optional kind that answered
before and answers 404 now is not "none", TLS refusals are final, an unchunked watch body
is read as it arrives. The same faults through a real network: tests/integration/test_waits_faults_lab.py."""

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_wait import (
    ApiError, Waiter, classify, objects, resource)
from tests.unit.k8s_fake import FakeCluster

NODES = resource("nodes", "v1", "nodes")
PODS = resource("pods", "v1", "pods", namespace="gpu-operator")
POLICIES = resource("clusterpolicies", "nvidia.com/v1", "clusterpolicies", optional=True)


def node(name, gpus=0):
    return {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def toolkit(ready):
    return {"metadata": {"name": "toolkit", "namespace": "gpu-operator"},
            "status": {"containerStatuses": [{"name": "toolkit", "ready": ready}]}}


def gpus_and_toolkit(cache):
    """A device plugin's GPUs count only over a working toolkit (the shape of
    gpu_allocatable_wait's condition)."""
    advertised = all(int(n["status"]["allocatable"]["nvidia.com/gpu"]) >= 2 for n in objects(cache, "nodes"))
    ready = all(cs["ready"] for p in objects(cache, "pods") for cs in p["status"]["containerStatuses"])
    return advertised and ready, {"gpus": advertised, "toolkit": ready}


def test_a_watch_silently_behind_cannot_fake_a_success_seen_with_a_fresh_kind():
    # The pods watch is stalled (a dropped flow: no byte, no error): the toolkit breaks
    # unseen. Then the nodes watch, fresh, shows the GPUs: on the caches alone that is a
    # success. The confirming list shows the toolkit broken.
    cluster = FakeCluster(nodes=[node("gpu-1", 0)], pods=[toolkit(True)])
    cluster.script("pods", [("silent", "MODIFIED", toolkit(False))])
    cluster.script("nodes", [("advance", 5), ("MODIFIED", node("gpu-1", 2))])
    result = Waiter(cluster, [NODES, PODS], 30).wait(gpus_and_toolkit)
    assert not result.done
    assert result.detail == {"gpus": True, "toolkit": False}
    # Evaluated on the pods as listed: the cache took the list.
    assert result.cache["pods"]["gpu-operator/toolkit"]["status"]["containerStatuses"][0]["ready"] is False


def test_the_confirmed_success_stands_when_every_list_matches_the_caches():
    cluster = FakeCluster(nodes=[node("gpu-1", 0)], pods=[toolkit(True)])
    cluster.script("nodes", [("advance", 5), ("MODIFIED", node("gpu-1", 2))])
    result = Waiter(cluster, [NODES, PODS], 30).wait(gpus_and_toolkit)
    assert result.done and result.elapsed == 5
    assert result.api_requests == {"list": 4, "watch": 2, "total": 6}


def test_a_success_found_on_the_confirming_lists_returns():
    # The stalled pods watch missed the toolkit coming back: the lists show it.
    cluster = FakeCluster(nodes=[node("gpu-1", 0)], pods=[toolkit(False)])
    cluster.script("pods", [("silent", "MODIFIED", toolkit(True))])
    cluster.script("nodes", [("advance", 5), ("MODIFIED", node("gpu-1", 2))])

    def condition(cache):
        return bool(objects(cache, "nodes")) and gpus_and_toolkit(cache)[1]["gpus"], gpus_and_toolkit(cache)[1]

    result = Waiter(cluster, [NODES, PODS], 30).wait(condition)
    assert result.done and result.detail == {"gpus": True, "toolkit": True}


def test_an_optional_kind_that_answered_before_is_stale_not_none_on_a_404():
    # A restarted API server serves a CRD's kind only once it has read the CRD again: a
    # 404 then does not mean "no ClusterPolicy".
    cluster = FakeCluster(clusterpolicies=[{"metadata": {"name": "cluster-policy"}}])
    cluster.script("clusterpolicies", [("advance", 2), ("drop", 0)])
    cluster.fail_list("clusterpolicies", None, *[ApiError(404, "the server could not find the requested resource")] * 40)

    def no_policy(cache):
        return not objects(cache, "clusterpolicies"), len(objects(cache, "clusterpolicies"))

    result = Waiter(cluster, [POLICIES], 60).wait(no_policy)
    assert not result.done
    assert result.stale == ["clusterpolicies"]


@pytest.mark.parametrize("error, fatal", [
    (urllib3.exceptions.SSLError(ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate "
                                                                 "verify failed: self-signed certificate")), True),
    (urllib3.exceptions.SSLError(ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_EXPIRED] sslv3 alert certificate "
                                                 "expired")), True),
    (urllib3.exceptions.SSLError(ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert "
                                                 "certificate required")), True),
    # A connection cut inside a TLS record: the network, not the configuration.
    (urllib3.exceptions.SSLError(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")), False),
    (urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(100 bytes read, 900 more expected)"), False),
])
def test_tls_refusals_are_final_and_say_so(error, fatal):
    api_error = k8s_wait._api_error(error)  # pylint: disable=protected-access
    assert classify(api_error) == ("fatal" if fatal else "transient")
    assert api_error.message.startswith("TLS: ") is fatal


def test_a_tls_refusal_the_kubernetes_client_wrapped_is_found_in_its_chain():
    # kubernetes.client.rest turns urllib3's SSLError into ApiException(status=0) whose
    # reason is only the text; what the lab's wrong certificate showed.
    from kubernetes.client.exceptions import ApiException
    verify = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    api_error = None
    try:
        try:
            raise urllib3.exceptions.SSLError(verify)
        except urllib3.exceptions.SSLError as exc:
            raise ApiException(status=0, reason="SSLError\n%s" % exc)
    except ApiException as wrapped:
        api_error = k8s_wait._api_error(wrapped)  # pylint: disable=protected-access
    assert classify(api_error) == "fatal"
    assert api_error.message.startswith("TLS: the API server's certificate is not trusted")


class _Unchunked(BaseHTTPRequestHandler):
    """A watch answered the way a proxy may pass it on: no chunking, no length, the body
    ends when the connection does. The connection stays open after the event."""
    protocol_version = "HTTP/1.1"
    event = {"type": "MODIFIED", "object": dict(node("gpu-1", 2), metadata={"name": "gpu-1", "resourceVersion": "8"})}

    def log_message(self, *args):
        pass

    def do_GET(self):
        if "watch=true" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write((json.dumps(self.event) + "\n").encode())
            self.wfile.flush()
            self.server.release.wait(60)
            return
        rv = "7" if self.server.lists == 0 else "8"
        items = [node("gpu-1", 0)] if self.server.lists == 0 else [self.event["object"]]
        self.server.lists += 1
        data = json.dumps({"metadata": {"resourceVersion": rv}, "items": items}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_an_unchunked_watch_body_is_read_as_it_arrives():
    from kubernetes import client
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unchunked)
    server.daemon_threads = True
    server.lists = 0
    server.release = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        configuration = client.Configuration()
        configuration.host = "http://127.0.0.1:%d" % server.server_address[1]
        api = k8s_wait.KubeApi(client.ApiClient(configuration))

        def has_gpus(cache):
            nodes = objects(cache, "nodes")
            return bool(nodes) and nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "2", None

        # Read to its end, the body would give the event only when the server closes,
        # which it does not before the wait's deadline.
        result = Waiter(api, [NODES], 20).wait(has_gpus)
        assert result.done
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
