# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""RKE2 facts the collection encodes, as pure functions: release versions and the
upgrade rule, the artifact checksum file, node labels and taints, and the content of
``/etc/rancher/rke2/config.yaml``. Errors are ValueError with a message that names
the offending key or value; callers turn them into task failures before anything on
a host changes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

SERVER = "server"
AGENT = "agent"
NODE_ROLES = (SERVER, AGENT)

# The ports of an RKE2 server: joining nodes register on the supervisor port.
SUPERVISOR_PORT = 9345
API_PORT = 6443

DATA_DIR = "/var/lib/rancher/rke2"
NODE_TOKEN_FILE = DATA_DIR + "/server/node-token"
IMAGES_DIR = DATA_DIR + "/agent/images"
CONFIG_DIR = "/etc/rancher/rke2"

CNIS = ("canal", "calico", "cilium", "flannel", "none")
# multus is a meta plugin: RKE2 wants it first, followed by the CNI that does the work.
META_CNI = "multus"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_VERSION_RE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)\+rke2r(\d+)$")
_VERSION_IN_OUTPUT_RE = re.compile(r"\bv\d+\.\d+\.\d+\+rke2r\d+\b")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_RE = re.compile(r"^%s(\.%s)*$" % (_DNS_LABEL, _DNS_LABEL))
_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

# config.yaml keys this module sets from typed variables; the extra map may not set them.
TYPED_KEYS = ("server", "token-file", "node-name", "node-ip", "node-label", "node-taint", "tls-san", "cni",
              "system-default-registry", "profile")
# Server flags an agent's config must not carry (rke2 agent --help lacks them); the
# etcd-* family counts as one.
SERVER_ONLY_KEYS = ("tls-san", "cni", "disable", "cluster-cidr", "service-cidr", "cluster-dns", "cluster-domain",
                    "write-kubeconfig-mode", "kube-apiserver-arg", "kube-controller-manager-arg", "kube-scheduler-arg",
                    "ingress-controller", "disable-cloud-controller", "egress-selector-mode")


# ---------------------------------------------------------------- versions

def parse_version(version, what="rke2 version"):
    """``v1.34.1+rke2r1`` -> (1, 34, 1, 1)."""
    match = _VERSION_RE.match(str(version or ""))
    if not match:
        raise ValueError("%s %r is not an RKE2 release version like v1.34.1+rke2r1" % (what, version))
    return tuple(int(part) for part in match.groups())


def version_in_output(output):
    """The release version in ``rke2 --version`` output, or None."""
    match = _VERSION_IN_OUTPUT_RE.search(output or "")
    return match.group(0) if match else None


def upgrade_error(installed, target):
    """Why going from ``installed`` to ``target`` is refused, or '' when it is fine.

    Kubernetes supports upgrading one minor version at a time and no downgrade;
    RKE2 inherits both rules (its etcd and API objects move forward only)."""
    target_v = parse_version(target, "rke2_version")
    if not installed:
        return ""
    installed_v = parse_version(installed, "installed rke2 version")
    if target_v < installed_v:
        return "rke2_version %s is older than the installed %s: RKE2 does not support downgrades" % (target, installed)
    if target_v[0] != installed_v[0] or target_v[1] > installed_v[1] + 1:
        return ("rke2_version %s skips a minor version from the installed %s: upgrade one minor version at a time"
                % (target, installed))
    return ""


# ---------------------------------------------------------------- artifacts

def parse_checksums(text, what="checksum file"):
    """A sha256sum(1) file as {file name: hex digest}."""
    checksums = {}
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        digest = parts[0].lower()
        if len(parts) != 2 or not _SHA256_RE.match(digest):
            raise ValueError("%s line %d is not '<sha256>  <file name>': %r" % (what, number, line))
        name = parts[1].strip()
        if name.startswith("*"):  # sha256sum's binary-mode marker
            name = name[1:]
        name = name.rsplit("/", 1)[-1]
        if name in checksums and checksums[name] != digest:
            raise ValueError("%s lists %s twice with different digests" % (what, name))
        checksums[name] = digest
    if not checksums:
        raise ValueError("%s lists no files" % what)
    return checksums


