#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: helmchart_wait
short_description: Wait until RKE2's helm-controller has installed a HelmChart, and fail at once when it cannot
version_added: 0.1.0
description:
  - Watches a C(helm.cattle.io/v1) HelmChart, its install Job C(helm-install-<name>) and the Job's pods through the
    Kubernetes API (one list and one long watch each, not polling) until helm-controller has installed the chart,
    that is until the chart names its Job in C(status.jobName) and that Job, written after the chart's last spec
    change, completed.
  - A Job created before the chart's last spec change (its newest spec entry in C(managedFields)) ran the previous
    values; the module waits for helm-controller to replace it, so a values change is waited for, not mistaken for
    done. A suspended Job is never done (helm-controller creates each Job suspended, and suspends the old one
    before it replaces it).
  - Fails at once, not after the Job's 1000 retries, when the HelmChart has a C(Failed) condition or an attempt of
    the Job failed (a container that exited non-zero, C(CrashLoopBackOff), a C(Failed) pod or Job), with the reason
    and the last lines of the Job pod's log when readable.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  name:
    description:
      - The HelmChart's name.
    type: str
    required: true
  namespace:
    description:
      - The HelmChart's namespace; helm-controller runs the install Job there too.
    type: str
    default: kube-system
  release_namespace:
    description:
      - The chart's C(targetNamespace), where helm keeps the release's records. When given, a chart whose Job predates
        its last change is installed too when helm's current revision is deployed with the chart's version and
        values (helm-controller then runs no new Job, for one after a failed upgrade is resumed onto the revision the
        chart asks for again). C(global) values that the host's helm-controller sets itself (RKE2's
        C(global.systemDefaultRegistry), ...) are not counted against the chart's values.
    type: str
  log_lines:
    description:
      - How many of the failed Job pod's last log lines to return.
    type: int
    default: 20
  timeout:
    description:
      - Seconds to wait in all.
    type: int
    default: 600
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes.wait
notes:
  - A change made only through a C(HelmChartConfig) does not change the chart's generation and is not seen, so the
    module may return on the previous install Job in that case.
  - "The order of the change and the Job is by time: each API server of an HA control plane stamps its writes with
    its own clock, so servers whose clocks disagree by more than the moment between a change and its Job can
    reorder them. The storage's resourceVersions do not date the change: helm-controller writes the chart's status
    after it creates the Job, and a Job's revision moves with each of its status writes."
"""

EXAMPLES = r"""
- name: Wait for the GPU Operator chart to be installed
  gpuplatform.rke2.helmchart_wait:
    name: gpu-operator
    timeout: 900
  delegate_to: localhost
"""

RETURN = r"""
job:
  description: The install Job the module waited on (null while helm-controller had not named one).
  returned: always
  type: str
  sample: helm-install-gpu-operator
message:
  description: What the module saw last.
  returned: always
  type: str
  sample: Job helm-install-gpu-operator complete
log_tail:
  description: When an attempt failed, the last lines of the Job pod's log (empty when not readable).
  returned: failure
  type: list
  elements: str
  sample: ["Error: INSTALLATION FAILED: failed to download \"gpu-operator\""]
elapsed:
  description: Seconds the wait took.
  returned: always
  type: float
api_requests:
  description: List and watch requests the wait made; it does not grow with the wait's length.
  returned: always
  type: dict
  sample: {"list": 3, "watch": 3, "total": 6}
"""

import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s import helm_release
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def check_params(params):
    for key in ("name", "namespace", "release_namespace"):
        if key == "release_namespace" and params.get(key) is None:
            continue
        value = params[key] or ""
        if not _DNS_SUBDOMAIN.match(value) or len(value) > 253:
            return "%s: %r is not an RFC 1123 name" % (key, value)
    if params["timeout"] < 0:
        return "timeout must be zero or more seconds, got %d" % params["timeout"]
    if params["log_lines"] < 0:
        return "log_lines must be 0 or more, got %d" % params["log_lines"]
    return None


def resources(params):
    name, namespace = params["name"], params["namespace"]
    chart_selector = "%s=%s" % (readiness.HELMCHART_LABEL, name)
    found = [
        k8s_wait.by_name("helmcharts", "/".join(om.HELMCHART_API[:2]), om.HELMCHART_API[2], name, namespace=namespace),
        k8s_wait.resource("jobs", "batch/v1", "jobs", namespace=namespace, label_selector=chart_selector),
        k8s_wait.resource("pods", "v1", "pods", namespace=namespace, label_selector=chart_selector),
    ]
    if params.get("release_namespace"):
        found.append(k8s_wait.resource("releases", "v1", "secrets", namespace=params["release_namespace"],
                                       label_selector=helm_release.selector(name)))
    return found


def wait(api, params):
    return k8s_wait.Waiter(api, resources(params), params["timeout"]).wait(
        readiness.helmchart_condition(params["name"], params["namespace"], params.get("release_namespace")))


def failed_log(api, params, detail):
    """The failed attempt's last log lines, or [] when the log cannot be read. A container
    waiting in CrashLoopBackOff after its first failure has no previous instance yet: the
    failed attempt is still the current one, so the other log is read when the first is
    empty or missing."""
    if not detail["pod"] or not params["log_lines"]:
        return []
    for previous in (detail["previous"], not detail["previous"]):
        try:
            log = api.pod_log(params["namespace"], detail["pod"], container=detail["container"], previous=previous)
        except k8s_wait.ApiError:
            continue
        tail = readiness.log_tail(log, params["log_lines"])
        if tail:
            return tail
    return []


def main():
    spec = connection_arg_spec()
    spec.update(
        name=dict(type="str", required=True),
        namespace=dict(type="str", default="kube-system"),
        release_namespace=dict(type="str"),
        log_lines=dict(type="int", default=20),
        timeout=dict(type="int", default=600),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    what = "HelmChart %s/%s" % (params["namespace"], params["name"])
    api, result = k8s_wait.run_checked(module, check_params, lambda api: wait(api, params), "waiting for " + what)
    detail = result.detail
    report = dict(changed=False, job=detail["job_name"], message=detail["message"], elapsed=result.elapsed,
                  api_requests=result.api_requests)
    if result.done and not detail["failed"]:
        report["elapsed"] = k8s_wait.elapsed(api)
        module.exit_json(**report)
    if detail["failed"]:
        log_tail = failed_log(api, params, detail)
        report["elapsed"] = k8s_wait.elapsed(api)
        msg = "installing %s failed: %s" % (what, detail["message"])
        if log_tail:
            msg += ". Log: " + " | ".join(log_tail[-5:])
        module.fail_json(msg=msg, log_tail=log_tail, **report)
    msg = "timed out after %ds waiting for %s: %s" % (params["timeout"], what, detail["message"])
    if result.stale:
        msg += " (the API server was unreachable at the end; last known state)"
    report["elapsed"] = k8s_wait.elapsed(api)
    module.fail_json(msg=msg, log_tail=[], **report)


if __name__ == "__main__":
    main()
