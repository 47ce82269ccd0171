# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-node check of the GPU Operator's operands: does every node run every operand it
should, is a node's chain broken, does its workload label agree with what it advertises.

Pure functions over plain dicts as the API returns them (camelCase keys: kubectl JSON or
``ApiClient.sanitize_for_serialization``). What a node *should* run comes from its labels
and the policy (``operand_model``), never from DaemonSet status counts: those count only
the nodes a DaemonSet already targets, so a tainted or freshly joined node would drop out
of them instead of showing up as missing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import copy
import gc
import json

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_gates as gates
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

try:
    import yaml

    HAS_YAML = True
    _YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    HAS_YAML = False

ERROR = "error"
WARNING = "warning"

MISSING_OPERAND = "missing-operand"
ORDER_VIOLATION = "order-violation"
UNEXPECTED_OPERAND = "unexpected-operand"
RESOURCE_MISMATCH = "resource-mismatch"
MIXED_WORKLOAD = "mixed-workload"
LABEL_IGNORED = "label-ignored"
UNKNOWN_WORKLOAD_CONFIG = "unknown-workload-config"
UNTOLERATED_TAINT = "untolerated-taint"
OPERAND_PAUSED = "operand-paused"
VGPU_CONFIG = "vgpu-config"
CODES = (UNKNOWN_WORKLOAD_CONFIG, LABEL_IGNORED, UNTOLERATED_TAINT, OPERAND_PAUSED, MISSING_OPERAND, ORDER_VIOLATION,
         UNEXPECTED_OPERAND, VGPU_CONFIG, RESOURCE_MISMATCH, MIXED_WORKLOAD)

# Operand states beyond the model's: "paused" (a deploy label at one of gates.PAUSE_VALUES)
# counts as expected: the operand belongs there and comes back by itself.
PAUSED = "paused"
_BELONGS = ("expected", PAUSED)
# Written by the vGPU device manager: pending, success or failed.
VGPU_CONFIG_STATE_LABEL = om.VGPU_CONFIG_STATE_LABEL

_SNAPSHOT_KEYS = {"Node": "nodes", "Pod": "pods", "DaemonSet": "daemonsets", "ClusterPolicy": "clusterpolicies"}


def _meta(obj):
    return obj.get("metadata") or {}


# ---------------------------------------------------------------- input

