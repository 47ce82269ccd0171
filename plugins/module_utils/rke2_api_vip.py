# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fixed API address of an HA RKE2 cluster, held by kube-vip, as pure functions: the
checks of the address against the node's network (before anything changes) and the static
pod manifest the servers' kubelets run.

Why a static pod: joining servers and agents register at ``https://<address>:9345`` and the
API certificate must name the address (``tls-san``) before the first server starts. A static
pod in RKE2's ``agent/pod-manifests`` runs as soon as the first server's kubelet does, before
the API has any object; a manifest in ``server/manifests`` would need the API first. RKE2
removes only its own components' manifests from that folder (pkg/executor/staticpod/cleanup.go,
pkg/rke2/spc.go), so ``kube-vip.yaml`` stays across restarts and upgrades."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

KUBE_VIP_VERSION = "v1.2.2"
KUBE_VIP_REPOSITORY = "kube-vip/kube-vip"
KUBE_VIP_UPSTREAM_REGISTRY = "ghcr.io"
# Where RKE2's kubelet reads static pods (k3s config.DefaultPodManifestPath under the agent's data dir).
POD_MANIFESTS_DIR = "/var/lib/rancher/rke2/agent/pod-manifests"
MANIFEST = POD_MANIFESTS_DIR + "/kube-vip.yaml"
# kube-vip's leader election talks to the local API server with the kubeconfig RKE2 writes on every server
# (cluster-admin, https://127.0.0.1:6443); it reads it at /etc/kubernetes/admin.conf.
RKE2_KUBECONFIG = "/etc/rancher/rke2/rke2.yaml"
KUBE_VIP_KUBECONFIG = "/etc/kubernetes/admin.conf"
API_PORT = 6443
# The lease the control plane instances of kube-vip elect their leader with (kube-vip's default).
LEASE_NAME = "plndr-cp-lock"
# kube-vip's `manifest pod` defaults: the leader renews every second, a lost leader is replaced within 5 s.
LEASE_SECONDS = (5, 3, 1)
# What the kernel takes as an interface name (IFNAMSIZ 16 with the NUL; no slash, no white space).
_INTERFACE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")


def default_image(system_default_registry=""):
    """kube-vip's image, from the site's registry when it has one (an air-gapped site mirrors
    ``ghcr.io/kube-vip/kube-vip`` there under the same path, as it mirrors RKE2's images)."""
    registry = system_default_registry or KUBE_VIP_UPSTREAM_REGISTRY
    return "%s/%s:%s" % (registry, KUBE_VIP_REPOSITORY, KUBE_VIP_VERSION)


def image_registry(image):
    """The registry host of an image reference, as containerd resolves it (docker.io when the
    first path component is no host)."""
    first, sep, _rest = str(image).partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _address(value, what):
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        raise ValueError("%s %r is not an IP address" % (what, value))


