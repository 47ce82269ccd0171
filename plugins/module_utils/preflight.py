# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU preflight decisions: host facts + the site's chart decisions + each host's declared
workload config -> findings (refusals and warnings), derived defaults, rendered fixes.

Pure: plain dicts in (the ``gpu_host`` facts of ``host_facts.gather``), plain dicts out.
What runs where comes from ``operand_model``; this file only adds what the hosts say.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.host_facts import PLATFORM_LIMITS
from ansible_collections.gpuplatform.rke2.plugins.module_utils.host_facts import SRIOV_VGPU_ARCHITECTURES
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import parse_rke2_version
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import rke2_has_containerd_21

try:
    import yaml
except ImportError:  # JSON is YAML too; the controller normally has PyYAML.
    yaml = None

ERROR = "error"
WARNING = "warning"
# What the operator should know and nothing needs fixing: Docker on a GPU host, say.
INFO = "info"

# The chart decisions the preflight reads, keyed as the gpu_operator role names its variables
# (without the ``gpu_operator_`` prefix), with the chart's defaults (chart v26.3.2).
# The inventory variables (the gpu_operator role's) each chart decision comes from, for messages.
DECISION_VARIABLES = {
    "driver_enabled": "gpu_operator_driver_enabled",
    "toolkit_enabled": "gpu_operator_toolkit_enabled",
    "sandbox_workloads_enabled": "gpu_operator_sandbox_workloads.enabled",
    "cdi_nri_plugin_enabled": "gpu_operator_nri_plugin_enabled",
    "psa_enabled": "gpu_operator_extra_values.psa.enabled",
    "namespace": "gpu_operator_namespace",
}
CHART_DEFAULTS = {
    "driver_enabled": om.CHART_DEFAULTS["driver_enabled"],
    "toolkit_enabled": om.CHART_DEFAULTS["toolkit_enabled"],
    "sandbox_workloads_enabled": om.CHART_DEFAULTS["sandbox_workloads_enabled"],
    "cdi_nri_plugin_enabled": False,
    "psa_enabled": False,
    "namespace": om.DEFAULT_NAMESPACE,
}

# RKE2's own containerd, the one the kubelet uses; Docker's (/run/containerd) is another daemon.
RKE2_CONTAINERD_SOCKET = "/run/k3s/containerd/containerd.sock"
# Per-node MIG requests a card that cannot do MIG must not carry (GPU Operator labels).
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_DISABLED = "all-disabled"
# k8s-driver-manager v0.11.0 (the driver DaemonSet's init container): where `chroot /host nvidia-smi`
# prints a driver version it labels the node nvidia.com/gpu.deploy.driver=pre-installed, waits 60 s
# and exits non-zero; the node then no longer matches the driver DaemonSet and its pod goes away.
DRIVER_MANAGER_ON_HOST_DRIVER = (
    "without that label the driver DaemonSet's pod would land there and its k8s-driver-manager init container "
    "(v0.11.0), finding the host's nvidia-smi working, would label the node nvidia.com/gpu.deploy.driver="
    "pre-installed, wait 60 s and fail, after which the pod leaves the node; the operator keeps that value")

# NRI needs containerd 2.1 on RKE2 (operator_values.RKE2_CONTAINERD_21 lists the releases).
NRI_MIN_CONTAINERD = (2, 1)

# What RKE2 enforces with ``profile: cis`` when no pod-security-admission-config-file is set
# (rke2 pkg/rke2/psa.go, written to /etc/rancher/rke2/rke2-pss.yaml).
RKE2_CIS_PSA = {
    "defaults": {"enforce": "restricted", "enforce-version": "latest", "audit": "restricted",
                 "audit-version": "latest", "warn": "restricted", "warn-version": "latest"},
    "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": ["kube-system", "cis-operator-system",
                                                                         "tigera-operator"]},
}
# A file of our own: RKE2 rewrites rke2-pss.yaml itself.
PSA_FIX_FILE = "/etc/rancher/rke2/gpu-operator-pss.yaml"
PSA_FIX_DROPIN = "/etc/rancher/rke2/config.yaml.d/50-gpu-operator-pss.yaml"

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
_TRUE_STRINGS = ("true", "yes", "on", "1")
_FALSE_STRINGS = ("false", "no", "off", "0")


