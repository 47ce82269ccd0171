# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Step 2 of the ADR: one site file -> the site's Ansible inventory.

``validate(site)`` checks the whole site file and raises SiteError listing every
problem, each naming its key (``nodes[2].gpu.workload_config``); ``render(site,
source)`` returns the files of ``inventories/<site>/`` as text; ``render_problems(site)``
lists the facts ``make site/render`` needs beyond a valid inventory (a GPU host's
``os``), each by its key. Pure: the module ``site_inventory`` reads and writes the files.

The inventory is the contract the roles read (docs/rke2.md): groups ``rke2_servers``
(first host = first server), ``rke2_agents``, ``gpu_nodes``; per host ``ansible_host``,
``host_network_*``, ``k8s_node_name``, ``rke2_arch``, ``rke2_node_labels``/``rke2_node_taints`` and the
``gpu_*`` variables; site-wide ``site_name``, ``gpu_models``, the ``gpu_operator_*``
decisions and the ``rke2_*``/``host_network_*`` settings in ``group_vars/all.yml``.

The site file's top-level keys are valid variable names (``site``, ``nodes``), so
linters that read it as a vars file accept it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_charts
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_day2

SCHEMA_VERSION = 1
SERVERS, AGENTS, GPU_NODES = "rke2_servers", "rke2_agents", "gpu_nodes"
HOSTS_FILE = "hosts.yml"
GROUP_VARS_FILE = "group_vars/all.yml"
ARTIFACT_SOURCES = ("online", "local")
NETWORK_BACKENDS = ("auto", "netplan", "networkmanager")

_SITE_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_INTERFACE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")

# Allowed keys per mapping: typos fail instead of being ignored.
_TOP_KEYS = ("schema", "site", "description", "network", "ansible", "rke2", "gpu_models", "gpu_operator", "nodes")
_NETWORK_KEYS = ("cidr", "gateway", "dns_servers", "dns_search", "interface", "backend")
_ANSIBLE_KEYS = ("user", "become", "python_interpreter")
_RKE2_KEYS = ("version", "api_address", "api_vip", "tls_san", "cni", "system_default_registry", "registries",
              "profile", "config_extra", "chart_values", "artifacts", "etcd_snapshots")
# The config.yaml keys rke2.etcd_snapshots sets, and its key that sets each: rke2.config_extra may not set them.
_ETCD_SNAPSHOT_SITE_KEYS = dict([(key, name) for name, key in rke2.ETCD_SNAPSHOT_KEYS]
                                + [(key, "s3." + name) for name, key in rke2.ETCD_S3_KEYS])
_ARTIFACT_KEYS = ("source", "dir", "images")
_HOST_KEYS = ("name", "role", "address", "ansible_host", "interface", "backend", "node_name", "arch", "os", "kernel",
              "labels", "taints", "gpu")
# A host's CPU architecture as Kubernetes (kubernetes.io/arch), RKE2's artifacts and the image
# indexes name it; rendered as rke2_arch, which the preflight and the rke2 role hold against the host.
ARCHITECTURES = ("amd64", "arm64")
_GPU_KEYS = ("workload_config", "model", "pci_device_name", "count", "vgpu_config", "operands_disabled", "isolated")
_GPU_MODEL_KEYS = ("pci_vendor_selector", "pci_device_name", "memory_gb")
# RKE2's image archives carry the architecture in their name (rke2-images-core.linux-amd64.tar.zst).
_IMAGE_ARCHIVE_ARCH_RE = re.compile(r"^(rke2-images(?:-[a-z0-9-]+)?\.linux-)(amd64|arm64)(\.tar\.(?:zst|gz))$")
_PCI_SELECTOR_RE = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$")
_VAR_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# A host's OS as the GPU Operator's driver and vGPU manager images tag it: ubuntu24.04, rhel9.6, rhcos4.18.
_OS_TAG_RE = re.compile(r"^[a-z]+[0-9]+(\.[0-9]+)*$")
_OS_EXAMPLES = "ubuntu22.04, ubuntu24.04, rhel9.6"
_KERNEL_RE = re.compile(r"^[0-9][A-Za-z0-9._+-]*$")
# The gpu_operator role's settings that make site/render hands to gpu_operator_chart as the site file gives
# them (roles/gpu_operator/tasks/validate.yml), with the shape that module's argument spec takes: a value of
# another shape is refused here by its key, instead of by the module in terms of its own options (or, for a
# mapping given as a number, by a traceback inside Ansible's argument spec). A type, a tuple of the allowed
# values, [type] for a list of them, or {key: shape} for a mapping of those keys. The other keys pass through
# as gpu_operator_<key>, which the role checks (``version`` is checked by _operator_version).
_STRING_LIST = [str]
_OPERATOR_SHAPES = {
    "name": str, "namespace": str, "chart_repo": str, "chart_archive": str, "image_registry": str,
    "argocd_namespace": str, "argocd_project": str,
    "failure_policy": ov.FAILURE_POLICIES,
    "mig_strategy": ov.ENUMERATED_VALUES["mig.strategy"],
    "driver_enabled": bool, "driver_use_precompiled": bool, "toolkit_enabled": bool, "cdi_enabled": bool,
    "nri_plugin_enabled": bool,
    "driver_os_tags": _STRING_LIST, "driver_kernels": _STRING_LIST,
    # Chart values, deep-merged last: gpu_operator_chart checks them against the chart's own, by their key there.
    "extra_values": dict,
    "sandbox_workloads": {"enabled": bool, "default_workload": om.WORKLOAD_CONFIGS, "mode": om.SANDBOX_MODES},
    "vgpu_manager": {"repository": str, "image": str, "version": str},
    "time_slicing": {"replicas": int, "rename_by_default": bool, "fail_requests_greater_than_one": bool,
                     "resource": str},
}
# gpu_operator_chart's argument spec requires it once time_slicing is given.
_OPERATOR_REQUIRED = {"time_slicing": ("replicas",)}
# gpu_operator_chart takes null for these (the chart line's default, none); the role hands a null given for
# another on as a value its argument spec refuses.
_OPERATOR_NULLABLE = ("cdi_enabled", "vgpu_manager", "time_slicing", "chart_archive", "image_registry")
_SHAPE_NAMES = {str: "a string", bool: "true or false", int: "a whole number", dict: "a mapping"}


