#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_node_check
short_description: Check every node's GPU Operator operands, their order and the resources it advertises
version_added: 0.1.0
description:
  - Answers, per node, three questions of a GPU incident. Does the node run every operand it should?
    Is its operand chain broken (an operand runs while one it depends on does not)? Does its workload
    label agree with the resources it advertises?
  - What a node should run is derived from its labels and the policy (ClusterPolicy or chart defaults,
    with the options of this module on top), never from DaemonSet status counts, so a tainted or freshly
    joined node shows up as missing instead of dropping out of the count.
  - Reads the live cluster through the connection options, or snapshot files (O(snapshot)). Read-only;
    runs normally in check mode.
  - Fails when a finding has severity C(error), unless O(fail_on_findings=false).
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
options:
  snapshot:
    description:
      - JSON or YAML files holding what C(kubectl get nodes,pods,daemonsets -A -o json) prints (a v1 C(List)),
        optionally with C(ClusterPolicy) objects (C(kubectl get clusterpolicies -o json)), in one file or several.
      - When given, the cluster is not contacted; mutually exclusive with the connection options.
      - Fields the API may leave out may be absent or null. A file that is neither JSON nor YAML, or an object with
        a field of another shape than the API's, fails the task before any check, naming the file's line or the
        object and the field, for example C(nodes[3] gpu-1) and C(metadata.labels is a list, expected a mapping).
    type: list
    elements: path
  nodes:
    description:
      - Limit the report to these nodes. A name that is not in the cluster is an error.
    type: list
    elements: str
  isolated_nodes:
    description:
      - The nodes the inventory leaves out of the GPU layer (C(gpu_node_isolated)), for the time before the
        gpu_node_labels role has set C(nvidia.com/gpu.deploy.operands=false) on them. On such a node, operands
        that a taint keeps off are reported as warnings, not errors; on any other GPU node a taint the operand
        DaemonSets do not tolerate is an error (C(untolerated-taint), and each missing operand).
    type: list
    elements: str
    default: []
  sandbox_workloads_enabled:
    description:
      - Whether sandbox (VM) workloads are enabled, as C(sandboxWorkloads.enabled).
      - Defaults to the ClusterPolicy's value, else to the chart default (false).
    type: bool
  default_workload:
    description:
      - The workload config of a GPU node without C(nvidia.com/gpu.workload.config), as
        C(sandboxWorkloads.defaultWorkload).
      - Defaults to the ClusterPolicy's value, else to C(container).
    type: str
    choices: [container, vm-passthrough, vm-vgpu]
  driver_enabled:
    description:
      - Whether the operator manages the driver (C(driver.enabled)); false means a host driver satisfies
        the chain.
      - Defaults to the ClusterPolicy's value, else to the chart default (true).
    type: bool
  toolkit_enabled:
    description:
      - Whether the operator manages the container toolkit (C(toolkit.enabled)); false means the host
        runtime satisfies the chain.
      - Defaults to the ClusterPolicy's value, else to the chart default (true).
    type: bool
  namespace:
    description:
      - The namespace of the operand pods.
      - Defaults to the ClusterPolicy's C(status.namespace), else (snapshots) to the namespace of the operand
        DaemonSets, else to C(gpu-operator).
    type: str
  fail_on_findings:
    description:
      - Fail when any finding has severity C(error). With V(false) the findings are only returned.
    type: bool
    default: true
  result_file:
    description:
      - Write the whole result (what the module would return) as JSON to this file (mode 0644, its folder created)
        and return only RV(summary), RV(elapsed) and RV(result_file). At fleet scale the result is about 1 KB per
        node, which Ansible would otherwise register and copy into every later task that reads it
        (M(gpuplatform.rke2.gpu_verify_report) reads the file with its
        O(gpuplatform.rke2.gpu_verify_report#module:node_check_file)).
      - The file is the module's output, not state it manages. It is written on every run and the task still
        reports no change. In check mode nothing is written and the whole result is returned.
    type: path
notes:
  - Live mode reads nodes, the pods and DaemonSets of the operand namespace, and ClusterPolicies
    (none when the CRD is not installed). It needs list permission on those and nothing else.
  - "Finding codes: C(missing-operand), C(order-violation), C(unexpected-operand), C(resource-mismatch),
    C(mixed-workload), C(label-ignored), C(unknown-workload-config), C(untolerated-taint), C(operand-paused)
    (a warning: a deploy label at C(paused-for-driver-upgrade), C(paused-for-mig-change) or
    C(paused-for-vgpu-change), a transient state of a working node), C(vgpu-config)
    (C(nvidia.com/vgpu.config.state) C(failed), an error, or C(pending), a warning).
    See docs/operand-model.md for which operands each workload config runs."
  - "An expected operand whose deploy label is absent is missing (an error): the operator does not put a
    removed deploy label back, so the fix is to set it to C(true)."
"""

EXAMPLES = r"""
- name: Check the GPU nodes of the cluster
  gpuplatform.rke2.gpu_node_check:
    kubeconfig: /etc/rancher/rke2/rke2.yaml
  register: gpu_check

- name: Check a snapshot taken during an incident, report only
  gpuplatform.rke2.gpu_node_check:
    snapshot:
      - incident/nodes-pods-daemonsets.json
      - incident/clusterpolicy.json
    fail_on_findings: false
  register: gpu_check

- name: Show the first broken layer of each failing node
  ansible.builtin.debug:
    msg: "{{ item.key }}: {{ item.value.layer_failures | first | default('no layer failure') }}"
  loop: "{{ gpu_check.nodes | dict2items | rejectattr('value.ok') }}"
"""

RETURN = r"""
findings:
  description: What is wrong, one entry per node and problem, in node order.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node.
      type: str
    code:
      description: The kind of finding.
      type: str
      sample: order-violation
    severity:
      description: C(error) (fails the module) or C(warning).
      type: str
    operand:
      description: The operand concerned, when there is one.
      type: str
      returned: when the finding is about one operand
    message:
      description: What is wrong, in words.
      type: str
      sample: device-plugin runs while container-toolkit, which it depends on, does not (CrashLoopBackOff)
nodes:
  description: The report of each node, by name.
  returned: always
  type: dict
  sample:
    gpu-container-1:
      node: gpu-container-1
      gpu_node: true
      workload_config: container
      workload_label: container
      expected_operands: [driver, container-toolkit, operator-validator, device-plugin, dcgm-exporter,
                          gpu-feature-discovery]
      running_operands: [driver, container-toolkit, operator-validator, device-plugin, dcgm-exporter,
                         gpu-feature-discovery]
      not_running: {}
      operand_states: {driver: expected, container-toolkit: expected}
      advertised: {nvidia.com/gpu: 2}
      capacity: {nvidia.com/gpu: 2}
      untolerated_taints: []
      paused_operands: {}
      unlabelled_operands: []
      vgpu_config_state: null
      kubelet_version: v1.34.1+rke2r1
      layer_failures: []
      codes: []
      ok: true
  contains:
    gpu_node:
      description: Whether the node has GPUs (C(nvidia.com/gpu.present) or an NFD NVIDIA PCI label).
      type: bool
    workload_config:
      description: The workload config the operator applies to the node; null for non-GPU nodes.
      type: str
    workload_label:
      description: The raw value of C(nvidia.com/gpu.workload.config), or null.
      type: str
    expected_operands:
      description: The operands that should run on the node, in the order they come up.
      type: list
      elements: str
    running_operands:
      description: Operands with a Running, Ready, non-terminating pod on the node.
      type: list
      elements: str
    not_running:
      description: Each expected operand that is not running, with why (C(no pod), C(CrashLoopBackOff),
        C(Pending) with the scheduler's message, C(Terminating), the init container a pod waits in and the
        validator status file it waits for, an absent deploy label, a pause, ...).
      type: dict
    operand_states:
      description: The state of each operand that concerns the node's workload config
        (C(expected), C(paused), C(host), C(off), C(disabled), C(isolated)).
      type: dict
    paused_operands:
      description: The expected operands whose deploy label holds a pause value, with that value.
      type: dict
    unlabelled_operands:
      description: The expected operands whose deploy label is absent (each is missing).
      type: list
      elements: str
    vgpu_config_state:
      description: C(nvidia.com/vgpu.config.state) of a vm-vgpu node, or null.
      type: str
    kubelet_version:
      description: The node's C(status.nodeInfo.kubeletVersion); on an RKE2 node, RKE2's version.
      type: str
    advertised:
      description: The node's C(nvidia.com/*) allocatable resources, as ints.
      type: dict
    capacity:
      description: The node's C(nvidia.com/*) capacity, as ints.
      type: dict
    untolerated_taints:
      description: Taints that keep operand pods off the node.
      type: list
      elements: str
    layer_failures:
      description: The broken layers, bottom up (C(driver), C(container-runtime), C(device-plugin),
        C(allocatable)), each with C(layer), C(operand) and C(reason).
      type: list
      elements: dict
    codes:
      description: The codes of the node's findings.
      type: list
      elements: str
    ok:
      description: Whether the node has no error finding.
      type: bool
policy:
  description: The effective policy the check used (ClusterPolicy or chart defaults plus options).
  returned: always
  type: dict
  sample:
    namespace: gpu-operator
    sandbox_workloads_enabled: true
    default_workload: container
    driver_enabled: true
    toolkit_enabled: true
images:
  description:
    - The images that run, for the verification report's versions. C(operator) counts the operator's pods by image
      (label C(app=gpu-operator)); C(operands) counts, per operand, the GPU nodes whose
      pod runs each image. The first container of each pod, which is the operand's own; terminating pods are
      left out.
  returned: always
  type: dict
  sample:
    operator: {"nvcr.io/nvidia/gpu-operator:v26.3.2": 1}
    operands:
      container-toolkit: {"nvcr.io/nvidia/k8s/container-toolkit:v1.18.1": 5}
      device-plugin: {"nvcr.io/nvidia/k8s-device-plugin:v0.18.1": 5}
elapsed:
  description: Seconds the check took (reading the cluster or the snapshot, and checking).
  returned: always
  type: float
result_file:
  description: The file that holds the whole result (O(result_file)); the other keys but RV(summary) and RV(elapsed)
    are only there.
  returned: when O(result_file) is given and not in check mode
  type: str
summary:
  description: Counts of nodes and findings.
  returned: always
  type: dict
  sample: {nodes: 6, gpu_nodes: 5, ok_nodes: 4, errors: 3, warnings: 0, by_code: {missing-operand: 1, order-violation: 2}}
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuplatform.rke2.plugins.module_utils import file_write
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import (
    CONNECTION_ARG_SPEC,
    api_client,
    connection_arg_spec,
)

try:
    from kubernetes import client as k8s_client
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError
except ImportError:  # pragma: no cover - api_client() reports the missing client
    k8s_client = None

    class ApiException(Exception):
        """Stands in for the client's exception; nothing raises it without the client."""

    class HTTPError(Exception):
        """Stands in for urllib3's; nothing raises it without the client."""

POLICY_OPTIONS = ("namespace", "sandbox_workloads_enabled", "default_workload", "driver_enabled", "toolkit_enabled")
# Big clusters are listed in pages, so that neither side holds one huge response.
PAGE_SIZE = 500


def argument_spec():
    spec = connection_arg_spec()
    spec.update(
        snapshot=dict(type="list", elements="path"),
        nodes=dict(type="list", elements="str"),
        isolated_nodes=dict(type="list", elements="str", default=[]),
        sandbox_workloads_enabled=dict(type="bool"),
        default_workload=dict(type="str", choices=list(operand_model.WORKLOAD_CONFIGS)),
        driver_enabled=dict(type="bool"),
        toolkit_enabled=dict(type="bool"),
        namespace=dict(type="str"),
        fail_on_findings=dict(type="bool", default=True),
        result_file=dict(type="path"),
    )
    return spec


MUTUALLY_EXCLUSIVE = [["snapshot", option] for option in CONNECTION_ARG_SPEC]


def load_snapshot(paths):
    documents = []
    for path in paths:
        try:
            with open(path) as handle:
                text = handle.read()
        except (IOError, OSError) as exc:
            raise ValueError("cannot read snapshot %s: %s" % (path, exc))
        documents.extend(node_check.parse_documents(text, path))
    return node_check.split_snapshot(documents)


def _list_all(call, *args, **options):
    """Every item of a list call, page by page; items as the API's JSON (camelCase),
    read raw rather than through the client's models, which costs much more.
    ``object_hook``: how the objects are decoded (by default without managedFields, which
    the check never reads: half of what a pod takes in memory)."""
    object_hook = options.get("object_hook", k8s_wait.without_managed_fields)
    items, token = [], None
    while True:
        kwargs = {"limit": PAGE_SIZE, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        page = json.loads(call(*args, **kwargs).data, object_hook=object_hook)
        items.extend(page.get("items") or ())
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


def read_cluster(params, overrides):
    """(snapshot, policy) from the live cluster: ClusterPolicies first, for the operand
    namespace, then nodes and that namespace's pods and DaemonSets."""
    client = api_client(params)
    group, version, plural = operand_model.CLUSTER_POLICY_API
    what = "clusterpolicies.%s" % group
    try:
        try:
            clusterpolicies = _list_all(k8s_client.CustomObjectsApi(client).list_cluster_custom_object,
                                        group, version, plural)
        except ApiException as exc:
            if exc.status != 404:
                raise
            clusterpolicies = []  # the CRD is not installed: chart defaults apply
        policy = node_check.policy_from_inputs(clusterpolicies, overrides)
        core = k8s_client.CoreV1Api(client)
        what = "nodes"
        nodes = _list_all(core.list_node)
        what = "pods in %s" % policy["namespace"]
        pods = _list_all(core.list_namespaced_pod, policy["namespace"], object_hook=k8s_wait.with_pod_spec_read)
        what = "daemonsets in %s" % policy["namespace"]
        daemonsets = _list_all(k8s_client.AppsV1Api(client).list_namespaced_daemon_set, policy["namespace"])
    except ApiException as exc:
        raise ValueError("cannot list %s: %s %s" % (what, exc.status, exc.reason))
    except HTTPError as exc:
        raise ValueError("cannot list %s: %s" % (what, exc))
    finally:
        client.close()
    snapshot = dict(nodes=nodes, pods=pods, daemonsets=daemonsets, clusterpolicies=clusterpolicies)
    return snapshot, policy


def run(params):
    """The module's result (without ``changed``) for its parameters; ValueError names bad
    input. The CLI ``scripts/gpu-node-check`` calls this too."""
    started = time.monotonic()
    overrides = dict((key, params.get(key)) for key in POLICY_OPTIONS)
    with node_check.paused_gc():
        if params.get("snapshot"):
            snapshot = load_snapshot(params["snapshot"])
            policy = node_check.policy_from_inputs(snapshot["clusterpolicies"], overrides, snapshot["daemonsets"])
        else:
            snapshot, policy = read_cluster(params, overrides)
        result = node_check.check(snapshot, policy, params.get("nodes"), params.get("isolated_nodes") or ())
        # Freed while the collector is still paused: its first run afterwards would walk
        # every object allocated meanwhile, the whole snapshot included.
        del snapshot
    result["elapsed"] = round(time.monotonic() - started, 3)
    return result


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=MUTUALLY_EXCLUSIVE,
        supports_check_mode=True,
    )
    try:
        result = run(module.params)
    except (ValueError, KeyError) as exc:
        module.fail_json(msg=str(exc).strip("'\""))
    failure = node_check.failure_message(result) if module.params["fail_on_findings"] and result["summary"]["errors"] else None
    if module.params["result_file"] and not module.check_mode:
        path = module.params["result_file"]
        try:
            file_write.write_atomically(module, path, json.dumps(result, sort_keys=True), 0o644)
        except (IOError, OSError) as exc:
            module.fail_json(msg="result_file: cannot write %s: %s" % (path, exc), summary=result["summary"])
        result = dict(summary=result["summary"], elapsed=result["elapsed"], result_file=path)
    if failure:
        module.fail_json(msg=failure, changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
