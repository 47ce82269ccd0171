# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Merging an RKE2 server's ``rke2.yaml`` into an operator's kubeconfig.

Pure functions over kubeconfig documents as plain dicts. RKE2 writes one cluster,
one user and one context, all named ``default``, with the server at
``https://127.0.0.1:6443``; the operator's kubeconfig gets them under the site's
name with the server rewritten to the API address. Entries of other names are
never changed, and an entry of the site's name that another context uses is an
error rather than a silent rewrite of that context.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

try:
    from urllib.parse import urlsplit, urlunsplit
except ImportError:  # pragma: no cover - Python 2 is not supported by the collection
    from urlparse import urlsplit, urlunsplit

SECTIONS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# Keys whose values authenticate a user; diffs and logs show REDACTED instead.
SECRET_KEYS = frozenset((
    "client-key-data", "token", "password", "id-token", "refresh-token", "access-token", "client-secret",
))
REDACTED = "REDACTED"


class KubeconfigError(ValueError):
    """Bad input: the message names the offending file, key or value."""


def empty_config():
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [],
        "users": [],
        "contexts": [],
        "current-context": "",
    }


def check_document(doc, what):
    """``doc`` as a kubeconfig dict, or KubeconfigError naming ``what``. None (an
    empty file) is an empty kubeconfig."""
    if doc is None:
        return empty_config()
    if not isinstance(doc, dict):
        raise KubeconfigError("%s is not a kubeconfig: expected a mapping, got %s" % (what, type(doc).__name__))
    kind = doc.get("kind", "Config")
    if kind != "Config":
        raise KubeconfigError("%s is not a kubeconfig: kind is %r, not 'Config'" % (what, kind))
    for section, inner in SECTIONS:
        entries = doc.get(section) or []
        if not isinstance(entries, list):
            raise KubeconfigError("%s: %s must be a list" % (what, section))
        seen = set()
        for index, entry in enumerate(entries):
            if (not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]
                    or not isinstance(entry.get(inner), dict)):
                raise KubeconfigError("%s: %s[%d] needs a name and a %s mapping" % (what, section, index, inner))
            if entry["name"] in seen:
                raise KubeconfigError("%s: %s has two entries named %r" % (what, section, entry["name"]))
            seen.add(entry["name"])
    return doc


def _only_entry(doc, section, what):
    entries = doc.get(section) or []
    if len(entries) != 1:
        raise KubeconfigError("%s: expected exactly one entry in %s (as RKE2 writes it), found %d"
                              % (what, section, len(entries)))
    return entries[0]


def rewrite_server(server, api_address=None, api_server=None):
    """The URL the operator reaches the API at.

    ``api_server`` (a full URL) replaces ``server``; ``api_address`` (a host name or
    IP) replaces only its host, keeping scheme and port, which is what RKE2's
    ``https://127.0.0.1:6443`` needs."""
    if api_server:
        parts = urlsplit(api_server)
        if parts.scheme != "https" or not parts.hostname:
            raise KubeconfigError("api_server %r must be an https:// URL with a host" % api_server)
        return api_server
    if not api_address:
        raise KubeconfigError("one of api_address or api_server is required")
    if "/" in api_address or api_address.startswith("["):
        raise KubeconfigError("api_address %r must be a bare host name or IP address" % api_address)
    parts = urlsplit(server)
    try:
        port = parts.port
    except ValueError as exc:  # a port out of range or not a number
        raise KubeconfigError("the source cluster's server %r: %s" % (server, exc))
    if not parts.hostname:
        raise KubeconfigError("the source cluster's server %r has no host" % server)
    host = "[%s]" % api_address if ":" in api_address else api_address
    netloc = host if port is None else "%s:%d" % (host, port)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def site_entries(source, name, api_address=None, api_server=None, what="rke2.yaml"):
    """(cluster, user, context) entries of ``source`` renamed to ``name`` and pointing
    at the API address."""
    source = check_document(source, what)
    cluster = copy.deepcopy(_only_entry(source, "clusters", what))
    user = copy.deepcopy(_only_entry(source, "users", what))
    context = copy.deepcopy(_only_entry(source, "contexts", what))
    server = cluster["cluster"].get("server")
    if not server:
        raise KubeconfigError("%s: clusters[0].cluster.server is missing" % what)
    if not isinstance(server, str):
        raise KubeconfigError("%s: clusters[0].cluster.server is %r, not a URL" % (what, server))
    cluster_body = dict(cluster["cluster"], server=rewrite_server(server, api_address, api_server))
    context_body = dict(context["context"], cluster=name, user=name)
    return (
        {"name": name, "cluster": cluster_body},
        {"name": name, "user": user["user"]},
        {"name": name, "context": context_body},
    )


def _replace_or_append(entries, entry):
    for index, existing in enumerate(entries):
        if existing.get("name") == entry["name"]:
            entries[index] = entry
            return
    entries.append(entry)


def merge(target, entries, set_current_context=False, what="kubeconfig"):
    """A copy of ``target`` with the site's ``entries`` added or replaced.

    Every other entry keeps its place and content. The current context becomes the
    site's when asked, or when the target has none."""
    result = copy.deepcopy(check_document(target, what))
    cluster, user, context = entries
    name = context["name"]
    for other in result.get("contexts") or []:
        if other["name"] == name:
            continue
        uses = [key for key, value in (("cluster", cluster["name"]), ("user", user["name"]))
                if other["context"].get(key) == value]
        if uses:
            raise KubeconfigError(
                "%s: context %r uses the %s named %r; merging the site %r would change it. Rename that context's "
                "%s or choose another site name" % (what, other["name"], uses[0], name, name, uses[0]))
    for (section, _inner), entry in zip(SECTIONS, entries):
        result[section] = list(result.get(section) or [])
        _replace_or_append(result[section], entry)
    result.setdefault("apiVersion", "v1")
    result.setdefault("kind", "Config")
    if set_current_context or not result.get("current-context"):
        result["current-context"] = name
    return result


def redact(doc):
    """A copy of ``doc`` with every credential value replaced by REDACTED."""
    if isinstance(doc, dict):
        return dict((key, REDACTED if key in SECRET_KEYS and value else redact(value)) for key, value in doc.items())
    if isinstance(doc, list):
        return [redact(item) for item in doc]
    return doc
