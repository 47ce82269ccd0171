#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: cuda_sample
short_description: Run NVIDIA's CUDA vectoradd sample on the cluster's GPUs and check that it passes
version_added: 0.1.0
description:
  - Creates NVIDIA's documented CUDA C(vectoradd) sample pod, asking for O(count) of O(resource); one pod anywhere,
    or with O(per_node) one pinned to each Ready node that advertises it.
  - Watches the pods through the Kubernetes API until each has ended, reads each pod's log through the API and
    requires O(pattern) in it, then deletes the pods unless O(keep_pods).
  - "A pod that stays C(Pending) is reported with the scheduler's reason (for example
    C(0/6 nodes are available: 6 Insufficient nvidia.com/gpu)), a pod that cannot start with its waiting reason,
    and a failing sample with the last lines of its log and the per-layer diagnosis of its node."
  - A sample passes when its pod ended C(Succeeded), its container with exit code 0, with O(pattern) in its log,
    and, with O(per_node), on the node it was created for (a pod the scheduler put elsewhere fails, naming both).
  - The pods run unprivileged (C(runAsNonRoot), no privilege escalation, every capability dropped, the runtime's
    default seccomp profile) with C(restartPolicy=Never), so a failing sample ends C(Failed) instead of restarting.
  - "Each run labels its pods C(gpuplatform.rke2/cuda-sample-run=<run id>) (the result's RV(run_id)) and deletes
    only pods of its own run: on every way out, a failure, a create whose reply was lost, the deadline, C(SIGINT),
    C(SIGTERM) or C(SIGHUP) (Ctrl-C on C(ansible-playbook), which reaches this module on the controller directly, a
    cancelled job, a dropped SSH connection), in one request by that label, or, should that request fail, one by
    one by name, each only while it still carries the run's label. These deletes get their own time (20 seconds,
    plus 1.5), not what is left of O(timeout), which a timeout has spent. A pod whose delete failed is named in
    the result (RV(left_pods), with RV(remove_command)) and the module reports C(changed=true); after a signal it
    fails naming the signal, the pods it deleted and those that may be left."
  - "A pod of another run that holds a name this run needs (two runs with one O(name_prefix)) is never deleted:
    the module fails naming it, its run and the command that removes it. Only a pod an earlier run kept
    (O(keep_pods)) and that has ended is replaced."
  - "C(SIGKILL) cannot be caught: Ansible's C(async) timeout sends it (C(async_wrapper) kills the module's process
    group), and the pods the run created stay. Find them with
    C(kubectl get pods -A -l app.kubernetes.io/name=cuda-sample,app.kubernetes.io/managed-by=gpuplatform.rke2
    -L gpuplatform.rke2/cuda-sample-run) and remove a run's with
    C(kubectl delete pods -n <namespace> -l gpuplatform.rke2/cuda-sample-run=<run id>); a later run with the same
    O(name_prefix) fails naming them. Give C(async) more than O(timeout) plus 25 seconds. Each pod carries
    C(activeDeadlineSeconds) of O(timeout), which the kubelet counts from the pod's start on a node: it ends a
    sample that runs too long, but not a pod that stays C(Pending), which may still be scheduled later and take a
    GPU until it is deleted."
  - "At fleet scale the requests stay few: one list of the nodes, one of the namespace's pods (earlier runs' pods
    that hold the names), one create per pod, O(concurrency) at a time, one watch of the run's pods for the wait,
    and, as each pod ends, its log read and its delete (O(concurrency) pods at a time) while the others still
    run; the pods that did not end, or whose delete failed, go with one delete of the run's pods by its label.
    Only when that delete fails does the module read each remaining pod (its run label) and delete it by name."
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  image:
    description:
      - The sample's image; point it at the site's mirror in air-gapped sites.
    type: str
    default: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
  resource:
    description:
      - The GPU resource each pod asks for.
    type: str
    default: nvidia.com/gpu
  count:
    description:
      - How many of O(resource) each pod asks for.
    type: int
    default: 1
  namespace:
    description:
      - The namespace to run the pods in; it must exist.
    type: str
    default: default
  runtime_class_name:
    description:
      - The RuntimeClass of the pods, for example V(nvidia) where the chart's RKE2 settings require it (v25.3).
    type: str
  per_node:
    description:
      - Run one pod on each Ready, schedulable node that advertises at least O(count) of O(resource), pinned to it
        with node affinity (the scheduler still places it and says why when it cannot). By default one pod runs
        wherever the scheduler puts it.
    type: bool
    default: false
  nodes:
    description:
      - With O(per_node), only these nodes. Each must be Ready, schedulable (not cordoned) and advertise O(count) of
        O(resource); the module fails naming each that is not, and why (or that it is not in the cluster), before it
        creates a pod.
    type: list
    elements: str
  tolerations:
    description:
      - Tolerations added to the pods, for GPU nodes tainted for other reasons. The pods always tolerate
        C(nvidia.com/gpu:NoSchedule).
    type: list
    elements: dict
  name_prefix:
    description:
      - The pods' name, or with O(per_node) the prefix before each node's name.
    type: str
    default: cuda-vectoradd
  pattern:
    description:
      - A regular expression each pod's log must match.
    type: str
    default: Test PASSED
  keep_pods:
    description:
      - Leave the pods in place after the check, for inspection. A later run replaces them once they ended
        (they carry the label C(gpuplatform.rke2/cuda-sample-keep=true)).
    type: bool
    default: false
  log_lines:
    description:
      - How many of the log's last lines to return per pod.
    type: int
    default: 10
  concurrency:
    description:
      - How many pods are created, and how many pod logs read, at a time. The creates of a thousand-node fleet one
        after another would take longer than its samples take to run; all at once they would be a burst the API
        server's priority and fairness throttles.
    type: int
    default: 8
  timeout:
    description:
      - Seconds to wait in all, for the pods to end.
    type: int
    default: 300
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
attributes:
  check_mode:
    details: Creates nothing; returns the pods it would create.
