"""gpu_driver_eviction_check: before a driver change, the pods on driver nodes whose eviction a
PodDisruptionBudget refuses (plugins/module_utils/gpu/driver_upgrade.py refused_evictions), on
hand-built API objects, and the module end to end on the fake cluster."""

from ansible_collections.gpuplatform.rke2.plugins.module_utils.gpu import driver_upgrade as du
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_driver_eviction_check
from tests.unit.k8s_fake import FakeCluster
from tests.unit.test_driver_upgrade import driver_ds, driver_pod, pdb, policy, workload
from tests.unit.test_wait_modules import run  # noqa: F401  pylint: disable=unused-import
from tests.unit.wait_builders import NS

DS = driver_ds()
DRIVER_PODS = [driver_pod("gpu-1", DS), driver_pod("gpu-2", DS)]
TRAINER = workload("trainer")                                  # a GPU pod on gpu-1
WEB = workload("web", node_name="gpu-2", gpu=False)            # drained, not deleted as a GPU pod
ELSEWHERE = workload("batch", node_name="cpu-1")               # a GPU pod on a node without a driver pod
BUDGETS = [pdb("trainer-pdb", {"matchLabels": {"app": "trainer"}}), pdb("web-pdb", {"matchLabels": {"app": "web"}}),
           pdb("batch-pdb", {"matchLabels": {"app": "batch"}}), pdb("roomy", {}, allowed=2, namespace="other")]
REFUSED_TRAINER = ("team/trainer: eviction refused by PodDisruptionBudget team/trainer-pdb (disruptionsAllowed 0, "
                   "1 of 1 desired healthy)")


def test_a_gpu_pod_on_a_driver_node_that_a_budget_holds_is_found():
    pods = DRIVER_PODS + [TRAINER, WEB, ELSEWHERE]
    assert du.driver_nodes(pods, NS) == ["gpu-1", "gpu-2"]
    # Pod deletion takes the GPU pods only; the node without a driver pod is not upgraded at all.
    assert du.refused_evictions(pods, BUDGETS, NS) == {"gpu-1": [REFUSED_TRAINER]}


def test_with_the_drain_every_drained_pod_counts():
    pods = DRIVER_PODS + [TRAINER, WEB, ELSEWHERE]
    assert du.refused_evictions(pods, BUDGETS, NS, drain=True) == {
        "gpu-1": [REFUSED_TRAINER],
        "gpu-2": ["team/web: eviction refused by PodDisruptionBudget team/web-pdb (disruptionsAllowed 0, 1 of 1 "
                  "desired healthy)"]}


def test_a_budget_that_allows_a_disruption_refuses_nothing():
    pods = DRIVER_PODS + [TRAINER]
    assert du.refused_evictions(pods, [pdb("trainer-pdb", {"matchLabels": {"app": "trainer"}}, allowed=1)], NS) == {}
    assert du.refusing_namespaces(BUDGETS) == ["team"]


def test_a_driver_pod_going_away_does_not_make_a_driver_node():
    going = driver_pod("gpu-1", DS)
    going["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    assert du.driver_nodes([going], NS) == []
    assert du.driver_nodes([driver_pod("gpu-1", DS)], "other-namespace") == []


def test_the_timeouts_are_the_cluster_policys_or_the_charts():
    assert du.deletion_timeouts(None) == (300, None)
    cp = policy()
    cp["spec"]["driver"]["upgradePolicy"].update({"podDeletion": {"timeoutSeconds": 20},
                                                  "drain": {"enable": True, "timeoutSeconds": 0}})
    assert du.deletion_timeouts(cp) == (20, 0)
    text = du.refusal_text({"gpu-1": [REFUSED_TRAINER]}, 20, 0)
    assert text.startswith("a driver upgrade now would stop on 1 node(s): gpu-1: " + REFUSED_TRAINER)
    assert "without a pause for 20 s of GPU pod deletion, then a drain without a timeout" in text


def _cluster(*pods, **extra):
    return FakeCluster(driver_pods=DRIVER_PODS, pdbs=BUDGETS, clusterpolicies=[policy()], pods_team=list(pods),
                       **extra)


def test_the_module_warns_and_returns_the_refusals(run):  # noqa: F811
    rc, result, _connects = run(gpu_driver_eviction_check, _cluster(TRAINER, WEB))
    assert rc == 0 and not result["changed"]
    assert result["refused"] == {"gpu-1": [REFUSED_TRAINER]}
    assert result["driver_nodes"] == ["gpu-1", "gpu-2"] and result["drain"] is False
    assert (result["pod_deletion_timeout"], result["drain_timeout"]) == (300, None)
    [warning] = result["warnings"]
    assert "a driver upgrade now would stop on 1 node(s): gpu-1: team/trainer" in str(warning)


def test_the_module_fails_on_a_refusal_when_asked_and_counts_the_drain_when_told(run):  # noqa: F811
    rc, result, _connects = run(gpu_driver_eviction_check, _cluster(TRAINER, WEB), fail_on_refusal=True, drain=True)
    assert rc == 1 and sorted(result["refused"]) == ["gpu-1", "gpu-2"]
    assert result["msg"].startswith("a driver upgrade now would stop on 2 node(s)")


def test_the_module_passes_quietly_with_nothing_refused(run):  # noqa: F811
    rc, result, _connects = run(gpu_driver_eviction_check, _cluster(WEB), fail_on_refusal=True)
    assert rc == 0 and result["refused"] == {} and not result.get("warnings")


def test_a_timeout_of_zero_is_refused_by_name(run):  # noqa: F811
    rc, result, connects = run(gpu_driver_eviction_check, _cluster(), timeout=0)
    assert rc == 1 and result["msg"] == "timeout must be more than 0 seconds, got 0" and connects == []


def test_a_budget_the_disruption_controller_has_not_counted_yet_refuses():
    # No status: the Eviction API answers 429 until the budget's observedGeneration catches up.
    fresh = pdb("trainer-pdb", {"matchLabels": {"app": "trainer"}})
    fresh.pop("status")
    assert du.refuses_evictions(fresh)
    assert du.refused_evictions(DRIVER_PODS + [TRAINER], [fresh], NS) == {"gpu-1": [
        "team/trainer: eviction refused by PodDisruptionBudget team/trainer-pdb (not counted by the disruption "
        "controller yet)"]}


def test_the_values_a_change_delivers_give_the_timeouts_as_the_chart_renders_them():
    values = {"driver": {"upgradePolicy": {"gpuPodDeletion": {"timeoutSeconds": 45},
                                           "drain": {"enable": True, "timeoutSeconds": 90}}}}
    assert du.deletion_timeouts(du.policy_of_values(values)) == (45, 90)
    assert du.deletion_timeouts(du.policy_of_values({"driver": {"version": "580.126.20"}})) == (300, None)


def test_the_module_judges_by_the_values_the_change_delivers_not_the_running_policy(run):  # noqa: F811
    # The running ClusterPolicy drains nothing and waits 300 s; the change turns the drain on.
    values = {"driver": {"upgradePolicy": {"gpuPodDeletion": {"timeoutSeconds": 45},
                                           "drain": {"enable": True, "timeoutSeconds": 90}}}}
    rc, result, _connects = run(gpu_driver_eviction_check, _cluster(TRAINER, WEB), values=values)
    assert rc == 0 and result["drain"] is True and (result["pod_deletion_timeout"], result["drain_timeout"]) == (45, 90)
    assert sorted(result["refused"]) == ["gpu-1", "gpu-2"]
    assert "45 s of GPU pod deletion" in str(result["warnings"][0])
