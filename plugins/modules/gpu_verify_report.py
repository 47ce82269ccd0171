#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_verify_report
short_description: Write the GPU verification report (JSON, Markdown, HTML), per node and per layer
description:
  - Builds the ADR step 6 report from the registered results of M(gpuplatform.rke2.operand_readiness),
    M(gpuplatform.rke2.gpu_allocatable_wait), M(gpuplatform.rke2.cuda_sample) and M(gpuplatform.rke2.gpu_node_check),
    plus the host facts of M(gpuplatform.rke2.gpu_host_facts) when the preflight ran.
  - Each GPU node gets a state per layer, bottom up (hardware, host driver, driver, container runtime,
    device plugin, allocatable, CUDA sample) and its findings.
  - The Markdown and HTML pages read top down, at six nodes as at a thousand - a summary (GPU nodes by status;
    per layer and for the workload label, how many nodes are in each state and how many failing nodes it is the
    lowest broken layer of), the versions seen running (each node's kubelet, which on RKE2 is RKE2's version, the
    operator's image, the driver NVML reports, each operand's image, with node counts), how long each step took
    (the step gate's, the waits' and gpu_node_check's own C(elapsed); writing the report is not counted), the failing
    nodes by lowest broken layer with their diagnosis written out, the other findings, then every GPU node's row.
    The JSON holds all of it (C(overview), C(versions), C(failing_nodes), C(steps), C(elapsed), C(nodes)).
  - Writes C(gpu-verify.json), C(gpu-verify.md) and C(gpu-verify.html) in O(dest). The files always carry the
    latest run's timings; the task reports C(changed) only when the verdict or the per-node content changed
    (timestamps, durations and API request counts are not a change to the site).
  - With O(fail_on_failure), fails with the per-layer diagnosis after writing the report.
version_added: 0.1.0
author: gpuplatform.rke2 maintainers (@gpuplatform)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
options:
  site:
    description: The site's name.
    type: str
    required: true
  dest:
    description: Folder for the report files (created, mode 0755; files 0644).
    type: path
    required: true
  node_check:
    description:
      - The registered result of M(gpuplatform.rke2.gpu_node_check).
      - One of O(node_check) and O(node_check_file) is required.
    type: dict
  node_check_file:
    description:
      - The file M(gpuplatform.rke2.gpu_node_check) wrote its whole result to (its
        O(gpuplatform.rke2.gpu_node_check#module:result_file)), instead of O(node_check). At fleet scale that result
        is megabytes, which Ansible templates into this task's arguments in seconds.
    type: path
  operand_readiness:
    description: The registered result of M(gpuplatform.rke2.operand_readiness).
    type: dict
  allocatable:
    description: Registered results of M(gpuplatform.rke2.gpu_allocatable_wait), one per resource checked.
    type: list
    elements: dict
    default: []
  cuda_sample:
    description: The registered result of M(gpuplatform.rke2.cuda_sample).
    type: dict
  host_facts:
    description: Host facts per node name (the C(gpu_host) facts of M(gpuplatform.rke2.gpu_host_facts)).
    type: dict
    default: {}
  step_gate:
    description:
      - The registered result of M(gpuplatform.rke2.step_gate) for step 6, when the gate ran; its time is the
        first step's. Without it the step gate's row says C(not run).
    type: dict
  formats:
    description: Which files to write.
    type: list
    elements: str
    choices: [json, markdown, html]
    default: [json, markdown, html]
  fail_on_failure:
    description: Fail with the per-layer diagnosis when the verification did not pass.
    type: bool
    default: true
  return_report:
    description:
      - Return the whole report as C(report) as well as writing it. At a thousand nodes the report is megabytes,
        and Ansible copies a registered result into every later task of the play; the role sets this to C(false)
        and reads the files.
    type: bool
    default: true
attributes:
  check_mode:
    details: In check mode the report is built and returned, and no file is written.
"""

EXAMPLES = r"""
- name: Write the report and fail with the diagnosis if a layer is broken
  gpuplatform.rke2.gpu_verify_report:
    site: tirosh-home
    dest: "{{ playbook_dir }}/artifacts/tirosh-home"
    node_check: "{{ gpu_verify_node_check }}"
    operand_readiness: "{{ gpu_verify_operands }}"
    allocatable: "{{ gpu_verify_allocatable.results }}"
    cuda_sample: "{{ gpu_verify_cuda }}"
"""

RETURN = r"""
report:
  description: The report (what C(gpu-verify.json) holds).
  returned: success, with O(return_report)
  type: dict
passed:
  description: Whether every GPU node passed every layer and every step passed.
  returned: always
  type: bool
summary:
  description: One line for people.
  returned: always
  type: str
files:
  description: The files written.
  returned: always
  type: list
  elements: str
"""

import datetime
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import verify_report as vr

_WRITERS = (("json", "gpu-verify.json", vr.to_json), ("markdown", "gpu-verify.md", vr.to_markdown),
            ("html", "gpu-verify.html", vr.to_html))


def read_node_check_file(path):
    """gpu_node_check's result from the file it wrote; ValueError naming the option and the file."""
    try:
        with open(path) as handle:
            result = json.load(handle)
    except (IOError, OSError) as exc:
        raise ValueError("node_check_file: cannot read %s: %s" % (path, exc))
    except ValueError as exc:
        raise ValueError("node_check_file: %s is not JSON: %s" % (path, exc))
    if not isinstance(result, dict):
        raise ValueError("node_check_file: %s holds a %s, expected gpu_node_check's result (a mapping)"
                         % (path, type(result).__name__))
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            site=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            node_check=dict(type="dict"),
            node_check_file=dict(type="path"),
            operand_readiness=dict(type="dict"),
            allocatable=dict(type="list", elements="dict", default=[]),
            cuda_sample=dict(type="dict"),
            host_facts=dict(type="dict", default={}),
            step_gate=dict(type="dict"),
            formats=dict(type="list", elements="str", choices=["json", "markdown", "html"],
                         default=["json", "markdown", "html"]),
            fail_on_failure=dict(type="bool", default=True),
            return_report=dict(type="bool", default=True),
        ),
        mutually_exclusive=[["node_check", "node_check_file"]],
        required_one_of=[["node_check", "node_check_file"]],
        supports_check_mode=True,
    )
    p = module.params
    if p["node_check_file"]:
        try:
            p["node_check"] = read_node_check_file(p["node_check_file"])
        except ValueError as exc:
            module.fail_json(msg=str(exc))
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        report = vr.build_report(p["site"], p["node_check"], p["operand_readiness"], p["allocatable"],
                                 p["cuda_sample"], p["host_facts"], generated_at=now, step_gate=p["step_gate"])
    except ValueError as exc:
        # A result the report cannot read, named by option and field; nothing is written.
        module.fail_json(msg=str(exc))
    json_path = os.path.join(p["dest"], "gpu-verify.json")
    previous = None
    if os.path.exists(json_path):
        try:
            with open(json_path) as handle:
                previous = json.load(handle)
        except ValueError:
            previous = None
    changed = previous is None or vr.stable(previous) != vr.stable(report)
    files = []
    if not module.check_mode:
        if not os.path.isdir(p["dest"]):
            os.makedirs(p["dest"], 0o755)
        for name, filename, render in _WRITERS:
            if name in p["formats"]:
                path = os.path.join(p["dest"], filename)
                tmp = path + ".tmp"
                with open(tmp, "w") as handle:
                    handle.write(render(report))
                os.chmod(tmp, 0o644)
                os.rename(tmp, path)
                files.append(path)
    result = dict(changed=changed, passed=report["passed"], summary=report["summary"], files=files)
    if p["fail_on_failure"] and not report["passed"]:
        # The whole report is in the files; the failure carries the diagnosis, not the report again.
        module.fail_json(msg=vr.failure_message(report), **result)
    if p["return_report"]:
        result["report"] = report
    module.exit_json(**result)


if __name__ == "__main__":
    main()