class PreflightInputError(ValueError):
    """Input the preflight cannot read; the message names the key and value."""


# What the preflight reads of a host's gpu_host fact (host_facts.gather): each field absent,
# null or of this shape. gather() always writes these; a fact cached from another version or
# edited by hand is refused naming the host and the field rather than misread.
_S, _B, _I = ko.STRING, ko.BOOLEAN, ko.INTEGER
FACT_SHAPE = ko.mapping({
    "hardware": ko.mapping({"gpus": ko.list_of(ko.mapping({
        "address": _S, "vendor_id": _S, "device_id": _S, "name": _S, "model": _S, "architecture": _S,
        "sriov": ko.mapping({"capable": _B, "total_vfs": _I, "num_vfs": _I})},
        required=("address", "vendor_id", "device_id")))}),
    "host_driver": ko.mapping({"loaded": _B, "preinstalled": _B, "operator_managed": _B, "version": _S,
                               "kernel_modules": _S, "kernel_module": _S, "libnvidia_ml": _S, "nvidia_smi": _S}),
    "nouveau": ko.mapping({"loaded": _B, "blacklisted": _B, "blacklist_sources": ko.list_of(_S)}),
    "iommu": ko.mapping({"enabled": _B, "cmdline": ko.STRING_MAP}),
    "architecture": ko.mapping({"machine": _S, "kubernetes": _S}),
    "docker": ko.mapping({"installed": _B, "version": _S, "daemon_json": _S, "runtimes": ko.list_of(_S),
                          "default_runtime": _S}),
    "container_toolkit": ko.mapping({"installed": _B, "version": _S, "runtime": _S, "nvidia_ctk": _S}),
    "rke2": ko.mapping({"version": _S, "profile": _S, "pod_security": ko.mapping({
        "default_enforce": _S, "exempt_namespaces": ko.list_of(_S)})}),
    "containerd": ko.mapping({"version": _S}),
})


def read_facts(name, facts):
    """``facts`` (a host's gpu_host fact) when the preflight can read it, else
    PreflightInputError ``host gpu-1: facts.hardware.gpus[0] is a string, expected a mapping``."""
    if facts is not None:
        try:
            ko.check_shape(FACT_SHAPE, facts, "facts")
        except ko.MalformedObject as exc:
            raise PreflightInputError("host %s: %s" % (name, exc))
    return facts


def finding(host, fact, severity, message):
    return {"host": host, "fact": fact, "severity": severity, "message": message}


def version_tuple(version):
    """``v2.1.4-k3s1`` -> (2, 1, 4); None when it is not a version."""
    match = _VERSION_RE.match(str(version or ""))
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def _bool(value, key):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE_STRINGS + _FALSE_STRINGS:
        return value.strip().lower() in _TRUE_STRINGS
    raise PreflightInputError("%s must be a boolean, got %r" % (key, value))


def chart_decisions(chart=None):
    """The chart decisions with defaults filled in; unknown keys and bad values raise."""
    chart = dict(chart or {})
    unknown = sorted(set(chart) - set(CHART_DEFAULTS))
    if unknown:
        raise PreflightInputError("unknown chart decision(s) %s (known: %s)"
                                  % (", ".join(unknown), ", ".join(sorted(CHART_DEFAULTS))))
    result = dict(CHART_DEFAULTS)
    for key, value in chart.items():
        if value is None:
            continue
        if key == "namespace":
            if not isinstance(value, str) or not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", value):
                raise PreflightInputError("gpu_operator_namespace must be a namespace name, got %r" % (value,))
            result[key] = value
        else:
            result[key] = _bool(value, DECISION_VARIABLES[key])
    return result


