# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a GPU node's labels should be, from the inventory, and how to get there
without touching what this collection does not own.

The inventory says per host: its workload config, the operands switched off on it,
whether it is isolated from the GPU layer, its vGPU profile. This module turns that
into the desired ``nvidia.com/*`` labels, checks the combinations that break silently,
and plans one merge patch per node that names only the labels this collection owns.
Ownership is recorded on the node itself, in the annotation ``OWNED_LABELS_ANNOTATION``
(a JSON list of label keys), so a later run knows which labels it may change or remove.

Adoption rule for a label that is on the node but not owned yet:

* same value as desired: adopted (owned from now on, nothing else changes);
* a deploy label at the value the GPU Operator's own components write (``true``, which
  the operator sets on every GPU node, or ``pre-installed``, which k8s-driver-manager
  sets on the driver's label where the host driver works): taken over, because
  overwriting it is the documented way to switch an operand off;
* a deploy label at a pause value (``paused-for-driver-upgrade``, ...): left alone,
  neither refused nor changed, since its writer sets it back to ``true`` when done;
* any other value (someone chose it): refused, unless ``adopt_existing``.

An operand is switched back on by setting its deploy label to ``true``, never by
removing the ``false``: the operator does not reconcile a node when a deploy label
goes, so the operand would stay off until its next full resync, hours later.

Pure functions over plain dicts as the API returns them (camelCase keys); no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_gates as gates
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

OWNED_LABELS_ANNOTATION = "gpuplatform.rke2/owned-labels"
# Set on a node this collection cordoned to drain it before a workload switch; the
# apply step uncordons exactly those nodes once their labels are as desired.
CORDONED_ANNOTATION = "gpuplatform.rke2/cordoned-for-workload-switch"

# KubeVirt runs every VM in a pod of its own, labelled kubevirt.io=virt-launcher.
VIRT_LAUNCHER_LABEL = ("kubevirt.io", "virt-launcher")
VM_NAME_LABEL = "vm.kubevirt.io/name"
VM_DOMAIN_ANNOTATION = "kubevirt.io/domain"

SANDBOX_OFF_ACTIONS = ("fail", "warn")
TERMINAL_PHASES = ("Succeeded", "Failed")


def describe_host(node):
    """How messages name a node: its inventory host, and the node when the name differs."""
    host = node.get("host") or node.get("name")
    if node.get("name") and node.get("name") != host:
        return "host %s (node %s)" % (host, node["name"])
    return "host %s" % host


# ---------------------------------------------------------------- inventory -> desired labels

def sandbox_policy(sandbox_workloads_enabled=None, default_workload=None):
    """The operator policy the checks reason with: the site's chart values for sandbox
    workloads; anything not given takes the chart default."""
    return om.policy({"sandbox_workloads_enabled": sandbox_workloads_enabled,
                      "default_workload": default_workload})


def declared_workload_config(node, policy_):
    """The workload config a node is meant to run: its variable, else what the operator
    gives a node without the label under ``policy_``."""
    return node.get("workload_config") or om.effective_workload_config({}, policy_)[0]


def validate_nodes(nodes, policy_, sandbox_off_action="fail"):
    """(errors, warnings) for the nodes' inventory settings; each message names the host
    and the variable or value. Nothing here needs the cluster."""
    errors = []
    warnings = []
    if sandbox_off_action not in SANDBOX_OFF_ACTIONS:
        errors.append("gpu_node_labels_sandbox_off_action is %r (one of: %s)"
                      % (sandbox_off_action, ", ".join(SANDBOX_OFF_ACTIONS)))
    seen = {}
    for node in nodes:
        where = describe_host(node)
        name = node.get("name")
        if not name:
            errors.append("%s: k8s_node_name is empty" % where)
        elif name in seen:
            errors.append("%s: k8s_node_name %r is also the node of host %s" % (where, name, seen[name]))
        else:
            seen[name] = node.get("host") or name

        config = node.get("workload_config")
        if config and config not in om.WORKLOAD_CONFIGS:
            errors.append("%s: gpu_workload_config %r is not a workload config (one of: %s)"
                          % (where, config, ", ".join(om.WORKLOAD_CONFIGS)))
            continue
        if config and config != om.CONTAINER and not policy_["sandbox_workloads_enabled"]:
            message = ("%s: gpu_workload_config %r while sandbox workloads are off in the site's chart values "
                       "(sandboxWorkloads.enabled: false): the GPU Operator ignores %s and runs the node as "
                       "container" % (where, config, om.WORKLOAD_CONFIG_LABEL))
            (warnings if sandbox_off_action == "warn" else errors).append(message)

        declared = declared_workload_config(node, policy_)
        runs = [o.name for o in om.operands_for_workload(declared)]
        for name_ in node.get("operands_disabled") or ():
            if name_ not in om.OPERAND_NAMES:
                errors.append("%s: gpu_operands_disabled lists %r, which is not an operand (known: %s)"
                              % (where, name_, ", ".join(om.OPERAND_NAMES)))
            elif name_ in gates.VALIDATORS:
                errors.append(validator_refusal(where, name_))
            elif not om.has_own_deploy_label(name_):
                errors.append("%s: gpu_operands_disabled lists %r, which has no deploy label of its own (its "
                              "DaemonSet selects %s): switching it off would switch that off too"
                              % (where, name_, om.deploy_label(name_)))
            elif name_ not in runs:
                # The operator removes deploy labels of other configs from a node; setting
                # one would be undone on every reconcile and never settle.
                errors.append("%s: gpu_operands_disabled lists %r, which does not run on %s nodes "
                              "(operands of %s: %s)" % (where, name_, declared, declared, ", ".join(runs)))

        profile = node.get("vgpu_config")
        if profile:
            try:
                om.vgpu_count(profile, 1, 1)
            except ValueError:
                errors.append("%s: gpu_vgpu_config %r is not a vGPU profile (expected <model>-<GB><series>, "
                              "for example A10-12Q)" % (where, profile))
            if declared != om.VM_VGPU:
                warnings.append("%s: gpu_vgpu_config %r is set on a %s node; only vm-vgpu nodes read %s"
                                % (where, profile, declared, om.VGPU_CONFIG_LABEL))
        elif declared == om.VM_VGPU:
            warnings.append("%s: vm-vgpu node without gpu_vgpu_config: the vGPU device manager applies its "
                            "default configuration" % where)
    return errors, warnings


def validator_refusal(where, validator):
    """Why a validator cannot be switched off by label, naming what waits for it."""
    files = ", ".join("%s/%s" % (gates.VALIDATIONS_DIR, f) for f in gates.status_files(validator))
    waiting = [n for n in gates.gated_by(validator) if n in om.OPERAND_NAMES]
    return ("%s: gpu_operands_disabled lists %r, which is refused: the validator is a gate, not a leaf. It writes "
            "%s, which %s wait for in their init containers; they keep running now, but after the node's next "
            "reboot (/run starts empty) they hang in Init. Remove it from gpu_operands_disabled; to take the node "
            "out of the GPU layer, set gpu_node_isolated: true"
            % (where, validator, files, ", ".join(waiting)))


def desired_labels(node):
    """The labels the inventory asks for on one (validated) node, as a dict."""
    labels = {}
    if node.get("workload_config"):
        labels[om.WORKLOAD_CONFIG_LABEL] = node["workload_config"]
    if node.get("isolated"):
        labels[om.OPERANDS_LABEL] = om.DEPLOY_FALSE
    else:
        # While a node is isolated the operator strips every deploy label from it, so the
        # per-operand switches are held back until the node rejoins the GPU layer.
        for name in node.get("operands_disabled") or ():
            labels[om.deploy_label(name)] = om.DEPLOY_FALSE
    if node.get("vgpu_config"):
        labels[om.VGPU_CONFIG_LABEL] = node["vgpu_config"]
    return labels


# ---------------------------------------------------------------- ownership and the label patch

def owned_list(obj, annotation, what, kind="node"):
    """The sorted JSON list of strings an object carries in ``annotation`` (empty when
    absent); ValueError naming the object when it holds anything else."""
    meta = obj.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(annotation)
    if raw is None or raw == "":
        return []
    try:
        values = json.loads(raw)
    except ValueError:
        values = None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        name = "%s/%s" % (meta["namespace"], meta.get("name")) if meta.get("namespace") else meta.get("name")
        raise ValueError("%s %s: annotation %s is %r, not a JSON list of %s; fix or remove it"
                         % (kind, name, annotation, raw, what))
    return sorted(set(values))


def owned_annotation_value(owned):
    """The annotation value recording ``owned``; None (removes the annotation) when empty."""
    return json.dumps(sorted(owned), separators=(",", ":")) if owned else None


def owned_keys(node_obj):
    """The label keys this collection owns on a node."""
    return owned_list(node_obj, OWNED_LABELS_ANNOTATION, "label keys")


def is_operand_label(key):
    """Whether ``key`` is one operand's deploy label (not ``deploy.operands``)."""
    return key.startswith(om.DEPLOY_LABEL_PREFIX) and key != om.OPERANDS_LABEL


def operator_written(key, value):
    """Whether ``value`` on ``key`` is what the GPU Operator's components write there on
    their own: ``true`` (the operator, on every GPU node), ``pre-installed`` on the
    driver's label (k8s-driver-manager, where the host driver works)."""
    if not is_operand_label(key):
        return False
    return value == om.DEPLOY_TRUE or (key == om.deploy_label("driver") and value == om.DEPLOY_PRE_INSTALLED)


def is_paused(key, value):
    """Whether a deploy label holds a pause value: a transient state some component set
    and will undo, which this collection leaves alone."""
    return is_operand_label(key) and value in gates.PAUSE_VALUES


def _pause_note(where, node_name, key, have, want):
    return ("%s: label %s=%s on node %s is left alone: %s, and it sets the label back to true when done. "
            "The inventory wants %s; run again once that is done" % (
                where, key, have, node_name, gates.PAUSE_VALUES[have],
                repr(want) if want is not None else "the operand on"))


def _operator_keeps(labels, policy_):
    """The deploy labels the operator keeps (or writes) on a node with ``labels``: those
    of its effective workload config, none on an isolated node."""
    config = om.effective_workload_config(labels, policy_)[0]
    return set(om.deploy_labels_for(config, labels, policy_))


def plan_labels(node_obj, desired, adopt_existing=False, where=None, policy_=None):
    """How to get one node's labels from what it has to ``desired``, under ``policy_``
    (the site's sandbox settings; chart defaults when not given).

    Returns ``{"changes": [...], "owned": [...], "refusals": [...], "deferred": [...],
    "labels": {...}}``: ``changes`` lists ``{key, before, after, action}`` with action
    ``set``, ``remove`` or ``adopt`` (ownership only); ``owned`` is the owned key list
    afterwards; ``deferred`` says which labels were left alone because a component
    paused them; ``labels`` the node's labels afterwards. Keys neither desired nor owned
    are never in a change.

    An owned deploy label the inventory no longer asks for is set to ``true`` (and no
    longer owned) where the operand belongs on the node afterwards: the operator would not
    notice its removal. It is removed where the operand does not belong (another
    workload config, an isolated node), as the operator would remove it.

    A node this cannot read (k8s_objects.LABELLED_NODE) is refused before anything is
    planned: ``Node gpu-1: metadata.labels is a list, expected a mapping``."""
    meta = ko.read("Node", node_obj, shape=ko.LABELLED_NODE).get("metadata") or {}
    where = where or "node %s" % meta.get("name")
    policy_ = policy_ or om.policy()
    current = dict(meta.get("labels") or {})
    owned_before = owned_keys(node_obj)
    owned = set(owned_before)
    changes = []
    refusals = []
    deferred = []
    for key in sorted(desired):
        want = desired[key]
        have = current.get(key)
        if is_paused(key, have):
            if have != want:
                deferred.append(_pause_note(where, meta.get("name"), key, have, want))
            continue
        if key in owned or have is None:
            if have != want:
                changes.append({"key": key, "before": have, "after": want, "action": "set"})
            owned.add(key)
        elif have == want:
            changes.append({"key": key, "before": have, "after": want, "action": "adopt"})
            owned.add(key)
        elif adopt_existing or operator_written(key, have):
            changes.append({"key": key, "before": have, "after": want, "action": "set"})
            owned.add(key)
        else:
            refusals.append("%s: label %s=%s on node %s was not set by this collection; the inventory wants %r. "
                            "Remove the label, or set gpu_node_labels_adopt_existing: true to take it over"
                            % (where, key, have, meta.get("name"), want))
    released = sorted(owned - set(desired))
    # The node as the operator will see it, for what switching an operand back on means:
    # the desired labels set, the other released labels gone.
    provisional = dict(current)
    provisional.update((c["key"], c["after"]) for c in changes)
    for key in released:
        provisional.pop(key, None)
    keeps = _operator_keeps(provisional, policy_)
    for key in released:
        have = current.get(key)
        if have is None:
            owned.discard(key)
        elif is_paused(key, have):
            deferred.append(_pause_note(where, meta.get("name"), key, have, None))
        elif is_operand_label(key) and key in keeps:
            if have != om.DEPLOY_TRUE:
                changes.append({"key": key, "before": have, "after": om.DEPLOY_TRUE, "action": "set"})
            owned.discard(key)
        else:
            changes.append({"key": key, "before": have, "after": None, "action": "remove"})
            owned.discard(key)
    after = dict(current)
    for change in changes:
        if change["after"] is None:
            after.pop(change["key"], None)
        else:
            after[change["key"]] = change["after"]
    return {"changes": changes, "owned": sorted(owned), "owned_before": owned_before,
            "refusals": refusals, "deferred": deferred, "labels": after}


def label_patch(plan):
    """The JSON merge patch for a plan: only the keys that change, and the ownership
    annotation when it changes; None when there is nothing to send."""
    labels = dict((c["key"], c["after"]) for c in plan["changes"] if c["action"] != "adopt")
    patch = {}
    if labels:
        patch["labels"] = labels
    if plan["owned"] != plan["owned_before"]:
        patch["annotations"] = {OWNED_LABELS_ANNOTATION: owned_annotation_value(plan["owned"])}
    return {"metadata": patch} if patch else None


def label_diff(node_name, plan):
    """An Ansible diff entry listing one node's label changes, or None."""
    touched = [c for c in plan["changes"] if c["action"] != "adopt"]
    if not touched:
        return None

    def render(side):
        return "".join("%s=%s\n" % (c["key"], c[side]) for c in touched if c[side] is not None)

    return {"before_header": "node/%s labels" % node_name, "after_header": "node/%s labels" % node_name,
            "before": render("before"), "after": render("after")}


# ---------------------------------------------------------------- workload switches and the pods they break

def workload_switch(current_labels, new_labels, policy_):
    """``(from, to)`` when the labels change the workload config the operator applies to
    the node (the driver changes under it), else None."""
    before = om.effective_workload_config(current_labels, policy_)[0]
    after = om.effective_workload_config(new_labels, policy_)[0]
    return (before, after) if before != after else None


def _gpu_resources_of(pod):
    names = set()
    spec = pod.get("spec") or {}
    for container in list(spec.get("containers") or ()) + list(spec.get("initContainers") or ()):
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            for key in resources.get(section) or {}:
                if om.resource_workload_config(key) is not None:
                    names.add(key)
    return sorted(names)


def gpu_workloads(pods):
    """The pods among ``pods`` that hold GPU resources: not Succeeded or Failed, asking
    for any ``nvidia.com/*`` resource. A KubeVirt VM shows as its virt-launcher pod.
    A pod this cannot read (k8s_objects.GPU_WORKLOAD_POD) is refused naming it:
    ``pods[3] team-a/trainer: spec.containers[0].resources is a list, expected a mapping``."""
    result = []
    for pod in ko.read_all("Pod", pods, "pods", shape=ko.GPU_WORKLOAD_POD):
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        resources = _gpu_resources_of(pod)
        if not resources:
            continue
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        key, value = VIRT_LAUNCHER_LABEL
        vm = None
        if labels.get(key) == value:
            vm = labels.get(VM_NAME_LABEL) or (meta.get("annotations") or {}).get(VM_DOMAIN_ANNOTATION) or meta.get("name")
        result.append({"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid"),
                       "vm": vm, "resources": resources})
    return result


def describe_workload(workload):
    what = "VM %s/%s (pod %s)" % (workload["namespace"], workload["vm"], workload["name"]) if workload["vm"] \
        else "pod %s/%s" % (workload["namespace"], workload["name"])
    return "%s using %s" % (what, ", ".join(workload["resources"]))


def switch_refusal(where, switch, workloads, most=10):
    shown = "; ".join(describe_workload(w) for w in workloads[:most])
    more = " and %d more" % (len(workloads) - most) if len(workloads) > most else ""
    return ("%s: switching the workload config from %s to %s is refused while GPU workloads run there "
            "(the driver changes under them): %s%s. Set gpu_node_labels_drain: true to evict them first, "
            "or gpu_node_labels_force: true to switch anyway"
            % (where, switch[0], switch[1], shown, more))


def remaining_workloads(workloads, pods):
    """Which of ``workloads`` (by uid) still exist among ``pods``; a pod recreated under the
    same name has a new uid and does not count as the evicted one."""
    pods = ko.read_all("Pod", pods, "pods", shape=ko.GPU_WORKLOAD_POD)
    alive = set((p.get("metadata") or {}).get("uid") for p in pods
                if (p.get("status") or {}).get("phase") not in TERMINAL_PHASES)
    return [w for w in workloads if w["uid"] in alive]


def cordon_patch(node_obj, switch):
    """The patch that cordons a node for a drain, or None when it is already
    unschedulable (someone else's cordon is not ours to lift later)."""
    if (node_obj.get("spec") or {}).get("unschedulable"):
        return None
    return {"metadata": {"annotations": {CORDONED_ANNOTATION: "%s->%s" % switch}},
            "spec": {"unschedulable": True}}


def uncordon_patch(node_obj):
    """The patch that lifts this collection's cordon, or None when it set none."""
    annotations = (node_obj.get("metadata") or {}).get("annotations") or {}
    if CORDONED_ANNOTATION not in annotations:
        return None
    return {"metadata": {"annotations": {CORDONED_ANNOTATION: None}}, "spec": {"unschedulable": None}}


def eviction_body(workload):
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": workload["name"], "namespace": workload["namespace"]}}
