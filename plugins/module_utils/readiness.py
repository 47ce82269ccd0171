# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the wait modules wait for, and why a wait did not end: pure functions over the
engine's cache (``{kind: {namespace/name: object}}``, objects as the API returns them).

Conditions return ``(done, detail)`` for ``k8s_wait.Waiter``; ``done`` means "stop
waiting", so a condition that sees a failure nothing will mend (a HelmChart install that
failed, a CUDA sample that ended) is done too and says so in its detail.

Which operands a node should run, in which order, and why one is not running come from
``node_check`` and ``operand_model``; this module adds only what a wait needs on top:
node selection by resource, steps, timings, Jobs and sample pods.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from datetime import datetime

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import manifest_yaml
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s import helm_release
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_wait import objects as _cached

LAYER_NODE = "node"  # the kubelet itself: below the ADR's layers


def objects(cache, key):
    """The engine's cached objects of one cache key (``pods``), in name order, each read
    (k8s_objects): a condition never looks past an object it cannot read."""
    return ko.read_all(ko.KIND_OF[key], _cached(cache, key), key)


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _name(obj):
    return _meta(obj).get("name")


def _condition(obj, kind):
    for condition in ((obj or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return condition
    return None


# An extended resource name: a DNS subdomain prefix, a slash, a name.
_RESOURCE_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def resource_name_problem(resource, key="resource"):
    """A message naming ``key`` when ``resource`` is no extended resource name, else None."""
    if _RESOURCE_RE.match(resource or ""):
        return None
    return "%s: %r is not an extended resource name (<domain>/<name>, like nvidia.com/gpu)" % (key, resource)


def count(resources, name):
    """An extended resource's count in a capacity or allocatable map (0 when absent)."""
    value = (resources or {}).get(name)
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def node_ready(node):
    """(ready, reason): the kubelet's Ready condition."""
    condition = _condition(node, "Ready")
    if condition is None:
        return False, "no Ready condition yet"
    if condition.get("status") == "True":
        return True, None
    return False, "NotReady: %s" % (condition.get("message") or condition.get("reason") or condition.get("status"))


def _plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def policy_from_cache(cache, namespace=None):
    """``operand_model.policy()`` from the cached ClusterPolicies (chart defaults when
    there is none yet)."""
    return node_check.policy_from_inputs(objects(cache, "clusterpolicies"), {"namespace": namespace})


# ---------------------------------------------------------------- node selection

def select_nodes(nodes, resource, policy, names=None, explicit=False, daemonsets=None):
    """(selected, skipped, missing) node names for a wait on ``resource``.

    A node whose operands are paused (a driver upgrade, a MIG or vGPU change) is
    selected: it is a working node that will serve again, and the wait waits for it.

    ``explicit`` (the caller chose nodes by label selector or ``names``): every node
    given is selected; a named node not (yet) in the cluster is ``missing``. Otherwise,
    the GPU nodes on which the operator will run the device plugin that produces
    ``resource``: right workload config, plugin not switched off, no taint its
    DaemonSet does not tolerate, no other resource of that config advertised instead
    (a MIG or vGPU profile that produces another name). ``skipped`` says why each other
    GPU node is left out. The operand DaemonSets, when given, say which taints they
    tolerate (the ClusterPolicy's ``daemonsets.tolerations``); else the chart default."""
    return _select(nodes, resource, policy, names, explicit, daemonsets)[:3]


def _select(nodes, resource, policy, names, explicit, daemonsets):
    """select_nodes, and node_check's label-only reports of the nodes it looked at."""
    nodes = ko.read_all("Node", nodes, "nodes")
    by_name = dict((_name(n), n) for n in nodes)
    if explicit:
        wanted = sorted(names) if names else sorted(by_name)
        selected = [n for n in wanted if n in by_name]
        reports = node_check.evaluate([by_name[n] for n in selected], [], policy, daemonsets)["nodes"]
        return selected, [], [n for n in wanted if n not in by_name], reports
    config = om.resource_workload_config(resource)
    reports = node_check.evaluate(nodes, [], policy, daemonsets)["nodes"]
    selected, skipped = [], []
    for name in sorted(by_name):
        report = reports[name]
        if not report["gpu_node"]:
            continue
        reason = _skip_reason(by_name[name], report, resource, config)
        if reason:
            skipped.append({"node": name, "reason": reason})
        else:
            selected.append(name)
    return selected, skipped, [], reports


def _skip_reason(node, report, resource, config):
    node_config = report["workload_config"]
    if node_config != config:
        return "its workload config is %s, which does not produce %s" % (node_config, resource)
    plugin = om.RESOURCE_PLUGIN[config]
    if plugin not in report["expected_operands"]:
        state = report["operand_states"].get(plugin)
        if state == "isolated":
            return "it is isolated (%s=%s)" % (om.OPERANDS_LABEL, om.DEPLOY_FALSE)
        label = om.deploy_label(plugin)
        value = _meta(node).get("labels", {}).get(label)
        if state == "off":
            return "%s is switched off here (%s=%s)" % (plugin, label, value)
        return "%s is not enabled in the ClusterPolicy" % plugin
    if report["untolerated_taints"]:
        # No wait would end: the check reports the node (an error unless it is isolated).
        return "taint %s is not tolerated by the operand DaemonSets" % "; ".join(report["untolerated_taints"])
    status = node.get("status") or {}
    others = sorted(name for name in om.gpu_resources(status.get("capacity"))
                    if name != resource and om.resource_workload_config(name) == config)
    if others and not count(status.get("capacity"), resource):
        return "it advertises %s instead" % ", ".join(others)
    return None


def lost_nodes(remembered, selected, skipped, nodes, explicit):
    """``{node: why}`` for the nodes of ``remembered`` (selected at some point of one wait)
    that ``selected`` (this evaluation's selection) lacks.

    A selection made again on every event forgets a node that drops out for a moment: a
    GPU node deleted and re-created, or one whose NFD labels are pruned and written again,
    would let the wait succeed on the others. A wait remembers what it selected and asks
    this why each remembered node is not selected now."""
    skip = dict((s["node"], s["reason"]) for s in skipped)
    by_name = dict((_name(n), n) for n in nodes)
    result = {}
    for name in sorted(set(remembered) - set(selected)):
        if name in skip:
            why = "is left out now: %s" % skip[name]
        elif name not in by_name:
            # A label selector's watch reports a node whose labels stop matching as deleted.
            why = ("is gone from the nodes the selection matches (deleted, or its labels changed)" if explicit
                   else "is gone from the cluster")
        elif not om.is_gpu_node(_meta(by_name[name]).get("labels")):
            why = "is no longer a GPU node (no NFD PCI label of vendor 10de: NFD pruned its labels)"
        else:
            why = "is no longer selected"
        result[name] = "selected earlier in this wait, %s" % why
    return result


def lost_text(lost):
    """``node why; ...`` of ``lost_nodes`` for a message."""
    return "; ".join("%s %s" % (name, why) for name, why in sorted(lost.items()))


def named_left_out(names, nodes, skipped):
    """``[{"node", "reason"}]`` for each node the user named that a selection left out:
    the ``skipped`` entries of those nodes, and those not in ``nodes`` at all. A node named
    on purpose and then passed over in silence (cordoned, NotReady, short of the resource)
    makes a check pass that never looked at it."""
    present = set(_name(n) for n in ko.read_all("Node", nodes, "nodes"))
    wanted = set(names or ())
    result = [dict(s) for s in skipped if s["node"] in wanted]
    result += [{"node": name, "reason": "not in the cluster"} for name in sorted(wanted - present)]
    return sorted(result, key=lambda s: s["node"])


# ---------------------------------------------------------------- per-layer diagnosis

def diagnose(nodes, pods, policy, node_names, resource=None, min_per_node=1, daemonsets=None, rollouts=None):
    """Why each of ``node_names`` is not ready, in the ADR's layers, lowest first:
    ``{node: {"workload_config", "layer", "operand", "reason", "layer_failures"}}``.

    The operand layers come from ``node_check``; on top, a node whose kubelet is not
    Ready, one that advertises fewer than ``min_per_node`` of ``resource``, and the
    operands whose pod there is of an old template (``rollouts``: ``{node: [{"operand",
    "reason"}]}``, as ``hold_outdated`` finds them)."""
    nodes = ko.read_all("Node", nodes, "nodes")
    by_name = dict((_name(n), n) for n in nodes)
    wanted = [by_name[n] for n in node_names if n in by_name]
    reports = node_check.evaluate(wanted, pods, policy, daemonsets)["nodes"]
    result = {}
    for name in node_names:
        if name not in by_name:
            result[name] = {"workload_config": None, "layer": LAYER_NODE, "operand": None,
                            "reason": "the node is not in the cluster", "layer_failures": []}
            continue
        node = by_name[name]
        report = reports[name]
        failures = list(report["layer_failures"])
        ready, why = node_ready(node)
        if not ready:
            failures.insert(0, {"layer": LAYER_NODE, "operand": None, "reason": why})
        for stale in (rollouts or {}).get(name, ()):
            failures.append({"layer": om.operand(stale["operand"]).layer, "operand": stale["operand"],
                             "reason": stale["reason"]})
        config = report["workload_config"]
        # A pause or a vGPU config not applied yet explains a short count: it says so instead.
        held = report.get("paused_operands") or report.get("vgpu_config_state") in VGPU_NOT_DONE
        if (resource and config in om.RESOURCE_PLUGIN and not held
                and not any(f["layer"] == om.LAYER_ALLOCATABLE for f in failures)):
            status = node.get("status") or {}
            have = count(status.get("allocatable"), resource)
            if have < min_per_node:
                failures.append({"layer": om.LAYER_ALLOCATABLE, "operand": om.RESOURCE_PLUGIN[config],
                                 "reason": "allocatable %s: %d (capacity %d), fewer than %d" % (
                                     resource, have, count(status.get("capacity"), resource), min_per_node)})
        failures.sort(key=lambda f: _layer_rank(f["layer"]))
        first = failures[0] if failures else (_not_ready_without_failure(report) or {
            "layer": None, "operand": None,
            "reason": "no broken layer found (operands Running and Ready, %s advertised)" % (resource or "resources")})
        result[name] = {"workload_config": config, "layer": first["layer"], "operand": first["operand"],
                        "reason": first["reason"], "layer_failures": failures}
    return result


def _not_ready_without_failure(report):
    """What holds a node up when no layer is broken: a paused operand (a transient state
    of a working node), a vGPU config not applied yet, an operand of a layer outside the
    ADR's (a validator, monitoring); None when nothing does."""
    chain = report.get("expected_operands") or []
    not_running = report.get("not_running") or {}
    paused = report.get("paused_operands") or {}
    for name in chain:
        if name in paused:
            return {"layer": om.operand(name).layer, "operand": name, "reason": not_running.get(name)}
    if report.get("vgpu_config_state") in VGPU_NOT_DONE:
        return {"layer": om.operand("vgpu-device-manager").layer, "operand": "vgpu-device-manager",
                "reason": "%s=%s" % (om.VGPU_CONFIG_STATE_LABEL, report["vgpu_config_state"])}
    for name in chain:
        if name in not_running:
            return {"layer": om.operand(name).layer, "operand": name, "reason": not_running[name]}
    return None


# vGPU device manager states of a node's nvidia.com/vgpu.config that are not done: the
# waits keep waiting (a failed config is also an error in the check).
VGPU_NOT_DONE = ("pending", "failed")


def diagnosis_text(diagnosis, most=10):
    """``node: layer (operand): reason; ...`` for a failure message."""
    parts = []
    for name in sorted(diagnosis)[:most]:
        d = diagnosis[name]
        if d["layer"] is None:
            parts.append("%s: %s" % (name, d["reason"]))
            continue
        where = d["layer"] + (" (%s)" % d["operand"] if d["operand"] else "")
        parts.append("%s: %s: %s" % (name, where, d["reason"]))
    if len(diagnosis) > most:
        parts.append("and %d more" % (len(diagnosis) - most))
    return "; ".join(parts)


# ---------------------------------------------------------------- allocatable

# The layers below the device plugin. A device plugin that registered keeps advertising
# its GPUs when the toolkit or the driver under it breaks later, so the count alone calls
# a node ready whose GPUs no container can use ("device plugin without toolkit").
RUNTIME_CHAIN_LAYERS = (om.LAYER_DRIVER, om.LAYER_RUNTIME)


def runtime_chain_failures(nodes, pods, policy, node_names, daemonsets=None):
    """``{node: {"layer", "operand", "reason"}}``: the lowest failure in the driver or
    container-runtime layer of each of ``node_names`` that has one, as ``node_check``
    finds it from the operand pods."""
    nodes = ko.read_all("Node", nodes, "nodes")
    wanted = set(node_names)
    reports = node_check.evaluate([n for n in nodes if _name(n) in wanted], pods, policy, daemonsets)["nodes"]
    result = {}
    for name, report in reports.items():
        broken = [f for f in report["layer_failures"] if f["layer"] in RUNTIME_CHAIN_LAYERS]
        if broken:
            result[name] = broken[0]
    return result


def held_up(reports, node_names):
    """``{node: reason}`` for the nodes of ``node_names`` that must not count as ready
    whatever they advertise, from their node_check reports (labels suffice): operands
    paused by a driver upgrade, a MIG or a vGPU change (the node is between two states),
    or a vGPU config the vGPU device manager has not applied (pending) or could not apply
    (failed)."""
    result = {}
    for name in node_names:
        report = reports.get(name) or {}
        paused = report.get("paused_operands") or {}
        if paused:
            result[name] = "paused: %s" % ", ".join("%s=%s" % (om.deploy_label(o), v) for o, v in sorted(paused.items()))
        elif report.get("vgpu_config_state") in VGPU_NOT_DONE:
            result[name] = "%s=%s" % (om.VGPU_CONFIG_STATE_LABEL, report["vgpu_config_state"])
    return result


def allocatable_condition(resource, names=None, explicit=False, min_per_node=1, min_nodes=None,
                          allow_no_nodes=False, namespace=None):
    """Selected nodes Ready with at least ``min_per_node`` of ``resource`` allocatable;
    ``min_nodes`` of them (default: every selected node). Nodes that join during the
    wait are selected like the others.

    A node selected at any point of the wait stays wanted (``lost_nodes``): one that is
    gone or left out later keeps the wait from succeeding and is named in its message,
    unless ``min_nodes`` allows fewer nodes.

    With a ClusterPolicy and the operand pods in the cache (the operator manages the
    nodes), a node whose driver or container-runtime layer is broken does not count,
    whatever it advertises; without them the count alone decides."""
    # Every node selected so far in this wait: the condition is evaluated again on each
    # event over the same watch cache, and a node that drops out for a moment is not done.
    remembered = set()

    def condition(cache):
        nodes = objects(cache, "nodes")
        policy = policy_from_cache(cache, namespace)
        daemonsets = objects(cache, "daemonsets")
        selected, skipped, missing, reports = _select(nodes, resource, policy, names, explicit, daemonsets)
        remembered.update(selected)
        # A named node not in the cluster is wanted and reported as missing already.
        lost = lost_nodes(remembered, selected + missing, skipped, nodes, explicit)
        by_name = dict((_name(n), n) for n in nodes)
        broken = {}
        if "pods" in cache and active_clusterpolicy(objects(cache, "clusterpolicies")) is not None:
            broken = runtime_chain_failures(nodes, objects(cache, "pods"), policy, selected, daemonsets)
        held = held_up(reports, selected)
        per_node, ready, waiting = {}, [], {}
        for name in selected:
            node = by_name[name]
            status = node.get("status") or {}
            have = count(status.get("allocatable"), resource)
            node_is_ready, why = node_ready(node)
            per_node[name] = {"allocatable": have, "capacity": count(status.get("capacity"), resource),
                              "ready": (node_is_ready and have >= min_per_node and name not in broken
                                        and name not in held)}
            if per_node[name]["ready"]:
                ready.append(name)
            elif why:
                waiting[name] = why
            elif name in held:
                waiting[name] = held[name]
            elif name in broken:
                failure = broken[name]
                waiting[name] = "%s (%s): %s" % (failure["layer"], failure["operand"], failure["reason"])
                if have >= min_per_node:
                    waiting[name] += "; the %d %s it advertises are not usable" % (have, resource)
            else:
                waiting[name] = "allocatable %s: %d, wanted %d" % (resource, have, min_per_node)
        for name in missing:
            waiting[name] = "not in the cluster"
        waiting.update(lost)
        wanted = min_nodes if min_nodes is not None else len(selected) + len(missing) + len(lost)
        if not selected and not missing and not lost and min_nodes is None:
            done = allow_no_nodes
            message = "no node selected for %s" % resource
        else:
            done = len(ready) >= wanted
            message = "%d of %d wanted nodes have %d %s allocatable" % (len(ready), wanted, min_per_node, resource)
        if lost:
            message += "; %s" % lost_text(lost)
        # A node it still waits for is not "left out".
        skipped = [s for s in skipped if s["node"] not in lost]
        return done, {"nodes": per_node, "selected": selected, "ready": ready, "waiting": waiting,
                      "skipped": skipped, "lost": lost, "wanted": wanted, "message": message}

    return condition


# ---------------------------------------------------------------- operand readiness

STEP_OPERATOR = "operator"
STEP_CLUSTER_POLICY = "cluster-policy"
STEP_OPERANDS = "operands"
STEPS = (STEP_OPERATOR, STEP_CLUSTER_POLICY, STEP_OPERANDS)


def deployment_available(deployment):
    """(available, message) of a Deployment: its current generation rolled out, as
    ``kubectl rollout status`` decides (every replica updated, no old replica left, the
    updated ones available), and condition Available=True. Mid-upgrade the old operator
    still counts as available; it is not the one that was asked for."""
    if deployment is None:
        return False, "Deployment not found"
    status = deployment.get("status") or {}
    available = _condition(deployment, "Available")
    if (status.get("observedGeneration") or 0) < (_meta(deployment).get("generation") or 0):
        return False, "rollout of generation %s not observed yet" % _meta(deployment).get("generation")
    wanted = (deployment.get("spec") or {}).get("replicas")
    wanted = 1 if wanted is None else wanted
    updated = status.get("updatedReplicas") or 0
    if updated < wanted:
        return False, "rollout in progress: %d of %d replicas updated" % (updated, wanted)
    if (status.get("replicas") or 0) > updated:
        return False, "rollout in progress: %d old replicas pending termination" % ((status.get("replicas") or 0) - updated)
    if available and available.get("status") == "True" and (status.get("availableReplicas") or 0) >= max(updated, 1):
        return True, "%s/%s replicas available" % (status.get("availableReplicas"), status.get("replicas"))
    progressing = _condition(deployment, "Progressing") or {}
    return False, "%s/%s replicas available%s" % (
        status.get("availableReplicas") or 0, status.get("replicas") or 0,
        ": " + progressing["message"] if progressing.get("message") else "")


def active_clusterpolicy(clusterpolicies):
    # node_check knows which ClusterPolicy the operator acts on.
    return node_check._active_clusterpolicy(clusterpolicies)  # pylint: disable=protected-access


def clusterpolicy_ready(clusterpolicy, require_reconciled):
    """(ready, message): present; with ``require_reconciled``, condition Ready=True with
    reason Reconciled (the operator also reports Ready with NoGPUNodes or
    NFDLabelsMissing, which say nothing about the operands)."""
    if clusterpolicy is None:
        return False, "no ClusterPolicy"
    status = clusterpolicy.get("status") or {}
    state = status.get("state") or "unknown"
    if not require_reconciled:
        return True, "ClusterPolicy %s present (state %s)" % (_name(clusterpolicy), state)
    ready = _condition(clusterpolicy, "Ready")
    if ready is None:
        return False, "ClusterPolicy %s has no Ready condition yet (state %s)" % (_name(clusterpolicy), state)
    if ready.get("status") == "True" and ready.get("reason") == "Reconciled":
        return True, "ClusterPolicy %s Ready (Reconciled)" % _name(clusterpolicy)
    return False, "ClusterPolicy %s: Ready=%s reason %s%s" % (
        _name(clusterpolicy), ready.get("status"), ready.get("reason"),
        ": " + ready["message"] if ready.get("message") else "")


# ---------------------------------------------------------------- DaemonSet rollouts

# Which template a DaemonSet's pod was made from, in the names the API server and the
# DaemonSet controller use: the API server's DaemonSet strategy raises the template
# generation on every change of spec.template (pkg/registry/apps/daemonset/strategy.go),
# which apps/v1 shows as this annotation (pkg/apis/apps/v1/conversion.go); the controller
# labels each pod it creates with that generation and with the hash of its
# ControllerRevision (daemon/util CreatePodTemplate), and counts a pod updated when either
# label matches (daemon/util/daemonset_util.go IsPodUpdated).
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
POD_TEMPLATE_GENERATION_LABEL = "pod-template-generation"
REVISION_HASH_LABEL = "controller-revision-hash"


def daemonset_rollout_problem(daemonset, counts=True):
    """Why a DaemonSet is not rolled out, or None. kubernetes.core's ``daemonset_ready``
    (module_utils/k8s/waiter.py): its generation observed, and ``updatedNumberScheduled ==
    desiredNumberScheduled == numberReady``. ``counts=False``: the generation alone."""
    meta, status = _meta(daemonset), daemonset.get("status") or {}
    if (status.get("observedGeneration") or 0) < (meta.get("generation") or 0):
        return "generation %s not observed yet (observedGeneration %s)" % (
            meta.get("generation"), status.get("observedGeneration"))
    if not counts:
        return None
    desired = status.get("desiredNumberScheduled")
    if desired is None:
        return "no status yet"
    # updatedNumberScheduled is omitted at 0 (omitempty).
    updated, ready = status.get("updatedNumberScheduled") or 0, status.get("numberReady") or 0
    if updated != desired or ready != desired:
        return "%d of %d pods updated, %d ready" % (updated, desired, ready)
    return None


def _labels(obj):
    return _meta(obj).get("labels") or {}


def _owner_daemonset(pod):
    for ref in _meta(pod).get("ownerReferences") or ():
        if ref.get("kind") == "DaemonSet":
            return ref
    return None


def _pod_daemonset(pod, by_operand):
    """The name of the DaemonSet a pod belongs to: its owner, or, for a pod that carries
    the DaemonSet controller's labels and no owner (an orphan, or a copy of a pod), its
    operand's one DaemonSet; None when neither says."""
    ref = _owner_daemonset(pod)
    if ref is not None:
        return ref.get("name")
    labels = _labels(pod)
    if POD_TEMPLATE_GENERATION_LABEL not in labels and REVISION_HASH_LABEL not in labels:
        return None
    operand_ = om.operand_of_pod(labels)
    candidates = by_operand.get(operand_.name, ()) if operand_ else ()
    return candidates[0] if len(candidates) == 1 else None


def _current_hashes(daemonset, owned):
    """The hashes of the DaemonSet's current ControllerRevision, as its pods show it: the
    hash of a pod labelled with the current template generation is the current one. When
    no pod is (a rollback to an earlier template reuses that template's revision, and its
    old pods stay), the controller's own count decides: a DaemonSet rolled out at its
    current generation (every pod updated by the controller's hash) vouches for the
    hashes its pods carry."""
    generation = _template_generation(daemonset)
    hashes = set(_labels(p).get(REVISION_HASH_LABEL) for p in owned
                 if _labels(p).get(POD_TEMPLATE_GENERATION_LABEL) == generation)
    if not hashes and daemonset_rollout_problem(daemonset) is None:
        hashes = set(_labels(p).get(REVISION_HASH_LABEL) for p in owned)
    hashes.discard(None)
    return hashes


def _template_generation(daemonset):
    return (_meta(daemonset).get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION)


def daemonset_rollouts(daemonsets, pods, namespace):
    """``(outdated, owned)``. ``outdated``: ``{pod name: {"daemonset", "reason"}}`` for the
    pods in ``namespace`` that a DaemonSet owns and that are not of its current template
    (IsPodUpdated's rule: label ``pod-template-generation`` equal to the DaemonSet's
    template generation, or ``controller-revision-hash`` equal to the current revision's),
    or whose DaemonSet is gone. ``owned``: ``{daemonset name: [its pods]}``. A DaemonSet
    without the template generation annotation (not an apps/v1 answer) says nothing of
    its pods: they are not judged."""
    by_name = dict((_name(d), d) for d in daemonsets if _meta(d).get("namespace") == namespace)
    by_operand = {}
    for name in by_name:
        operand_ = om.operand_for_daemonset(name)
        if operand_ is not None:
            by_operand.setdefault(operand_.name, []).append(name)
    owned = {}
    for pod in pods:
        if _meta(pod).get("namespace") == namespace:
            name = _pod_daemonset(pod, by_operand)
            if name is not None:
                owned.setdefault(name, []).append(pod)
    outdated = {}
    for name, its_pods in owned.items():
        daemonset = by_name.get(name)
        generation = _template_generation(daemonset) if daemonset else None
        if daemonset is not None and generation is None:
            continue
        uid = _meta(daemonset).get("uid")
        hashes = _current_hashes(daemonset, its_pods) if daemonset else set()
        for pod in its_pods:
            labels = _labels(pod)
            ref_uid = (_owner_daemonset(pod) or {}).get("uid")
            if daemonset is None:
                reason = "its DaemonSet %s is gone" % name
            elif uid and ref_uid and uid != ref_uid:
                reason = "it belongs to an earlier DaemonSet of that name (uid %s)" % ref_uid
            elif labels.get(POD_TEMPLATE_GENERATION_LABEL) == generation or labels.get(REVISION_HASH_LABEL) in hashes:
                continue
            else:
                reason = "it is of an old template (%s %s, the DaemonSet's is %s), not updated yet" % (
                    POD_TEMPLATE_GENERATION_LABEL, labels.get(POD_TEMPLATE_GENERATION_LABEL), generation)
            outdated[_name(pod)] = {"daemonset": name, "reason": "DaemonSet %s mid-rollout: pod %s: %s" % (
                name, _name(pod), reason)}
    return outdated, owned


def unsettled_daemonsets(daemonsets, owned, namespace, counts=True):
    """``{daemonset: why}`` for the operand DaemonSets in ``namespace`` that are not
    rolled out (``daemonset_rollout_problem``). A DaemonSet that wants no pod and has none
    holds nothing up: the operator creates and deletes such a precompiled driver DaemonSet
    on every pass (operand_model.precompiled_driver_groups), and a node's own chain
    already waits for an operand whose DaemonSet has not placed its pod yet."""
    result = {}
    for daemonset in daemonsets:
        name = _name(daemonset)
        if _meta(daemonset).get("namespace") != namespace or om.operand_for_daemonset(name) is None:
            continue
        if not owned.get(name) and not (daemonset.get("status") or {}).get("desiredNumberScheduled"):
            continue
        problem = daemonset_rollout_problem(daemonset, counts)
        if problem:
            result[name] = problem
    return result


def _layer_rank(layer):
    if layer == LAYER_NODE:
        return -1
    return om.LAYERS.index(layer) if layer in om.LAYERS else len(om.LAYERS)


def hold_outdated(per_node, pods, namespace, outdated):
    """Take out of each node's ``ready_operands`` an operand whose Running pods there are
    all outdated (``daemonset_rollouts``): the old pod of a DaemonSet mid-rollout is not
    what was asked for. Such a node is not ready; its ``rollout`` lists each such
    operand's DaemonSet and pod, and where it is stuck is the lower of that and what it
    was stuck at before."""
    if not outdated:
        return
    index = node_check.index_operand_pods(pods, namespace)
    for name, info in per_node.items():
        stale = []
        for operand_name in info["ready_operands"]:
            running = [p for p in index.get(name, {}).get(operand_name, ()) if node_check.is_running(p)]
            if running and all(_name(p) in outdated for p in running):
                stale.append(dict(outdated[_name(running[0])], operand=operand_name, pod=_name(running[0])))
        if not stale:
            continue
        info["rollout"] = stale
        info["ready_operands"] = [o for o in info["ready_operands"] if o not in set(s["operand"] for s in stale)]
        first = stale[0]
        layer = om.operand(first["operand"]).layer
        if info["ready"] or _layer_rank(layer) < _layer_rank(info["layer"]):
            info.update(stuck_at=first["operand"], layer=layer, reason=first["reason"])
        info["ready"] = False


def _operator_pod_reasons(pods, namespace):
    key, value = om.OPERATOR_POD_SELECTOR
    return dict((_name(p), node_check.pod_status_reason(p)) for p in pods
                if _meta(p).get("namespace") == namespace and (_meta(p).get("labels") or {}).get(key) == value
                and not node_check.is_running(p))


def operand_nodes(nodes, pods, policy, names=None, explicit=False, daemonsets=None):
    """Per node, its operand chain and where it stands: ``{node: {"workload_config",
    "chain", "ready_operands", "ready", "stuck_at", "layer", "reason"}}`` and the GPU
    nodes left out (isolated, or tainted against the operands) with the reason."""
    nodes = ko.read_all("Node", nodes, "nodes")
    if explicit:
        wanted = set(names) if names else None
        nodes = [n for n in nodes if wanted is None or _name(n) in wanted]
    reports = node_check.evaluate(nodes, pods, policy, daemonsets)["nodes"]
    result, skipped = {}, []
    for name, report in reports.items():
        if not explicit:
            if not report["gpu_node"]:
                continue
            if report["untolerated_taints"]:
                skipped.append({"node": name, "reason": "taint %s is not tolerated by the operand DaemonSets"
                                % "; ".join(report["untolerated_taints"])})
                continue
            if not report["expected_operands"]:
                skipped.append({"node": name, "reason": "no operand is expected here (%s)" % ", ".join(
                    "%s: %s" % kv for kv in sorted(report["operand_states"].items())) or "no operand"})
                continue
        chain = report["expected_operands"]
        ready = [o for o in chain if o in report["running_operands"]]
        waiting = [o for o in chain if o not in report["running_operands"]]
        held = report.get("vgpu_config_state") in VGPU_NOT_DONE
        # Where the node is stuck: its lowest broken layer, not the first operand of the
        # chain that is not up. A rollout stuck at the operator-validator (it turns Ready
        # only once the device plugin advertises GPUs) has its cause below it.
        failures = report["layer_failures"]
        stuck = (failures[0] if failures and (waiting or held) else None) or (
            _not_ready_without_failure(report) if (waiting or held) else None)
        result[name] = {
            "workload_config": report["workload_config"], "chain": chain, "ready_operands": ready,
            "ready": stuck is None and bool(report["gpu_node"]), "stuck_at": stuck["operand"] if stuck else None,
            "layer": stuck["layer"] if stuck else None,
            "reason": stuck["reason"] if stuck else (None if report["gpu_node"] else "not a GPU node"),
        }
    return result, skipped


def _not_there(reason):
    """A wanted node's entry in the operands step when the node is not there to look at."""
    return {"workload_config": None, "chain": [], "ready_operands": [], "ready": False,
            "stuck_at": None, "layer": LAYER_NODE, "reason": reason}


def chart_images(images):
    """The image references a delivered chart runs, from gpu_operator_chart's image plan (entries
    with ``source`` and, on a mirrored site, ``mirror``: what the values name) or plain strings."""
    refs = set()
    for entry in images or ():
        if isinstance(entry, dict):
            ref = entry.get("mirror") or entry.get("source")
        else:
            ref = entry
        if ref:
            refs.add(str(ref))
    return refs


def _image_name(ref):
    """The image's own name: the last path part without tag or digest (k8s-device-plugin)."""
    return ref.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


def foreign_images(daemonset, images):
    """The images of a DaemonSet's pod template that are of a name ``images`` has, yet none of
    them; a tag may carry a suffix the operator adds (the driver's OS: driver:580.126.20-ubuntu22.04).
    An image of a name the plan does not have is not judged: the plan leaves out what it cannot
    name (the driver's per-OS tags without the nodes' OS), and no wait may hang on that."""
    names = set(_image_name(known) for known in images)
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    used = [c.get("image") or "" for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
    return sorted(set(i for i in used if _image_name(i) in names
                      and not any(i == known or i.startswith(known + "-") for known in images)))


def templates_of_another_chart(daemonsets, images):
    """{operand DaemonSet: why its template is not the delivered chart's} when ``images`` are
    given: after a chart upgrade the new operator rewrites every operand DaemonSet at its first
    reconcile; until then the old templates are rolled out and their pods Ready, and no
    status of the operator's says which change it has seen."""
    if not images:
        return {}
    stale = {}
    for ds in daemonsets:
        name = _name(ds)
        if om.operand_for_daemonset(name) is None or not (ds.get("status") or {}).get("desiredNumberScheduled"):
            # Not an operand, or no node it runs on (a node type the plan was not made for).
            continue
        foreign = foreign_images(ds, images)
        if foreign:
            stale[name] = "its template runs %s, not of the chart delivered (the operator has not rewritten it)" % (
                ", ".join(foreign))
    return stale


def operand_images(pods, node_names):
    """{node: {operand: image}} of the operand pods Running and Ready on ``node_names``: the
    image of each pod's first container (the operand's own; init containers are validators).
    What runs where after a rollout, for the upgrade's report; read from the wait's cache."""
    wanted = set(node_names)
    images = dict((name, {}) for name in wanted)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        operand_ = om.operand_of_pod(_labels(pod))
        containers = (pod.get("spec") or {}).get("containers") or ()
        if node in wanted and operand_ and containers and node_check.is_running(pod):
            images[node][operand_.name] = containers[0].get("image")
    return images


def operand_readiness_condition(namespace, require_reconciled=False, names=None, explicit=False, allow_no_nodes=False,
                                images=None):
    """The fixed order: operator Deployment available, ClusterPolicy present (Ready and
    Reconciled when required), then every selected node's operand chain Running and
    Ready. Later steps are evaluated only when the earlier ones hold.

    The operands step holds only on the current pods of each operand DaemonSet: a pod of
    an old template (``daemonset_rollouts``) does not count on its node, and with the
    default selection every operand DaemonSet must be rolled out (kubernetes.core's rule,
    ``daemonset_rollout_problem``); with an explicit selection its generation observed,
    since its counts take in nodes outside the selection. A node selected at any point of
    the wait stays wanted (``lost_nodes``). With ``images`` (chart_images), an operand
    DaemonSet whose template names another image is not rolled out either
    (``templates_of_another_chart``)."""
    # Every node selected so far in this wait (see allocatable_condition).
    remembered = set()
    images = chart_images(images)

    def condition(cache):
        pods = objects(cache, "pods")
        deployments = objects(cache, "deployments")
        steps = dict((s, {"done": False, "message": "waiting for %s" % STEPS[i - 1] if i else None})
                     for i, s in enumerate(STEPS))
        detail = {"step": STEP_OPERATOR, "steps": steps, "nodes": {}, "skipped": [], "operator_pods": {}, "lost": {},
                  "daemonsets": {}}

        ok, message = deployment_available(deployments[0] if deployments else None)
        steps[STEP_OPERATOR] = {"done": ok, "message": "Deployment %s/%s: %s" % (namespace, om.OPERATOR_DEPLOYMENT, message)}
        if not ok:
            detail["operator_pods"] = _operator_pod_reasons(pods, namespace)
            return False, detail

        detail["step"] = STEP_CLUSTER_POLICY
        clusterpolicies = objects(cache, "clusterpolicies")
        ok, message = clusterpolicy_ready(active_clusterpolicy(clusterpolicies), require_reconciled)
        steps[STEP_CLUSTER_POLICY] = {"done": ok, "message": message}
        if not ok:
            return False, detail

        detail["step"] = STEP_OPERANDS
        policy = node_check.policy_from_inputs(clusterpolicies, {"namespace": namespace})
        nodes, daemonsets = objects(cache, "nodes"), objects(cache, "daemonsets")
        per_node, skipped = operand_nodes(nodes, pods, policy, names, explicit, daemonsets)
        outdated, owned = daemonset_rollouts(daemonsets, pods, namespace)
        hold_outdated(per_node, pods, namespace, outdated)
        remembered.update(per_node)
        lost = lost_nodes(remembered, per_node, skipped, nodes, explicit)
        for name, why in lost.items():
            per_node[name] = _not_there(why)
        if explicit and names:
            for name in sorted(set(names) - set(per_node)):
                per_node[name] = _not_there("the node is not in the cluster")
        unsettled = unsettled_daemonsets(daemonsets, owned, namespace, counts=not explicit)
        unsettled.update(templates_of_another_chart(daemonsets, images))
        # A node it still waits for is not "left out".
        skipped = [s for s in skipped if s["node"] not in lost]
        detail.update(nodes=per_node, skipped=skipped, lost=lost, daemonsets=unsettled)
        waiting = sorted(n for n, info in per_node.items() if not info["ready"])
        if not per_node:
            ok = allow_no_nodes
            message = "no GPU node selected"
        else:
            ok = not waiting and not unsettled
            message = "%d of %d nodes run their operand chain" % (len(per_node) - len(waiting), len(per_node))
        if unsettled:
            message += "; DaemonSets not rolled out: %s" % "; ".join("%s: %s" % kv for kv in sorted(unsettled.items()))
        steps[STEP_OPERANDS] = {"done": ok, "message": message}
        if ok:
            detail["step"] = None
        return ok, detail

    return condition


class StepTimes(object):
    """A progress callback for the engine: when each step and each node was first seen
    done. ``durations()``: the time each step took after the one before it."""

    def __init__(self):
        self.step_done = {}
        self.node_done = {}

    def __call__(self, detail, elapsed):
        elapsed = round(elapsed, 3)
        for step, info in detail["steps"].items():
            if info["done"]:
                self.step_done.setdefault(step, elapsed)
        for name, info in detail["nodes"].items():
            if info["ready"]:
                self.node_done.setdefault(name, elapsed)

    def durations(self):
        result, before = [], 0.0
        for step in STEPS:
            done = self.step_done.get(step)
            result.append({"step": step, "done_after": done,
                           "duration": None if done is None else round(max(done - before, 0.0), 3)})
            if done is not None:
                before = done
        return result


# ---------------------------------------------------------------- the CUDA sample

# A multi-arch index (linux/amd64, linux/arm64): this tag is reported printing "Test PASSED" on a GB10
# (DGX Spark, driver 580, sm_121) and on GH200, where the older nbody-cuda11.7.1-ubuntu18.04 fails as the
# wrong architecture. A mirror copies the whole index (skopeo copy --all).
SAMPLE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"
SAMPLE_CONTAINER = "cuda-vectoradd"
SAMPLE_LABEL_NAME = "app.kubernetes.io/name"
SAMPLE_LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
SAMPLE_LABEL_RUN = "gpuplatform.rke2/cuda-sample-run"
# On the pods of a run with keep_pods: left on purpose, and a later run may replace them
# once they ended. A pod of another run without it is never touched (it may be running).
SAMPLE_LABEL_KEEP = "gpuplatform.rke2/cuda-sample-keep"
MANAGED_BY = "gpuplatform.rke2"
# Waiting reasons that no retry by the kubelet mends: the sample has failed. The kubelet
# retries ImagePullBackOff (a registry mirror not up yet) and CreateContainerError (the
# runtime briefly unavailable while the toolkit restarts containerd): those keep the wait
# going, and at its deadline the pod's reason is reported.
UNRECOVERABLE_WAITING = ("InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError")
_NAME_RE = re.compile(r"[^a-z0-9-]+")


def sample_pod_name(prefix, node=None):
    """``cuda-vectoradd`` or ``cuda-vectoradd-<node>``, an RFC 1123 name of at most 63."""
    name = prefix if node is None else "%s-%s" % (prefix, _NAME_RE.sub("-", node.lower()))
    return name[:63].rstrip("-")


def sample_pod(name, namespace, run_id, image=SAMPLE_IMAGE, resource=om.CONTAINER_RESOURCE, count_=1,
               node=None, runtime_class_name=None, tolerations=(), keep=False):
    """NVIDIA's vectoradd pod, unprivileged. ``restartPolicy: Never`` where the
    documented pod says OnFailure: a failing sample must end Failed, not restart
    forever. A node is pinned by node affinity, not nodeName, so the scheduler still
    decides and says why when it cannot place the pod."""
    spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": [dict(t) for t in om.DEFAULT_OPERAND_TOLERATIONS] + [dict(t) for t in tolerations or ()],
        "containers": [{
            "name": SAMPLE_CONTAINER,
            "image": image,
            # Quantities are strings in the API; the client rejects a number here.
            "resources": {"limits": {resource: str(count_)}},
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]}},
        }],
    }
    if runtime_class_name:
        spec["runtimeClassName"] = runtime_class_name
    if node:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    labels = {SAMPLE_LABEL_NAME: "cuda-sample", SAMPLE_LABEL_MANAGED_BY: MANAGED_BY, SAMPLE_LABEL_RUN: run_id}
    if keep:
        labels[SAMPLE_LABEL_KEEP] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def is_sample_pod(pod):
    labels = _meta(pod).get("labels") or {}
    return labels.get(SAMPLE_LABEL_NAME) == "cuda-sample" and labels.get(SAMPLE_LABEL_MANAGED_BY) == MANAGED_BY


