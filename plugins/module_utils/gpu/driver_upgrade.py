# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Following a GPU driver upgrade that the GPU Operator's own upgrade controller carries
out, node by node: pure functions over plain dicts (nodes, pods, DaemonSets, ClusterPolicies,
PodDisruptionBudgets as the API returns them), and the wait's condition for ``k8s_wait``.

What the controller does, from its source (gpu-operator v26.3.2 ``controllers/upgrade_controller.go``
and NVIDIA k8s-operator-libs ``pkg/upgrade``, vendored there):

- it runs only with ``driver.upgradePolicy.autoUpgrade`` on and sandbox workloads off; else it
  removes the state label from every node and does nothing (``Reconcile``,
  ``removeNodeUpgradeStateLabels``);
- it builds its state from the driver pods (``app=nvidia-driver-daemonset``) in the operator's
  namespace and the node each runs on, and refuses to act while a driver DaemonSet has
  fewer pods than it wants scheduled (``upgrade_state.go BuildState``);
- a node whose driver pod's ``controller-revision-hash`` is not that of the DaemonSet's
  newest ControllerRevision is moved from no label or ``upgrade-done`` to ``upgrade-required``
  (``common_manager.go ProcessDoneOrUnknownNodes``, ``podInSyncWithDS``); an unlabelled node
  whose pod is in sync becomes ``upgrade-done`` directly;
- ``upgrade-required`` nodes start (``cordon-required``) while fewer than
  ``maxParallelUpgrades`` nodes are in progress (0: no limit) and ``maxUnavailable`` allows;
  a node cordoned beforehand starts whatever the limit (``upgrade_inplace.go
  ProcessUpgradeRequiredNodes``); a node labelled ``nvidia.com/gpu-driver-upgrade.skip=true``
  never starts;
- then ``wait-for-jobs-required``, ``pod-deletion-required`` (GPU pods evicted through the
  Eviction API, ``pod_manager.go SchedulePodEviction``), ``drain-required`` (``kubectl drain``'s
  helper when ``drain.enable``; a failed drain is ``upgrade-failed``), ``pod-restart-required``
  (the old driver pod deleted; a new pod failing with more than 10 restarts is
  ``upgrade-failed``), ``validation-required`` (the ``nvidia-operator-validator`` pods on the node
  Running and Ready, ``upgrade-failed`` after 600 s), ``uncordon-required``, ``upgrade-done``;
- an ``upgrade-failed`` node moves on only once its driver pod is of the current revision and
  Ready (``ProcessUpgradeFailedNodes``): nothing the controller does restarts it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_drain
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness

STATE_LABEL = om.DRIVER_UPGRADE_STATE_LABEL
DRIVER = om.operand("driver")
VALIDATOR = om.operand("operator-validator")
# The driver container of the driver DaemonSet (assets/state-driver/0500_daemonset.yaml).
DRIVER_CONTAINER = "nvidia-driver-ctr"
# upgrade_controller.go plannedRequeueInterval: the controller's pass without an event to start it (it
# does not watch pods, so a driver pod that becomes Ready is seen then).
PLANNED_REQUEUE_SECONDS = 120
# common_manager.go isDriverPodFailing: a restart count above this is upgrade-failed.
FAILING_RESTARTS = 10
# validation_manager.go validationTimeoutSeconds.
VALIDATION_TIMEOUT = 600
# How many nodes a failing wait looks at closer (their pods, the PDBs): one list each.
MOST_EXAMINED = 10

_DESCRIBE = {
    om.UPGRADE_CORDON_REQUIRED: "waiting for the controller to cordon it",
    om.UPGRADE_UNCORDON_REQUIRED: "waiting for the controller to uncordon it",
    om.UPGRADE_NODE_MAINTENANCE_REQUIRED: "in requestor mode: waiting for the external maintenance operator",
    om.UPGRADE_POST_MAINTENANCE_REQUIRED: "in requestor mode: waiting for the post-maintenance driver pod restart",
}


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _name(obj):
    return _meta(obj).get("name")


def _labels(obj):
    return _meta(obj).get("labels") or {}


def upgrade_state(node):
    """The node's upgrade state label ("" when it has none: UpgradeStateUnknown)."""
    return _labels(node).get(STATE_LABEL) or ""


