"""cuda_sample's cleanup against an API server that speaks HTTP and misbehaves on purpose
(issue 36, item 4): deletes that fail or answer slowly at the deadline, and during a signal.
The module runs through the real adapter (KubeApi), whose requests the module's deadline
refuses once it is spent: what the pods' deletes get is their own time (CLEANUP_SECONDS),
and what they leave is named in the result, with the command that removes it."""
import json
import os
import signal
import threading
import urllib.parse
from http.server import ThreadingHTTPServer

import pytest

from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from ansible_collections.gpuplatform.rke2.plugins.modules import cuda_sample
from tests.unit.api_stub import QuietHandler, send_head, send_json

PODS_PATH = "/api/v1/namespaces/default/pods"


def _selected(pod, selector):
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, _sep, v in (term.partition("=") for term in selector.split(",") if term))


class _PodServer(QuietHandler):
    """Pods in namespace default: created Pending, never scheduled; any other list is empty.
    ``server.delete_collection`` / ``server.delete_one``: "ok", or (seconds, status) to
    answer that status after that many seconds. ``server.on_create``: called with each
    created pod."""

    def _send(self, status, body):
        send_json(self, status, body)

    def _status(self, status, message):
        self._send(status, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
                            "message": message})

    def _misbehave(self, how):
        """True when the request was answered with a failure."""
        if how == "ok":
            return False
        delay, status = how
        self.server.stopped.wait(delay)
        self._status(status, "etcdserver: request timed out")
        return True

    def _split(self):
        url = urllib.parse.urlsplit(self.path)
        return url.path, dict(urllib.parse.parse_qsl(url.query))

    def do_GET(self):
        path, query = self._split()
        server = self.server
        if query.get("watch") == "true":
            # A watch that stays silent: the pods never change.
            send_head(self, 200, {"Connection": "close"})
            self.wfile.flush()
            server.stopped.wait(float(query.get("timeoutSeconds") or 60))
            return
        if path.startswith(PODS_PATH + "/"):
            pod = server.pods.get(path[len(PODS_PATH) + 1:])
            if pod is None:
                self._status(404, "pods not found")
            else:
                self._send(200, pod)
            return
        items = []
        if path == PODS_PATH:
            with server.lock:
                items = [p for p in server.pods.values() if _selected(p, query.get("labelSelector", ""))]
        self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": str(server.rv)},
                         "items": items})

    def do_POST(self):
        path, _query = self._split()
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        with server.lock:
            server.rv += 1
            body["metadata"].update(namespace="default", uid="uid-%d" % server.rv, resourceVersion=str(server.rv),
                                    creationTimestamp="2026-01-01T00:00:00Z")
            body["status"] = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}
            server.pods[body["metadata"]["name"]] = body
        assert path == PODS_PATH
        self._send(201, body)
        if server.on_create:
            server.on_create(body)

    def do_DELETE(self):
        path, query = self._split()
        server = self.server
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        if path == PODS_PATH:
            server.requests.append(("deletecollection", query.get("labelSelector")))
            if self._misbehave(server.delete_collection):
                return
            with server.lock:
                gone = [p for p in server.pods.values() if _selected(p, query.get("labelSelector", ""))]
                for pod in gone:
                    del server.pods[pod["metadata"]["name"]]
            self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": gone})
            return
        name = path[len(PODS_PATH) + 1:]
        server.requests.append(("delete", name))
        if self._misbehave(server.delete_one):
            return
        with server.lock:
            pod = server.pods.pop(name, None)
        if pod is None:
            self._status(404, "pods %s not found" % name)
        else:
            self._send(200, pod)


@pytest.fixture
def pod_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PodServer)
    server.daemon_threads = True
    server.pods, server.rv, server.lock = {}, 100, threading.Lock()
    server.stopped = threading.Event()
    server.requests = []
    server.delete_collection = server.delete_one = "ok"
    server.on_create = None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stopped.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def run_over_http(monkeypatch, capsys, pod_server):
    """cuda_sample's main() through KubeApi against ``pod_server``: (rc, result)."""
    from kubernetes import client

    def runner(**args):
        configuration = client.Configuration()
        configuration.host = "http://127.0.0.1:%d" % pod_server.server_address[1]
        monkeypatch.setattr(k8s_wait, "connect", lambda params: k8s_wait.KubeApi(client.ApiClient(configuration)))
        with patch_module_args(dict(args, _ansible_check_mode=False)):
            with pytest.raises(SystemExit) as info:
                cuda_sample.main()
        return info.value.code, json.loads(capsys.readouterr().out)

    return runner


def test_at_a_timeout_the_deletes_get_their_own_time(run_over_http, pod_server):
    # The pod stays Pending to the deadline. The delete by the run's label answers 500, and
    # slowly, past what is left of the module's deadline: the deletes by name still go, on
    # the cleanup's own time, and the pod is gone.
    pod_server.delete_collection = (2.0, 500)
    rc, result = run_over_http(timeout=2)
    assert rc == 1 and result["msg"].startswith("1 of 1 CUDA sample pods failed (timed out after 2s)")
    assert pod_server.pods == {}
    assert ("delete", "cuda-vectoradd") in pod_server.requests
    assert result["changed"] is False and result["left_pods"] == [] and result["remove_command"] is None
    # 2 s is well within the cleanup's own time, and more than the module's deadline leaves.
    assert 2.0 < cuda_sample.CLEANUP_SECONDS and 2.0 > k8s_wait.AFTER_DEADLINE_GRACE


def test_pods_whose_deletes_fail_are_named_with_the_command_that_removes_them(run_over_http, pod_server):
    pod_server.delete_collection = pod_server.delete_one = (0, 500)
    rc, result = run_over_http(timeout=2)
    assert rc == 1
    assert list(pod_server.pods) == ["cuda-vectoradd"]
    run_id = pod_server.pods["cuda-vectoradd"]["metadata"]["labels"][rd.SAMPLE_LABEL_RUN]
    command = "kubectl delete pods -n default -l gpuplatform.rke2/cuda-sample-run=%s" % run_id
    assert result["msg"].endswith(". pods cuda-vectoradd may be left; remove them with: " + command)
    assert result["changed"] is True
    assert (result["left_pods"], result["run_id"], result["remove_command"]) == (["cuda-vectoradd"], run_id, command)


def test_a_signal_with_failing_deletes_says_which_pods_may_be_left(run_over_http, pod_server):
    # SIGTERM comes as the pod is created; every delete fails: the pod is not "deleted".
    pod_server.delete_collection = pod_server.delete_one = (0, 503)
    pod_server.on_create = lambda pod: os.kill(os.getpid(), signal.SIGTERM)
    rc, result = run_over_http(timeout=30)
    assert rc == 1 and list(pod_server.pods) == ["cuda-vectoradd"]
    run_id = pod_server.pods["cuda-vectoradd"]["metadata"]["labels"][rd.SAMPLE_LABEL_RUN]
    command = "kubectl delete pods -n default -l gpuplatform.rke2/cuda-sample-run=%s" % run_id
    assert result["msg"] == "interrupted by SIGTERM: pods cuda-vectoradd may be left; remove them with: " + command
    assert result["changed"] is True and result["left_pods"] == ["cuda-vectoradd"]
