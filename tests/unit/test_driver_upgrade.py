"""gpu_driver_upgrade_wait: the GPU Operator's driver upgrade state machine as the wait reads it
(plugins/module_utils/gpu/driver_upgrade.py), on hand-built API objects, and the module end to
end on the scripted fake cluster."""
import copy

import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from ansible_collections.gpuplatform.rke2.plugins.module_utils.gpu import driver_upgrade as du
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_driver_upgrade_wait
from tests.unit.k8s_fake import FakeCluster
from tests.unit.test_wait_modules import run  # noqa: F401  pylint: disable=unused-import
from tests.unit.test_wait_rollouts import owned, rolled
from tests.unit.wait_builders import NS, cache, clusterpolicy, gpu_node, operand_pod

OLD, NEW = "570.172.08", "580.105.08"
NODES = ["gpu-1", "gpu-2", "gpu-3"]
LABEL = om.DRIVER_UPGRADE_STATE_LABEL


# ---------------------------------------------------------------- builders

def image(version):
    return "nvcr.io/nvidia/driver:%s-ubuntu22.04" % version


def driver_ds(version=NEW, generation=2, desired=3, updated=None, ready=None, observed=None):
    """The driver DaemonSet at its template ``generation`` (OnDelete: its pods change only when
    deleted), its driver container of ``version``."""
    ds = rolled("driver", template_generation=generation, desired=desired, updated=updated, ready=ready,
                observed=observed)
    ds["spec"]["template"]["spec"]["containers"] = [{"name": "k8s-driver-manager", "image": "manager:v0.11.0"},
                                                    {"name": du.DRIVER_CONTAINER, "image": image(version)}]
    return ds


def driver_pod(node_name, ds, old=False, **kwargs):
    """The driver pod on a node: of the DaemonSet's current template, or of the one before."""
    generation = int(ds["metadata"]["annotations"][rd.TEMPLATE_GENERATION_ANNOTATION])
    pod = operand_pod("driver", node_name, **kwargs)
    pod["metadata"]["name"] = "nvidia-driver-daemonset-%s%s" % (node_name, "-old" if old else "")
    pod["spec"]["containers"] = [{"name": du.DRIVER_CONTAINER, "image": image(OLD if old else NEW)}]
    return owned(pod, ds, generation - 1 if old else generation, "old-hash" if old else "new-hash")


def node(name, state=None, labels=None, annotations=None, unschedulable=False):
    labels = dict(labels or {})
    if state:
        labels[LABEL] = state
    result = gpu_node(name, labels=labels, unschedulable=unschedulable)
    if annotations:
        result["metadata"]["annotations"] = dict(annotations)
    return result


def policy(max_parallel=1, auto_upgrade=True, version=NEW, **spec):
    body = {"driver": {"version": version, "upgradePolicy": {"autoUpgrade": auto_upgrade,
                                                             "maxParallelUpgrades": max_parallel}}}
    body.update(spec)
    return clusterpolicy(spec=body)


def world(states, old=(), ds=None, cp=None, extra_pods=()):
    """{kind: objects}: ``states`` {node: label value or None}; ``old``: nodes whose driver pod
    is of the old template."""
    ds = ds or driver_ds(desired=len(states), updated=len(states) - len(old))
    return {"nodes": [node(n, s) for n, s in sorted(states.items())],
            "pods": [driver_pod(n, ds, old=n in old) for n in sorted(states)] + list(extra_pods),
            "daemonsets": [ds], "clusterpolicies": [cp or policy()]}


def look(kinds, **kwargs):
    """One evaluation of a fresh condition on ``kinds``: (stop, detail)."""
    condition = du.UpgradeCondition(NS, lambda: 0.0, **kwargs)
    return condition(cache(**kinds))


ALL_DONE = dict((n, om.UPGRADE_DONE) for n in NODES)


# ---------------------------------------------------------------- done, and never on stale data

def test_every_node_upgrade_done_on_the_current_template_is_done():
    stop, detail = look(world(ALL_DONE))
    assert stop and detail["verdict"] == "done"
    assert detail["done_nodes"] == NODES and detail["daemonsets"] == {}
    assert detail["nodes"]["gpu-1"]["image"] == image(NEW)
    assert detail["message"] == "3 of 3 driver nodes upgrade-done"


