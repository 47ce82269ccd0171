# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The air-gap plan: which images the GPU Operator will run for a site's values and
node workload types, where each one lives in the site's mirror, the values that point
every image reference at the mirror, and the check that none escapes it.

Pure functions over the chart's values (as ``yaml.safe_load`` returns them). Image
references follow the operator's own rules (``ImagePath`` in the operator source):
``<repository>/<image>:<version>``, ``@`` for a ``sha256:`` version, the bare ``image``
when repository and version are both empty; the driver and the vGPU manager carry the
node's OS in the tag (``<version>-<os>``), precompiled drivers the kernel too
(``<branch>-<kernel>-<os>``). Mirror references keep the source path under the mirror
(``nvcr.io/nvidia/driver:580`` -> ``<mirror>/nvidia/driver:580``), which is what a
containerd mirror entry for the source registry in RKE2's ``registries.yaml`` resolves to.

Each image also carries the architectures its pods need (``linux/amd64``, ``linux/arm64``): the
operator's DaemonSets select no architecture and its images are multi-arch indexes, so an operand
image must hold every architecture of the nodes that operand runs on, and the operator's and
NFD's images every architecture of the cluster. A node that does not declare one (``arch``,
the inventory's ``rke2_arch``) counts as amd64.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import (
    chart_line, deep_merge, lookup, nested, node_workload_configs)

# Blocks whose version defaults to the chart's appVersion (the chart's
# ``{{ .Values.x.version | default .Chart.AppVersion }}``); a released chart's appVersion
# is its version.
APP_VERSION_BLOCKS = ("operator", "validator", "nodeStatusExporter")
# Image blocks that ride along with an operand's own block.
COMPANION_BLOCKS = {
    "driver": ("driver.manager",),
    "vgpuManager": ("vgpuManager.driverManager",),
    "vfioManager": ("vfioManager.driverManager",),
}
# Driver sidecars, each switched on by its own ``enabled``; tagged per OS like the driver.
DRIVER_SIDECARS = ("gds", "gdrcopy")
# Blocks whose tag the operator completes with the node's OS.
PER_OS_BLOCKS = ("driver", "vgpuManager") + DRIVER_SIDECARS

# NFD is a subchart: its image is not in gpu-operator's values.yaml. Its chart's default
# is this repository with the NFD chart's appVersion as tag.
NFD_VALUES_KEY = "node-feature-discovery.image"
NFD_DEFAULT_REPOSITORY = "registry.k8s.io/nfd/node-feature-discovery"
# NFD subchart version per gpu-operator chart version (the chart's Chart.yaml
# dependencies; v26.3.2 from shared/reference/gpu-operator-v26.3.2/Chart.yaml, v26.3.3 and
# v26.7.0 from shared/upstream/gpu-operator-<version>.tar.gz). Other versions: read from
# the chart archive, or set node-feature-discovery.image.tag.
NFD_CHART_VERSIONS = {"v26.3.2": "0.18.3", "v26.3.3": "0.18.3", "v26.7.0": "0.19.0"}
# What a GPUCluster (v26.7 gpuCluster.deployCR) runs: the DRA driver and its validation (the validator's image)
# beside these ClusterPolicy operands' images (its spec's dcgm and dcgmExporter; the driver through the
# NVIDIADriver CRD).
GPU_CLUSTER_BLOCKS = (("dra-driver", "draDriver"), ("dra-validation", "validator"))
GPU_CLUSTER_OPERANDS = ("driver", "dcgm", "dcgm-exporter")

_SHA = "sha256:"
# A node that does not say (inventories written before per-host architectures) is amd64.
DEFAULT_ARCH = "amd64"
_MIRROR = re.compile(r"^[A-Za-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)*$")


# ---------------------------------------------------------------- references

def split_reference(ref):
    """``nvcr.io/nvidia/driver:580-ubuntu22.04`` -> (registry, path, tag, digest); Docker
    Hub names get ``docker.io`` and ``library/`` as container runtimes resolve them."""
    name, _sep, digest = ref.partition("@")
    tag = None
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    first, _sep, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest, tag, digest or None
    return "docker.io", name if rest else "library/" + name, tag, digest or None


def _join(registry, path, tag=None, digest=None):
    ref = registry + "/" + path
    if tag:
        ref += ":" + tag
    if digest:
        ref += "@" + digest
    return ref