def in_progress(node):
    """The node holds one of maxParallelUpgrades' slots (GetUpgradesInProgress). A node that
    was cordoned before its upgrade (the initial-state annotation) does not count: the
    controller starts such nodes whatever the limit."""
    if upgrade_state(node) in om.UPGRADE_NOT_IN_PROGRESS:
        return False
    return om.DRIVER_UPGRADE_INITIAL_UNSCHEDULABLE_ANNOTATION not in (_meta(node).get("annotations") or {})


# ---------------------------------------------------------------- the policy

def upgrade_policy(clusterpolicy):
    """What the wait reads of the active ClusterPolicy: ``{"exists", "auto_upgrade",
    "max_parallel", "sandbox", "driver_version", "wait_selector", "drain"}``; with no
    ClusterPolicy the chart defaults (autoUpgrade on, maxParallelUpgrades 1)."""
    spec = (clusterpolicy or {}).get("spec") or {}
    driver = spec.get("driver") or {}
    policy = driver.get("upgradePolicy") or {}
    sandbox = (spec.get("sandboxWorkloads") or {}).get("enabled") is True
    max_parallel = policy.get("maxParallelUpgrades")
    return {
        "exists": clusterpolicy is not None,
        "auto_upgrade": policy.get("autoUpgrade") is True if clusterpolicy is not None else True,
        "max_parallel": max_parallel if isinstance(max_parallel, int) and not isinstance(max_parallel, bool) else 1,
        "sandbox": sandbox,
        # With the NVIDIADriver CRD each NVIDIADriver names its own version.
        "driver_version": driver.get("version") if isinstance(driver.get("version"), str)
        and driver.get("useNvidiaDriverCRD") is not True else None,
        "wait_selector": (policy.get("waitForCompletion") or {}).get("podSelector") or "",
        "drain": (policy.get("drain") or {}).get("enable") is True,
    }


def controller_off_reason(policy):
    """Why the upgrade controller does not act under ``policy``, or None."""
    if policy["sandbox"]:
        return ("the upgrade controller does not run with sandboxWorkloads.enabled=true in the ClusterPolicy "
                "(it removes the state labels)")
    if not policy["auto_upgrade"]:
        return ("driver.upgradePolicy.autoUpgrade is off in the ClusterPolicy: the upgrade controller removes the "
                "state labels and upgrades nothing (the driver DaemonSet's OnDelete pods stay old)")
    return None


# ---------------------------------------------------------------- driver pods and images

def image_has_version(image, version):
    """Whether an image reference is of driver ``version``: the operator tags driver images
    ``<version>-<os>`` (precompiled ``<version>-<kernel>-<os>``), or pins a digest given as
    the version (``sha256:...``)."""
    if not image or not version:
        return False
    if "@" in image:
        return image.split("@", 1)[1] == version
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else ""
    return tag == version or tag.startswith(version + "-")


def driver_image(pod_spec):
    """The driver container's image in a pod spec (or a DaemonSet's template spec)."""
    containers = (pod_spec or {}).get("containers") or ()
    for container in containers:
        if container.get("name") == DRIVER_CONTAINER:
            return container.get("image")
    return containers[0].get("image") if containers else None


def driver_daemonsets(daemonsets, namespace):
    return [d for d in daemonsets if _meta(d).get("namespace") == namespace
            and om.operand_for_daemonset(_name(d)) is DRIVER]


def driver_pods_by_node(pods, namespace):
    """{node: [driver pods]} in ``namespace`` (a pod not scheduled yet counts on the node its
    DaemonSet pinned it to)."""
    result = {}
    for pod in pods:
        if _meta(pod).get("namespace") != namespace or om.operand_of_pod(_labels(pod)) is not DRIVER:
            continue
        node = node_check.pod_node(pod)
        if node:
            result.setdefault(node, []).append(pod)
    return result


def _restarts(pod):
    status = pod.get("status") or {}
    return max([s.get("restartCount") or 0 for s in (status.get("initContainerStatuses") or [])
                + (status.get("containerStatuses") or [])] or [0])


