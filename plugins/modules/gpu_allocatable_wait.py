#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_allocatable_wait
short_description: Wait until GPU nodes advertise an allocatable GPU resource
version_added: 0.1.0
description:
  - Watches Node objects through the Kubernetes API (one list and one watch, not polling; for a GPU Operator resource
    also the ClusterPolicy, the operand DaemonSets and the operand pods) until the selected nodes are Ready and
    advertise at least O(min_per_node) of O(resource) as allocatable, and returns as soon as they do.
  - By default the selected nodes are the GPU nodes on which the GPU Operator will run the device plugin that
    produces O(resource), the way the operator decides it (node labels and the ClusterPolicy, through the
    collection's operand model); GPU nodes left out (another workload config, the plugin switched off, a taint the
    operand DaemonSets do not tolerate, another MIG or vGPU profile) are returned in RV(skipped_nodes).
  - A node that joins during the wait is selected like the others.
  - A node selected at any point of the wait stays wanted. A GPU node deleted (and perhaps re-created), one whose NFD
    labels are pruned for a moment, or one no longer matching O(label_selector), keeps the wait going unless
    O(min_nodes) allows fewer nodes, and the message and RV(lost_nodes) name it with what became of it.
  - A node whose operands are paused (C(paused-for-driver-upgrade), C(paused-for-mig-change),
    C(paused-for-vgpu-change) deploy labels) is selected and does not count while paused, whatever it still
    advertises; nor does a vm-vgpu node whose C(nvidia.com/vgpu.config.state) is C(pending) or C(failed).
  - Where the GPU Operator manages the nodes (a ClusterPolicy exists), a node whose driver or container-runtime
    layer is broken does not count, whatever it advertises. A device plugin that registered keeps advertising its
    GPUs when the toolkit under it fails later, and no container can use them then.
  - Rides through API server restarts (the RKE2 restart the container toolkit causes) within one overall
    O(timeout). At the deadline it fails naming, for each node that is not ready, the lowest broken layer (node,
    driver, container-runtime, device-plugin, allocatable), the operand and the pod's reason.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  resource:
    description:
      - The extended resource to wait for, as nodes advertise it.
      - V(nvidia.com/gpu) for container nodes, C(nvidia.com/<PCI device>) for vm-passthrough nodes (for example
        V(nvidia.com/GA102GL_A10)), C(nvidia.com/<vGPU type>) for vm-vgpu nodes (for example
        V(nvidia.com/NVIDIA_A10-12Q)), or any other extended resource name together with O(label_selector) or
        O(names).
    type: str
    default: nvidia.com/gpu
  label_selector:
    description:
      - Wait on the nodes this label selector matches, instead of the default selection.
    type: str
  names:
    description:
      - Wait on these nodes, instead of the default selection; with O(label_selector), on the named nodes it matches.
      - A named node that is not in the cluster yet is waited for.
    type: list
    elements: str
  min_per_node:
    description:
      - How many of O(resource) each selected node must advertise.
    type: int
    default: 1
  min_nodes:
    description:
      - How many selected nodes must be ready; by default all of them, including every node selected earlier in the
        wait that is gone or left out now (RV(lost_nodes)).
    type: int
  allow_no_nodes:
    description:
      - Succeed at once when no node is selected. By default an empty selection keeps the module waiting (the
        operator may still be labelling GPU nodes) and fails at the deadline.
    type: bool
    default: false
  operator_namespace:
    description:
      - The GPU Operator's namespace. Its operand DaemonSets say which taints the operands tolerate (default
        selection), and its operand pods whether a node's driver and container runtime work and, at a timeout,
        which layer broke.
    type: str
    default: gpu-operator
  timeout:
    description:
      - Seconds to wait in all.
    type: int
    default: 300
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes.wait
notes:
  - A node counts only while its kubelet reports C(Ready=True), since GPUs on a NotReady node cannot be allocated.
"""

EXAMPLES = r"""
- name: Wait until every container GPU node advertises its GPUs
  gpuplatform.rke2.gpu_allocatable_wait:
    timeout: 600
  delegate_to: localhost

- name: Wait for two vGPU nodes with four A10-12Q vGPUs each
  gpuplatform.rke2.gpu_allocatable_wait:
    resource: nvidia.com/NVIDIA_A10-12Q
    min_per_node: 4
    min_nodes: 2
  delegate_to: localhost

- name: Wait for the node this play added
  gpuplatform.rke2.gpu_allocatable_wait:
    names: [tirosh-gpu-3]
    context: tirosh-home
  delegate_to: localhost
"""

RETURN = r"""
nodes:
  description: Each selected node's allocatable and capacity of O(resource), and whether it is ready.
  returned: always
  type: dict
  sample: {"gpu-container-1": {"allocatable": 2, "capacity": 2, "ready": true}}
ready_nodes:
  description: The selected nodes that are ready.
  returned: always
  type: list
  elements: str
  sample: ["gpu-container-1", "gpu-container-2"]
skipped_nodes:
  description: GPU nodes the default selection left out, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"node": "gpu-tainted-1", "reason": "taint dedicated=training:NoSchedule is not tolerated by the operand DaemonSets"}]
lost_nodes:
  description: Nodes selected earlier in the wait that are gone or left out now, with what became of them. Without
    O(min_nodes) the wait does not succeed while there is one.
  returned: always
  type: dict
  sample: {"gpu-container-2": "selected earlier in this wait, is gone from the cluster"}