def _declared(name, host, findings):
    """A host's declared inventory values, checked; bad values become refusals naming the key."""
    config = host.get("gpu_workload_config") or om.CONTAINER
    if config not in om.WORKLOAD_CONFIGS:
        findings.append(finding(name, "gpu_workload_config", ERROR, "gpu_workload_config %r is not one of %s"
                                % (config, ", ".join(om.WORKLOAD_CONFIGS))))
        config = None
    count = host.get("gpu_count")
    if count is not None:
        try:
            count = int(count)
            if count < 0:
                raise ValueError
        except (TypeError, ValueError):
            findings.append(finding(name, "gpu_count", ERROR, "gpu_count must be a whole number, got %r" % (count,)))
            count = None
    disabled = host.get("gpu_operands_disabled") or []
    if not isinstance(disabled, (list, tuple)) or not all(isinstance(o, str) for o in disabled):
        findings.append(finding(name, "gpu_operands_disabled", ERROR,
                                "gpu_operands_disabled must be a list of operand names, got %r" % (disabled,)))
        disabled = []
    try:
        isolated = _bool(host.get("gpu_node_isolated") or False, "gpu_node_isolated")
    except PreflightInputError as exc:
        findings.append(finding(name, "gpu_node_isolated", ERROR, str(exc)))
        isolated = False
    labels = host.get("node_labels") or {}
    if not isinstance(labels, dict):
        findings.append(finding(name, "rke2_node_labels", ERROR, "rke2_node_labels must be a mapping of label to "
                                "value, got %r" % (labels,)))
        labels = {}
    return {
        "workload_config": config,
        "arch": host.get("arch"),
        "node_labels": dict((str(k), str(v)) for k, v in labels.items()),
        "gpu_model": host.get("gpu_model"),
        "gpu_pci_device_name": host.get("gpu_pci_device_name"),
        "gpu_count": count,
        "operands_disabled": list(disabled),
        "isolated": isolated,
    }


def _node_labels(declared, driver_off):
    """The labels the operator will see on the node, as far as the inventory decides them."""
    labels = {om.WORKLOAD_CONFIG_LABEL: declared["workload_config"] or om.CONTAINER}
    if driver_off:
        labels[om.deploy_label("driver")] = om.DEPLOY_FALSE
    if declared["isolated"]:
        labels[om.OPERANDS_LABEL] = om.DEPLOY_FALSE
    return labels


def _driver_state(declared, chart, driver_off):
    """(effective workload config, state of the driver operand) per operand_model."""
    policy = om.policy(overrides={"driver_enabled": chart["driver_enabled"],
                                  "sandbox_workloads_enabled": chart["sandbox_workloads_enabled"]})
    labels = _node_labels(declared, driver_off)
    config = om.effective_workload_config(labels, policy)[0]
    return config, om.operand_state_on_node(om.operand("driver"), labels, policy, config)


def _gpus(facts):
    return ((facts or {}).get("hardware") or {}).get("gpus") or []


def _has_host_driver(facts):
    return bool(((facts or {}).get("host_driver") or {}).get("preinstalled"))


def suggest_driver(hosts, chart):
    """The driver decision the hosts ask for: ``driver.enabled`` false when every container GPU
    node brings its own driver, else true with ``deploy.driver=false`` on the nodes that do.

    ``hosts``: name -> (declared, facts) for GPU nodes. Returns (driver_enabled, [node names])."""
    candidates = []
    for name, (declared, facts) in sorted(hosts.items()):
        if not _gpus(facts) or declared["workload_config"] is None:
            continue
        config, state = _driver_state(declared, dict(chart, driver_enabled=True), False)
        if state == "expected":
            candidates.append((name, _has_host_driver(facts)))
    if candidates and all(candidate[1] for candidate in candidates):
        return False, []
    return True, [name for name, has in candidates if has]