def _shape_name(shape):
    """What a value of ``shape`` is, for messages: "a mapping of enabled, mode", "one of abort, reinstall"."""
    if isinstance(shape, dict):
        return "a mapping of %s" % ", ".join(sorted(shape))
    if isinstance(shape, list):
        return "a list of strings"
    if isinstance(shape, tuple):
        return "one of %s" % ", ".join(shape)
    return _SHAPE_NAMES[shape]


# A registry's entries in RKE2's registries.yaml (docs.rke2.io/install/private_registry), shapes as above.
_REGISTRY_MIRROR = {"endpoint": _STRING_LIST, "rewrite": dict}
_REGISTRY_CONFIG = {"auth": {"username": str, "password": str, "auth": str, "identity_token": str},
                    "tls": {"cert_file": str, "key_file": str, "ca_file": str, "insecure_skip_verify": bool}}

# Registry credentials in a site file (which is committed) must be references, never the value.
_SECRET_AUTH_KEYS = ("password", "auth", "identity_token")
_REFERENCE_RE = re.compile(r"^\s*\{\{.*\}\}\s*$", re.S)


class SiteError(ValueError):
    """The site file is wrong; ``problems`` lists every finding, each naming its key."""

    def __init__(self, source, problems):
        super(SiteError, self).__init__("%s: %s" % (source, "; ".join(problems)))
        self.problems = problems


class _Checker(object):
    def __init__(self):
        self.problems = []

    def fail(self, where, message):
        self.problems.append("%s: %s" % (where, message))

    def mapping(self, value, where, allowed, required=()):
        if not isinstance(value, dict):
            self.fail(where, "must be a mapping")
            return {}
        # key=str: YAML reads an unquoted 1 as a number, and sorting a number with strings fails.
        for key in sorted(set(value) - set(allowed), key=str):
            self.fail("%s.%s" % (where, key) if where else key, "unknown key (allowed: %s)" % ", ".join(allowed))
        for key in required:
            if value.get(key) in (None, "", [], {}):
                self.fail("%s.%s" % (where, key) if where else key, "is required")
        return value

    def string_list(self, value, where):
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(where, "must be a list of strings")
            return []
        return value

    def string(self, value, where, what="a string"):
        """``value`` is a string when given: YAML reads a bare no, 0 or 1.5 as another type, which a check of
        the text would take for "not given" or print as something else. False when it is not."""
        if value is None or isinstance(value, str):
            return True
        self.fail(where, "must be %s, got %r" % (what, value))
        return False

    def shape(self, value, where, shape, required=(), null_given=True):
        """``value`` has ``shape`` (see _OPERATOR_SHAPES). ``null_given``: a null inside stands for "not given"
        (registries.yaml); else a null is refused too, as the gpu_operator role hands it on as a value."""
        if value is None:
            self.fail(where, "must be %s, got null (leave the key out for the default)" % _shape_name(shape))
        elif isinstance(shape, dict) and not isinstance(value, dict):
            self.fail(where, "must be %s, got %r" % (_shape_name(shape), value))
        elif isinstance(shape, dict):
            for key, item in sorted(self.mapping(value, where, sorted(shape), required).items(), key=str):
                if key in shape and (item is not None or not null_given):
                    self.shape(item, "%s.%s" % (where, key), shape[key], null_given=null_given)
        elif isinstance(shape, list):
            self.string_list(value, where)
        elif isinstance(shape, tuple):
            if isinstance(value, (list, dict)) or value not in shape:
                self.fail(where, "%r is not one of %s" % (value, ", ".join(shape)))
        # bool is an int to Python, not to a site file.
        elif not isinstance(value, shape) or (shape is int and isinstance(value, bool)):
            self.fail(where, "must be %s, got %r" % (_shape_name(shape), value))

    def ip(self, value, where):
        try:
            return ipaddress.ip_address(str(value))
        except ValueError:
            self.fail(where, "%r is not an IP address" % (value,))
            return None

    def guarded(self, where, function, *args):
        try:
            return function(*args)
        except ValueError as exc:
            message = str(exc)
            # Messages that already start with the key need no second copy of it.
            self.problems.append(message if message.startswith(where) else "%s: %s" % (where, message))
            return None