notes:
  - The sample is a test action that leaves nothing behind, so it reports C(changed=false) when it deleted its pods;
    it reports C(changed=true) when pods it created are left in the cluster, with O(keep_pods) or because their
    delete failed, and names them in RV(left_pods).
"""

EXAMPLES = r"""
- name: Run the CUDA sample once on any GPU
  gpuplatform.rke2.cuda_sample:
  delegate_to: localhost

- name: Run it on every GPU node, from the site's mirror
  gpuplatform.rke2.cuda_sample:
    per_node: true
    image: registry.tirosh.lan/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
    runtime_class_name: nvidia
    timeout: 600
  delegate_to: localhost
"""

RETURN = r"""
pods:
  description: Each sample pod, the node it ran on, its phase, whether it passed and why not, the last lines of its
    log and the seconds from its creation to its end.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "cuda-vectoradd-gpu-container-1", "node": "gpu-container-1", "phase": "Succeeded",
            "passed": true, "reason": null, "log_tail": ["Test PASSED", "Done"], "duration": 4.2}]
skipped_nodes:
  description: With O(per_node), nodes left out (not Ready, cordoned, or short of O(resource)), with the reason.
  returned: always
  type: list
  elements: dict
diagnosis:
  description: On failure, the per-layer diagnosis (driver, container-runtime, device-plugin, allocatable) of the
    nodes whose sample failed, or of the GPU nodes that should advertise O(resource) when no pod could be placed.
  returned: failure
  type: dict
elapsed:
  description: Seconds the module took.
  returned: always
  type: float
api_requests:
  description: List and watch requests the wait for the pods made.
  returned: always
  type: dict
run_id:
  description: This run's id, the value of the label C(gpuplatform.rke2/cuda-sample-run) on each pod it created.
  returned: when the module got as far as planning its pods
  type: str
  sample: 3f9c2a7d41b0
left_pods:
  description: The pods this run created that may still be in the cluster, kept with O(keep_pods) or whose delete
    failed; empty when it deleted them all.
  returned: when the module got as far as planning its pods
  type: list
  elements: str
  sample: ["cuda-vectoradd-gpu-container-2"]
remove_command:
  description: The command that removes RV(left_pods) (every pod of this run), null when none is left.
  returned: when the module got as far as planning its pods
  type: str
  sample: kubectl delete pods -n default -l gpuplatform.rke2/cuda-sample-run=3f9c2a7d41b0
