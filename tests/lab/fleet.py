"""The lab's fleet, read from the lab inventory (inventories/lab/hosts.yml): the same
file Ansible uses as the lab site's inventory, so the nodes the lab simulates and
the hosts the roles act on cannot drift apart."""

import copy
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


# ---------------------------------------------------------------- scale fleets
# A fleet of any size for the scale benchmark and the scale test (`make lab-up LAB_NODES=<n>`):
# the lab fleet's hosts repeated in their order and proportions, plus the one kind of node
# that fleet lacks, a GPU node isolated from the GPU layer (gpu_node_isolated: true). Each
# generated host keeps its template's variables and groups; the first server stays the only
# server (a site has few), the other copies of it join as agents.
ISOLATED_KIND = "gpu-isolated"
GENERATED_HEADER = ("# Generated by tests/lab/fleet.py (write_scale_inventory) from %s: %d nodes, the lab\n"
                    "# fleet's hosts repeated in their proportions. The lab simulates these nodes and the GPU\n"
                    "# steps run on them with this file as the inventory. Do not edit: `labctl up --nodes N`\n"
                    "# writes it again.\n")


def node_kind(name):
    """``gpu-container-2`` -> ``gpu-container``: the template's kind, its name without the index."""
    stem, sep, index = name.rpartition("-")
    return stem if sep and index.isdigit() else name


def fleet_templates(path=DEFAULT_FLEET):
    """(all.vars, [(kind, {group: host vars})]) of the lab inventory, hosts in their order,
    and the isolated GPU node the lab fleet has none of (a copy of its first container node)."""
    with open(path) as handle:
        inventory = yaml.safe_load(handle)
    root = inventory.get("all") or {}
    templates, order = {}, []
    for group, body in (root.get("children") or {}).items():
        if (body or {}).get("children"):
            raise ValueError("%s: group %s has child groups; the scale fleet copies flat groups only" % (path, group))
        for name, host_vars in ((body or {}).get("hosts") or {}).items():
            if name not in templates:
                templates[name] = {}
                order.append(name)
            templates[name][group] = dict(host_vars or {})
    result = [(node_kind(name), templates[name]) for name in order]
    container = next((groups for _kind_name, groups in result
                      if (groups.get("gpu_nodes") or {}).get("gpu_workload_config") == "container"
                      and not groups["gpu_nodes"].get("lab_taints")), None)
    if container is not None:
        isolated = dict((group, dict(host_vars)) for group, host_vars in container.items())
        isolated["gpu_nodes"]["gpu_node_isolated"] = True
        result.append((ISOLATED_KIND, isolated))
    return dict(root.get("vars") or {}), result


def scale_inventory(nodes, path=DEFAULT_FLEET):
    """The inventory (a dict) of a fleet of ``nodes`` hosts generated from the lab inventory."""
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ValueError("nodes: %r must be a whole number of 1 or more" % (nodes,))
    variables, templates = fleet_templates(path)
    groups, counts = {}, {}
    for index in range(nodes):
        kind, template = templates[index % len(templates)]
        counts[kind] = counts.get(kind, 0) + 1
        name = "%s-%d" % (kind, counts[kind])
        for group, host_vars in template.items():
            if group == "rke2_servers" and counts[kind] > 1:
                group = "rke2_agents"
            # Copies, not shared objects: the YAML then has no anchors, and each host reads alone.
            groups.setdefault(group, {})[name] = copy.deepcopy(host_vars) or None
    order = ["rke2_servers", "rke2_agents"] + sorted(set(groups) - {"rke2_servers", "rke2_agents"})
    children = dict((group, {"hosts": groups[group]}) for group in order if group in groups)
    return {"all": {"vars": variables, "children": children}}


def write_scale_inventory(dest, nodes, path=DEFAULT_FLEET):
    """Writes the generated inventory of ``nodes`` hosts to ``dest``; returns ``dest``."""
    text = yaml.safe_dump(scale_inventory(nodes, path), default_flow_style=False, sort_keys=False)
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    tmp = dest + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(GENERATED_HEADER % (os.path.relpath(path, ROOT), nodes))
        handle.write(text)
    os.replace(tmp, dest)
    return dest


def gpu_hosts(fleet):
    """The fleet's GPU nodes (a gpu_model), by name."""
    return sorted(name for name, host_vars in fleet.items() if host_vars.get("gpu_model"))