def _hardware_findings(name, declared, facts, chart, findings):
    gpus = _gpus(facts)
    config = declared["workload_config"]
    if declared["gpu_count"] is not None and declared["gpu_count"] != len(gpus):
        findings.append(finding(name, "hardware.count", ERROR, "gpu_count is %s but the host has %d NVIDIA GPU(s)"
                                % (declared["gpu_count"], len(gpus))))
    names = sorted(set(g["name"] for g in gpus if g.get("name")))
    wanted = declared["gpu_pci_device_name"]
    if wanted and names and wanted not in names:
        findings.append(finding(name, "hardware.gpus.name", ERROR, "gpu_pci_device_name is %r but the host's GPUs are "
                                "%s: the passthrough resource would be %s, not %s"
                                % (wanted, ", ".join(names), ", ".join(om.passthrough_resource_name(n) for n in names),
                                   om.passthrough_resource_name(wanted))))
    elif wanted and not names:
        findings.append(finding(name, "hardware.gpus.name", WARNING, "gpu_pci_device_name %r cannot be checked: the "
                                "host has no pci.ids and its device ids are not in the built-in table" % wanted))
    models = sorted(set(g["model"] for g in gpus if g.get("model")))
    if declared["gpu_model"] and models and str(declared["gpu_model"]).upper() not in [m.upper() for m in models]:
        findings.append(finding(name, "hardware.gpus.model", WARNING, "gpu_model is %r but the host's GPUs are %s"
                                % (declared["gpu_model"], ", ".join(models))))
    if config in (om.VM_PASSTHROUGH, om.VM_VGPU) and not chart["sandbox_workloads_enabled"]:
        findings.append(finding(name, "gpu_workload_config", WARNING, "%s is declared but sandbox workloads are off "
                                "(%s): the operator treats this node as container"
                                % (config, DECISION_VARIABLES["sandbox_workloads_enabled"])))
    iommu = (facts or {}).get("iommu") or {}
    if config in (om.VM_PASSTHROUGH, om.VM_VGPU) and not iommu.get("enabled"):
        findings.append(finding(name, "iommu.enabled", ERROR, "%s needs the IOMMU but /sys/kernel/iommu_groups is "
                                "empty (kernel command line IOMMU settings: %s): enable VT-d/AMD-Vi in the firmware "
                                "and boot with intel_iommu=on (Intel) or amd_iommu=on (AMD), plus iommu=pt"
                                % (config, " ".join("%s=%s" % kv for kv in sorted((iommu.get("cmdline") or {}).items()))
                                   or "none")))
    if config == om.VM_VGPU:
        no_sriov = [g for g in gpus if g.get("architecture") in SRIOV_VGPU_ARCHITECTURES
                    and not (g.get("sriov") or {}).get("capable")]
        if no_sriov:
            findings.append(finding(name, "sriov", ERROR, "vm-vgpu on %s needs SR-IOV (vGPU on Ampere and later "
                                    "runs on virtual functions) but %s report no sriov_totalvfs: enable SR-IOV in "
                                    "the firmware" % (", ".join(sorted(set(g["name"] for g in no_sriov))),
                                                      ", ".join(g["address"] for g in no_sriov))))
        unknown = [g["address"] for g in gpus if not g.get("architecture")]
        if unknown:
            findings.append(finding(name, "hardware.gpus.architecture", WARNING, "cannot tell whether vGPU on %s "
                                    "needs SR-IOV: unknown architecture (no pci.ids name)" % ", ".join(unknown)))


def _platform_findings(name, declared, config, facts, findings):
    """What the card cannot do whatever the inventory says (PLATFORM_LIMITS: GB10 has no MIG, no
    vGPU, no VM passthrough), and the architecture the inventory declares against the host's."""
    for device_id in sorted(set(g["device_id"] for g in _gpus(facts) if g.get("device_id") in PLATFORM_LIMITS)):
        limits = PLATFORM_LIMITS[device_id]
        model = next(g.get("model") or g.get("name") or device_id for g in _gpus(facts) if g["device_id"] == device_id)
        if config in limits and limits[config] is False:
            findings.append(finding(name, "hardware.gpus.capabilities", ERROR, "%s is declared %s but its %s "
                                    "(10de:%s) cannot run it: %s. The GPU Operator supports it as a container node "
                                    "only: set gpu_workload_config: container (site file: gpu.workload_config)"
                                    % (name, config, model, device_id, limits["why"])))
        labels = declared["node_labels"]
        asked = [(k, labels[k]) for k in (MIG_CONFIG_LABEL, MIG_CAPABLE_LABEL) if k in labels
                 and labels[k] not in (MIG_DISABLED, "false")]
        if limits.get("mig") is False and asked:
            findings.append(finding(name, "hardware.gpus.mig", ERROR, "%s asks for MIG (%s) but its %s (10de:%s) "
                                    "has no MIG: %s. Remove the label from the host's labels (rke2_node_labels)"
                                    % (name, ", ".join("%s=%s" % kv for kv in asked), model, device_id,
                                       limits["why"])))
    have = ((facts or {}).get("architecture") or {}).get("kubernetes")
    wanted = declared.get("arch")
    if wanted and have and wanted != have:
        findings.append(finding(name, "architecture.kubernetes", ERROR, "the inventory declares rke2_arch %s but "
                                "the host is %s (%s): RKE2's artifacts and every image must be %s ones; fix the "
                                "site file's arch for this host" % (wanted, have, facts["architecture"].get("machine"),
                                                                    have)))


