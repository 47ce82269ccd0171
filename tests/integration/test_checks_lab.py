"""gpu_node_check against the lab (issue 4 acceptance): the clean fleet, the "device plugin
without toolkit" node, a node advertising what its workload config does not produce, nodes
that join later (held, or reserved by a taint the DaemonSets do not count them through),
and a kubectl snapshot that must say what live mode says. The module runs as Ansible runs
it; the CLI and `make check` run as an operator types them.

Each scenario waits for the state it looks at through watches on what the lab shows
(pods, node allocatable, DaemonSet status), never through the check under test, and not
through ``Lab.wait_settled``: right after a fault switch that can still return the
simulator's summary from before the switch."""

import json
import os
import subprocess
import sys

import pytest
from kubernetes import client

from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check as nc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from tests.integration.kube import wait_for
from tests.integration.modules import ROOT, run_module

NS = om.DEFAULT_NAMESPACE
CLI = os.path.join(ROOT, "scripts", "gpu-node-check")
PEER = "gpu-container-1"
BROKEN = "gpu-container-2"
VGPU = "gpu-vgpu-1"
TAINTED = "gpu-tainted-1"
LATE = "gpu-late-1"
JOINING = "gpu-joining-1"
# A start-up taint of the site's own, which the operand DaemonSets do not tolerate.
JOIN_TAINT = {"key": "lab.gpuplatform.invalid/joining", "effect": "NoSchedule"}
A10_12Q = om.vgpu_resource_name(om.vgpu_type_name("A10-12Q"))


# ---------------------------------------------------------------- the lab's own view

def _operand_pods_on(pods, node):
    """{operand: [pods]} for the live operand pods on ``node`` (model objects)."""
    result = {}
    for pod in pods.values():
        if pod.spec.node_name != node or pod.metadata.deletion_timestamp:
            continue
        operand_ = om.operand_of_pod(pod.metadata.labels)
        if operand_ is not None:
            result.setdefault(operand_.name, []).append(pod)
    return result


def _ready(pod):
    statuses = pod.status.container_statuses or ()
    return pod.status.phase == "Running" and bool(statuses) and all(s.ready for s in statuses)


def _held(pod):
    return any(s.state and s.state.waiting and s.state.waiting.reason == "CrashLoopBackOff"
               for s in pod.status.container_statuses or ())


def _wait_pods(lab, node, operands, state):
    """Until every one of ``operands`` has pods on ``node``, all in ``state`` (a predicate)."""
    def reached(pods):
        on_node = _operand_pods_on(pods, node)
        return all(on_node.get(name) and all(state(p) for p in on_node[name]) for name in operands)
    wait_for(lab.core().list_namespaced_pod, reached, namespace=NS)


def _advertised(node):
    return om.gpu_resources(node.status.allocatable)


def _wait_advertised(lab, node, resources):
    wait_for(lab.core().list_node, lambda nodes: node in nodes and _advertised(nodes[node]) == resources)


def _operand_daemonsets(lab):
    return [ds for ds in client.AppsV1Api(lab.api).list_namespaced_daemon_set(NS).items
            if om.operand_for_daemonset(ds.metadata.name)]


def _daemonsets_complete(daemonsets):
    """The DaemonSet controller's verdict: every pod it wants is scheduled and ready."""
    return all(ds.status.observed_generation == ds.metadata.generation
               and ds.status.number_ready == ds.status.current_number_scheduled == ds.status.desired_number_scheduled
               for ds in daemonsets)


def _running_operands(lab, node):
    pods = dict((p.metadata.name, p) for p in lab.core().list_namespaced_pod(NS).items)
    return sorted(name for name, on_node in _operand_pods_on(pods, node).items() if any(_ready(p) for p in on_node))


