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

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.host_facts import SRIOV_VGPU_ARCHITECTURES
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import parse_rke2_version
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import rke2_has_containerd_21

try:
    import yaml
except ImportError:  # JSON is YAML too; the controller normally has PyYAML.
    yaml = None

ERROR = "error"
WARNING = "warning"

# The chart decisions the preflight reads, keyed as the gpu_operator role names its variables
# (without the ``gpu_operator_`` prefix), with the chart's defaults (chart v26.3.2).
# The inventory variables (the gpu_operator role's) each chart decision comes from, for messages.
DECISION_VARIABLES = {
    "driver_enabled": "gpu_operator_driver_enabled",
    "sandbox_workloads_enabled": "gpu_operator_sandbox_workloads.enabled",
    "cdi_nri_plugin_enabled": "gpu_operator_nri_plugin_enabled",
    "psa_enabled": "gpu_operator_extra_values.psa.enabled",
    "namespace": "gpu_operator_namespace",
}
CHART_DEFAULTS = {
    "driver_enabled": om.CHART_DEFAULTS["driver_enabled"],
    "sandbox_workloads_enabled": om.CHART_DEFAULTS["sandbox_workloads_enabled"],
    "cdi_nri_plugin_enabled": False,
    "psa_enabled": False,
    "namespace": om.DEFAULT_NAMESPACE,
}

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
    return {
        "workload_config": config,
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


def _driver_findings(name, state, facts, chart, findings):
    driver = (facts or {}).get("host_driver") or {}
    nouveau = (facts or {}).get("nouveau") or {}
    what = "driver %s" % driver["version"] if driver.get("version") else "a driver"
    where = driver.get("kernel_module") or "/proc/driver/nvidia/version"
    if state == "expected":
        if driver.get("preinstalled"):
            findings.append(finding(name, "host_driver.preinstalled", ERROR, "the host already has %s (%s) and the "
                                    "operator would install its own: give the node nvidia.com/gpu.deploy.driver=false "
                                    "(gpu_operands_disabled: [driver]), or set gpu_operator_driver_enabled: false "
                                    "when every GPU node has a driver, or gpu_preflight_follow_hosts: true"
                                    % (what, where)))
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
        nodes[name] = {"workload_config": declared["workload_config"], "effective_workload_config": config,
                       "driver_operand": state, "deploy_driver_false": driver_off}
        _hardware_findings(name, declared, facts, applied, findings)
        _driver_findings(name, state, facts, applied, findings)
        if applied["cdi_nri_plugin_enabled"]:
            _nri_findings(name, facts, findings)

    fixes = _psa_findings(declared_by_host, applied, findings)
    findings.sort(key=lambda f: (f["severity"] != ERROR, f["host"], f["fact"]))
    return {
        "ok": not any(f["severity"] == ERROR for f in findings),
        "findings": findings,
        "lines": ["%(severity)s %(host)s %(fact)s: %(message)s" % f for f in findings],
        "chart": applied,
        "nodes": nodes,
        "defaults": {"driver_enabled": suggested_enabled, "nodes": node_defaults},
        "fixes": fixes,
    }
