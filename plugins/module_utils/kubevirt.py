# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's side of VM GPU nodes: the host devices KubeVirt must permit before a VM
may ask for the resources the GPU Operator's sandbox device plugin advertises.

The model-specific resource names are computed here, once, from what the inventory
declares (the site's ``gpu_models`` and the hosts' vGPU configs) with the naming rules
of ``operand_model``; nothing else spells them. A host's ``gpu_vgpu_config`` is what it
puts into ``nvidia.com/vgpu.config``: a config NAME of the vGPU device manager's ConfigMap.
A plain profile (``A10-12Q``) names its own vGPU type, as the default ConfigMap does;
any other name needs that ConfigMap's configs (``vgpu_configs``, the parsed
``vgpu-configs`` map) to know which vGPU types it creates. Entries this collection adds to the
KubeVirt CR are recorded in the annotation ``OWNED_DEVICES_ANNOTATION`` (a JSON list of
resource names) so that a later run removes what the inventory no longer declares and
never touches entries someone else added.

Pure functions over plain dicts; no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_labels as nl
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

KUBEVIRT_API = ("kubevirt.io", "v1", "kubevirts")
OWNED_DEVICES_ANNOTATION = "gpuplatform.rke2/owned-host-devices"
PCI_DEVICES = "pciHostDevices"
MEDIATED_DEVICES = "mediatedDevices"
DEVICE_LISTS = (PCI_DEVICES, MEDIATED_DEVICES)
_SELECTOR_KEY = {PCI_DEVICES: "pciVendorSelector", MEDIATED_DEVICES: "mdevNameSelector"}
_PCI_SELECTOR_RE = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$")
# Before KubeVirt v1.5 a VMI's spec.domain.devices.gpus needed the GPU feature gate; it is GA since.
GPU_GATE = "GPU"
GPU_GATE_GA = (1, 5)
EXAMPLE_PREFIX = "gpu-example-"


# ---------------------------------------------------------------- inventory checks

def validate(gpu_models, nodes, vgpu_configs=None, configmap=om.VGPU_DEVICES_CONFIGMAP):
    """Errors in the site's ``gpu_models`` and in the vGPU configs of the vm-vgpu nodes,
    each naming the model or host and the key. ``vgpu_configs``: the vGPU device
    manager's configs (operand_model.vgpu_device_configs of ConfigMap ``configmap``), or
    None when not known."""
    errors = []
    if not isinstance(gpu_models, dict):
        return ["gpu_models must be a mapping of model name to {pci_vendor_selector, pci_device_name, memory_gb}, "
                "got %s" % type(gpu_models).__name__]
    for model in sorted(gpu_models):
        spec = gpu_models[model]
        where = "gpu_models.%s" % model
        if not isinstance(spec, dict):
            errors.append("%s must be a mapping, got %r" % (where, spec))
            continue
        unknown = sorted(set(spec) - set(("pci_vendor_selector", "pci_device_name", "memory_gb")))
        if unknown:
            errors.append("%s has unknown keys: %s" % (where, ", ".join(unknown)))
        selector = spec.get("pci_vendor_selector")
        if not isinstance(selector, str) or not _PCI_SELECTOR_RE.match(selector):
            errors.append("%s.pci_vendor_selector is %r; expected vendor:device in hex, for example 10DE:2236"
                          % (where, selector))
        name = spec.get("pci_device_name")
        if not isinstance(name, str) or not name.strip():
            errors.append("%s.pci_device_name is %r; expected the pci.ids device name, for example "
                          "'GA102GL [A10]'" % (where, name))
        memory = spec.get("memory_gb")
        if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
            errors.append("%s.memory_gb is %r; expected the card's memory in GB, for example 24" % (where, memory))
    passthrough = sorted(_host(n) for n in nodes if n.get("workload_config") == om.VM_PASSTHROUGH)
    if passthrough and not gpu_models:
        errors.append("hosts %s run vm-passthrough, but gpu_models declares no GPU model to permit in KubeVirt"
                      % ", ".join(passthrough))
    for node in nodes:
        model = node.get("gpu_model")
        if model and model not in gpu_models:
            errors.append("host %s: gpu_model %r is not declared in gpu_models (declared: %s)"
                          % (_host(node), model, ", ".join(sorted(gpu_models)) or "none"))
            continue
        profile = node.get("vgpu_config")
        if node.get("workload_config") != om.VM_VGPU or not profile:
            continue
        where = "host %s: gpu_vgpu_config %r" % (_host(node), profile)
        if vgpu_configs is not None or not om.is_vgpu_profile(profile):
            config_errors = _config_errors(where, profile, gpu_models, model, vgpu_configs, configmap)
            errors.extend(config_errors)
            if config_errors or not om.is_vgpu_profile(profile):
                continue
        profile_of = profile_model(profile)
        if model and profile_of != model:
            errors.append("%s is a profile of %s, but the host's gpu_model is %s" % (where, profile_of, model))
            continue
        if profile_of not in gpu_models:
            errors.append("%s names GPU model %r, which gpu_models does not declare (declared: %s)"
                          % (where, profile_of, ", ".join(sorted(gpu_models)) or "none"))
            continue
        memory = (gpu_models.get(profile_of) or {}).get("memory_gb")
        try:
            if isinstance(memory, int) and om.vgpu_count(profile, memory, 1) < 1:
                errors.append("%s needs more frame buffer than the %s's %d GB" % (where, profile_of, memory))
        except ValueError as exc:
            errors.append("%s: %s" % (where, exc))
    return errors