def _host_runtime_findings(name, facts, chart, findings):
    """Docker and the NVIDIA Container Toolkit already on the host (DGX OS): they are Docker's,
    and Kubernetes does not use them."""
    docker = (facts or {}).get("docker") or {}
    toolkit = (facts or {}).get("container_toolkit") or {}
    if docker.get("installed") or toolkit.get("installed"):
        parts = []
        if docker.get("installed"):
            runtime = (" (runtimes %s, default %s, %s)" % (", ".join(docker.get("runtimes") or ()) or "none",
                                                           docker.get("default_runtime") or "runc",
                                                           docker["daemon_json"]) if docker.get("daemon_json") else "")
            parts.append("Docker %s%s" % (docker.get("version") or "(version unknown)", runtime))
        if toolkit.get("installed"):
            parts.append("the NVIDIA Container Toolkit %s" % (toolkit.get("version") or "(version unknown)"))
        toolkit_note = ("the GPU Operator's container-toolkit (gpu_operator_toolkit_enabled: true) configures RKE2's "
                        "containerd for the GPUs" if chart["toolkit_enabled"] else
                        "gpu_operator_toolkit_enabled is false, so RKE2's containerd must already have the NVIDIA "
                        "runtime: the host toolkit's Docker setup does not give it one")
        findings.append(finding(name, "docker", INFO, "%s on the host serve Docker and its own containerd only. "
                                "Kubernetes pods on this node run on RKE2's containerd (%s), which reads neither "
                                "/etc/docker/daemon.json nor the toolkit's Docker runtime settings; %s. The "
                                "collection leaves Docker and the host toolkit as they are"
                                % (" and ".join(parts), RKE2_CONTAINERD_SOCKET, toolkit_note)))
    if not chart["toolkit_enabled"] and not toolkit.get("runtime"):
        findings.append(finding(name, "container_toolkit.runtime", ERROR, "gpu_operator_toolkit_enabled is false but "
                                "the host has no nvidia-container-runtime: nothing would give RKE2's containerd the "
                                "NVIDIA runtime; leave the toolkit to the operator"))


def driver_source(state):
    """Where a node's driver comes from for the operand state of the driver: the host or the
    operator's driver container; None where the node runs no driver at all (VM nodes)."""
    return {"expected": "container", "host": "host"}.get(state)


def _runtime_hosts(gpu_nodes):
    return sorted(n for n, (_d, f) in gpu_nodes.items()
                  if ((f or {}).get("docker") or {}).get("installed")
                  or ((f or {}).get("container_toolkit") or {}).get("installed"))


def _explain(gpu_nodes, nodes, chart, suggested_off):
    """Why the chart values and labels fit these hosts, in the report's words."""
    lines = []
    with_driver = sorted(n for n, (_d, f) in gpu_nodes.items() if _has_host_driver(f))
    needing = sorted(n for n, node in nodes.items() if node["driver_source"] == "container")

    def described(name):
        driver = (gpu_nodes[name][1] or {}).get("host_driver") or {}
        return "%s (driver %s, %s kernel modules)" % (name, driver.get("version") or "installed, not loaded",
                                                      driver.get("kernel_modules") or "unknown")
    if not chart["driver_enabled"]:
        lines.append("driver.enabled is false: no driver container runs; the GPU nodes bring their own driver%s"
                     % (": " + ", ".join(described(n) for n in with_driver) if with_driver else ""))
    elif with_driver and needing:
        labelled = [n for n in with_driver if nodes.get(n, {}).get("deploy_driver_false")]
        lines.append("driver.enabled stays true for %s, which need the driver container; %s bring their own driver "
                     "and %s nvidia.com/gpu.deploy.driver=false (gpu_operands_disabled: [driver]), so no driver pod "
                     "runs there; %s" % (", ".join(needing), ", ".join(described(n) for n in with_driver),
                                         "get" if labelled == with_driver else "must get (suggested for %s)"
                                         % ", ".join(suggested_off), DRIVER_MANAGER_ON_HOST_DRIVER))
    elif with_driver:
        lines.append("every container GPU node brings its own driver (%s): gpu_operator_driver_enabled: false fits "
                     "the site" % ", ".join(described(n) for n in with_driver))
    runtime_hosts = _runtime_hosts(gpu_nodes)
    if runtime_hosts:
        lines.append("toolkit.enabled %s: Docker and the NVIDIA Container Toolkit on %s configure Docker's runtime, "
                     "not RKE2's containerd (%s), where Kubernetes runs the pods"
                     % ("stays true" if chart["toolkit_enabled"] else "is false", ", ".join(runtime_hosts),
                        RKE2_CONTAINERD_SOCKET))
    return lines