@contextlib.contextmanager
def paused_gc():
    """Suspend the cyclic garbage collector, restoring its state afterwards.

    A cluster's JSON is millions of small acyclic objects: refcounting frees them, but
    every collection while they are alive walks them, which triples the time to read
    and check a 5,000-node snapshot (docs/benchmarks.md). Drop the snapshot inside the
    block: the first collection after it walks whatever was allocated meanwhile."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _not_json_or_yaml(source, line, why):
    return ValueError("%s: not JSON or YAML: line %d: %s" % (source, line, " ".join(str(why).split())))


def parse_documents(text, source="<snapshot>"):
    """The documents in one snapshot file's text: JSON (what ``kubectl -o json`` prints,
    parsed fast) or YAML, one or more documents. Text that is neither, or a document
    that is no mapping (a stray line of text reads as a YAML string), raises ValueError
    ``<source>: not JSON or YAML: line N: ...``."""
    json_error = None
    try:
        documents = [json.loads(text)]
    except ValueError as exc:
        json_error = exc
    if json_error is not None:
        if not HAS_YAML:
            raise ValueError("%s is not JSON, and PyYAML is not installed to read it as YAML" % source)
        try:
            documents = [doc for doc in yaml.load_all(text, Loader=_YAML_LOADER) if doc is not None]
        except yaml.YAMLError as exc:
            if text.lstrip()[:1] in ("{", "[") and hasattr(json_error, "lineno"):
                # Meant as JSON: its parser's complaint is the one to read.
                raise _not_json_or_yaml(source, json_error.lineno, json_error.msg)
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            raise _not_json_or_yaml(source, mark.line + 1 if mark else 1, getattr(exc, "problem", None) or exc)
    for index, document in enumerate(documents):
        if document is not None and not isinstance(document, (dict, list)):
            raise _not_json_or_yaml(source, _document_line(text, index), "%s, not a Kubernetes object or List"
                                    % ko.describe(document))
    return documents


def _document_line(text, index):
    """The line a YAML document starts on (1 for JSON, or when it cannot tell)."""
    try:
        nodes = [node for node in yaml.compose_all(text, Loader=_YAML_LOADER) if node is not None]
        return nodes[index].start_mark.line + 1
    except (yaml.YAMLError, IndexError, NameError):
        return 1


def split_snapshot(documents):
    """Nodes, pods, DaemonSets and ClusterPolicies out of parsed documents, each a v1
    ``List`` (``kubectl get nodes,pods,daemonsets -A -o json``), a typed list
    (``NodeList``) or a single object. Other kinds are skipped; a document that is no
    Kubernetes object raises ValueError naming it. The objects are read (k8s_objects)
    where the check uses them."""
    result = dict((key, []) for key in ("nodes", "pods", "daemonsets", "clusterpolicies"))
    for index, document in enumerate(documents):
        _collect(document, None, "document %d" % (index + 1), result)
    return result


def _collect(obj, implied_kind, where, result):
    if obj is None:
        return
    if not isinstance(obj, dict):
        raise ko.MalformedObject("%s is %s, not a Kubernetes object or List" % (where, ko.describe(obj)))
    kind = obj.get("kind") or implied_kind
    if not kind:
        raise ko.MalformedObject("%s has no kind" % where)
    if not isinstance(kind, str):
        raise ko.MalformedObject("%s: kind is %s, expected a string" % (where, ko.describe(kind)))
    if kind.endswith("List"):
        items = obj.get("items")
        if items is not None and not isinstance(items, list):
            raise ko.MalformedObject("%s: items is %s, expected a list" % (where, ko.describe(items)))
        item_kind = kind[:-len("List")] or None
        for index, item in enumerate(items or ()):
            _collect(item, item_kind, "%s items[%d]" % (where, index), result)
        return
    key = _SNAPSHOT_KEYS.get(kind)
    if key:
        result[key].append(obj)


def _active_clusterpolicy(clusterpolicies):
    """The ClusterPolicy the operator acts on. It reconciles the first one it sees and
    marks every other ``status.state: ignored``; before it has, take the oldest."""
    candidates = sorted(clusterpolicies or (), key=lambda cp: (
        (cp.get("status") or {}).get("state") == "ignored",
        _meta(cp).get("creationTimestamp") or "",
        _meta(cp).get("name") or "",
    ))
    return candidates[0] if candidates else None


def _operand_daemonset_namespace(daemonsets):
    namespaces = set(_meta(ds).get("namespace") for ds in daemonsets or ()
                     if om.operand_for_daemonset(_meta(ds).get("name")))
    namespaces.discard(None)
    return namespaces.pop() if len(namespaces) == 1 else None


def policy_from_inputs(clusterpolicies, overrides, daemonsets=None):
    """``operand_model.policy()`` from the ClusterPolicy in the input (if any) with the
    explicit options in ``overrides`` on top (None: not given).

    The operand namespace, when not given, is the ClusterPolicy's ``status.namespace``,
    else the one namespace holding operand DaemonSets, else the chart default."""
    overrides = dict(overrides or {})
    clusterpolicies = ko.read_all("ClusterPolicy", clusterpolicies, "clusterpolicies")
    daemonsets = ko.read_all("DaemonSet", daemonsets, "daemonsets")
    active = _active_clusterpolicy(clusterpolicies)
    spec = copy.deepcopy((active or {}).get("spec") or {})
    if overrides.get("namespace") is None:
        overrides["namespace"] = (((active or {}).get("status") or {}).get("namespace")
                                  or _operand_daemonset_namespace(daemonsets))
    sandbox = overrides.get("sandbox_workloads_enabled")
    if sandbox is not None:
        # Through the spec, not as an override: the sandbox operands' enabled flags
        # follow sandboxWorkloads.enabled, and operand_model.policy() applies overrides
        # after deriving them.
        spec["sandboxWorkloads"] = dict(spec.get("sandboxWorkloads") or {}, enabled=bool(sandbox))
    return om.policy(overrides, spec)


# ---------------------------------------------------------------- pods

def _daemonset_target(pod):
    """The node a DaemonSet pod is pinned to before it is scheduled: the DaemonSet
    controller sets a ``metadata.name`` matchFields term rather than ``nodeName``."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or ():
        for field in term.get("matchFields") or ():
            values = field.get("values") or ()
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
                return values[0]
    return None


def pod_node(pod):
    return (pod.get("spec") or {}).get("nodeName") or _daemonset_target(pod)


def is_terminating(pod):
    return bool(_meta(pod).get("deletionTimestamp"))


def is_running(pod):
    """Running in the check's sense: phase Running, every container ready, not terminating."""
    if is_terminating(pod):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    statuses = status.get("containerStatuses") or ()
    containers = (pod.get("spec") or {}).get("containers") or ()
    if not statuses or len(statuses) < len(containers):
        return False
    return all(cs.get("ready") for cs in statuses)


def is_present(pod):
    """A pod that is or will be running: not terminating, not finished."""
    return not is_terminating(pod) and (pod.get("status") or {}).get("phase", "Pending") in ("Pending", "Running")


_IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def _state_reason(state, image=None):
    waiting = state.get("waiting")
    if waiting and waiting.get("reason"):
        # An air-gapped node's first question: which image could it not pull?
        if waiting["reason"] in _IMAGE_REASONS and image:
            return "%s: %s" % (waiting["reason"], image)
        return waiting["reason"]
    terminated = state.get("terminated")
    if terminated:
        return terminated.get("reason") or "ExitCode:%s" % terminated.get("exitCode")
    return None


