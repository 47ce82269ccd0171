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

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_flags

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

# The etcd snapshot settings the role types (module_utils/rke2_day2.py etcd_snapshot_config): (their name in the
# site file's rke2.etcd_snapshots, the config.yaml key); the S3 ones are rke2.etcd_snapshots.s3's. Keys of RKE2
# v1.34.1's server flags (rke2_flags.py).
ETCD_SNAPSHOT_KEYS = (("schedule_cron", "etcd-snapshot-schedule-cron"), ("retention", "etcd-snapshot-retention"),
                      ("compress", "etcd-snapshot-compress"))
ETCD_S3_KEYS = (("enabled", "etcd-s3"), ("endpoint", "etcd-s3-endpoint"), ("endpoint_ca", "etcd-s3-endpoint-ca"),
                ("skip_ssl_verify", "etcd-s3-skip-ssl-verify"), ("access_key", "etcd-s3-access-key"),
                ("secret_key", "etcd-s3-secret-key"), ("session_token", "etcd-s3-session-token"),
                ("bucket", "etcd-s3-bucket"), ("bucket_lookup_type", "etcd-s3-bucket-lookup-type"),
                ("region", "etcd-s3-region"), ("folder", "etcd-s3-folder"), ("retention", "etcd-s3-retention"),
                ("insecure", "etcd-s3-insecure"), ("timeout", "etcd-s3-timeout"), ("proxy", "etcd-s3-proxy"))
# The rke2 role's variables of those settings, by their name in rke2.etcd_snapshots.
ETCD_SNAPSHOT_VARIABLES = dict([(name, "rke2_etcd_snapshot_" + name) for name, _key in ETCD_SNAPSHOT_KEYS]
                               + [("s3", "rke2_etcd_s3")])
# The variable the extra map's message sends a typed etcd key to.
_TYPED_VARIABLES = dict([(key, ETCD_SNAPSHOT_VARIABLES[name]) for name, key in ETCD_SNAPSHOT_KEYS]
                        + [(key, "%s.%s" % (ETCD_SNAPSHOT_VARIABLES["s3"], name)) for name, key in ETCD_S3_KEYS])
# config.yaml keys this module sets from typed variables; the extra map may not set them.
TYPED_KEYS = ("server", "token-file", "node-name", "node-ip", "node-label", "node-taint", "tls-san", "cni",
              "system-default-registry", "profile", "agent-token-file", "selinux") + tuple(sorted(_TYPED_VARIABLES))
# config.yaml keys that would move the files the role reads and writes (``d`` is data-dir's short flag).
FIXED_PATH_KEYS = ("data-dir", "d")
# config.yaml keys whose value is a secret (RKE2 v1.34.1's flags: the join tokens, the etcd S3 credentials, an
# external datastore's DSN, which holds its password): never a plain value in a site file, never in a diff or a log.
SECRET_CONFIG_KEYS = ("token", "agent-token", "etcd-s3-access-key", "etcd-s3-secret-key", "etcd-s3-session-token",
                      "datastore-endpoint")


def secret_config_keys(config):
    """The keys of ``config`` (config.yaml or rke2_config_extra) whose value is a secret, sorted; ``key+``
    (config.yaml.d's append) counts as ``key``."""
    return sorted(key for key in (config if isinstance(config, dict) else {})
                  if str(key).rstrip("+") in SECRET_CONFIG_KEYS)