def _network(check, site):
    net = check.mapping(site.get("network"), "network", _NETWORK_KEYS, ("cidr", "gateway", "dns_servers"))
    for key in ("cidr", "gateway", "interface"):
        if not check.string(net.get(key), "network." + key):
            net = dict(net, **{key: None})  # refused: the checks below take it as not given
    cidr = None
    if net.get("cidr"):
        try:
            cidr = ipaddress.ip_network(net["cidr"], strict=True)
        except ValueError as exc:
            check.fail("network.cidr", str(exc))
    gateway = check.ip(net["gateway"], "network.gateway") if net.get("gateway") else None
    if cidr and gateway and gateway not in cidr:
        check.fail("network.gateway", "%s is outside %s" % (gateway, cidr))
    for index, server in enumerate(check.string_list(net.get("dns_servers"), "network.dns_servers")):
        check.ip(server, "network.dns_servers[%d]" % index)
    check.string_list(net.get("dns_search"), "network.dns_search")
    if net.get("interface") and not _INTERFACE_RE.match(net["interface"]):
        check.fail("network.interface", "%r is not an interface name" % net["interface"])
    if net.get("backend") not in (None,) + NETWORK_BACKENDS:
        check.fail("network.backend", "%r is not one of %s" % (net["backend"], ", ".join(NETWORK_BACKENDS)))
    return net, cidr, gateway


def _gpu_models(check, site):
    models = site.get("gpu_models")
    if models is None:
        return {}
    if not isinstance(models, dict) or not models:
        check.fail("gpu_models", "must be a mapping of model name to {pci_vendor_selector, pci_device_name, memory_gb}")
        return {}
    for name, model in models.items():
        where = "gpu_models.%s" % name
        if not isinstance(name, str):
            check.fail(where, "a model name must be a string (quote it: nodes[].gpu.model names it)")
        model = check.mapping(model, where, _GPU_MODEL_KEYS, _GPU_MODEL_KEYS)
        pci = model.get("pci_device_name")
        if pci is not None and not isinstance(pci, str):
            check.fail(where + ".pci_device_name", "must be a string, got %r" % (pci,))
        selector = model.get("pci_vendor_selector")
        if selector and not _PCI_SELECTOR_RE.match(str(selector)):
            check.fail(where + ".pci_vendor_selector", "%r is not VVVV:DDDD (for example 10DE:2236)" % selector)
        memory = model.get("memory_gb")
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 1):
            check.fail(where + ".memory_gb", "must be a whole number of GB, got %r" % (memory,))
    return models


def _gpu(check, gpu, where, models):
    gpu = check.mapping(gpu, where, _GPU_KEYS, ("workload_config",))
    for key in ("workload_config", "model", "pci_device_name", "vgpu_config"):
        if gpu.get(key) is not None and not isinstance(gpu[key], str):
            check.fail("%s.%s" % (where, key), "must be a string, got %r" % (gpu[key],))
            gpu = dict(gpu, **{key: None})
    config = gpu.get("workload_config")
    if config and config not in om.WORKLOAD_CONFIGS:
        check.fail(where + ".workload_config", "%r is not one of %s" % (config, ", ".join(om.WORKLOAD_CONFIGS)))
    model = gpu.get("model")
    if model is not None and models and model not in models:
        check.fail(where + ".model", "%r is not one of gpu_models (%s)" % (model, ", ".join(sorted(map(str, models)))))
    count = gpu.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        check.fail(where + ".count", "must be a whole number of at least 1, got %r" % (count,))
    entry = (models or {}).get(model) if model else None
    pci = gpu.get("pci_device_name") or (entry.get("pci_device_name") if isinstance(entry, dict) else None)
    if not isinstance(pci, str):
        pci = None  # the model's is not a string: refused under gpu_models
    if config == om.VM_PASSTHROUGH:
        if not pci:
            check.fail(where + ".pci_device_name", "is required for vm-passthrough, here or in the gpu_models entry of "
                       "%s.model (it names the resource, for example 'GA102GL [A10]' -> nvidia.com/GA102GL_A10)"
                       % where)
        elif om.resource_workload_config(om.passthrough_resource_name(pci)) != om.VM_PASSTHROUGH:
            check.fail(where + ".pci_device_name", "%r does not name a passthrough device" % pci)
    profile = gpu.get("vgpu_config")
    if config == om.VM_VGPU:
        if not profile:
            check.fail(where + ".vgpu_config", "is required for vm-vgpu (a profile such as A10-12Q)")
        elif om.resource_workload_config(om.vgpu_resource_name(om.vgpu_type_name(profile))) != om.VM_VGPU:
            check.fail(where + ".vgpu_config", "%r is not a vGPU profile such as A10-12Q" % profile)
    elif profile:
        check.fail(where + ".vgpu_config", "is only used with workload_config vm-vgpu")
    for index, operand in enumerate(check.string_list(gpu.get("operands_disabled"), where + ".operands_disabled")):
        if operand not in om.OPERAND_NAMES:
            check.fail("%s.operands_disabled[%d]" % (where, index), "%r is not an operand (%s)"
                       % (operand, ", ".join(om.OPERAND_NAMES)))
    if gpu.get("isolated") is not None and not isinstance(gpu["isolated"], bool):
        check.fail(where + ".isolated", "must be true or false")
    return gpu