def test_an_upgrade_done_label_from_before_the_change_is_not_done():
    # The DaemonSet's template changed; the controller has not looked yet, so gpu-2 still says upgrade-done.
    stop, detail = look(world(ALL_DONE, old={"gpu-2"}))
    assert not stop and detail["verdict"] is None
    assert detail["done_nodes"] == ["gpu-1", "gpu-3"]
    assert detail["nodes"]["gpu-2"]["reason"] == (
        "labelled upgrade-done from before the change: driver pod nvidia-driver-daemonset-gpu-2-old is of an old "
        "revision, and the controller has not marked it upgrade-required yet")
    assert detail["daemonsets"] == {"nvidia-driver-daemonset": "2 of 3 pods updated, 3 ready"}


def test_a_daemonset_the_operator_has_not_updated_yet_holds_the_wait():
    # The ClusterPolicy asks for NEW; the DaemonSet still runs OLD everywhere: every node looks done.
    ds = driver_ds(version=OLD)
    stop, detail = look(world(ALL_DONE, ds=ds))
    assert not stop and detail["done_nodes"] == NODES
    assert detail["daemonsets"] == {"nvidia-driver-daemonset": "its template runs %s, not driver %s (the operator has "
                                                               "not updated it yet)" % (image(OLD), NEW)}
    # driver_version given: the ClusterPolicy's is not read.
    stop, detail = look(world(ALL_DONE, ds=ds), version=OLD)
    assert stop and detail["verdict"] == "done" and detail["driver_version"] == OLD


def test_a_node_without_label_whose_driver_pod_is_current_is_done():
    stop, detail = look(world({"gpu-1": None, "gpu-2": om.UPGRADE_DONE}))
    assert stop and detail["done_nodes"] == ["gpu-1", "gpu-2"]
    assert detail["nodes"]["gpu-1"]["state"] is None


@pytest.mark.parametrize("cp, why", [
    (policy(), "(the controller has not seen it yet)"),
    (policy(auto_upgrade=False), "driver.upgradePolicy.autoUpgrade is off in the ClusterPolicy"),
    (policy(sandboxWorkloads={"enabled": True}), "does not run with sandboxWorkloads.enabled=true"),
])
def test_a_node_never_picked_up_while_its_driver_pod_is_old_says_why(cp, why):
    stop, detail = look(world({"gpu-1": None}, old={"gpu-1"}, cp=cp))
    assert not stop
    reason = detail["nodes"]["gpu-1"]["reason"]
    assert reason.startswith("never picked up: no nvidia.com/gpu-driver-upgrade-state label while driver pod "
                             "nvidia-driver-daemonset-gpu-1-old is of an old revision")
    assert why in reason


def test_a_daemonset_short_of_pods_is_named_as_the_controller_refuses_it():
    ds = driver_ds(desired=3)
    kinds = world({"gpu-1": om.UPGRADE_DONE, "gpu-2": om.UPGRADE_DONE}, ds=ds)
    stop, detail = look(kinds)
    assert not stop
    assert "2 of 3 pods exist: the upgrade controller acts only once the driver DaemonSet has all its pods" in \
        detail["daemonsets"]["nvidia-driver-daemonset"]


def test_no_driver_node_is_not_done():
    kinds = world({})
    kinds["daemonsets"] = []
    stop, detail = look(kinds)
    assert not stop and detail["message"] == "no node runs a driver pod in gpu-operator"


# ---------------------------------------------------------------- every state's reason

