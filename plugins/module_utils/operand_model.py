# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU Operator's operand model: the one place that says which operands exist,
how they are labelled, selected and ordered, which workload config runs which, and
which resource a node of each config advertises.

Modules, roles (through the ``operand_model`` lookup of this collection), the docs
table (``docs/operand-model.md``, generated from here) and the lab's simulated
operator all read this file. Facts come from the GPU Operator v24.3-v26.3 source and
chart (see ``shared/docs/gpu-operator-facts.md``); keep this file free of I/O and of
Ansible imports so that every consumer can use it as plain data.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from collections import namedtuple

DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
OPERANDS_LABEL = DEPLOY_LABEL_PREFIX + "operands"
WORKLOAD_CONFIG_LABEL = "nvidia.com/gpu.workload.config"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
VGPU_CONFIG_LABEL = "nvidia.com/vgpu.config"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
CC_CAPABLE_LABEL = "nvidia.com/cc.capable"
# NFD labels that make a node a GPU node for the operator (vendor 0x10de).
NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
GPU_TAINT_KEY = "nvidia.com/gpu"

CONTAINER = "container"
VM_PASSTHROUGH = "vm-passthrough"
VM_VGPU = "vm-vgpu"
WORKLOAD_CONFIGS = (CONTAINER, VM_PASSTHROUGH, VM_VGPU)

# A deploy label switches its operand on only when its value is exactly "true".
DEPLOY_TRUE = "true"
DEPLOY_FALSE = "false"
DEPLOY_PRE_INSTALLED = "pre-installed"

DEFAULT_NAMESPACE = "gpu-operator"
OPERATOR_DEPLOYMENT = "gpu-operator"
OPERATOR_POD_SELECTOR = ("app", "gpu-operator")
CLUSTER_POLICY_NAME = "cluster-policy"
CLUSTER_POLICY_API = ("nvidia.com", "v1", "clusterpolicies")
HELMCHART_API = ("helm.cattle.io", "v1", "helmcharts")
CONTAINER_RESOURCE = "nvidia.com/gpu"

# Layers of the ADR's per-layer diagnosis, bottom up.
LAYER_DRIVER = "driver"
LAYER_RUNTIME = "container-runtime"
LAYER_DEVICE_PLUGIN = "device-plugin"
LAYER_ALLOCATABLE = "allocatable"
LAYER_MONITORING = "monitoring"
LAYER_VALIDATION = "validation"
LAYERS = (LAYER_DRIVER, LAYER_RUNTIME, LAYER_DEVICE_PLUGIN, LAYER_ALLOCATABLE)

Operand = namedtuple(
    "Operand",
    [
        "name",  # deploy label suffix: nvidia.com/gpu.deploy.<name>
        "daemonset",  # DaemonSet name in the operator namespace
        "pod_selector",  # (label key, value) that selects its pods; some use name=, not app=
        "workload_configs",  # effective workload configs that run it
        "depends_on",  # operands that must run first on the same node (those expected there)
        "values_key",  # chart values / ClusterPolicy spec key holding enabled and the image
        "enabled_by_default",  # chart v26.3.2 default of <values_key>.enabled
        "layer",  # diagnosis layer
        "capability_label",  # node label that must be "true" (MIG, CC), or None
        "asset",  # the operator's manifest under assets/ (None: not shipped in the reference)
    ],
)