def checksum_problems(expected, actual, checksum_file):
    """One message per file of ``actual`` ({name: sha256 hex, or None when missing})
    that does not match ``expected`` (from ``parse_checksums``)."""
    problems = []
    for name, digest in actual.items():
        if digest is None:
            problems.append("%s: file is missing" % name)
        elif name not in expected:
            problems.append("%s: not listed in %s" % (name, checksum_file))
        elif expected[name] != digest:
            problems.append("%s: sha256 %s does not match %s in %s (corrupted or wrong file)"
                            % (name, digest, expected[name], checksum_file))
    return problems


# ---------------------------------------------------------------- node labels and taints

def check_node_name(name, what="node name"):
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN_RE.match(name):
        raise ValueError("%s %r is not a valid Kubernetes node name (lower-case RFC 1123 subdomain)" % (what, name))
    return name


def _check_qualified_name(key, what):
    prefix, _sep, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _SUBDOMAIN_RE.match(prefix)):
        raise ValueError("%s: the prefix of %r is not a DNS subdomain" % (what, key))
    if not name or len(name) > 63 or not _LABEL_NAME_RE.match(name):
        raise ValueError("%s: %r is not a valid label or taint key" % (what, key))


def _check_value(key, value, what):
    if len(value) > 63 or not _LABEL_VALUE_RE.match(value):
        raise ValueError("%s: value %r of %r is not a valid label value" % (what, value, key))


def node_label_args(labels, what="rke2_node_labels"):
    """{key: value} -> sorted ``key=value`` strings for ``node-label``."""
    if not isinstance(labels, dict):
        raise ValueError("%s must be a mapping of label key to value" % what)
    result = []
    for key in sorted(labels):
        value = labels[key]
        if isinstance(value, bool) or value is None:
            raise ValueError("%s: value of %r must be a string (quote true/false/yes/no in YAML)" % (what, key))
        value = str(value)
        _check_qualified_name(str(key), what)
        _check_value(key, value, what)
        result.append("%s=%s" % (key, value))
    return result


def node_taint_args(taints, what="rke2_node_taints"):
    """[{key, value, effect}] -> ``key=value:Effect`` strings for ``node-taint``."""
    if not isinstance(taints, list):
        raise ValueError("%s must be a list of {key, value, effect}" % what)
    result = []
    for index, taint in enumerate(taints):
        where = "%s[%d]" % (what, index)
        if not isinstance(taint, dict) or not taint.get("key"):
            raise ValueError("%s must be a mapping with key, optional value, and effect" % where)
        unknown = sorted(set(taint) - set(("key", "value", "effect")))
        if unknown:
            raise ValueError("%s: unknown field %s (key, value, effect)" % (where, ", ".join(unknown)))
        key, value, effect = str(taint["key"]), str(taint.get("value") or ""), taint.get("effect")
        _check_qualified_name(key, where)
        _check_value(key, value, where)
        if effect not in TAINT_EFFECTS:
            raise ValueError("%s: effect %r is not one of %s" % (where, effect, ", ".join(TAINT_EFFECTS)))
        result.append("%s%s:%s" % (key, "=" + value if value else "", effect))
    return result


def cni_value(cni, what="rke2_cni"):
    """A CNI name or a list starting with multus -> what config.yaml's ``cni`` takes."""
    names = [cni] if isinstance(cni, str) else list(cni or [])
    if not names:
        raise ValueError("%s must name a CNI (one of %s, optionally after multus)" % (what, ", ".join(CNIS)))
    if names[0] == META_CNI:
        if len(names) != 2 or names[1] not in CNIS or names[1] == "none":
            raise ValueError("%s: multus must be followed by exactly one of %s" % (what, ", ".join(CNIS[:-1])))
        return names
    if len(names) != 1 or names[0] not in CNIS:
        raise ValueError("%s %r: expected one of %s, or [multus, <cni>]" % (what, cni, ", ".join(CNIS)))
    return names[0]


# ---------------------------------------------------------------- config.yaml

def server_url(api_address):
    host = "[%s]" % api_address if ":" in api_address else api_address
    return "https://%s:%d" % (host, SUPERVISOR_PORT)