@pytest.fixture
def fleet(gpu_lab):
    """The clean fleet, once the lab shows it: every operand pod on a fleet node Running
    and Ready, every untainted GPU node advertising its own workload config's resources
    (the tainted one none), every operand DaemonSet complete."""
    inventory = gpu_lab.fleet()
    gpu_nodes = dict((name, v) for name, v in inventory.items() if v.get("gpu_workload_config"))

    def pods_ready(pods):
        return all(_ready(p) for name in inventory for on_node in _operand_pods_on(pods, name).values()
                   for p in on_node)

    def nodes_advertise(nodes):
        for name, host in gpu_nodes.items():
            if name not in nodes:
                return False
            configs = set(om.resource_workload_config(r) for r in _advertised(nodes[name]))
            if configs != (set() if host.get("lab_taints") else {host["gpu_workload_config"]}):
                return False
        return True

    wait_for(gpu_lab.core().list_namespaced_pod, pods_ready, namespace=NS)
    wait_for(gpu_lab.core().list_node, nodes_advertise)
    wait_for(client.AppsV1Api(gpu_lab.api).list_namespaced_daemon_set, lambda found: _daemonsets_complete(
        [ds for ds in found.values() if om.operand_for_daemonset(ds.metadata.name)]), namespace=NS)
    return gpu_lab


# ---------------------------------------------------------------- running the check

def _check(lab, **args):
    return run_module("gpu_node_check", args, lab.kubeconfig)


def _findings(result, node, code=None):
    return [f for f in result["findings"] if f["node"] == node and (code is None or f["code"] == code)]


def _error_nodes(result):
    return sorted(set(f["node"] for f in result["findings"] if f["severity"] == nc.ERROR))


def _cli(*args, env=None):
    return subprocess.run([sys.executable, CLI] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=env, cwd=ROOT, check=False)


def _make_check(env, *assignments):
    return subprocess.run(["make", "-s", "-C", ROOT, "check"] + list(assignments), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, env=env, check=False)


def _table_rows(text):
    """{node: {column: cell}} from the CLI's table (its first block of lines)."""
    lines = text.split("\n\n", 1)[0].splitlines()
    header = lines[0]
    columns = header.split()
    starts = [header.index(c) for c in columns]
    rows = {}
    for line in lines[1:]:
        cells = [line[s:e].strip() for s, e in zip(starts, starts[1:] + [None])]
        rows[cells[0]] = dict(zip(columns, cells))
    return rows


def _same_result(a, b):
    return dict((k, a[k]) for k in ("findings", "nodes", "summary", "policy")) == dict(
        (k, b[k]) for k in ("findings", "nodes", "summary", "policy"))


# ---------------------------------------------------------------- the clean fleet

def test_clean_fleet_reports_no_error_findings(fleet):
    result = _check(fleet)

    assert not result.get("failed"), result.get("msg")
    assert result["summary"]["errors"] == 0
    inventory = fleet.fleet()
    assert sorted(result["nodes"]) == sorted(inventory)
    assert result["policy"]["namespace"] == NS and result["policy"]["sandbox_workloads_enabled"] is True
    peer = result["nodes"][PEER]
    for name, host in inventory.items():
        report = result["nodes"][name]
        assert report["ok"], (name, _findings(result, name))
        if not host.get("gpu_workload_config"):
            assert (report["gpu_node"], report["expected_operands"], _findings(result, name)) == (False, [], [])
        elif name != TAINTED:
            assert report["workload_config"] == host["gpu_workload_config"]
            assert report["codes"] == [] and report["not_running"] == {}
            assert sorted(report["expected_operands"]) == sorted(report["running_operands"]) == \
                _running_operands(fleet, name)
            assert report["advertised"] == _advertised(fleet.core().read_node(name)) != {}

    # The reserved node stays in the report: its operands are missing, as warnings.
    tainted = result["nodes"][TAINTED]
    assert tainted["codes"] == [nc.UNTOLERATED_TAINT, nc.MISSING_OPERAND]
    assert tainted["untolerated_taints"] == ["dedicated=training:NoSchedule"]
    assert tainted["expected_operands"] == peer["expected_operands"]
    assert tainted["running_operands"] == [] and tainted["layer_failures"] == []
    missing = _findings(result, TAINTED, nc.MISSING_OPERAND)
    assert [f["operand"] for f in missing] == tainted["expected_operands"]
    assert set(f["severity"] for f in _findings(result, TAINTED)) == {nc.WARNING}
    assert all("dedicated=training:NoSchedule not tolerated" in f["message"] for f in missing)

    # What the check says is missing there, the DaemonSets count as done.
    daemonsets = dict((om.operand_for_daemonset(ds.metadata.name).name, ds) for ds in _operand_daemonsets(fleet))
    assert set(tainted["expected_operands"]) <= set(daemonsets)
    assert _daemonsets_complete([daemonsets[name] for name in tainted["expected_operands"]])
    assert _running_operands(fleet, TAINTED) == []


