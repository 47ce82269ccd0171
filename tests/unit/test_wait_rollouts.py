"""What fooled the waits in issue 36 (items 1, 2, 6's cordoned node) and issue 35's rollout
rule: a wanted node that drops out for a moment, an operand DaemonSet mid-rollout whose
old pods still run, a cordoned node named for a CUDA sample. Conditions on hand-built
API objects, modules on the scripted fake cluster."""
import copy

import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from ansible_collections.gpuplatform.rke2.plugins.modules import cuda_sample, gpu_allocatable_wait, operand_readiness
from tests.unit.k8s_fake import FakeCluster
from tests.unit.test_wait_modules import run  # noqa: F401  pylint: disable=unused-import
from tests.unit.wait_builders import (
    CONTAINER_CHAIN, NS, cache, chain_pods, clusterpolicy, daemonset, deployment, gpu_node, node, operator_pod)

GPU = om.CONTAINER_RESOURCE
PLUGIN_DS = om.operand("device-plugin").daemonset


# ---------------------------------------------------------------- builders

def rolled(operand_name, template_generation=2, generation=None, observed=None, desired=2, updated=None, ready=None,
           uid=None):
    """An operand DaemonSet as apps/v1 returns it: the API server's template generation
    annotation, and the controller's status (every pod updated and ready unless told)."""
    ds = daemonset(operand_name, [])
    generation = template_generation if generation is None else generation
    ds["metadata"].update(generation=generation, uid=uid or "uid-" + operand_name, annotations={
        rd.TEMPLATE_GENERATION_ANNOTATION: str(template_generation)})
    ds["status"] = {"observedGeneration": generation if observed is None else observed,
                    "desiredNumberScheduled": desired, "currentNumberScheduled": desired,
                    "updatedNumberScheduled": desired if updated is None else updated,
                    "numberReady": desired if ready is None else ready}
    return ds


