#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: step_gate
short_description: Refuse to start a site step whose predecessor is not verified
description:
  - The site follows the ADR's fixed order of seven steps. This module checks, on the live cluster, that the
    step before O(step) is verified, and fails with a message naming the step to run first and its make target.
  - Step 5 (GPU Operator) needs a reachable API and every inventory node registered and Ready.
    Step 6 (verification) also needs the GPU Operator HelmChart installed. Step 7 (Argo CD) also needs a
    passed verification report.
  - Read-only; runs the same in check mode.
version_added: 0.1.0
author: gpuplatform.rke2 maintainers (@gpuplatform)
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
options:
  step:
    description: The step about to start.
    type: int
    required: true
    choices: [5, 6, 7]
  site:
    description: The site's name, used in the message's make command.
    type: str
    required: true
  nodes:
    description: Kubernetes node names the inventory declares (servers and agents).
    type: list
    elements: str
    required: true
  helmchart_name:
    description: Name of the GPU Operator HelmChart.
    type: str
    default: gpu-operator
  helmchart_namespace:
    description: Namespace of the GPU Operator HelmChart.
    type: str
    default: kube-system
  verify_report:
    description: Path of the verification report (JSON) that step 6 writes; needed for step 7.
    type: path
  required_apis:
    description:
      - APIs the step needs, each a dict with C(api) (C(group/version/plural)) and C(provider) (the product that
        serves it, named in the refusal), for example C(argoproj.io/v1alpha1/applications) and C(Argo CD).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: GPU Operator needs a Ready cluster first
  gpuplatform.rke2.step_gate:
    step: 5
    site: tirosh-home
    nodes: "{{ groups['rke2_servers'] + groups['rke2_agents'] }}"
    kubeconfig: ~/.kube/config
"""

RETURN = r"""
message:
  description: Why the step may start, or which step to run first.
  returned: always
  type: str
observed:
  description: What the gate saw (API error, node states, HelmChart install state, verification report).
  returned: always
  type: dict
elapsed:
  description: Seconds the gate's reads took (the verification report shows it as the step gate's time).
  returned: always
  type: float
  sample: 0.41
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    from kubernetes.client import ApiException
    from urllib3.exceptions import HTTPError
    HAS_KUBERNETES = True
except ImportError:  # reported by main()
    HAS_KUBERNETES = False
    ApiException = HTTPError = Exception

from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import api_client, connection_arg_spec
from ansible_collections.gpuplatform.rke2.plugins.module_utils.site_steps import gate


def _node_states(core, names):
    states = dict((name, "missing") for name in names)
    for node in core.list_node().items:
        if node.metadata.name in states:
            ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
            states[node.metadata.name] = "Ready" if ready else "NotReady"
    return states


def _helmchart(custom, batch, name, namespace):
    from kubernetes.client import ApiException
    try:
        chart = custom.get_namespaced_custom_object("helm.cattle.io", "v1", namespace, "helmcharts", name)
    except ApiException as exc:
        if exc.status == 404:
            return {"installed": False, "reason": "HelmChart %s/%s does not exist" % (namespace, name)}
        raise
    status = chart.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return {"installed": False, "reason": "HelmChart %s failed: %s" % (name, cond.get("message"))}
    job_name = status.get("jobName")
    if not job_name:
        return {"installed": False, "reason": "helm-controller has not started the install Job of %s" % name}
    try:
        job = batch.read_namespaced_job(job_name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return {"installed": False, "reason": "install Job %s does not exist" % job_name}
        raise
    if not (job.status.succeeded or 0):
        return {"installed": False, "reason": "install Job %s has not succeeded" % job_name}
    return {"installed": True, "reason": "install Job %s succeeded" % job_name}


def _missing_apis(custom, required):
    """The entries of ``required`` whose resource the API server does not serve (a list
    of it answers 404)."""
    from kubernetes.client import ApiException
    missing = []
    for entry in required:
        group, version, plural = entry["api"].rsplit("/", 2)
        try:
            custom.list_cluster_custom_object(group, version, plural, limit=1)
        except ApiException as exc:
            if exc.status != 404:
                raise
            missing.append({"resource": "%s/%s %s" % (group, version, plural),
                            "provider": entry.get("provider") or group})
    return missing


def _report(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as handle:
        report = json.load(handle)
    return {"passed": bool(report.get("passed")), "path": path, "summary": report.get("summary", "")}


def main():
    argument_spec = connection_arg_spec()
    argument_spec.update(
        step=dict(type="int", required=True, choices=[5, 6, 7]),
        site=dict(type="str", required=True),
        nodes=dict(type="list", elements="str", required=True),
        helmchart_name=dict(type="str", default="gpu-operator"),
        helmchart_namespace=dict(type="str", default="kube-system"),
        verify_report=dict(type="path"),
        required_apis=dict(type="list", elements="dict", default=[]),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"))
    params = module.params
    for entry in params["required_apis"]:
        if not isinstance(entry.get("api"), str) or entry["api"].count("/") != 2:
            module.fail_json(msg="required_apis: each entry needs api: group/version/plural, got %r" % (entry,))
    observed = {"api_error": None, "nodes": {}, "helmchart": None, "verify_report": None, "missing_resources": []}
    started = time.monotonic()
    try:
        from kubernetes import client
        api = api_client(params)
        core = client.CoreV1Api(api)
        observed["nodes"] = _node_states(core, params["nodes"])
        if params["step"] >= 6:
            observed["helmchart"] = _helmchart(client.CustomObjectsApi(api), client.BatchV1Api(api),
                                               params["helmchart_name"], params["helmchart_namespace"])
        observed["missing_resources"] = _missing_apis(client.CustomObjectsApi(api), params["required_apis"])
    except (ValueError, OSError, ApiException, HTTPError) as exc:  # not reaching the API is the finding itself
        observed["api_error"] = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    if params["step"] == 7:
        try:
            observed["verify_report"] = _report(params["verify_report"])
        except (IOError, ValueError) as exc:
            module.fail_json(msg="cannot read verification report %s: %s" % (params["verify_report"], exc),
                             observed=observed)
    ok, message = gate(params["step"], observed, params["site"])
    elapsed = round(time.monotonic() - started, 3)
    if not ok:
        module.fail_json(msg=message, message=message, observed=observed, elapsed=elapsed)
    module.exit_json(changed=False, message=message, observed=observed, elapsed=elapsed)


if __name__ == "__main__":
    main()