# Server flags an agent's config must not carry: `rke2 agent` skips them with "Unknown flag"
# (generated from the real binary's --help into rke2_flags.py).
SERVER_ONLY_KEYS = rke2_flags.SERVER_ONLY_FLAGS
# The values of `profile` RKE2 accepts (pkg/rke2/rke2.go ProfileCIS, ProfileETCD); anything
# else stops it at start ("invalid value provided for --profile flag").
PROFILES = ("cis", "etcd")
PROFILE_CIS = "cis"
# The CIS profile needs the kernel to keep these values (pkg/cli/cmds/profile_linux.go);
# RKE2 sets protect-kernel-defaults itself and stops when it is set to false.
PROTECT_KERNEL_DEFAULTS = "protect-kernel-defaults"


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
    # key=str: YAML reads an unquoted 1 as a number, and sorting a number with strings fails.
    for key in sorted(labels, key=str):
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
        unknown = sorted(str(field) for field in set(taint) - set(("key", "value", "effect")))
        if unknown:
            raise ValueError("%s: unknown field %s (key, value, effect)" % (where, ", ".join(unknown)))
        # A key YAML reads as true, or a value true/false/[...], would be written as "True" or "[...]" or dropped.
        if not isinstance(taint["key"], str):
            raise ValueError("%s: key %r must be a string" % (where, taint["key"]))
        if isinstance(taint.get("value"), (bool, list, dict)):
            raise ValueError("%s: value of %r must be a string (quote true/false/yes/no in YAML)"
                             % (where, taint["key"]))
        key, value, effect = taint["key"], str(taint.get("value") or ""), taint.get("effect")
        _check_qualified_name(key, where)
        _check_value(key, value, where)
        if effect not in TAINT_EFFECTS:
            raise ValueError("%s: effect %r is not one of %s" % (where, effect, ", ".join(TAINT_EFFECTS)))
        result.append("%s%s:%s" % (key, "=" + value if value else "", effect))
    return result


def cni_value(cni, what="rke2_cni"):
    """A CNI name or a list starting with multus -> what config.yaml's ``cni`` takes."""
    if cni is not None and not isinstance(cni, (str, list)):
        raise ValueError("%s must be a CNI name or a list [multus, <cni>], got %r" % (what, cni))
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

def system_default_registry_value(registry, what="rke2_system_default_registry"):
    """The registry RKE2 pulls its system images from, as ``system-default-registry`` takes it: a
    host[:port], without scheme or path; '' for none."""
    if registry in (None, ""):
        return ""
    # A list or a number would reach the checks below as "/" in 7: say what is expected instead.
    if not isinstance(registry, str):
        raise ValueError("%s must be a registry host[:port] (a string), got %r" % (what, registry))
    if "/" in registry or "://" in registry:
        raise ValueError("%s %r must be a registry host[:port], without scheme or path" % (what, registry))
    return registry


def server_url(api_address):
    host = "[%s]" % api_address if ":" in api_address else api_address
    return "https://%s:%d" % (host, SUPERVISOR_PORT)