# Controller state order (v24.3 to v26.3); every table below keeps it.
OPERANDS = (
    Operand("driver", "nvidia-driver-daemonset", ("app", "nvidia-driver-daemonset"),
            (CONTAINER,), (), "driver", True, LAYER_DRIVER, None, "state-driver.daemonset.yaml"),
    Operand("container-toolkit", "nvidia-container-toolkit-daemonset", ("app", "nvidia-container-toolkit-daemonset"),
            (CONTAINER,), ("driver",), "toolkit", True, LAYER_RUNTIME, None, "state-container-toolkit.daemonset.yaml"),
    Operand("operator-validator", "nvidia-operator-validator", ("app", "nvidia-operator-validator"),
            (CONTAINER,), ("driver", "container-toolkit"), "validator", True, LAYER_VALIDATION, None,
            "state-operator-validation.daemonset.yaml"),
    Operand("device-plugin", "nvidia-device-plugin-daemonset", ("app", "nvidia-device-plugin-daemonset"),
            (CONTAINER,), ("container-toolkit",), "devicePlugin", True, LAYER_DEVICE_PLUGIN, None,
            "state-device-plugin.daemonset.yaml"),
    Operand("dcgm", "nvidia-dcgm", ("app", "nvidia-dcgm"),
            (CONTAINER,), ("container-toolkit",), "dcgm", False, LAYER_MONITORING, None, None),
    Operand("dcgm-exporter", "nvidia-dcgm-exporter", ("app", "nvidia-dcgm-exporter"),
            (CONTAINER,), ("container-toolkit",), "dcgmExporter", True, LAYER_MONITORING, None,
            "state-dcgm-exporter.daemonset.yaml"),
    Operand("gpu-feature-discovery", "gpu-feature-discovery", ("app", "gpu-feature-discovery"),
            (CONTAINER,), ("container-toolkit",), "gfd", True, LAYER_DEVICE_PLUGIN, None,
            "gpu-feature-discovery.daemonset.yaml"),
    Operand("mig-manager", "nvidia-mig-manager", ("app", "nvidia-mig-manager"),
            (CONTAINER,), ("container-toolkit",), "migManager", True, LAYER_DEVICE_PLUGIN, MIG_CAPABLE_LABEL,
            "state-mig-manager.daemonset.yaml"),
    Operand("node-status-exporter", "nvidia-node-status-exporter", ("app", "nvidia-node-status-exporter"),
            (CONTAINER,), (), "nodeStatusExporter", False, LAYER_MONITORING, None,
            "state-node-status-exporter.daemonset.yaml"),
    Operand("vgpu-manager", "nvidia-vgpu-manager-daemonset", ("app", "nvidia-vgpu-manager-daemonset"),
            (VM_VGPU,), (), "vgpuManager", False, LAYER_DRIVER, None, "state-vgpu-manager.daemonset.yaml"),
    Operand("vgpu-device-manager", "nvidia-vgpu-device-manager", ("app", "nvidia-vgpu-device-manager"),
            (VM_VGPU,), ("vgpu-manager",), "vgpuDeviceManager", True, LAYER_RUNTIME, None,
            "state-vgpu-device-manager.daemonset.yaml"),
    Operand("sandbox-validator", "nvidia-sandbox-validator", ("app", "nvidia-sandbox-validator"),
            (VM_PASSTHROUGH, VM_VGPU), ("vfio-manager", "vgpu-device-manager"), "validator", True,
            LAYER_VALIDATION, None, "state-sandbox-validation.daemonset.yaml"),
    Operand("vfio-manager", "nvidia-vfio-manager", ("name", "nvidia-vfio-manager"),
            (VM_PASSTHROUGH,), (), "vfioManager", True, LAYER_DRIVER, None, "state-vfio-manager.daemonset.yaml"),
    Operand("sandbox-device-plugin", "nvidia-sandbox-device-plugin-daemonset",
            ("app", "nvidia-sandbox-device-plugin-daemonset"),
            (VM_PASSTHROUGH, VM_VGPU), ("vfio-manager", "vgpu-device-manager"), "sandboxDevicePlugin", True,
            LAYER_DEVICE_PLUGIN, None, "state-sandbox-device-plugin.daemonset.yaml"),
    Operand("kata-manager", "nvidia-kata-manager", ("name", "nvidia-kata-manager"),
            (VM_PASSTHROUGH,), (), "kataManager", False, LAYER_RUNTIME, None, "state-kata-manager.daemonset.yaml"),
    Operand("cc-manager", "nvidia-cc-manager", ("name", "nvidia-cc-manager"),
            (VM_PASSTHROUGH, VM_VGPU), (), "ccManager", True, LAYER_DRIVER, CC_CAPABLE_LABEL,
            "state-cc-manager.daemonset.yaml"),
)