def _driver_findings(name, state, facts, chart, findings):
    driver = (facts or {}).get("host_driver") or {}
    nouveau = (facts or {}).get("nouveau") or {}
    what = "driver %s" % driver["version"] if driver.get("version") else "a driver"
    where = driver.get("kernel_module") or "/proc/driver/nvidia/version"
    if state == "expected":
        if driver.get("preinstalled"):
            findings.append(finding(name, "host_driver.preinstalled", ERROR, "the host already has %s (%s%s) and "
                                    "the operator would schedule its driver container there: give the node "
                                    "nvidia.com/gpu.deploy.driver=false (gpu_operands_disabled: [driver]), or set "
                                    "gpu_operator_driver_enabled: false when every GPU node has a driver, or "
                                    "gpu_preflight_follow_hosts: true; %s"
                                    % (what, where, ", %s kernel modules" % driver["kernel_modules"]
                                       if driver.get("kernel_modules") else "", DRIVER_MANAGER_ON_HOST_DRIVER)))
        if nouveau.get("loaded"):
            findings.append(finding(name, "nouveau.loaded", ERROR, "nouveau is loaded and the operator's driver "
                                    "container cannot load nvidia.ko next to it: blacklist nouveau "
                                    "(/etc/modprobe.d/blacklist-nouveau.conf: 'blacklist nouveau' and "
                                    "'options nouveau modeset=0'), rebuild the initramfs and reboot"))
        elif not nouveau.get("blacklisted"):
            findings.append(finding(name, "nouveau.blacklisted", WARNING, "nouveau is not blacklisted: after a "
                                    "reboot it can claim the GPUs before the driver container starts"))
    elif state == "host":
        if not driver.get("preinstalled"):
            why = ("gpu_operator_driver_enabled is false" if not chart["driver_enabled"]
                   else "the node gets nvidia.com/gpu.deploy.driver=false")
            findings.append(finding(name, "host_driver.preinstalled", ERROR, "%s but the host has no NVIDIA driver "
                                    "(no nvidia.ko for the running kernel%s): nothing would load one"
                                    % (why, ", only the operator's driver container" if driver.get("operator_managed")
                                       else "")))
        elif not driver.get("libnvidia_ml"):
            findings.append(finding(name, "host_driver.libnvidia_ml", WARNING, "the host driver has no "
                                    "libnvidia-ml.so.1 in the usual library directories: the container toolkit and "
                                    "the device plugin need it"))


def _nri_findings(name, facts, findings):
    rke2 = (facts or {}).get("rke2") or {}
    containerd = (facts or {}).get("containerd") or {}
    have = version_tuple(containerd.get("version"))
    if have:
        if have[:2] < NRI_MIN_CONTAINERD:
            findings.append(finding(name, "containerd.version", ERROR, "gpu_operator_cdi_nri_plugin_enabled needs "
                                    "containerd >= %d.%d but RKE2 %s runs containerd %s: upgrade RKE2 (v1.31.13, "
                                    "v1.32.9, v1.33.5, v1.34.1 +rke2r1 or later) or leave NRI off"
                                    % (NRI_MIN_CONTAINERD + (rke2.get("version") or "(version unknown)",
                                                             containerd["version"]))))
        return
    from_release = rke2_has_containerd_21(rke2["version"]) if parse_rke2_version(rke2.get("version")) else None
    if from_release is False:
        findings.append(finding(name, "rke2.version", ERROR, "gpu_operator_cdi_nri_plugin_enabled needs containerd "
                                ">= 2.1, which RKE2 %s does not ship (v1.31.13, v1.32.9, v1.33.5, v1.34.1 +rke2r1 "
                                "and later do)" % rke2["version"]))
    elif from_release is None:
        findings.append(finding(name, "containerd.version", WARNING, "gpu_operator_cdi_nri_plugin_enabled needs "
                                "containerd >= 2.1 and neither the containerd nor the RKE2 version could be read"))