def build_config(role, node_name, join_address=None, token_file=None, node_ip=None, node_labels=None,
                 node_taints=None, tls_san=None, cni=None, system_default_registry=None, profile=None, extra=None,
                 agent_token_file=None, selinux=False, etcd_snapshots=None):
    """The content of ``/etc/rancher/rke2/config.yaml`` as a dict, in a stable key order.

    ``join_address`` is the address (the first server's, or a VIP) every node but the
    first server joins through; the first server starts the cluster and gets none. The
    join token never appears here: nodes read it from ``token_file`` (0600), so
    config.yaml can be shown in diffs. ``etcd_snapshots``: the keys of the etcd snapshot
    settings, as rke2_day2.etcd_snapshot_config checked them (none on an agent)."""
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
    # Servers only: the token agents join with, when the site keeps it apart from the server token.
    if agent_token_file and role == SERVER:
        config["agent-token-file"] = agent_token_file
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
        system_default_registry_value(system_default_registry)
        # Servers only: on an agent the flag is hidden, deprecated and ignored (pkg/cli/cmds/agent.go);
        # agents get the registry from the images the servers' charts name.
        if role == SERVER:
            config["system-default-registry"] = system_default_registry
    if selinux not in (True, False):
        raise ValueError("rke2_selinux %r must be true or false" % (selinux,))
    if selinux:
        # A tarball install runs containerd without SELinux support unless config.yaml says so.
        config["selinux"] = True
    extra = extra or {}
    if not isinstance(extra, dict):
        raise ValueError("rke2_config_extra must be a mapping of config.yaml keys")
    if profile:
        if profile not in PROFILES:
            raise ValueError("rke2_profile %r: RKE2 %s accepts %s (or empty for none)"
                             % (profile, rke2_flags.RKE2_VERSION, " or ".join(PROFILES)))
        config["profile"] = profile
        if profile == PROFILE_CIS:
            if extra.get(PROTECT_KERNEL_DEFAULTS, True) is not True:
                raise ValueError("rke2_config_extra sets %s to %r: rke2_profile cis needs it true"
                                 % (PROTECT_KERNEL_DEFAULTS, extra[PROTECT_KERNEL_DEFAULTS]))
            config[PROTECT_KERNEL_DEFAULTS] = True
    config.update(etcd_snapshots or {})
    for key in extra:
        if key in TYPED_KEYS or key == "token":
            raise ValueError("rke2_config_extra sets %r, which the role sets from its own variable: use %s"
                             % (key, _TYPED_VARIABLES.get(key, "that variable")))
        if str(key).rstrip("+") in FIXED_PATH_KEYS:
            raise ValueError("rke2_config_extra sets %r: the role and its checks read RKE2's files under %s (the "
                             "datastore, the tokens, the cluster CA, the image archives, the static pods), which "
                             "another data-dir would move. Leave it out" % (key, DATA_DIR))
        # config.yaml.d's "key+" appends to key (k3s pkg/configfilearg): the same flag.
        if role == AGENT and str(key).rstrip("+") in SERVER_ONLY_KEYS:
            raise ValueError("rke2_config_extra sets %r, a server flag: rke2 agent %s has no --%s and skips it"
                             % (key, rke2_flags.RKE2_VERSION, str(key).rstrip("+")))
    for key in sorted(extra):
        if key not in config:
            config[key] = extra[key]
    return config


# ---------------------------------------------------------------- node readiness

# The kubelet's Ready=False message when its only error is the missing network plugin
# (kubelet.go setNetworkState, nodestatus/setters.go ReadyCondition: one error is its own
# message, several are "[a, b]").
_NETWORK_NOT_READY = "container runtime network not ready"


def waiting_for_cni_only(condition):
    """Whether a Ready condition is False for the missing CNI alone: what a node of a
    cluster installed with ``cni: none`` reports until the site deploys its own CNI."""
    return (condition.get("status") == "False" and condition.get("reason") == "KubeletNotReady"
            and str(condition.get("message") or "").startswith(_NETWORK_NOT_READY))


# The condition RKE2's etcd member manager (k3s pkg/etcd/etcd.go, etcdStatusType) writes on each server's Node:
# True (MemberNotLearner) for a voting member, False while a learner, unhealthy or not a member.
ETCD_VOTER_CONDITION = "EtcdIsVoter"


def etcd_voter_state(node):
    """(voting, detail) of a server's Node: whether RKE2 reports it a healthy voting etcd member."""
    found = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == ETCD_VOTER_CONDITION]
    if not found:
        return False, "no %s condition yet (RKE2's etcd member manager has not reported it)" % ETCD_VOTER_CONDITION
    condition = found[0]
    if condition.get("status") == "True":
        return True, "a voting etcd member"
    why = ": ".join(part for part in (condition.get("reason"), condition.get("message")) if part)
    return False, "%s=%s%s" % (ETCD_VOTER_CONDITION, condition.get("status"), " (%s)" % why if why else "")


def node_state(node, kubelet_version=None, without_cni=False, etcd_voter=False):
    """(ready, detail) of one Node object as the API returns it (a dict), or of None
    for a node that has not registered. With ``kubelet_version``, a node is ready only
    once its kubelet runs that version: after an upgrade the old kubelet can still
    report Ready. ``without_cni`` (``cni: none``): a node whose kubelet runs and lacks
    only the network plugin counts, since no such node reports Ready=True. ``etcd_voter``:
    a server counts only as a healthy voting etcd member too (the quorum gate of a server
    restart)."""
    ready, detail = _kubelet_state(node, kubelet_version, without_cni)
    if not ready or not etcd_voter:
        return ready, detail
    voting, why = etcd_voter_state(node)
    return voting, "%s and %s" % (detail, why) if voting else "%s, but %s" % (detail, why)


