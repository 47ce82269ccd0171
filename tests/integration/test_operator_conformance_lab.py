"""Conformance: the operand model, and the offline simulator, against the REAL GPU Operator
on the same fleet and values: v26.3.2 by default, any version the lab runs with
GPU_OPERATOR_VERSION (v26.7.0: make integration-v26.7 runs this suite on it). The simulator
plays v26.3.2 only, so on another version the model alone is compared.

The collection's checks, waits and labels role are built on the operand model
(plugins/module_utils/operand_model.py), and the offline simulator is built on it too, so
a wrong model is invisible to every other test. Here the lab runs the real operator (its
real chart, through the real helm-controller and helm); each scenario sets up the fleet
and the chart values, lets the operator reconcile, and compares what it did with what
the model predicts and with what the simulator does in a second lab of its own:

- the operator's DaemonSets: name, node selector, desired number scheduled;
- every ``nvidia.com/*`` label on every node, except those the lab's node agent plays
  (gpu-feature-discovery's product, memory and count: a GPU's, not the operator's);
- the ClusterPolicy's state and conditions (type, status, reason);
- helm's current release record as the collection reads it before an upgrade
  (plugins/module_utils/k8s/helm_release.py): status, chart version, the values given
  (the simulator writes what real helm writes; the model: the HelmChart's, deployed).

A difference fails the test with a readable diff. An accepted difference is listed in
``ACCEPTED`` with its reason; each is checked to still occur, so a fix that removes one
makes the list shrink rather than rot.
"""

import concurrent.futures
import json
import os
import time

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s import helm_release
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import effective_values
from tests.lab.gpu_operator_sim import KERNEL_LABEL, OS_ID_LABEL, OS_VERSION_LABEL
from tests.lab.lab import OPERATOR_VERSION, ROOT, SIMULATED_VERSION, Lab
from tests.lab.node_agent import DRIVER_VERSION_LABELS, host_driver

NAMESPACE = om.DEFAULT_NAMESPACE
# Labels the node agent writes in the operator's place would be a GPU's (GFD), not the operator's.
SIMULATED_LABELS = ("nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count") + DRIVER_VERSION_LABELS
SETTLE_S = 180
CONVERGE_S = 30
# How long a churning DaemonSet gets to be seen created and deleted (the operator's passes
# come a few times a second while it churns).
CHURN_S = 60
LATE_NODE = "gpu-late-1"