def problems(vip, interface, node_address, api_address="", taken=(), host="this host", airgapped=False,
             system_default_registry="", mirrors=None, image=""):
    """What is wrong with holding the API address ``vip`` on this server, one message each
    naming the variable, or []. ``node_address`` is the node's own address with its prefix
    (host_network_address, ``192.0.2.11/24``): in ARP mode kube-vip answers for the address on
    the node's own link, so it must lie in that subnet. ``taken``: the inventory's node
    addresses, none of which it may be. ``api_address`` (rke2_api_address) is what the nodes
    join through and the kubeconfig points at: the VIP itself or a DNS name for it. Air-gapped
    (``airgapped``), ``image`` must come from a registry the site runs: system-default-registry
    or a mirror in registries.yaml (``mirrors``)."""
    found = []
    try:
        address = _address(vip, "rke2_api_vip")
    except ValueError as exc:
        return ["%s: %s" % (host, exc)]
    if not interface:
        found.append("%s: rke2_api_vip %s needs rke2_api_vip_interface, the interface kube-vip announces it on "
                     "(by default host_network_interface, which this host does not set)" % (host, vip))
    elif not _INTERFACE_RE.match(str(interface)) or interface in (".", ".."):
        found.append("%s: rke2_api_vip_interface %r is not a Linux interface name (1-15 of A-Z a-z 0-9 _ . : -)"
                     % (host, interface))
    if not node_address or "/" not in str(node_address):
        found.append("%s: rke2_api_vip %s needs the node's address with its prefix (host_network_address, "
                     "192.0.2.11/24) to check that it lies in the node's subnet" % (host, vip))
    else:
        try:
            network = ipaddress.ip_interface(str(node_address)).network
        except ValueError:
            network = None
            found.append("%s: host_network_address %r is not an address with a prefix" % (host, node_address))
        if network is not None:
            if address.version != network.version or address not in network:
                found.append("%s: rke2_api_vip %s is not in the node's subnet %s (host_network_address %s): "
                             "kube-vip announces it by ARP on the node's own link, where nothing else would "
                             "route it" % (host, vip, network, node_address))
            elif network.num_addresses > 2 and address in (network.network_address, network.broadcast_address):
                found.append("%s: rke2_api_vip %s is the %s address of %s" % (
                    host, vip, "network" if address == network.network_address else "broadcast", network))
    taken_by = sorted(str(a).split("/", 1)[0] for a in taken or () if a)
    if str(address) in taken_by:
        found.append("%s: rke2_api_vip %s is a node's own address: it must be a free address of the subnet that "
                     "no host uses" % (host, vip))
    if api_address and api_address != str(vip):
        try:
            _address(api_address, "rke2_api_address")
            found.append("%s: rke2_api_address %s is not rke2_api_vip %s: the nodes would join and the kubeconfig "
                         "would point past the VIP; leave rke2_api_address unset (it follows the VIP) or name the "
                         "VIP by a DNS name" % (host, api_address, vip))
        except ValueError:
            pass  # a DNS name for the VIP
    if airgapped:
        registry = image_registry(image)
        served = set(mirrors or {}) | set([system_default_registry] if system_default_registry else [])
        if registry not in served and "*" not in served:
            found.append("%s: air-gapped, kube-vip's image %s must come from the site's registry, but %s is neither "
                         "rke2_system_default_registry nor a mirror in rke2_registries: mirror %s/%s:%s there"
                         % (host, image, registry, KUBE_VIP_UPSTREAM_REGISTRY, KUBE_VIP_REPOSITORY,
                            KUBE_VIP_VERSION))
    return found


def manifest(vip, interface, image):
    """The static pod that holds ``vip`` on the control plane node that leads: ARP mode,
    control plane only, with Kubernetes leader election over the local API server, as
    ``kube-vip manifest pod --controlplane --arp --leaderElection`` writes it, but with RKE2's
    kubeconfig and an image the site's registry serves."""
    address = _address(vip, "rke2_api_vip")
    duration, deadline, retry = LEASE_SECONDS
    env = [
        ("vip_arp", "true"),
        ("port", str(API_PORT)),
        ("vip_interface", interface),
        ("vip_subnet", "32" if address.version == 4 else "128"),
        ("cp_enable", "true"),
        ("cp_namespace", "kube-system"),
        ("vip_leaderelection", "true"),
        ("vip_leasename", LEASE_NAME),
        ("vip_leaseduration", str(duration)),
        ("vip_renewdeadline", str(deadline)),
        ("vip_retryperiod", str(retry)),
        ("address", str(address)),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "kube-vip",
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/name": "kube-vip", "app.kubernetes.io/managed-by": "gpuplatform.rke2"},
        },
        "spec": {
            "hostNetwork": True,
            "priorityClassName": "system-node-critical",
            # The kubeconfig's server is 127.0.0.1; kube-vip's own fallback name for the API is "kubernetes".
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kubernetes"]}],
            "containers": [{
                "name": "kube-vip",
                "image": image,
                # The VIP is needed most when something is down, the registry included: never pull again
                # what the node already has.
                "imagePullPolicy": "IfNotPresent",
                "args": ["manager"],
                "env": [{"name": name, "value": value} for name, value in env],
                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                "volumeMounts": [{"name": "kubeconfig", "mountPath": KUBE_VIP_KUBECONFIG, "readOnly": True}],
            }],
            # type File: until RKE2 has written its kubeconfig the kubelet retries the pod rather than
            # creating an empty file in its place.
            "volumes": [{"name": "kubeconfig", "hostPath": {"path": RKE2_KUBECONFIG, "type": "File"}}],
        },
    }