def daemonset_problems(daemonsets, pods, namespace, version=None):
    """``{DaemonSet: why}`` for the driver DaemonSets that hold the upgrade up: not rolled out
    (kubernetes.core's rule, ``readiness.daemonset_rollout_problem``), fewer pods than it wants
    scheduled (the controller then refuses to build its state: BuildState), or a template of
    another driver version than ``version``."""
    result = {}
    by_node = driver_pods_by_node(pods, namespace)
    owned = {}
    for node_pods in by_node.values():
        for pod in node_pods:
            for ref in _meta(pod).get("ownerReferences") or ():
                if ref.get("kind") == "DaemonSet":
                    owned[ref.get("name")] = owned.get(ref.get("name"), 0) + 1
    for daemonset in driver_daemonsets(daemonsets, namespace):
        name = _name(daemonset)
        status = daemonset.get("status") or {}
        problems = []
        image = driver_image(((daemonset.get("spec") or {}).get("template") or {}).get("spec"))
        if version and not image_has_version(image, version):
            problems.append("its template runs %s, not driver %s (the operator has not updated it yet)"
                            % (image, version))
        desired = status.get("desiredNumberScheduled") or 0
        if desired > owned.get(name, 0):
            problems.append("%d of %d pods exist: the upgrade controller acts only once the driver DaemonSet has "
                            "all its pods (BuildState)" % (owned.get(name, 0), desired))
        if desired or owned.get(name):
            rollout = readiness.daemonset_rollout_problem(daemonset)
            if rollout:
                problems.append(rollout)
        if problems:
            result[name] = "; ".join(problems)
    return result


# ---------------------------------------------------------------- one node

def _pick(node_pods, outdated):
    """The driver pod that stands for the node: one not terminating, a current one first."""
    live = [p for p in node_pods if not node_check.is_terminating(p)]
    live.sort(key=lambda p: (_name(p) in outdated, _name(p)))
    return (live or sorted(node_pods, key=_name) or [None])[0]


def node_report(node, node_pods, outdated, policy, validators=(), others_in_progress=(), limit=None):
    """Where one driver node stands: ``{"state", "done", "driver_pod", "image",
    "pod_current", "pod_ready", "reason"}``. Done: labelled ``upgrade-done`` or not labelled
    (the controller labels an unlabelled in-sync node done itself), with a driver pod of the
    DaemonSet's current template that is Running and Ready; ``outdated``: the pods of an old
    template (``readiness.daemonset_rollouts``)."""
    state = upgrade_state(node)
    pod = _pick(node_pods, outdated)
    current = pod is not None and _name(pod) not in outdated and not node_check.is_terminating(pod)
    ready = current and node_check.is_running(pod)
    report = {"state": state or None, "driver_pod": _name(pod), "pod_current": current, "pod_ready": ready,
              "image": driver_image((pod or {}).get("spec")), "done": ready and state in ("", om.UPGRADE_DONE)}
    if not report["done"]:
        report["reason"] = _reason(node, state, pod, current, policy, validators, others_in_progress, limit)
    else:
        report["reason"] = None
    return report


def _pod_text(pod, current):
    if pod is None:
        return ("no driver pod on the node (the old one is deleted and the DaemonSet has not made the new one yet, "
                "or the node no longer gets one)")
    if node_check.is_terminating(pod):
        return "driver pod %s is terminating" % _name(pod)
    if not current:
        return "driver pod %s is of an old revision" % _name(pod)
    why = node_check.pod_status_reason(pod)
    if _restarts(pod) > FAILING_RESTARTS:
        why += ", %d restarts (the controller calls more than %d a failure)" % (_restarts(pod), FAILING_RESTARTS)
    return "driver pod %s of the current revision is not ready: %s" % (_name(pod), why)