def owned(pod, ds, template_generation, revision_hash):
    """``pod`` as the DaemonSet controller makes it from one template of ``ds``."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["metadata"]["name"],
                                           "uid": ds["metadata"]["uid"], "controller": True,
                                           "blockOwnerDeletion": True}]
    pod["metadata"]["labels"].update({rd.POD_TEMPLATE_GENERATION_LABEL: str(template_generation),
                                      rd.REVISION_HASH_LABEL: revision_hash})
    return pod


def fleet_pods(daemonsets, node_names, old=()):
    """Every operand pod of ``node_names``, owned by its DaemonSet: of the current template,
    except the (operand, node) pairs in ``old``, which run the template before it."""
    by_operand = dict((om.operand_for_daemonset(d["metadata"]["name"]).name, d) for d in daemonsets)
    pods = []
    for name in node_names:
        for pod in chain_pods(name):
            operand_name = om.operand_of_pod(pod["metadata"]["labels"]).name
            ds = by_operand[operand_name]
            current = int(ds["metadata"]["annotations"][rd.TEMPLATE_GENERATION_ANNOTATION])
            if (operand_name, name) in old:
                pods.append(owned(pod, ds, current - 1, "old-hash"))
            else:
                pods.append(owned(pod, ds, current, "new-hash"))
    return pods


def operands_cache(nodes, pods, daemonsets):
    return cache(nodes=nodes, pods=pods, deployments=[deployment()], clusterpolicies=[clusterpolicy()],
                 daemonsets=daemonsets)


def mid_rollout():
    """The device plugin's DaemonSet at its template 2: gpu-1 runs the new pod, gpu-2 still
    the old one, Running and Ready (what a rolling update with maxUnavailable 1 shows)."""
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN if o != "device-plugin"] + [rolled("device-plugin", updated=1)]
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    return nodes, fleet_pods(daemonsets, ["gpu-1", "gpu-2"], old={("device-plugin", "gpu-2")}), daemonsets


# ---------------------------------------------------------------- DaemonSet rollouts

@pytest.mark.parametrize("require_reconciled", [False, True])
def test_an_operand_wait_mid_rollout_does_not_succeed_on_the_old_pod(require_reconciled):
    nodes, pods, daemonsets = mid_rollout()
    done, detail = rd.operand_readiness_condition(NS, require_reconciled=require_reconciled)(
        operands_cache(nodes, pods, daemonsets))
    assert not done and detail["step"] == rd.STEP_OPERANDS
    assert detail["nodes"]["gpu-1"]["ready"]
    stuck = detail["nodes"]["gpu-2"]
    assert not stuck["ready"] and (stuck["stuck_at"], stuck["layer"]) == ("device-plugin", om.LAYER_DEVICE_PLUGIN)
    assert stuck["reason"] == (
        "DaemonSet nvidia-device-plugin-daemonset mid-rollout: pod nvidia-device-plugin-daemonset-gpu-2: it is of an "
        "old template (pod-template-generation 1, the DaemonSet's is 2), not updated yet")
    assert "device-plugin" not in stuck["ready_operands"]
    assert stuck["rollout"] == [{"daemonset": PLUGIN_DS, "operand": "device-plugin",
                                 "pod": "nvidia-device-plugin-daemonset-gpu-2", "reason": stuck["reason"]}]
    assert detail["daemonsets"] == {PLUGIN_DS: "1 of 2 pods updated, 2 ready"}
    assert detail["steps"][rd.STEP_OPERANDS]["message"] == (
        "1 of 2 nodes run their operand chain; DaemonSets not rolled out: "
        "nvidia-device-plugin-daemonset: 1 of 2 pods updated, 2 ready")


def test_the_old_pod_does_not_count_with_an_explicit_selection_either():
    nodes, pods, daemonsets = mid_rollout()
    done, detail = rd.operand_readiness_condition(NS, names=["gpu-2"], explicit=True)(
        operands_cache(nodes, pods, daemonsets))
    assert not done and detail["nodes"]["gpu-2"]["stuck_at"] == "device-plugin"
    # Its counts take in gpu-1 and every other node: a named node's wait judges its own pods.
    done, detail = rd.operand_readiness_condition(NS, names=["gpu-1"], explicit=True)(
        operands_cache(nodes, pods, daemonsets))
    assert done and detail["daemonsets"] == {}


def test_a_generation_not_observed_yet_holds_the_wait():
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN if o != "driver"]
    # The operator changed the driver's template: the API server raised generation and
    # template generation to 3, the controller has not acted on it yet.
    old_driver = rolled("driver", template_generation=2)
    pods = fleet_pods(daemonsets + [old_driver], ["gpu-1"])
    driver = rolled("driver", template_generation=3, observed=2)
    for explicit in (False, True):
        done, detail = rd.operand_readiness_condition(NS, names=["gpu-1"] if explicit else None, explicit=explicit)(
            operands_cache([gpu_node("gpu-1")], pods, daemonsets + [driver]))
        assert not done
        assert detail["daemonsets"] == {
            "nvidia-driver-daemonset": "generation 3 not observed yet (observedGeneration 2)"}
        assert detail["nodes"]["gpu-1"]["stuck_at"] == "driver"
        assert "pod-template-generation 2, the DaemonSet's is 3" in detail["nodes"]["gpu-1"]["reason"]


def test_the_daemonsets_own_counts_hold_the_wait_when_its_pods_say_nothing():
    # Pods without the controller's labels and owner (nothing to judge them by): the
    # DaemonSet's status alone says it is mid-rollout.
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN if o != "device-plugin"]
    daemonsets.append(rolled("device-plugin", desired=1, updated=0))
    fleet = operands_cache([gpu_node("gpu-1")], chain_pods("gpu-1"), daemonsets)
    done, detail = rd.operand_readiness_condition(NS)(fleet)
    assert not done and detail["nodes"]["gpu-1"]["ready"]
    assert detail["daemonsets"] == {PLUGIN_DS: "0 of 1 pods updated, 1 ready"}
    daemonsets[-1] = rolled("device-plugin", desired=1, ready=0)
    done, detail = rd.operand_readiness_condition(NS)(operands_cache([gpu_node("gpu-1")], chain_pods("gpu-1"),
                                                                     daemonsets))
    assert not done and detail["daemonsets"] == {PLUGIN_DS: "1 of 1 pods updated, 0 ready"}


def test_a_rolled_out_fleet_passes():
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN]
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    done, detail = rd.operand_readiness_condition(NS, require_reconciled=True)(
        operands_cache(nodes, fleet_pods(daemonsets, ["gpu-1", "gpu-2"]), daemonsets))
    assert done and detail["daemonsets"] == {} and not any("rollout" in n for n in detail["nodes"].values())


def test_a_pod_of_the_current_revision_counts_by_its_hash():
    # The controller's other half of IsPodUpdated: the revision hash. A pod adopted across a
    # template generation that did not change its revision keeps its old generation label.
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN]
    pods = fleet_pods(daemonsets, ["gpu-1", "gpu-2"])
    plugin = [d for d in daemonsets if d["metadata"]["name"] == PLUGIN_DS][0]
    adopted = [p for p in pods if p["metadata"]["name"] == "nvidia-device-plugin-daemonset-gpu-2"][0]
    adopted["metadata"]["labels"][rd.POD_TEMPLATE_GENERATION_LABEL] = "1"
    assert rd.operand_readiness_condition(NS)(operands_cache([gpu_node("gpu-1"), gpu_node("gpu-2")], pods,
                                                             daemonsets))[0]
    outdated, _owned = rd.daemonset_rollouts(daemonsets, pods, NS)
    assert outdated == {}
    adopted["metadata"]["labels"][rd.REVISION_HASH_LABEL] = "old-hash"
    outdated, _owned = rd.daemonset_rollouts(daemonsets, pods, NS)
    assert list(outdated) == ["nvidia-device-plugin-daemonset-gpu-2"]
    assert plugin["metadata"]["name"] == outdated["nvidia-device-plugin-daemonset-gpu-2"]["daemonset"]


def test_after_a_rollback_the_controllers_count_vouches_for_the_old_revisions_pods():
    # A rollback to template 1's revision raises the template generation to 3 and keeps
    # the pods of that revision: none carries generation 3, the controller counts them updated.
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN]
    pods = fleet_pods(daemonsets, ["gpu-1"])
    for ds in daemonsets:
        ds["metadata"].update(generation=3)
        ds["metadata"]["annotations"][rd.TEMPLATE_GENERATION_ANNOTATION] = "3"
        ds["status"]["observedGeneration"] = 3
    assert rd.daemonset_rollouts(daemonsets, pods, NS)[0] == {}
    assert rd.operand_readiness_condition(NS)(operands_cache([gpu_node("gpu-1")], pods, daemonsets))[0]
    # Until the controller has counted them, they are old.
    for ds in daemonsets:
        ds["status"]["updatedNumberScheduled"] = 0
    assert len(rd.daemonset_rollouts(daemonsets, pods, NS)[0]) == len(CONTAINER_CHAIN)


def test_a_pod_whose_daemonset_is_gone_or_was_replaced_does_not_count():
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN]
    pods = fleet_pods(daemonsets, ["gpu-1"])
    without_plugin = [d for d in daemonsets if d["metadata"]["name"] != PLUGIN_DS]
    outdated, _owned = rd.daemonset_rollouts(without_plugin, pods, NS)
    assert outdated["nvidia-device-plugin-daemonset-gpu-1"]["reason"] == (
        "DaemonSet nvidia-device-plugin-daemonset mid-rollout: pod nvidia-device-plugin-daemonset-gpu-1: "
        "its DaemonSet nvidia-device-plugin-daemonset is gone")
    replaced = without_plugin + [rolled("device-plugin", uid="uid-new")]
    outdated, _owned = rd.daemonset_rollouts(replaced, pods, NS)
    assert "earlier DaemonSet of that name (uid uid-device-plugin)" in outdated[
        "nvidia-device-plugin-daemonset-gpu-1"]["reason"]
    assert not rd.operand_readiness_condition(NS)(operands_cache([gpu_node("gpu-1")], pods, replaced))[0]


def test_a_pod_with_the_controllers_labels_and_no_owner_is_judged_against_its_operands_daemonset():
    nodes, pods, daemonsets = mid_rollout()
    for pod in pods:
        del pod["metadata"]["ownerReferences"]
    outdated, _owned = rd.daemonset_rollouts(daemonsets, pods, NS)
    assert list(outdated) == ["nvidia-device-plugin-daemonset-gpu-2"]
    done, detail = rd.operand_readiness_condition(NS, names=["gpu-2"], explicit=True)(
        operands_cache(nodes, pods, daemonsets))
    assert not done and detail["nodes"]["gpu-2"]["stuck_at"] == "device-plugin"


def test_a_daemonset_that_wants_no_pod_and_has_none_holds_nothing_up():
    # The precompiled driver DaemonSet of a kernel no driver node runs: created and deleted
    # on every pass, often caught before the controller wrote its status.
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN]
    churning = daemonset("driver", [])
    churning["metadata"].update(name=om.precompiled_driver_daemonset("6.8.0-1015-nvidia-64k", "ubuntu24.04"),
                                generation=1, annotations={rd.TEMPLATE_GENERATION_ANNOTATION: "1"})
    for status in ({}, {"observedGeneration": 1, "desiredNumberScheduled": 0, "numberReady": 0}):
        churning["status"] = status
        done, detail = rd.operand_readiness_condition(NS)(
            operands_cache([gpu_node("gpu-1")], fleet_pods(daemonsets, ["gpu-1"]), daemonsets + [churning]))
        assert done and detail["daemonsets"] == {}


def test_the_rollout_rule_is_kubernetes_cores_daemonset_ready():
    assert rd.daemonset_rollout_problem(rolled("driver")) is None
    assert rd.daemonset_rollout_problem(rolled("driver", generation=4, observed=3)) == (
        "generation 4 not observed yet (observedGeneration 3)")
    assert rd.daemonset_rollout_problem(rolled("driver", updated=1)) == "1 of 2 pods updated, 2 ready"
    assert rd.daemonset_rollout_problem(rolled("driver", ready=1)) == "2 of 2 pods updated, 1 ready"
    without_updated = rolled("driver", desired=0)
    del without_updated["status"]["updatedNumberScheduled"]  # omitempty at 0
    assert rd.daemonset_rollout_problem(without_updated) is None
    assert rd.daemonset_rollout_problem(rolled("driver", updated=1), counts=False) is None


def test_the_diagnosis_names_the_daemonset_mid_rollout():
    nodes, pods, daemonsets = mid_rollout()
    detail = rd.operand_readiness_condition(NS)(operands_cache(nodes, pods, daemonsets))[1]
    diagnosis = rd.diagnose(nodes, pods, rd.policy_from_cache(operands_cache(nodes, pods, daemonsets)), ["gpu-2"],
                            daemonsets=daemonsets, rollouts={"gpu-2": detail["nodes"]["gpu-2"]["rollout"]})
    assert (diagnosis["gpu-2"]["layer"], diagnosis["gpu-2"]["operand"]) == (om.LAYER_DEVICE_PLUGIN, "device-plugin")
    assert diagnosis["gpu-2"]["reason"].startswith("DaemonSet nvidia-device-plugin-daemonset mid-rollout")


# ---------------------------------------------------------------- a wanted node that drops out

def unlabelled(name):
    """A GPU node whose NFD labels were pruned (NFD's worker restarted, its master pruned)."""
    pruned = gpu_node(name)
    for key in om.NFD_GPU_LABELS:
        pruned["metadata"]["labels"].pop(key, None)
    return pruned


def test_a_gpu_node_deleted_mid_wait_stays_wanted_and_named():
    condition = rd.allocatable_condition(GPU)
    assert not condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2", gpus=0)]))[0]
    done, detail = condition(cache(nodes=[gpu_node("gpu-1")]))
    assert not done and detail["wanted"] == 2 and detail["ready"] == ["gpu-1"]
    assert detail["lost"] == {"gpu-2": "selected earlier in this wait, is gone from the cluster"}
    assert detail["waiting"] == detail["lost"]
    assert detail["message"] == ("1 of 2 wanted nodes have 1 nvidia.com/gpu allocatable; "
                                 "gpu-2 selected earlier in this wait, is gone from the cluster")
    # Re-created, with its GPUs advertised: the wait holds.
    done, detail = condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")]))
    assert done and detail["lost"] == {}


def test_a_gpu_node_whose_nfd_labels_were_pruned_stays_wanted():
    condition = rd.allocatable_condition(GPU)
    assert condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")]))[0]
    done, detail = condition(cache(nodes=[gpu_node("gpu-1"), unlabelled("gpu-2")]))
    assert not done
    assert detail["lost"]["gpu-2"].startswith("selected earlier in this wait, is no longer a GPU node")


def test_a_node_left_out_later_is_waited_for_not_skipped():
    condition = rd.allocatable_condition(GPU)
    assert condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")]))[0]
    switched_off = gpu_node("gpu-2", labels={om.deploy_label("device-plugin"): "false"})
    done, detail = condition(cache(nodes=[gpu_node("gpu-1"), switched_off]))
    assert not done and detail["skipped"] == []
    assert detail["lost"] == {"gpu-2": "selected earlier in this wait, is left out now: device-plugin is switched off "
                                       "here (nvidia.com/gpu.deploy.device-plugin=false)"}


def test_min_nodes_allows_a_node_to_be_lost():
    condition = rd.allocatable_condition(GPU, min_nodes=1)
    condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2", gpus=0)]))
    done, detail = condition(cache(nodes=[gpu_node("gpu-1")]))
    assert done and list(detail["lost"]) == ["gpu-2"]


def test_a_named_node_deleted_mid_wait_is_wanted_once():
    condition = rd.allocatable_condition(GPU, names=["gpu-1", "gpu-2"], explicit=True)
    assert not condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2", gpus=0)]))[0]
    done, detail = condition(cache(nodes=[gpu_node("gpu-1")]))
    assert not done and detail["wanted"] == 2 and detail["waiting"] == {"gpu-2": "not in the cluster"}


def test_a_node_no_longer_matching_the_label_selector_stays_wanted():
    # The nodes watch filters by the label selector: a node whose labels stop matching is a DELETED event.
    condition = rd.allocatable_condition(GPU, explicit=True)
    assert condition(cache(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")]))[0]
    done, detail = condition(cache(nodes=[gpu_node("gpu-1")]))
    assert not done and detail["lost"] == {
        "gpu-2": "selected earlier in this wait, is gone from the nodes the selection matches (deleted, or its labels "
                 "changed)"}


def test_the_operand_wait_keeps_a_node_that_dropped_out():
    daemonsets = [rolled(o) for o in CONTAINER_CHAIN]
    condition = rd.operand_readiness_condition(NS)
    both = fleet_pods(daemonsets, ["gpu-1", "gpu-2"])
    assert not condition(operands_cache([gpu_node("gpu-1"), gpu_node("gpu-2")], both[:-1], daemonsets))[0]
    gpu1_pods = [p for p in both if p["spec"]["nodeName"] == "gpu-1"]
    for nodes in ([gpu_node("gpu-1")], [gpu_node("gpu-1"), unlabelled("gpu-2")]):
        done, detail = condition(operands_cache(nodes, gpu1_pods, daemonsets))
        assert not done and list(detail["lost"]) == ["gpu-2"]
        assert detail["nodes"]["gpu-2"]["ready"] is False and detail["nodes"]["gpu-2"]["layer"] == rd.LAYER_NODE
        assert detail["nodes"]["gpu-2"]["reason"] == detail["lost"]["gpu-2"]
    assert condition(operands_cache([gpu_node("gpu-1"), gpu_node("gpu-2")], both, daemonsets))[0]


# ---------------------------------------------------------------- the modules

def test_gpu_allocatable_wait_fails_naming_a_node_deleted_mid_wait(run):  # noqa: F811
    cluster = FakeCluster(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2", gpus=0)])
    cluster.script("nodes", [("advance", 5), ("DELETED", gpu_node("gpu-2", gpus=0))])
    rc, result, _connects = run(gpu_allocatable_wait, cluster, timeout=60)
    assert rc == 1
    assert result["msg"] == ("timed out after 60s waiting for nvidia.com/gpu: 1 of 2 wanted nodes have 1 "
                             "nvidia.com/gpu allocatable; gpu-2 selected earlier in this wait, is gone from the "
                             "cluster")
    assert result["lost_nodes"] == {"gpu-2": "selected earlier in this wait, is gone from the cluster"}
    assert "gpu-2" not in result["diagnosis"]


def test_gpu_allocatable_wait_succeeds_once_the_deleted_node_is_back(run):  # noqa: F811
    cluster = FakeCluster(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2", gpus=0)])
    cluster.script("nodes", [("advance", 5), ("DELETED", gpu_node("gpu-2", gpus=0)), ("advance", 5),
                             ("ADDED", gpu_node("gpu-2"))])
    rc, result, _connects = run(gpu_allocatable_wait, cluster, timeout=60)
    assert rc == 0 and result["ready_nodes"] == ["gpu-1", "gpu-2"] and result["elapsed"] == 10
    assert result["lost_nodes"] == {}


def test_operand_readiness_times_out_naming_the_daemonset_mid_rollout_on_its_node(run):  # noqa: F811
    nodes, pods, daemonsets = mid_rollout()
    cluster = FakeCluster(nodes=nodes, pods=pods + [operator_pod()], deployments=[deployment()],
                          clusterpolicies=[clusterpolicy()], daemonsets=daemonsets)
    rc, result, _connects = run(operand_readiness, cluster, require_reconciled=True, timeout=120)
    assert rc == 1 and result["step"] == "operands"
    assert result["msg"] == (
        "timed out after 120s at step operands: 1 of 2 nodes run their operand chain; DaemonSets not rolled out: "
        "nvidia-device-plugin-daemonset: 1 of 2 pods updated, 2 ready; stuck: gpu-2 at device-plugin (device-plugin): "
        "DaemonSet nvidia-device-plugin-daemonset mid-rollout: pod nvidia-device-plugin-daemonset-gpu-2: it is of an "
        "old template (pod-template-generation 1, the DaemonSet's is 2), not updated yet")
    assert result["daemonsets"] == {PLUGIN_DS: "1 of 2 pods updated, 2 ready"}
    assert result["diagnosis"]["gpu-2"]["operand"] == "device-plugin"
    # No request beyond the usual: the same as a wait that times out on a pod that never came.
    missing = [p for p in pods if p["metadata"]["name"] != "nvidia-device-plugin-daemonset-gpu-2"]
    baseline = FakeCluster(nodes=nodes, pods=missing + [operator_pod()], deployments=[deployment()],
                           clusterpolicies=[clusterpolicy()], daemonsets=[rolled(o) for o in CONTAINER_CHAIN])
    rc_baseline, expected, _connects = run(operand_readiness, baseline, require_reconciled=True, timeout=120)
    assert rc_baseline == 1 and "mid-rollout" not in expected["msg"]
    assert result["api_requests"] == expected["api_requests"]


def test_operand_readiness_ends_when_the_rollout_does(run):  # noqa: F811
    nodes, pods, daemonsets = mid_rollout()
    cluster = FakeCluster(nodes=nodes, pods=pods + [operator_pod()], deployments=[deployment()],
                          clusterpolicies=[clusterpolicy()], daemonsets=daemonsets)
    new_pod = [p for p in fleet_pods(daemonsets, ["gpu-2"])
               if p["metadata"]["name"] == "nvidia-device-plugin-daemonset-gpu-2"][0]
    # The new pod first (every node current), the controller's count 2 s later: the wait ends on the count.
    cluster.script("pods", [("advance", 4), ("MODIFIED", new_pod), ("open", "new-pod")])
    cluster.script("daemonsets", [("wait", "new-pod"), ("advance", 2), ("MODIFIED", rolled("device-plugin"))])
    rc, result, _connects = run(operand_readiness, cluster, timeout=120)
    assert rc == 0 and result["elapsed"] == 6 and result["daemonsets"] == {}
    assert result["api_requests"] == {"list": 10, "watch": 5, "total": 15}


def test_cuda_sample_fails_naming_a_cordoned_or_absent_node_it_was_told_to_test(run):  # noqa: F811
    nodes = [gpu_node("gpu-container-1"), gpu_node("gpu-container-2", unschedulable=True), node("cpu-1", gpu=False)]
    cluster = FakeCluster(nodes=nodes, pods=chain_pods("gpu-container-1") + chain_pods("gpu-container-2"))
    rc, result, _connects = run(cuda_sample, cluster, per_node=True,
                                nodes=["gpu-container-1", "gpu-container-2", "gpu-gone"])
    assert rc == 1 and cluster.created == []
    assert result["msg"] == (
        "nodes: no sample can run on gpu-container-2 (cordoned), gpu-gone (not in the cluster): each named node must "
        "be Ready, schedulable (not cordoned) and advertise 1 nvidia.com/gpu; mend it or leave it out of nodes")
    assert [s["node"] for s in result["skipped_nodes"]] == ["gpu-container-2", "gpu-gone"]


def test_named_left_out_keeps_only_the_named_nodes():
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    skipped = [{"node": "gpu-2", "reason": "cordoned"}, {"node": "gpu-3", "reason": "cordoned"}]
    assert rd.named_left_out(["gpu-2", "gpu-9"], nodes, skipped) == [
        {"node": "gpu-2", "reason": "cordoned"}, {"node": "gpu-9", "reason": "not in the cluster"}]
    assert rd.named_left_out(["gpu-1"], nodes, skipped) == []


# ---------------------------------------------------------------- the delivered chart's templates

OLD_PLUGIN, NEW_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin:v0.18.0", "nvcr.io/nvidia/k8s-device-plugin:v0.18.2"
OLD_DRIVER, NEW_DRIVER = "nvcr.io/nvidia/driver:580.105.08", "nvcr.io/nvidia/driver:580.126.20"


def with_images(ds, *images):
    ds = copy.deepcopy(ds)
    ds["spec"]["template"]["spec"]["containers"] = [{"name": "c%d" % i, "image": image} for i, image in
                                                    enumerate(images)]
    return ds


def taken_over(plugin, driver):
    """The container chain rolled out and Ready, the device plugin and driver templates naming ``plugin``
    and ``driver`` (the driver's tag with the OS suffix the operator adds)."""
    daemonsets = []
    for operand_name in CONTAINER_CHAIN:
        ds = rolled(operand_name)
        if operand_name == "device-plugin":
            ds = with_images(ds, plugin)
        elif operand_name == "driver":
            ds = with_images(ds, driver + "-ubuntu22.04")
        daemonsets.append(ds)
    return daemonsets


PLAN = [{"source": NEW_PLUGIN, "components": ["device-plugin"]}, {"source": NEW_DRIVER, "components": ["driver"]}]


def test_an_operand_template_of_the_chart_before_is_not_rolled_out_for_the_chart_delivered():
    nodes = [gpu_node("gpu-1")]
    old = taken_over(OLD_PLUGIN, OLD_DRIVER)
    condition = rd.operand_readiness_condition(NS, images=PLAN)
    done, detail = condition(operands_cache(nodes, fleet_pods(old, ["gpu-1"]), old))
    assert not done
    assert detail["daemonsets"] == {
        PLUGIN_DS: "its template runs %s, not of the chart delivered (the operator has not rewritten it)" % OLD_PLUGIN,
        om.operand("driver").daemonset: "its template runs %s-ubuntu22.04, not of the chart delivered (the operator "
                                        "has not rewritten it)" % OLD_DRIVER}
    # Without the images the old templates, rolled out and Ready, pass: what the option is for.
    assert rd.operand_readiness_condition(NS)(operands_cache(nodes, fleet_pods(old, ["gpu-1"]), old))[0]
    new = taken_over(NEW_PLUGIN, NEW_DRIVER)
    assert rd.operand_readiness_condition(NS, images=PLAN)(operands_cache(nodes, fleet_pods(new, ["gpu-1"]), new))[0]
    # A mirrored site's plan: the templates name the mirror's references.
    mirrored = taken_over("registry.site.example/nvidia/k8s-device-plugin:v0.18.2",
                          "registry.site.example/nvidia/driver:580.126.20")
    plan = [dict(entry, mirror=entry["source"].replace("nvcr.io", "registry.site.example")) for entry in PLAN]
    assert rd.operand_readiness_condition(NS, images=plan)(
        operands_cache(nodes, fleet_pods(mirrored, ["gpu-1"]), mirrored))[0]


def test_operand_readiness_waits_for_the_new_operator_to_rewrite_the_templates(run):  # noqa: F811
    nodes = [gpu_node("gpu-1")]
    old = taken_over(OLD_PLUGIN, OLD_DRIVER)
    cluster = FakeCluster(nodes=nodes, pods=fleet_pods(old, ["gpu-1"]) + [operator_pod()],
                          deployments=[deployment()], clusterpolicies=[clusterpolicy()], daemonsets=old)
    new = taken_over(NEW_PLUGIN, NEW_DRIVER)
    cluster.script("daemonsets", [("advance", 7)] + [("MODIFIED", ds) for ds in new])
    rc, result, _connects = run(operand_readiness, cluster, images=[NEW_PLUGIN, NEW_DRIVER], timeout=60)
    assert rc == 0 and result["elapsed"] == 7, result
    rc, result, _connects = run(operand_readiness, cluster, images=[{"components": ["driver"]}], timeout=60)
    assert rc == 1 and result["msg"] == (
        "images[0]: {'components': ['driver']} is neither an image reference nor an image plan entry (source, mirror)")


def test_an_image_the_plan_has_no_name_for_is_not_judged():
    # Without the nodes' OS the plan has no driver image (its tags are per OS): the driver's template is not judged.
    nodes = [gpu_node("gpu-1")]
    new = taken_over(NEW_PLUGIN, OLD_DRIVER)
    assert rd.operand_readiness_condition(NS, images=[NEW_PLUGIN])(
        operands_cache(nodes, fleet_pods(new, ["gpu-1"]), new))[0]
    # A repository moved (into the mirror): the old template's image has the plan's name, not its reference.
    moved = taken_over(NEW_PLUGIN, OLD_DRIVER)
    done, detail = rd.operand_readiness_condition(NS, images=["registry.site.example/nvidia/k8s-device-plugin:v0.18.2"])(
        operands_cache(nodes, fleet_pods(moved, ["gpu-1"]), moved))
    assert not done and list(detail["daemonsets"]) == [PLUGIN_DS]


def test_the_images_each_node_runs_are_those_of_its_running_operand_pods():
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    new = taken_over(NEW_PLUGIN, NEW_DRIVER)
    pods = fleet_pods(new, ["gpu-1", "gpu-2"])
    for pod in pods:
        operand_name = om.operand_of_pod(pod["metadata"]["labels"]).name
        image = {"device-plugin": NEW_PLUGIN, "driver": NEW_DRIVER + "-ubuntu22.04"}.get(operand_name, operand_name)
        pod["spec"]["containers"][0]["image"] = image
    # gpu-2's device plugin is not Running: it runs no image there.
    plugin = [p for p in pods if p["metadata"]["name"] == "nvidia-device-plugin-daemonset-gpu-2"][0]
    plugin["status"]["phase"] = "Pending"
    images = rd.operand_images(pods, ["gpu-1", "gpu-2", "gpu-gone"])
    assert images["gpu-1"]["device-plugin"] == NEW_PLUGIN
    assert images["gpu-1"]["driver"] == NEW_DRIVER + "-ubuntu22.04"
    assert "device-plugin" not in images["gpu-2"] and images["gpu-2"]["driver"] == NEW_DRIVER + "-ubuntu22.04"
    assert images["gpu-gone"] == {}
    assert sorted(images["gpu-1"]) == sorted(CONTAINER_CHAIN)


def test_operand_readiness_reports_each_nodes_images(run):  # noqa: F811
    nodes = [gpu_node("gpu-1")]
    new = taken_over(NEW_PLUGIN, NEW_DRIVER)
    pods = fleet_pods(new, ["gpu-1"])
    for pod in pods:
        pod["spec"]["containers"][0]["image"] = "img-" + pod["metadata"]["name"]
    cluster = FakeCluster(nodes=nodes, pods=pods + [operator_pod()], deployments=[deployment()],
                          clusterpolicies=[clusterpolicy()], daemonsets=new)
    rc, result, _connects = run(operand_readiness, cluster, timeout=60)
    assert rc == 0
    assert result["nodes"]["gpu-1"]["images"] == dict(
        (om.operand_of_pod(p["metadata"]["labels"]).name, "img-" + p["metadata"]["name"]) for p in pods)