def _hosts(check, site, cidr, gateway, models):
    hosts = site.get("nodes")
    if not isinstance(hosts, list) or not hosts:
        check.fail("nodes", "must be a non-empty list")
        return []
    seen = {"name": {}, "node_name": {}, "address": {}}
    result = []
    for index, host in enumerate(hosts):
        where = "nodes[%d]" % index
        host = check.mapping(host, where, _HOST_KEYS, ("name", "role", "address"))
        if not host:
            continue
        # A name: false or address: 0 passes the required check and would render as a host "False".
        for key in ("name", "node_name", "address", "ansible_host", "interface", "os", "kernel"):
            if not check.string(host.get(key), "%s.%s" % (where, key)):
                host = dict(host, **{key: None})  # refused: the checks below take it as not given
        name = host.get("name")
        if name:
            check.guarded(where + ".name", rke2.check_node_name, name, "host name")
        node_name = host.get("node_name") or name
        if host.get("node_name"):
            check.guarded(where + ".node_name", rke2.check_node_name, host["node_name"], "node name")
        if host.get("role") not in (None,) + rke2.NODE_ROLES:
            check.fail(where + ".role", "%r is not one of %s" % (host["role"], ", ".join(rke2.NODE_ROLES)))
        address = check.ip(host["address"], where + ".address") if host.get("address") else None
        if address and cidr:
            if address not in cidr:
                check.fail(where + ".address", "%s is outside network.cidr %s" % (address, cidr))
            elif cidr.num_addresses > 2 and address in (cidr.network_address, cidr.broadcast_address):
                check.fail(where + ".address", "%s is the network or broadcast address of %s" % (address, cidr))
            elif address == gateway:
                check.fail(where + ".address", "%s is the gateway" % address)
        for key, value in (("name", name), ("node_name", node_name), ("address", address)):
            if value is None or isinstance(value, (list, dict)):
                continue  # not a name: refused above
            if value in seen[key]:
                check.fail(where + "." + key, "%s is also %s's" % (value, seen[key][value]))
            else:
                seen[key][value] = where
        if host.get("interface") and not _INTERFACE_RE.match(host["interface"]):
            check.fail(where + ".interface", "%r is not an interface name" % host["interface"])
        if host.get("backend") not in (None,) + NETWORK_BACKENDS:
            check.fail(where + ".backend", "%r is not one of %s" % (host["backend"], ", ".join(NETWORK_BACKENDS)))
        if host.get("arch") is not None and host["arch"] not in ARCHITECTURES:
            check.fail(where + ".arch", "%r is not one of %s (as kubernetes.io/arch names it: aarch64 is arm64, "
                       "x86_64 is amd64)" % (host["arch"], ", ".join(ARCHITECTURES)))
        if host.get("os") is not None and not _OS_TAG_RE.match(host["os"]):
            check.fail(where + ".os", "%r is not an OS as the driver images tag it (%s)" % (host["os"], _OS_EXAMPLES))
        if host.get("kernel") is not None and not _KERNEL_RE.match(host["kernel"]):
            check.fail(where + ".kernel", "%r is not a kernel release as uname -r prints it (6.8.0-60-generic)"
                       % (host["kernel"],))
        # Only null stands for none: labels: false or taints: {} is a value of another type.
        if host.get("labels") is not None:
            check.guarded(where + ".labels", rke2.node_label_args, host["labels"], where + ".labels")
        if host.get("taints") is not None:
            check.guarded(where + ".taints", rke2.node_taint_args, host["taints"], where + ".taints")
        if host.get("gpu") is not None:
            _gpu(check, host["gpu"], where + ".gpu", models)
        result.append(host)
    if not any(h.get("role") == rke2.SERVER for h in result):
        check.fail("nodes", "no node has role server: a cluster needs at least one")
    return result


