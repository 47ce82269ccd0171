# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Draining a node as ``kubectl drain`` does, through the API: which pods go and which stay
(pure functions), the two requests a drain makes beyond the watch engine's (cordon, evict),
and the drain itself: cordon, evict through the Eviction API (a PodDisruptionBudget that
refuses, 429, is asked again), then watch the evicted pods go, all within one deadline.

kubectl's rules (k8s.io/kubectl/pkg/drain/filters.go): mirror (static) pods and DaemonSet
pods stay, since deleting them brings them back at once; finished pods go; a pod no
controller owns is refused unless forced (nothing would recreate it), as is one with
emptyDir data unless its loss is accepted. The refusals come before anything changes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait

PODS = "pods"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# kubectl drain asks again every 5 s while a PodDisruptionBudget refuses an eviction.
EVICTION_RETRY = 5.0
EVICT = "evict"
SKIP = "skip"
REFUSE = "refuse"


# The annotation a drain leaves on a node it cordoned, with what it cordoned it for (the module's ``mark``): a later
# run uncordons the nodes that carry it (an earlier run that failed after its drain included), and only those; a
# node someone else cordoned stays cordoned.
CORDON_MARK = "gpuplatform.rke2/cordoned-for"


def _node(nodes, node):
    found = [n for n in ko.read_all("Node", nodes, "nodes") if n["metadata"]["name"] == node]
    if not found:
        raise ValueError("name: there is no node %s in the cluster" % node)
    return found[0]


def is_unschedulable(nodes, node):
    """Whether ``node`` (among the listed ``nodes``) is cordoned; a ValueError naming it when
    the cluster has no such node."""
    return bool((_node(nodes, node).get("spec") or {}).get("unschedulable"))


def cordon_mark(nodes, node):
    """What a drain cordoned ``node`` for (its CORDON_MARK annotation), '' when no drain of ours did."""
    return str((_node(nodes, node)["metadata"].get("annotations") or {}).get(CORDON_MARK) or "")


def uncordon_plan(nodes, node, mark=""):
    """(uncordon, clear the mark) for ``node``: without ``mark``, a cordoned node is uncordoned; with it, only a node
    that carries that mark, whose mark then goes too."""
    unschedulable = is_unschedulable(nodes, node)
    if not mark:
        return unschedulable, False
    marked = cordon_mark(nodes, node) == mark
    return unschedulable and marked, marked


def pod_name(pod):
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace") or "default", meta.get("name") or "")