def pod_status_reason(pod):
    """Why a pod is not Running and Ready, in kubectl's words: ``Terminating``,
    ``Init:CrashLoopBackOff``, ``CrashLoopBackOff``, ``Pending: 0/6 nodes are available: ...``."""
    if is_terminating(pod):
        return "Terminating"
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase in ("Succeeded", "Failed"):
        return phase + (": " + status["reason"] if status.get("reason") else "")
    init_statuses = status.get("initContainerStatuses") or ()
    for index, cs in enumerate(init_statuses):
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        if terminated and terminated.get("exitCode") == 0:
            continue
        reason = _state_reason(state, cs.get("image"))
        if reason and reason != "PodInitializing":
            return "Init:" + reason
        return "Init:%d/%d" % (index, len(init_statuses))
    for cs in status.get("containerStatuses") or ():
        reason = _state_reason(cs.get("state") or {}, cs.get("image"))
        if reason:
            return reason
    if phase == "Pending":
        for condition in status.get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return "Pending: " + (condition.get("message") or condition.get("reason") or "not scheduled")
        return "Pending"
    return "Running, not ready"


def index_operand_pods(pods, namespace):
    """{node: {operand: [pods]}} for the operand pods in ``namespace``; one pass. The
    pods of that namespace are read (k8s_objects); the others are not looked at."""
    index = {}
    for pod in ko.read_namespaced("Pod", pods, namespace, "pods"):
        meta = _meta(pod)
        operand_ = om.operand_of_pod(meta.get("labels"))
        if operand_ is None:
            continue
        node = pod_node(pod)
        if node:
            index.setdefault(node, {}).setdefault(operand_.name, []).append(pod)
    return index


def _init_step(pod):
    """(name, state) of the init container a pod is in, or None once they all ended."""
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or ():
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        if terminated and terminated.get("exitCode") == 0:
            continue
        return cs.get("name"), state
    return None


def _init_detail(operand_name, step, others):
    """Why an operand's pod sits in init container ``step``: a gate it waits for (naming
    the status file and the validator that writes it, and how that one stands when it is
    not running), or a validator's own step (naming the operand it waits on, lower down)."""
    name, state = step
    for gate in gates.GATES.get(operand_name, ()):
        if gate.init_container == name and "running" in state:
            detail = "%s waits for %s/%s, which %s writes" % (
                name, gates.VALIDATIONS_DIR, gate.status_file, gate.writer)
            if gate.writer in others:
                detail += " (%s: %s)" % (gate.writer, others[gate.writer])
            return detail
    for init_container, waits_on, what in gates.VALIDATOR_STEPS.get(operand_name, ()):
        if init_container == name:
            detail = "%s %s" % (name, what)
            if "running" in state and waits_on in others:
                detail += " (%s: %s)" % (waits_on, others[waits_on])
            return detail
    return name


def _describe(operand_name, pods, others=None):
    """One reason for an operand whose pods on a node are not Running and Ready; a
    terminating pod speaks only when no other pod is there. A pod in its init containers
    names the one it is in, and what that one waits for: a validator's status file
    (``others``: the reasons of the node's other operands that are not running)."""
    live = [p for p in pods if not is_terminating(p)]
    pod = (live or pods)[0]
    reason = pod_status_reason(pod)
    step = _init_step(pod) if reason.startswith("Init:") else None
    if step and step[0]:
        reason = "%s: %s" % (reason, _init_detail(operand_name, step, others or {}))
    return reason


# ---------------------------------------------------------------- evaluation

def _operand_tolerations(daemonsets, namespace):
    """Tolerations of each operand's DaemonSet in the input; the operator renders the
    ClusterPolicy's ``daemonsets.tolerations`` into them."""
    result = {}
    for ds in daemonsets or ():
        meta = _meta(ds)
        operand_ = om.operand_for_daemonset(meta.get("name"))
        if operand_ is None or meta.get("namespace") != namespace:
            continue
        template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        result[operand_.name] = template.get("tolerations") or []
    return result


def _taint_text(taint):
    value = "=" + taint["value"] if taint.get("value") else ""
    return "%s%s:%s" % (taint.get("key"), value, taint.get("effect"))


def _nearest_expected(name, states):
    """The dependencies ``name`` waits for on this node: its direct ones, and through any
    dependency the node does not expect (host-provided, switched off, n/a) the ones
    behind it. A paused dependency is not waited for: it is away for a while, by design."""
    result = []
    for dep in om.operand(name).depends_on:
        if states.get(dep) == "expected":
            result.append(dep)
        elif states.get(dep) != PAUSED:
            result.extend(d for d in _nearest_expected(dep, states) if d not in result)
    return result


