#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_node_labels
short_description: Set the GPU Operator's node labels from the inventory, owning only the labels it set
version_added: 0.1.0
description:
  - Sets, per GPU node, the labels that decide what the node is for the NVIDIA GPU Operator
    (C(nvidia.com/gpu.workload.config)), which operands run there (C(nvidia.com/gpu.deploy.<operand>=false)),
    whether the node is isolated from the GPU layer (C(nvidia.com/gpu.deploy.operands=false); all operand
    pods leave, the node stays schedulable) and its vGPU profile (C(nvidia.com/vgpu.config)).
  - Owns only the labels it set. The keys it owns are recorded on the node in the annotation
    C(gpuplatform.rke2/owned-labels) (a JSON list), so removing a setting removes the label it set, and
    labels it does not own are never touched. Every change is one JSON merge patch per node that names
    only owned keys.
  - "Adoption rule: a label already on the node that this module does not own is adopted when it already
    has the desired value; a deploy label at the value the GPU Operator's components write by themselves
    (V(true), or V(pre-installed), which k8s-driver-manager writes on the driver's label where the host driver
    works) is taken over, since overwriting it is the documented way to switch an operand off; a deploy label
    at a pause value (V(paused-for-driver-upgrade), V(paused-for-mig-change), V(paused-for-vgpu-change)) is
    left alone with a warning, neither refused nor changed; any other value was chosen by someone and is
    refused unless O(adopt_existing=true)."
  - "An operand switched off before is switched back on by setting its deploy label to V(true), never by
    removing the label: the operator does not reconcile a node when a deploy label goes, so the operand would
    stay off until its next full resync."
  - Checks before any change, each failure naming host and key or value, all reported together;
    unknown workload configs and operand names; an operand switched off on a node whose workload config
    does not run it (the operator would drop the label again); vm-* workload configs while sandbox
    workloads are off in the site's chart values (the operator silently ignores the label); a vGPU profile
    that is not one; a switch of a node's workload config while pods or VMs that use its GPU resources run
    there, unless O(force=true) or O(drain=true); a validator (C(operator-validator), C(sandbox-validator)) in
    O(nodes[].operands_disabled), because the operands above it wait for the status files it writes and hang
    in Init after the next reboot; an operand without a deploy label of its own (C(mps-control-daemon)).
  - The work is split into steps (O(step)) so that a role can run them as separate tasks; O(step=apply)
    does everything the earlier steps check, so it is safe on its own.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