def test_clean_fleet_through_the_cli_and_make_check(fleet, lab_env):
    module = _check(fleet)

    as_json = _cli("--kubeconfig", fleet.kubeconfig, "--json")
    assert as_json.returncode == 0, as_json.stderr
    printed = json.loads(as_json.stdout)
    assert printed["failed"] is False and _same_result(printed, module)

    table = _cli("--kubeconfig", fleet.kubeconfig)
    assert table.returncode == 0, table.stderr
    rows = _table_rows(table.stdout)
    assert sorted(rows) == sorted(module["nodes"])
    for name, report in module["nodes"].items():
        expected = report["expected_operands"]
        running = [n for n in expected if n in report["running_operands"]]
        assert rows[name]["RUNNING/EXPECTED"] == ("%d/%d" % (len(running), len(expected)) if report["gpu_node"] else "-")
        assert rows[name]["FINDINGS"] == (", ".join(report["codes"]) or "ok")
    assert rows[TAINTED]["FINDINGS"] == "untolerated-taint, missing-operand"
    summary = module["summary"]
    assert table.stdout.rstrip().splitlines()[-1] == "%d nodes (%d GPU), %d ok; 0 errors, %d warnings" % (
        summary["nodes"], summary["gpu_nodes"], summary["ok_nodes"], summary["warnings"])

    made = _make_check(lab_env, "CHECK_ARGS=--json")
    assert made.returncode == 0, made.stderr
    assert _same_result(json.loads(made.stdout), module)


# ---------------------------------------------------------------- broken nodes

def test_device_plugin_without_toolkit_is_an_order_violation(fleet, lab_env):
    fleet.hold_down(BROKEN, "container-toolkit")
    _wait_pods(fleet, BROKEN, ["container-toolkit"], _held)
    _wait_pods(fleet, BROKEN, ["device-plugin"], _ready)

    result = _check(fleet)

    assert result["failed"] is True
    assert result["msg"] == nc.failure_message(result)
    assert "%s (%s, %s)" % (BROKEN, nc.MISSING_OPERAND, nc.ORDER_VIOLATION) in result["msg"]
    assert _error_nodes(result) == [BROKEN]
    violation = [f for f in _findings(result, BROKEN, nc.ORDER_VIOLATION) if f["operand"] == "device-plugin"]
    assert [f["severity"] for f in violation] == [nc.ERROR]
    assert violation[0]["message"].startswith("device-plugin runs while container-toolkit, which it depends on, "
                                              "does not (CrashLoopBackOff)")
    toolkit = _findings(result, BROKEN, nc.MISSING_OPERAND)
    assert [(f["operand"], f["severity"]) for f in toolkit] == [("container-toolkit", nc.ERROR)]
    report = result["nodes"][BROKEN]
    # It still advertises its GPUs: the node looks fine to the scheduler.
    assert report["advertised"] == result["nodes"][PEER]["advertised"]
    assert nc.first_broken_layer(report) == {"layer": om.LAYER_RUNTIME, "operand": "container-toolkit",
                                             "reason": "CrashLoopBackOff"}

    table = _cli("--kubeconfig", fleet.kubeconfig)
    assert table.returncode == 1
    assert _table_rows(table.stdout)[BROKEN]["FINDINGS"] == "missing-operand, order-violation"
    made = _make_check(lab_env)
    assert made.returncode != 0
    assert "%s order-violation: device-plugin runs while container-toolkit" % BROKEN in made.stdout


