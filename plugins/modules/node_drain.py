#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_drain
short_description: Drain a Kubernetes node as kubectl drain does, or uncordon it, through the API
version_added: 0.1.0
description:
  - With O(state=drained), cordons the node, evicts its pods through the Eviction API (asking again every 5 seconds
    while a PodDisruptionBudget refuses, HTTP 429) and watches them go, all within O(timeout).
  - Static (mirror) pods and DaemonSet pods stay, as with C(kubectl drain --ignore-daemonsets). A pod no controller owns
    is refused unless O(force), a pod with emptyDir data unless O(delete_emptydir_data); such refusals name each pod
    and come before anything changes.
  - With O(state=uncordoned), makes the node schedulable again (with O(mark), only a node a drain of ours cordoned).
  - The rke2 role drains a node before it restarts RKE2 on a new release when C(rke2_drain_on_upgrade) is set, and
    uncordons it once it is Ready on that release; on every run it lets go of a node an earlier run cordoned.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  name:
    description: The node.
    type: str
    required: true
  state:
    description: C(drained) or C(uncordoned).
    type: str
    choices: [drained, uncordoned]
    default: drained
  timeout:
    description: Seconds the whole drain may take (one deadline for the cordon, every eviction and the wait).
    type: int
    default: 600
  delete_emptydir_data:
    description: Evict pods with emptyDir volumes, whose data is lost.
    type: bool
    default: false
  force:
    description: Delete pods no controller owns, which nothing recreates.
    type: bool
    default: false
  mark:
    description:
      - What the cordon is for. With O(state=drained), a node this run cordons carries it in the annotation
        C(gpuplatform.rke2/cordoned-for); a node already cordoned is left as it is.
      - With O(state=uncordoned), only a node that carries this mark is uncordoned, and the mark removed, so a
        later run (also one after a failed drain) lets go of exactly the nodes a drain of ours cordoned, and a node
        someone else cordoned stays cordoned. Empty, any cordoned node is uncordoned.
    type: str
    default: ""
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
attributes:
  check_mode:
    details: Reports what a drain would cordon and evict; changes nothing.
"""

EXAMPLES = r"""
- name: Drain the node before its upgrade
  gpuplatform.rke2.node_drain:
    name: gpu-1
    timeout: 600
  delegate_to: localhost

- name: Let it take pods again
  gpuplatform.rke2.node_drain:
    name: gpu-1
    state: uncordoned
  delegate_to: localhost
"""

RETURN = r"""
cordoned:
  description: Whether this run cordoned the node.
  returned: always
  type: bool
evicted:
  description: The pods evicted, as namespace/name.
  returned: always
  type: list
  elements: str
skipped:
  description: The pods left on the node, with why (static, DaemonSet).
  returned: always
  type: dict
refused:
  description: The pods that stopped the drain before anything changed, with why.
  returned: always
  type: dict
elapsed:
  description: Seconds the module took.
  returned: always
  type: float
api_requests:
  description: Lists and watches made.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_drain
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec
from ansible_collections.gpuplatform.rke2.plugins.module_utils.rke2 import check_node_name


def check_params(params):
    try:
        check_node_name(params["name"], "name:")
    except ValueError as exc:
        return str(exc)
    if params["timeout"] < 0:
        return "timeout must be zero or more seconds, got %d" % params["timeout"]
    return None


def uncordon(api, name, mark, check_mode):
    nodes, _rv = api.list(k8s_wait.by_name("nodes", "v1", "nodes", name), k8s_wait.LIST_READ_TIMEOUT)
    schedule, clear = node_drain.uncordon_plan(nodes, name, mark)
    if (schedule or clear) and not check_mode:
        if clear:
            node_drain.requests_for(api).set_unschedulable(name, False, "")
        else:
            node_drain.requests_for(api).set_unschedulable(name, False)
    return {"changed": schedule or clear, "cordoned": False, "evicted": [], "skipped": {}, "refused": {},
            "done": True, "api_requests": {"list": 1, "watch": 0, "total": 1}}


def main():
    spec = connection_arg_spec()
    spec.update(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["drained", "uncordoned"], default="drained"),
        timeout=dict(type="int", default=600),
        delete_emptydir_data=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        mark=dict(type="str", default=""),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params

    def action(api):
        if params["state"] == "uncordoned":
            return uncordon(api, params["name"], params["mark"], module.check_mode)
        return node_drain.drain(api, params["name"], params["timeout"], params["delete_emptydir_data"],
                                params["force"], module.check_mode, params["mark"])

    api, result = k8s_wait.run_checked(module, check_params, action, "draining node %s" % params["name"])
    report = dict((k, result[k]) for k in ("changed", "cordoned", "evicted", "skipped", "refused", "api_requests"))
    report["elapsed"] = k8s_wait.elapsed(api)
    if result["refused"]:
        module.fail_json(msg=node_drain.refusal(params["name"], result["refused"]), **report)
    if not result["done"]:
        module.fail_json(msg=node_drain.not_drained_message(params["name"], result, params["timeout"]), **report)
    module.exit_json(**report)


if __name__ == "__main__":
    main()
