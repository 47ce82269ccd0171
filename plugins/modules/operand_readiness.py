#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: operand_readiness
short_description: Wait until the GPU Operator and its operands are up, in the order they come up
version_added: 0.1.0
description:
  - Watches the operator's Deployment, the ClusterPolicy, the nodes, and the pods and DaemonSets in the operator's
    namespace through the Kubernetes API (one list and one long watch each, not polling) and waits for three steps
    in their fixed order, returning as soon as the last holds.
  - C(operator), the Deployment C(gpu-operator) is available; C(cluster-policy), a ClusterPolicy exists (and, with
    O(require_reconciled), reports C(Ready) with reason C(Reconciled)); C(operands), on every selected node each
    operand its workload config runs there is Running and Ready, in the node's chain order (container nodes
    driver, container-toolkit, operator-validator, device-plugin, gpu-feature-discovery, dcgm-exporter and so on;
    vm-passthrough and vm-vgpu nodes their own chains).
  - An operand counts on a node only with a pod of its DaemonSet's current template there. A pod is current as the
    DaemonSet controller decides it (its C(pod-template-generation) label equal to the DaemonSet's
    C(deprecated.daemonset.template.generation) annotation, or its C(controller-revision-hash) that of the current
    revision); the old pod of a DaemonSet mid-rollout, or one whose DaemonSet is gone, does not count, whatever its
    state. With the default selection every operand DaemonSet must also be rolled out as kubernetes.core's
    C(daemonset_ready) decides (C(observedGeneration) equal to C(generation), C(updatedNumberScheduled) equal to
    C(desiredNumberScheduled) and to C(numberReady)); with O(names) or O(label_selector) its generation must be
    observed (its counts take in nodes outside the selection). A DaemonSet that wants no pod and has none holds
    nothing up. This holds with and without O(require_reconciled).
  - A node selected at any point of the wait stays wanted. A GPU node deleted (and perhaps re-created), or one whose
    NFD labels are pruned for a moment, keeps the wait going, and at the deadline it is named with what became of it
    (RV(lost_nodes)).
  - Which operands a node runs follows the collection's operand model, honouring operands switched off by their
    deploy label, operands disabled in the ClusterPolicy and a pre-installed driver or container runtime.
    Operands paused by a driver upgrade, a MIG or a vGPU change (C(paused-for-*) deploy labels) are waited for,
    not left out, since they come back. An operand whose deploy label is absent is waited for too, and its reason
    names the fix (set the label to C(true), since the operator does not put a removed deploy label back).
  - A stuck node is reported at its lowest broken layer (driver, container-runtime, device-plugin,
    allocatable), not at the first operand of its chain that is not up; the operator-validator turns Ready only
    once the device plugin advertises GPUs, so its cause lies below it. A pod waiting in an init container names
    the container and the validator status file it waits for.
  - Rides through API server restarts within one overall O(timeout). At the deadline it fails naming the step it
    waited on and, for the operands step, each stuck node with the operand it is stuck at, its layer and the pod's
    reason (C(ImagePullBackOff), C(Init:CrashLoopBackOff), C(Pending) with the scheduler's message).
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  namespace:
    description:
      - The GPU Operator's namespace.
    type: str
    default: gpu-operator
  require_reconciled:
    description:
      - Also require the ClusterPolicy's C(Ready) condition to be C(True) with reason C(Reconciled). The operator
        reports C(Ready) with reasons C(NoGPUNodes) and C(NFDLabelsMissing) too, which say nothing about operands.
    type: bool
    default: false
  label_selector:
    description:
      - Wait on the operands of the nodes this label selector matches, instead of every GPU node.
    type: str
  names:
    description:
      - Wait on the operands of these nodes, instead of every GPU node. A named node that is not in the cluster yet is
        waited for.
    type: list
    elements: str
  images:
    description:
      - The images of the chart just delivered (the C(images) gpuplatform.rke2.gpu_operator_chart returns, or
        references). After a chart upgrade the operand DaemonSets keep the old chart's templates, rolled out and Ready,
        until the new operator's first reconcile rewrites them; with this option a DaemonSet whose template names any
        other image (a tag may carry the suffix the operator adds, the driver's OS) is not rolled out yet.
    type: list
    elements: raw
  allow_no_nodes:
    description:
      - Let the operands step succeed when no GPU node is selected. By default an empty selection keeps the module
        waiting and fails at the deadline.
    type: bool
    default: false
  timeout:
    description:
      - Seconds to wait in all.
    type: int
    default: 600
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes.wait
notes:
  - By default GPU nodes whose taints the operand DaemonSets do not tolerate, and isolated nodes
    (C(nvidia.com/gpu.deploy.operands=false)), are not waited for; they are returned in RV(skipped_nodes). Name
    them in O(names) to wait for them anyway. A tainted GPU node that is not isolated is an error in
    gpuplatform.rke2.gpu_node_check (C(untolerated-taint)), which fails the verification report.
"""

EXAMPLES = r"""
- name: Wait for the operator and every GPU node's operands
  gpuplatform.rke2.operand_readiness:
    require_reconciled: true
    timeout: 900
  delegate_to: localhost

- name: Wait for the operands of the node this play added
  gpuplatform.rke2.operand_readiness:
    names: [tirosh-gpu-3]
  delegate_to: localhost
"""

RETURN = r"""
steps:
  description: Each step in order, whether it holds, what it saw, when it was first seen done (seconds into the wait)
    and how long it took after the step before it.
  returned: always
  type: list
  elements: dict
  sample: [{"step": "operator", "done": true, "message": "Deployment gpu-operator/gpu-operator: 1/1 replicas available",
            "done_after": 0.0, "duration": 0.0},
           {"step": "cluster-policy", "done": true, "message": "ClusterPolicy cluster-policy Ready (Reconciled)",
            "done_after": 12.4, "duration": 12.4},
           {"step": "operands", "done": true, "message": "4 of 4 nodes run their operand chain",
            "done_after": 95.1, "duration": 82.7}]
step:
  description: The step the wait ended on (the first that does not hold); null on success.
  returned: always
  type: str
  sample: operands
nodes:
  description: Each selected node's operand chain, the operands Running and Ready, where it is stuck and why, and
    when it was first seen ready, and C(images), the image each operand Running and Ready there runs (its pod's
    first container), which an upgrade reports node by node. A node held up by a DaemonSet mid-rollout also has
    C(rollout), each operand whose only Running pod there is of an old template (C(operand), C(daemonset), C(pod),
    C(reason)).
  returned: always
  type: dict
  sample: {"gpu-container-2": {"workload_config": "container", "chain": ["driver", "container-toolkit"],
           "ready_operands": ["driver"], "ready": false, "stuck_at": "container-toolkit",
           "layer": "container-runtime", "reason": "CrashLoopBackOff", "ready_after": null,
           "images": {"driver": "nvcr.io/nvidia/driver:580.126.20-ubuntu22.04"}}}
skipped_nodes:
  description: GPU nodes left out of the default selection, with the reason.
  returned: always
  type: list
  elements: dict
lost_nodes:
  description: Nodes selected earlier in the wait that are gone or left out now, with what became of them. The wait
    does not succeed while there is one.
  returned: always
  type: dict
  sample: {"gpu-container-2": "selected earlier in this wait, is gone from the cluster"}
daemonsets:
  description: The operand DaemonSets not rolled out yet, with what is missing (a generation not observed, pods not
    updated or not ready). The operands step does not hold while there is one.
  returned: always
  type: dict
  sample: {"nvidia-device-plugin-daemonset": "1 of 2 pods updated, 2 ready"}
operator_pods:
  description: While the operator is not available, the reason of each of its pods that is not Running and Ready.
  returned: always
  type: dict
  sample: {"gpu-operator-6c9b8d7f5-abcde": "ImagePullBackOff"}
diagnosis:
  description: At a timeout on the operands step, each stuck node's lowest broken layer of the ADR (driver,
    container-runtime, device-plugin, allocatable), with every broken layer in C(layer_failures).
  returned: failure
  type: dict
elapsed:
  description: Seconds the wait took.
  returned: always
  type: float
api_requests:
  description: List and watch requests the wait made; it does not grow with the wait's length.
  returned: always
  type: dict
  sample: {"list": 4, "watch": 4, "total": 8}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec


def check_params(params):
    if not params["namespace"]:
        return "namespace must not be empty"
    if params["timeout"] < 0:
        return "timeout must be zero or more seconds, got %d" % params["timeout"]
    if params["names"] is not None and not all(params["names"]):
        return "names: node names must not be empty"
    for index, entry in enumerate(params["images"] or ()):
        reference = entry if isinstance(entry, str) else (entry.get("mirror") or entry.get("source")
                                                          if isinstance(entry, dict) else None)
        if not reference:
            return "images[%d]: %r is neither an image reference nor an image plan entry (source, mirror)" % (
                index, entry)
    return None


def resources(params):
    namespace = params["namespace"]
    names = params["names"] or []
    return [
        k8s_wait.by_name("deployments", "apps/v1", "deployments", om.OPERATOR_DEPLOYMENT, namespace=namespace),
        k8s_wait.resource("clusterpolicies", "/".join(om.CLUSTER_POLICY_API[:2]), om.CLUSTER_POLICY_API[2],
                          optional=True),
        k8s_wait.resource("nodes", "v1", "nodes", label_selector=params["label_selector"],
                          field_selector="metadata.name=" + names[0] if len(names) == 1 else None),
        k8s_wait.operand_pods(namespace),
        # Their pod templates say which taints the operands tolerate.
        k8s_wait.resource("daemonsets", "apps/v1", "daemonsets", namespace=namespace),
    ]


def wait(api, params):
    """(WaitResult, StepTimes) of the wait the options describe."""
    condition = readiness.operand_readiness_condition(
        params["namespace"], require_reconciled=params["require_reconciled"], names=params["names"],
        explicit=bool(params["label_selector"] or params["names"]), allow_no_nodes=params["allow_no_nodes"],
        images=params["images"])
    times = readiness.StepTimes()
    result = k8s_wait.Waiter(api, resources(params), params["timeout"]).wait(condition, times)
    return result, times


def report(result, times):
    detail = result.detail
    steps = []
    for timing in times.durations():
        step = dict(detail["steps"][timing["step"]], **timing)
        steps.append(step)
    images = readiness.operand_images(k8s_wait.objects(result.cache, "pods"), detail["nodes"])
    nodes = dict((name, dict(info, ready_after=times.node_done.get(name), images=images.get(name, {})))
                 for name, info in detail["nodes"].items())
    return dict(changed=False, steps=steps, step=detail["step"], nodes=nodes, skipped_nodes=detail["skipped"],
                lost_nodes=detail["lost"], daemonsets=detail["daemonsets"], operator_pods=detail["operator_pods"],
                elapsed=result.elapsed, api_requests=result.api_requests)


def timeout_message(result, timeout):
    detail = result.detail
    step = detail["step"]
    msg = "timed out after %ds at step %s: %s" % (timeout, step, detail["steps"][step]["message"])
    if step == readiness.STEP_OPERATOR and detail["operator_pods"]:
        msg += "; pods: " + "; ".join("%s: %s" % kv for kv in sorted(detail["operator_pods"].items()))
    if step == readiness.STEP_OPERANDS:
        stuck = []
        for name, info in sorted(detail["nodes"].items()):
            if info["ready"]:
                continue
            where = "%s (%s)" % (info["stuck_at"], info["layer"]) if info["stuck_at"] else info["layer"] or "?"
            stuck.append("%s at %s: %s" % (name, where, info["reason"]))
        if stuck:
            msg += "; stuck: " + "; ".join(stuck)
    if result.stale:
        msg += " (the API server was unreachable at the end; last known state)"
    return msg


def main():
    spec = connection_arg_spec()
    spec.update(
        namespace=dict(type="str", default=om.DEFAULT_NAMESPACE),
        require_reconciled=dict(type="bool", default=False),
        label_selector=dict(type="str"),
        names=dict(type="list", elements="str"),
        allow_no_nodes=dict(type="bool", default=False),
        images=dict(type="list", elements="raw"),
        timeout=dict(type="int", default=600),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    api, (result, times) = k8s_wait.run_checked(module, check_params, lambda api: wait(api, params),
                                                "waiting for the GPU Operator in %s" % params["namespace"])
    result_report = report(result, times)
    # Measured from the module's start, the calls after the wait included (docs/waits.md).
    result_report["elapsed"] = k8s_wait.elapsed(api)
    for skipped in result.detail["skipped"]:
        module.warn("GPU node %s is not waited for: %s" % (skipped["node"], skipped["reason"]))
    if result.done:
        module.exit_json(**result_report)
    msg = timeout_message(result, params["timeout"])
    if result.detail["step"] == readiness.STEP_OPERANDS:
        nodes = result.detail["nodes"]
        # A lost node's entry already says what became of it; node_check has nothing to add.
        stuck = sorted(n for n, info in nodes.items() if not info["ready"] and n not in result.detail["lost"])
        clusterpolicies = k8s_wait.objects(result.cache, "clusterpolicies")
        policy = node_check.policy_from_inputs(clusterpolicies, {"namespace": params["namespace"]})
        result_report["diagnosis"] = readiness.diagnose(
            k8s_wait.objects(result.cache, "nodes"), k8s_wait.objects(result.cache, "pods"), policy, stuck,
            daemonsets=k8s_wait.objects(result.cache, "daemonsets"),
            rollouts=dict((n, info["rollout"]) for n, info in nodes.items() if info.get("rollout")))
    module.fail_json(msg=msg, **result_report)


if __name__ == "__main__":
    main()