def _operand_states(labels, policy_, config):
    """{operand: state} on one GPU node: the model's states, and ``paused`` where the
    model reads a pause value as switched off (or as host-provided, for the toolkit)."""
    states = {}
    for o in om.OPERANDS:
        state = om.operand_state_on_node(o, labels, policy_, config)
        if (state in ("off", "host") and policy_["operands_enabled"].get(o.name)
                and labels.get(om.deploy_label(o.name)) in gates.PAUSE_VALUES):
            state = PAUSED
        states[o.name] = state
    return states


def _why_not_expected(operand_, state, config, labels):
    label = om.deploy_label(operand_.name)
    if state == "n/a":
        if config not in operand_.workload_configs:
            return "the node's workload config %s does not run it" % config
        return "the node lacks %s=true" % operand_.capability_label
    if state == "isolated":
        return "the node is isolated (%s=%s)" % (om.OPERANDS_LABEL, om.DEPLOY_FALSE)
    if state == "disabled" or labels.get(label) in (None, om.DEPLOY_TRUE):
        return "%s.enabled is false in the policy" % operand_.values_key
    return "%s=%s switches it off here" % (label, labels[label])


def _absent_label_reason(name, labels):
    """Why an expected operand whose deploy label is absent gets no pod, and the fix."""
    label = om.deploy_label(name)
    if labels.get(om.GPU_PRESENT_LABEL) != "true":
        return ("%s is absent: the operator has not labelled this GPU node yet (no %s=true); it does on its next "
                "reconcile, so check that the gpu-operator pod runs" % (label, om.GPU_PRESENT_LABEL))
    if name == "mig-manager":
        # The one deploy label whose absence makes the operator reconcile the node.
        return "%s is absent: the operator sets it again on its next reconcile of this MIG-capable node" % label
    return ("%s is absent, so its DaemonSet places no pod here, and the operator does not put a removed deploy "
            "label back (it reconciles a node only when its GPU, MIG, operands or workload-config labels "
            "change; the next full resync can be hours away). Set %s=%s" % (label, label, om.DEPLOY_TRUE))


def _paused_reason(name, labels):
    value = labels[om.deploy_label(name)]
    return "paused: %s=%s (%s; it sets the label back to %s when done)" % (
        om.deploy_label(name), value, gates.PAUSE_VALUES[value], om.DEPLOY_TRUE)


def _workload(labels, policy_):
    """(the workload config the operator applies, findings about the label)."""
    config, label = om.effective_workload_config(labels, policy_)
    findings = []
    if not policy_["sandbox_workloads_enabled"]:
        if label not in (None, "", om.CONTAINER):
            findings.append((LABEL_IGNORED, ERROR, None,
                             "%s=%s is ignored: sandbox workloads are disabled, so the operator runs the "
                             "container operands here" % (om.WORKLOAD_CONFIG_LABEL, label)))
        return config, findings
    if label not in (None, "") and label not in om.WORKLOAD_CONFIGS:
        source = "%s=%s" % (om.WORKLOAD_CONFIG_LABEL, label)
    elif label in (None, "") and policy_["default_workload"] not in om.WORKLOAD_CONFIGS:
        source = "the default workload %r" % policy_["default_workload"]
    else:
        return config, findings
    # The operator logs a warning and applies its default workload (container when the
    # ClusterPolicy's defaultWorkload is itself invalid): operand_model says which.
    findings.append((UNKNOWN_WORKLOAD_CONFIG, ERROR, None,
                     "%s is not a workload config (one of: %s); the operator applies %s instead"
                     % (source, ", ".join(om.WORKLOAD_CONFIGS), config)))
    return config, findings


def _resource_findings(config, advertised, capacity, states, running, labels, excused=()):
    """(findings, allocatable layer failures) for what a GPU node advertises."""
    findings, failures = [], []
    by_config = {}
    for name in advertised:
        by_config.setdefault(om.resource_workload_config(name), []).append(name)
    if len(by_config) > 1:
        findings.append((MIXED_WORKLOAD, ERROR, None, "advertises resources of several workload types: %s" % "; ".join(
            "%s (%s)" % (", ".join(sorted(names)), cfg) for cfg, names in sorted(by_config.items()))))
    plugin = om.RESOURCE_PLUGIN[config]
    for name in sorted(advertised):
        produced_by = om.resource_workload_config(name)
        if produced_by != config:
            message = "advertises %s (%s) but its workload config is %s" % (name, produced_by, config)
            findings.append((RESOURCE_MISMATCH, ERROR, plugin, message))
            failures.append((plugin, message))
    profile = labels.get(om.VGPU_CONFIG_LABEL)
    wanted = "a %s resource" % config
    if config == om.CONTAINER:
        wanted = om.CONTAINER_RESOURCE
    elif config == om.VM_VGPU and profile and om.is_vgpu_profile(profile):
        # A config name that is no plain profile (a custom name of the vGPU device manager's
        # ConfigMap) says nothing here about the type it creates.
        wanted = om.vgpu_resource_name(om.vgpu_type_name(profile))
        for name in sorted(by_config.get(om.VM_VGPU, ())):
            if name != wanted:
                message = "advertises %s but %s=%s produces %s" % (name, om.VGPU_CONFIG_LABEL, profile, wanted)
                findings.append((RESOURCE_MISMATCH, ERROR, plugin, message))
                failures.append((plugin, message))
    if states.get(plugin) == "expected" and not by_config.get(config) and plugin not in excused:
        seen = ", ".join("%s=%s" % kv for kv in sorted(capacity.items())) or "none"
        message = "no %s allocatable (capacity: %s)" % (wanted, seen)
        if plugin in running:
            message = "%s runs but the node advertises %s" % (plugin, message)
            findings.append((RESOURCE_MISMATCH, ERROR, plugin, message))
        failures.append((plugin, message))
    return findings, failures