def within(ref, mirror):
    return ref == mirror or ref.startswith(mirror.rstrip("/") + "/")


def mirror_reference(ref, mirror):
    """Where ``ref`` lives in ``mirror`` (a registry host, optionally with a path)."""
    if within(ref, mirror):
        return ref
    _registry, path, tag, digest = split_reference(ref)
    return _join(mirror.rstrip("/"), path, tag, digest)


def mirror_problems(mirror):
    if mirror and not _MIRROR.match(mirror):
        return ["image_registry: %r is not a registry host[:port][/path] (no scheme, no trailing slash, lower-case "
                "path)" % mirror]
    return []


class MalformedBlock(ValueError):
    """A values block whose image fields are not text: refused, naming the field."""


def _text(block, key):
    """A block's image field as text: a version may be a YAML number, nothing else may."""
    value = block.get(key)
    if value is None or isinstance(value, str):
        return (value or "").strip()
    if key == "version" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise MalformedBlock("%s is %r, expected a string" % (key, value))


def block_reference(block, app_version=None, os_tag=None, kernel=None):
    """The image a chart values block names, as the operator resolves it; None when the
    block is incomplete (no version, or a bare image name without repository)."""
    repository = _text(block, "repository").rstrip("/")
    image = _text(block, "image")
    version = (_text(block, "version") or str(app_version or "")).strip()
    if not image:
        return None
    if not repository and not block.get("version"):
        # The operator takes a full reference in ``image`` as is (kbld-style pinning).
        return image if ("/" in image or "@" in image) else None
    if not repository or not version:
        return None
    if version.startswith(_SHA):
        return "%s/%s@%s" % (repository, image, version)
    tag = version
    if kernel:
        tag = "%s-%s" % (tag, kernel)
    if os_tag:
        tag = "%s-%s" % (tag, os_tag)
    return "%s/%s:%s" % (repository, image, tag)


def image_blocks(values, prefix=""):
    """(path, block) for every image block in chart values: a map with ``image`` and
    ``repository`` (the NFD subchart's ``image`` map is not one; see nfd_image)."""
    for key in sorted(values, key=str):
        value = values[key]
        if not isinstance(value, dict):
            continue
        path = prefix + str(key)
        if "image" in value and "repository" in value and isinstance(value.get("image"), str):
            yield path, value
        yield from image_blocks(value, path + ".")


def nfd_image(effective, nfd_version=None):
    """(reference, problem): the NFD image the subchart runs."""
    image = lookup(effective, NFD_VALUES_KEY) or {}
    repository = image.get("repository") or NFD_DEFAULT_REPOSITORY
    tag = image.get("tag")
    if not tag and nfd_version:
        tag = nfd_version if str(nfd_version).startswith("v") else "v" + str(nfd_version)
    if not tag:
        return None, ("node-feature-discovery.image.tag: the NFD image's tag follows the NFD subchart's version, "
                      "which is not known for this chart version: give the chart archive (chart_archive) or set "
                      "node-feature-discovery.image.tag")
    return "%s:%s" % (repository, tag), None


# ---------------------------------------------------------------- mirror rewriting

def mirror_overrides(effective, mirror):
    """Values that point every image reference of ``effective`` (chart defaults with the
    site's values) at ``mirror``: each block's repository (or full-reference image) and
    the NFD subchart's image repository. Blocks already in the mirror are left alone."""
    overrides = {}
    for path, block in image_blocks(effective):
        repository = (block.get("repository") or "").strip().rstrip("/")
        if repository:
            if not within(repository, mirror):
                _registry, rest, _tag, _digest = split_reference(repository)
                overrides = deep_merge(overrides, nested(path + ".repository", _join(mirror.rstrip("/"), rest)))
        elif block_reference(block) and not within(block["image"], mirror):
            overrides = deep_merge(overrides, nested(path + ".image", mirror_reference(block["image"], mirror)))
    nfd_repository = (lookup(effective, NFD_VALUES_KEY) or {}).get("repository") or NFD_DEFAULT_REPOSITORY
    if not within(nfd_repository, mirror):
        _registry, rest, _tag, _digest = split_reference(nfd_repository)
        overrides = deep_merge(overrides, nested(NFD_VALUES_KEY + ".repository", _join(mirror.rstrip("/"), rest)))
    return overrides