def _dump(data):
    if yaml is not None:
        return yaml.safe_dump(data, default_flow_style=False, sort_keys=False)
    return json.dumps(data, indent=2) + "\n"


def render_psa_fixes(namespace, current=None):
    """The two fixes for a restricted Pod Security default: chart ``psa.enabled`` (the operator
    labels its namespace privileged), or RKE2's admission config exempting the namespace.

    ``current`` is the (default_enforce, exempt_namespaces) the servers have, if read."""
    config = json.loads(json.dumps(RKE2_CIS_PSA))
    if current and current[0]:
        config["defaults"] = {"enforce": current[0], "enforce-version": "latest"}
        config["exemptions"]["namespaces"] = list(current[1] or [])
    if namespace not in config["exemptions"]["namespaces"]:
        config["exemptions"]["namespaces"].append(namespace)
    admission = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [{"name": "PodSecurity", "configuration": dict(
            [("apiVersion", "pod-security.admission.config.k8s.io/v1"), ("kind", "PodSecurityConfiguration")]
            + sorted(config.items()))}],
    }
    return [
        {"kind": "chart-values", "description": "let the operator label namespace %s privileged" % namespace,
         "variables": {"gpu_operator_extra_values": {"psa": {"enabled": True}}},
         "content": _dump({"psa": {"enabled": True}})},
        {"kind": "file", "description": "on every RKE2 server: exempt namespace %s from Pod Security admission, "
         "then restart rke2-server" % namespace, "path": PSA_FIX_FILE, "mode": "0600", "content": _dump(admission)},
        {"kind": "file", "description": "on every RKE2 server: point RKE2 at that file", "path": PSA_FIX_DROPIN,
         "mode": "0600", "content": _dump({"pod-security-admission-config-file": PSA_FIX_FILE})},
    ]


def _psa_findings(hosts, chart, findings):
    """A restricted Pod Security default keeps the operator's privileged pods out unless its
    namespace is exempt or labelled privileged (chart ``psa.enabled``)."""
    if chart["psa_enabled"]:
        return []
    namespace = chart["namespace"]
    cis, read = [], []
    for name, (_host_vars, facts) in sorted(hosts.items()):
        rke2 = (facts or {}).get("rke2") or {}
        if str(rke2.get("profile") or "").startswith("cis"):
            cis.append(name)
        psa = rke2.get("pod_security") or {}
        if psa.get("default_enforce"):
            read.append((name, psa["default_enforce"], psa.get("exempt_namespaces") or []))
    if read:
        blocking = [(n, e, x) for n, e, x in read if e != "privileged" and namespace not in x]
        if not blocking:
            return []
        current = (blocking[0][1], blocking[0][2])
        for name, enforce, exempt in blocking:
            findings.append(finding(name, "rke2.pod_security", ERROR, "Pod Security admission enforces %r by default "
                                    "and does not exempt namespace %s (exempt: %s): the operator's privileged pods "
                                    "would be rejected; apply one of the rendered fixes"
                                    % (enforce, namespace, ", ".join(exempt) or "none")))
        return render_psa_fixes(namespace, current)
    if not cis:
        return []
    for name in cis:
        findings.append(finding(name, "rke2.profile", ERROR, "RKE2 profile cis enforces Pod Security 'restricted' "
                                "outside kube-system, cis-operator-system and tigera-operator: the operator's "
                                "privileged pods in namespace %s would be rejected; apply one of the rendered fixes"
                                % namespace))
    return render_psa_fixes(namespace)


def _node_defaults(declared, facts, driver_off):
    gpus = _gpus(facts)
    names = sorted(set(g["name"] for g in gpus if g.get("name")))
    models = sorted(set(g["model"] for g in gpus if g.get("model")))
    resources, selectors = {}, {}
    for gpu in gpus:
        if gpu.get("name"):
            resource = om.passthrough_resource_name(gpu["name"])
            resources[resource] = resources.get(resource, 0) + 1
            selectors[resource] = ("%s:%s" % (gpu["vendor_id"], gpu["device_id"])).upper()
    disabled = list(declared["operands_disabled"])
    if driver_off and "driver" not in disabled:
        disabled.append("driver")
    return {
        "gpu_count": len(gpus),
        "gpu_model": models[0] if len(models) == 1 else None,
        "gpu_pci_device_name": names[0] if len(names) == 1 else None,
        "passthrough_resources": resources,
        "pci_vendor_selectors": selectors,
        "gpu_operands_disabled": disabled,
    }