def test_node_advertising_another_workload_types_resource_is_a_resource_mismatch(fleet):
    # The override replaces what the node advertises: one type, the wrong one.
    fleet.advertise_override(VGPU, {om.CONTAINER_RESOURCE: 2})
    _wait_advertised(fleet, VGPU, {om.CONTAINER_RESOURCE: 2})

    result = _check(fleet)

    assert result["failed"] is True and "%s (%s)" % (VGPU, nc.RESOURCE_MISMATCH) in result["msg"]
    assert _error_nodes(result) == [VGPU]
    report = result["nodes"][VGPU]
    assert report["workload_config"] == om.VM_VGPU and report["codes"] == [nc.RESOURCE_MISMATCH]
    messages = [f["message"] for f in _findings(result, VGPU)]
    assert messages == [
        "advertises nvidia.com/gpu (container) but its workload config is vm-vgpu",
        "sandbox-device-plugin runs but the node advertises no %s allocatable (capacity: nvidia.com/gpu=2)" % A10_12Q,
    ]
    assert set((f["severity"], f["operand"]) for f in _findings(result, VGPU)) == {(nc.ERROR, "sandbox-device-plugin")}
    assert report["layer_failures"][0]["layer"] == om.LAYER_ALLOCATABLE


def test_node_advertising_two_workload_types_is_a_mixed_workload(fleet):
    fleet.advertise_override(VGPU, {om.CONTAINER_RESOURCE: 2, A10_12Q: 4})
    _wait_advertised(fleet, VGPU, {om.CONTAINER_RESOURCE: 2, A10_12Q: 4})

    result = _check(fleet)

    assert result["failed"] is True and _error_nodes(result) == [VGPU]
    assert result["nodes"][VGPU]["codes"] == [nc.RESOURCE_MISMATCH, nc.MIXED_WORKLOAD]
    mixed = _findings(result, VGPU, nc.MIXED_WORKLOAD)
    assert [(f["severity"], f["message"]) for f in mixed] == [(nc.ERROR, "advertises resources of several workload "
                                                               "types: nvidia.com/gpu (container); %s (vm-vgpu)" % A10_12Q)]
    # Only the foreign resource is a mismatch: the vGPU one is what A10-12Q produces.
    mismatch = _findings(result, VGPU, nc.RESOURCE_MISMATCH)
    assert [f["message"] for f in mismatch] == ["advertises nvidia.com/gpu (container) but its workload config is vm-vgpu"]


# ---------------------------------------------------------------- nodes that join later

def test_node_added_later_is_missing_until_its_operands_run(fleet):
    peer_operands = _running_operands(fleet, PEER)
    fleet.add_node(LATE, hold=True)
    _wait_pods(fleet, LATE, peer_operands, _held)

    joined = _check(fleet)

    assert joined["failed"] is True and "%s (%s)" % (LATE, nc.MISSING_OPERAND) in joined["msg"]
    assert _error_nodes(joined) == [LATE]
    report = joined["nodes"][LATE]
    assert sorted(report["expected_operands"]) == peer_operands
    assert report["running_operands"] == [] and report["codes"] == [nc.MISSING_OPERAND]
    missing = _findings(joined, LATE)
    assert [(f["operand"], f["severity"]) for f in missing] == [(n, nc.ERROR) for n in report["expected_operands"]]
    assert all(f["message"] == "%s is not running: CrashLoopBackOff" % f["operand"] for f in missing)
    assert nc.first_broken_layer(report)["layer"] == om.LAYER_DRIVER

    fleet.release(LATE)
    _wait_pods(fleet, LATE, peer_operands, _ready)
    _wait_advertised(fleet, LATE, joined["nodes"][PEER]["advertised"])

    running = _check(fleet)

    assert not running.get("failed"), running.get("msg")
    report = running["nodes"][LATE]
    assert report["ok"] and report["codes"] == [] and _findings(running, LATE) == []
    assert report["running_operands"] == report["expected_operands"] == joined["nodes"][LATE]["expected_operands"]