@pytest.mark.parametrize("state, old, says", [
    (om.UPGRADE_REQUIRED, True, "waiting for an upgrade slot: 0 in progress (none), maxParallelUpgrades 1"),
    (om.UPGRADE_CORDON_REQUIRED, True, "waiting for the controller to cordon it"),
    (om.UPGRADE_WAIT_FOR_JOBS_REQUIRED, True, "waiting for the pods matching '' on the node to complete"),
    (om.UPGRADE_POD_DELETION_REQUIRED, True, "the controller is evicting the GPU pods on the node"),
    (om.UPGRADE_DRAIN_REQUIRED, True, "the controller is draining the node"),
    (om.UPGRADE_POD_RESTART_REQUIRED, True, "driver pod nvidia-driver-daemonset-gpu-1-old is of an old revision"),
    (om.UPGRADE_VALIDATION_REQUIRED, False, "waiting for the nvidia-operator-validator pod on the node"),
    (om.UPGRADE_UNCORDON_REQUIRED, False, "waiting for the controller to uncordon it"),
    (om.UPGRADE_NODE_MAINTENANCE_REQUIRED, True, "waiting for the external maintenance operator"),
    (om.UPGRADE_POST_MAINTENANCE_REQUIRED, True, "waiting for the post-maintenance driver pod restart"),
    ("halfway", True, "state 'halfway' is none the upgrade controller writes"),
])
def test_each_state_in_progress_says_where_the_node_stands(state, old, says):
    stop, detail = look(world({"gpu-1": state}, old={"gpu-1"} if old else ()))
    assert not stop
    report = detail["nodes"]["gpu-1"]
    assert report["state"] == state and not report["done"]
    assert report["reason"].startswith(state) or state == "halfway"
    assert says in report["reason"]


def test_in_progress_follows_the_controllers_count():
    # GetUpgradesInProgress: all but no label, upgrade-required and upgrade-done; upgrade-failed holds a slot.
    for state in om.DRIVER_UPGRADE_STATES:
        assert du.in_progress(node("n", state)) == (state not in (om.UPGRADE_REQUIRED, om.UPGRADE_DONE))
    assert not du.in_progress(node("n"))
    # A node cordoned before its upgrade is started whatever the limit: it takes no slot.
    assert not du.in_progress(node("n", om.UPGRADE_DRAIN_REQUIRED, annotations={
        om.DRIVER_UPGRADE_INITIAL_UNSCHEDULABLE_ANNOTATION: "true"}))


def test_upgrade_required_names_the_node_holding_the_slot():
    stop, detail = look(world({"gpu-1": om.UPGRADE_DRAIN_REQUIRED, "gpu-2": om.UPGRADE_REQUIRED},
                              old={"gpu-1", "gpu-2"}))
    assert not stop and detail["in_progress"] == ["gpu-1"]
    assert detail["nodes"]["gpu-2"]["reason"] == (
        "upgrade-required: waiting for an upgrade slot: 1 in progress (gpu-1), maxParallelUpgrades 1")


def test_a_node_marked_to_skip_upgrades_says_so():
    kinds = world({"gpu-1": om.UPGRADE_REQUIRED}, old={"gpu-1"})
    kinds["nodes"] = [node("gpu-1", om.UPGRADE_REQUIRED, labels={om.DRIVER_UPGRADE_SKIP_LABEL: "true"})]
    _stop, detail = look(kinds)
    assert detail["nodes"]["gpu-1"]["reason"] == (
        "upgrade-required: labelled nvidia.com/gpu-driver-upgrade.skip=true, so the controller never starts it")


def test_a_new_driver_pod_that_is_not_ready_is_named_with_its_restarts():
    ds = driver_ds(desired=1)
    pod = driver_pod("gpu-1", ds, waiting="CrashLoopBackOff")
    pod["status"]["containerStatuses"][0]["restartCount"] = 11
    kinds = {"nodes": [node("gpu-1", om.UPGRADE_POD_RESTART_REQUIRED)], "pods": [pod], "daemonsets": [ds],
             "clusterpolicies": [policy()]}
    _stop, detail = look(kinds)
    assert detail["nodes"]["gpu-1"]["reason"] == (
        "pod-restart-required: driver pod nvidia-driver-daemonset-gpu-1 of the current revision is not ready: "
        "CrashLoopBackOff, 11 restarts (the controller calls more than 10 a failure)")


def test_validation_required_names_the_validator_pod_that_is_not_ready():
    validator = operand_pod("operator-validator", "gpu-1", init_waiting="CrashLoopBackOff")
    _stop, detail = look(world({"gpu-1": om.UPGRADE_VALIDATION_REQUIRED}, extra_pods=[validator]))
    assert ("nvidia-operator-validator-gpu-1: Init:CrashLoopBackOff; upgrade-failed after 600 s"
            in detail["nodes"]["gpu-1"]["reason"])


