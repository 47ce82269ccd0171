"""The lab's fleet, read from the lab inventory (inventories/lab/hosts.yml): the same
file Ansible uses as the lab site's inventory, so the nodes the lab simulates and
the hosts the roles act on cannot drift apart."""

import json
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_FLEET = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
LAB_ANNOTATION = "lab.gpuplatform.invalid/"
HARDWARE_ANNOTATION = LAB_ANNOTATION + "hardware"
HOLD_DOWN_ANNOTATION = LAB_ANNOTATION + "hold-down"
CUDA_SAMPLE_ANNOTATION = LAB_ANNOTATION + "cuda-sample"
ADVERTISE_ANNOTATION = LAB_ANNOTATION + "advertise"
# A node's own state that outlives a test (its hardware, boot count and /run/nvidia/validations).
NODE_STATE_ANNOTATIONS = (HARDWARE_ANNOTATION, LAB_ANNOTATION + "boot", LAB_ANNOTATION + "validations")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NFD_GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"
# The GPU Operator values the lab's fleet runs with (`make lab-up`, the integration suite's
# clean fleet): sandbox workloads on (the fleet has passthrough and vGPU nodes) and a vGPU
# manager image from the site mirror.
LAB_OPERATOR_VALUES = {
    "sandboxWorkloads": {"enabled": True},
    "vgpuManager": {"enabled": True, "repository": "registry.lab.invalid/nvidia", "version": "580.126.20"},
}
NFD_DISPLAY_LABEL = "feature.node.kubernetes.io/pci-0302_10de.present"
# NFD's label for an NVIDIA function of PCI class 0300 (VGA), as GB10 is: nfd-worker's default
# deviceClassWhitelist has 03 and labels pci-<class>_<vendor>.present.
NFD_VGA_LABEL = "feature.node.kubernetes.io/pci-0300_10de.present"
# What NFD and the kubelet report about the host OS and runtime, which the operator reads
# (the driver image tag, the toolkit's runtime); the lab site's default, a host may override.
DEFAULT_HOST_OS = {"id": "ubuntu", "version_id": "22.04", "kernel": "5.15.0-122-generic",
                   "container_runtime": "containerd://2.1.4-k3s2"}


def _walk_groups(group, inherited, hosts):
    group = group or {}
    variables = dict(inherited)
    variables.update(group.get("vars") or {})
    for name, host_vars in (group.get("hosts") or {}).items():
        merged = dict(hosts.get(name, {}))
        merged.update(variables)
        merged.update(host_vars or {})
        hosts[name] = merged
    for child in (group.get("children") or {}).values():
        _walk_groups(child, variables, hosts)


def load_fleet(path=DEFAULT_FLEET):
    """{node name: host vars (group vars merged)} for every host in the inventory."""
    with open(path) as handle:
        inventory = yaml.safe_load(handle)
    hosts = {}
    _walk_groups(inventory.get("all"), {}, hosts)
    return hosts


def hardware(host_vars):
    """What the simulated host has: GPU model facts from ``gpu_models``, or None."""
    model = host_vars.get("gpu_model")
    if not model:
        return None
    models = host_vars.get("gpu_models") or {}
    if model not in models:
        raise ValueError("gpu_model %r is not in gpu_models (%s)" % (model, ", ".join(sorted(models))))
    spec = models[model]
    result = {
        "model": model,
        "count": int(host_vars.get("gpu_count", 1)),
        "pci_device_name": spec["pci_device_name"],
        "pci_vendor_selector": spec.get("pci_vendor_selector", ""),
        "memory_gb": int(spec["memory_gb"]),
        "mig_capable": bool(spec.get("mig_capable", False)),
    }
    # GB10's memory is the host's: NVML reports none of its own, so GFD sets no gpu.memory label.
    if host_vars.get("lab_gpu_unified_memory"):
        result["unified_memory"] = True
    # A driver the host brings (DGX OS): what k8s-driver-manager's `nvidia-smi` finds, and GFD's
    # driver-version labels.
    if host_vars.get("lab_host_driver"):
        result["host_driver"] = str(host_vars["lab_host_driver"])
    return result


def architecture(host_vars):
    """kubernetes.io/arch of a host: the inventory's rke2_arch, amd64 when it does not say."""
    return str(host_vars.get("rke2_arch") or "amd64")


def node_manifest(name, host_vars):
    """The Node object the lab registers for one inventory host, as kubelet + NFD would
    leave it: no GPU resources yet (the device plugin advertises them), NFD labels."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": architecture(host_vars),
        "type": "kwok",
    }
    host_os = dict(DEFAULT_HOST_OS, **(host_vars.get("lab_host_os") or {}))
    labels.update({
        "feature.node.kubernetes.io/system-os_release.ID": host_os["id"],
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": host_os["version_id"],
        "feature.node.kubernetes.io/kernel-version.full": host_os["kernel"],
    })
    labels.update(host_vars.get("lab_node_labels") or {})
    annotations = {KWOK_ANNOTATION: "fake"}
    hw = hardware(host_vars)
    if hw:
        labels[NFD_GPU_LABEL] = "true"
        labels[NFD_VGA_LABEL if str(host_vars.get("lab_gpu_pci_class")) == "0300" else NFD_DISPLAY_LABEL] = "true"
        if hw["mig_capable"]:
            labels["nvidia.com/mig.capable"] = "true"
        annotations[HARDWARE_ANNOTATION] = json.dumps(hw, sort_keys=True)
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"taints": list(host_vars.get("lab_taints") or [])},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"containerRuntimeVersion": host_os["container_runtime"], "kernelVersion": host_os["kernel"],
                         "osImage": "%s %s" % (host_os["id"].capitalize(), host_os["version_id"]),
                         "operatingSystem": "linux", "architecture": labels["kubernetes.io/arch"],
                         "kubeletVersion": "v1.34.4", "kubeProxyVersion": "v1.34.4", "bootID": "",
                         "machineID": "", "systemUUID": ""},
        },
    }