def sample_run(pod):
    """The run id a sample pod is labelled with (None when it has none)."""
    return (_meta(pod).get("labels") or {}).get(SAMPLE_LABEL_RUN)


def sample_replaceable(pod):
    """A sample pod another run may delete to take its name: one kept on purpose
    (keep_pods) that has ended. Any other pod of another run may still be in use by it."""
    labels = _meta(pod).get("labels") or {}
    return (is_sample_pod(pod) and labels.get(SAMPLE_LABEL_KEEP) == "true"
            and (pod.get("status") or {}).get("phase") in TERMINAL_PHASES)


def sample_nodes(nodes, resource, count_, names=None):
    """(nodes to run a sample on, skipped): Ready, schedulable nodes with at least
    ``count_`` of ``resource`` allocatable, limited to ``names`` when given."""
    chosen, skipped = [], []
    wanted = set(names) if names else None
    for node in sorted(ko.read_all("Node", nodes, "nodes"), key=_name):
        name = _name(node)
        if wanted is not None and name not in wanted:
            continue
        have = count((node.get("status") or {}).get("allocatable"), resource)
        if have < count_:
            if wanted is not None:
                skipped.append({"node": name, "reason": "allocatable %s: %d" % (resource, have)})
            continue
        ready, why = node_ready(node)
        if not ready:
            skipped.append({"node": name, "reason": why})
        elif (node.get("spec") or {}).get("unschedulable"):
            skipped.append({"node": name, "reason": "cordoned"})
        else:
            chosen.append(name)
    return chosen, skipped