"""

import concurrent.futures
import re
import signal
import threading
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import connection_arg_spec

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")


def check_params(params):
    """The first problem with the options, naming the key; None when they are fine."""
    if not _DNS_LABEL.match(params["name_prefix"] or "") or len(params["name_prefix"]) > 40:
        return "name_prefix: %r must be a DNS label (a-z, 0-9, '-') of at most 40 characters" % params["name_prefix"]
    if readiness.resource_name_problem(params["resource"]):
        return readiness.resource_name_problem(params["resource"])
    if params["count"] < 1:
        return "count must be 1 or more, got %d" % params["count"]
    if params["timeout"] < 0:
        return "timeout must be zero or more seconds, got %d" % params["timeout"]
    if params["log_lines"] < 0:
        return "log_lines must be 0 or more, got %d" % params["log_lines"]
    if params["concurrency"] < 1:
        return "concurrency must be 1 or more, got %d" % params["concurrency"]
    if params["nodes"] and not params["per_node"]:
        return "nodes needs per_node: true"
    try:
        re.compile(params["pattern"])
    except re.error as exc:
        return "pattern: %r is not a regular expression: %s" % (params["pattern"], exc)
    for index, toleration in enumerate(params["tolerations"] or ()):
        unknown = sorted(set(toleration) - set(_TOLERATION_KEYS))
        if unknown:
            return "tolerations[%d]: unknown keys %s (known: %s)" % (index, ", ".join(unknown), ", ".join(_TOLERATION_KEYS))
    return None


def gpu_diagnosis(api, nodes, resource, node_names=None):
    """Per-layer diagnosis of ``node_names``, or of the GPU nodes that should advertise
    ``resource``: one list each of ClusterPolicies, operand DaemonSets and operand pods."""
    try:
        clusterpolicies, _version = api.list(k8s_wait.resource("clusterpolicies", "/".join(om.CLUSTER_POLICY_API[:2]),
                                                               om.CLUSTER_POLICY_API[2]), k8s_wait.LIST_READ_TIMEOUT)
    except k8s_wait.ApiError as exc:
        if exc.status != 404:
            raise
        clusterpolicies = []
    policy = node_check.policy_from_inputs(clusterpolicies, {})
    daemonsets, _version = api.list(k8s_wait.resource("daemonsets", "apps/v1", "daemonsets",
                                                      namespace=policy["namespace"]), k8s_wait.LIST_READ_TIMEOUT)
    if node_names is None:
        if om.resource_workload_config(resource) is None:
            return {}
        node_names = readiness.select_nodes(nodes, resource, policy, daemonsets=daemonsets)[0]
    if not node_names:
        return {}
    pods, _version = api.list(k8s_wait.operand_pods(policy["namespace"]), k8s_wait.LIST_READ_TIMEOUT)
    return readiness.diagnose(nodes, pods, policy, sorted(set(node_names)), resource, 1, daemonsets)


def list_nodes(api):
    return api.list(k8s_wait.resource("nodes", "v1", "nodes"), k8s_wait.LIST_READ_TIMEOUT)[0]


def plan(api, params, run_id):
    """(pods to create as [{name, node, manifest}], skipped nodes, the nodes listed or None)."""
    pod_args = dict(image=params["image"], resource=params["resource"], count_=params["count"],
                    runtime_class_name=params["runtime_class_name"], tolerations=params["tolerations"] or (),
                    keep=params["keep_pods"])
    if not params["per_node"]:
        name = readiness.sample_pod_name(params["name_prefix"])
        return [{"name": name, "node": None,
                 "manifest": readiness.sample_pod(name, params["namespace"], run_id, **pod_args)}], [], None
    nodes = list_nodes(api)
    chosen, skipped = readiness.sample_nodes(nodes, params["resource"], params["count"], params["nodes"])
    planned, names = [], set()
    for node in chosen:
        name = readiness.sample_pod_name(params["name_prefix"], node)
        if name in names:
            raise ValueError("two nodes map to the pod name %s: choose a shorter name_prefix" % name)
        names.add(name)
        planned.append({"name": name, "node": node,
                        "manifest": readiness.sample_pod(name, params["namespace"], run_id, node=node, **pod_args)})
    return planned, skipped, nodes


def bounded(function, items, concurrency):
    """``[function(item) for item in items]``, at most ``concurrency`` calls at a time. On
    an error or an interrupt (a signal's exception in this thread) no further call starts
    and those under way finish (each ends by the module's deadline) before it propagates,
    so that whatever a call created is there to clean up."""
    items = list(items)
    if concurrency <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    stop = threading.Event()

    def call(item):
        if stop.is_set():
            raise concurrent.futures.CancelledError()
        return function(item)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(concurrency, len(items)))
    futures = [pool.submit(call, item) for item in items]
    try:
        return [future.result() for future in futures]
    finally:
        stop.set()
        pool.shutdown(wait=True)


def run_selector(run_id):
    return "%s=%s" % (readiness.SAMPLE_LABEL_RUN, run_id)


def remove_command(namespace, run_id):
    """The command that removes a run's pods, for a result that says some may be left."""
    return "kubectl delete pods -n %s -l %s" % (namespace, run_selector(run_id))


def clear_leftovers(api, params, names, deadline):
    """Delete the pods an earlier run kept (keep_pods) and that ended, where they hold our
    names. Any other pod of another run may be in use by it (two runs with one name_prefix):
    the module fails naming it, its run and the command that removes it, and deletes
    nothing; so too for a pod it did not create. One list of the namespace's pods, not a
    read per name."""
    listed, _version = api.list(k8s_wait.resource("pods", "v1", "pods", namespace=params["namespace"]),
                                k8s_wait.LIST_READ_TIMEOUT)
    existing = dict(((p.get("metadata") or {}).get("name"), p) for p in listed)
    leftovers, in_use = [], []
    for name in names:
        pod = existing.get(name)
        if pod is None:
            continue
        if not readiness.is_sample_pod(pod):
            raise ValueError("pod %s/%s exists and was not created by cuda_sample; choose another name_prefix"
                             % (params["namespace"], name))
        if readiness.sample_replaceable(pod):
            leftovers.append(name)
        else:
            in_use.append(pod)
    if in_use:
        runs = sorted(set(readiness.sample_run(p) or "" for p in in_use))
        raise ValueError(
            "pods %s belong to another cuda_sample run, which may still use them: wait for it to end or choose "
            "another name_prefix; pods a killed run left are removed with: %s" % (
                ", ".join("%s (run %s, %s)" % ((p.get("metadata") or {}).get("name"), readiness.sample_run(p),
                                               (p.get("status") or {}).get("phase") or "Pending") for p in in_use),
                "; ".join(remove_command(params["namespace"], run) for run in runs)))
    if not leftovers:
        return
    for name in leftovers:
        api.delete_pod(params["namespace"], name)
    keys = ["%s/%s" % (params["namespace"], n) for n in leftovers]

    def gone(cache):
        present = [k for k in keys if k in cache["pods"]]
        return not present, present

    pods = k8s_wait.resource("pods", "v1", "pods", namespace=params["namespace"],
                             label_selector="%s=cuda-sample" % readiness.SAMPLE_LABEL_NAME)
    result = k8s_wait.Waiter(api, [pods], max(deadline - api.clock.now(), 0)).wait(gone)
    if not result.done:
        raise ValueError("pods of an earlier run are still terminating: %s" % ", ".join(result.detail))


class Reaper(object):
    """Reads each sample's log once the pod ended and then deletes the pod (unless
    ``keep_pods``), at most ``concurrency`` pods at a time, while the wait goes on for the
    others. At the end there is then little left to read or delete: a collection's delete
    takes the API server one pod after another (7 s for 572 pods on the lab), and one
    read and delete per pod during the wait overlap with the pods still running."""

    def __init__(self, api, namespace, delete, concurrency):
        self._api = api
        self._namespace = namespace
        self._delete = delete
        self._stop = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency))
        self._reaped = {}
        self.deleted = set()  # pods whose delete the API server answered

    def ended(self, name):
        """Take ``name`` (a pod in a terminal phase) in hand, once."""
        if name not in self._reaped and not self._stop.is_set():
            self._reaped[name] = self._pool.submit(self._reap, name)

    def _reap(self, name):
        if self._stop.is_set():
            raise concurrent.futures.CancelledError()
        try:
            log = self._api.pod_log(self._namespace, name, container=readiness.SAMPLE_CONTAINER), None
        except k8s_wait.ApiError as exc:
            log = None, exc
        if self._delete:
            try:
                self._api.delete_pod(self._namespace, name)
                self.deleted.add(name)
            except k8s_wait.ApiError:
                pass  # the run's delete at the end takes it
        return log

    def logs(self, names):
        """{name: (log or None, ApiError or None)} of the ended pods ``names``."""
        for name in names:
            self.ended(name)
        return dict((name, self._reaped[name].result()) for name in names)

    def close(self):
        """No further pod is taken in hand; those under way finish (each request ends by
        the module's deadline)."""
        self._stop.set()
        self._pool.shutdown(wait=True)


