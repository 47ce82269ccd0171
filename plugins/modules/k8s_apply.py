#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_apply
short_description: Server-side apply or delete Kubernetes manifests
version_added: 0.1.0
description:
  - Applies manifests with Kubernetes server-side apply under one field manager, or deletes them, through the
    official kubernetes Python client's dynamic client.
  - Reports C(changed) only when the API server changed the object (its resourceVersion moved); in check mode
    the apply is a server-side dry run (C(dryRun=All)) and C(changed) says whether the object the server would
    store differs from the live one.
  - With C(--diff), shows each object before and after (without managedFields, status and bookkeeping).
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: A server-side dry run (C(dryRun=All)); nothing is stored.
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  definition:
    description:
      - The objects, as a map, a list of maps, or YAML text (several documents allowed).
    type: raw
  src:
    description:
      - A YAML file with the objects (several documents allowed), read on the controller or host the module runs on.
    type: path
  state:
    description:
      - C(present) applies the objects; C(absent) deletes them (in reverse order).
    type: str
    choices: [present, absent]
    default: present
  field_manager:
    description:
      - The server-side apply field manager.
    type: str
    default: gpuplatform.rke2
  force_conflicts:
    description:
      - Take over fields another manager owns instead of failing with a conflict.
    type: bool
    default: false
  wait:
    description:
      - With O(state=absent), return only once the API server no longer has any of the objects (their
        finalizers ran; for a HelmChart, helm-controller's uninstall Job). Watches through the collection's
        watch engine (module_utils C(k8s_wait)), riding through API server restarts; it serves custom
        resources, nodes and pods.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds O(wait) waits for all objects together.
    type: int
    default: 300
"""

EXAMPLES = r"""
- name: Apply the GPU Operator HelmChart
  gpuplatform.rke2.k8s_apply:
    src: sites/tirosh-home/rke2/gpu-operator.helmchart.yaml
    force_conflicts: true
    kubeconfig: ~/.kube/config
    context: tirosh-home

- name: Remove it and wait until helm-controller uninstalled the release
  gpuplatform.rke2.k8s_apply:
    definition:
      apiVersion: helm.cattle.io/v1
      kind: HelmChart
      metadata: {name: gpu-operator, namespace: kube-system}
    state: absent
    wait: true
"""

RETURN = r"""
results:
  description: One entry per object, in the order handled.
  returned: always
  type: list
  elements: dict
  contains:
    object:
      description: Kind and namespace/name.
      type: str
      sample: HelmChart kube-system/gpu-operator
    action:
      description: C(created), C(updated), C(unchanged), C(deleted) or C(absent).
      type: str
    changed:
      description: Whether this object changed (or would, in check mode).
      type: bool
    resource_version:
      description: The object's resourceVersion after the apply (null after a delete or a dry run of a create).
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import manifest_yaml
from ansible_collections.gpuplatform.rke2.plugins.module_utils import server_side_apply as ssa
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import api_client, connection_arg_spec

try:
    from kubernetes.dynamic import DynamicClient
except ImportError:  # pragma: no cover - api_client reports the missing client
    DynamicClient = None


def objects_from(definition, src_text=None):
    """The objects of ``definition`` (map, list or YAML text) or of a file's text."""
    if src_text is not None:
        return manifest_yaml.load_all(src_text)
    if isinstance(definition, str):
        return manifest_yaml.load_all(definition)
    if isinstance(definition, dict):
        return [definition]
    return list(definition or [])


def run(client, objects, state, field_manager, force_conflicts, check_mode):
    """(changed, results, diffs, deleted targets) for the objects; raises ssa.ApplyError."""
    results, diffs = [], []
    if state == "present":
        outcomes = [ssa.apply_object(client, obj, field_manager, force_conflicts, check_mode) for obj in objects]
    else:
        outcomes = [ssa.delete_object(client, obj, check_mode) for obj in reversed(objects)]
    for outcome in outcomes:
        after = outcome["after"]
        results.append({"object": outcome["object"], "action": outcome["action"], "changed": outcome["changed"],
                        "resource_version": None if check_mode else (after or {}).get("metadata", {}).get(
                            "resourceVersion")})
        if outcome["changed"]:
            diffs.append({
                "before": manifest_yaml.dump(ssa.for_diff(outcome["before"])) if outcome["before"] else "",
                "after": manifest_yaml.dump(ssa.for_diff(after)) if after else "",
                "before_header": "%s (live)" % outcome["object"],
                "after_header": "%s (%s)" % (outcome["object"], "deleted" if state == "absent" else "applied"),
            })
    deleted = [o["target"] for o in outcomes if o["action"] == "deleted"]
    return any(r["changed"] for r in results), results, diffs, deleted


def main():
    argument_spec = connection_arg_spec()
    argument_spec.update(
        definition=dict(type="raw"),
        src=dict(type="path"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        field_manager=dict(type="str", default=ssa.FIELD_MANAGER),
        force_conflicts=dict(type="bool", default=False),
        wait=dict(type="bool", default=False),
        wait_timeout=dict(type="int", default=300),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True,
                           mutually_exclusive=[("definition", "src")], required_one_of=[("definition", "src")])
    if not manifest_yaml.HAS_YAML:
        module.fail_json(msg="PyYAML is required: %s" % manifest_yaml.YAML_IMPORT_ERROR)
    src_text = None
    if module.params["src"]:
        try:
            with open(module.params["src"]) as handle:
                src_text = handle.read()
        except (IOError, OSError) as exc:
            module.fail_json(msg="src: cannot read %s: %s" % (module.params["src"], to_native(exc)))
    try:
        objects = objects_from(module.params["definition"], src_text)
    except ValueError as exc:
        module.fail_json(msg="%s: %s" % ("src" if src_text is not None else "definition", to_native(exc)))
    problems = ssa.definition_problems(objects)
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems)
    try:
        connection = api_client(module.params)
        changed, results, diffs, deleted = run(DynamicClient(connection), objects, module.params["state"],
                                               module.params["field_manager"], module.params["force_conflicts"],
                                               module.check_mode)
        if deleted and module.params["wait"] and not module.check_mode:
            ssa.wait_deleted(k8s_wait.KubeApi(connection), deleted, module.params["wait_timeout"])
    except (ValueError, ssa.ApplyError) as exc:
        module.fail_json(msg=to_native(exc))
    except Exception as exc:  # connection errors come in several types from urllib3 and the client
        module.fail_json(msg="cannot reach the Kubernetes API: %s" % to_native(exc))
    result = {"changed": changed, "results": results}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
