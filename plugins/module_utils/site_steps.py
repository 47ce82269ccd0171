# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ADR's fixed order of a site's seven steps, and what each step needs verified
before it may start. Pure: the step_gate module gathers the observations."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

Step = namedtuple("Step", ["number", "name", "title", "make_target", "tag"])

STEPS = (
    Step(1, "host-network", "host static IP", "host/network", "step1"),
    Step(2, "inventory", "inventory rendering", "inventory/render", "step2"),
    Step(3, "rke2", "RKE2 server and agent install", "rke2/server/install and rke2/agent/install", "step3"),
    Step(4, "kubeconfig", "kubeconfig export and merge", "rke2/kubeconfig", "step4"),
    Step(5, "gpu-operator", "GPU Operator rollout", "rke2/gpu/operator/apply", "step5"),
    Step(6, "gpu-verify", "nvidia.com/gpu verification and CUDA sample", "rke2/gpu/verify", "step6"),
    Step(7, "argocd", "Argo CD workloads", "argocd/apply", "step7"),
)
_BY_NUMBER = dict((s.number, s) for s in STEPS)
GATED_STEPS = (5, 6, 7)


def step(number):
    if number not in _BY_NUMBER:
        raise ValueError("unknown step %r (steps are 1 to %d)" % (number, len(STEPS)))
    return _BY_NUMBER[number]


def _refusal(number, before, reason, site):
    wanted, needed = step(number), step(before)
    return ("step %d (%s) cannot start: step %d (%s) is not verified: %s. Run step %d first: make %s SITE=%s"
            % (wanted.number, wanted.title, needed.number, needed.title, reason, needed.number,
               needed.make_target, site))


def gate(number, observed, site):
    """(ok, message) for starting step ``number`` given what was observed:

    ``api_error``       why the API could not be reached (None when it was);
    ``nodes``           {inventory node name: "Ready" | "NotReady" | "missing"};
    ``helmchart``       None, or {"installed": bool, "reason": str} for the GPU Operator chart;
    ``verify_report``   None, or {"passed": bool, "path": str, "summary": str};
    ``missing_resources`` [{"resource": "argoproj.io/v1alpha1 applications", "provider": "Argo CD"}]:
                        APIs the step needs that the cluster does not serve.
    """
    if number not in GATED_STEPS:
        return True, "step %d (%s) has no gate" % (number, step(number).title)
    if observed.get("api_error"):
        return False, _refusal(number, 4, "the Kubernetes API is not reachable (%s)" % observed["api_error"], site)
    nodes = observed.get("nodes") or {}
    if not nodes:
        return False, _refusal(number, 3, "the inventory names no Kubernetes node", site)
    not_ready = sorted("%s (%s)" % (name, state) for name, state in nodes.items() if state != "Ready")
    if not_ready:
        return False, _refusal(number, 3, "nodes not Ready: %s" % ", ".join(not_ready), site)
    if number >= 6:
        chart = observed.get("helmchart")
        if not chart or not chart.get("installed"):
            reason = (chart or {}).get("reason") or "the gpu-operator HelmChart does not exist"
            return False, _refusal(number, 5, reason, site)
    if number == 7:
        report = observed.get("verify_report")
        if not report:
            return False, _refusal(number, 6, "no verification report was found", site)
        if not report.get("passed"):
            return False, _refusal(number, 6, "the last verification failed (%s; %s)" % (
                report.get("summary", "see report"), report.get("path")), site)
    missing = observed.get("missing_resources") or []
    if missing:
        return False, ("step %d (%s) cannot start: the cluster does not serve %s; install %s first"
                       % (number, step(number).title, ", ".join(r["resource"] for r in missing),
                          " and ".join(sorted(set(r["provider"] for r in missing)))))
    return True, "step %d (%s) may start: step %d verified" % (number, step(number).title, number - 1)