def _vgpu_config_findings(labels, states):
    """(findings, layer failures) for the vGPU device manager's verdict on the node's
    ``nvidia.com/vgpu.config``: ``failed`` is an error there, ``pending`` not done yet."""
    manager = "vgpu-device-manager"
    state = labels.get(VGPU_CONFIG_STATE_LABEL)
    if states.get(manager) not in _BELONGS or state not in ("failed", "pending"):
        return [], []
    config = labels.get(om.VGPU_CONFIG_LABEL)
    which = "%s=%s" % (om.VGPU_CONFIG_LABEL, config) if config else "its default vGPU config (no %s)" % om.VGPU_CONFIG_LABEL
    if state == "pending":
        return [(VGPU_CONFIG, WARNING, manager, "%s=pending: the vGPU device manager has not applied %s yet"
                 % (VGPU_CONFIG_STATE_LABEL, which))], []
    message = ("%s=failed: the vGPU device manager could not apply %s on this node (its pod's log says why; a "
               "config name must be one of its ConfigMap's configs and fit the GPU)" % (VGPU_CONFIG_STATE_LABEL, which))
    return [(VGPU_CONFIG, ERROR, manager, message)], [(om.operand(manager).layer, manager, message)]


def _blocked_operands(taints, expected, tolerations):
    """{operand: untolerated taints as text} for the expected operands whose DaemonSet
    cannot place a pod on a node with ``taints``."""
    blocked = {}
    for operand_name in expected if taints else ():
        if operand_name in tolerations:
            bad = om.untolerated_taints(taints, tolerations[operand_name])
        else:
            bad = om.untolerated_taints(taints)
        if bad:
            blocked[operand_name] = ", ".join(_taint_text(t) for t in bad)
    return blocked


def _toleration_for(taint):
    parts = ["key: %s" % taint.get("key"), "operator: Exists"]
    if taint.get("effect"):
        parts.append("effect: %s" % taint["effect"])
    return "{%s}" % ", ".join(parts)


def _taint_finding(blocked, expected, running, taints, inventory_isolated):
    """The finding about a taint that keeps operand pods off a GPU node, naming the taint
    and both ways out. An error unless the pods still run (NoSchedule evicts nothing) or
    the inventory leaves the node out of the GPU layer: a GPU node without its operands
    and without that decision is broken, and drops out of desiredNumberScheduled, so
    nothing else would say so."""
    texts = "; ".join(sorted(set(blocked.values())))
    who = "the operand DaemonSets" if len(blocked) == len(expected) else "the DaemonSets of " + ", ".join(blocked)
    bad = [t for t in taints or () if any(_taint_text(t) in v.split(", ") for v in blocked.values())]
    fixes = ("either add a toleration to the chart's daemonsets.tolerations (gpu_operator_extra_values; for "
             "example %s, keeping the default one for %s), or take the node out of the GPU layer "
             "(gpu_node_isolated: true in the inventory, which sets %s=%s)" % (
                 _toleration_for(bad[0]) if bad else "{key: <taint key>, operator: Exists}",
                 om.GPU_TAINT_KEY, om.OPERANDS_LABEL, om.DEPLOY_FALSE))
    if all(name in running for name in blocked):
        return (UNTOLERATED_TAINT, WARNING, None, "taint %s is not tolerated by %s: their pods run now but will "
                "not be placed here again once deleted; %s" % (texts, who, fixes))
    if inventory_isolated:
        return (UNTOLERATED_TAINT, WARNING, None, "taint %s is not tolerated by %s, and the inventory leaves the "
                "node out of the GPU layer (gpu_node_isolated), but it lacks %s=%s: run the gpu_node_labels role"
                % (texts, who, om.OPERANDS_LABEL, om.DEPLOY_FALSE))
    return (UNTOLERATED_TAINT, ERROR, None, "taint %s is not tolerated by %s: their pods will never be placed on "
            "this GPU node, so it has no GPU operands: %s" % (texts, who, fixes))


