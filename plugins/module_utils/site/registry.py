# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does the site's mirror hold an image, for the platforms its nodes run? Pure functions
over the OCI distribution API's answers (the module does the requests):

- a manifest is asked for by ``HEAD``/``GET /v2/<name>/manifests/<tag or digest>`` with the
  media types a container runtime accepts (OCI image index and manifest, Docker manifest list
  and v2 manifest); 200 holds it, 404 does not (distribution-spec "Pulling manifests");
- a 401 names its challenge in ``WWW-Authenticate``: ``Bearer realm=..,service=..,scope=..``
  is answered with a token from the realm (distribution's token authentication, the scheme of
  Harbor, Quay, Nexus and registry:2 with token auth), ``Basic`` with the credentials;
- an index lists its platforms (``manifests[].platform``); a single manifest's platform is in
  its config blob (``architecture``, ``os``). An image a node pulls for a platform the mirror
  does not hold fails there as a missing one would.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
_CHALLENGE_PARAM = re.compile(r'([A-Za-z]+)="([^"]*)"')


def manifest_path(ref):
    """(registry host, ``/v2/<name>/manifests/<tag or digest>``) of an image reference."""
    registry, path, tag, digest = image_plan.split_reference(ref)
    return registry, "/v2/%s/manifests/%s" % (path, digest or tag or "latest")


def blob_path(ref, digest):
    _registry, path, _tag, _digest = image_plan.split_reference(ref)
    return "/v2/%s/blobs/%s" % (path, digest)


def repository(ref):
    return image_plan.split_reference(ref)[1]


def challenge(header):
    """(scheme, {param: value}) of a ``WWW-Authenticate`` header; (None, {}) when there is none."""
    if not header:
        return None, {}
    scheme, _sep, rest = header.strip().partition(" ")
    return scheme.lower(), dict((k.lower(), v) for k, v in _CHALLENGE_PARAM.findall(rest))


def token_query(params, ref):
    """The token request's query parameters for pulling ``ref`` (the challenge's service, and a
    pull scope on its repository unless the challenge names one)."""
    query = {"scope": params.get("scope") or "repository:%s:pull" % repository(ref)}
    if params.get("service"):
        query["service"] = params["service"]
    return query


def token_of(body):
    """The bearer token of a token endpoint's JSON answer (``token``, or OAuth2's ``access_token``)."""
    return (body or {}).get("token") or (body or {}).get("access_token")


def media_type(manifest, content_type=None):
    return (manifest or {}).get("mediaType") or (content_type or "").split(";")[0].strip() or None


def index_platforms(manifest):
    """{"os/architecture[/variant]"} an index or manifest list holds."""
    found = set()
    for entry in (manifest or {}).get("manifests") or ():
        platform = entry.get("platform") or {}
        if platform.get("os") and platform.get("architecture"):
            found.add("/".join(p for p in (platform["os"], platform["architecture"], platform.get("variant")) if p))
    return found


def config_platform(config):
    """"os/architecture" of a single manifest's config blob."""
    config = config or {}
    if config.get("os") and config.get("architecture"):
        return "%s/%s" % (config["os"], config["architecture"])
    return None


def missing_platforms(wanted, held):
    """The platforms of ``wanted`` (``linux/arm64``, ...) that ``held`` lacks, sorted; a variant
    in ``held`` (linux/arm64/v8) serves its base platform."""
    bases = set("/".join(p.split("/")[:2]) for p in held)
    return sorted(p for p in wanted or () if p not in held and p not in bases)


def verdict(ref, status, wanted_platforms=(), held_platforms=None, message=None):
    """What keeps the mirror from serving ``ref``, or None: ``status`` the manifest request's
    HTTP status, ``held_platforms`` the platforms it holds (None: unknown)."""
    if status == 404:
        return "%s is not in the mirror (manifest unknown)" % ref
    if status in (401, 403):
        return "%s: the mirror refused the pull (HTTP %d%s): give registry credentials that may pull it" % (
            ref, status, ": " + message if message else "")
    if status != 200:
        return "%s: the mirror answered HTTP %s%s" % (ref, status, ": " + message if message else "")
    if held_platforms is not None:
        missing = missing_platforms(wanted_platforms, held_platforms)
        if missing:
            return "%s is in the mirror without %s (it holds %s): nodes of %s would fail to pull it" % (
                ref, ", ".join(missing), ", ".join(sorted(held_platforms)) or "no platform", ", ".join(missing))
    return None
