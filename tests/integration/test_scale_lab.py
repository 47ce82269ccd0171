"""The GPU steps at fleet scale: a second lab of 200 generated nodes (tests/lab/fleet.py:
the lab fleet's node kinds in their proportions, its inventory beside the lab), labelled
by the gpu_node_labels role and verified by the gpu_verify role through ansible-playbook,
green; and every wait makes as many API requests on it as on the six GPU nodes of the lab
fleet (a list and a watch per kind, never one per node).

The operator is installed by the lab's own helper with the values the gpu_operator role
renders for the lab site (its rollout is what the 200 nodes cost; the role adds nothing
that grows with them, and a third ansible-playbook would add most of a minute on CI's two
cores). bench/bench_scale.py runs all three steps at 10, 100 and 1,000 GPU nodes."""

import json
import os

import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from tests.integration.conftest import FLEET_VALUES
from tests.integration.gpu_operator import run_playbook
from tests.integration.modules import run_module
from tests.lab import fleet as fleet_mod

SCALE_NODES = 200
# The chart's default toleration and one for the fleet's reserved nodes (gpu-tainted-*): the fix the report gives for
# such a node, so that the verify of the whole fleet is green. The isolated nodes stay out of the GPU layer.
TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
               {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
WAITS = ("gpu_allocatable_wait", "operand_readiness", "helmchart_wait", "node_ready_wait", "cuda_sample")


def _values():
    values = json.loads(json.dumps(FLEET_VALUES))
    values["daemonsets"] = {"tolerations": TOLERATIONS}
    return values


def _extra_vars(workdir):
    return json.dumps({"gpu_operator_extra_values": {"daemonsets": {"tolerations": TOLERATIONS}},
                       "gpu_verify_dest": os.path.join(workdir, "artifacts"),
                       "gpu_node_labels_site_dir": os.path.join(workdir, "site"), "gpu_verify_timeout": 300})


@pytest.fixture(scope="module")
def scale_lab(lab_of_size, tmp_path_factory):
    """The 200-node lab, labelled by the role, the operator rolled out and settled."""
    lab = lab_of_size(SCALE_NODES)
    workdir = str(tmp_path_factory.mktemp("scale"))
    labels = run_playbook("gpu_node_labels.yml", lab.kubeconfig, workdir, "-e", _extra_vars(workdir),
                          inventory=lab.fleet_file, env=lab.env())
    assert labels.returncode == 0, str(labels)
    lab.install_operator(_values())
    lab.wait_settled(timeout=900)
    lab.scale_workdir = workdir
    return lab


def _wait_args(lab):
    return {
        "gpu_allocatable_wait": {"timeout": 300},
        "operand_readiness": {"require_reconciled": True, "timeout": 300},
        "helmchart_wait": {"name": "gpu-operator", "timeout": 300},
        "node_ready_wait": {"names": sorted(lab.fleet()), "timeout": 300},
        # The verify role gives the samples the operand DaemonSets' tolerations.
        "cuda_sample": {"per_node": True, "timeout": 300, "tolerations": TOLERATIONS},
    }


def _sample_pods(lab):
    selector = "%s=%s" % (rd.SAMPLE_LABEL_MANAGED_BY, rd.MANAGED_BY)
    return lab.core().list_namespaced_pod("default", label_selector=selector).items


def test_the_generated_fleet_is_the_lab_fleet_in_its_proportions(scale_lab):
    fleet = scale_lab.fleet()
    assert len(fleet) == SCALE_NODES
    kinds = {}
    for name in fleet:
        kinds[fleet_mod.node_kind(name)] = kinds.get(fleet_mod.node_kind(name), 0) + 1
    # The lab fleet's seven hosts and an isolated GPU node, 25 times over; one server, the rest agents.
    assert kinds == {"cpu": 25, "gpu-container": 50, "gpu-passthrough": 25, "gpu-vgpu": 25, "gpu-tainted": 25,
                     "gpu-spark": 25, "gpu-isolated": 25}
    assert sorted(n.metadata.name for n in scale_lab.core().list_node().items) == sorted(fleet)
    assert fleet["gpu-isolated-7"]["gpu_node_isolated"] is True and fleet["gpu-spark-9"]["rke2_arch"] == "arm64"


def test_the_gpu_steps_verify_200_nodes_green(scale_lab):
    workdir = scale_lab.scale_workdir
    verify = run_playbook("gpu_verify.yml", scale_lab.kubeconfig, workdir, "-e", _extra_vars(workdir),
                          inventory=scale_lab.fleet_file, env=scale_lab.env())
    assert verify.returncode == 0, str(verify)
    with open(os.path.join(workdir, "artifacts", "gpu-verify.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    gpu_nodes = fleet_mod.gpu_hosts(scale_lab.fleet())
    assert report["passed"] is True, report["summary"]
    assert sorted(n for n in report["nodes"] if n in gpu_nodes) == gpu_nodes
    assert report["steps"]["cuda_sample"]["passed"] is True
    # Every step is timed, the step gate's reads included (it checked the 200 nodes Ready).
    steps = ("step_gate", "operand_readiness", "cuda_sample", "node_check")
    timed = [report["steps"][name]["elapsed"] for name in steps]
    assert all(isinstance(seconds, float) and seconds >= 0 for seconds in timed), report["steps"]
    assert _sample_pods(scale_lab) == []


def test_every_wait_makes_the_same_requests_on_200_nodes_as_on_the_lab_fleet(scale_lab, gpu_lab):
    measured = {}
    for lab in (gpu_lab, scale_lab):
        args = _wait_args(lab)
        for name in WAITS:
            result = run_module(name, args[name], lab.kubeconfig)
            assert not result.get("failed"), (name, len(lab.fleet()), result.get("msg"))
            measured.setdefault(name, []).append(result["api_requests"])
            if name == "cuda_sample":
                # One pod on every node that advertises nvidia.com/gpu: the container nodes, the DGX Sparks among them,
                # those the operands reach (the tainted ones here only where the DaemonSets tolerate the taint).
                advertising = sorted(n.metadata.name for n in lab.core().list_node().items
                                     if rd.count(n.status.allocatable, om.CONTAINER_RESOURCE) >= 1)
                assert sorted(p["node"] for p in result["pods"]) == advertising and len(advertising) > 2
    # The same lists on 200 nodes as on 7: nothing is read node by node (a wait lists each kind
    # once, and once more to confirm a success seen on watched data). Watches: one per kind,
    # and on either fleet one more may be opened: after a confirm whose list found the watch
    # behind (cuda_sample's reaper deletes finished samples while the wait goes on, so the
    # last pods can change between the last event and that list; the feeder watches on from
    # the list and may open that watch before the wait stops it), or after the API server
    # closed the watch of a client that fell behind its events (200 sample pods' worth, on a
    # loaded host). Either can happen on the small fleet and not on the big one: CI saw
    # cuda_sample open 2 watches on the 7 nodes and 1 on the 200. So the bound is per list, on
    # each fleet; requests that grew with the fleet would be ~28 times as many.
    for name, (small, big) in sorted(measured.items()):
        assert big["list"] == small["list"], (name, measured[name])
        assert max(small["watch"], big["watch"]) <= 2 * small["list"], (name, measured[name])
    assert _sample_pods(scale_lab) == [] and _sample_pods(gpu_lab) == []