def _rke2(check, site, cidr=None):
    conf = check.mapping(site.get("rke2"), "rke2", _RKE2_KEYS, ("version",))
    if conf.get("api_vip") not in (None, ""):
        # kube-vip announces it by ARP on the servers' own link (the rke2 role checks each server's subnet too).
        vip = check.ip(conf["api_vip"], "rke2.api_vip")
        if vip and cidr and vip not in cidr:
            check.fail("rke2.api_vip", "%s is outside network.cidr %s: kube-vip announces it on the nodes' own "
                                       "subnet" % (vip, cidr))
    # Any value but null: version: false passes the required check, and is no version.
    if conf.get("version") is not None:
        check.guarded("rke2.version", rke2.parse_version, conf["version"], "rke2.version")
    check.string(conf.get("api_address"), "rke2.api_address", "a host name or IP address")
    cni_ok = conf.get("cni") is None or check.guarded("rke2.cni", rke2.cni_value, conf["cni"], "rke2.cni")
    check.string_list(conf.get("tls_san"), "rke2.tls_san")
    check.guarded("rke2.system_default_registry", rke2.system_default_registry_value,
                  conf.get("system_default_registry"), "rke2.system_default_registry")
    profile = conf.get("profile")
    if profile not in (None, "") and (isinstance(profile, (list, dict)) or profile not in rke2.PROFILES):
        check.fail("rke2.profile", "%r is not one of %s (or empty for none)" % (profile, ", ".join(rke2.PROFILES)))
    for key in ("registries", "config_extra", "chart_values"):
        if conf.get(key) is not None and not isinstance(conf[key], dict):
            check.fail("rke2." + key, "must be a mapping")
    if isinstance(conf.get("registries"), dict):
        _registries(check, conf["registries"])
    if isinstance(conf.get("chart_values"), dict) and cni_ok:
        # The charts RKE2 deploys, and only those of its CNI: the rke2 role's HelmChartConfigs refuse others.
        check.guarded("rke2.chart_values", rke2_charts.chart_values, conf["chart_values"], conf.get("cni") or "canal",
                      "", 0, "rke2.chart_values")
    if conf.get("artifacts") is not None:
        artifacts = check.mapping(conf["artifacts"], "rke2.artifacts", _ARTIFACT_KEYS, ("source",))
        source = artifacts.get("source")
        check.string(artifacts.get("dir"), "rke2.artifacts.dir", "a path")
        if source is not None and (isinstance(source, (list, dict)) or source not in ARTIFACT_SOURCES):
            check.fail("rke2.artifacts.source", "%r is not one of %s" % (source, ", ".join(ARTIFACT_SOURCES)))
        if source == "local" and not artifacts.get("dir"):
            check.fail("rke2.artifacts.dir", "is required when source is local")
        check.string_list(artifacts.get("images"), "rke2.artifacts.images")
    if conf.get("etcd_snapshots") is not None:
        _etcd_snapshots(check, conf["etcd_snapshots"])
    extra = conf.get("config_extra")
    for key in sorted(set(extra) & set(_ETCD_SNAPSHOT_SITE_KEYS) if isinstance(extra, dict) else ()):
        check.fail("rke2.config_extra.%s" % key, "is set from rke2.etcd_snapshots (%s): give it there"
                   % _ETCD_SNAPSHOT_SITE_KEYS[key])
    for key in rke2.secret_config_keys(extra):
        if not _REFERENCE_RE.match(str(extra[key])):
            check.fail("rke2.config_extra.%s" % key,
                       "a secret in the site file would be committed with it and shown by --diff: give a reference "
                       "to a vaulted variable instead, for example '{{ vault_%s }}'" % str(key).rstrip("+").replace(
                           "-", "_"))
    configs = (conf.get("registries") or {}).get("configs") if isinstance(conf.get("registries"), dict) else None
    # key=str: a registry name YAML reads as a number (refused by _registries) sorts with no string.
    for registry, settings in sorted(configs.items(), key=lambda i: str(i[0])) if isinstance(configs, dict) else ():
        auth = settings.get("auth") if isinstance(settings, dict) else None
        for key in _SECRET_AUTH_KEYS:
            value = (auth or {}).get(key) if isinstance(auth, dict) else None
            if value is not None and not _REFERENCE_RE.match(str(value)):
                check.fail('rke2.registries.configs."%s".auth.%s' % (registry, key),
                           "a secret in the site file would be committed with it: give a reference to a vaulted "
                           "variable instead, for example '{{ vault_registry_password }}'")
    return conf


def _etcd_snapshots(check, snapshots):
    """rke2.etcd_snapshots as the rke2 role checks its variables (rke2_day2.etcd_snapshot_config, here named by
    their keys); the S3 credentials are references to vaulted variables, as registry passwords are."""
    where = "rke2.etcd_snapshots"
    s3 = snapshots.get("s3") if isinstance(snapshots, dict) else None
    for name in rke2_day2.S3_SECRETS if isinstance(s3, dict) else ():
        # A value of another type is the role's check's (below), which never prints it.
        if isinstance(s3.get(name), str) and s3[name] and not _REFERENCE_RE.match(s3[name]):
            check.fail("%s.s3.%s" % (where, name),
                       "a secret in the site file would be committed with it and shown by --diff: give a reference "
                       "to a vaulted variable instead, for example '{{ vault_etcd_s3_%s }}'" % name)
    check.guarded(where, rke2_day2.etcd_snapshot_config, rke2.SERVER, snapshots, where)