def escaping_references(effective, mirror):
    """Problems for every image reference in the values that points outside ``mirror``
    (disabled blocks too: enabling one later must not pull from the internet)."""
    problems = []
    for path, block in image_blocks(effective):
        repository = (block.get("repository") or "").strip()
        ref = repository + "/" + block["image"] if repository else block_reference(block)
        if ref and not within(ref, mirror):
            problems.append("%s.repository: %s is outside the mirror %s" % (path, ref, mirror)
                            if repository else "%s.image: %s is outside the mirror %s" % (path, ref, mirror))
    if lookup(effective, "nfd.enabled", True):
        nfd_repository = (lookup(effective, NFD_VALUES_KEY) or {}).get("repository") or NFD_DEFAULT_REPOSITORY
        if not within(nfd_repository, mirror):
            problems.append("%s.repository: %s is outside the mirror %s" % (NFD_VALUES_KEY, nfd_repository, mirror))
    for path, ref in loose_images(effective):
        if not within(ref, mirror):
            problems.append("%s: %s is outside the mirror %s" % (path, ref, mirror))
    return problems


def loose_images(values, path=""):
    """(path, reference) for ``image: <reference>`` strings outside image blocks, such as
    the pod specs of ``extraObjects``, which no repository rewrite reaches."""
    if isinstance(values, list):
        for index, item in enumerate(values):
            yield from loose_images(item, "%s[%d]" % (path, index))
        return
    if not isinstance(values, dict) or ("image" in values and "repository" in values):
        return
    for key in sorted(values, key=str):
        value = values[key]
        where = "%s.%s" % (path, key) if path else str(key)
        if key == "image" and isinstance(value, str) and "/" in value:
            yield where, value
        else:
            yield from loose_images(value, where)


# ---------------------------------------------------------------- the plan

def workload_configs_present(node_configs, sandbox):
    """The effective workload configs of the inventory's GPU nodes; with no node known,
    the one a new node would get."""
    configs = set(node_configs.values())
    if not configs:
        configs.add(node_workload_configs([{"name": "new"}], sandbox)["new"])
    return configs & set(om.WORKLOAD_CONFIGS)


def image_os_tag(os_tag, chart_version):
    """The OS part of a driver image tag as the chart version's operator writes it: ``rhel9.4`` -> ``rhel9`` on
    v26.7 (RHEL, Rocky and Oracle Linux tagged by major version only), ``rhel10.1`` -> ``rhel10`` on v26.3."""
    line = chart_line(chart_version) or {}
    match = re.match(r"^([a-z]+)(\d+)(\.\d+)*$", str(os_tag or ""))
    first_major = (line.get("os_tag_major_only") or {}).get(match.group(1)) if match else None
    if first_major is not None and int(match.group(2)) >= first_major:
        return match.group(1) + match.group(2)
    return os_tag


def _runs(node, node_configs, configs, operand_name):
    """The node runs ``operand_name``: its effective config has it and the node does not switch
    it off (``operands_disabled``, nvidia.com/gpu.deploy.<operand>=false)."""
    return node_configs.get(node["name"]) in configs and operand_name not in (node.get("operands_disabled") or ())


def _architectures(nodes, node_configs, configs, operand_name, fallback):
    """The architectures of the nodes that run ``operand_name``; ``fallback`` when no node is known."""
    found = set((node.get("arch") or DEFAULT_ARCH) for node in nodes or () if _runs(node, node_configs, configs,
                                                                                    operand_name))
    return found if nodes else set(fallback)


def platforms(architectures):
    """``{"arm64", "amd64"}`` -> ``["linux/amd64", "linux/arm64"]``."""
    return ["linux/%s" % arch for arch in sorted(architectures)]


def _os_targets(nodes, node_configs, configs, os_tags, kernels, operand_name=None):
    """(os tags, [(kernel, os)]) of the nodes whose effective config is in ``configs`` and that
    run ``operand_name``; the site-wide lists apply to every node that does not say."""
    tags, pairs = [], []
    for node in nodes or ():
        if not _runs(node, node_configs, configs, operand_name) or not node.get("os_tag"):
            continue
        if node["os_tag"] not in tags:
            tags.append(node["os_tag"])
        if node.get("kernel") and (node["kernel"], node["os_tag"]) not in pairs:
            pairs.append((node["kernel"], node["os_tag"]))
    for tag in os_tags or ():
        if tag not in tags:
            tags.append(tag)
        for kernel in kernels or ():
            if (kernel, tag) not in pairs:
                pairs.append((kernel, tag))
    return tags, pairs