def test_upgrade_failed_stops_the_wait_as_a_failure():
    stop, detail = look(world({"gpu-1": om.UPGRADE_DONE, "gpu-2": om.UPGRADE_FAILED}, old={"gpu-2"}))
    assert stop and detail["verdict"] == "failed" and detail["failed_nodes"] == ["gpu-2"]
    assert detail["nodes"]["gpu-2"]["reason"] == (
        "upgrade-failed: the controller moves it on only once its driver pod is of the current revision and Ready "
        "(driver pod nvidia-driver-daemonset-gpu-2-old is of an old revision); to go on, move the GPU workloads off "
        "the node, then delete the driver pod: kubectl -n gpu-operator delete pod nvidia-driver-daemonset-gpu-2-old")


def test_a_failed_node_whose_driver_pod_is_current_and_ready_again_is_waited_for_not_failed():
    # The way on from upgrade-failed: the old driver pod deleted by hand, the DaemonSet's new one Ready. The
    # controller moves the node to uncordon-required at its next pass; the wait goes on (seen on the real
    # operator: the second wait of test_driver_upgrade_lab's PDB test failed at once without this).
    stop, detail = look(world({"gpu-1": om.UPGRADE_DONE, "gpu-2": om.UPGRADE_FAILED}))
    assert not stop and detail["failed_nodes"] == [] and detail["verdict"] is None
    assert detail["nodes"]["gpu-2"]["reason"] == (
        "upgrade-failed: its driver pod nvidia-driver-daemonset-gpu-2 is now of the current revision and Ready: the "
        "controller moves it to uncordon-required at its next pass (ProcessUpgradeFailedNodes; a pass at the latest "
        "every 120 s)")
    stop, detail = look(world({"gpu-1": om.UPGRADE_DONE, "gpu-2": om.UPGRADE_DONE}))
    assert stop and detail["verdict"] == "done"


# ---------------------------------------------------------------- remembered nodes, time in a state

def test_a_node_whose_driver_pod_is_deleted_for_its_restart_stays_wanted():
    clock = [0.0]
    condition = du.UpgradeCondition(NS, lambda: clock[0])
    kinds = world({"gpu-1": om.UPGRADE_POD_RESTART_REQUIRED, "gpu-2": om.UPGRADE_DONE}, old={"gpu-1"})
    assert not condition(cache(**kinds))[0]
    clock[0] = 30.0
    kinds["pods"] = [p for p in kinds["pods"] if p["spec"]["nodeName"] != "gpu-1"]
    stop, detail = condition(cache(**kinds))
    assert not stop and detail["nodes"]["gpu-1"]["driver_pod"] is None
    assert detail["nodes"]["gpu-1"]["reason"].startswith("pod-restart-required: no driver pod on the node")
    assert detail["nodes"]["gpu-1"]["in_state_for"] == 30.0
    assert "gpu-1 (pod-restart-required for 30 s): pod-restart-required: no driver pod" in du.failure_text(detail)


def test_the_states_a_node_went_through_are_kept_in_order():
    clock = [0.0]
    condition = du.UpgradeCondition(NS, lambda: clock[0])
    for state in (om.UPGRADE_DONE, om.UPGRADE_REQUIRED, om.UPGRADE_CORDON_REQUIRED, om.UPGRADE_CORDON_REQUIRED,
                  om.UPGRADE_POD_RESTART_REQUIRED):
        clock[0] += 1
        _stop, detail = condition(cache(**world({"gpu-1": state}, old={"gpu-1"})))
    _stop, detail = condition(cache(**world({"gpu-1": om.UPGRADE_DONE})))
    assert detail["nodes"]["gpu-1"]["states_seen"] == [
        om.UPGRADE_DONE, om.UPGRADE_REQUIRED, om.UPGRADE_CORDON_REQUIRED, om.UPGRADE_POD_RESTART_REQUIRED,
        om.UPGRADE_DONE]
    assert detail["verdict"] == "done" and detail["peak_in_progress"] == {"count": 1, "nodes": ["gpu-1"]}


# ---------------------------------------------------------------- maxParallelUpgrades

def _two_at_once():
    return world({"gpu-1": om.UPGRADE_DRAIN_REQUIRED, "gpu-2": om.UPGRADE_CORDON_REQUIRED, "gpu-3": om.UPGRADE_REQUIRED},
                 old=set(NODES))