def _config_errors(where, name, gpu_models, model, vgpu_configs, configmap):
    """Errors for a vGPU config resolved through the device manager's ConfigMap."""
    if vgpu_configs is None:
        return ["%s is not a vGPU profile (like A10-12Q) but a config name of the vGPU device manager's ConfigMap "
                "%s, which is not known here: its vGPU types, and so what KubeVirt must permit, cannot be told"
                % (where, configmap)]
    spec = (gpu_models or {}).get(model) or {}
    try:
        resolved = om.resolve_vgpu_config(name, vgpu_configs, spec.get("pci_vendor_selector"), configmap=configmap)
    except ValueError as exc:
        return ["%s: %s" % (where, exc)]
    if not resolved["devices"]:
        return ["%s: config %r of ConfigMap %s creates no vGPU device%s" % (
            where, name, configmap, " on the %s (%s)" % (model, spec.get("pci_vendor_selector")) if model else "")]
    return []


def _host(node):
    return node.get("host") or node.get("name")


def profile_model(profile):
    """``A10-12Q`` -> ``A10``, ``A100-1-5C`` -> ``A100`` (the board a vGPU profile is of)."""
    return om.vgpu_profile_board(profile) or profile.rsplit("-", 1)[0]


def vgpu_types(node, gpu_models, vgpu_configs=None, configmap=om.VGPU_DEVICES_CONFIGMAP):
    """The vGPU types (profiles) a vm-vgpu node's config creates: from the ConfigMap's
    configs when known (for the node's model's PCI id), else the profile itself."""
    name = node.get("vgpu_config")
    if not name:
        return []
    if vgpu_configs is None:
        return [name] if om.is_vgpu_profile(name) else []
    spec = (gpu_models or {}).get(node.get("gpu_model")) or {}
    try:
        devices = om.resolve_vgpu_config(name, vgpu_configs, spec.get("pci_vendor_selector"),
                                         configmap=configmap)["devices"] or {}
    except ValueError:
        return []  # validate() reports the unknown config
    return sorted(devices)


# ---------------------------------------------------------------- what KubeVirt must permit

def permitted_host_devices(gpu_models, nodes, vgpu_configs=None, configmap=om.VGPU_DEVICES_CONFIGMAP):
    """The ``permittedHostDevices`` entries the inventory calls for: for PCI passthrough the
    ``gpu_model`` of each vm-passthrough node (every declared model when one of them does not
    say), and every vGPU type a vm-vgpu node's config creates (vgpu_types) as a mediated
    device. Sorted, so that a rerun renders the same. Resource names are the sandbox device
    plugin's (operand_model.passthrough_resource_name: getDeviceName)."""
    passthrough = [n for n in nodes if n.get("workload_config") == om.VM_PASSTHROUGH]
    if any(not n.get("gpu_model") for n in passthrough):
        models = sorted(gpu_models)
    else:
        models = sorted(set(n["gpu_model"] for n in passthrough))
    pci = []
    if passthrough:
        for model in models:
            spec = gpu_models[model]
            entry = {"pciVendorSelector": spec["pci_vendor_selector"].upper(),
                     "resourceName": om.passthrough_resource_name(spec["pci_device_name"]),
                     "externalResourceProvider": True}
            if entry not in pci:
                pci.append(entry)
    mediated = []
    profiles = sorted(set(t for n in nodes if n.get("workload_config") == om.VM_VGPU
                          for t in vgpu_types(n, gpu_models, vgpu_configs, configmap)))
    for profile in profiles:
        type_name = om.vgpu_type_name(profile)
        mediated.append({"mdevNameSelector": type_name, "resourceName": om.vgpu_resource_name(type_name),
                         "externalResourceProvider": True})
    return {PCI_DEVICES: pci, MEDIATED_DEVICES: mediated}


def resource_names(permitted):
    return sorted(set(e["resourceName"] for key in DEVICE_LISTS for e in permitted.get(key) or ()))


def owned_resources(kubevirt_obj):
    """The resource names this collection owns in a KubeVirt CR."""
    return nl.owned_list(kubevirt_obj, OWNED_DEVICES_ANNOTATION, "resource names", "KubeVirt")


def current_devices(kubevirt_obj):
    spec = kubevirt_obj.get("spec") or {}
    return (spec.get("configuration") or {}).get("permittedHostDevices") or {}


