# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which RKE2 cluster a node belongs to, from what it holds, and what the rke2 role refuses because of it: a server
that would quietly start a new, empty cluster while nodes of the old one are still there, a node that would move
from one cluster into another, a member whose join address would flip because another server holds the cluster
this run, and a server restart while a server of the cluster cannot be asked; what taking a node out means, and
which Nodes a restored snapshot holds for hosts the inventory no longer has. Pure functions over what the role
read from the hosts; errors name the node and the file that decided."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import hashlib
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2

# The cluster CA bundle an agent fetched when it joined (k3s pkg/agent/config/config.go: agent/server-ca.crt, on
# servers too: every RKE2 node runs an agent). It outlives a lost server/db, and it names the cluster the node
# belongs to: the CA hash of the cluster's full tokens is the sha256 of this bundle (k3s pkg/clientaccess/token.go
# hashCA: of the file's bytes for one certificate, of the root's DER for a bundle of several).
SERVER_CA_FILE = rke2.DATA_DIR + "/agent/server-ca.crt"
CONFIRM_VAR = "rke2_confirm_new_cluster"

_PEM_RE = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.S)


def ca_hashes(bundle):
    """The CA hashes a full token (``K10<hash>::...``) of the cluster that issued ``bundle`` (the bytes of
    agent/server-ca.crt) may carry: the sha256 of the bytes, and of each certificate's DER. k3s takes the root's
    DER for a bundle of several; any certificate of the bundle is enough to tell one cluster from another."""
    if not isinstance(bundle, bytes):
        bundle = str(bundle).encode("utf-8")
    hashes = set([hashlib.sha256(bundle).hexdigest()])
    for body in _PEM_RE.findall(bundle.decode("ascii", "replace")):
        try:
            der = base64.b64decode("".join(body.split()).encode("ascii"), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("%s is not a PEM certificate bundle: a certificate in it is not base64" % SERVER_CA_FILE)
        hashes.add(hashlib.sha256(der).hexdigest())
    return sorted(hashes)


def members_of(bundles):
    """{node: its CA hashes} of ``bundles`` ({node: the base64 of its agent/server-ca.crt, as slurp returns it, or
    '' where the node holds none}); nodes without one are left out."""
    members = {}
    for node, content in sorted((bundles or {}).items()):
        if not content:
            continue
        try:
            raw = base64.b64decode(str(content).strip(), validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise ValueError("%s: %s as read from the host is not base64" % (node, SERVER_CA_FILE))
        members[node] = ca_hashes(raw)
    return members


def token_ca_hash(token, what="the cluster's server token"):
    """The CA hash a full token names; '' for a short token (it names no CA)."""
    return rke2.parse_token(token, what)[0] if token else ""


def new_cluster_error(host, members, confirmed=False):
    """Why ``host`` may not initialise a new cluster, or ''. The role asks this of the first server when no server
    of rke2_servers holds a datastore. ``members``: {node: CA hashes} of the inventory's nodes that hold an
    agent/server-ca.crt (members_of): they belonged to a cluster, and a new one would take them over (each agent
    gets the new token, restarts into the new cluster, and its kubelet stops every pod the new API server does not
    list)."""
    if confirmed or not members:
        return ""
    return ("%s would initialise a new, empty cluster (no server of rke2_servers holds %s), but %s belonged to a "
            "cluster (%s): the agents would take the new cluster's token, restart into it, and their kubelets would "
            "stop every pod the new API server does not list. Restore the cluster's datastore on %s first (an etcd "
            "snapshot: rke2 server --cluster-reset --cluster-reset-restore-path=<snapshot>, docs/rke2.md), or, to "
            "start a new cluster on purpose, run again with %s=true"
            % (host, rke2.DB_DIR, ", ".join(sorted(members)), SERVER_CA_FILE, host, CONFIRM_VAR))


def foreign_cluster_error(host, own_hashes, cluster_ca, source, confirmed=False):
    """Why ``host`` may not join the cluster whose server token (read from ``source``) names ``cluster_ca``, or ''.
    ``own_hashes``: the CA hashes of the node's own agent/server-ca.crt (empty: it was never a member, or its
    data is gone, and it joins as a new node). A short token names no CA: nothing to compare."""
    if confirmed or not own_hashes or not cluster_ca or cluster_ca in own_hashes:
        return ""
    return ("%s belongs to another cluster: its %s is not the CA of the cluster %s runs (that cluster's token names "
            "CA %s...). Joining would move it into this cluster, and its kubelet would stop the pods of the old one. "
            "If the old cluster is gone on purpose, run again with %s=true (or uninstall RKE2 on %s first); if not, "
            "restore the old cluster instead of joining this one"
            % (host, SERVER_CA_FILE, source, cluster_ca[:16], CONFIRM_VAR, host))


def _address_of(server_url):
    """The host of a ``server:`` URL (https://<host>:9345), IPv6 brackets taken off."""
    rest = str(server_url or "").strip()
    rest = rest.split("://", 1)[1] if "://" in rest else rest
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def kept_join_address(computed, joined_with, member, api_address, server_addresses):
    """The address a node registers with this run. A member of the cluster (``member``) keeps the server it joined
    with (``joined_with``: the ``server:`` of its config.yaml) while both that and rke2_api_address are servers' own
    addresses: which server holds the cluster this run (the first one may be down) must not rewrite every node's
    config and restart it. A site that puts an address in front of the servers (a VIP, a DNS name) changes it on
    purpose: ``computed`` (rke2.join_address) then wins."""
    joined = _address_of(joined_with)
    if not member or not joined:
        return computed
    own = set(address for addresses in server_addresses.values() for address in addresses)
    if api_address in own and joined in own:
        return joined
    return computed


def restart_refusal(host, reason, unknown_servers):
    """Why the server ``host`` may not restart now, or ''. ``reason``: why it would (rke2.restart_reason);
    ``unknown_servers``: servers of rke2_servers that could not be asked this run. A restart while a server is
    down leaves the cluster at its minimum quorum, or below it."""
    unknown = [server for server in unknown_servers if server != host]
    if not reason or not unknown:
        return ""
    return ("%s would restart (%s) while %s could not be asked: a server restart with a server down leaves etcd at "
            "its quorum or below it. Bring %s back, or take it out of rke2_servers and the cluster, then run again"
            % (host, reason, ", ".join(unknown), " and ".join(unknown)))


def node_password_secret(node_name):
    """The Secret in kube-system where RKE2 keeps a node's password hash (k3s pkg/nodepassword: <node>.node-password.
    rke2, lower case): a host reinstalled under the same name is refused ("Node password rejected") while it is
    there."""
    return "%s.node-password.rke2" % str(node_name).lower()


def removal_plan(host, servers, agents, node_name):
    """What taking ``host`` out of the cluster for good means: {"role", "node_name", "secret", "quorum_nodes",
    "error"}. ``quorum_nodes`` are the servers that stay (inventory names): each must be Ready and vote in etcd
    before a server goes. The cluster's last server is refused: that is an uninstall of the cluster."""
    plan = {"role": "", "node_name": node_name or host, "secret": node_password_secret(node_name or host),
            "quorum_nodes": [], "error": ""}
    if host in servers:
        plan["role"] = rke2.SERVER
        plan["quorum_nodes"] = [server for server in servers if server != host]
        if not plan["quorum_nodes"]:
            plan["error"] = ("%s is the cluster's only server: removing it ends the cluster. Uninstall the cluster "
                             "instead (make rke2/uninstall), or add a server first" % host)
    elif host in agents:
        plan["role"] = rke2.AGENT
    else:
        plan["error"] = ("rke2_remove_node=%s: no such host in rke2_servers or rke2_agents (%s)"
                         % (host, ", ".join(list(servers) + list(agents)) or "the inventory has none"))
    return plan


def stale_nodes(nodes, inventory_names):
    """The Nodes a restored snapshot holds for hosts the inventory no longer has: [{"node", "secret"}], sorted, each
    with its node-password secret in kube-system. ``nodes``: the Node names the cluster lists (kubectl's ``node/``
    prefix allowed); ``inventory_names``: the Kubernetes node names of rke2_servers and rke2_agents. Node names are
    lower case (k3s lowers the host name), so the comparison is too."""
    for what, names in (("the cluster's Node list", nodes), ("the inventory's node names", inventory_names)):
        if not isinstance(names, (list, tuple)):
            raise ValueError("%s is %s, expected a list of names" % (what, type(names).__name__))
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise ValueError("%s lists %r, expected a node name" % (what, name))
    known = set(name.strip().lower() for name in inventory_names)
    listed = set(name.strip()[len("node/"):] if name.strip().startswith("node/") else name.strip() for name in nodes)
    return [{"node": name, "secret": node_password_secret(name)}
            for name in sorted(listed) if name.lower() not in known]


# The cluster network a running cluster keeps, with RKE2's defaults (k3s pkg/cli/cmds/server.go; cni: RKE2's
# pkg/cli/cmds/server.go). RKE2 moves no pod to another CNI or CIDR: a changed value on a running cluster strands
# every pod and service address already given out, and etcd keeps the old ranges.
CLUSTER_NETWORK_DEFAULTS = (("cni", ["canal"]), ("cluster-cidr", "10.42.0.0/16"), ("service-cidr", "10.43.0.0/16"),
                            ("cluster-dns", "10.43.0.10"), ("cluster-domain", "cluster.local"))


def _network_value(config, key, default):
    value = config.get(key, config.get(key + "+", default))
    if key == "cni":
        value = [value] if isinstance(value, str) else list(value or default)
        return [str(part).strip() for item in value for part in str(item).split(",") if str(part).strip()]
    return str(value).strip() if value is not None else default


def network_change_error(new, current, member, host="this host", role="server"):
    """Why config.yaml may not change the cluster network of ``host`` now, or ''. ``new`` and ``current``: the
    config.yaml this run writes and the one the node runs with; ``member``: the node belongs to the cluster (it
    holds agent/server-ca.crt). Only servers carry these keys; a node that is not a member yet takes any value."""
    if not member or role != rke2.SERVER or not isinstance(current, dict) or not current:
        return ""
    changed = []
    for key, default in CLUSTER_NETWORK_DEFAULTS:
        before, after = _network_value(current, key, default), _network_value(new, key, default)
        if before != after:
            changed.append("%s %s -> %s" % (key, ",".join(before) if key == "cni" else before,
                                            ",".join(after) if key == "cni" else after))
    if not changed:
        return ""
    return ("%s runs the cluster with another network than this run would write (%s): RKE2 moves no pod to another "
            "CNI or address range, and etcd keeps the old ones. Set it back; a new network is a new cluster "
            "(make rke2/uninstall, then install)" % (host, "; ".join(changed)))


def trusted_sources(config):
    """The pod and service address ranges of the cluster ``config`` (a server's config.yaml: cluster-cidr and
    service-cidr, RKE2's defaults where unset, each range of a dual-stack list), in that order: firewalld's trusted
    zone must take them, or its default zone drops the traffic between pods and services of different nodes
    (RKE2's and k3s's firewalld requirements)."""
    sources = []
    for key in ("cluster-cidr", "service-cidr"):
        value = _network_value(config if isinstance(config, dict) else {}, key, dict(CLUSTER_NETWORK_DEFAULTS)[key])
        for cidr in (part.strip() for part in value.split(",")):
            if cidr and cidr not in sources:
                sources.append(cidr)
    return sources