def test_more_nodes_in_progress_than_the_limit_is_reported():
    clock = [12.5]
    condition = du.UpgradeCondition(NS, lambda: clock[0])
    stop, detail = condition(cache(**_two_at_once()))
    assert not stop
    assert detail["parallel_excess"] == [{"nodes": ["gpu-1", "gpu-2"], "limit": 1, "seconds": 0.0}]
    assert detail["peak_in_progress"] == {"count": 2, "nodes": ["gpu-1", "gpu-2"]}
    # The same set seen again is one excess, not two.
    clock[0] = 20.0
    assert condition(cache(**_two_at_once()))[1]["parallel_excess"] == detail["parallel_excess"]


def test_fail_on_parallel_excess_stops_the_wait():
    stop, detail = look(_two_at_once(), fail_on_parallel_excess=True)
    assert stop and detail["verdict"] == "parallel-excess"
    assert detail["message"] == "2 nodes in progress at once (gpu-1, gpu-2) at 0.0 s, maxParallelUpgrades 1"


@pytest.mark.parametrize("kwargs, cp, limit", [
    ({}, policy(max_parallel=2), 2),  # the site's maxParallelUpgrades
    ({"max_parallel": 0}, policy(), 0),  # 0: no limit, as the controller reads it
])
def test_the_limit_is_the_clusterpolicys_unless_given(kwargs, cp, limit):
    kinds = _two_at_once()
    kinds["clusterpolicies"] = [cp]
    stop, detail = look(kinds, fail_on_parallel_excess=True, **kwargs)
    assert not stop and detail["parallel_excess"] == [] and detail["max_parallel_upgrades"] == limit


def test_a_node_cordoned_before_its_upgrade_is_no_excess():
    kinds = _two_at_once()
    kinds["nodes"][1]["metadata"]["annotations"] = {om.DRIVER_UPGRADE_INITIAL_UNSCHEDULABLE_ANNOTATION: "true"}
    stop, detail = look(kinds, fail_on_parallel_excess=True)
    assert not stop and detail["in_progress"] == ["gpu-1"]


# ---------------------------------------------------------------- what holds a drain

def workload(name, node_name="gpu-1", labels=None, gpu=True, owner="ReplicaSet", phase="Running"):
    containers = [{"name": "main", "resources": {"limits": {om.CONTAINER_RESOURCE: "1"}} if gpu else {}}]
    meta = {"name": name, "namespace": "team", "labels": dict(labels or {"app": name})}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": name + "-abc", "uid": "u-" + name, "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": node_name, "containers": containers}, "status": {"phase": phase}}


def pdb(name, selector, allowed=0, namespace="team"):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"selector": selector},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1}}


def test_a_drain_blocked_by_a_pod_disruption_budget_names_it():
    pods = [workload("trainer"), workload("web", gpu=False), workload("logger", owner="DaemonSet"),
            workload("kept", labels={om.DRIVER_UPGRADE_DRAIN_SKIP_LABEL: "true"}),
            workload("done", phase="Succeeded")]
    pdbs = [pdb("trainer-pdb", {"matchLabels": {"app": "trainer"}}), pdb("web-pdb", {"matchLabels": {"app": "web"}}, 1),
            pdb("elsewhere", {}, namespace="other")]
    assert du.eviction_blockers(om.UPGRADE_DRAIN_REQUIRED, pods, pdbs) == [
        "team/trainer: eviction refused by PodDisruptionBudget team/trainer-pdb (disruptionsAllowed 0, 1 of 1 desired "
        "healthy)",
        "team/web: not evicted yet"]
    # pod-deletion-required evicts the GPU pods only (gpuPodSpecFilter), the drain's skip label aside.
    assert du.eviction_blockers(om.UPGRADE_POD_DELETION_REQUIRED, pods, pdbs) == [
        "team/kept: not evicted yet",
        "team/trainer: eviction refused by PodDisruptionBudget team/trainer-pdb (disruptionsAllowed 0, 1 of 1 desired "
        "healthy)"]


def test_a_pod_the_drain_refuses_is_named():
    assert du.eviction_blockers(om.UPGRADE_DRAIN_REQUIRED, [workload("bare", owner=None)], []) == [
        "team/bare: the drain refuses it: no controller owns it: nothing would recreate it (force to delete it anyway)"]