def _not_running(expected, running, pods_by_operand, blocked, labels, states):
    """{operand: reason} for the expected operands without a Running and Ready pod (or
    without the deploy label that keeps one there)."""
    raw = {}
    for operand_name in expected:
        pods = pods_by_operand.get(operand_name)
        if states[operand_name] == PAUSED:
            raw[operand_name] = _paused_reason(operand_name, labels)
        elif labels.get(om.deploy_label(operand_name)) is None:
            raw[operand_name] = _absent_label_reason(operand_name, labels)
        elif operand_name in running:
            continue
        elif pods:
            raw[operand_name] = _describe(operand_name, pods)
        elif operand_name in blocked:
            raw[operand_name] = "no pod: taint %s not tolerated" % blocked[operand_name]
        else:
            raw[operand_name] = "no pod"
    # Second pass: a pod waiting at a gate names how the gate's writer stands.
    result = {}
    for operand_name, reason in raw.items():
        pods = pods_by_operand.get(operand_name)
        if reason.startswith("Init:") and pods and operand_name not in running:
            others = dict((k, v) for k, v in raw.items() if k != operand_name)
            reason = _describe(operand_name, pods, others)
        result[operand_name] = reason
    return result


def _order_violations(chain, states, running, not_running):
    findings = []
    for operand_name in chain:
        if operand_name not in running or states[operand_name] != "expected":
            continue
        waiting_for = [d for d in _nearest_expected(operand_name, states) if d not in running]
        if waiting_for:
            findings.append((ORDER_VIOLATION, ERROR, operand_name, "%s runs while %s, which it depends on, does not (%s)"
                             % (operand_name, ", ".join(waiting_for), "; ".join(not_running[d] for d in waiting_for))))
    return findings


def _unexpected_operands(pods_by_operand, why_not_expected):
    """A finding for each operand with a live pod where ``why_not_expected(operand)``
    gives a reason (None: the operand belongs there)."""
    findings = []
    for o in om.OPERANDS:
        present = [p for p in pods_by_operand.get(o.name, ()) if is_present(p)]
        reason = why_not_expected(o) if present else None
        if reason:
            findings.append((UNEXPECTED_OPERAND, ERROR, o.name, "%s has a pod here (%s) but %s" % (
                o.name, _meta(present[0]).get("name"), reason)))
    return findings


def _paused_finding(paused):
    """One finding for the node's paused operands: a transient state of a working node,
    neither switched off nor broken."""
    by_value = {}
    for name, value in paused.items():
        by_value.setdefault(value, []).append(name)
    parts = ["%s (%s<operand>=%s: %s)" % (", ".join(names), om.DEPLOY_LABEL_PREFIX, value, gates.PAUSE_VALUES[value])
             for value, names in sorted(by_value.items())]
    return (OPERAND_PAUSED, WARNING, None, "paused, not switched off: %s; the labels go back to %s when that is "
            "done, and the operands return" % ("; ".join(parts), om.DEPLOY_TRUE))