def _reason(node, state, pod, current, policy, validators, others_in_progress, limit):
    pod_text = _pod_text(pod, current)
    if state == "":
        if pod is not None and not current and not node_check.is_terminating(pod):
            off = controller_off_reason(policy)
            why = "; " + off if off else " (the controller has not seen it yet)"
            return "never picked up: no %s label while %s%s" % (STATE_LABEL, pod_text, why)
        return pod_text
    if state == om.UPGRADE_DONE:
        if pod is not None and not current and not node_check.is_terminating(pod):
            return ("labelled %s from before the change: %s, and the controller has not marked it %s yet"
                    % (state, pod_text, om.UPGRADE_REQUIRED))
        return "%s, %s" % (state, pod_text)
    if state == om.UPGRADE_REQUIRED:
        if _labels(node).get(om.DRIVER_UPGRADE_SKIP_LABEL) == "true":
            return "%s: labelled %s=true, so the controller never starts it" % (state, om.DRIVER_UPGRADE_SKIP_LABEL)
        if limit:
            return "%s: waiting for an upgrade slot: %d in progress (%s), maxParallelUpgrades %d" % (
                state, len(others_in_progress), ", ".join(others_in_progress) or "none", limit)
        return "%s: waiting for the controller to start it (maxUnavailable may hold it)" % state
    if state == om.UPGRADE_WAIT_FOR_JOBS_REQUIRED:
        return "%s: waiting for the pods matching %r on the node to complete (driver.upgradePolicy.waitForCompletion)" % (
            state, policy["wait_selector"])
    if state == om.UPGRADE_POD_DELETION_REQUIRED:
        return "%s: the controller is evicting the GPU pods on the node" % state
    if state == om.UPGRADE_DRAIN_REQUIRED:
        return "%s: the controller is draining the node" % state
    if state == om.UPGRADE_POD_RESTART_REQUIRED:
        return "%s: %s" % (state, pod_text)
    if state == om.UPGRADE_VALIDATION_REQUIRED:
        waiting = ["%s: %s" % (_name(p), node_check.pod_status_reason(p)) for p in validators
                   if not node_check.is_running(p)]
        return "%s: waiting for the %s pod on the node to be Running and Ready (%s; upgrade-failed after %d s)" % (
            state, VALIDATOR.daemonset, "; ".join(waiting) or ("no such pod" if not validators else "ready now"),
            VALIDATION_TIMEOUT)
    if state == om.UPGRADE_FAILED:
        if current and node_check.is_running(pod):
            return ("%s: its driver pod %s is now of the current revision and Ready: the controller moves it to %s at "
                    "its next pass (ProcessUpgradeFailedNodes; a pass at the latest every %d s)" % (
                        state, _name(pod), om.UPGRADE_UNCORDON_REQUIRED, PLANNED_REQUEUE_SECONDS))
        text = ("%s: the controller moves it on only once its driver pod is of the current revision and Ready "
                "(%s)" % (state, pod_text))
        if pod is not None and not current and not node_check.is_terminating(pod):
            # The controller never retries the eviction or the drain of a failed node: the way on is by hand.
            text += ("; to go on, move the GPU workloads off the node, then delete the driver pod: kubectl -n %s "
                     "delete pod %s" % (_meta(pod).get("namespace") or "gpu-operator", _name(pod)))
        return text
    if state in _DESCRIBE:
        return "%s: %s" % (state, _DESCRIBE[state])
    return "state %r is none the upgrade controller writes (%s)" % (state, ", ".join(om.DRIVER_UPGRADE_STATES))


# ---------------------------------------------------------------- the fleet

def evaluate(nodes, pods, daemonsets, clusterpolicies, namespace, names=None, max_parallel=None, version=None):
    """One look at the fleet: ``{"nodes": {node: node_report}, "wanted", "in_progress",
    "limit", "daemonsets", "policy", "version"}``. ``wanted``: the nodes with a driver pod (or
    ``names``); ``in_progress``: every node holding an upgrade slot (in_progress); ``limit``:
    ``max_parallel`` or the ClusterPolicy's maxParallelUpgrades (0: none); ``version``: the
    driver version expected (else the ClusterPolicy's ``driver.version``)."""
    nodes = ko.read_all("Node", nodes, "nodes")
    policy = upgrade_policy(readiness.active_clusterpolicy(clusterpolicies))
    version = version or policy["driver_version"]
    limit = policy["max_parallel"] if max_parallel is None else max_parallel
    by_node = driver_pods_by_node(pods, namespace)
    outdated, _owned = readiness.daemonset_rollouts(daemonsets, pods, namespace)
    by_name = dict((_name(n), n) for n in nodes)
    progressing = sorted(n for n, node in by_name.items() if in_progress(node))
    wanted = sorted(names) if names else sorted(n for n in by_node if n in by_name)
    validators = {}
    for pod in pods:
        if _meta(pod).get("namespace") == namespace and om.pod_matches(VALIDATOR, _labels(pod)):
            validators.setdefault(node_check.pod_node(pod), []).append(pod)
    reports = {}
    for name in wanted:
        if name not in by_name:
            reports[name] = {"state": None, "done": False, "driver_pod": None, "image": None, "pod_current": False,
                             "pod_ready": False, "reason": "the node is not in the cluster"}
            continue
        reports[name] = node_report(by_name[name], by_node.get(name, []), outdated, policy, validators.get(name, ()),
                                    [n for n in progressing if n != name], limit)
    return {"nodes": reports, "wanted": wanted, "in_progress": progressing, "limit": limit, "policy": policy,
            "daemonsets": daemonset_problems(daemonsets, pods, namespace, version), "version": version}