def decide(hosts, chart=None, follow_hosts=False):
    """Findings, derived defaults and rendered fixes for a set of hosts.

    ``hosts``: name -> {``facts`` (the gpu_host fact), ``gpu_node`` (in the GPU group; default
    true), and the inventory's ``gpu_workload_config``, ``gpu_model``, ``gpu_pci_device_name``,
    ``gpu_count``, ``gpu_operands_disabled``, ``gpu_node_isolated``}. Hosts that are not GPU
    nodes (RKE2 servers) contribute cluster facts only: the profile and Pod Security config.
    ``chart``: the chart decisions (keys of CHART_DEFAULTS). ``follow_hosts``: take the driver
    decision from the hosts instead of refusing a mismatch.
    """
    if not isinstance(hosts, dict):
        raise PreflightInputError("hosts must be a mapping of host name to facts, got %s" % type(hosts).__name__)
    chart = chart_decisions(chart)
    findings = []
    declared_by_host, gpu_nodes = {}, {}
    for name in sorted(hosts):
        host = hosts[name] or {}
        if not isinstance(host, dict):
            raise PreflightInputError("host %s: expected a mapping, got %r" % (name, host))
        declared = _declared(name, host, findings)
        read_facts(name, host.get("facts"))
        declared_by_host[name] = (declared, host.get("facts"))
        if host.get("gpu_node", True):
            gpu_nodes[name] = (declared, host.get("facts"))

    suggested_enabled, suggested_off = suggest_driver(gpu_nodes, chart)
    applied = dict(chart)
    if follow_hosts:
        applied["driver_enabled"] = suggested_enabled

    nodes, node_defaults = {}, {}
    for name, (declared, facts) in sorted(gpu_nodes.items()):
        driver_off = "driver" in declared["operands_disabled"] or (follow_hosts and name in suggested_off)
        node_defaults[name] = _node_defaults(declared, facts, name in suggested_off)
        if not facts:
            findings.append(finding(name, "facts", ERROR, "no host facts: gpuplatform.rke2.gpu_host_facts did not run"))
            continue
        if not _gpus(facts):
            findings.append(finding(name, "hardware.count", ERROR, "no NVIDIA GPU (vendor 0x10de, class 0300/0302) "
                                    "under /sys/bus/pci/devices, yet the host is a GPU node"))
            continue
        if declared["workload_config"] is None:
            continue
        config, state = _driver_state(declared, applied, driver_off)
        host_driver = facts.get("host_driver") or {}
        nodes[name] = {"workload_config": declared["workload_config"], "effective_workload_config": config,
                       "driver_operand": state, "deploy_driver_false": driver_off,
                       "driver_source": driver_source(state),
                       "host_driver": {"version": host_driver.get("version"),
                                       "kernel_modules": host_driver.get("kernel_modules")},
                       "architecture": (facts.get("architecture") or {}).get("kubernetes"),
                       "gpu_models": sorted(set(g["model"] for g in _gpus(facts) if g.get("model")))}
        _hardware_findings(name, declared, facts, applied, findings)
        _platform_findings(name, declared, declared["workload_config"], facts, findings)
        _driver_findings(name, state, facts, applied, findings)
        _host_runtime_findings(name, facts, applied, findings)
        if applied["cdi_nri_plugin_enabled"]:
            _nri_findings(name, facts, findings)

    fixes = _psa_findings(declared_by_host, applied, findings)
    findings.sort(key=lambda f: ((ERROR, WARNING, INFO).index(f["severity"]), f["host"], f["fact"]))
    return {
        "ok": not any(f["severity"] == ERROR for f in findings),
        "findings": findings,
        "lines": ["%(severity)s %(host)s %(fact)s: %(message)s" % f for f in findings],
        "chart": applied,
        "nodes": nodes,
        "defaults": {"driver_enabled": suggested_enabled, "nodes": node_defaults},
        "explanations": _explain(gpu_nodes, nodes, applied, suggested_off),
        "fixes": fixes,
    }
