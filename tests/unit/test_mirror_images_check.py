"""Module mirror_images_check against a registry of the distribution API's shape served here
(token authentication, an index and a single manifest), and the pure rules of
module_utils/site/registry.py."""
import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuplatform.rke2.plugins.module_utils.site import registry as rg
from ansible_collections.gpuplatform.rke2.plugins.modules import mirror_images_check

USER, PASSWORD, TOKEN = "site", "s3cret", "tok-1"
INDEX = {"schemaVersion": 2, "mediaType": rg.INDEX_TYPES[0], "manifests": [
    {"digest": "sha256:a", "platform": {"os": "linux", "architecture": "amd64"}},
    {"digest": "sha256:b", "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}}]}
AMD64_ONLY = {"schemaVersion": 2, "mediaType": rg.INDEX_TYPES[1], "manifests": [
    {"digest": "sha256:c", "platform": {"os": "linux", "architecture": "amd64"}}]}
SINGLE = {"schemaVersion": 2, "mediaType": rg.MANIFEST_TYPES[0], "config": {"digest": "sha256:cfg"}}
CONTENT = {"/v2/nvidia/k8s-device-plugin/manifests/v0.18.2": INDEX,
           "/v2/nvidia/driver/manifests/580.126.20-ubuntu22.04": AMD64_ONLY,
           "/v2/nvidia/container-toolkit/manifests/v1.18.0": SINGLE,
           "/v2/nvidia/container-toolkit/blobs/sha256:cfg": {"os": "linux", "architecture": "amd64"}}


class Registry(BaseHTTPRequestHandler):
    requests = []

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # pylint: disable=invalid-name
        Registry.requests.append((self.path, self.headers.get("Authorization")))
        host = "127.0.0.1:%d" % self.server.server_port
        if self.path.startswith("/token?"):
            given = self.headers.get("Authorization") or ""
            wanted = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()
            if given != wanted:
                return self._send(401, {"errors": [{"code": "UNAUTHORIZED"}]})
            return self._send(200, {"token": TOKEN})
        if self.headers.get("Authorization") != "Bearer " + TOKEN:
            name = self.path.split("/manifests/")[0].split("/blobs/")[0][len("/v2/"):]
            challenge = 'Bearer realm="http://%s/token",service="lab-registry",scope="repository:%s:pull"' % (
                host, name)
            return self._send(401, {"errors": [{"code": "UNAUTHORIZED"}]}, [("WWW-Authenticate", challenge)])
        body = CONTENT.get(self.path)
        if body is None:
            return self._send(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
        return self._send(200, body, [("Content-Type", body.get("mediaType") or "application/json")])


@pytest.fixture
def mirror():
    server = HTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Registry.requests = []
    yield "127.0.0.1:%d" % server.server_port
    server.shutdown()


@pytest.fixture
def module(capsys):
    def runner(**args):
        with patch_module_args(args):
            with pytest.raises(SystemExit) as info:
                mirror_images_check.main()
        return info.value.code, json.loads(capsys.readouterr().out)
    return runner


def test_every_image_held_for_its_platforms_passes(mirror, module):
    plan = [{"source": "nvcr.io/nvidia/k8s-device-plugin:v0.18.2",
             "mirror": mirror + "/nvidia/k8s-device-plugin:v0.18.2", "platforms": ["linux/amd64", "linux/arm64"]},
            {"source": "nvcr.io/nvidia/k8s/container-toolkit:v1.18.0",
             "mirror": mirror + "/nvidia/container-toolkit:v1.18.0", "platforms": ["linux/amd64"]}]
    rc, result = module(images=plan, username=USER, password=PASSWORD, plain_http=[mirror])
    assert rc == 0 and result["missing"] == [], result
    assert [c["platforms"] for c in result["checked"]] == [["linux/amd64", "linux/arm64/v8"], ["linux/amd64"]]
    # One token per repository: the challenge is answered once for each.
    assert sum(1 for path, _auth in Registry.requests if path.startswith("/token?")) == 2
    assert PASSWORD not in json.dumps(result)


def test_a_missing_image_or_platform_is_named_before_the_upgrade(mirror, module):
    images = [mirror + "/nvidia/driver:580.126.20-ubuntu22.04",
              {"mirror": mirror + "/nvidia/driver:580.126.20-ubuntu22.04", "platforms": ["linux/arm64"]},
              mirror + "/nvidia/gpu-operator:v26.3.3"]
    rc, result = module(images=images, username=USER, password=PASSWORD, plain_http=[mirror])
    assert rc == 1
    assert result["missing"] == [
        "%s/nvidia/driver:580.126.20-ubuntu22.04 is in the mirror without linux/arm64 (it holds linux/amd64): nodes "
        "of linux/arm64 would fail to pull it" % mirror,
        "%s/nvidia/gpu-operator:v26.3.3 is not in the mirror (manifest unknown)" % mirror]
    assert result["msg"].startswith("the mirror cannot serve 2 of 3 images: ")


def test_without_credentials_the_refusal_is_named(mirror, module):
    rc, result = module(images=[mirror + "/nvidia/driver:580.126.20-ubuntu22.04"], plain_http=[mirror])
    assert rc == 1 and result["missing"][0].startswith(
        "%s/nvidia/driver:580.126.20-ubuntu22.04: the mirror refused the pull (HTTP 401" % mirror), result


def test_an_entry_without_a_reference_is_refused_by_its_index(module):
    rc, result = module(images=["registry.site.example/nvidia/driver:580", {"platforms": ["linux/amd64"]}])
    assert rc == 1 and result["msg"] == (
        "images[1]: {'platforms': ['linux/amd64']} is neither an image reference nor an image plan entry "
        "(source, mirror)")


@pytest.mark.parametrize("header, parsed", [
    ('Bearer realm="https://auth.site/token",service="harbor-registry",scope="repository:nvidia/driver:pull"',
     ("bearer", {"realm": "https://auth.site/token", "service": "harbor-registry",
                 "scope": "repository:nvidia/driver:pull"})),
    ('Basic realm="Registry Realm"', ("basic", {"realm": "Registry Realm"})),
    (None, (None, {})),
])
def test_challenges(header, parsed):
    assert rg.challenge(header) == parsed


def test_paths_and_token_queries_follow_the_reference():
    assert rg.manifest_path("registry.site.example:5000/nvidia/driver@sha256:abc") == (
        "registry.site.example:5000", "/v2/nvidia/driver/manifests/sha256:abc")
    assert rg.manifest_path("registry.site.example/nvidia/driver") == (
        "registry.site.example", "/v2/nvidia/driver/manifests/latest")
    assert rg.token_query({"service": "s"}, "r.example/nvidia/driver:1") == {
        "scope": "repository:nvidia/driver:pull", "service": "s"}
    assert rg.token_of({"access_token": "x"}) == "x" and rg.token_of({}) is None


def test_a_variant_serves_its_base_platform():
    assert rg.missing_platforms(["linux/arm64", "linux/amd64"], {"linux/arm64/v8"}) == ["linux/amd64"]
    assert rg.verdict("r/x:1", 200, ["linux/amd64"], None) is None
    assert rg.verdict("r/x:1", 500, message="boom") == "r/x:1: the mirror answered HTTP 500: boom"
