#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_driver_upgrade_wait
short_description: Wait until the GPU Operator's upgrade controller has upgraded the driver on every driver node
version_added: 0.1.0
description:
  - A driver version change is carried out by the GPU Operator's own upgrade controller, node by node, under the
    ClusterPolicy's C(driver.upgradePolicy) (C(autoUpgrade), C(maxParallelUpgrades), C(maxUnavailable), job waits,
    GPU pod deletion, drain). Each node shows where it stands in its label C(nvidia.com/gpu-driver-upgrade-state)
    (C(upgrade-required), C(cordon-required), C(wait-for-jobs-required), C(pod-deletion-required),
    C(drain-required), C(pod-restart-required), C(validation-required), C(uncordon-required), C(upgrade-done), or
    C(upgrade-failed)). This module follows that label on every driver node under one deadline.
  - Watches the nodes, the ClusterPolicy, and the DaemonSets and pods of the operator's namespace through the
    Kubernetes API (one list and one watch each, not polling).
  - The driver nodes are the nodes with a driver pod in O(namespace) (or O(names)); a node selected at any point of
    the wait stays wanted, so a node whose driver pod is deleted for its restart is still waited for.
  - Done means every driver node labelled C(upgrade-done) (or not labelled, which the controller turns into
    C(upgrade-done) itself) with a driver pod of its DaemonSet's current template Running and Ready, and every driver
    DaemonSet rolled out (kubernetes.core's C(daemonset_ready) rule) with a template of the driver version the
    ClusterPolicy asks for (or O(driver_version)). A C(upgrade-done) label from before the change, or a DaemonSet
    the operator has not updated yet, is never taken for done.
  - A driver node in C(upgrade-failed) ends the wait at once with a failure; the controller moves such a node on
    only once its driver pod is of the current revision and Ready, which it does not bring about itself. The message
    says the way on (move the GPU workloads off the node, then delete its old driver pod). A failed node whose driver
    pod is of the current revision and Ready again is waited for, since the controller moves it on at its next pass.
  - Counts the nodes in progress at once (every state but C(upgrade-required) and C(upgrade-done), as the
    controller counts them; a node cordoned before its upgrade aside, which the controller starts whatever the
    limit) against O(max_parallel_upgrades) (by default the ClusterPolicy's C(maxParallelUpgrades); 0 is no
    limit). More at once is reported in RV(parallel_excess) with a warning, and fails the wait with
    O(fail_on_parallel_excess). States that come and go within one burst of watch events may go unseen, so the count
    is a lower bound. The real controller itself passes the limit at times, since it leaves a node out of its count
    while that node's new driver pod is not scheduled yet, and may start another node then.
  - At a timeout or a failure it says per node where it stands and why (never picked up while its driver pod is of
    an old revision, waiting for an upgrade slot, a drain or a GPU pod eviction refused by a PodDisruptionBudget, a
    pod the drain refuses, a new driver pod that is not ready, validation pods not ready, how long it has been in
    its state), from one more list of the pods on each such node and of the PodDisruptionBudgets.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  namespace:
    description:
      - The GPU Operator's namespace, where its driver DaemonSets and pods run.
    type: str
    default: gpu-operator
  names:
    description:
      - Wait on these driver nodes only, instead of every node with a driver pod. The parallel count still takes in
        every node.
    type: list
    elements: str
  driver_version:
    description:
      - The driver version the driver DaemonSets must run (their driver container's image tag C(<version>-<os>), or a
        digest). By default the ClusterPolicy's C(driver.version).
    type: str
  max_parallel_upgrades:
    description:
      - The most driver nodes that may be in progress at once; 0 is no limit. By default the ClusterPolicy's
        C(driver.upgradePolicy.maxParallelUpgrades).
    type: int
  fail_on_parallel_excess:
    description:
      - Fail as soon as more nodes than O(max_parallel_upgrades) are seen in progress at once. Without it an excess is
        reported in RV(parallel_excess) with a warning, and the wait goes on.
    type: bool
    default: false
  timeout:
    description:
      - Seconds to wait in all.
    type: int
    default: 1800
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes.wait
notes:
  - The upgrade controller does not run with C(sandboxWorkloads.enabled=true) or with C(autoUpgrade) off; the driver
    DaemonSet's pods then stay of the old revision, and each node's reason says so.
  - Sources, gpu-operator v26.3.2 C(controllers/upgrade_controller.go) and the k8s-operator-libs C(pkg/upgrade)
    package it vendors (C(consts.go), C(common_manager.go), C(upgrade_inplace.go), C(pod_manager.go),
    C(drain_manager.go), C(validation_manager.go)).
"""

EXAMPLES = r"""
- name: Change the driver version, then wait for every node's upgrade
  gpuplatform.rke2.gpu_driver_upgrade_wait:
    driver_version: "580.105.08"
    timeout: 3600
  delegate_to: localhost

- name: Hold the controller to one node at a time
  gpuplatform.rke2.gpu_driver_upgrade_wait:
    max_parallel_upgrades: 1
    fail_on_parallel_excess: true
  delegate_to: localhost
"""

RETURN = r"""
nodes:
  description: Each driver node's upgrade state, driver pod and image, whether it is done, why not, the states seen
    during the wait and how long it has been in its state (seconds).
  returned: always
  type: dict
  sample: {"gpu-container-1": {"state": "upgrade-done", "done": true, "driver_pod": "nvidia-driver-daemonset-8xk2p",
           "image": "nvcr.io/nvidia/driver:580.105.08-ubuntu22.04", "pod_current": true, "pod_ready": true,
           "reason": null, "states_seen": ["upgrade-done", "upgrade-required", "cordon-required", "upgrade-done"],
           "in_state_for": 3.2}}
done_nodes:
  description: The driver nodes that are done.
  returned: always
  type: list
  elements: str
failed_nodes:
  description: The driver nodes labelled C(upgrade-failed).
  returned: always
  type: list
  elements: str
daemonsets:
  description: The driver DaemonSets that hold the upgrade up, with why (not rolled out, pods missing, another
    driver version).
  returned: always
  type: dict
max_parallel_upgrades:
  description: The limit the parallel count was held to (0, no limit).
  returned: always
  type: int
peak_in_progress:
  description: The most nodes seen in progress at once, and which.
  returned: always
  type: dict
  sample: {"count": 1, "nodes": ["gpu-container-2"]}
parallel_excess:
  description: Each distinct set of nodes seen in progress at once beyond the limit, with when (seconds into the wait).
  returned: always
  type: list
  elements: dict
  sample: [{"nodes": ["gpu-1", "gpu-2"], "limit": 1, "seconds": 42.5}]
driver_version:
  description: The driver version the DaemonSets were held to (O(driver_version), else the ClusterPolicy's), or null.
  returned: always
  type: str
elapsed:
  description: Seconds the wait took.
  returned: always
  type: float
api_requests:
  description: List and watch requests the wait made; it does not grow with the wait's length.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.gpu import driver_upgrade as du
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec


def check_params(params):
    """The first problem with the options, naming the key; None when they are fine."""
    if not params["namespace"]:
        return "namespace must not be empty"
    if params["timeout"] < 0:
        return "timeout must be zero or more seconds, got %d" % params["timeout"]
    if params["max_parallel_upgrades"] is not None and params["max_parallel_upgrades"] < 0:
        return "max_parallel_upgrades must be 0 (no limit) or more, got %d" % params["max_parallel_upgrades"]
    if params["names"] is not None and not all(params["names"]):
        return "names: node names must not be empty"
    if params["driver_version"] is not None and not params["driver_version"].strip():
        return "driver_version must not be empty"
    return None


def resources(params):
    namespace = params["namespace"]
    return [
        k8s_wait.resource("nodes", "v1", "nodes"),
        k8s_wait.resource("clusterpolicies", "/".join(om.CLUSTER_POLICY_API[:2]), om.CLUSTER_POLICY_API[2],
                          optional=True),
        k8s_wait.resource("daemonsets", "apps/v1", "daemonsets", namespace=namespace),
        k8s_wait.operand_pods(namespace),
    ]


def wait(api, params):
    """(WaitResult) of the wait the options describe."""
    condition = du.UpgradeCondition(params["namespace"], api.clock.now, names=params["names"],
                                    max_parallel=params["max_parallel_upgrades"], version=params["driver_version"],
                                    fail_on_parallel_excess=params["fail_on_parallel_excess"])
    return k8s_wait.Waiter(api, resources(params), params["timeout"]).wait(condition)


def examine(api, detail):
    """The pods on each node where the controller removes pods, and the PodDisruptionBudgets:
    one list each (sharing the wait's deadline), added to those nodes' reasons."""
    names = du.to_examine(detail)
    if not names:
        return
    pdbs, _version = api.list(k8s_wait.resource("pdbs", "policy/v1", "poddisruptionbudgets"),
                              k8s_wait.LIST_READ_TIMEOUT)
    pods_by_node = {}
    for name in names:
        pods, _version = api.list(k8s_wait.resource("node_pods", "v1", "pods", field_selector="spec.nodeName=" + name,
                                                    read_spec=True), k8s_wait.LIST_READ_TIMEOUT)
        pods_by_node[name] = [p for p in pods if (p.get("spec") or {}).get("nodeName") == name]
    du.add_blockers(detail, pods_by_node, pdbs)


def main():
    spec = connection_arg_spec()
    spec.update(
        namespace=dict(type="str", default=om.DEFAULT_NAMESPACE),
        names=dict(type="list", elements="str"),
        driver_version=dict(type="str"),
        max_parallel_upgrades=dict(type="int"),
        fail_on_parallel_excess=dict(type="bool", default=False),
        timeout=dict(type="int", default=1800),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    api, result = k8s_wait.run_checked(module, check_params, lambda api: wait(api, params),
                                       "waiting for the driver upgrade in %s" % params["namespace"])
    detail = result.detail
    report = dict(changed=False, nodes=detail["nodes"], done_nodes=detail["done_nodes"],
                  failed_nodes=detail["failed_nodes"], daemonsets=detail["daemonsets"],
                  max_parallel_upgrades=detail["max_parallel_upgrades"], peak_in_progress=detail["peak_in_progress"],
                  parallel_excess=detail["parallel_excess"], driver_version=detail["driver_version"],
                  api_requests=result.api_requests)
    if detail["parallel_excess"]:
        module.warn("more driver nodes in progress at once than maxParallelUpgrades: %s (%s)"
                    % (du.excess_text(detail["parallel_excess"]), du.EXCESS_CAUSE))
    if result.done and detail["verdict"] == "done":
        report["elapsed"] = k8s_wait.elapsed(api)
        module.exit_json(**report)

    if result.done:
        msg = "driver upgrade failed: %s" % detail["message"]
    else:
        msg = "timed out after %ds waiting for the driver upgrade: %s" % (params["timeout"], detail["message"])
        if result.stale:
            msg += " (the API server was unreachable at the end; last known state)"
    try:
        examine(api, detail)
    except k8s_wait.ApiError as exc:
        msg += "; no look at the pods on the nodes: %s" % exc
    text = du.failure_text(detail)
    if text:
        msg += ". " + text
    report["elapsed"] = k8s_wait.elapsed(api)
    module.fail_json(msg=msg, **report)


if __name__ == "__main__":
    main()