@pytest.mark.parametrize("selector, matches", [
    (None, False), ({}, True), ({"matchLabels": {"app": "trainer"}}, True), ({"matchLabels": {"app": "x"}}, False),
    ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["trainer", "y"]}]}, True),
    ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["trainer"]}]}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
])
def test_a_pdb_selects_pods_as_a_label_selector_does(selector, matches):
    assert bool(du.blocking_pdbs(workload("trainer"), [pdb("p", selector)])) == matches


@pytest.mark.parametrize("reference, version, matches", [
    (image(NEW), NEW, True), (image(NEW), "580", False), ("nvcr.io/nvidia/driver:580-5.15.0-122-generic-ubuntu22.04",
                                                          "580", True),
    ("registry:5000/nvidia/driver:" + NEW, NEW, True), ("nvcr.io/nvidia/driver@sha256:abc", "sha256:abc", True),
    ("registry:5000/driver", NEW, False), (None, NEW, False),
])
def test_an_image_is_of_a_driver_version_by_its_tag_or_digest(reference, version, matches):
    assert du.image_has_version(reference, version) == matches


# ---------------------------------------------------------------- the module on the fake cluster

def test_the_module_succeeds_at_once_when_every_node_is_done(run):  # noqa: F811
    for check_mode in (False, True):
        rc, result, _connects = run(gpu_driver_upgrade_wait, FakeCluster(**world(ALL_DONE)), check_mode=check_mode)
        assert rc == 0 and result["changed"] is False, result
        assert result["done_nodes"] == NODES and result["failed_nodes"] == []
        assert result["max_parallel_upgrades"] == 1 and result["driver_version"] == NEW
        assert result["api_requests"] == {"list": 4, "watch": 0, "total": 4}


def test_the_module_follows_the_upgrade_node_by_node(run):  # noqa: F811
    # The DaemonSet's template changed; every node still says upgrade-done over its old pod. Then, one node at a
    # time, the controller's states, the old pod deleted and the new one made, the DaemonSet's count, done.
    cluster = FakeCluster(**world(ALL_DONE, old=set(NODES)))
    node_steps, pod_steps, ds_steps = [], [], []
    for index, name in enumerate(NODES):
        for state in (om.UPGRADE_REQUIRED, om.UPGRADE_CORDON_REQUIRED, om.UPGRADE_POD_RESTART_REQUIRED):
            node_steps += [("advance", 1), ("MODIFIED", node(name, state))]
        ds = driver_ds(updated=index + 1)
        node_steps += [("open", name + "-restart"), ("wait", name + "-counted"), ("advance", 1),
                       ("MODIFIED", node(name, om.UPGRADE_DONE))]
        pod_steps += [("wait", name + "-restart"), ("DELETED", driver_pod(name, ds, old=True)),
                      ("ADDED", driver_pod(name, ds)), ("open", name + "-replaced")]
        ds_steps += [("wait", name + "-replaced"), ("MODIFIED", ds), ("open", name + "-counted")]
    cluster.script("nodes", node_steps)
    cluster.script("pods", pod_steps)
    cluster.script("daemonsets", ds_steps)
    rc, result, _connects = run(gpu_driver_upgrade_wait, cluster, timeout=600)
    assert rc == 0, result["msg"]
    assert result["peak_in_progress"] == {"count": 1, "nodes": ["gpu-1"]} and result["parallel_excess"] == []
    for name in NODES:
        assert result["nodes"][name]["states_seen"] == [
            om.UPGRADE_DONE, om.UPGRADE_REQUIRED, om.UPGRADE_CORDON_REQUIRED, om.UPGRADE_POD_RESTART_REQUIRED,
            om.UPGRADE_DONE]
        assert result["nodes"][name]["image"] == image(NEW)
    assert result["elapsed"] == 12