def _evaluate_node(node, pods_by_operand, policy_, tolerations, chains, inventory_isolated=False):
    meta = _meta(node)
    labels = meta.get("labels") or {}
    status = node.get("status") or {}
    # Running means running and staying: a pod whose deploy label is gone is on its way out.
    running = [o.name for o in om.OPERANDS if any(is_running(p) for p in pods_by_operand.get(o.name, ()))
               and (labels.get(om.deploy_label(o.name)) is not None or not om.is_gpu_node(labels))]
    report = {
        "node": meta.get("name"), "gpu_node": om.is_gpu_node(labels), "workload_config": None,
        "workload_label": labels.get(om.WORKLOAD_CONFIG_LABEL), "expected_operands": [],
        "running_operands": running, "not_running": {}, "operand_states": {},
        "advertised": om.gpu_resources(status.get("allocatable")), "capacity": om.gpu_resources(status.get("capacity")),
        "untolerated_taints": [], "layer_failures": [], "paused_operands": {}, "unlabelled_operands": [],
        "vgpu_config_state": None,
        # What the node says of itself, for the report: its architecture (the kubelet's label), and
        # GFD's product and the driver NVML reports (absent until GFD ran there).
        "architecture": labels.get(om.ARCH_LABEL), "gpu_product": labels.get(om.GPU_PRODUCT_LABEL),
        "driver_version": labels.get(om.DRIVER_VERSION_LABEL),
        # The kubelet's version: an RKE2 node reports RKE2's (v1.34.1+rke2r1).
        "kubelet_version": (status.get("nodeInfo") or {}).get("kubeletVersion"),
    }
    advertised = report["advertised"]

    if not report["gpu_node"]:
        findings = _unexpected_operands(pods_by_operand, lambda o: "the node is not a GPU node")
        if advertised:
            findings.append((RESOURCE_MISMATCH, WARNING, None,
                             "advertises %s but is not a GPU node (no %s or NFD GPU label): not the GPU "
                             "Operator's resources" % (", ".join(sorted(advertised)), om.GPU_PRESENT_LABEL)))
        return _finish(report, findings, [])

    config, findings = _workload(labels, policy_)
    states = _operand_states(labels, policy_, config)
    expected = [n for n in chains[config] if states[n] in _BELONGS]
    report["workload_config"] = config
    report["operand_states"] = dict((k, v) for k, v in states.items() if v != "n/a")
    report["expected_operands"] = expected
    paused = report["paused_operands"] = dict(
        (n, labels[om.deploy_label(n)]) for n in expected if states[n] == PAUSED)
    report["unlabelled_operands"] = [n for n in expected if labels.get(om.deploy_label(n)) is None]
    if config == om.VM_VGPU:
        report["vgpu_config_state"] = labels.get(VGPU_CONFIG_STATE_LABEL)

    taints = (node.get("spec") or {}).get("taints")
    blocked = _blocked_operands(taints, [n for n in expected if n not in paused], tolerations)
    # Kept off by a taint on a node the inventory isolates: missing, reported, not broken.
    excused = set(blocked) if inventory_isolated else set()
    if blocked:
        report["untolerated_taints"] = sorted(set(blocked.values()))
        findings.append(_taint_finding(blocked, expected, running, taints, inventory_isolated))
    if paused:
        findings.append(_paused_finding(paused))

    not_running = report["not_running"] = _not_running(expected, running, pods_by_operand, blocked, labels, states)
    layer_failures = []
    for operand_name, reason in not_running.items():
        if operand_name in paused:
            continue  # one operand-paused finding says it; nothing is broken
        if operand_name in excused and not pods_by_operand.get(operand_name):
            findings.append((MISSING_OPERAND, WARNING, operand_name, "%s is not running: %s" % (operand_name, reason)))
            continue
        findings.append((MISSING_OPERAND, ERROR, operand_name, "%s is not running: %s" % (operand_name, reason)))
        layer_failures.append((om.operand(operand_name).layer, operand_name, reason))
    findings.extend(_order_violations(chains[config], states, running, not_running))
    findings.extend(_unexpected_operands(pods_by_operand, lambda o: None if states[o.name] in _BELONGS else (
        _why_not_expected(o, states[o.name], config, labels))))

    vgpu_findings, vgpu_failures = _vgpu_config_findings(labels, states)
    findings.extend(vgpu_findings)
    layer_failures.extend(vgpu_failures)
    if report["vgpu_config_state"] == "pending":
        # The vGPU devices are being created: nothing to advertise yet is no fault.
        excused.add(om.RESOURCE_PLUGIN[config])
    resource_findings, allocatable_failures = _resource_findings(
        config, advertised, report["capacity"], states, running, labels, excused)
    findings.extend(resource_findings)
    layer_failures.extend((om.LAYER_ALLOCATABLE, plugin, reason) for plugin, reason in allocatable_failures)
    return _finish(report, findings, layer_failures)


def _finish(report, findings, layer_failures):
    name = report["node"]
    report["layer_failures"] = [
        {"layer": layer, "operand": operand_name, "reason": reason}
        for layer, operand_name, reason in sorted(
            (f for f in layer_failures if f[0] in om.LAYERS), key=lambda f: om.LAYERS.index(f[0]))
    ]
    result = []
    for code, severity, operand_name, message in findings:
        finding = {"node": name, "code": code, "severity": severity, "message": message}
        if operand_name:
            finding["operand"] = operand_name
        result.append(finding)
    report["codes"] = sorted(set(f["code"] for f in result), key=CODES.index)
    report["ok"] = not any(f["severity"] == ERROR for f in result)
    return report, result


def evaluate(nodes, pods, policy, daemonsets=None, isolated_nodes=()):
    """Check every node against ``policy`` (``operand_model.policy()``).

    ``isolated_nodes``: the nodes the inventory leaves out of the GPU layer
    (``gpu_node_isolated``), a decision like ``deploy.operands=false`` on the node even
    before the labels role has set that label. Returns ``{"nodes": {name: report},
    "findings": [...]}``, nodes in name order. Linear in nodes + pods: the operand pods
    are indexed by node once."""
    namespace = policy["namespace"]
    chains = dict((config, om.chain_for_workload(config)) for config in om.WORKLOAD_CONFIGS)
    isolated = set(isolated_nodes or ())
    reports, findings = {}, []
    with paused_gc():
        nodes = ko.read_all("Node", nodes, "nodes")
        daemonsets = ko.read_all("DaemonSet", daemonsets, "daemonsets")
        pods_index = index_operand_pods(pods, namespace)
        tolerations = _operand_tolerations(daemonsets, namespace)
        for node in sorted(nodes, key=lambda n: _meta(n).get("name") or ""):
            name = _meta(node).get("name")
            report, node_findings = _evaluate_node(
                node, pods_index.get(name, {}), policy, tolerations, chains, name in isolated)
            reports[report["node"]] = report
            findings.extend(node_findings)
    return {"nodes": reports, "findings": findings}