def _kubelet_state(node, kubelet_version, without_cni):
    if node is None:
        return False, "not registered"
    status = node.get("status") or {}
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    version = (status.get("nodeInfo") or {}).get("kubeletVersion")
    if not ready:
        return False, "no Ready condition yet"
    condition = ready[0]
    if without_cni and waiting_for_cni_only(condition):
        if kubelet_version and version != kubelet_version:
            return False, "waiting for a CNI, and its kubelet is %s, not %s" % (version, kubelet_version)
        return True, "up, waiting for the site's CNI (kubelet %s): %s" % (version, condition.get("message"))
    if condition.get("status") != "True":
        why = ": ".join(part for part in (condition.get("reason"), condition.get("message")) if part)
        return False, "Ready=%s%s" % (condition.get("status"), " (%s)" % why if why else "")
    if kubelet_version and version != kubelet_version:
        return False, "Ready, but its kubelet is %s, not %s" % (version, kubelet_version)
    return True, "Ready (kubelet %s)" % version


def nodes_ready(nodes, names, kubelet_version=None, without_cni=False, etcd_voter=False):
    """(all ready, {name: {"ready": bool, "state": detail}}) for ``names`` among
    ``nodes`` (Node dicts, read by k8s_objects: a node the wait cannot read is refused as
    ``nodes[3] gpu-1: status.conditions is a mapping, expected a list``); ``without_cni``
    and ``etcd_voter`` as in node_state."""
    by_name = dict((n["metadata"]["name"], n) for n in ko.read_all("Node", nodes, "nodes"))
    states = {}
    for name in names:
        ready, detail = node_state(by_name.get(name), kubelet_version, without_cni, etcd_voter)
        states[name] = {"ready": ready, "state": detail}
    return all(s["ready"] for s in states.values()), states


def not_ready_message(states, timeout, stale=()):
    """The failure of a node wait at its deadline, naming each node and why."""
    waiting = ["%s: %s" % (name, state["state"]) for name, state in states.items() if not state["ready"]]
    unreachable = " (the API was unreachable at the end: %s)" % ", ".join(stale) if stale else ""
    return "nodes not ready after %ds%s: %s" % (timeout, unreachable, "; ".join(waiting))


# ---------------------------------------------------------------- cluster membership and join tokens

# What a server that runs a cluster holds (k3s pkg/server/server.go printTokens): its datastore (etcd under db/),
# the server token (node-token links to it) and the agent token (a link to the server token unless agent-token is
# set). Tokens there are full: K10<sha256 of the cluster CA>::<user>:<password> (k3s pkg/clientaccess/token.go).
DB_DIR = DATA_DIR + "/server/db"
SERVER_TOKEN_FILE = DATA_DIR + "/server/token"
AGENT_TOKEN_FILE = DATA_DIR + "/server/agent-token"
TOKEN_PREFIX = "K10"
_CA_HASH_RE = re.compile(r"^[0-9a-f]{64}$")


def parse_token(token, what="token"):
    """(CA hash, user, password) of a full token ``K10<ca hash>::<user>:<password>``, or
    ('', '', token) of a short one, as k3s's clientaccess parses them. Messages never carry the
    token itself."""
    token = (token or "").strip()
    if not token:
        raise ValueError("%s is empty" % what)
    if not token.startswith(TOKEN_PREFIX):
        return "", "", token
    ca_hash, sep, creds = token[len(TOKEN_PREFIX):].partition("::")
    if not sep:
        raise ValueError("%s starts with K10 but has no '::' after the CA hash" % what)
    if ca_hash and not _CA_HASH_RE.match(ca_hash):
        raise ValueError("%s: the CA hash after K10 is not 64 hex digits" % what)
    user, sep, password = creds.partition(":")
    if not sep or not password:
        raise ValueError("%s: the credentials after '::' are not <user>:<password>" % what)
    return ca_hash, user, password


