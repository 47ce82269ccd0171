#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: mirror_images_check
short_description: Check that the site's mirror registry holds every image of a plan, for the platforms its nodes run
version_added: 0.1.0
description:
  - Asks the mirror for each image's manifest through the OCI distribution API (the request a container runtime
    makes before a pull) and, for an image index or manifest list, which platforms it holds; for a single manifest,
    the platform of its config. An air-gapped site learns before an upgrade starts, not on its nodes, which new image
    its mirror lacks.
  - Answers a C(401) challenge as container runtimes do, C(Bearer) with a token from the challenge's realm (anonymous
    or with O(username) and O(password)), C(Basic) with the credentials.
  - Reads only; changes nothing.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  images:
    description:
      - The images to check, as references (C(registry.site.example/nvidia/driver:580.126.20-ubuntu22.04)) or as the
        image plan entries gpuplatform.rke2.gpu_operator_chart returns (C(mirror), else C(source), and C(platforms),
        the platforms the index must hold).
    type: list
    elements: raw
    required: true
  username:
    description: User name for the mirror.
    type: str
  password:
    description: Password or token for the mirror.
    type: str
  validate_certs:
    description: Verify the mirror's TLS certificate.
    type: bool
    default: true
  ca_path:
    description: A CA bundle to verify the mirror's certificate with (the site's own CA).
    type: path
  plain_http:
    description: Registry hosts (C(host:port)) served over plain HTTP (a lab mirror).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds each request may take.
    type: int
    default: 30
attributes:
  check_mode:
    details: Reads only.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
"""

EXAMPLES = r"""
- name: The mirror holds every image of the upgrade's plan
  gpuplatform.rke2.mirror_images_check:
    images: "{{ gpu_operator_chart.images }}"
    username: "{{ site_registry_user }}"
    password: "{{ site_registry_password }}"
    ca_path: /etc/pki/site-ca.pem
  delegate_to: localhost
"""

RETURN = r"""
checked:
  description: Every image checked, with what the mirror holds (C(ref), C(status), C(platforms) or null).
  returned: always
  type: list
  elements: dict
missing:
  description: Why each image the mirror cannot serve cannot be pulled (not there, without a platform, refused).
  returned: always
  type: list
  elements: str
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import urlencode
from ansible.module_utils.urls import Request

from ansible_collections.gpuplatform.rke2.plugins.module_utils.site import registry


def entries(images):
    """[(ref, wanted platforms)] of the images option."""
    found = []
    for index, entry in enumerate(images):
        if isinstance(entry, dict):
            ref, platforms = entry.get("mirror") or entry.get("source"), entry.get("platforms") or ()
        else:
            ref, platforms = entry, ()
        if not ref or not isinstance(ref, str):
            raise ValueError("images[%d]: %r is neither an image reference nor an image plan entry (source, mirror)"
                             % (index, entry))
        found.append((ref, list(platforms)))
    return found


class Mirror(object):
    """The requests, with one token per repository."""

    def __init__(self, params):
        self.params = params
        self.request = Request(validate_certs=params["validate_certs"], ca_path=params.get("ca_path"),
                               timeout=params["timeout"])
        self.tokens = {}

    def _url(self, host, path):
        return "%s://%s%s" % ("http" if host in self.params["plain_http"] else "https", host, path)

    def _get(self, url, headers):
        try:
            response = self.request.open("GET", url, headers=headers)
            return response.getcode(), dict(response.headers), response.read()
        except HTTPError as exc:
            return exc.code, dict(exc.headers or {}), exc.read() if hasattr(exc, "read") else b""

    def _authorize(self, ref, headers, www_authenticate):
        scheme, params = registry.challenge(www_authenticate)
        user, password = self.params.get("username"), self.params.get("password")
        if scheme == "basic" and user:
            self.request.url_username, self.request.url_password = user, password
            self.request.force_basic_auth = True
            return True
        if scheme != "bearer" or not params.get("realm"):
            return False
        token_request = Request(validate_certs=self.params["validate_certs"], ca_path=self.params.get("ca_path"),
                                timeout=self.params["timeout"], url_username=user, url_password=password,
                                force_basic_auth=bool(user))
        url = params["realm"] + ("&" if "?" in params["realm"] else "?") + urlencode(registry.token_query(params, ref))
        try:
            body = json.loads(token_request.open("GET", url).read())
        except (HTTPError, URLError, ValueError):
            return False
        token = registry.token_of(body)
        if not token:
            return False
        self.tokens[registry.repository(ref)] = token
        return True

    def fetch(self, ref, path, accept):
        """(status, headers, body) of ``path`` on ``ref``'s registry, through its challenge once."""
        host = registry.manifest_path(ref)[0]
        for attempt in (0, 1):
            headers = {"Accept": accept}
            token = self.tokens.get(registry.repository(ref))
            if token:
                headers["Authorization"] = "Bearer " + token
            status, answer, body = self._get(self._url(host, path), headers)
            if status != 401 or attempt:
                return status, answer, body
            www = dict((k.lower(), v) for k, v in answer.items()).get("www-authenticate")
            if not self._authorize(ref, headers, www):
                return status, answer, body
        return status, answer, body

    def check(self, ref, wanted):
        _host, path = registry.manifest_path(ref)
        status, headers, body = self.fetch(ref, path, registry.ACCEPT)
        held = None
        if status == 200:
            manifest = json.loads(body or b"{}")
            content_type = dict((k.lower(), v) for k, v in headers.items()).get("content-type")
            if registry.media_type(manifest, content_type) in registry.INDEX_TYPES:
                held = registry.index_platforms(manifest)
            elif wanted and (manifest.get("config") or {}).get("digest"):
                blob_status, _h, blob = self.fetch(ref, registry.blob_path(ref, manifest["config"]["digest"]),
                                                   "application/json")
                platform = registry.config_platform(json.loads(blob or b"{}")) if blob_status == 200 else None
                held = set([platform]) if platform else None
        message = None if status == 200 else (body or b"").decode("utf-8", "replace")[:200]
        return {"ref": ref, "status": status, "platforms": sorted(held) if held is not None else None}, \
            registry.verdict(ref, status, wanted, held, message)


def main():
    module = AnsibleModule(argument_spec=dict(
        images=dict(type="list", elements="raw", required=True),
        username=dict(type="str"),
        password=dict(type="str", no_log=True),
        validate_certs=dict(type="bool", default=True),
        ca_path=dict(type="path"),
        plain_http=dict(type="list", elements="str", default=[]),
        timeout=dict(type="int", default=30),
    ), supports_check_mode=True, required_together=[("username", "password")])
    try:
        wanted = entries(module.params["images"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    mirror = Mirror(module.params)
    checked, missing = [], []
    for ref, platforms in wanted:
        try:
            seen, problem = mirror.check(ref, platforms)
        except (URLError, ValueError, OSError) as exc:
            seen, problem = {"ref": ref, "status": None, "platforms": None}, "%s: the mirror cannot be read: %s" % (
                ref, exc)
        checked.append(seen)
        if problem:
            missing.append(problem)
    if missing:
        module.fail_json(msg="the mirror cannot serve %d of %d images: %s" % (len(missing), len(checked),
                                                                              "; ".join(missing)),
                         checked=checked, missing=missing, changed=False)
    module.exit_json(changed=False, checked=checked, missing=[])


if __name__ == "__main__":
    main()
