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
    description:
      - Remove the record of a failed upgrade that sits above a deployed revision (see the description).
      - Before the removal the HelmChart's install Job, when it can still run, is suspended and its pod waited
        out, so that no run of the Job made for the values that failed upgrades with them again once the record
        is gone. When the HelmChart about to be delivered (O(chart) or O(chart_src)) differs from the cluster's,
        helm-controller replaces the suspended Job when it lands; otherwise the Job is deleted after the removal
        and helm-controller creates it again at once.
    type: bool
    default: false
  chart_namespace:
    description: The HelmChart's namespace (RKE2 applies its manifests into C(kube-system)).
    type: str
    default: kube-system
  chart:
    description: The HelmChart that will be delivered after the resume, as a mapping.
    type: dict
  chart_src:
    description: The HelmChart that will be delivered after the resume, as a YAML file on the controller.
    type: path
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

- name: Resume after a failed upgrade, before the fixed HelmChart is delivered
  gpuplatform.rke2.helmchart_release:
    name: gpu-operator
    namespace: gpu-operator
    resume_failed_upgrade: true
    chart_src: site/lab/manifests/gpu-operator.yaml
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
install_job:
  description:
    - The HelmChart's install Job the resume suspended (C(name)) and what then becomes of it (C(action)); C(hold),
      helm-controller replaces it when the delivered HelmChart lands; C(restart), deleted after the removal so that
      helm-controller creates it again. Null when no Job could run again.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait, manifest_yaml, readiness
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s import helm_release
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import is_rfc1123_name


def check_params(params):
    for key in ("name", "namespace", "chart_namespace"):
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


def _install_job(api, params):
    """(the HelmChart, the install Job its status names) as dicts, once helm-controller has
    replaced a Job made before the chart's last spec change (that one is about to go); None
    for either that is not there."""
    name, namespace = params["name"], params["chart_namespace"]
    resources = [k8s_wait.by_name("helmcharts", "helm.cattle.io/v1", "helmcharts", name, namespace=namespace),
                 k8s_wait.resource("jobs", "batch/v1", "jobs", namespace=namespace,
                                   label_selector="%s=%s" % (readiness.HELMCHART_LABEL, name))]

    def current(cache):
        chart = (cache.get("helmcharts") or {}).get("%s/%s" % (namespace, name))
        job_name = ((chart or {}).get("status") or {}).get("jobName")
        job = (cache.get("jobs") or {}).get("%s/%s" % (namespace, job_name)) if job_name else None
        stale = readiness.job_predates_spec(job, chart) if job else None
        return not stale, {"chart": chart, "job": job, "stale": stale}
    result = k8s_wait.wait_for(api, resources, current, _remaining(api))
    if not result.done:
        raise ValueError("%s: helm-controller did not replace it; the failed record is left in place"
                         % result.detail["stale"])
    return result.detail["chart"], result.detail["job"]


def _remaining(api):
    return max(1.0, api.deadline - api.clock.now())


def _next_chart(params):
    if params.get("chart") is not None:
        return params["chart"]
    if params.get("chart_src"):
        try:
            with open(params["chart_src"]) as handle:
                return manifest_yaml.load_mapping(handle.read())
        except (IOError, OSError, ValueError) as exc:
            raise ValueError("chart_src: %s cannot be read as a HelmChart: %s" % (params["chart_src"], exc))
    return None


def _hold_install_job(api, params, next_chart):
    """Suspends the chart's install Job when it could run again and waits until none of its
    pods runs; returns (the Job or None, the action for it). A Job replaced while this reads
    it (another uid by the time of the write) is read again."""
    namespace = params["chart_namespace"]
    while True:
        chart, job = _install_job(api, params)
        action = helm_release.install_job_action(chart, job, next_chart)
        if not action:
            return None, None
        try:
            api.suspend_job(namespace, job["metadata"]["name"], job["metadata"]["uid"])
            break
        except k8s_wait.ApiError as exc:
            if exc.status not in (404, 409, 422) or api.clock.now() >= api.deadline:
                raise
    pods = k8s_wait.resource("pods", "v1", "pods", namespace=namespace,
                             label_selector="batch.kubernetes.io/controller-uid=%s" % job["metadata"]["uid"])

    def stopped(cache):
        left = k8s_wait.objects(cache, "pods")
        return helm_release.job_pods_stopped(left), {"pods": sorted(k8s_wait.object_key(p) for p in left)}
    result = k8s_wait.wait_for(api, [pods], stopped, _remaining(api))
    if not result.done:
        raise ValueError("the install Job %s/%s was suspended, yet its pods %s still run at the timeout: "
                         "the failed record is left in place" % (namespace, job["metadata"]["name"],
                                                                 ", ".join(result.detail["pods"])))
    return job, action


def act(api, params, check_mode):
    secrets, revisions = read(api, params["name"], params["namespace"])
    failed = helm_release.failed_upgrade(revisions)
    result = dict(report(revisions), changed=False, removed=None, install_job=None,
                  failed_upgrade=helm_release.failure_report(revisions))
    if not (failed and params["resume_failed_upgrade"]):
        return result
    record = failed[0]["record"]
    meta = next(s["metadata"] for s in secrets if s["metadata"]["name"] == record)
    result.update(changed=True, removed=record,
                  diff={"before": helm_release.summary(failed[0]) + "\n",
                        "after": helm_release.summary(failed[1]) + "\n"})
    next_chart = _next_chart(params)
    if check_mode:
        chart, job = _install_job(api, params)
        action = helm_release.install_job_action(chart, job, next_chart)
    else:
        job, action = _hold_install_job(api, params, next_chart)
    result["install_job"] = {"name": job["metadata"]["name"], "action": action} if action else None
    if check_mode:
        return result
    api.delete_secret(params["namespace"], record, meta.get("uid"), meta.get("resourceVersion"))
    if action == helm_release.JOB_RESTART:
        # Gone already (404) or replaced by helm-controller (409): either Job starts from the
        # deployed revision.
        try:
            api.delete_job(params["chart_namespace"], job["metadata"]["name"], job["metadata"]["uid"])
        except k8s_wait.ApiError as exc:
            if exc.status != 409:
                raise
    _secrets, revisions = read(api, params["name"], params["namespace"])
    result.update(report(revisions))
    return result


def main():
    spec = connection_arg_spec()
    spec.update(
        name=dict(type="str", required=True),
        namespace=dict(type="str", required=True),
        resume_failed_upgrade=dict(type="bool", default=False),
        chart_namespace=dict(type="str", default="kube-system"),
        chart=dict(type="dict"),
        chart_src=dict(type="path"),
        timeout=dict(type="int", default=60),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, mutually_exclusive=[("chart", "chart_src")])
    params = module.params
    api, result = k8s_wait.run_checked(module, check_params, lambda api: act(api, params, module.check_mode),
                                       "reading release %s in %s" % (params["name"], params["namespace"]))
    if not module._diff:
        result.pop("diff", None)
    result["elapsed"] = k8s_wait.elapsed(api)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