def wait_for_samples(api, params, planned, run_id, created_at, deadline, reaper):
    """Wait for the created pods to end, ``reaper`` reading their logs (and deleting them)
    as they end: the pod reports and the WaitResult."""
    namespace = params["namespace"]
    names = [p["name"] for p in planned]
    finished_after = {}

    def progress(detail, elapsed):
        for name, state in detail["pods"].items():
            if state["finished"]:
                finished_after.setdefault(name, elapsed)
                if state["phase"] in readiness.TERMINAL_PHASES:
                    reaper.ended(name)

    waited_from = api.clock.now()
    pods = k8s_wait.resource("pods", "v1", "pods", namespace=namespace,
                             label_selector="%s=%s" % (readiness.SAMPLE_LABEL_RUN, run_id))
    result = k8s_wait.Waiter(api, [pods], max(deadline - waited_from, 0)).wait(
        readiness.sample_condition(namespace, names), progress)

    logs = reaper.logs([n for n in names if result.detail["pods"][n]["phase"] in readiness.TERMINAL_PHASES])
    planned_node = dict((p["name"], p["node"]) for p in planned)
    reports = []
    for name in names:
        state = result.detail["pods"][name]
        report = {"name": name, "node": state["node"], "phase": state["phase"], "passed": False,
                  "reason": state["reason"], "log_tail": [], "duration": None}
        if name in finished_after:
            report["duration"] = round(finished_after[name] + waited_from - created_at, 3)
        if name in logs:
            log, error = logs[name]
            if error is not None:
                report["reason"] = "log not readable: %s" % error
            report["log_tail"] = readiness.log_tail(log, params["log_lines"]) if params["log_lines"] else []
            passed, why = readiness.sample_verdict(state["phase"], log, params["pattern"], state["exit_code"],
                                                   state["node"], planned_node[name])
            report["passed"] = passed
            if passed:
                report["reason"] = None
            elif log is not None:
                report["reason"] = why if state["phase"] == "Succeeded" else "%s, %s" % (state["reason"], why)
        elif not state["finished"]:
            report["reason"] = "at the deadline: %s" % state["reason"]
        reports.append(report)
    return reports, result