def running_images(reports, pods, namespace):
    """The images the operator and the operands run, for the report's versions: ``{"operator":
    {image: pods}, "operands": {operand: {image: GPU nodes}}}``, each pod's first container (the
    operand's own; init containers and sidecars come from other images), terminating pods left
    out. One pass over the pods of ``namespace``, which ``evaluate`` has read (k8s_objects): the
    others are not looked at."""
    gpu_nodes = set(name for name, report in reports.items() if report["gpu_node"])
    operator, operands = {}, {}
    for pod in pods or ():
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        if not isinstance(meta, dict) or meta.get("namespace") != namespace or is_terminating(pod):
            continue
        containers = (pod.get("spec") or {}).get("containers") or ()
        image = containers[0].get("image") if containers else None
        if not image:
            continue
        labels = meta.get("labels") or {}
        if labels.get(om.OPERATOR_POD_SELECTOR[0]) == om.OPERATOR_POD_SELECTOR[1]:
            operator[image] = operator.get(image, 0) + 1
            continue
        operand_ = om.operand_of_pod(labels)
        if operand_ is not None and pod_node(pod) in gpu_nodes:
            operands.setdefault(operand_.name, {}).setdefault(image, set()).add(pod_node(pod))
    return {"operator": operator, "operands": dict(
        (name, dict((image, len(nodes)) for image, nodes in images.items())) for name, images in operands.items())}


def first_broken_layer(report):
    """The lowest broken layer of one node's report (``{layer, operand, reason}``), or None."""
    failures = report.get("layer_failures") or ()
    return failures[0] if failures else None


# ---------------------------------------------------------------- result

def check(snapshot, policy, node_names=None, isolated_nodes=()):
    """The check's whole result for a split snapshot: ``findings``, ``nodes``, the
    ``policy`` it used and a ``summary``. ``node_names`` limits the report; a name that
    is not in the snapshot raises ValueError. ``isolated_nodes``: see ``evaluate``."""
    nodes = ko.read_all("Node", snapshot["nodes"], "nodes")
    if node_names:
        known = set(_meta(n).get("name") for n in nodes)
        unknown = sorted(set(node_names) - known)
        if unknown:
            raise ValueError("nodes not in the cluster: %s" % ", ".join(unknown))
        wanted = set(node_names)
        nodes = [n for n in nodes if _meta(n).get("name") in wanted]
    result = evaluate(nodes, snapshot["pods"], policy, snapshot.get("daemonsets"), isolated_nodes)
    reports = result["nodes"].values()
    by_code = {}
    for finding in result["findings"]:
        by_code[finding["code"]] = by_code.get(finding["code"], 0) + 1
    result["policy"] = policy
    result["images"] = running_images(result["nodes"], snapshot["pods"], policy["namespace"])
    result["summary"] = {
        "nodes": len(result["nodes"]),
        "gpu_nodes": sum(1 for r in reports if r["gpu_node"]),
        "ok_nodes": sum(1 for r in reports if r["ok"]),
        "errors": sum(1 for f in result["findings"] if f["severity"] == ERROR),
        "warnings": sum(1 for f in result["findings"] if f["severity"] == WARNING),
        "by_code": by_code,
    }
    return result


def failure_message(result, most=10):
    """One line naming the nodes with error findings and their codes."""
    bad = [r for r in result["nodes"].values() if not r["ok"]]
    errors = [f for f in result["findings"] if f["severity"] == ERROR]
    parts = []
    for report in bad[:most]:
        codes = [c for c in report["codes"]
                 if any(f["code"] == c and f["node"] == report["node"] and f["severity"] == ERROR for f in errors)]
        parts.append("%s (%s)" % (report["node"], ", ".join(codes)))
    if len(bad) > most:
        parts.append("and %d more" % (len(bad) - most))
    return "%d error finding%s on %d of %d nodes: %s" % (
        len(errors), "" if len(errors) == 1 else "s", len(bad), len(result["nodes"]), "; ".join(parts))


def format_table(result):
    """The per-node table the CLI prints, then one line per finding."""
    header = ("NODE", "WORKLOAD", "RUNNING/EXPECTED", "ADVERTISED", "FINDINGS")
    rows = [header]
    for report in result["nodes"].values():
        expected = report["expected_operands"]
        rows.append((
            report["node"],
            report["workload_config"] or "-",
            "%d/%d" % (sum(1 for n in expected if n in report["running_operands"]), len(expected))
            if report["gpu_node"] else "-",
            ", ".join("%s=%d" % kv for kv in sorted(report["advertised"].items())) or "-",
            ", ".join(report["codes"]) or "ok",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    if result["findings"]:
        lines.append("")
        for f in result["findings"]:
            lines.append("%-7s %s %s: %s" % (f["severity"], f["node"], f["code"], f["message"]))
    summary = result.get("summary")
    if summary:
        lines.append("")
        lines.append("%d nodes (%d GPU), %d ok; %d errors, %d warnings" % (
            summary["nodes"], summary["gpu_nodes"], summary["ok_nodes"], summary["errors"], summary["warnings"]))
    return "\n".join(lines) + "\n"