def token_mismatch(given, cluster_token, what, source):
    """'' when ``given`` (a variable, short or full) is the token ``cluster_token`` (read from
    ``source``) holds, else why it is refused. Either empty: nothing to compare."""
    if not given or not cluster_token:
        return ""
    given_hash, _user, given_password = parse_token(given, what)
    cluster_hash, _user, cluster_password = parse_token(cluster_token, source)
    if given_password == cluster_password and (not given_hash or not cluster_hash or given_hash == cluster_hash):
        return ""
    return ("%s is not the token of the cluster that already runs (%s): RKE2 encrypts the cluster's bootstrap data "
            "with it and refuses another one. Set it back to the value the cluster was created with, or change the "
            "cluster's token first (rke2 token rotate on a server) and then %s" % (what, source, what))


def join_token(role, server_token="", agent_token="", given_token="", given_agent_token=""):
    """The token a joining node writes to its token file.

    ``server_token`` and ``agent_token`` are what a server of the cluster holds in server/token and
    server/agent-token ('' when not read). Those are full tokens: the joining node checks the
    server's CA against their hash before it sends its credentials, so they are preferred to the
    short ``rke2_token`` / ``rke2_agent_token`` the site gave. Agents get the agent token when the
    site sets one (they never need the server token then), else the server token."""
    if role == AGENT and given_agent_token:
        error = token_mismatch(given_agent_token, agent_token, "rke2_agent_token", AGENT_TOKEN_FILE)
        if error:
            raise ValueError(error)
        return (agent_token or given_agent_token).strip()
    error = token_mismatch(given_token, server_token, "rke2_token", SERVER_TOKEN_FILE)
    if error:
        raise ValueError(error)
    return (server_token or given_token).strip()


def join_plan(host, servers, holds_data, token_given=False, check_mode=False, running=None):
    """How ``host`` takes part in the cluster, from which servers hold a datastore.

    ``servers`` is rke2_servers in inventory order; ``holds_data`` is {server: True, False, or
    None when it could not be asked}. The first server of the list starts the cluster when no
    server holds one; every other node joins through a server that runs it (the first such
    server in list order other than itself), so a rebuilt or lost first server is not a single
    point of failure, and a second cluster is never started. ``running`` ({server: whether
    rke2-server is active there}, None: not asked): a server that holds a datastore but does not
    run serves no join, so those that run come first; the datastore alone still says that a
    cluster exists. Returns {"starts_cluster", "join_server", "token_source", "error"}:
    ``token_source`` is the server whose token files hold the cluster's tokens ('' while there
    is none)."""
    if not servers:
        raise ValueError("the inventory has no hosts in rke2_servers")
    first = servers[0]
    holders = [s for s in servers if holds_data.get(s) is True]
    unknown = [s for s in servers if holds_data.get(s) is None]
    if running is not None:
        # sorted() is stable: list order among those that run, then among those that do not.
        holders = sorted(holders, key=lambda s: running.get(s) is not True)
    others = [s for s in holders if s != host]
    plan = {"starts_cluster": host == first, "join_server": "", "token_source": "", "error": ""}
    if host == first:
        plan["token_source"] = host if host in holders else ""
        if host not in holders and others:
            plan["error"] = (
                "%s is the first server of rke2_servers but holds no cluster (%s is empty), while %s already run "
                "one: starting it would initialise a second cluster. List one of those first in rke2_servers (the "
                "site file's nodes order), so that %s joins it, or restore %s on %s"
                % (host, DB_DIR, ", ".join(others), host, DB_DIR, host))
        elif host not in holders and unknown:
            plan["error"] = (
                "%s would start a new cluster, but %s could not be asked whether they run one (%s): bring them "
                "back, or take them out of rke2_servers" % (host, ", ".join(unknown), DB_DIR))
        return plan
    plan["join_server"] = others[0] if others else first
    plan["token_source"] = plan["join_server"] if plan["join_server"] in holders else (holders[0] if holders else "")
    if not holders and not token_given and not check_mode:
        cause = " (%s could not be asked)" % ", ".join(unknown) if unknown else ""
        plan["error"] = ("%s cannot join: no server of rke2_servers runs a cluster yet%s (none has %s). Install the "
                         "first server, %s, first (make rke2/server/install), or give rke2_token"
                         % (host, cause, DB_DIR, first))
    return plan


