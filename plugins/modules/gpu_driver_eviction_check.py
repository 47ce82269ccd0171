#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_driver_eviction_check
short_description: Before a driver change, find the pods on driver nodes whose eviction a PodDisruptionBudget refuses
version_added: 0.1.0
description:
  - A change of the driver's version, image or driver manager is carried out by the GPU Operator's upgrade controller,
    node by node. On each node it evicts the GPU pods through the Eviction API (C(pod-deletion-required)) and, with
    C(driver.upgradePolicy.drain.enable), drains the node. An eviction that a PodDisruptionBudget refuses is asked
    for again and again without a pause (k8s-operator-libs builds kubectl's drain helper without
    C(EvictErrorRetryDelay)) until the timeout, and then the node is C(upgrade-failed), cordoned, with its old
    driver; the controller never retries it.
  - This module looks before the change. It lists the driver pods of O(namespace) (the nodes the controller
    upgrades), the PodDisruptionBudgets of the cluster, and the pods of each namespace where a budget allows no
    disruption now; it returns, per driver node, each pod the controller will remove whose eviction a budget refuses.
  - Reads only. One list of the driver pods, one of the budgets, one of the pods of each namespace with a budget that
    refuses, and one of the ClusterPolicies.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  namespace:
    description:
      - The GPU Operator's namespace, where its driver pods run.
    type: str
    default: gpu-operator
  drain:
    description:
      - Whether the controller also drains the nodes, so that every pod it drains counts, not only the GPU pods. By
        default that of O(values), else the running ClusterPolicy's C(driver.upgradePolicy.drain.enable).
    type: bool
  values:
    description:
      - The chart values the change delivers (a HelmChart's C(valuesContent) as data). The drain and the timeouts
        the controller will keep to are then theirs (C(driver.upgradePolicy.gpuPodDeletion) and C(.drain), the
        chart's defaults where they say nothing), not the running ClusterPolicy's, which the change replaces.
    type: dict
  fail_on_refusal:
    description:
      - Fail when a pod's eviction would be refused. Without it the refusals are returned with a warning.
    type: bool
    default: false
  timeout:
    description:
      - Seconds for every request together.
    type: int
    default: 60
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
attributes:
  check_mode:
    details: Reads only; it runs in check mode too.
notes:
  - A pod the controller removes is a Running or Pending pod that asks for C(nvidia.com/gpu*) or C(nvidia.com/mig-*)
    (C(gpuPodSpecFilter)); with the drain, also every pod that is not a DaemonSet's, a static pod, or labelled
    C(nvidia.com/gpu-driver-upgrade-drain.skip=true). A budget refuses while its C(status.disruptionsAllowed) is 0.
  - Sources, gpu-operator C(cmd/gpu-operator/main.go) and the k8s-operator-libs C(pkg/upgrade) package it vendors
    (C(pod_manager.go), C(drain_manager.go)); C(k8s.io/kubectl/pkg/drain/drain.go).
seealso:
  - module: gpuplatform.rke2.gpu_driver_upgrade_wait
"""

EXAMPLES = r"""
- name: Before the driver change, refuse it while a budget would hold a GPU pod
  gpuplatform.rke2.gpu_driver_eviction_check:
    fail_on_refusal: true
  delegate_to: localhost
"""

RETURN = r"""
refused:
  description: Per driver node, each pod the controller will remove whose eviction a PodDisruptionBudget refuses now.
  returned: always
  type: dict
  sample: {"gpu-container-2": ["team/trainer-0: eviction refused by PodDisruptionBudget team/trainer (disruptionsAllowed
           0, 1 of 1 desired healthy)"]}
driver_nodes:
  description: The nodes with a driver pod, the ones the controller upgrades.
  returned: always
  type: list
  elements: str
drain:
  description: Whether the drain's pods were counted.
  returned: always
  type: bool
pod_deletion_timeout:
  description: The C(podDeletion.timeoutSeconds) of O(values), else of the ClusterPolicy (the chart's
    C(gpuPodDeletion)); 0 is none.
  returned: always
  type: int
drain_timeout:
  description: The C(drain.timeoutSeconds) of O(values), else of the ClusterPolicy, or null when the drain is off.
  returned: always
  type: int
elapsed:
  description: Seconds the check took.
  returned: always
  type: float
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
    if params["timeout"] <= 0:
        return "timeout must be more than 0 seconds, got %d" % params["timeout"]
    return None


def look(api, params):
    """(driver pods and the pods of each namespace where a budget refuses, the budgets, the
    ClusterPolicy or None), each one list within the deadline."""
    key, value = du.DRIVER.pod_selector
    driver_pods, _version = api.list(k8s_wait.resource(
        "driver_pods", "v1", "pods", namespace=params["namespace"], label_selector="%s=%s" % (key, value),
        read_spec=True), k8s_wait.LIST_READ_TIMEOUT)
    pdbs, _version = api.list(k8s_wait.resource("pdbs", "policy/v1", "poddisruptionbudgets"),
                              k8s_wait.LIST_READ_TIMEOUT)
    policies, _version = api.list(k8s_wait.resource(
        "clusterpolicies", "/".join(om.CLUSTER_POLICY_API[:2]), om.CLUSTER_POLICY_API[2], optional=True),
        k8s_wait.LIST_READ_TIMEOUT)
    pods = {}
    for namespace in du.refusing_namespaces(pdbs):
        listed, _version = api.list(k8s_wait.resource("pods_" + namespace, "v1", "pods", namespace=namespace,
                                                      read_spec=True), k8s_wait.LIST_READ_TIMEOUT)
        pods.update((_key(p), p) for p in listed)
    pods.update((_key(p), p) for p in driver_pods)
    return list(pods.values()), pdbs, (sorted(policies, key=_key) or [None])[0]


def _key(obj):
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def main():
    spec = connection_arg_spec()
    spec.update(
        namespace=dict(type="str", default=om.DEFAULT_NAMESPACE),
        drain=dict(type="bool"),
        fail_on_refusal=dict(type="bool", default=False),
        timeout=dict(type="int", default=60),
        values=dict(type="dict"),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    api, (pods, pdbs, policy) = k8s_wait.run_checked(
        module, check_params, lambda api: look(api, params),
        "looking for evictions a PodDisruptionBudget refuses in %s" % params["namespace"])
    deletion_timeout, drain_timeout = du.deletion_timeouts(
        du.policy_of_values(params["values"]) if params["values"] is not None else policy)
    drain = params["drain"] if params["drain"] is not None else drain_timeout is not None
    refused = du.refused_evictions(pods, pdbs, params["namespace"], drain=drain)
    report = dict(changed=False, refused=refused, driver_nodes=du.driver_nodes(pods, params["namespace"]),
                  drain=drain, pod_deletion_timeout=deletion_timeout, drain_timeout=drain_timeout,
                  elapsed=k8s_wait.elapsed(api))
    if not refused:
        module.exit_json(**report)
    text = du.refusal_text(refused, deletion_timeout, drain_timeout if drain else None)
    if params["fail_on_refusal"]:
        module.fail_json(msg=text, **report)
    module.warn(text)
    module.exit_json(**report)


if __name__ == "__main__":
    main()