options:
  nodes:
    description:
      - The GPU nodes and what the inventory says about each. Nodes not listed are not touched.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - The Kubernetes node name (the inventory's C(k8s_node_name), by default the inventory hostname).
        type: str
        required: true
      host:
        description:
          - The inventory host, for messages. Defaults to O(nodes[].name).
        type: str
      workload_config:
        description:
          - The value of C(nvidia.com/gpu.workload.config) (C(container), C(vm-passthrough) or C(vm-vgpu)).
            Not set, the label is not managed.
          - Checked by the module, not by the argument spec, so that an error names the host.
        type: str
      operands_disabled:
        description:
          - Operands switched off on this node (C(nvidia.com/gpu.deploy.<operand>=false)), by the names of
            the collection's operand model. Held back while the node is isolated, because the operator strips
            every deploy label from an isolated node.
          - An operand dropped from this list is switched back on with C(nvidia.com/gpu.deploy.<operand>=true).
          - The validators cannot be listed (they are gates, and what waits for them hangs after a reboot).
        type: list
        elements: str
        default: []
      isolated:
        description:
          - Take the node out of the GPU layer without cordoning it (C(nvidia.com/gpu.deploy.operands=false)).
        type: bool
        default: false
      vgpu_config:
        description:
          - The vGPU profile of the node (C(nvidia.com/vgpu.config)), for example C(A10-12Q). Read on
            vm-vgpu nodes only.
        type: str
  step:
    description:
      - V(validate) checks the inventory settings only and needs no cluster.
      - V(plan) also reads the nodes (and, for nodes that switch workload config, their pods) and refuses
        what must be refused; it changes nothing.
      - V(drain) cordons each node that switches workload config while GPU workloads run there, evicts those
        workloads through the eviction API and waits for them to go; labels are not changed.
      - V(apply) does all of the above that applies (the drain only with O(drain=true)), then patches the
        labels and lifts the cordons this module set for a drain.
    type: str
    choices: [validate, plan, drain, apply]
    default: apply
  sandbox_workloads_enabled:
    description:
      - Whether the site's GPU Operator chart values enable sandbox (VM) workloads (C(sandboxWorkloads.enabled)).
      - Defaults to the chart default (false).
    type: bool
  default_workload:
    description:
      - The workload config the operator gives a GPU node without the label (C(sandboxWorkloads.defaultWorkload)).
      - Defaults to the chart default (C(container)).
    type: str
    choices: [container, vm-passthrough, vm-vgpu]
  sandbox_off_action:
    description:
      - What a vm-* workload config does while sandbox workloads are off, V(fail) or V(warn).
    type: str
    choices: [fail, warn]
    default: fail
  adopt_existing:
    description:
      - Take over labels this module does not own even when someone set them to another value.
    type: bool
    default: false
  force:
    description:
      - Switch a node's workload config even while pods or VMs that use its GPU resources run there, and go
        on when a drain times out.
    type: bool
    default: false
  drain:
    description:
      - Before a workload config switch, cordon the node, evict the pods and VMs (virt-launcher pods) that use
        its GPU resources and wait until they are gone. The apply step lifts the cordon once the labels are set.
    type: bool
    default: false
  drain_timeout:
    description:
      - Seconds the whole drain may take, all nodes together.
    type: int
    default: 600
notes:
  - Supports check mode and diff mode; the diff lists the label changes per node.
  - A GPU workload is a pod on the node, not Succeeded or Failed, that requests or limits any
    C(nvidia.com/*) resource; a KubeVirt VM counts through its virt-launcher pod.
  - Needs get and patch on nodes, list and watch on pods, and create on pods/eviction (drain only).
"""

EXAMPLES = r"""
- name: Label the GPU nodes from the inventory
  gpuplatform.rke2.gpu_node_labels:
    sandbox_workloads_enabled: true
    nodes:
      - name: gpu-container-1
        workload_config: container
        operands_disabled: [dcgm-exporter]
      - name: gpu-passthrough-1
        workload_config: vm-passthrough
      - name: gpu-vgpu-1
        workload_config: vm-vgpu
        vgpu_config: A10-12Q
      - name: gpu-container-2
        isolated: true

- name: Switch a node to vm-passthrough, evicting its GPU pods first
  gpuplatform.rke2.gpu_node_labels:
    sandbox_workloads_enabled: true
    drain: true
    drain_timeout: 900
    nodes:
      - name: gpu-container-2
        host: gpu02.site.example
        workload_config: vm-passthrough
"""

RETURN = r"""
nodes:
  description: One entry per node, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    host:
      description: The inventory host.
      type: str
    name:
      description: The node.
      type: str
    desired:
      description: The labels the inventory asks for.
      type: dict
      sample: {nvidia.com/gpu.workload.config: vm-vgpu, nvidia.com/vgpu.config: A10-12Q}
    changes:
      description: The label changes, each with C(key), C(before), C(after) (null when removed) and
        C(action) (C(set), C(remove), or C(adopt) when only ownership is recorded).
      type: list
      elements: dict
      returned: when the step reads the cluster
    owned:
      description: The label keys owned on the node afterwards.
      type: list
      elements: str
      returned: when the step reads the cluster
    deferred:
      description: The labels left alone because a component paused them (a driver upgrade, a MIG or vGPU
        change), each as a message naming the label and what the inventory wants; run again once it is done.
      type: list
      elements: str
      returned: when the step reads the cluster
    workload_switch:
      description: The effective workload config before and after (C(from), C(to)), or null.
      type: dict
      returned: when the step reads the cluster
    gpu_workloads:
      description: The pods and VMs using GPU resources on a node that switches, each with C(namespace),
        C(name), C(uid), C(vm) (the VM's name for a virt-launcher pod, else null) and C(resources).
      type: list
      elements: dict
      returned: when the step reads the cluster
    drain:
      description: What the drain did (C(cordoned), C(evicted), C(remaining)), or null.
      type: dict
      returned: when the step reads the cluster
    uncordoned:
      description: Whether the node's drain cordon was lifted.
      type: bool
      returned: when the step reads the cluster
    changed:
      description: Whether the node was (or in check mode would be) changed.
      type: bool
      returned: when the step reads the cluster
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_labels as nl
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec

try:
    from kubernetes import client as k8s_client
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError
except ImportError:  # pragma: no cover - k8s_connection reports the missing client
    k8s_client = None
    ApiException = HTTPError = Exception

MERGE_PATCH = "application/merge-patch+json"
# kubectl drain retries an eviction a PodDisruptionBudget refuses at this interval too.
EVICTION_RETRY_S = 5
# From this many switching nodes on, their pods come from one paged list of the cluster's pods,
# PODS_PAGE at a time, instead of a list per node.
PODS_LIST_NODES = 20
PODS_PAGE = 500


def argument_spec():
    spec = connection_arg_spec()
    spec.update(
        nodes=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            host=dict(type="str"),
            workload_config=dict(type="str"),
            operands_disabled=dict(type="list", elements="str", default=[]),
            isolated=dict(type="bool", default=False),
            vgpu_config=dict(type="str"),
        )),
        step=dict(type="str", default="apply", choices=["validate", "plan", "drain", "apply"]),
        sandbox_workloads_enabled=dict(type="bool"),
        default_workload=dict(type="str", choices=list(om.WORKLOAD_CONFIGS)),
        sandbox_off_action=dict(type="str", default="fail", choices=list(nl.SANDBOX_OFF_ACTIONS)),
        adopt_existing=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        drain=dict(type="bool", default=False),
        drain_timeout=dict(type="int", default=600),
    )
    return spec


class Failure(Exception):
    def __init__(self, msg, **extra):
        super(Failure, self).__init__(msg)
        self.msg = msg
        self.extra = extra


class Cluster(object):
    """The module's I/O: the few CoreV1Api calls it makes, answering plain dicts, and the
    watch adapter of ``k8s_wait`` (which carries the clock) for the drain's wait."""

    def __init__(self, core, wait_api):
        self.core = core
        self.wait_api = wait_api

    def _plain(self, obj):
        if obj is None or isinstance(obj, dict):
            return obj
        return self.core.api_client.sanitize_for_serialization(obj)

    def nodes(self):
        """Every node by name, from one list: a read per inventory host would make the
        requests of a run grow with the fleet."""
        listed = self._plain(self.core.list_node()) or {}
        return dict(((n.get("metadata") or {}).get("name"), n) for n in listed.get("items") or ())

    def pods_on(self, node_name):
        result = self._plain(self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=" + node_name))
        return result.get("items") or []

    def pod_pages(self):
        """Every pod of the cluster, PODS_PAGE at a time: an iterator of lists."""
        token = None
        while True:
            kwargs = {"limit": PODS_PAGE}
            if token:
                kwargs["_continue"] = token
            page = self._plain(self.core.list_pod_for_all_namespaces(**kwargs)) or {}
            yield page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def patch_node(self, name, patch):
        return self._plain(self.core.patch_node(name, patch, _content_type=MERGE_PATCH))

    def evict(self, workload):
        """``(True, None)`` when the pod is evicted or already gone, ``(False, why)`` when
        the API refuses for now (a PodDisruptionBudget, KubeVirt migrating the VM)."""
        body = k8s_client.V1Eviction.from_dict(nl.eviction_body(workload))
        try:
            self.core.create_namespaced_pod_eviction(workload["name"], workload["namespace"], body)
        except ApiException as exc:
            if exc.status == 404:
                return True, None
            if exc.status == 429:
                return False, _reason(exc)
            raise
        return True, None


def _reason(exc):
    return "%s %s" % (exc.status, (exc.body or exc.reason or "").strip()[:300])


def _node_entries(params):
    entries = []
    for spec in params["nodes"]:
        node = dict(spec)
        node["host"] = node.get("host") or node["name"]
        entries.append(node)
    return entries


def drain_requested(params):
    return params["drain"] or params["step"] == "drain"


def pods_on_nodes(cluster, names):
    """{node name: its pods}: a list per node (a field selector each) for a few nodes; for
    PODS_LIST_NODES or more, the cluster's pods page by page, keeping those of these nodes,
    so that the requests do not grow with the nodes that switch and no more than a page of
    other nodes' pods is held at a time."""
    names = sorted(set(names))
    if len(names) < PODS_LIST_NODES:
        return dict((name, cluster.pods_on(name)) for name in names)
    result = dict((name, []) for name in names)
    for page in cluster.pod_pages():
        for pod in page:
            on = (pod.get("spec") or {}).get("nodeName")
            if on in result:
                result[on].append(pod)
    return result


def read_plans(cluster, nodes, params, policy_):
    """Every node's plan, with the refusals that stop the run before any change (in the
    inventory's order of the nodes)."""
    errors = []
    plans = []
    # Each node first without its pods: [node, where, its errors, or its plan's parts].
    pending = []
    in_cluster = cluster.nodes()
    for node in nodes:
        where = nl.describe_host(node)
        obj = in_cluster.get(node["name"])
        if obj is None:
            pending.append((node, where, ["%s: node %s is not in the cluster (k8s_node_name defaults to the inventory "
                                          "hostname)" % (where, node["name"])], None))
            continue
        desired = nl.desired_labels(node)
        try:
            plan = nl.plan_labels(obj, desired, params["adopt_existing"], where, policy_)
        except ValueError as exc:
            pending.append((node, where, ["%s: %s" % (where, exc)], None))
            continue
        labels = (obj.get("metadata") or {}).get("labels") or {}
        pending.append((node, where, list(plan["refusals"]),
                        (obj, desired, plan, nl.workload_switch(labels, plan["labels"], policy_))))
    # The pods of the nodes whose workload config changes, read together (a fleet's first labelling
    # switches every VM node).
    pods_of = pods_on_nodes(cluster, [entry[0]["name"] for entry in pending if entry[3] and entry[3][3]])
    for node, where, node_errors, parts in pending:
        errors.extend(node_errors)
        if parts is None:
            continue
        obj, desired, plan, switch = parts
        try:
            workloads = nl.gpu_workloads(pods_of.get(node["name"]) or []) if switch else []
        except ValueError as exc:  # a pod it cannot read (k8s_objects), named
            errors.append("%s: the pods on node %s: %s" % (where, node["name"], exc))
            continue
        if switch and workloads and not (params["force"] or drain_requested(params)):
            errors.append(nl.switch_refusal(where, switch, workloads))
        plans.append({"node": node, "obj": obj, "desired": desired, "plan": plan, "switch": switch,
                      "workloads": workloads, "drain": None, "uncordoned": False, "changed": False})
    return plans, errors


def _pods_key(p):
    return "pods:" + p["node"]["name"]


def drain(cluster, plans, timeout, check_mode):
    """Cordon, evict and wait for every node that switches with GPU workloads on it; one
    deadline for all. Returns the messages of the nodes whose workloads outlived it."""
    targets = [p for p in plans if p["switch"] and p["workloads"]]
    if not targets:
        return []
    if check_mode:
        for p in targets:
            p["drain"] = {"cordoned": bool(nl.cordon_patch(p["obj"], p["switch"])),
                          "evicted": [w["name"] for w in p["workloads"]], "remaining": []}
            p["changed"] = True
        return []
    clock = cluster.wait_api.clock
    deadline = clock.now() + timeout
    blocked = {}

    def evict(p, w):
        done, why = cluster.evict(w)
        if done:
            blocked.pop(w["uid"], None)
            p["drain"]["evicted"].append(w["name"])
        else:
            blocked[w["uid"]] = why

    for p in targets:
        cordon = nl.cordon_patch(p["obj"], p["switch"])
        if cordon:
            p["obj"] = cluster.patch_node(p["node"]["name"], cordon)
        p["drain"] = {"cordoned": bool(cordon), "evicted": [], "remaining": []}
        p["changed"] = True
        for w in p["workloads"]:
            evict(p, w)

    resources = [k8s_wait.resource(_pods_key(p), "v1", "pods", field_selector="spec.nodeName=" + p["node"]["name"])
                 for p in targets]

    def condition(cache):
        left = dict((p["node"]["name"], nl.remaining_workloads(p["workloads"], k8s_wait.objects(cache, _pods_key(p))))
                    for p in targets)
        left = dict((name, ws) for name, ws in left.items() if ws)
        return not left, left

    while True:
        remaining = max(0.0, deadline - clock.now())
        # Evictions a disruption budget refuses are retried between waits; otherwise the
        # wait runs on the watch until the pods are gone or the deadline passes.
        window = min(remaining, EVICTION_RETRY_S) if blocked else remaining
        try:
            result = k8s_wait.Waiter(cluster.wait_api, resources, window).wait(condition)
        except (k8s_wait.WaitFailed, ValueError) as exc:  # ValueError: a pod it cannot read, named
            raise Failure("draining: %s" % exc, changed=True, nodes=[_report(p) for p in plans])
        left = {} if result.done else (result.detail or {})
        if not left or clock.now() >= deadline:
            break
        for p in targets:
            for w in left.get(p["node"]["name"], ()):
                if w["uid"] in blocked:
                    evict(p, w)

    timed_out = []
    for p in targets:
        still = left.get(p["node"]["name"]) or []
        p["drain"]["remaining"] = [w["name"] for w in still]
        if still:
            why = "; ".join("%s%s" % (nl.describe_workload(w), " (eviction refused: %s)" % blocked[w["uid"]]
                                      if w["uid"] in blocked else "") for w in still)
            timed_out.append("%s: drain did not finish within %ss; still there: %s. The node stays cordoned "
                             "(annotation %s) until a run switches it"
                             % (nl.describe_host(p["node"]), timeout, why, nl.CORDONED_ANNOTATION))
    return timed_out


def _merge(a, b):
    result = dict(a or {})
    for key, value in (b or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = value
    return result


def apply(cluster, plans, check_mode):
    for p in plans:
        patch = nl.label_patch(p["plan"])
        uncordon = nl.uncordon_patch(p["obj"])
        body = _merge(patch, uncordon) if (patch or uncordon) else None
        p["uncordoned"] = bool(uncordon)
        if body:
            p["changed"] = True
            if not check_mode:
                cluster.patch_node(p["node"]["name"], body)


def _report(p):
    return {"host": p["node"]["host"], "name": p["node"]["name"], "desired": p["desired"],
            "changes": p["plan"]["changes"], "owned": p["plan"]["owned"], "deferred": p["plan"]["deferred"],
            "workload_switch": dict(zip(("from", "to"), p["switch"])) if p["switch"] else None,
            "gpu_workloads": p["workloads"], "drain": p["drain"], "uncordoned": p["uncordoned"],
            "changed": p["changed"]}


def run(params, check_mode, cluster_factory, warn):
    """The module's work; returns the result dict or raises Failure."""
    policy_ = nl.sandbox_policy(params["sandbox_workloads_enabled"], params["default_workload"])
    nodes = _node_entries(params)
    errors, warnings = nl.validate_nodes(nodes, policy_, params["sandbox_off_action"])
    for message in warnings:
        warn(message)
    if params["drain_timeout"] <= 0:
        errors.append("drain_timeout must be positive, got %d" % params["drain_timeout"])
    if errors:
        raise Failure("\n".join(errors))
    if params["step"] == "validate":
        return {"changed": False, "nodes": [{"host": n["host"], "name": n["name"], "desired": nl.desired_labels(n)}
                                            for n in nodes]}

    cluster = cluster_factory()
    plans, errors = read_plans(cluster, nodes, params, policy_)
    if errors:
        raise Failure("\n".join(errors), nodes=[_report(p) for p in plans])
    for p in plans:
        for message in p["plan"]["deferred"]:
            warn(message)
    if params["step"] in ("drain", "apply") and drain_requested(params):
        timed_out = drain(cluster, plans, params["drain_timeout"], check_mode)
        if timed_out and not params["force"]:
            raise Failure("\n".join(timed_out), changed=True, nodes=[_report(p) for p in plans])
        for message in timed_out:
            warn(message + " (going on: force is set)")
    if params["step"] == "apply":
        apply(cluster, plans, check_mode)
    result = {"changed": any(p["changed"] for p in plans), "nodes": [_report(p) for p in plans]}
    if params["step"] == "apply":
        result["diff"] = [d for d in (nl.label_diff(p["node"]["name"], p["plan"]) for p in plans) if d]
    return result


def _cluster_factory(params):
    def factory():
        try:
            wait_api = k8s_wait.connect(params)
        except ValueError as exc:
            raise Failure(str(exc))
        return Cluster(wait_api.core, wait_api)
    return factory


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = run(module.params, module.check_mode, _cluster_factory(module.params), module.warn)
    except Failure as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    except (ApiException, HTTPError) as exc:
        module.fail_json(msg="Kubernetes API error: %s" % (_reason(exc) if isinstance(exc, ApiException) else exc))
    diff = result.pop("diff", None)
    if module._diff and diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
