"""gpu_node_check against the lab (issue 4 acceptance): the clean fleet, the "device plugin
without toolkit" node, a node advertising what its workload config does not produce, nodes
that join later (held, or kept off by a taint the DaemonSets do not count them through),
and a kubectl snapshot that must say what live mode says. The module runs as Ansible runs
it; the CLI and `make check` run as an operator types them.

The fleet's gpu-tainted-1 carries a taint the operand DaemonSets do not tolerate and the
lab inventory takes no decision about it, so it is an error on every run (issue 15): a GPU
node without its operands. Each scenario about another node expects exactly that node and
gpu-tainted-1 among the nodes with errors. Its two fixes are shown to work: the inventory
isolating it (``isolated_nodes``), and a toleration in the chart's ``daemonsets.tolerations``.

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
TAINT_TEXT = "dedicated=training:NoSchedule"
# Both ways out the untolerated-taint error names: a toleration, or isolating the node.
TOLERATION_FIX = "add a toleration to the chart's daemonsets.tolerations (gpu_operator_extra_values"
ISOLATION_FIX = "gpu_node_isolated: true in the inventory, which sets %s=%s" % (om.OPERANDS_LABEL, om.DEPLOY_FALSE)


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

def test_clean_fleet_reports_the_tainted_gpu_node_as_its_only_error(fleet):
    result = _check(fleet)

    # A GPU node that cannot get its operands, and that the inventory does not leave out
    # of the GPU layer, is broken: the check fails on it, and on nothing else.
    assert result["failed"] is True
    assert result["msg"] == "%d error findings on 1 of %d nodes: %s (%s, %s)" % (
        result["summary"]["errors"], len(fleet.fleet()), TAINTED, nc.UNTOLERATED_TAINT, nc.MISSING_OPERAND)
    assert _error_nodes(result) == [TAINTED]
    inventory = fleet.fleet()
    assert sorted(result["nodes"]) == sorted(inventory)
    assert result["policy"]["namespace"] == NS and result["policy"]["sandbox_workloads_enabled"] is True
    peer = result["nodes"][PEER]
    for name, host in inventory.items():
        report = result["nodes"][name]
        if not host.get("gpu_workload_config"):
            assert (report["gpu_node"], report["expected_operands"], _findings(result, name)) == (False, [], [])
        elif name != TAINTED:
            assert report["ok"], (name, _findings(result, name))
            assert report["workload_config"] == host["gpu_workload_config"]
            assert report["codes"] == [] and report["not_running"] == {}
            assert sorted(report["expected_operands"]) == sorted(report["running_operands"]) == \
                _running_operands(fleet, name)
            assert report["advertised"] == _advertised(fleet.core().read_node(name)) != {}

    # The tainted node stays in the report, failing: the taint and each operand it keeps off
    # are errors, and its lowest broken layer is the driver.
    tainted = result["nodes"][TAINTED]
    assert not tainted["ok"]
    assert tainted["codes"] == [nc.UNTOLERATED_TAINT, nc.MISSING_OPERAND]
    assert tainted["untolerated_taints"] == [TAINT_TEXT]
    assert tainted["expected_operands"] == peer["expected_operands"]
    assert tainted["running_operands"] == [] and tainted["advertised"] == {}
    assert set(f["severity"] for f in _findings(result, TAINTED)) == {nc.ERROR}
    missing = _findings(result, TAINTED, nc.MISSING_OPERAND)
    assert [f["operand"] for f in missing] == tainted["expected_operands"]
    assert all(f["message"] == "%s is not running: no pod: taint %s not tolerated" % (f["operand"], TAINT_TEXT)
               for f in missing)
    [taint] = _findings(result, TAINTED, nc.UNTOLERATED_TAINT)
    assert taint["message"].startswith("taint %s is not tolerated by the operand DaemonSets: their pods will never "
                                       "be placed on this GPU node" % TAINT_TEXT), taint["message"]
    assert TOLERATION_FIX in taint["message"] and ISOLATION_FIX in taint["message"], taint["message"]
    assert "{key: dedicated, operator: Exists, effect: NoSchedule}" in taint["message"]
    assert nc.first_broken_layer(tainted) == {"layer": om.LAYER_DRIVER, "operand": "driver",
                                              "reason": "no pod: taint %s not tolerated" % TAINT_TEXT}
    assert [f["layer"] for f in tainted["layer_failures"]][:3] == [
        om.LAYER_DRIVER, om.LAYER_RUNTIME, om.LAYER_DEVICE_PLUGIN]
    assert tainted["layer_failures"][-1] == {"layer": om.LAYER_ALLOCATABLE, "operand": "device-plugin",
                                             "reason": "no nvidia.com/gpu allocatable (capacity: none)"}

    # What the check says is missing there, the DaemonSets count as done.
    daemonsets = dict((om.operand_for_daemonset(ds.metadata.name).name, ds) for ds in _operand_daemonsets(fleet))
    assert set(tainted["expected_operands"]) <= set(daemonsets)
    assert _daemonsets_complete([daemonsets[name] for name in tainted["expected_operands"]])
    assert _running_operands(fleet, TAINTED) == []


def test_the_inventory_isolating_the_tainted_node_makes_its_missing_operands_warnings(fleet):
    result = _check(fleet, isolated_nodes=[TAINTED])

    assert not result.get("failed"), result.get("msg")
    assert result["summary"]["errors"] == 0
    assert all(report["ok"] for report in result["nodes"].values()), _error_nodes(result)
    tainted = result["nodes"][TAINTED]
    assert tainted["codes"] == [nc.UNTOLERATED_TAINT, nc.MISSING_OPERAND] and tainted["layer_failures"] == []
    assert set(f["severity"] for f in _findings(result, TAINTED)) == {nc.WARNING}
    [taint] = _findings(result, TAINTED, nc.UNTOLERATED_TAINT)
    # Decided, not yet applied: the warning says what is left to do.
    assert taint["message"].endswith("but it lacks %s=%s: run the gpu_node_labels role" % (
        om.OPERANDS_LABEL, om.DEPLOY_FALSE)), taint["message"]
    assert [f["operand"] for f in _findings(result, TAINTED, nc.MISSING_OPERAND)] == tainted["expected_operands"]

    # The label the gpu_node_labels role sets for it: the node is out of the GPU layer, nothing is missing.
    fleet.core().patch_node(TAINTED, {"metadata": {"labels": {om.OPERANDS_LABEL: om.DEPLOY_FALSE}}})
    wait_for(fleet.core().list_node, lambda nodes: not any(
        k.startswith(om.DEPLOY_LABEL_PREFIX) and k != om.OPERANDS_LABEL for k in nodes[TAINTED].metadata.labels))
    labelled = _check(fleet)

    assert not labelled.get("failed"), labelled.get("msg")
    report = labelled["nodes"][TAINTED]
    assert report["ok"] and report["codes"] == [] and report["expected_operands"] == []
    assert _findings(labelled, TAINTED) == []
    assert set(report["operand_states"].values()) == {"isolated"}, report["operand_states"]


def test_a_toleration_in_the_chart_values_brings_the_tainted_nodes_operands(fleet, fleet_values):
    peer_operands = _running_operands(fleet, PEER)
    tolerations = [dict(t) for t in om.DEFAULT_OPERAND_TOLERATIONS] + [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    fleet.install_operator(dict(fleet_values, daemonsets={"tolerations": tolerations}))
    try:
        _wait_pods(fleet, TAINTED, peer_operands, _ready)
        wait_for(fleet.core().list_node, lambda nodes: _advertised(nodes[TAINTED]) == {om.CONTAINER_RESOURCE: 1})
        fleet.wait_settled(timeout=300)

        result = _check(fleet)

        assert not result.get("failed"), result.get("msg")
        report = result["nodes"][TAINTED]
        assert report["ok"] and report["codes"] == [] and report["untolerated_taints"] == []
        assert report["running_operands"] == report["expected_operands"] == result["nodes"][PEER]["expected_operands"]
        assert report["advertised"] == {om.CONTAINER_RESOURCE: 1}
    finally:
        # The fleet as the other tests know it: the toleration gone, and with it the node's
        # operands. NoSchedule evicts nothing: the rolling DaemonSets drop their pods there
        # as they roll, the driver's (updateStrategy OnDelete) stays until deleted.
        fleet.install_operator(fleet_values)
        wait_for(client.AppsV1Api(fleet.api).list_namespaced_daemon_set, lambda found: not any(
            t.key == "dedicated" for ds in found.values() if om.operand_for_daemonset(ds.metadata.name)
            for t in ds.spec.template.spec.tolerations or ()), namespace=NS)
        fleet.wait_settled(timeout=300)
        for pod in fleet.core().list_namespaced_pod(NS, field_selector="spec.nodeName=%s" % TAINTED).items:
            if om.operand_of_pod(pod.metadata.labels):
                fleet.core().delete_namespaced_pod(pod.metadata.name, NS)
        wait_for(fleet.core().list_namespaced_pod, lambda pods: not _operand_pods_on(pods, TAINTED), timeout=300,
                 namespace=NS)
        fleet.wait_settled(timeout=300)


def test_clean_fleet_through_the_cli_and_make_check(fleet, lab_env):
    module = _check(fleet)

    as_json = _cli("--kubeconfig", fleet.kubeconfig, "--json")
    assert as_json.returncode == 1, as_json.stderr
    printed = json.loads(as_json.stdout)
    assert printed["failed"] is True and printed["msg"] == module["msg"] and _same_result(printed, module)

    table = _cli("--kubeconfig", fleet.kubeconfig)
    assert table.returncode == 1, table.stderr
    rows = _table_rows(table.stdout)
    assert sorted(rows) == sorted(module["nodes"])
    for name, report in module["nodes"].items():
        expected = report["expected_operands"]
        running = [n for n in expected if n in report["running_operands"]]
        assert rows[name]["RUNNING/EXPECTED"] == ("%d/%d" % (len(running), len(expected)) if report["gpu_node"] else "-")
        assert rows[name]["FINDINGS"] == (", ".join(report["codes"]) or "ok")
    assert rows[TAINTED]["FINDINGS"] == "untolerated-taint, missing-operand"
    assert rows[TAINTED]["RUNNING/EXPECTED"] == "0/%d" % len(module["nodes"][TAINTED]["expected_operands"])
    summary = module["summary"]
    assert summary["errors"] == len(_findings(module, TAINTED)) and summary["warnings"] == 0
    assert summary["ok_nodes"] == summary["nodes"] - 1
    assert table.stdout.rstrip().splitlines()[-1] == "%d nodes (%d GPU), %d ok; %d errors, 0 warnings" % (
        summary["nodes"], summary["gpu_nodes"], summary["ok_nodes"], summary["errors"])
    assert "error   %s untolerated-taint: taint %s is not tolerated" % (TAINTED, TAINT_TEXT) in table.stdout

    made = _make_check(lab_env, "CHECK_ARGS=--json")
    assert made.returncode != 0, made.stderr
    assert _same_result(json.loads(made.stdout), module)

    # The inventory's decision, given on the command line: the same fleet passes.
    isolated = _cli("--kubeconfig", fleet.kubeconfig, "--isolated-node", TAINTED)
    assert isolated.returncode == 0, isolated.stdout + isolated.stderr
    assert isolated.stdout.rstrip().splitlines()[-1] == "%d nodes (%d GPU), %d ok; 0 errors, %d warnings" % (
        summary["nodes"], summary["gpu_nodes"], summary["nodes"], summary["errors"])
    made = _make_check(lab_env, "CHECK_ARGS=--json --isolated-node %s" % TAINTED)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr
    assert _same_result(json.loads(made.stdout), _check(fleet, isolated_nodes=[TAINTED]))


# ---------------------------------------------------------------- broken nodes

def test_device_plugin_without_toolkit_is_an_order_violation(fleet, lab_env):
    fleet.hold_down(BROKEN, "container-toolkit")
    _wait_pods(fleet, BROKEN, ["container-toolkit"], _held)
    _wait_pods(fleet, BROKEN, ["device-plugin"], _ready)

    result = _check(fleet)

    assert result["failed"] is True
    assert result["msg"] == nc.failure_message(result)
    assert "%s (%s, %s)" % (BROKEN, nc.MISSING_OPERAND, nc.ORDER_VIOLATION) in result["msg"]
    assert _error_nodes(result) == sorted([BROKEN, TAINTED])
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
    assert _error_nodes(result) == sorted([TAINTED, VGPU])
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

    assert result["failed"] is True and _error_nodes(result) == sorted([TAINTED, VGPU])
    assert result["nodes"][VGPU]["codes"] == [nc.RESOURCE_MISMATCH, nc.MIXED_WORKLOAD]
    mixed = _findings(result, VGPU, nc.MIXED_WORKLOAD)
    assert [(f["severity"], f["message"]) for f in mixed] == [(nc.ERROR, "advertises resources of several workload "
                                                               "types: nvidia.com/gpu (container); %s (vm-vgpu)" % A10_12Q)]
    # Only the foreign resource is a mismatch: the vGPU one is what A10-12Q produces.
    mismatch = _findings(result, VGPU, nc.RESOURCE_MISMATCH)
    assert [f["message"] for f in mismatch] == ["advertises nvidia.com/gpu (container) but its workload config is vm-vgpu"]


# ---------------------------------------------------------------- nodes that join later

def _blocked_in_init(pod):
    """Pending in an init container that runs (waits at its gate), the main container not started."""
    return pod.status.phase == "Pending" and any(s.state and s.state.running
                                                 for s in pod.status.init_container_statuses or ())


def test_node_added_later_is_missing_until_its_operands_run(fleet):
    peer_operands = _running_operands(fleet, PEER)
    fleet.add_node(LATE, hold=True)
    # Every operand is held, but only the driver gets as far as running: the others wait at
    # their init gates for what sits below them, which never turns Ready.
    _wait_pods(fleet, LATE, ["driver"], _held)
    _wait_pods(fleet, LATE, [n for n in peer_operands if n != "driver"], _blocked_in_init)

    joined = _check(fleet)

    assert joined["failed"] is True and "%s (%s)" % (LATE, nc.MISSING_OPERAND) in joined["msg"]
    assert _error_nodes(joined) == sorted([LATE, TAINTED])
    report = joined["nodes"][LATE]
    assert sorted(report["expected_operands"]) == peer_operands
    assert report["running_operands"] == [] and report["codes"] == [nc.MISSING_OPERAND]
    missing = _findings(joined, LATE)
    assert [(f["operand"], f["severity"]) for f in missing] == [(n, nc.ERROR) for n in report["expected_operands"]]
    messages = dict((f["operand"], f["message"]) for f in missing)
    assert messages.pop("driver") == "driver is not running: CrashLoopBackOff"
    # Each pod waiting at a gate names it, and the gates lead down to the driver.
    assert all(m.startswith("%s is not running: Init:" % n) for n, m in messages.items()), messages
    assert "driver-validation waits for a working driver (driver: CrashLoopBackOff)" in messages["operator-validator"]
    assert ("toolkit-validation waits for /run/nvidia/validations/toolkit-ready, which operator-validator writes"
            in messages["device-plugin"]), messages["device-plugin"]
    assert nc.first_broken_layer(report) == {"layer": om.LAYER_DRIVER, "operand": "driver",
                                             "reason": "CrashLoopBackOff"}

    fleet.release(LATE)
    _wait_pods(fleet, LATE, peer_operands, _ready)
    _wait_advertised(fleet, LATE, joined["nodes"][PEER]["advertised"])

    running = _check(fleet)

    assert _error_nodes(running) == [TAINTED], running.get("msg")
    report = running["nodes"][LATE]
    assert report["ok"] and report["codes"] == [] and _findings(running, LATE) == []
    assert report["running_operands"] == report["expected_operands"] == joined["nodes"][LATE]["expected_operands"]


def test_node_joining_with_an_untolerated_taint_is_an_error_though_daemonsets_look_complete(fleet):
    peer_operands = _running_operands(fleet, PEER)
    fleet.add_node(JOINING, taints=[JOIN_TAINT])
    # The operator has seen it: it labelled the node for the container operands.
    wait_for(fleet.core().list_node, lambda nodes: JOINING in nodes and all(
        (nodes[JOINING].metadata.labels or {}).get(om.deploy_label(n)) == om.DEPLOY_TRUE for n in peer_operands))

    reserved = _check(fleet)

    assert reserved["failed"] is True
    assert "%s (%s, %s)" % (JOINING, nc.UNTOLERATED_TAINT, nc.MISSING_OPERAND) in reserved["msg"]
    assert _error_nodes(reserved) == sorted([JOINING, TAINTED])
    report = reserved["nodes"][JOINING]
    assert not report["ok"]
    assert sorted(report["expected_operands"]) == peer_operands
    assert report["codes"] == [nc.UNTOLERATED_TAINT, nc.MISSING_OPERAND]
    assert report["untolerated_taints"] == ["lab.gpuplatform.invalid/joining:NoSchedule"]
    [taint] = _findings(reserved, JOINING, nc.UNTOLERATED_TAINT)
    assert taint["severity"] == nc.ERROR
    assert TOLERATION_FIX in taint["message"] and ISOLATION_FIX in taint["message"], taint["message"]
    assert "{key: lab.gpuplatform.invalid/joining, operator: Exists, effect: NoSchedule}" in taint["message"]
    missing = _findings(reserved, JOINING, nc.MISSING_OPERAND)
    assert [(f["operand"], f["severity"]) for f in missing] == [(n, nc.ERROR) for n in report["expected_operands"]]
    assert nc.first_broken_layer(report)["layer"] == om.LAYER_DRIVER
    # The DaemonSets of those operands report every pod they want ready, without one here.
    daemonsets = [ds for ds in _operand_daemonsets(fleet)
                  if om.operand_for_daemonset(ds.metadata.name).name in peer_operands]
    assert len(daemonsets) == len(peer_operands) and _daemonsets_complete(daemonsets)
    assert fleet.core().list_namespaced_pod(NS, field_selector="spec.nodeName=%s" % JOINING).items == []

    # Left out on purpose by the inventory: the same node is reported, not broken.
    decided = _check(fleet, isolated_nodes=[JOINING])
    assert _error_nodes(decided) == [TAINTED]
    assert decided["nodes"][JOINING]["ok"]
    assert set(f["severity"] for f in _findings(decided, JOINING)) == {nc.WARNING}

    fleet.core().patch_node(JOINING, {"spec": {"taints": []}})
    _wait_pods(fleet, JOINING, peer_operands, _ready)
    _wait_advertised(fleet, JOINING, reserved["nodes"][PEER]["advertised"])

    serving = _check(fleet)

    assert _error_nodes(serving) == [TAINTED], serving.get("msg")
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
    assert _error_nodes(snapshot) == sorted([BROKEN, TAINTED, VGPU])
    assert {nc.ORDER_VIOLATION, nc.MIXED_WORKLOAD} <= set(snapshot["summary"]["by_code"])

    made = _make_check(lab_env, "SNAPSHOT=%s" % " ".join(files), "CHECK_ARGS=--json")
    assert made.returncode != 0
    assert _same_result(json.loads(made.stdout), before)