# The chart defaults of the version the lab runs (the collection ships each known version's values.yaml).
with open(os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-%s-values.yaml" % OPERATOR_VERSION)) \
        as _handle:
    CHART_DEFAULTS = yaml.safe_load(_handle)

# The chart's defaults, said with one value: helm upgrade given no values at all reuses the
# last release's (pkg/action/upgrade.go), and klipper-helm passes no --reset-values, so a
# HelmChart whose valuesContent is "{}" would keep the previous scenario's values.
DEFAULTS = {"driver": {"enabled": True}}
SANDBOX = {"sandboxWorkloads": {"enabled": True},
           "vgpuManager": {"enabled": True, "repository": "registry.lab.invalid/nvidia", "version": "580.126.20"}}


class Scenario(object):
    """``values``: the chart values; ``steps``: (what, labels) in order, each a
    {node: {label: value or None}} patch applied and settled before the next; the
    comparison is made after the last step."""

    def __init__(self, name, values, steps=(), late_node=None):
        self.name = name
        self.values = values
        self.steps = list(steps)
        self.late_node = late_node

    def __repr__(self):
        return self.name


SCENARIOS = [
    Scenario("chart-defaults", DEFAULTS),
    Scenario("driver-disabled", {"driver": {"enabled": False}}),
    Scenario("sandbox-kubevirt", SANDBOX, [("workload labels", {
        "gpu-passthrough-1": {om.WORKLOAD_CONFIG_LABEL: om.VM_PASSTHROUGH},
        "gpu-vgpu-1": {om.WORKLOAD_CONFIG_LABEL: om.VM_VGPU, om.VGPU_CONFIG_LABEL: "A10-12Q"}})]),
    Scenario("sandbox-kata", dict(SANDBOX, sandboxWorkloads={"enabled": True, "mode": "kata"}), [("workload labels", {
        "gpu-passthrough-1": {om.WORKLOAD_CONFIG_LABEL: om.VM_PASSTHROUGH},
        "gpu-vgpu-1": {om.WORKLOAD_CONFIG_LABEL: om.VM_VGPU, om.VGPU_CONFIG_LABEL: "A10-12Q"}})]),
    Scenario("operands-false-on", DEFAULTS, [("isolate", {"gpu-container-2": {om.OPERANDS_LABEL: "false"}})]),
    Scenario("operands-false-off", DEFAULTS, [
        ("isolate", {"gpu-container-2": {om.OPERANDS_LABEL: "false"}}),
        ("back", {"gpu-container-2": {om.OPERANDS_LABEL: None}})]),
    Scenario("user-operand-off-then-on", DEFAULTS, [
        ("dcgm-exporter off", {"gpu-container-1": {om.DEPLOY_LABEL_PREFIX + "dcgm-exporter": "false"}}),
        # The labels role turns an operand back on by setting "true" (the operator does not
        # reconcile a removed label).
        ("dcgm-exporter on", {"gpu-container-1": {om.DEPLOY_LABEL_PREFIX + "dcgm-exporter": "true"}})]),
    Scenario("workload-switch", SANDBOX, [
        ("to passthrough", {"gpu-container-1": {om.WORKLOAD_CONFIG_LABEL: om.VM_PASSTHROUGH}}),
        ("back to container", {"gpu-container-1": {om.WORKLOAD_CONFIG_LABEL: om.CONTAINER}})]),
    Scenario("unknown-workload-config", SANDBOX, [
        ("unknown", {"gpu-container-1": {om.WORKLOAD_CONFIG_LABEL: "vm-unknown"}})]),
    Scenario("late-node", DEFAULTS, late_node=LATE_NODE),
    # hasMIGCapableGPU from the mig.capable label; the MPS control daemon where mps.capable.
    Scenario("mig-and-mps-capable", DEFAULTS, [("capabilities", {
        "gpu-container-1": {om.MIG_CAPABLE_LABEL: "true"},
        "gpu-container-2": {om.MPS_CAPABLE_LABEL: "true"}})]),
    # Precompiled drivers: one DaemonSet per kernel and OS, nvidia-driver-daemonset-<kernel>-<os>.
    Scenario("precompiled-driver", {"driver": {"usePrecompiled": True}}),
    # gpu.present=true without NFD's PCI labels is not a GPU node: the operator says false.
    Scenario("gpu-present-without-nfd", DEFAULTS, [("claim", {"cpu-1": {om.GPU_PRESENT_LABEL: "true"}})]),
    # gpu-tainted-1 (the fleet's): a taint the operand DaemonSets do not tolerate; in every
    # scenario, and here alone with the defaults.
    Scenario("untolerated-taint", DEFAULTS),
]

# (scenario or "*", "model" or "simulator", path prefix of the difference, reason).
ACCEPTED = [
    ("*", against, "labels/%s/%s" % (node, om.DRIVER_UPGRADE_STATE_LABEL),
     "the operator's driver upgrade controller (controllers/upgrade_controller.go, autoUpgrade on by default) writes "
     "its state machine's label on each node with a driver, on its own schedule; the operand model does not "
     "predict it, gpu_driver_upgrade_wait follows it (docs/waits.md)")
    for against in ("model", "simulator")
    for node in ("gpu-container-1", "gpu-container-2", "gpu-passthrough-1", "gpu-vgpu-1", "gpu-late-1", "gpu-spark-1")
]


# ---------------------------------------------------------------- observing a lab

def observe(lab):
    """What the operator did, in the comparison's terms."""
    from kubernetes import client
    apps = client.AppsV1Api(lab.api)
    daemonsets = {}
    for ds in apps.list_namespaced_daemon_set(NAMESPACE).items:
        if om.operand_for_daemonset(ds.metadata.name) is None:
            continue  # the chart's own (node-feature-discovery), not the operator's
        daemonsets[ds.metadata.name] = {
            "selector": dict(ds.spec.template.spec.node_selector or {}),
            "desired": ds.status.desired_number_scheduled or 0,
        }
    labels = {}
    for node in lab.core().list_node().items:
        labels[node.metadata.name] = dict((k, v) for k, v in (node.metadata.labels or {}).items()
                                          if k.startswith("nvidia.com/") and k not in SIMULATED_LABELS)
    policy = client.CustomObjectsApi(lab.api).get_cluster_custom_object(*(om.CLUSTER_POLICY_API + (
        om.CLUSTER_POLICY_NAME,)))
    status = policy.get("status") or {}
    conditions = sorted((c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ())
    return {"daemonsets": daemonsets, "labels": labels,
            "cluster_policy": {"state": status.get("state"), "conditions": [list(c) for c in conditions]},
            "release": observed_release(lab)}


def observed_release(lab):
    """helm's current revision of the release, as helmchart_release reads it: what an upgrade
    is judged against (roles/gpu_operator/tasks/release.yml)."""
    records = lab.api.sanitize_for_serialization(lab.core().list_namespaced_secret(
        NAMESPACE, label_selector=helm_release.selector("gpu-operator")))["items"]
    latest = helm_release.current(helm_release.history(records, "gpu-operator"))
    if latest is None:
        return None
    return {"status": latest["status"], "chart_version": latest["chart_version"],
            "values": latest["values"]}


# ---------------------------------------------------------------- what the model predicts

def predict(nodes, values):
    """The operator's result by the operand model, from the nodes as the scenario left
    them before the operator acted (its labels, taints) and the chart values. A node with
    its own driver (gpu-spark-1) that the driver DaemonSet reaches ends with
    deploy.driver=pre-installed: k8s-driver-manager's answer, which the lab plays and the
    operator keeps."""
    policy = om.policy_from_values(effective_values(CHART_DEFAULTS, values), NAMESPACE, OPERATOR_VERSION)
    after = {}
    for name, node in nodes.items():
        after[name] = dict(node["labels"])
        for key, value in om.operator_node_labels(node["labels"], policy).items():
            if value is None:
                after[name].pop(key, None)
            else:
                after[name][key] = value
        driver = om.operand("driver")
        if node.get("host_driver") and policy["operands_enabled"].get("driver") and \
                all(after[name].get(k) == v for k, v in om.node_selector(driver).items()) and \
                not om.untolerated_taints(node["taints"]):
            after[name][om.deploy_label("driver")] = om.DEPLOY_PRE_INSTALLED
    labels = dict((name, dict((k, v) for k, v in full.items() if k.startswith("nvidia.com/")
                              and k not in SIMULATED_LABELS)) for name, full in after.items())
    daemonsets, churning = {}, []
    for operand in om.OPERANDS:
        if not policy["operands_enabled"].get(operand.name):
            continue
        selector = om.node_selector(operand)
        targets = [name for name, node in nodes.items()
                   if all(after[name].get(k) == v for k, v in selector.items())
                   and not om.untolerated_taints(node["taints"])]
        if operand.name == "driver" and effective_values(CHART_DEFAULTS, values)["driver"].get("usePrecompiled"):
            # One DaemonSet per (kernel, OS) of the GPU nodes (gpu.present=true, whatever their
            # deploy.driver: getKernelVersionsMap), each also selecting its kernel
            # (object_controls.go transformPrecompiledDriverDaemonset); desired: those it targets.
            # One that targets no node churns: created and deleted on every pass.
            for group in om.precompiled_driver_groups(
                    {"name": name, "kernel": nodes[name]["labels"].get(KERNEL_LABEL), "driver": name in targets,
                     "os_tag": "%s%s" % (nodes[name]["labels"].get(OS_ID_LABEL),
                                         nodes[name]["labels"].get(OS_VERSION_LABEL))}
                    for name in sorted(nodes) if after[name].get(om.GPU_PRESENT_LABEL) == "true"):
                daemonsets[group["daemonset"]] = {"selector": dict(selector, **{KERNEL_LABEL: group["kernel"]}),
                                                  "desired": len(group["driver_nodes"])}
                if group["churns"]:
                    churning.append(group["daemonset"])
            continue
        daemonsets[operand.daemonset] = {"selector": selector, "desired": len(targets)}
    gpu_nodes = [n for n, node in nodes.items() if om.is_gpu_node(node["labels"])]
    reason = om.REASON_RECONCILED if gpu_nodes else om.REASON_NO_GPU_NODES
    cluster_policy = {"state": om.CLUSTER_POLICY_READY, "conditions": [[om.CONDITION_ERROR, "False", "Ready"],
                                                                       [om.CONDITION_READY, "True", reason]]}
    # helm-controller ran helm with the HelmChart's version and values, and helm deployed them.
    release = {"status": helm_release.DEPLOYED, "chart_version": OPERATOR_VERSION, "values": values}
    return {"daemonsets": daemonsets, "labels": labels, "churning": sorted(churning), "cluster_policy": cluster_policy,
            "release": release}


def without_churning(predicted, seen):
    """(predicted, seen) with the DaemonSets the model says churn taken out of both, and the
    problems of those: the real operator creates and deletes each on every pass, so at any
    moment it is absent or present, and when present it must be what the model says
    (selector, no pod wanted)."""
    churning = predicted.get("churning") or ()
    problems = []
    for name in churning:
        present = seen["daemonsets"].get(name)
        if present is not None and present != predicted["daemonsets"][name]:
            problems.append("%s (churning): the model says %s, the real operator has %s" % (
                name, json.dumps(predicted["daemonsets"][name], sort_keys=True), json.dumps(present, sort_keys=True)))

    def strip(tree):
        return dict(tree, daemonsets=dict((k, v) for k, v in tree["daemonsets"].items() if k not in churning))
    expected = strip(predicted)
    expected.pop("churning", None)
    return expected, strip(seen), problems


def churn_seen(lab, name, timeout=CHURN_S):
    """The event types of DaemonSet ``name`` seen until the operator both created and deleted
    it (or ``timeout`` passed): what makes a churning DaemonSet churn, seen on the real one."""
    from kubernetes import client, watch
    apps = client.AppsV1Api(lab.api)
    seen = set()
    deadline = time.monotonic() + timeout
    while not {"ADDED", "DELETED"} <= seen and time.monotonic() < deadline:
        listed = apps.list_namespaced_daemon_set(NAMESPACE, field_selector="metadata.name=" + name)
        for event in watch.Watch().stream(apps.list_namespaced_daemon_set, NAMESPACE,
                                          field_selector="metadata.name=" + name,
                                          resource_version=listed.metadata.resource_version,
                                          timeout_seconds=max(1, int(deadline - time.monotonic()))):
            seen.add(event["type"])
            if {"ADDED", "DELETED"} <= seen:
                break
    return seen


def flatten(tree, prefix=""):
    if isinstance(tree, dict):
        out = {}
        for key in sorted(tree):
            out.update(flatten(tree[key], "%s/%s" % (prefix, key) if prefix else str(key)))
        return out
    return {prefix: json.dumps(tree, sort_keys=True)}


def differences(expected, observed):
    """{path: (expected, observed)} for every leaf that differs."""
    left, right = flatten(expected), flatten(observed)
    return dict((k, (left.get(k), right.get(k))) for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k))


def unaccepted(scenario, against, diffs):
    rules = [r for r in ACCEPTED if r[0] in (scenario, "*") and r[1] == against]
    left = dict((path, pair) for path, pair in diffs.items() if not any(path.startswith(r[2]) for r in rules))
    return left, [r for r in rules if r[0] == scenario and not any(p.startswith(r[2]) for p in diffs)]


def readable(diffs, left_name, right_name):
    lines = ["%-70s %-28s %s" % ("where", left_name, right_name)]
    for path, (a, b) in diffs.items():
        lines.append("%-70s %-28s %s" % (path, a if a is not None else "(absent)", b if b is not None else "(absent)"))
    return "\n".join(lines)


# ---------------------------------------------------------------- running a scenario

def _kept(key, value):
    """Labels that are the node's own facts rather than the operator's or a test's: GFD's, the
    MIG capability, and the pre-installed driver label k8s-driver-manager wrote on a host with its
    own driver (it stays there whatever the operator does next, and a scenario starting while the
    last one's driver DaemonSet still exists sees it written again)."""
    return not key.startswith("nvidia.com/") or key in SIMULATED_LABELS or key == om.MIG_CAPABLE_LABEL or (
        key == om.deploy_label("driver") and value == om.DEPLOY_PRE_INSTALLED)


def clean_fleet(lab):
    """The fleet as NFD and the kubelet leave it: no label the operator or a test wrote,
    no node that joined late. Removing gpu.present makes the operator reconcile each node."""
    fleet = lab.fleet()
    for node in lab.core().list_node().items:
        name = node.metadata.name
        if name not in fleet:
            lab.delete_node(name)
            continue
        patch = dict((k, None) for k, v in (node.metadata.labels or {}).items() if not _kept(k, v))
        if patch:
            lab.core().patch_node(name, {"metadata": {"labels": patch}})


def as_registered(facts):
    """A node's facts without the labels the operator (or, for a host driver, k8s-driver-manager)
    wrote: what it had when it joined."""
    return dict(facts, labels=dict((k, v) for k, v in facts["labels"].items() if _kept(k, v)))


def node_facts(lab):
    return dict((n.metadata.name, {"labels": dict(n.metadata.labels or {}),
                                   "taints": lab.api.sanitize_for_serialization(n.spec.taints) or [],
                                   "host_driver": host_driver(lab.api.sanitize_for_serialization(n))})
                for n in lab.core().list_node().items)


def _watch_policy_ready(api, timeout):
    """Watches the ClusterPolicy until the operator calls it ready (AssertionError after
    ``timeout``): the operator re-checks a notReady policy every 5 s."""
    from kubernetes import watch
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = api.list_cluster_custom_object(*om.CLUSTER_POLICY_API)
        if any((p.get("status") or {}).get("state") == "ready" for p in listed["items"]):
            return
        for event in watch.Watch().stream(api.list_cluster_custom_object, *om.CLUSTER_POLICY_API,
                                          resource_version=listed["metadata"]["resourceVersion"],
                                          timeout_seconds=max(1, int(deadline - time.monotonic()))):
            if (event["object"].get("status") or {}).get("state") == "ready":
                return
    raise AssertionError("ClusterPolicy not ready in %ss" % timeout)


def run_scenario(lab, scenario):
    """Sets the scenario up on ``lab``; returns (nodes before the operator's last turn,
    what the operator then did)."""
    clean_fleet(lab)
    lab.install_operator(scenario.values)
    lab.wait_settled(timeout=SETTLE_S)
    before = None
    for _what, patch in scenario.steps:
        before = node_facts(lab)
        for node, labels in patch.items():
            lab.core().patch_node(node, {"metadata": {"labels": labels}})
            for key, value in labels.items():
                if value is None:
                    before[node]["labels"].pop(key, None)
                else:
                    before[node]["labels"][key] = value
        lab.wait_settled(timeout=SETTLE_S)
    if scenario.late_node:
        before = node_facts(lab)
        lab.add_node(scenario.late_node, workload_config=None, gpus=2)
        lab.wait_settled(timeout=SETTLE_S)
        # As it joined (NFD's labels, none of the operator's), with its taints once the node
        # lifecycle controller took the transient not-ready one off.
        before[scenario.late_node] = as_registered(node_facts(lab)[scenario.late_node])
    if before is None:
        before = dict((name, as_registered(facts)) for name, facts in node_facts(lab).items())
    _settle_policy(lab)
    return before, observe(lab)


def _settle_policy(lab):
    from kubernetes import client
    try:
        _watch_policy_ready(client.CustomObjectsApi(lab.api), 60)
    except AssertionError:
        pass


def checks_against_the_operator(lab):
    """Where gpu_node_check, reading the live ClusterPolicy, expects operands on each node
    and where the real operator's DaemonSets placed pods must agree; a GPU node they cannot
    reach (a taint they do not tolerate) must be an error naming the taint. Returns the
    disagreements, one line each."""
    from tests.integration.modules import run_module
    result = run_module("gpu_node_check", {"fail_on_findings": False}, lab.kubeconfig)
    assert "nodes" in result, result.get("msg")
    placed = {}
    for pod in lab.core().list_namespaced_pod(NAMESPACE).items:
        operand = om.operand_of_pod(pod.metadata.labels)
        if operand is not None and pod.spec.node_name and not pod.metadata.deletion_timestamp:
            placed.setdefault(pod.spec.node_name, set()).add(operand.name)
    problems = []
    for name, report in sorted(result["nodes"].items()):
        expected = set(report.get("expected_operands") or ())
        if report.get("untolerated_taints"):
            errors = [f for f in result["findings"] if f["node"] == name and f["severity"] == "error"
                      and f["code"] == "untolerated-taint"]
            if report["ok"] or not errors:
                problems.append("%s: a GPU node the DaemonSets cannot reach is not an untolerated-taint error" % name)
            continue
        if expected != placed.get(name, set()):
            problems.append("%s: checks expect %s, the operator placed %s" % (
                name, sorted(expected), sorted(placed.get(name, set()))))
    return problems


# ---------------------------------------------------------------- the suite

@pytest.fixture(scope="module")
def real(real_operator):
    yield real_operator
    clean_fleet(real_operator)
    real_operator.reset()


@pytest.fixture(scope="module")
def simulated(real, tmp_path_factory):
    """A second lab on the same fleet, running the offline simulator; None where the real
    operator is another version than the one the simulator plays (SIMULATED_VERSION)."""
    if real.operator_version() != SIMULATED_VERSION:
        yield None
        return
    instance = Lab(workdir=str(tmp_path_factory.mktemp("sim-lab")), mode="simulated")
    instance.up()
    try:
        yield instance
    finally:
        instance.down()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_model_and_simulator_agree_with_the_real_operator(real, simulated, scenario):
    # The two labs are independent and mostly wait (helm, the operator's reconcile, the
    # node agent): run the scenario in both at once.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        on_real = pool.submit(run_scenario, real, scenario)
        on_simulator = pool.submit(run_scenario, simulated, scenario) if simulated is not None else None
        before, seen = on_real.result()
        simulator_seen = on_simulator.result()[1] if on_simulator is not None else None
    predicted, churning_problems = predict(before, scenario.values), []
    # The operator acts on the ClusterPolicy's change on its own schedule (its work queue,
    # a 5 s requeue while notReady), and nothing it writes says which change it has seen:
    # it gets until CONVERGE_S to reach the predicted state, each look after a settled lab.
    deadline = time.monotonic() + CONVERGE_S
    while unaccepted(scenario.name, "model", differences(*without_churning(predicted, seen)[:2]))[0] and \
            time.monotonic() < deadline:
        real.wait_settled(timeout=SETTLE_S)
        seen = observe(real)
    assert seen["daemonsets"], "the real operator created no operand DaemonSet: %s" % json.dumps(seen, indent=1)
    checks = checks_against_the_operator(real)
    # The churn the model predicts is the real operator's: it creates and deletes each such DaemonSet.
    for name in predicted["churning"]:
        events = churn_seen(real, name)
        if not {"ADDED", "DELETED"} <= events:
            churning_problems.append("%s: the model says the operator creates and deletes it on every pass; in %ss "
                                     "the real operator's events were %s" % (name, CHURN_S, sorted(events)))
    expected, seen, problems = without_churning(predicted, seen)
    churning_problems.extend(problems)
    model_diffs, model_stale = unaccepted(scenario.name, "model", differences(expected, seen))
    sim_diffs, sim_stale = [], []
    if simulator_seen is not None:
        simulator_seen = without_churning(predicted, simulator_seen)[1]
        sim_diffs, sim_stale = unaccepted(scenario.name, "simulator", differences(simulator_seen, seen))
    report = []
    if model_diffs:
        report.append("operand model vs the real operator:\n" + readable(model_diffs, "model", "real operator"))
    if sim_diffs:
        report.append("simulator vs the real operator:\n" + readable(sim_diffs, "simulator", "real operator"))
    if churning_problems:
        report.append("precompiled driver DaemonSets that churn:\n" + "\n".join(churning_problems))
    if checks:
        report.append("gpu_node_check (the live ClusterPolicy read as the operator reads it) vs where the real "
                      "operator's DaemonSets put pods:\n" + "\n".join(checks))
    for rule in model_stale + sim_stale:
        report.append("accepted difference no longer occurs, remove it from ACCEPTED: %r" % (rule,))
    assert not report, "\n\n".join(report)