def _terminated(pod):
    for cs in ((pod.get("status") or {}).get("containerStatuses") or ()):
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated:
            return terminated
    return None


TERMINAL_PHASES = ("Succeeded", "Failed")


def sample_exit_code(pod):
    """The exit code the sample's container ended with, None when no end is reported."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or ():
        if cs.get("name") == SAMPLE_CONTAINER:
            return ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
    return None


def sample_state(pod):
    """(finished, reason) of a sample pod: finished when it ended or cannot start."""
    if pod is None:
        return True, "the pod was deleted"
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase in TERMINAL_PHASES:
        terminated = _terminated(pod) or {}
        reason = terminated.get("reason") or status.get("reason")
        if terminated.get("exitCode") not in (None, 0):
            reason = "%s, exit code %s" % (reason or "Error", terminated["exitCode"])
        return True, reason or phase
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in UNRECOVERABLE_WAITING:
            return True, "%s: %s" % (waiting["reason"], waiting.get("message") or "")
    return False, node_check.pod_status_reason(pod)


def sample_condition(namespace, pod_names):
    """Every sample pod finished (Succeeded, Failed, or stuck for good)."""
    keys = ["%s/%s" % (namespace, n) for n in pod_names]
    # Each pod's state, kept while the cache holds the same object for it: an event
    # replaces one pod's object, so an evaluation reads again only the pods that changed.
    # (Reading every pod on every event made the wait for 1,000 samples quadratic.)
    # Holding the object keeps its identity from being reused.
    # A pod that ended keeps its end when it is deleted afterwards (cuda_sample deletes each
    # sample once it has its log, while the others still run): a terminal phase is final.
    known = {}

    def state_of(key, pod):
        seen = known.get(key)
        if seen is not None and (seen[0] is pod or (pod is None and seen[1]["phase"] in TERMINAL_PHASES)):
            return seen[1]
        if pod is not None:
            ko.read("Pod", pod)
        finished, reason = sample_state(pod)
        state = {"finished": finished, "reason": reason,
                 "phase": ((pod or {}).get("status") or {}).get("phase"),
                 "node": ((pod or {}).get("spec") or {}).get("nodeName"),
                 "exit_code": sample_exit_code(pod)}
        known[key] = (pod, state)
        return state

    def condition(cache):
        pods = cache.get("pods") or {}
        states = dict((name, state_of(key, pods.get(key))) for key, name in zip(keys, pod_names))
        return all(s["finished"] for s in states.values()), {"pods": states}

    return condition


def log_tail(text, lines=10):
    return [line for line in (text or "").splitlines() if line.strip()][-lines:]


def sample_verdict(phase, log, pattern, exit_code, node=None, planned_node=None):
    """(passed, reason): the pod ran on ``planned_node`` (when one was planned), ended
    Succeeded, its container with exit code 0, and ``pattern`` (a regular expression) is
    in the log. A per-node sample that ran elsewhere says nothing of its own node, and a
    phase or a log without the exit code is not the sample's own word that it passed."""
    if planned_node is not None and node != planned_node:
        return False, "ran on %s, not on %s, the node it was for" % (node or "no node", planned_node)
    if phase != "Succeeded":
        return False, "phase %s" % phase
    if exit_code != 0:
        return False, "exit code %s" % ("not reported" if exit_code is None else exit_code)
    if log is None:
        return False, "log not readable"
    if not re.search(pattern, log, re.MULTILINE):
        return False, "log lacks %r" % pattern
    return True, None