_BY_NAME = dict((o.name, o) for o in OPERANDS)
_BY_DAEMONSET = dict((o.daemonset, o) for o in OPERANDS)
OPERAND_NAMES = tuple(o.name for o in OPERANDS)
# Operands whose absence the host can make up for: a pre-installed driver, a runtime
# set up on the host. Switching them off is the documented pattern, not a break.
HOST_PROVIDABLE = ("driver", "container-toolkit")
# The device plugin of each workload config: the operand that advertises resources.
RESOURCE_PLUGIN = {CONTAINER: "device-plugin", VM_PASSTHROUGH: "sandbox-device-plugin", VM_VGPU: "sandbox-device-plugin"}

# Chart defaults of the values that decide the model (chart v26.3.2).
CHART_DEFAULTS = {
    "namespace": DEFAULT_NAMESPACE,
    "sandbox_workloads_enabled": False,
    "default_workload": CONTAINER,
    "driver_enabled": True,
    "toolkit_enabled": True,
    "operands_enabled": dict((o.name, o.enabled_by_default) for o in OPERANDS),
}


def operand(name):
    """The Operand called ``name``; KeyError names the unknown operand."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError("unknown operand %r (known: %s)" % (name, ", ".join(OPERAND_NAMES)))


def operand_for_daemonset(daemonset_name):
    """The Operand a DaemonSet belongs to, or None."""
    return _BY_DAEMONSET.get(daemonset_name)


def deploy_label(name):
    return DEPLOY_LABEL_PREFIX + operand(name).name


def operands_for_workload(config):
    """Operands of one workload config, in controller order."""
    if config not in WORKLOAD_CONFIGS:
        raise ValueError("unknown workload config %r (one of: %s)" % (config, ", ".join(WORKLOAD_CONFIGS)))
    return tuple(o for o in OPERANDS if config in o.workload_configs)


def pod_matches(operand_, pod_labels):
    key, value = operand_.pod_selector
    return (pod_labels or {}).get(key) == value


def operand_of_pod(pod_labels):
    """Which operand a pod belongs to, from its labels; None for other pods."""
    for o in OPERANDS:
        if pod_matches(o, pod_labels):
            return o
    return None


def is_gpu_node(labels):
    labels = labels or {}
    if labels.get(GPU_PRESENT_LABEL) == "true":
        return True
    return any(labels.get(key) == "true" for key in NFD_GPU_LABELS)


def _lookup(mapping, path, default):
    for key in path.split("."):
        if not isinstance(mapping, dict) or key not in mapping:
            return default
        mapping = mapping[key]
    return mapping


def _apply_sandbox_rule(enabled, sandbox):
    """The operator deploys no sandbox operand while sandbox workloads are off."""
    if not sandbox:
        for o in OPERANDS:
            if CONTAINER not in o.workload_configs:
                enabled[o.name] = False
    return enabled


def policy_from_spec(spec, namespace=None):
    """The settings that decide the model, from chart values or a ClusterPolicy spec
    (they share their keys). Missing keys take the chart defaults."""
    return policy(spec=spec, overrides={"namespace": namespace})


def policy(overrides=None, spec=None):
    """A policy from a ClusterPolicy spec (or chart values) with explicit overrides on
    top; keys of ``overrides`` whose value is None are ignored. Derived flags (the
    driver and toolkit operands, the sandbox operands) follow the overrides."""
    spec = spec or {}
    enabled = dict((o.name, bool(_lookup(spec, o.values_key + ".enabled", o.enabled_by_default))) for o in OPERANDS)
    result = {
        "namespace": DEFAULT_NAMESPACE,
        "sandbox_workloads_enabled": bool(_lookup(spec, "sandboxWorkloads.enabled",
                                                  CHART_DEFAULTS["sandbox_workloads_enabled"])),
        "default_workload": _lookup(spec, "sandboxWorkloads.defaultWorkload", CONTAINER) or CONTAINER,
        "driver_enabled": enabled["driver"],
        "toolkit_enabled": enabled["container-toolkit"],
        "operands_enabled": enabled,
    }
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in result:
            raise KeyError("unknown policy key %r" % key)
        result[key] = value
    enabled = dict(result["operands_enabled"])
    enabled["driver"] = bool(result["driver_enabled"])
    enabled["container-toolkit"] = bool(result["toolkit_enabled"])
    result["operands_enabled"] = _apply_sandbox_rule(enabled, result["sandbox_workloads_enabled"])
    return result


def effective_workload_config(labels, policy_):
    """(config, label_value): the workload config the operator applies to a node.

    Sandbox workloads off: every node is ``container`` and the label is never read.
    On: a valid label decides; a node without it, or with a value the operator does not
    know, gets the default workload (``container`` when that is not valid either), as
    the operator does. The label value is returned so callers can report it."""
    labels = labels or {}
    value = labels.get(WORKLOAD_CONFIG_LABEL)
    if not policy_["sandbox_workloads_enabled"]:
        return CONTAINER, value
    if value in WORKLOAD_CONFIGS:
        return value, value
    default = policy_["default_workload"]
    return (default if default in WORKLOAD_CONFIGS else CONTAINER), value


def operand_state_on_node(operand_, labels, policy_, config):
    """How one operand stands on one node, from labels and policy alone:

    ``expected``   it should run there;
    ``host``       the host provides it (disabled cluster-wide, or pre-installed/false
                   for a host-providable operand): dependants are satisfied;
    ``off``        switched off by its deploy label;
    ``disabled``   not enabled in the policy;
    ``n/a``        not part of this node's workload config or capability;
    ``isolated``   the node has ``gpu.deploy.operands=false``.
    """
    labels = labels or {}
    if labels.get(OPERANDS_LABEL) == DEPLOY_FALSE:
        return "isolated"
    if config not in operand_.workload_configs:
        return "n/a"
    if operand_.capability_label and labels.get(operand_.capability_label) != "true":
        return "n/a"
    if not policy_["operands_enabled"].get(operand_.name, operand_.enabled_by_default):
        return "host" if operand_.name in HOST_PROVIDABLE else "disabled"
    value = labels.get(DEPLOY_LABEL_PREFIX + operand_.name)
    # Absent: the operator will set it to "true" on its next reconcile.
    if value is None or value == DEPLOY_TRUE:
        return "expected"
    if operand_.name in HOST_PROVIDABLE:
        return "host"
    return "off"


def expected_operands(labels, policy_):
    """Operands that should run on a node (controller order); empty for non-GPU nodes."""
    if not is_gpu_node(labels):
        return ()
    config = effective_workload_config(labels, policy_)[0]
    return tuple(o.name for o in OPERANDS
                 if operand_state_on_node(o, labels, policy_, config) == "expected")


def dependency_chain(name):
    """All operands ``name`` depends on, transitively, dependencies first."""
    seen = []

    def visit(n):
        for dep in operand(n).depends_on:
            if dep not in seen:
                visit(dep)
                seen.append(dep)

    visit(name)
    return tuple(seen)


def chain_for_workload(config):
    """The order operands come up in on a node of ``config``: a topological order of
    that config's operands that keeps controller order among independent ones."""
    members = [o.name for o in operands_for_workload(config)]
    ordered = []
    for name in members:
        for dep in dependency_chain(name):
            if dep in members and dep not in ordered:
                ordered.append(dep)
        if name not in ordered:
            ordered.append(name)
    return tuple(ordered)