def plan_images(effective, chart_version, nodes=(), os_tags=(), kernels=(), nfd_version=None,
                cluster_architectures=()):
    """(images, problems): the images the operator will run for these values and nodes,
    in controller order, each once: [{source, components, values_keys, platforms}].

    ``platforms``: what the mirrored index must hold: the architectures (``nodes[].arch``) of the
    nodes each operand runs on (a node switching it off with ``operands_disabled`` does not count),
    and for the operator and NFD, whose pods may run anywhere, every architecture of the cluster
    (``cluster_architectures`` and the GPU nodes').

    Only what the values enable on the workload configs the inventory has: container
    operands when a node is (effectively) container, the sandbox operands of the vm-*
    configs present in the values' sandbox mode (kata: the Kata device plugin on
    vm-passthrough, no device plugin on vm-vgpu, cc-manager on both; kubevirt: KubeVirt's
    device plugin, no cc-manager). Operands placed by node capability (MIG manager, MPS
    control daemon) are listed when enabled: which cards are MIG-capable, and where MPS
    is configured, is not known before the nodes run. A v26.7 GPUCluster (``gpuCluster.deployCR``) adds the DRA
    driver and its validation; without a ClusterPolicy (``clusterPolicy.deployCR: false``) only what the
    GPUCluster runs is listed. Driver images carry each node's OS as this version's operator tags it
    (``image_os_tag``)."""
    images, problems = [], []
    index = {}
    # The nodes' OS as this version's operator tags driver images.
    nodes = [dict(n, os_tag=image_os_tag(n["os_tag"], chart_version)) if n.get("os_tag") else n for n in nodes or ()]
    os_tags = list(dict.fromkeys(image_os_tag(tag, chart_version) for tag in os_tags or ()))
    everywhere = set(cluster_architectures or ()) | set((n.get("arch") or DEFAULT_ARCH) for n in nodes or ())
    everywhere = everywhere or {DEFAULT_ARCH}
    arches = {"now": everywhere}

    def add(component, values_key, ref):
        if ref in index:
            entry = images[index[ref]]
            if component not in entry["components"]:
                entry["components"].append(component)
            if values_key not in entry["values_keys"]:
                entry["values_keys"].append(values_key)
            entry["platforms"] = platforms(set(p.split("/", 1)[1] for p in entry["platforms"]) | arches["now"])
            return
        index[ref] = len(images)
        images.append({"source": ref, "components": [component], "values_keys": [values_key],
                       "platforms": platforms(arches["now"])})

    def add_block(component, path, os_list=None, pairs=None, tag_arches=None):
        """``tag_arches``: {os tag: architectures of the nodes with that OS}, for images tagged per OS."""
        block = lookup(effective, path)
        if not isinstance(block, dict):
            problems.append("%s: %s is enabled but the values have no %s block" % (path, component, path))
            return
        app_version = chart_version if path in APP_VERSION_BLOCKS else None
        digest_or_full = str(block.get("version") or "").startswith(_SHA) or (
            not block.get("repository") and not block.get("version"))
        for key in ("repository", "image", "version"):
            try:
                _text(block, key)
            except MalformedBlock as exc:
                raise MalformedBlock("%s.%s" % (path, exc)) from exc
        if os_list is None or digest_or_full:
            refs = [(block_reference(block, app_version), None)]
        elif pairs is not None:
            refs = [(block_reference(block, os_tag=os_tag, kernel=kernel), os_tag) for kernel, os_tag in pairs]
            if not pairs:
                problems.append("driver_kernels: %s uses precompiled images, tagged <branch>-<kernel>-<os>; give the GPU "
                                "nodes' kernels (gpu_kernel_version on each host or driver_kernels)" % path)
        else:
            refs = [(block_reference(block, os_tag=os_tag), os_tag) for os_tag in os_list]
            if not os_list:
                problems.append("driver_os_tags: the %s image is tagged per OS (<version>-<os>, for example "
                                "ubuntu22.04); give the GPU nodes' OS (gpu_os_tag on each host or driver_os_tags)"
                                % path)
        operand_arches = arches["now"]
        for ref, os_tag in refs:
            if ref is None:
                missing = [path + "." + key for key in ("repository", "image", "version") if not block.get(key)]
                problems.append("%s: %s is enabled but its image is incomplete: set %s"
                                % (path, component, ", ".join(missing)))
            else:
                # An OS tag's image runs on the nodes of that OS; a site-wide tag on any of the operand's.
                arches["now"] = (tag_arches or {}).get(os_tag) or operand_arches
                add(component, path, ref)
        arches["now"] = operand_arches

    add_block("operator", "operator")
    if lookup(effective, "nfd.enabled", True):
        ref, problem = nfd_image(effective, nfd_version)
        if problem:
            problems.append(problem)
        else:
            add("node-feature-discovery", NFD_VALUES_KEY, ref)

    sandbox = lookup(effective, "sandboxWorkloads")
    # Not a map: values_problems refuses it (the chart expects a map); the plan reads none.
    sandbox = sandbox if isinstance(sandbox, dict) else {}
    sandbox = {"enabled": sandbox.get("enabled"), "default_workload": sandbox.get("defaultWorkload"),
               "mode": sandbox.get("mode")}
    node_configs = node_workload_configs(nodes or (), sandbox)
    configs = workload_configs_present(node_configs, sandbox)
    # The chart values path of the model: its sandbox mode decides which device plugin the
    # VM nodes get (kata: the Kata one on vm-passthrough, none on vm-vgpu) and whether
    # cc-manager runs (kata only), as the operator's isStateEnabled does.
    policy = om.policy_from_values(effective)
    mode = policy["sandbox_mode"]
    gpu_cluster = lookup(effective, "gpuCluster.deployCR") is True
    if gpu_cluster:
        for component, path in GPU_CLUSTER_BLOCKS:
            add_block(component, path)
    cluster_policy = lookup(effective, "clusterPolicy.deployCR", True) is not False
    for operand in om.OPERANDS:
        present = set(o for o in configs if operand in om.operands_for_workload(o, mode))
        if not present or not policy["operands_enabled"].get(operand.name):
            continue
        if not cluster_policy and not (gpu_cluster and operand.name in GPU_CLUSTER_OPERANDS):
            continue  # no ClusterPolicy: only what the GPUCluster runs
        arches["now"] = _architectures(nodes, node_configs, present, operand.name, everywhere)
        if not arches["now"]:
            continue  # every node of its configs switches it off
        key = operand.values_key
        if key in PER_OS_BLOCKS:
            tags, pairs = _os_targets(nodes, node_configs, present, os_tags, kernels, operand.name)
            by_tag = {}
            for node in nodes or ():
                if _runs(node, node_configs, present, operand.name) and node.get("os_tag"):
                    by_tag.setdefault(node["os_tag"], set()).add(node.get("arch") or DEFAULT_ARCH)
            precompiled = key == "driver" and lookup(effective, "driver.usePrecompiled")
            add_block(operand.name, key, os_list=tags, pairs=pairs if precompiled else None, tag_arches=by_tag)
            if key == "driver":
                for sidecar in DRIVER_SIDECARS:
                    if lookup(effective, sidecar + ".enabled"):
                        add_block(sidecar, sidecar, os_list=tags, tag_arches=by_tag)
        else:
            add_block(operand.name, key)
        for companion in COMPANION_BLOCKS.get(key, ()):
            add_block(operand.name, companion)
    return images, problems


def with_mirror(images, mirror):
    """The plan's entries with their ``mirror`` reference (None without a mirror)."""
    return [dict(entry, mirror=mirror_reference(entry["source"], mirror) if mirror else None) for entry in images]


def parse_image_list(text):
    """References of an image list such as RKE2's ``rke2-images.linux-amd64.txt``."""
    refs = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line and line not in refs:
            refs.append(line)
    return refs


def images_txt(sections, mirror=None, header=None):
    """The plan as text: ``source -> mirror`` per line (``source`` alone without a mirror),
    grouped by ``sections`` [(title, [entry])], each entry {source, components?}."""
    lines = []
    for line in (header or "").splitlines():
        lines.append("# " + line if line else "#")
    for title, entries in sections:
        lines.append("")
        lines.append("# " + title)
        for entry in entries:
            text = entry["source"]
            if mirror:
                text += " -> " + mirror_reference(entry["source"], mirror)
            notes = []
            if entry.get("components"):
                notes.append(", ".join(entry["components"]))
            if entry.get("platforms"):
                notes.append("[%s]" % ", ".join(entry["platforms"]))
            if notes:
                text += "  # " + " ".join(notes)
            lines.append(text)
    return "\n".join(lines).lstrip("\n") + "\n"