# ---------------------------------------------------------------- HelmChart install

HELMCHART_LABEL = "helmcharts.helm.cattle.io/chart"
HELM_CONTAINER = "helm"


def _timestamp(value):
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError):
        return None


def spec_changed_at(obj):
    """When ``obj``'s spec last changed, from its managedFields (the newest entry, not of
    the status subresource, that owns spec fields); None when unknown."""
    times = []
    for entry in _meta(obj).get("managedFields") or ():
        if entry.get("subresource") == "status":
            continue
        if "f:spec" in (entry.get("fieldsV1") or {}):
            stamp = _timestamp(entry.get("time"))
            if stamp:
                times.append(stamp)
    return max(times) if times else None


def job_predates_spec(job, chart):
    """Why ``job`` cannot be the install of ``chart``'s current spec, or None: it was
    created before the chart's newest spec entry in ``managedFields``.

    Why times, which each API server of an HA control plane stamps with its own clock,
    and not the storage's revisions: neither object's resourceVersion dates the change.
    helm-controller writes the chart's status after it creates the Job, so an installed
    chart's revision is above its own Job's (seen on the lab's real helm-controller), and
    a Job's revision moves with every status write, so an old Job that completes after the
    change looks newer than it. A suspended Job (helm-controller creates each Job
    suspended, and suspends the old one before it replaces it) is never done either way
    (helmchart_condition)."""
    changed = spec_changed_at(chart)
    created = _timestamp(_meta(job).get("creationTimestamp"))
    if changed and created and created < changed:
        return "Job %s (created %s) predates the HelmChart's last change (%s)" % (
            _name(job), _meta(job).get("creationTimestamp"), changed.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return None


def job_attempt_failure(pod):
    """(container, previous, reason) of a failed attempt in a Job pod, or None. The
    install Job restarts its container in place (restartPolicy OnFailure): a failure
    shows as a terminated container or one waiting in CrashLoopBackOff."""
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        terminated = _terminated(pod) or {}
        return HELM_CONTAINER, False, "pod Failed: %s" % (terminated.get("reason") or status.get("reason") or "Error")
    for cs in status.get("containerStatuses") or ():
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        if terminated and terminated.get("exitCode") not in (None, 0):
            return cs.get("name"), False, "%s, exit code %s" % (terminated.get("reason") or "Error", terminated["exitCode"])
        last = (cs.get("lastState") or {}).get("terminated")
        if last and last.get("exitCode") not in (None, 0):
            return cs.get("name"), True, "%s, exit code %s (restarted %s times)" % (
                last.get("reason") or "Error", last["exitCode"], cs.get("restartCount") or 0)
        waiting = state.get("waiting") or {}
        if waiting.get("reason") == "CrashLoopBackOff":
            return cs.get("name"), True, "CrashLoopBackOff"
    return None


def release_has_chart(chart, releases, name):
    """Whether helm's current revision of release ``name`` (its record Secrets, as dicts) is
    deployed with the chart's version and values; False when unknown or unreadable."""
    spec = chart.get("spec") or {}
    try:
        values = manifest_yaml.load_mapping(spec.get("valuesContent") or "{}") if spec.get("valuesContent") else {}
        return helm_release.deployed_as(helm_release.history(releases, name), spec.get("version"), values)
    except ValueError:
        return False


def _release_from(releases, name, config_hash):
    try:
        return helm_release.deployed_from(helm_release.history(releases, name), config_hash)
    except ValueError:
        return False


def helmchart_condition(name, namespace, release_namespace=None):
    """helm-controller installed the HelmChart: its install Job, created after the
    chart's last spec change, completed. A Failed condition on the chart or a failed
    attempt of the Job ends the wait at once (``detail["failed"]``).

    With ``release_namespace`` (the chart's targetNamespace, whose helm release records
    are cached as ``releases``), a chart whose Job predates its change is also installed
    when helm's deployed revision already carries the chart's version and values:
    helm-controller then runs no new Job (after a failed upgrade is resumed onto the
    revision that the chart now asks for again, for one)."""
    def condition(cache):
        chart = (cache.get("helmcharts") or {}).get("%s/%s" % (namespace, name))
        detail = {"failed": False, "job": None, "pod": None, "container": None, "previous": False,
                  "message": None, "job_name": None}
        if chart is None:
            detail["message"] = "HelmChart %s/%s not found" % (namespace, name)
            return False, detail
        ko.read("HelmChart", chart)
        if _meta(chart).get("deletionTimestamp"):
            detail.update(failed=True, message="HelmChart %s/%s is being deleted (since %s)" % (
                namespace, name, _meta(chart)["deletionTimestamp"]))
            return True, detail
        failed = _condition(chart, "Failed")
        if failed and failed.get("status") == "True":
            detail.update(failed=True, message="HelmChart %s/%s Failed: %s%s" % (
                namespace, name, failed.get("reason") or "", ": " + failed["message"] if failed.get("message") else ""))
            return True, detail
        job_name = (chart.get("status") or {}).get("jobName")
        if not job_name:
            detail["message"] = "helm-controller has not taken up the HelmChart yet (no status.jobName)"
            return False, detail
        detail["job_name"] = job_name
        job = (cache.get("jobs") or {}).get("%s/%s" % (namespace, job_name))
        if job is None:
            detail["message"] = "helm-controller has not created Job %s yet" % job_name
            return False, detail
        ko.read("Job", job)
        detail["job"] = job_name
        stale = job_predates_spec(job, chart)
        if stale and release_namespace and release_has_chart(chart, _cached(cache, "releases"), name):
            detail["message"] = ("the deployed release %s/%s already has the HelmChart's version and values (%s): "
                                 "helm-controller has nothing to run" % (release_namespace, name, stale))
            return True, detail
        if stale:
            detail["message"] = "%s: waiting for helm-controller to replace it" % stale
            return False, detail
        job_spec = job.get("spec")
        if isinstance(job_spec, dict) and job_spec.get("suspend") is True:
            # helm-controller creates each Job suspended, and suspends the old one before
            # it replaces it: that write is after the chart's change, the run is not.
            detail["message"] = "Job %s is suspended: helm-controller has not started it, or is replacing it" % job_name
            return False, detail
        complete = _condition(job, "Complete")
        if (complete and complete.get("status") == "True") or ((job.get("status") or {}).get("succeeded") or 0) >= 1:
            config_hash = helm_release.job_config_hash(job)
            if release_namespace and config_hash and not _release_from(_cached(cache, "releases"), name, config_hash):
                # The entry script also ends 0 without running helm when the release's revision
                # is not the one helm-controller expected (EXPECTED_RELEASE_REVISION: a failed
                # record removed after the Job was made); helm-controller then finds the release
                # without the Job's config hash and runs the Job again.
                detail["message"] = ("Job %s complete, but helm's current revision of %s/%s is not a deployed one "
                                     "made from it (config hash %s): helm-controller runs it again"
                                     % (job_name, release_namespace, name, config_hash))
                return False, detail
            detail["message"] = "Job %s complete" % job_name
            return True, detail
        uid = _meta(job).get("uid")
        job_pods = [p for p in objects(cache, "pods")
                    if any(ref.get("uid") == uid for ref in _meta(p).get("ownerReferences") or ())]
        job_pods.sort(key=lambda p: _meta(p).get("creationTimestamp") or "", reverse=True)
        for pod in job_pods:
            failure = job_attempt_failure(pod)
            if failure:
                container, previous, reason = failure
                detail.update(failed=True, pod=_name(pod), container=container, previous=previous,
                              message="Job %s: pod %s: %s" % (job_name, _name(pod), reason))
                return True, detail
        job_failed = _condition(job, "Failed") or {}
        attempts = (job.get("status") or {}).get("failed") or 0
        if job_failed.get("status") == "True" or attempts >= 1:
            why = job_failed.get("message") or "%s failed attempts" % attempts
            detail.update(failed=True, pod=_name(job_pods[0]) if job_pods else None, container=HELM_CONTAINER,
                          message="Job %s failed: %s" % (job_name, why))
            return True, detail
        if job_pods:
            pod = job_pods[0]
            state = "Running" if node_check.is_running(pod) else node_check.pod_status_reason(pod)
            detail["message"] = "Job %s running: pod %s %s" % (job_name, _name(pod), state)
        else:
            detail["message"] = "Job %s has no pod yet" % job_name
        return False, detail

    return condition