class UpgradeCondition(object):
    """The wait's condition (``k8s_wait.Waiter``): ``(stop, detail)`` on the cache of nodes,
    pods and DaemonSets of the operator's namespace and ClusterPolicies.

    It remembers across evaluations what one look cannot say: every node selected so far
    (a node whose driver pod is deleted for its restart stays wanted), the states each node
    was seen in and since when (``now``: the wait's clock), and the most nodes seen in
    progress at once; a look with more than the limit in progress is a ``parallel_excess``.
    Watch events that come together are evaluated together, so a state held for less
    than one burst may go unseen: the count is a lower bound.

    It stops with ``verdict`` ``done`` (every wanted node done, every driver DaemonSet rolled
    out, of ``version`` where one is known), ``failed`` (a wanted node ``upgrade-failed``:
    nothing the controller does moves it on), or ``parallel-excess`` (with
    ``fail_on_parallel_excess``)."""

    def __init__(self, namespace, now, names=None, max_parallel=None, version=None, fail_on_parallel_excess=False):
        self.namespace = namespace
        self.now = now
        self.names = names
        self.max_parallel = max_parallel
        self.version = version
        self.fail_on_parallel_excess = fail_on_parallel_excess
        self.started = now()
        self.remembered = set()
        self.seen = {}  # node -> [states in the order seen]
        self.since = {}  # node -> (state, clock time first seen in it)
        self.peak = {"count": 0, "nodes": []}
        self.excess = []

    def _observe(self, look, nodes):
        at = self.now()
        for node in nodes:
            name, state = _name(node), upgrade_state(node) or None
            if name not in self.remembered and not state:
                continue
            states = self.seen.setdefault(name, [])
            if not states or states[-1] != state:
                states.append(state)
            if self.since.get(name, (object(),))[0] != state:
                self.since[name] = (state, at)
        progressing = look["in_progress"]
        if len(progressing) > self.peak["count"]:
            self.peak = {"count": len(progressing), "nodes": list(progressing)}
        if look["limit"] and len(progressing) > look["limit"] and \
                not any(e["nodes"] == progressing for e in self.excess):
            self.excess.append({"nodes": list(progressing), "limit": look["limit"],
                                "seconds": round(at - self.started, 3)})

    def __call__(self, cache):
        nodes = readiness.objects(cache, "nodes")
        look = evaluate(nodes, readiness.objects(cache, "pods"), readiness.objects(cache, "daemonsets"),
                        readiness.objects(cache, "clusterpolicies"), self.namespace, self.names, self.max_parallel,
                        self.version)
        reports = look["nodes"]
        for name in sorted(self.remembered - set(reports)):
            present = [n for n in nodes if _name(n) == name]
            reports[name] = dict(node_report(present[0], [], {}, look["policy"]) if present else {
                "state": None, "driver_pod": None, "image": None, "pod_current": False, "pod_ready": False},
                done=False)
            if not present:
                reports[name]["reason"] = "selected earlier in this wait, is gone from the cluster"
        self.remembered.update(reports)
        self._observe(look, nodes)
        at = self.now()
        for name, report in reports.items():
            report["states_seen"] = list(self.seen.get(name, []))
            state, since = self.since.get(name, (None, at))
            report["in_state_for"] = round(at - since, 3) if state == report["state"] else 0.0
        return self._verdict(look, reports)

    def _verdict(self, look, reports):
        done = sorted(n for n, r in reports.items() if r["done"])
        # A failed node whose driver pod is current and Ready again (restarted by hand, or a validation that timed
        # out) is one the controller moves on at its next pass: waited for, not a failure.
        failed = sorted(n for n, r in reports.items() if r["state"] == om.UPGRADE_FAILED and not r["pod_ready"])
        detail = {"nodes": reports, "done_nodes": done, "failed_nodes": failed, "daemonsets": look["daemonsets"],
                  "in_progress": look["in_progress"], "max_parallel_upgrades": look["limit"],
                  "peak_in_progress": dict(self.peak), "parallel_excess": list(self.excess),
                  "driver_version": look["version"], "verdict": None}
        if failed:
            detail["verdict"] = "failed"
            detail["message"] = "%s %s" % (", ".join(failed), om.UPGRADE_FAILED)
        elif self.fail_on_parallel_excess and self.excess:
            detail["verdict"] = "parallel-excess"
            detail["message"] = excess_text(self.excess)
        elif reports and len(done) == len(reports) and not look["daemonsets"]:
            detail["verdict"] = "done"
            detail["message"] = "%d of %d driver nodes upgrade-done" % (len(done), len(reports))
        else:
            parts = ["%d of %d driver nodes upgrade-done" % (len(done), len(reports)) if reports else
                     "no node runs a driver pod in %s" % self.namespace]
            if look["daemonsets"]:
                parts.append("driver DaemonSets: " + "; ".join("%s: %s" % kv for kv in sorted(look["daemonsets"].items())))
            detail["message"] = "; ".join(parts)
        return detail["verdict"] is not None, detail


