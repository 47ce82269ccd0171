#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: node_ready_wait
short_description: Wait until Kubernetes nodes are Ready, optionally on a given kubelet version
version_added: 0.1.0
description:
  - Watches the named Node objects through the Kubernetes API (one list and one watch, not polling) until each has
    registered and reports C(Ready=True), and, with O(kubelet_version), runs that kubelet version.
  - Rides through API server restarts (an RKE2 server restarting after an upgrade) within one overall O(timeout).
  - Fails at the deadline naming each node that is not ready and why (not registered, C(Ready=False) with the
    kubelet's reason, an old kubelet version).
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  names:
    description:
      - The node names to wait for.
    type: list
    elements: str
    required: true
  kubelet_version:
    description:
      - The kubelet version each node must report in C(status.nodeInfo.kubeletVersion); an RKE2 node reports the RKE2
        release, for example C(v1.34.1+rke2r1). Used to tell an upgraded node from one still running the old release.
    type: str
  without_cni:
    description:
      - >-
        For a cluster installed without a CNI (RKE2 C(cni: none)): a node also counts once its kubelet reports
        C(Ready=False) for the missing network plugin alone (C(KubeletNotReady), C(container runtime network not
        ready)), which is all such a node can reach before the site deploys its own CNI. Any other reason still
        counts as not ready.
    type: bool
    default: false
  etcd_voter:
    description:
      - The nodes are RKE2 servers, and each counts only once RKE2 also reports it a healthy voting etcd member (its
        C(EtcdIsVoter=True) condition, which RKE2's etcd member manager writes; C(False) while a learner, unhealthy or
        not a member). The rke2 role's quorum gate before and after a server restart.
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
"""

EXAMPLES = r"""
- name: Wait for the node this play installed
  gpuplatform.rke2.node_ready_wait:
    names: [tirosh-gpu-1]
    kubelet_version: v1.34.1+rke2r1
    context: tirosh-home
    timeout: 900
  delegate_to: localhost
"""

RETURN = r"""
nodes:
  description: The last state of each node.
  returned: always
  type: dict
  sample: {"tirosh-gpu-1": {"ready": true, "state": "Ready (kubelet v1.34.1+rke2r1)"}}
elapsed:
  description: Seconds the wait took.
  returned: always
  type: float
api_requests:
  description: List and watch requests the wait made.
  returned: always
  type: dict
  sample: {"list": 1, "watch": 1, "total": 2}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec
from ansible_collections.gpuplatform.rke2.plugins.module_utils.rke2 import check_node_name, nodes_ready, not_ready_message

NODES = "nodes"


def wait(api, names, kubelet_version, timeout, without_cni=False, etcd_voter=False):
    """Watch the nodes until ready or the deadline: (done, nodes_ready's states, WaitResult)."""
    if len(names) == 1:
        resources = [k8s_wait.by_name(NODES, "v1", "nodes", names[0])]
    else:
        resources = [k8s_wait.resource(NODES, "v1", "nodes")]

    def condition(cache):
        return nodes_ready(k8s_wait.objects(cache, NODES), names, kubelet_version, without_cni, etcd_voter)

    result = k8s_wait.Waiter(api, resources, timeout).wait(condition)
    return result.done, result.detail, result


def check_params(params):
    """The first problem with the options, naming the key; None when they are fine."""
    if not params["names"]:
        return "names must list at least one node"
    try:
        for name in params["names"]:
            check_node_name(name, "names:")
    except ValueError as exc:
        return str(exc)
    if params["timeout"] < 0:
        return "timeout must be zero or more seconds, got %d" % params["timeout"]
    return None


def main():
    spec = connection_arg_spec()
    spec.update(
        names=dict(type="list", elements="str", required=True),
        kubelet_version=dict(type="str"),
        without_cni=dict(type="bool", default=False),
        etcd_voter=dict(type="bool", default=False),
        timeout=dict(type="int", default=600),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    names = module.params["names"]
    api, (done, details, result) = k8s_wait.run_checked(
        module, check_params,
        lambda api: wait(api, names, module.params["kubelet_version"], module.params["timeout"],
                         module.params["without_cni"], module.params["etcd_voter"]),
        "waiting for nodes %s" % ", ".join(names or []))
    report = dict(changed=False, nodes=details, elapsed=k8s_wait.elapsed(api), api_requests=result.api_requests)
    if not done:
        module.fail_json(msg=not_ready_message(details, module.params["timeout"], result.stale), **report)
    module.exit_json(**report)


if __name__ == "__main__":
    main()