diagnosis:
  description:
    - At a timeout, for each selected node that is not ready, its lowest broken layer, the operand and the reason,
      and every broken layer in C(layer_failures).
  returned: failure
  type: dict
  sample: {"gpu-container-2": {"workload_config": "container", "layer": "container-runtime",
           "operand": "container-toolkit", "reason": "CrashLoopBackOff", "layer_failures": []}}
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
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec


def check_params(params):
    """The first problem with the options, naming the key; None when they are fine."""
    resource = params["resource"]
    if readiness.resource_name_problem(resource):
        return readiness.resource_name_problem(resource)
    explicit = bool(params["label_selector"] or params["names"])
    if om.resource_workload_config(resource) is None and not explicit:
        return ("resource: %s is not a GPU Operator resource, so there is no default node selection for it: "
                "give label_selector or names" % resource)
    if params["min_per_node"] < 1:
        return "min_per_node must be 1 or more, got %d" % params["min_per_node"]
    if params["min_nodes"] is not None and params["min_nodes"] < 0:
        return "min_nodes must be 0 or more, got %d" % params["min_nodes"]
    if params["timeout"] < 0:
        return "timeout must be zero or more seconds, got %d" % params["timeout"]
    if params["names"] is not None and not all(params["names"]):
        return "names: node names must not be empty"
    return None


def resources(params):
    """What to watch: the nodes (by selector or name where the API can filter) and, for a
    GPU Operator resource, the ClusterPolicy, the operand DaemonSets and the operand pods,
    which decide the default selection and whether a node's runtime chain works."""
    names = params["names"] or []
    field_selector = "metadata.name=" + names[0] if len(names) == 1 else None
    result = [k8s_wait.resource("nodes", "v1", "nodes", label_selector=params["label_selector"],
                                field_selector=field_selector)]
    if om.resource_workload_config(params["resource"]) is not None:
        result.append(k8s_wait.resource("clusterpolicies", "/".join(om.CLUSTER_POLICY_API[:2]),
                                        om.CLUSTER_POLICY_API[2], optional=True))
        result.append(k8s_wait.resource("daemonsets", "apps/v1", "daemonsets", namespace=params["operator_namespace"]))
        result.append(k8s_wait.operand_pods(params["operator_namespace"]))
    return result


def wait(api, params):
    """(WaitResult, condition) of the wait the options describe."""
    condition = readiness.allocatable_condition(
        params["resource"], names=params["names"], explicit=bool(params["label_selector"] or params["names"]),
        min_per_node=params["min_per_node"], min_nodes=params["min_nodes"], allow_no_nodes=params["allow_no_nodes"],
        namespace=params["operator_namespace"])
    return k8s_wait.Waiter(api, resources(params), params["timeout"]).wait(condition)


def timeout_diagnosis(api, result, params):
    """Per-layer diagnosis of the nodes still waiting, from the watched operand pods, or
    from one list of them when they were not watched there or not fresh at the end (it
    shares the wait's deadline)."""
    detail = result.detail
    policy = readiness.policy_from_cache(result.cache, params["operator_namespace"])
    if policy["namespace"] == params["operator_namespace"] and "pods" in result.cache and "pods" not in result.stale:
        pods = k8s_wait.objects(result.cache, "pods")
    else:
        pods, _version = api.list(k8s_wait.operand_pods(policy["namespace"]), k8s_wait.LIST_READ_TIMEOUT)
    # A lost node's message already says what became of it; node_check has nothing to add.
    waiting = sorted(n for n in detail["waiting"] if n not in detail["lost"])
    return readiness.diagnose(k8s_wait.objects(result.cache, "nodes"), pods, policy, waiting,
                              params["resource"], params["min_per_node"], k8s_wait.objects(result.cache, "daemonsets"))


def main():
    spec = connection_arg_spec()
    spec.update(
        resource=dict(type="str", default=om.CONTAINER_RESOURCE),
        label_selector=dict(type="str"),
        names=dict(type="list", elements="str"),
        min_per_node=dict(type="int", default=1),
        min_nodes=dict(type="int"),
        allow_no_nodes=dict(type="bool", default=False),
        operator_namespace=dict(type="str", default=om.DEFAULT_NAMESPACE),
        timeout=dict(type="int", default=300),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    api, result = k8s_wait.run_checked(module, check_params, lambda api: wait(api, params),
                                       "waiting for allocatable %s" % params["resource"])
    detail = result.detail
    report = dict(changed=False, nodes=detail["nodes"], ready_nodes=detail["ready"], skipped_nodes=detail["skipped"],
                  lost_nodes=detail["lost"], elapsed=result.elapsed, api_requests=result.api_requests)
    if detail["skipped"]:
        for skipped in detail["skipped"]:
            module.warn("GPU node %s is not waited for: %s" % (skipped["node"], skipped["reason"]))
    if result.done:
        report["elapsed"] = k8s_wait.elapsed(api)
        module.exit_json(**report)

    msg = "timed out after %ds waiting for %s: %s" % (params["timeout"], params["resource"], detail["message"])
    if result.stale:
        msg += " (the API server was unreachable at the end; last known state)"
    try:
        diagnosis = timeout_diagnosis(api, result, params)
    except k8s_wait.ApiError as exc:
        report["elapsed"] = k8s_wait.elapsed(api)
        module.fail_json(msg="%s; no diagnosis: listing operand pods failed: %s" % (msg, exc), **report)
    if diagnosis:
        msg += ". " + readiness.diagnosis_text(diagnosis)
    report["elapsed"] = k8s_wait.elapsed(api)
    module.fail_json(msg=msg, diagnosis=diagnosis, **report)


if __name__ == "__main__":
    main()
