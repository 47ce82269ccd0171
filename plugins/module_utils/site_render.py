# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``make site/render``: the files a site produces without hosts or a cluster, and how they
are written.

``label_plan`` turns what the gpu_node_labels role decided for each GPU node (its desired
labels) into the site's node label plan: which node gets which ``nvidia.com/*`` label,
the key of the site file each comes from, the deploy labels the GPU Operator then sets
itself and the operands it runs there. ``plan_files`` compares the rendered files with a
directory and says which to write and which rendered files the site no longer produces.

Pure functions over plain data; the module ``site_files`` and the filter
``gpu_label_plan`` do the I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import posixpath

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import manifest_yaml
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

LABEL_PLAN_FILE = "labels/gpu-node-labels.yaml"

# Which setting of a GPU host each label the collection sets comes from: (site file key under
# the host's entry, inventory variable).
_LABEL_SOURCES = (
    (om.WORKLOAD_CONFIG_LABEL, "gpu.workload_config", "gpu_workload_config"),
    (om.OPERANDS_LABEL, "gpu.isolated", "gpu_node_isolated"),
    (om.VGPU_CONFIG_LABEL, "gpu.vgpu_config", "gpu_vgpu_config"),
)


def _label_source(key, site_key):
    """Where a desired label comes from: the site file's key when the host has one, else the
    inventory variable."""
    for label, site_suffix, variable in _LABEL_SOURCES:
        if key == label:
            return "%s.%s" % (site_key, site_suffix) if site_key else variable
    if key.startswith(om.DEPLOY_LABEL_PREFIX):
        return "%s.gpu.operands_disabled" % site_key if site_key else "gpu_operands_disabled"
    return None


def _node_entry(node, settings, policy_, site_key):
    desired = dict(node.get("desired") or {})
    # A GPU node as the operator sees it once node-feature-discovery found its NVIDIA PCI device.
    labels = dict(desired)
    labels[om.NFD_GPU_LABELS[0]] = "true"
    config = om.effective_workload_config(labels, policy_)[0]
    operator_labels = dict((k, v) for k, v in om.operator_node_labels(labels, policy_).items() if v is not None)
    labels.update(operator_labels)
    entry = {
        "workload_config": config,
        "set": dict((key, {"value": value, "from": _label_source(key, site_key)}) for key, value in desired.items()),
        "operator_sets": dict((key, value) for key, value in operator_labels.items() if key not in desired),
        "operands": list(om.expected_operands(labels, policy_)),
    }
    if node.get("host") and node.get("host") != node.get("name"):
        entry["host"] = node["host"]
    if site_key:
        entry["site_key"] = site_key
    notes = []
    if settings.get("isolated") and settings.get("operands_disabled"):
        notes.append("isolated: the per-operand switches (%s) are held back until the node rejoins the GPU layer"
                     % ", ".join(settings["operands_disabled"]))
    if desired.get(om.WORKLOAD_CONFIG_LABEL) and desired[om.WORKLOAD_CONFIG_LABEL] != config:
        notes.append("sandbox workloads are off in the chart values: the GPU Operator ignores %s and runs the node "
                     "as %s" % (om.WORKLOAD_CONFIG_LABEL, config))
    if not desired.get(om.WORKLOAD_CONFIG_LABEL):
        notes.append("no workload config: the GPU Operator gives the node the default workload (%s)" % config)
    if notes:
        entry["notes"] = notes
    return entry


# What label_plan reads of its inputs (other modules' results): each field absent, null or of
# this shape, else a refusal naming the input and the field (``nodes[2].desired is a list``).
_PLAN_INPUTS = (
    ("nodes", ko.list_of(ko.mapping({"host": ko.STRING, "name": ko.STRING, "desired": ko.STRING_MAP},
                                    required=("name",)))),
    ("settings", ko.list_of(ko.mapping({"host": ko.STRING, "name": ko.STRING, "isolated": ko.BOOLEAN,
                                        "operands_disabled": ko.list_of(ko.STRING)}))),
    ("values", ko.CLUSTERPOLICY_SPEC),
    ("site_keys", ko.map_of(ko.STRING)),
    ("source", ko.STRING),
    ("site", ko.STRING),
)


def label_plan(nodes, settings=None, values=None, site_keys=None, source=None, site=None):
    """The node label plan as YAML text.

    ``nodes``: [{host, name, desired}] as the gpu_node_labels module's validate step returns
    them; ``settings``: the role's node entries (``isolated``, ``operands_disabled``, by host);
    ``values``: the GPU Operator chart values (what the operator does with the labels);
    ``site_keys``: {host: ``nodes[1]``}, the hosts' keys in the site file ``source``.
    An input of another shape is refused (k8s_objects.MalformedObject, a ValueError) naming
    it and the field, before anything is planned."""
    given = {"nodes": nodes, "settings": settings, "values": values, "site_keys": site_keys, "source": source,
             "site": site}
    for where, shape in _PLAN_INPUTS:
        if given[where] is not None:
            ko.check_shape(shape, given[where], where)
    by_host = dict((s.get("host") or s.get("name"), s) for s in settings or ())
    policy_ = om.policy_from_spec(values or {})
    plan = {}
    for node in nodes or ():
        host = node.get("host") or node["name"]
        plan[node["name"]] = _node_entry(node, by_host.get(host) or {}, policy_, (site_keys or {}).get(host))
    header = [
        "GPU node labels%s: which node gets which nvidia.com/* labels, and why." % (" of site %s" % site if site else ""),
        "Rendered by `make site/render`%s." % (" from %s and the GPU Operator chart values" % source if source else ""),
        "Do not edit: change the site file and render again.",
        "set: the labels `make rke2/gpu/labels` sets and owns, each with the key it comes from.",
        "operator_sets: the labels the GPU Operator then sets itself (gpu.present, the deploy labels of the node's",
        "workload config), once node-feature-discovery has found the node's NVIDIA GPU.",
        "operands: what the GPU Operator runs on the node with these labels and values (controller order; the MIG",
        "and CC managers join on cards that report the capability).",
    ]
    return "".join("# %s\n" % line for line in header) + "---\n" + manifest_yaml.dump({"nodes": plan}, sort_keys=True)


def _valid_relative(path):
    normal = posixpath.normpath(path)
    return bool(path) and not path.startswith("/") and normal == path and not normal.startswith("..")


def plan_files(files, existing, managed=()):
    """(write, remove, problems) for rendering ``files`` ({relative path: text}) into a
    directory whose current files are ``existing`` ({relative path: text}, at least every
    file matching ``managed``): the paths whose text differs or that are missing, and the
    existing files matching a ``managed`` pattern that ``files`` no longer holds. Sorted."""
    problems = ["%r is not a relative path inside the site folder" % p for p in sorted(files)
                if not _valid_relative(p)]
    write = sorted(p for p in files if existing.get(p) != files[p])
    remove = sorted(p for p in existing if p not in files and any(fnmatch.fnmatchcase(p, m) for m in managed))
    return write, remove, problems
