#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: helmchart_release
short_description: Read the helm release a HelmChart installed, and resume it after a failed upgrade
version_added: 0.1.0
description:
  - Reads the release's revisions from helm's own records (the C(sh.helm.release.v1.<name>.v<revision>) Secrets in
    the release namespace, as helm reads them) and says which chart version is deployed, which revision is current
    and whether the current one is an upgrade that failed.
  - After a failed C(helm upgrade) helm keeps the revision before it C(deployed) and records the new one C(failed).
    With the HelmChart's C(failurePolicy=abort) RKE2's helm-controller then refuses every later install Job
    ("waiting for operator intervention") and the cluster keeps running the deployed revision.
  - With O(resume_failed_upgrade=true) the failed revision's record is removed, so that the deployed revision is
    helm's current one again and the next install Job upgrades from it to the HelmChart as it is now (a fixed value,
    or the previous manifest of a rollback). Only a failed revision above a deployed one is removed, and only as it
    was read (its uid and resourceVersion); the objects the failed upgrade had already changed are put right by that
    next upgrade. This is what C(helm rollback) would do without a helm binary on the host and without a revision
    of its own.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  name:
    description: The release name (the HelmChart's name).
    type: str
    required: true
  namespace:
    description: The release namespace (the HelmChart's C(targetNamespace)).
    type: str
    required: true
  resume_failed_upgrade:
    description: Remove the record of a failed upgrade that sits above a deployed revision (see the description).
    type: bool
    default: false
  timeout:
    description: Seconds the reads and the removal may take.
    type: int
    default: 60
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports the record it would remove; removes nothing.
  diff_mode:
    support: full
    details: The current revision before and after.
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Which GPU Operator chart runs now
  gpuplatform.rke2.helmchart_release:
    name: gpu-operator
    namespace: gpu-operator
  register: release
  delegate_to: localhost

- name: Resume after a failed upgrade (the HelmChart now holds the fixed values)
  gpuplatform.rke2.helmchart_release:
    name: gpu-operator
    namespace: gpu-operator
    resume_failed_upgrade: true
  delegate_to: localhost
"""

RETURN = r"""
revisions:
  description: Every revision, oldest first (record, revision, status, chart_version, app_version, description).
  returned: always
  type: list
  elements: dict
current:
  description: helm's current revision (the highest), after any removal; null when the release is not installed.
  returned: always
  type: dict
deployed:
  description: The highest deployed revision (what the cluster runs); null when none is.
  returned: always
  type: dict
deployed_values:
  description: The values helm was given for the deployed revision (the chart's defaults are not in them).
  returned: always
  type: dict
failed_upgrade:
  description:
    - The failed revision above the deployed one, as it was read (with C(deployed_revision),
      C(deployed_chart_version) and C(values_changed), the dotted values keys the failed upgrade changed, each
      with its value before and after; the value helm could not apply is among them); null when the current
      revision did not fail.
  returned: always
  type: dict
removed:
  description: The record removed (or, in check mode, that would be).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s import helm_release
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import is_rfc1123_name


def check_params(params):
    for key in ("name", "namespace"):
        if not is_rfc1123_name(params[key]):
            return "%s must be an RFC 1123 name, got %r" % (key, params[key])
    if params["timeout"] <= 0:
        return "timeout must be a positive number of seconds, got %d" % params["timeout"]
    return None


def read(api, name, namespace):
    """(record Secrets as dicts, revisions)."""
    secrets, _rv = api.list(k8s_wait.resource("secrets", "v1", "secrets", namespace=namespace,
                                              label_selector=helm_release.selector(name)),
                            k8s_wait.LIST_READ_TIMEOUT)
    try:
        return secrets, helm_release.history(secrets, name)
    except helm_release.RecordError as exc:
        raise ValueError("release %s in %s: %s" % (name, namespace, exc))


def _without_values(rev):
    return dict((k, v) for k, v in rev.items() if k != "values") if rev else None


def report(revisions):
    deployed = helm_release.last_deployed(revisions)
    return {"revisions": [_without_values(rev) for rev in revisions],
            "current": _without_values(helm_release.current(revisions)),
            "deployed": _without_values(deployed), "deployed_values": deployed["values"] if deployed else None}


def act(api, params, check_mode):
    secrets, revisions = read(api, params["name"], params["namespace"])
    failed = helm_release.failed_upgrade(revisions)
    result = dict(report(revisions), changed=False, removed=None,
                  failed_upgrade=helm_release.failure_report(revisions))
    if not (failed and params["resume_failed_upgrade"]):
        return result
    record = failed[0]["record"]
    meta = next(s["metadata"] for s in secrets if s["metadata"]["name"] == record)
    result.update(changed=True, removed=record,
                  diff={"before": helm_release.summary(failed[0]) + "\n",
                        "after": helm_release.summary(failed[1]) + "\n"})
    if check_mode:
        return result
    api.delete_secret(params["namespace"], record, meta.get("uid"), meta.get("resourceVersion"))
    _secrets, revisions = read(api, params["name"], params["namespace"])
    result.update(report(revisions))
    return result


def main():
    spec = connection_arg_spec()
    spec.update(
        name=dict(type="str", required=True),
        namespace=dict(type="str", required=True),
        resume_failed_upgrade=dict(type="bool", default=False),
        timeout=dict(type="int", default=60),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    api, result = k8s_wait.run_checked(module, check_params, lambda api: act(api, params, module.check_mode),
                                       "reading release %s in %s" % (params["name"], params["namespace"]))
    if not module._diff:
        result.pop("diff", None)
    result["elapsed"] = k8s_wait.elapsed(api)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