def deploy_labels_for(config, labels, policy_):
    """The deploy labels the operator would leave on a GPU node, as a dict.

    Labels of ``config`` become "true" unless already set (an existing value wins);
    deploy labels that belong only to other configs are dropped; ``operands=false``
    strips them all. A host-providable operand disabled in the policy gets
    ``pre-installed`` for the driver (the operator finds the host driver)."""
    labels = labels or {}
    if labels.get(OPERANDS_LABEL) == DEPLOY_FALSE:
        return {}
    result = {}
    for o in operands_for_workload(config):
        key = DEPLOY_LABEL_PREFIX + o.name
        if o.capability_label and labels.get(o.capability_label) != "true":
            continue
        if key in labels:
            result[key] = labels[key]
        elif o.name == "driver" and not policy_["driver_enabled"]:
            result[key] = DEPLOY_PRE_INSTALLED
        else:
            result[key] = DEPLOY_TRUE
    return result


_VGPU_TYPE_RE = re.compile(r"-\d+[ABCQ]$")


def passthrough_resource_name(pci_device_name):
    """``GA102GL [A10]`` -> ``nvidia.com/GA102GL_A10`` (KubeVirt GPU device plugin rule:
    upper-case, '/', '.' and blanks to '_', other characters dropped)."""
    name = pci_device_name.upper()
    name = re.sub(r"[/. ]", "_", name)
    name = re.sub(r"[^A-Z0-9_-]", "", name)
    name = re.sub(r"_+", "_", name).strip("_")
    return "nvidia.com/" + name