def _registries(check, registries):
    """rke2.registries as RKE2's registries.yaml reads it (docs.rke2.io/install/private_registry):
    ``mirrors`` and ``configs``, each a mapping of registry name to its settings; the rke2 role and its
    kube-vip check read them so."""
    registries = check.mapping(registries, "rke2.registries", ("mirrors", "configs"))
    for section, shape in (("mirrors", _REGISTRY_MIRROR), ("configs", _REGISTRY_CONFIG)):
        where, entries = "rke2.registries." + section, registries.get(section)
        if entries is not None and not isinstance(entries, dict):
            check.fail(where, "must be a mapping of registry name to its settings, got %r" % (entries,))
            continue
        # key=str: a registry name YAML reads as a number sorts with no string.
        for registry, settings in sorted((entries or {}).items(), key=lambda item: str(item[0])):
            if settings is not None:  # a registry named with nothing under it takes the defaults
                check.shape(settings, '%s."%s"' % (where, registry), shape)


def _operator_settings(check, operator):
    """The gpu_operator settings gpu_operator_chart takes, each of the shape its argument spec wants."""
    for key in sorted(set(operator) & set(_OPERATOR_SHAPES)):
        if operator[key] is not None or key not in _OPERATOR_NULLABLE:
            check.shape(operator[key], "gpu_operator.%s" % key, _OPERATOR_SHAPES[key], _OPERATOR_REQUIRED.get(key, ()),
                        null_given=False)


def _operator_version(check, operator):
    """The chart version, checked here so that a site file names its own key: ``gpu_operator.version``, or
    ``gpu_operator.chart_version`` (the role's older name for it); both given, they must agree."""
    # A null too: the role would render the chart version "v".
    given = [(key, operator[key]) for key in ("version", "chart_version") if key in operator]
    for key, value in given:
        if not isinstance(value, str):
            check.fail("gpu_operator.%s" % key, "must be a chart version string like %s, got %r"
                       % (ov.DEFAULT_CHART_VERSION, value))
    if not all(isinstance(value, str) for _key, value in given):
        return
    if len(given) == 2 and ov.canonical_version(given[0][1]) != ov.canonical_version(given[1][1]):
        check.fail("gpu_operator.version", "%r and gpu_operator.chart_version %r disagree: give one (version)"
                   % (given[0][1], given[1][1]))
        return
    for key, value in given[:1]:
        for problem in ov.version_problems(value, "gpu_operator.%s" % key):
            key_name, _sep, message = problem.partition(": ")
            check.fail(key_name, message)


def validate(site, source="site file"):
    """The site file, checked; raises SiteError listing every problem. Returns the
    warnings (advice that does not stop rendering)."""
    check = _Checker()
    check.mapping(site, "", _TOP_KEYS, ("site", "network", "rke2", "nodes"))
    if not isinstance(site, dict):
        raise SiteError(source, check.problems)
    # true and 1.0 equal 1 to Python, not to a site file.
    schema = site.get("schema", SCHEMA_VERSION)
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA_VERSION:
        check.fail("schema", "version %r is not supported (this collection reads %d)" % (site["schema"], SCHEMA_VERSION))
    # Any value but null: site: false passes the required check, and site: 7 would name the context 7.
    if site.get("site") is not None and not (isinstance(site["site"], str) and _SITE_NAME_RE.match(site["site"])):
        check.fail("site", "%r must be a lower-case DNS label (it names the kubeconfig context)" % (site["site"],))
    check.string(site.get("description"), "description")
    _net, cidr, gateway = _network(check, site)
    models = _gpu_models(check, site)
    hosts = _hosts(check, site, cidr, gateway, models)
    _rke2(check, site, cidr)
    # The GPU Operator decisions pass through as gpu_operator_<key>: the gpu_operator role checks their values.
    operator = site.get("gpu_operator")
    if operator is not None and not isinstance(operator, dict):
        check.fail("gpu_operator", "must be a mapping of the gpu_operator role's settings without their prefix")
    for key in (operator if isinstance(operator, dict) else {}):
        if not _VAR_NAME_RE.match(str(key)):
            check.fail("gpu_operator.%s" % key, "is not a variable name (it becomes gpu_operator_%s)" % key)
    _operator_settings(check, operator if isinstance(operator, dict) else {})
    _operator_version(check, operator if isinstance(operator, dict) else {})
    if site.get("ansible") is not None:
        ansible = check.mapping(site["ansible"], "ansible", _ANSIBLE_KEYS)
        for key, shape in (("user", str), ("become", bool), ("python_interpreter", str)):
            if ansible.get(key) is not None:
                check.shape(ansible[key], "ansible." + key, shape)
    if check.problems:
        raise SiteError(source, check.problems)
    warnings = []
    servers = [h for h in hosts if h["role"] == rke2.SERVER]
    if len(servers) % 2 == 0:
        warnings.append("%d servers: etcd needs a majority, so an even count tolerates no more failures than one "
                        "server fewer; use 1 or 3" % len(servers))
    return warnings