def failure_message(reports, timed_out, timeout):
    bad = [r for r in reports if not r["passed"]]
    parts = []
    for r in bad:
        where = " on %s" % r["node"] if r["node"] else ""
        tail = ": " + " | ".join(r["log_tail"][-3:]) if r["log_tail"] and r["phase"] in ("Succeeded", "Failed") else ""
        parts.append("%s%s: %s%s" % (r["name"], where, r["reason"], tail))
    head = "%d of %d CUDA sample pods failed" % (len(bad), len(reports))
    if timed_out:
        head += " (timed out after %ds)" % timeout
    return head + ": " + "; ".join(parts)


class Interrupted(Exception):
    """The module got SIGINT, SIGTERM or SIGHUP while its pods existed."""


def _interrupt(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


# SIGINT: Ctrl-C on ansible-playbook reaches the modules it runs on the controller (the
# terminal's whole process group gets it); without a handler of its own it raised
# KeyboardInterrupt, and the pods went but Ansible saw a traceback instead of a result.
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def create_sample(api, namespace, pod, run_id):
    """Create one sample pod. A reply that never came (the connection broke after the
    request went out) may hide a pod the server created: it is looked up by name, and
    one of this run counts as created."""
    try:
        api.create_pod(namespace, pod["manifest"])
    except k8s_wait.ApiError as exc:
        if exc.status not in (0, 409) or k8s_wait.classify(exc) == k8s_wait.FATAL:
            raise
        existing = api.get_pod(namespace, pod["name"])
        labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(readiness.SAMPLE_LABEL_RUN) != run_id:
            raise


# Seconds the deletes of the run's pods may take, from when they start: their own time, not
# what is left of the module's deadline, which a timeout has spent (every request then is
# refused before it is sent). The adapter's AFTER_DEADLINE_GRACE comes on top. One delete
# by label took the lab's API server 7 s for 572 pods.
CLEANUP_SECONDS = 20  # DOCUMENTATION says so


def cleanup(api, params, names, run_id, warn):
    """Delete the run's pods ``names`` unless keep_pods: in one request by the run's label,
    by name when that request fails, each only while it carries the run's label (a pod of
    that name that another run created since is not ours). Returns the names that may be
    left."""
    if params["keep_pods"] or not names:
        return list(names)
    namespace = params["namespace"]
    try:
        api.delete_pods(namespace, run_selector(run_id))
        return []
    except k8s_wait.ApiError as exc:
        warn("could not delete the run's pods in one request (%s): deleting them one by one" % exc)
    left = []
    for name in names:
        try:
            pod = api.get_pod(namespace, name)
            if pod is not None and readiness.sample_run(pod) == run_id:
                api.delete_pod(namespace, name)
        except k8s_wait.ApiError as exc:
            warn("could not delete pod %s/%s: %s" % (namespace, name, exc))
            left.append(name)
    return left


def _cleanup_undisturbed(api, params, names, run_id, warn):
    """cleanup() with the interrupting signals (a second Ctrl-C too) held off until it is
    done, and with CLEANUP_SECONDS of its own: the names that may be left."""
    held = dict((s, signal.signal(s, signal.SIG_IGN)) for s in _SIGNALS)
    deadline = getattr(api, "deadline", None)
    if deadline is not None:
        # Every other request of the module has ended (the creates, the wait, the reaper):
        # only these deletes run under it.
        api.deadline = api.clock.now() + CLEANUP_SECONDS
    try:
        return cleanup(api, params, names, run_id, warn)
    finally:
        if deadline is not None:
            api.deadline = deadline
        for signum, handler in held.items():
            signal.signal(signum, handler)


def left_behind(params, left, run_id):
    """(the result's keys, the sentence) for the pods ``left``: kept (keep_pods) or whose
    delete failed."""
    keys = dict(changed=bool(left), left_pods=list(left), run_id=run_id, remove_command=None)
    if not left:
        return keys, ""
    keys["remove_command"] = remove_command(params["namespace"], run_id)
    state = "kept (keep_pods)" if params["keep_pods"] else "may be left"
    return keys, "pods %s %s; remove them with: %s" % (", ".join(left), state, keys["remove_command"])


def describe(params):
    return "running the CUDA sample in %s" % params["namespace"]


def run(api, params, check_mode, warn):
    """(failure message or None, result)."""
    # The module's one deadline (run_checked), from before it connected.
    deadline = getattr(api, "deadline", None) or api.clock.now() + params["timeout"]
    run_id = uuid.uuid4().hex[:12]
    planned, skipped, nodes = plan(api, params, run_id)
    report = dict(changed=False, pods=[], skipped_nodes=skipped, api_requests={"list": 0, "watch": 0, "total": 0},
                  left_pods=[], run_id=run_id, remove_command=None)
    if params["per_node"] and params["nodes"]:
        # A node named on purpose and passed over in silence makes the check pass without it.
        left_out = readiness.named_left_out(params["nodes"], nodes, skipped)
        if left_out:
            return ("nodes: no sample can run on %s: each named node must be Ready, schedulable (not cordoned) and "
                    "advertise %d %s; mend it or leave it out of nodes" % (
                        ", ".join("%s (%s)" % (s["node"], s["reason"]) for s in left_out), params["count"],
                        params["resource"]),
                    dict(report, skipped_nodes=left_out, elapsed=k8s_wait.elapsed(api)))
    if not planned:
        diagnosis = gpu_diagnosis(api, nodes, params["resource"], params["nodes"])
        msg = "no Ready node advertises %d %s allocatable" % (params["count"], params["resource"])
        if diagnosis:
            msg += ". " + readiness.diagnosis_text(diagnosis)
        return msg, dict(report, diagnosis=diagnosis, elapsed=k8s_wait.elapsed(api))
    if check_mode:
        report["pods"] = [{"name": p["name"], "node": p["node"], "phase": None, "passed": None,
                           "reason": "check mode: not created", "log_tail": [], "duration": None} for p in planned]
        return None, dict(report, changed=params["keep_pods"], elapsed=k8s_wait.elapsed(api))

    clear_leftovers(api, params, [p["name"] for p in planned], deadline)
    # Named just before its create is sent: a pod whose creation went wrong in any way, or
    # that the module was stopped for, is deleted by that name (and by the run's label); a
    # pod whose create never started does not exist and is not named.
    created = []
    created_at = api.clock.now()
    for pod in planned:
        pod["manifest"]["spec"]["activeDeadlineSeconds"] = max(1, params["timeout"])

    def create(pod):
        created.append(pod["name"])
        create_sample(api, params["namespace"], pod, run_id)

    previous = dict((s, signal.signal(s, _interrupt)) for s in _SIGNALS)
    try:
        bounded(create, planned, params["concurrency"])
        reaper = Reaper(api, params["namespace"], not params["keep_pods"], params["concurrency"])
        try:
            reports, result = wait_for_samples(api, params, planned, run_id, created_at, deadline, reaper)
        finally:
            reaper.close()
    except Interrupted as exc:
        # In the plan's order: concurrent creates append in any order.
        left = set(_cleanup_undisturbed(api, params, created, run_id, warn))
        attempted = set(created)
        keys, left_text = left_behind(params, [p["name"] for p in planned if p["name"] in left], run_id)
        gone = [p["name"] for p in planned if p["name"] in attempted - left]
        outcome = "; ".join(([("pods %s deleted" % ", ".join(gone))] if gone else []) + ([left_text] if left else []))
        return ("interrupted by %s: %s" % (exc, outcome or "no pod was created"),
                dict(report, elapsed=k8s_wait.elapsed(api), **keys))
    except (k8s_wait.WaitFailed, k8s_wait.ApiError, ValueError) as exc:
        # run_checked's message, with the pods that may be left and changed=true.
        keys, left_text = left_behind(params, _cleanup_undisturbed(api, params, created, run_id, warn), run_id)
        msg = str(exc) if isinstance(exc, ValueError) else "%s: %s" % (describe(params), exc)
        return msg + (". " + left_text if left_text else ""), dict(report, elapsed=k8s_wait.elapsed(api), **keys)
    except BaseException:
        left_text = left_behind(params, _cleanup_undisturbed(api, params, created, run_id, warn), run_id)[1]
        if left_text:
            warn(left_text)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    # What the reaper deleted is gone; the rest (a pod that did not end, a delete that
    # failed) goes with the run's one delete.
    keys, left_text = left_behind(
        params, _cleanup_undisturbed(api, params, [n for n in created if n not in reaper.deleted], run_id, warn),
        run_id)
    report.update(pods=reports, api_requests=result.api_requests, elapsed=k8s_wait.elapsed(api), **keys)
    if all(r["passed"] for r in reports):
        if left_text and not params["keep_pods"]:
            warn(left_text)
        return None, report
    # The layers of the nodes whose sample failed; when a pod found no node, those of
    # the GPU nodes that should advertise the resource.
    unplaced = any(not r["passed"] and not r["node"] for r in reports)
    failed_nodes = sorted(set(r["node"] for r in reports if not r["passed"] and r["node"]))
    try:
        report["diagnosis"] = gpu_diagnosis(api, nodes or list_nodes(api), params["resource"],
                                            None if unplaced else failed_nodes)
    except k8s_wait.ApiError as exc:
        warn("no per-layer diagnosis: %s" % exc)
        report["diagnosis"] = {}
    msg = failure_message(reports, not result.done, params["timeout"])
    if report["diagnosis"]:
        msg += ". Nodes: " + readiness.diagnosis_text(report["diagnosis"])
    if left_text:
        msg += ". " + left_text
    return msg, report


def main():
    spec = connection_arg_spec()
    spec.update(
        image=dict(type="str", default=readiness.SAMPLE_IMAGE),
        resource=dict(type="str", default=om.CONTAINER_RESOURCE),
        count=dict(type="int", default=1),
        namespace=dict(type="str", default="default"),
        runtime_class_name=dict(type="str"),
        per_node=dict(type="bool", default=False),
        nodes=dict(type="list", elements="str"),
        tolerations=dict(type="list", elements="dict"),
        name_prefix=dict(type="str", default="cuda-vectoradd"),
        pattern=dict(type="str", default="Test PASSED"),
        keep_pods=dict(type="bool", default=False),
        log_lines=dict(type="int", default=10),
        concurrency=dict(type="int", default=8),
        timeout=dict(type="int", default=300),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    _api, (msg, result) = k8s_wait.run_checked(module, check_params,
                                               lambda api: run(api, params, module.check_mode, module.warn),
                                               describe(params))
    if msg:
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