def vgpu_resource_name(vgpu_type):
    """``NVIDIA A10-12Q`` -> ``nvidia.com/NVIDIA_A10-12Q``."""
    return "nvidia.com/" + vgpu_type.strip().replace(" ", "_")


def vgpu_type_name(profile):
    """A ``nvidia.com/vgpu.config`` profile (``A10-12Q``) as the vGPU type the node
    advertises (``NVIDIA A10-12Q``)."""
    return profile if profile.upper().startswith(("NVIDIA ", "GRID ")) else "NVIDIA " + profile


def vgpu_count(profile, card_memory_gb, cards):
    """How many vGPUs of ``profile`` ``cards`` cards give: memory per card over the
    profile's frame buffer (``A10-12Q``: 12 GB), times cards."""
    match = re.search(r"-(\d+)[ABCQ]$", profile)
    if not match:
        raise ValueError("not a vGPU profile: %r (expected e.g. A10-12Q)" % profile)
    return (card_memory_gb // int(match.group(1))) * cards


def resource_workload_config(resource_name):
    """Which workload config advertises a ``nvidia.com/*`` resource, or None for
    resources outside the GPU Operator's (non-nvidia.com names)."""
    if not resource_name.startswith("nvidia.com/"):
        return None
    short = resource_name[len("nvidia.com/"):]
    if short in ("gpu", "gpu.shared") or short.startswith("mig-"):
        return CONTAINER
    if _VGPU_TYPE_RE.search(short):
        return VM_VGPU
    return VM_PASSTHROUGH


def gpu_resources(resources):
    """The nvidia.com/* entries of a capacity or allocatable map, as ints, zero dropped."""
    result = {}
    for key, value in (resources or {}).items():
        if resource_workload_config(key) is None:
            continue
        try:
            count = int(str(value))
        except ValueError:
            continue
        if count > 0:
            result[key] = count
    return result


def tolerates(tolerations, taint):
    """Kubernetes toleration semantics for one taint (NoSchedule/NoExecute only)."""
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True
    for tol in tolerations or ():
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        key = tol.get("key")
        op = tol.get("operator", "Equal")
        if not key and op == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if op == "Exists" or tol.get("value", "") == taint.get("value", ""):
            return True
    return False


DEFAULT_OPERAND_TOLERATIONS = ({"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},)
# The DaemonSet controller adds these tolerations to every DaemonSet pod by itself.
DAEMONSET_AUTO_TOLERATIONS = tuple(
    {"key": "node.kubernetes.io/" + key, "operator": "Exists", "effect": effect}
    for key, effect in (("not-ready", "NoExecute"), ("unreachable", "NoExecute"), ("disk-pressure", "NoSchedule"),
                        ("memory-pressure", "NoSchedule"), ("pid-pressure", "NoSchedule"),
                        ("unschedulable", "NoSchedule"))
)


def untolerated_taints(node_taints, tolerations=DEFAULT_OPERAND_TOLERATIONS):
    """Taints of a node that keep the operand DaemonSets' pods off it."""
    allowed = tuple(tolerations or ()) + DAEMONSET_AUTO_TOLERATIONS
    return [t for t in (node_taints or ()) if not tolerates(allowed, t)]