def plan_devices(kubevirt_obj, desired, adopt_existing=False):
    """How to get the KubeVirt CR's permitted host devices to include ``desired``.

    Entries whose resource name this collection owns are replaced by the desired ones;
    entries of other resource names are kept in place. An unowned entry for a desired
    resource name is adopted when it equals the desired entry and refused otherwise
    (unless ``adopt_existing``). Returns ``{"devices", "owned", "owned_before",
    "refusals", "changed"}`` where ``devices`` holds the two lists afterwards."""
    meta = kubevirt_obj.get("metadata") or {}
    current = current_devices(kubevirt_obj)
    owned_before = owned_resources(kubevirt_obj)
    wanted = set(resource_names(desired))
    refusals = []
    devices = {}
    for key in DEVICE_LISTS:
        kept = []
        for entry in current.get(key) or ():
            name = entry.get("resourceName")
            if name in owned_before:
                continue
            if name in wanted:
                if entry in desired[key] or adopt_existing:
                    continue
                refusals.append(
                    "KubeVirt %s/%s: spec.configuration.permittedHostDevices.%s already has %s for %s, not set by "
                    "this collection; the inventory wants %s. Remove it, or set gpu_node_labels_adopt_existing: "
                    "true to take it over" % (meta.get("namespace"), meta.get("name"), key,
                                              json.dumps(entry, sort_keys=True), name,
                                              json.dumps(_entry_for(desired, key, name), sort_keys=True)))
            kept.append(entry)
        devices[key] = kept + list(desired[key])
    # Every desired entry is in the lists afterwards, so this collection owns exactly those names.
    owned = wanted
    changed = any((current.get(key) or []) != devices[key] for key in DEVICE_LISTS) or sorted(owned) != owned_before
    return {"devices": devices, "owned": sorted(owned), "owned_before": owned_before, "refusals": refusals,
            "changed": changed}


def _entry_for(permitted, key, name):
    return next((e for e in permitted[key] if e["resourceName"] == name), None)


def devices_patch(kubevirt_obj, plan):
    """The JSON merge patch for a plan: only ``spec.configuration.permittedHostDevices``'s
    two lists (``usb`` and everything else left alone) and the ownership annotation."""
    current = current_devices(kubevirt_obj)
    lists = {}
    for key in DEVICE_LISTS:
        if plan["devices"][key] != (current.get(key) or []):
            # An emptied list is removed rather than left as [] so a rerun compares equal.
            lists[key] = plan["devices"][key] or None
    patch = {}
    if lists:
        patch["spec"] = {"configuration": {"permittedHostDevices": lists}}
    if plan["owned"] != plan["owned_before"]:
        patch["metadata"] = {"annotations": {OWNED_DEVICES_ANNOTATION: nl.owned_annotation_value(plan["owned"])}}
    return patch or None


def gpu_gate_warning(kubevirt_obj):
    """A warning when the installed KubeVirt is older than the GA of its GPU feature gate and
    the gate is not enabled, else None."""
    status = kubevirt_obj.get("status") or {}
    version = status.get("observedKubeVirtVersion") or status.get("targetKubeVirtVersion") or ""
    match = re.match(r"^v?(\d+)\.(\d+)", version)
    if not match or (int(match.group(1)), int(match.group(2))) >= GPU_GATE_GA:
        return None
    config = (kubevirt_obj.get("spec") or {}).get("configuration") or {}
    gates = (config.get("developerConfiguration") or {}).get("featureGates") or []
    if GPU_GATE in gates:
        return None
    meta = kubevirt_obj.get("metadata") or {}
    return ("KubeVirt %s/%s runs %s, older than v%d.%d, and its featureGates lack %s: VMIs with "
            "spec.domain.devices.gpus are rejected until it is enabled"
            % (meta.get("namespace"), meta.get("name"), version, GPU_GATE_GA[0], GPU_GATE_GA[1], GPU_GATE))


# ---------------------------------------------------------------- rendering

def rendered_patch(permitted):
    """What to merge into the KubeVirt CR once KubeVirt is installed (a merge patch body)."""
    lists = dict((key, permitted[key]) for key in DEVICE_LISTS if permitted[key])
    return {"spec": {"configuration": {"permittedHostDevices": lists}}}


def example_name(resource_name):
    """``nvidia.com/NVIDIA_A10-12Q`` -> ``gpu-example-nvidia-a10-12q`` (an RFC 1123 name)."""
    short = resource_name.split("/", 1)[-1].lower()
    return EXAMPLE_PREFIX + re.sub(r"[^a-z0-9-]+", "-", short).strip("-")


def example_vmis(permitted, image, memory="4Gi"):
    """One example VirtualMachineInstance per permitted resource, asking for one device of it
    through ``spec.domain.devices.gpus``."""
    result = []
    for name in resource_names(permitted):
        result.append({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": example_name(name)},
            "spec": {
                "domain": {
                    "devices": {
                        "gpus": [{"deviceName": name, "name": "gpu1"}],
                        "disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}],
                    },
                    "resources": {"requests": {"memory": memory}},
                },
                "volumes": [{"name": "containerdisk", "containerDisk": {"image": image}}],
            },
        })
    return result