def build_config(role, node_name, join_address=None, token_file=None, node_ip=None, node_labels=None,
                 node_taints=None, tls_san=None, cni=None, system_default_registry=None, profile=None, extra=None):
    """The content of ``/etc/rancher/rke2/config.yaml`` as a dict, in a stable key order.

    ``join_address`` is the address (the first server's, or a VIP) every node but the
    first server joins through; the first server starts the cluster and gets none. The
    join token never appears here: nodes read it from ``token_file`` (0600), so
    config.yaml can be shown in diffs."""
    if role not in NODE_ROLES:
        raise ValueError("rke2_node_role %r is not one of %s" % (role, ", ".join(NODE_ROLES)))
    config = {}
    config["node-name"] = check_node_name(node_name, "k8s_node_name")
    if join_address:
        if "/" in join_address or join_address.startswith("["):
            raise ValueError("rke2_api_address %r must be a bare host name or IP address" % join_address)
        config["server"] = server_url(join_address)
    elif role == AGENT:
        raise ValueError("an agent needs an address to join through (rke2_api_address)")
    if token_file:
        config["token-file"] = token_file
    if node_ip:
        config["node-ip"] = node_ip
    labels = node_label_args(node_labels or {})
    if labels:
        config["node-label"] = labels
    taints = node_taint_args(node_taints or [])
    if taints:
        config["node-taint"] = taints
    if role == SERVER:
        sans = []
        for san in tls_san or []:
            if san not in sans:
                sans.append(san)
        if sans:
            config["tls-san"] = sans
        config["cni"] = cni_value(cni if cni is not None else "canal")
    if system_default_registry:
        if "/" in system_default_registry or "://" in system_default_registry:
            raise ValueError("rke2_system_default_registry %r must be a registry host[:port], without scheme or path"
                             % system_default_registry)
        config["system-default-registry"] = system_default_registry
    if profile:
        config["profile"] = profile
    extra = extra or {}
    if not isinstance(extra, dict):
        raise ValueError("rke2_config_extra must be a mapping of config.yaml keys")
    for key in extra:
        if key in TYPED_KEYS or key == "token":
            raise ValueError("rke2_config_extra sets %r, which the role sets from its own variable: use that variable"
                             % key)
        if role == AGENT and (key in SERVER_ONLY_KEYS or key.startswith("etcd-")):
            raise ValueError("rke2_config_extra sets %r, which an agent does not accept" % key)
    for key in sorted(extra):
        config[key] = extra[key]
    return config


# ---------------------------------------------------------------- node readiness

def node_state(node, kubelet_version=None):
    """(ready, detail) of one Node object as the API returns it (a dict), or of None
    for a node that has not registered. With ``kubelet_version``, a node is ready only
    once its kubelet runs that version: after an upgrade the old kubelet can still
    report Ready."""
    if node is None:
        return False, "not registered"
    status = node.get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    version = (status.get("nodeInfo") or {}).get("kubeletVersion")
    if not ready:
        return False, "no Ready condition yet"
    condition = ready[0]
    if condition.get("status") != "True":
        why = ": ".join(part for part in (condition.get("reason"), condition.get("message")) if part)
        return False, "Ready=%s%s" % (condition.get("status"), " (%s)" % why if why else "")
    if kubelet_version and version != kubelet_version:
        return False, "Ready, but its kubelet is %s, not %s" % (version, kubelet_version)
    return True, "Ready (kubelet %s)" % version


def nodes_ready(nodes, names, kubelet_version=None):
    """(all ready, {name: {"ready": bool, "state": detail}}) for ``names`` among
    ``nodes`` (Node dicts)."""
    by_name = dict(((n.get("metadata") or {}).get("name"), n) for n in nodes)
    states = {}
    for name in names:
        ready, detail = node_state(by_name.get(name), kubelet_version)
        states[name] = {"ready": ready, "state": detail}
    return all(s["ready"] for s in states.values()), states


def not_ready_message(states, timeout, stale=()):
    """The failure of a node wait at its deadline, naming each node and why."""
    waiting = ["%s: %s" % (name, state["state"]) for name, state in states.items() if not state["ready"]]
    unreachable = " (the API was unreachable at the end: %s)" % ", ".join(stale) if stale else ""
    return "nodes not ready after %ds%s: %s" % (timeout, unreachable, "; ".join(waiting))