def render_problems(site):
    """What rendering the site's files (``make site/render``) needs beyond a valid site file,
    each problem naming its key in the site file; [] when nothing is missing. For a valid site.

    The GPU Operator's per-OS images need the OS of every GPU host that runs them: the driver
    on container hosts (unless ``gpu_operator.driver_enabled`` is false), the vGPU manager on
    vm-vgpu hosts; precompiled drivers need the kernel too. The site-wide
    ``gpu_operator.driver_os_tags`` / ``driver_kernels`` stand in for hosts that do not say.
    vm-* hosts need sandbox workloads on, and vm-vgpu hosts the site's vGPU manager image."""
    operator = site.get("gpu_operator") or {}
    sandbox = operator.get("sandbox_workloads") or {}
    sandbox_on = isinstance(sandbox, dict) and sandbox.get("enabled") is True
    driver = operator.get("driver_enabled") is not False
    precompiled = operator.get("driver_use_precompiled") is True
    problems = []
    vgpu_hosts = []
    hosts = [h for h in site.get("nodes") or () if isinstance(h, dict)]
    declared = sorted(set(h["arch"] for h in hosts if h.get("arch")))
    if declared and declared != ["amd64"]:
        # A site with arm64 hosts says every host's architecture: the artifacts and images follow it.
        for index, host in enumerate(site.get("nodes") or ()):
            if isinstance(host, dict) and not host.get("arch"):
                problems.append("nodes[%d].arch: %s does not give its architecture, and the site has %s hosts: give "
                                "every host's (%s)" % (index, host.get("name"), ", ".join(declared),
                                                       ", ".join(ARCHITECTURES)))
    for index, host in enumerate(site.get("nodes") or ()):
        gpu = host.get("gpu")
        if not gpu:
            continue
        where, name = "nodes[%d]" % index, host.get("name")
        declared = gpu.get("workload_config")
        if declared != om.CONTAINER and not sandbox_on:
            problems.append("%s.gpu.workload_config: %s is %s, which needs gpu_operator.sandbox_workloads.enabled: true "
                            "(with sandbox workloads off the GPU Operator runs every node as container)"
                            % (where, name, declared))
            continue
        if declared == om.VM_VGPU:
            vgpu_hosts.append("%s (%s)" % (where, name))
        needs = None
        if declared == om.CONTAINER and driver:
            needs = "the GPU Operator's driver container"
        elif declared == om.VM_VGPU:
            needs = "the vGPU manager"
        if needs and not host.get("os") and not operator.get("driver_os_tags"):
            problems.append("%s.os: %s runs %s, whose image is tagged per OS: give the host's OS as the images tag "
                            "it (%s)" % (where, name, needs, _OS_EXAMPLES))
        if declared == om.CONTAINER and driver and precompiled and not host.get("kernel") \
                and not operator.get("driver_kernels"):
            problems.append("%s.kernel: %s runs a precompiled driver, whose image is tagged per kernel: give the "
                            "host's kernel release as uname -r prints it, or the site's in gpu_operator.driver_kernels"
                            % (where, name))
    if vgpu_hosts and not operator.get("vgpu_manager"):
        problems.append("gpu_operator.vgpu_manager: is required for the vm-vgpu hosts %s (repository, image, version "
                        "of the vGPU manager image the site builds and pushes to its mirror)" % ", ".join(vgpu_hosts))
    return problems


def host_images(images, arch):
    """The site's RKE2 image archives for a host of ``arch``: each archive named for another
    architecture becomes the one of the host's (the air-gap folder holds both)."""
    return [_IMAGE_ARCHIVE_ARCH_RE.sub(lambda m: m.group(1) + arch + m.group(3), str(name)) for name in images or ()]


def node_keys(site):
    """{host name: its key in the site file} (``nodes[1]``), for messages and the label plan."""
    return dict((host["name"], "nodes[%d]" % index) for index, host in enumerate(site.get("nodes") or ())
                if isinstance(host, dict) and host.get("name"))


def _host_vars(host, net, prefixlen, images=None):
    host_vars = {"ansible_host": host.get("ansible_host") or host["address"]}
    if host.get("node_name") and host["node_name"] != host["name"]:
        host_vars["k8s_node_name"] = host["node_name"]
    interface = host.get("interface") or net.get("interface")
    if interface:
        host_vars["host_network_interface"] = interface
    host_vars["host_network_address"] = "%s/%d" % (host["address"], prefixlen)
    if host.get("arch"):
        host_vars["rke2_arch"] = host["arch"]
        if images and host_images(images, host["arch"]) != list(images):
            host_vars["rke2_images"] = host_images(images, host["arch"])
    if host.get("backend"):
        host_vars["host_network_backend"] = host["backend"]
    if host.get("labels"):
        # str(k): YAML reads an unquoted 1 as a number (a valid label key all the same), which sorts with no string.
        host_vars["rke2_node_labels"] = dict(sorted((str(k), str(v)) for k, v in host["labels"].items()))
    if host.get("taints"):
        host_vars["rke2_node_taints"] = host["taints"]
    return host_vars