def test_node_joining_with_an_untolerated_taint_is_missing_though_daemonsets_look_complete(fleet):
    peer_operands = _running_operands(fleet, PEER)
    fleet.add_node(JOINING, taints=[JOIN_TAINT])
    # The operator has seen it: it labelled the node for the container operands.
    wait_for(fleet.core().list_node, lambda nodes: JOINING in nodes and all(
        (nodes[JOINING].metadata.labels or {}).get(om.deploy_label(n)) == om.DEPLOY_TRUE for n in peer_operands))

    reserved = _check(fleet)

    assert not reserved.get("failed"), reserved.get("msg")
    report = reserved["nodes"][JOINING]
    assert sorted(report["expected_operands"]) == peer_operands
    assert report["codes"] == [nc.UNTOLERATED_TAINT, nc.MISSING_OPERAND]
    assert report["untolerated_taints"] == ["lab.gpuplatform.invalid/joining:NoSchedule"]
    missing = _findings(reserved, JOINING, nc.MISSING_OPERAND)
    assert [(f["operand"], f["severity"]) for f in missing] == [(n, nc.WARNING) for n in report["expected_operands"]]
    # The DaemonSets of those operands report every pod they want ready, without one here.
    daemonsets = [ds for ds in _operand_daemonsets(fleet)
                  if om.operand_for_daemonset(ds.metadata.name).name in peer_operands]
    assert len(daemonsets) == len(peer_operands) and _daemonsets_complete(daemonsets)
    assert fleet.core().list_namespaced_pod(NS, field_selector="spec.nodeName=%s" % JOINING).items == []

    fleet.core().patch_node(JOINING, {"spec": {"taints": []}})
    _wait_pods(fleet, JOINING, peer_operands, _ready)
    _wait_advertised(fleet, JOINING, reserved["nodes"][PEER]["advertised"])

    serving = _check(fleet)

    assert not serving.get("failed"), serving.get("msg")
    assert serving["nodes"][JOINING]["codes"] == [] and serving["nodes"][JOINING]["ok"]


# ---------------------------------------------------------------- snapshot mode

def test_kubectl_snapshot_gives_the_findings_of_live_mode(fleet, lab_env, tmp_path):
    fleet.hold_down(BROKEN, "container-toolkit")
    fleet.advertise_override(VGPU, {om.CONTAINER_RESOURCE: 2, A10_12Q: 4})
    _wait_pods(fleet, BROKEN, ["container-toolkit"], _held)
    _wait_advertised(fleet, VGPU, {om.CONTAINER_RESOURCE: 2, A10_12Q: 4})
    kubectl = os.path.join(fleet.bin_dir, "kubectl")
    files = [str(tmp_path / "nodes-pods-daemonsets.json"), str(tmp_path / "clusterpolicies.json")]

    before = _check(fleet, fail_on_findings=False)
    for path, what in zip(files, (["nodes,pods,daemonsets", "-A"], ["clusterpolicies"])):
        with open(path, "w") as handle:
            subprocess.run([kubectl, "get"] + what + ["-o", "json"], env=lab_env, stdout=handle, check=True)
    after = _check(fleet, fail_on_findings=False)
    # The lab held still while kubectl read it, so the snapshot is of the state both saw.
    assert _same_result(before, after)

    snapshot = run_module("gpu_node_check", {"snapshot": files})

    assert snapshot["failed"] is True and snapshot["msg"] == nc.failure_message(before)
    assert _same_result(snapshot, before)
    assert _error_nodes(snapshot) == [BROKEN, VGPU]
    assert {nc.ORDER_VIOLATION, nc.MIXED_WORKLOAD} <= set(snapshot["summary"]["by_code"])

    made = _make_check(lab_env, "SNAPSHOT=%s" % " ".join(files), "CHECK_ARGS=--json")
    assert made.returncode != 0
    assert _same_result(json.loads(made.stdout), before)