def server_addresses(servers_hostvars):
    """{server: the addresses it is known by}, from each server's inventory variables: the
    address of ``host_network_address`` (the node's cluster address) first, then ``ansible_host``
    and the inventory name."""
    addresses = {}
    for server, hostvars in servers_hostvars.items():
        known = []
        if hostvars.get("host_network_address"):
            known.append(str(hostvars["host_network_address"]).split("/", 1)[0])
        known.append(str(hostvars.get("ansible_host") or server))
        known.append(server)
        addresses[server] = known
    return addresses


def join_address(api_address, server_addresses, join_server):
    """The address a joining node registers with. ``rke2_api_address`` when it is an address in
    front of the servers (a VIP or a DNS name); when it is one of the servers' own addresses
    (``server_addresses``: {server: [its addresses, the one to use first]}), the address of
    ``join_server``, the server that runs the cluster."""
    for addresses in server_addresses.values():
        if api_address in addresses:
            return (server_addresses.get(join_server) or [api_address])[0]
    return api_address


# ---------------------------------------------------------------- the service

def restart_reason(active, running_version, installed_version, changed=False, written_after_start=()):
    """Why a running unit must be restarted now, or ''. ``changed``: this run changed the release,
    config.yaml, a token or registries.yaml. ``running_version``: what the running process's
    binary reports; it differs from the installed one after a run that unpacked a release and
    was interrupted before its restart (the notification is lost with the run).
    ``written_after_start``: the files the service reads at start that were written after the
    running process started, which is what a run interrupted between writing them and the
    restart leaves."""
    if not active:
        return ""
    if changed:
        return "this run changed the release, config.yaml, a token file or registries.yaml"
    if running_version and installed_version and running_version != installed_version:
        return ("the running rke2 is %s but %s is installed: an earlier run was interrupted before its restart"
                % (running_version, installed_version))
    if written_after_start:
        return ("%s changed after the running rke2 started: an earlier run was interrupted before its restart"
                % ", ".join(written_after_start))
    return ""


# /proc's clock ticks are USER_HZ, 100 on every Linux ABI the role runs on (proc(5): sysconf(_SC_CLK_TCK)).
_USER_HZ = 100


def process_start(pid_stat, proc_stat):
    """The time (seconds since the epoch) a process started, from its /proc/<pid>/stat (field 22, starttime, in
    clock ticks since boot; the command name in parentheses may hold spaces) and /proc/stat's btime line."""
    fields = str(pid_stat or "").rsplit(")", 1)[-1].split()
    btime = [line.split()[1] for line in str(proc_stat or "").splitlines() if line.startswith("btime ")]
    if len(fields) < 20 or not btime:
        raise ValueError("cannot read a process start from /proc/<pid>/stat and /proc/stat")
    return int(btime[0]) + int(fields[19]) / float(_USER_HZ)


def written_after(files, started, slack=1.0):
    """The paths of ``files`` ({path: mtime, None when absent}) written more than ``slack`` seconds after
    ``started``, sorted."""
    return sorted(path for path, mtime in files.items() if mtime is not None and mtime > started + slack)