# Why the real controller can start a node past maxParallelUpgrades (test_driver_upgrade_lab saw 3 in progress with
# a limit of 2): k8s-operator-libs BuildState skips a driver pod that is pending without a node, so a pass that runs
# between an in-progress node's old driver pod's deletion and its new pod's scheduling counts one node fewer, in
# progress and in all, and GetUpgradesAvailable hands out its slot again.
EXCESS_CAUSE = ("the controller leaves a node out of its count while the node's new driver pod is not scheduled yet, "
                "and can start another node then")


def excess_text(excess):
    return "; ".join("%d nodes in progress at once (%s) at %.1f s, maxParallelUpgrades %d" % (
        len(e["nodes"]), ", ".join(e["nodes"]), e["seconds"], e["limit"]) for e in excess)


# ---------------------------------------------------------------- what holds a node's pods

def _selector_matches(selector, labels):
    """A metav1.LabelSelector against ``labels``: a null selector matches nothing, an empty
    one everything (policy/v1 PodDisruptionBudget)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or ()
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def refuses_evictions(pdb):
    """A PodDisruptionBudget that allows no disruption now (status.disruptionsAllowed 0, or no
    status yet: the disruption controller has not counted it, and the API refuses until it has)."""
    return ((pdb.get("status") or {}).get("disruptionsAllowed") or 0) < 1


def blocking_pdbs(pod, pdbs):
    """The PodDisruptionBudgets that refuse ``pod``'s eviction now: in its namespace, selecting
    it, with no disruption allowed (refuses_evictions)."""
    result = []
    for pdb in pdbs:
        if _meta(pdb).get("namespace") != _meta(pod).get("namespace"):
            continue
        if not _selector_matches((pdb.get("spec") or {}).get("selector"), _labels(pod)):
            continue
        if refuses_evictions(pdb):
            status = pdb.get("status")
            why = ("disruptionsAllowed 0, %s of %s desired healthy" % (status.get("currentHealthy"),
                                                                       status.get("desiredHealthy"))
                   if status else "not counted by the disruption controller yet")
            result.append("PodDisruptionBudget %s/%s (%s)" % (_meta(pdb).get("namespace"), _name(pdb), why))
    return result


def is_gpu_pod(pod):
    """cmd/gpu-operator/main.go gpuPodSpecFilter: a Running or Pending pod whose containers ask
    for nvidia.com/gpu* or nvidia.com/mig-*: the pods pod-deletion-required evicts."""
    if (pod.get("status") or {}).get("phase") not in ("Running", "Pending"):
        return False
    for container in (pod.get("spec") or {}).get("containers") or ():
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            if any(k.startswith("nvidia.com/gpu") or k.startswith("nvidia.com/mig-") for k in resources.get(kind) or {}):
                return True
    return False


def _to_remove(state, pod):
    """Whether the controller removes ``pod`` in ``state``: never a DaemonSet's or a static pod
    (kubectl's drain helper, IgnoreAllDaemonSets); a GPU pod in pod-deletion-required; in
    drain-required every pod not labelled with the drain skip label (upgrade_controller.go
    UpgradeSkipDrainLabelSelector, which pod deletion does not apply); after a failed
    upgrade, either."""
    if node_check.is_terminating(pod) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if node_drain.disposition(pod)[0] == node_drain.SKIP:
        return False
    drained = _labels(pod).get(om.DRIVER_UPGRADE_DRAIN_SKIP_LABEL) != "true"
    if state == om.UPGRADE_POD_DELETION_REQUIRED:
        return is_gpu_pod(pod)
    if state == om.UPGRADE_DRAIN_REQUIRED:
        return drained
    return is_gpu_pod(pod) or drained


def _removed(states, node_pods, pdbs):
    """(pod, its name, the PDBs that refuse its eviction now) for each pod on a node that the
    controller removes in any of ``states``, in name order."""
    for pod in sorted(node_pods, key=node_drain.pod_name):
        if any(_to_remove(state, pod) for state in states):
            yield pod, node_drain.pod_name(pod), blocking_pdbs(pod, pdbs)


def _refused(name, budgets):
    return "%s: eviction refused by %s" % (name, ", ".join(budgets))


def eviction_blockers(state, node_pods, pdbs):
    """What keeps the pods on a node in pod-deletion-required, drain-required or
    upgrade-failed from going: one line per pod the controller still has to remove, with
    the PodDisruptionBudgets that refuse its eviction, or the drain's refusal."""
    result = []
    for pod, name, budgets in _removed((state,), node_pods, pdbs):
        what, why = node_drain.disposition(pod)
        if budgets:
            result.append(_refused(name, budgets))
        elif what == node_drain.REFUSE and state != om.UPGRADE_POD_DELETION_REQUIRED:
            result.append("%s: the drain refuses it: %s" % (name, why))
        else:
            result.append("%s: not evicted yet" % name)
    return result


EXAMINED_STATES = (om.UPGRADE_POD_DELETION_REQUIRED, om.UPGRADE_DRAIN_REQUIRED, om.UPGRADE_FAILED)


def to_examine(detail):
    """The nodes a failing wait looks at closer (their pods and the PDBs): those in a state
    where the controller removes pods, at most MOST_EXAMINED."""
    return sorted(n for n, r in detail["nodes"].items() if r["state"] in EXAMINED_STATES)[:MOST_EXAMINED]


def add_blockers(detail, pods_by_node, pdbs):
    """Each examined node's ``blockers`` (eviction_blockers), appended to its reason."""
    for name, node_pods in pods_by_node.items():
        report = detail["nodes"][name]
        report["blockers"] = eviction_blockers(report["state"], node_pods, pdbs)
        if report["blockers"]:
            report["reason"] = "%s; %s" % (report["reason"], "; ".join(report["blockers"]))


def failure_text(detail, most=10):
    """Per node not done: ``node (state, for N s): reason``, the first ``most``."""
    lines = []
    for name, report in sorted(detail["nodes"].items()):
        if report["done"]:
            continue
        held = " for %.0f s" % report["in_state_for"] if report.get("in_state_for") else ""
        lines.append("%s (%s%s): %s" % (name, report["state"] or "no label", held, report["reason"]))
    more = len(lines) - most
    return "; ".join(lines[:most]) + ("; and %d more" % more if more > 0 else "")


# ---------------------------------------------------------------- before the change

def driver_nodes(pods, namespace):
    """The nodes with a driver pod of ``namespace`` that is not going: those the controller
    upgrades (BuildState takes the driver pods and their nodes)."""
    key, value = DRIVER.pod_selector
    return sorted(set((p.get("spec") or {}).get("nodeName") for p in pods
                      if _meta(p).get("namespace") == namespace and _labels(p).get(key) == value
                      and not node_check.is_terminating(p) and (p.get("spec") or {}).get("nodeName")))


def refused_evictions(pods, pdbs, namespace, drain=False):
    """Before a change that restarts the driver: ``{node: [line]}`` for each driver node with a
    pod the controller will remove (its GPU pods, pod-deletion-required; with ``drain``, also
    every pod the drain takes) whose eviction a PodDisruptionBudget refuses now. The controller
    asks for such an eviction again and again, without a pause, until the timeout
    (gpuPodDeletion, then drain), then marks the node upgrade-failed."""
    states = (om.UPGRADE_POD_DELETION_REQUIRED, om.UPGRADE_DRAIN_REQUIRED) if drain else (
        om.UPGRADE_POD_DELETION_REQUIRED,)
    by_node = {}
    for pod in pods:
        by_node.setdefault((pod.get("spec") or {}).get("nodeName"), []).append(pod)
    result = {}
    for node in driver_nodes(pods, namespace):
        lines = [_refused(name, budgets) for _pod, name, budgets in _removed(states, by_node.get(node, ()), pdbs)
                 if budgets]
        if lines:
            result[node] = lines
    return result


def deletion_timeouts(clusterpolicy):
    """(gpu pod deletion timeout, drain timeout or None when the drain is off) in seconds, as the
    ClusterPolicy sets them (the chart's defaults, 300 s each, where it says nothing). 0 is no
    timeout at all: kubectl's drain helper then waits forever (drain.go, globalTimeout)."""
    policy = (((clusterpolicy or {}).get("spec") or {}).get("driver") or {}).get("upgradePolicy") or {}
    deletion = (policy.get("podDeletion") or {}).get("timeoutSeconds")
    drain = policy.get("drain") or {}
    return (deletion if isinstance(deletion, int) else 300,
            (drain.get("timeoutSeconds") if isinstance(drain.get("timeoutSeconds"), int) else 300)
            if drain.get("enable") is True else None)


def policy_of_values(values):
    """The ClusterPolicy part deletion_timeouts reads, as the chart renders it from its values
    (templates/clusterpolicy.yaml: driver.upgradePolicy.gpuPodDeletion -> podDeletion, drain ->
    drain): the timeouts of a change before the operator has them."""
    policy = ((((values or {}).get("driver") or {}).get("upgradePolicy")) or {})
    return {"spec": {"driver": {"upgradePolicy": {"podDeletion": policy.get("gpuPodDeletion") or {},
                                                  "drain": policy.get("drain") or {}}}}}


def refusing_namespaces(pdbs):
    """The namespaces with a PodDisruptionBudget that allows no disruption now, sorted."""
    return sorted(set(_meta(b).get("namespace") for b in pdbs if refuses_evictions(b) and _meta(b).get("namespace")))


def refusal_text(refused, deletion_timeout, drain_timeout=None, most=10):
    """What refused_evictions found, for a warning or a failure: the nodes, the pods and
    budgets, what the controller will do, and the ways out."""
    lines = ["%s: %s" % (node, "; ".join(found)) for node, found in sorted(refused.items())]
    more = len(lines) - most
    waits = "%s s of GPU pod deletion" % deletion_timeout if deletion_timeout else "GPU pod deletion without a timeout"
    if drain_timeout is not None:
        waits += ", then %s" % ("%s s of drain" % drain_timeout if drain_timeout else "a drain without a timeout")
    return ("a driver upgrade now would stop on %d node(s): %s%s. The upgrade controller asks for each of these "
            "evictions again without a pause for %s, then marks the node upgrade-failed, cordoned, with its old "
            "driver. Before the change, move those pods or let their budgets allow a disruption; or keep "
            "driver.upgradePolicy.gpuPodDeletion.timeoutSeconds (and drain.timeoutSeconds) short" % (
                len(refused), "; ".join(lines[:most]), "; and %d more" % more if more > 0 else "", waits))