def test_the_module_times_out_naming_the_pdb_that_blocks_the_drain(run):  # noqa: F811
    kinds = world({"gpu-1": om.UPGRADE_DRAIN_REQUIRED, "gpu-2": om.UPGRADE_REQUIRED}, old={"gpu-1", "gpu-2"})
    kinds["node_pods"] = [workload("trainer"), workload("other", node_name="gpu-2")]
    kinds["pdbs"] = [pdb("trainer-pdb", {"matchLabels": {"app": "trainer"}})]
    rc, result, _connects = run(gpu_driver_upgrade_wait, FakeCluster(**kinds), timeout=120)
    assert rc == 1
    assert result["msg"] == (
        "timed out after 120s waiting for the driver upgrade: 0 of 2 driver nodes upgrade-done; driver DaemonSets: "
        "nvidia-driver-daemonset: 0 of 2 pods updated, 2 ready. "
        "gpu-1 (drain-required for 120 s): drain-required: the controller is draining the node; team/trainer: "
        "eviction refused by PodDisruptionBudget team/trainer-pdb (disruptionsAllowed 0, 1 of 1 desired healthy); "
        "gpu-2 (upgrade-required for 120 s): upgrade-required: waiting for an upgrade slot: 1 in progress (gpu-1), "
        "maxParallelUpgrades 1")
    assert result["nodes"]["gpu-1"]["blockers"] == [
        "team/trainer: eviction refused by PodDisruptionBudget team/trainer-pdb (disruptionsAllowed 0, 1 of 1 desired "
        "healthy)"]
    assert result["elapsed"] == 120


def test_the_module_fails_as_soon_as_a_node_fails(run):  # noqa: F811
    cluster = FakeCluster(**world({"gpu-1": om.UPGRADE_DRAIN_REQUIRED}, old={"gpu-1"}))
    cluster.script("nodes", [("advance", 7), ("MODIFIED", node("gpu-1", om.UPGRADE_FAILED))])
    rc, result, _connects = run(gpu_driver_upgrade_wait, cluster, timeout=600)
    assert rc == 1 and result["failed_nodes"] == ["gpu-1"] and result["elapsed"] == 7
    assert result["msg"].startswith("driver upgrade failed: gpu-1 upgrade-failed. gpu-1 (upgrade-failed): "
                                    "upgrade-failed: the controller moves it on only once")


def test_the_module_warns_of_parallel_excess_and_fails_only_when_asked(run):  # noqa: F811
    rc, result, _connects = run(gpu_driver_upgrade_wait, FakeCluster(**_two_at_once()), timeout=10)
    assert rc == 1 and result["msg"].startswith("timed out after 10s")
    assert [w["event"]["msg"] for w in result["warnings"]] == [
        "more driver nodes in progress at once than maxParallelUpgrades: 2 nodes in progress at once (gpu-1, gpu-2) "
        "at 0.0 s, maxParallelUpgrades 1 (the controller leaves a node out of its count while the node's new driver "
        "pod is not scheduled yet, and can start another node then)"]
    rc, result, _connects = run(gpu_driver_upgrade_wait, FakeCluster(**_two_at_once()), timeout=600,
                                fail_on_parallel_excess=True)
    assert rc == 1 and result["elapsed"] == 0
    assert result["msg"].startswith("driver upgrade failed: 2 nodes in progress at once (gpu-1, gpu-2)")


@pytest.mark.parametrize("args, message", [
    ({"namespace": ""}, "namespace must not be empty"),
    ({"timeout": -1}, "timeout must be zero or more seconds, got -1"),
    ({"max_parallel_upgrades": -2}, "max_parallel_upgrades must be 0 (no limit) or more, got -2"),
    ({"names": ["gpu-1", ""]}, "names: node names must not be empty"),
    ({"driver_version": " "}, "driver_version must not be empty"),
])
def test_the_module_rejects_bad_input_before_connecting(run, args, message):  # noqa: F811
    rc, result, connects = run(gpu_driver_upgrade_wait, FakeCluster(), **args)
    assert rc == 1 and result["msg"] == message and connects == []


def test_named_nodes_only_are_waited_for():
    kinds = world({"gpu-1": om.UPGRADE_DONE, "gpu-2": om.UPGRADE_REQUIRED}, old={"gpu-2"})
    kinds["daemonsets"] = [driver_ds(desired=2, updated=2)]  # its counts aside
    stop, detail = look(copy.deepcopy(kinds), names=["gpu-1"])
    assert stop and detail["done_nodes"] == ["gpu-1"] and list(detail["nodes"]) == ["gpu-1"]
    stop, detail = look(kinds, names=["gpu-9"])
    assert not stop and detail["nodes"]["gpu-9"]["reason"] == "the node is not in the cluster"