def _gpu_vars(gpu, host=None):
    gpu_vars = {"gpu_workload_config": gpu["workload_config"]}
    for key in ("model", "pci_device_name", "count", "vgpu_config", "operands_disabled"):
        if gpu.get(key) not in (None, []):
            gpu_vars["gpu_" + key] = gpu[key]
    if gpu.get("isolated"):
        gpu_vars["gpu_node_isolated"] = True
    # The host's OS and kernel name the driver and vGPU manager images (the air-gap plan).
    if (host or {}).get("os"):
        gpu_vars["gpu_os_tag"] = str(host["os"])
    if (host or {}).get("kernel"):
        gpu_vars["gpu_kernel_version"] = str(host["kernel"])
    return gpu_vars


def _group_vars(site):
    net, conf, ansible = site["network"], site["rke2"], site.get("ansible") or {}
    servers = [h for h in site["nodes"] if h["role"] == rke2.SERVER]
    group_vars = {"site_name": site["site"]}
    for key in ("user", "become", "python_interpreter"):
        if ansible.get(key) is not None:
            group_vars["ansible_" + key] = ansible[key]
    group_vars["host_network_gateway"] = str(net["gateway"])
    group_vars["host_network_dns_servers"] = [str(s) for s in net["dns_servers"]]
    if net.get("dns_search"):
        group_vars["host_network_dns_search"] = net["dns_search"]
    if net.get("backend"):
        group_vars["host_network_backend"] = net["backend"]
    group_vars["rke2_version"] = conf["version"]
    group_vars["rke2_api_address"] = str(conf.get("api_address") or conf.get("api_vip") or servers[0]["address"])
    if conf.get("api_vip"):
        group_vars["rke2_api_vip"] = str(conf["api_vip"])
    artifacts = conf.get("artifacts") or {}
    if artifacts.get("source"):
        group_vars["rke2_artifact_source"] = artifacts["source"]
    if artifacts.get("dir"):
        group_vars["rke2_artifact_dir"] = artifacts["dir"]
    if artifacts.get("images") is not None:
        group_vars["rke2_images"] = artifacts["images"]
    for key in ("cni", "tls_san", "system_default_registry", "registries", "profile", "config_extra", "chart_values"):
        if conf.get(key) not in (None, "", [], {}):
            group_vars["rke2_" + key] = conf[key]
    snapshots = conf.get("etcd_snapshots") or {}
    for key, variable in sorted(rke2.ETCD_SNAPSHOT_VARIABLES.items()):
        if snapshots.get(key) not in (None, {}):
            group_vars[variable] = snapshots[key]
    if site.get("gpu_models"):
        group_vars["gpu_models"] = site["gpu_models"]
    for key, value in (site.get("gpu_operator") or {}).items():
        if key in ("version", "chart_version"):
            value = ov.canonical_version(value)  # v26.3.3, as the chart and the role's values files name it
        group_vars["gpu_operator_" + key] = value
    return group_vars


def inventory(site):
    """(hosts.yml content, group_vars/all.yml content) as plain data, for a valid site."""
    prefixlen = ipaddress.ip_network(str(site["network"]["cidr"])).prefixlen
    groups = {SERVERS: {}, AGENTS: {}, GPU_NODES: {}}
    for host in site["nodes"]:
        group = SERVERS if host["role"] == rke2.SERVER else AGENTS
        images = (site["rke2"].get("artifacts") or {}).get("images")
        groups[group][host["name"]] = _host_vars(host, site["network"], prefixlen, images)
        if host.get("gpu"):
            groups[GPU_NODES][host["name"]] = _gpu_vars(host["gpu"], host)
    hosts = {"all": {"children": dict((name, {"hosts": members}) for name, members in
                                      ((SERVERS, groups[SERVERS]), (AGENTS, groups[AGENTS]), (GPU_NODES, groups[GPU_NODES])))}}
    return hosts, _group_vars(site)


def header(source):
    return ("# Rendered from %s by `make inventory/render` (gpuplatform.rke2.site_inventory).\n"
            "# Do not edit: change the site file and render again.\n---\n" % source)


def render(site, source, dump):
    """{relative path: text} of the inventory directory. ``dump`` turns data into YAML
    text (the caller's YAML library), so this module stays free of imports beyond the
    standard library."""
    hosts, group_vars = inventory(site)
    return {HOSTS_FILE: header(source) + dump(hosts), GROUP_VARS_FILE: header(source) + dump(group_vars)}