def start_failure(unit, action, rc, timeout, journal):
    """The failure of a bounded ``systemctl start|restart``: the deadline or the exit status, then
    the unit's last journal lines."""
    if rc in (124, 137):
        why = "did not report ready within rke2_start_timeout (%ds)" % timeout
    else:
        why = "failed (systemctl %s exited %d)" % (action, rc)
    lines = [line for line in (journal or "").splitlines() if line.strip()]
    tail = "\n".join(lines) if lines else "(the journal has no lines of %s)" % unit
    return "%s %s %s; its last journal lines:\n%s" % (action, unit, why, tail)


# ---------------------------------------------------------------- architecture and the air-gap folder

# ansible_architecture -> the architecture in RKE2's release file names.
RELEASE_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_IMAGE_ARCHIVE_RE = re.compile(r"^rke2-images(?:-([a-z0-9]+))?\.linux-([a-z0-9]+)\.tar\.(?:zst|gz)$")
# The image bundles the release publishes per CNI (scripts/build-images); the full rke2-images
# archive is core + canal.
FULL_BUNDLE = "rke2-images"


def release_arch(machine, declared="", host="this host"):
    """The release architecture of a host from its ``ansible_architecture``; a declared
    ``rke2_arch`` must agree with it."""
    arch = RELEASE_ARCHES.get(str(machine or ""))
    if not arch:
        raise ValueError("%s: ansible_architecture %r has no RKE2 release the collection installs (x86_64 -> amd64, "
                         "aarch64 -> arm64)" % (host, machine))
    if declared and declared != arch:
        raise ValueError("%s: the inventory declares rke2_arch %s, but the host is %s (ansible_architecture %s): "
                         "correct the site file's architecture of %s" % (host, declared, arch, machine, host))
    return arch


def archives_for_arch(images, arch):
    """``rke2_images`` as a host of ``arch`` loads them: the site lists each bundle once (any
    architecture in its name) and every host gets that bundle's ``linux-<its arch>`` archive.
    Names that are no RKE2 image archive stay as they are (image_archive_problems names them)."""
    result = []
    for name in images or []:
        match = _IMAGE_ARCHIVE_RE.match(str(name))
        result.append(str(name) if not match else name[:match.start(2)] + arch + name[match.end(2):])
    return result


def image_archive_problems(images, arch, cni, host="this host", registry=False):
    """What is wrong with a host's image archives (``archives_for_arch``) for ``cni``: a name that
    is no RKE2 image archive, and, unless a registry serves the images (``registry``), the core
    images or a CNI's bundle missing."""
    problems = []
    bundles = set()
    for name in images or []:
        match = _IMAGE_ARCHIVE_RE.match(str(name))
        if not match:
            problems.append("%s: %s is not an RKE2 image archive name (rke2-images[-<bundle>].linux-<arch>.tar.zst)"
                            % (host, name))
            continue
        bundles.add(match.group(1) or FULL_BUNDLE)
    if registry or not images or problems:
        return problems
    if not bundles & set(("core", FULL_BUNDLE)):
        problems.append("%s: rke2_images has no core images: add rke2-images-core.linux-%s.tar.zst (or the full "
                        "rke2-images.linux-%s.tar.zst)" % (host, arch, arch))
    names = [cni] if isinstance(cni, str) else list(cni or [])
    for name in names:
        if name == "none" or name in bundles or (name == "canal" and FULL_BUNDLE in bundles):
            continue
        problems.append("%s: rke2_cni %s needs its images, but rke2_images has no rke2-images-%s.linux-%s.tar.zst"
                        % (host, name, name, arch))
    return problems


def bundle_missing(listing, wanted, arch, host="this host", folder="rke2_artifact_dir"):
    """The files of ``wanted`` the air-gap folder (``listing``: the names in it) lacks, as one
    message naming the host and each file, or ''."""
    present = set(listing)
    missing = [name for name in wanted if name not in present]
    if not missing:
        return ""
    others = sorted(n for n in present if n.startswith("rke2.linux-") or n.startswith("sha256sum-"))
    return ("%s is %s, but %s lacks %s (it has %s)" % (host, arch, folder, ", ".join(missing),
                                                       ", ".join(others) or "no release tarball or checksum file"))