def disposition(pod, delete_emptydir_data=False, force=False):
    """(evict, skip or refuse, why) for one pod on the node being drained."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and MIRROR_ANNOTATION in annotations:
        return SKIP, "a static pod (the kubelet runs it from its manifest)"
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if any(o.get("kind") == "DaemonSet" for o in owners):
        return SKIP, "a DaemonSet's pod (it would come back at once)"
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return EVICT, "finished"
    if not owners and not force:
        return REFUSE, "no controller owns it: nothing would recreate it (force to delete it anyway)"
    volumes = spec.get("volumes") if isinstance(spec.get("volumes"), list) else []
    if any(isinstance(v, dict) and "emptyDir" in v for v in volumes) and not delete_emptydir_data:
        return REFUSE, "its emptyDir data would be lost (delete_emptydir_data to accept that)"
    if not owners:
        return EVICT, "owned by nothing (forced)"
    return EVICT, "owned by %s/%s" % (owners[0].get("kind") or "?", owners[0].get("name") or "?")


def plan(pods, node, delete_emptydir_data=False, force=False):
    """{"evict": [ns/name], "skip": {ns/name: why}, "refuse": {ns/name: why}} for the pods
    on ``node`` (others are ignored: a selector the API did not apply changes nothing)."""
    result = {EVICT: [], SKIP: {}, REFUSE: {}}
    for pod in sorted(pods, key=pod_name):
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        what, why = disposition(pod, delete_emptydir_data, force)
        if what == EVICT:
            result[EVICT].append(pod_name(pod))
        else:
            result[what][pod_name(pod)] = why
    return result


def refusal(node, refused):
    """The message of a drain refused before anything changed, naming each pod."""
    return "%s cannot be drained: %s" % (node, "; ".join("%s: %s" % (p, why) for p, why in sorted(refused.items())))


def remaining(cache, node, evicted):
    """The evicted pods (ns/name: uid) still on ``node``: a pod of the same name with another
    uid is a new one (a StatefulSet's), which does not count."""
    left = []
    for pod in k8s_wait.objects(cache, PODS):
        name = pod_name(pod)
        uid = (pod.get("metadata") or {}).get("uid")
        if name in evicted and (evicted[name] is None or evicted[name] == uid) \
                and (pod.get("spec") or {}).get("nodeName") == node:
            left.append(name)
    return sorted(left)


class Requests(object):
    """Cordon and evict on the engine's adapter (KubeApi): through its request path
    (``_call``: the error translation and the module's deadline), which it offers no public
    verb for these two. Tests substitute a fake for this class."""

    def __init__(self, api):
        self.api = api

    def _call(self, function, *args):
        return self.api._call(function, *args)  # pylint: disable=protected-access

    def set_unschedulable(self, node, unschedulable, mark=None):
        """``mark``: None leaves the node's CORDON_MARK as it is, '' removes it, else sets it."""
        body = {"spec": {"unschedulable": bool(unschedulable)}}
        if mark is not None:
            body["metadata"] = {"annotations": {CORDON_MARK: mark or None}}
        self._call(self.api.core.patch_node, node, body)

    def evict(self, namespace, name):
        """"evicted", "gone" (404) or "blocked" (429: a PodDisruptionBudget refuses now)."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            self._call(self.api.core.create_namespaced_pod_eviction, name, namespace, body)
        except k8s_wait.ApiError as exc:
            if exc.status == 404:
                return "gone"
            if exc.status == 429:
                return "blocked"
            raise
        return "evicted"


def requests_for(api):
    return Requests(api)


def drain(api, node, timeout, delete_emptydir_data=False, force=False, check_mode=False, mark=""):
    """Drain ``node``: {"changed", "cordoned", "evicted", "skipped", "refused", "blocked", "done",
    "waiting", "api_requests"}. Refusals happen before anything changes; ``done`` is False when
    the deadline passed with pods still there or evictions still refused. ``mark``: what the
    cordon is for, left on the node (CORDON_MARK) when this drain cordons it."""
    nodes = k8s_wait.by_name("nodes", "v1", "nodes", node)
    unschedulable = is_unschedulable(api.list(nodes, k8s_wait.LIST_READ_TIMEOUT)[0], node)
    pods_res = k8s_wait.resource(PODS, "v1", PODS, field_selector="spec.nodeName=" + node)
    pods = ko.read_all("Pod", api.list(pods_res, k8s_wait.LIST_READ_TIMEOUT)[0], "pods")
    by_name = dict((pod_name(p), p) for p in pods)
    steps = plan(pods, node, delete_emptydir_data, force)
    result = {"changed": False, "cordoned": False, "evicted": [], "skipped": steps[SKIP], "refused": steps[REFUSE],
              "blocked": [], "done": False, "waiting": [], "api_requests": {"list": 2, "watch": 0, "total": 2}}
    if steps[REFUSE]:
        return result
    result["changed"] = not unschedulable or bool(steps[EVICT])
    if check_mode:
        result.update(cordoned=not unschedulable, evicted=steps[EVICT], done=True)
        return result
    requests = requests_for(api)
    if not unschedulable:
        if mark:
            requests.set_unschedulable(node, True, mark)
        else:
            requests.set_unschedulable(node, True)
        result["cordoned"] = True
    evicted = {}
    pending = list(steps[EVICT])
    while pending:
        blocked = []
        for name in pending:
            namespace, _sep, pod = name.partition("/")
            outcome = requests.evict(namespace, pod)
            if outcome == "blocked":
                blocked.append(name)
            elif outcome == "evicted":
                evicted[name] = (by_name[name].get("metadata") or {}).get("uid")
        pending = blocked
        if not pending or api.deadline is not None and api.clock.now() + EVICTION_RETRY > api.deadline:
            break
        api.clock.sleep(EVICTION_RETRY, threading.Event())
    result["evicted"] = sorted(evicted)
    result["blocked"] = sorted(pending)
    if pending:
        return result
    left = api.deadline - api.clock.now() if api.deadline is not None else timeout

    def condition(cache):
        waiting = remaining(cache, node, evicted)
        return not waiting, waiting

    waited = k8s_wait.Waiter(api, [pods_res], max(left, 0)).wait(condition)
    result["done"] = waited.done
    result["waiting"] = waited.detail if not waited.done else []
    result["api_requests"] = dict((k, v + result["api_requests"].get(k, 0)) for k, v in waited.api_requests.items())
    return result


def not_drained_message(node, result, timeout):
    if result["blocked"]:
        return ("%s not drained within %ds: evicting %s is refused by a PodDisruptionBudget (429); the node stays "
                "cordoned" % (node, timeout, ", ".join(result["blocked"])))
    return ("%s not drained within %ds: %s still there; the node stays cordoned"
            % (node, timeout, ", ".join(result["waiting"])))
