"""Conformance: the operand model, and the offline simulator, against the REAL GPU Operator
v26.3.2 on the same fleet and values.

The collection's checks, waits and labels role are built on the operand model
(plugins/module_utils/operand_model.py), and the offline simulator is built on it too, so
a wrong model is invisible to every other test. Here the lab runs the real operator (its
real chart, through the real helm-controller and helm); each scenario sets up the fleet
and the chart values, lets the operator reconcile, and compares what it did with what
the model predicts and with what the simulator does in a second lab of its own:

- the operator's DaemonSets: name, node selector, desired number scheduled;
- every ``nvidia.com/*`` label on every node, except those the lab's node agent plays
  (gpu-feature-discovery's product, memory and count: a GPU's, not the operator's);
- the ClusterPolicy's state and conditions (type, status, reason).

A difference fails the test with a readable diff. An accepted difference is listed in
``ACCEPTED`` with its reason; each is checked to still occur, so a fix that removes one
makes the list shrink rather than rot.
"""

import json
import os
import time

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import effective_values
from tests.lab.gpu_operator_sim import CHART_VALUES
from tests.lab.lab import Lab
from tests.lab.upstream import OPERATOR_TAG

NAMESPACE = om.DEFAULT_NAMESPACE
# Labels the node agent writes in the operator's place would be a GPU's (GFD), not the operator's.
SIMULATED_LABELS = ("nvidia.com/gpu.product", "nvidia.com/gpu.memory", "nvidia.com/gpu.count")
SETTLE_S = 180
LATE_NODE = "gpu-late-1"

with open(CHART_VALUES) as _handle:
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
    # gpu-tainted-1 (the fleet's): a taint the operand DaemonSets do not tolerate; in every
    # scenario, and here alone with the defaults.
    Scenario("untolerated-taint", DEFAULTS),
]

# (scenario or "*", "model" or "simulator", path prefix of the difference, reason).
ACCEPTED = [
    ("*", against, "labels/%s/nvidia.com/gpu-driver-upgrade-state" % node,
     "the operator's driver upgrade controller (controllers/upgrade_controller.go, autoUpgrade on by default) writes "
     "its state machine's label on each node with a driver, on its own schedule; the collection reads only the "
     "deploy labels' pause values (paused-for-driver-upgrade), not this label")
    for against in ("model", "simulator")
    for node in ("gpu-container-1", "gpu-container-2", "gpu-passthrough-1", "gpu-vgpu-1", "gpu-late-1")
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
            "cluster_policy": {"state": status.get("state"), "conditions": [list(c) for c in conditions]}}


# ---------------------------------------------------------------- what the model predicts

def predict(nodes, values):
    """The operator's result by the operand model, from the nodes as the scenario left
    them before the operator acted (its labels, taints) and the chart values."""
    policy = om.policy_from_values(effective_values(CHART_DEFAULTS, values), NAMESPACE)
    after = {}
    for name, node in nodes.items():
        after[name] = dict(node["labels"])
        for key, value in om.operator_node_labels(node["labels"], policy).items():
            if value is None:
                after[name].pop(key, None)
            else:
                after[name][key] = value
    labels = dict((name, dict((k, v) for k, v in full.items() if k.startswith("nvidia.com/")
                              and k not in SIMULATED_LABELS)) for name, full in after.items())
    daemonsets = {}
    for operand in om.OPERANDS:
        if not policy["operands_enabled"].get(operand.name):
            continue
        selector = om.node_selector(operand)
        desired = sum(1 for name, node in nodes.items()
                      if all(after[name].get(k) == v for k, v in selector.items())
                      and not om.untolerated_taints(node["taints"]))
        daemonsets[operand.daemonset] = {"selector": selector, "desired": desired}
    gpu_nodes = [n for n, node in nodes.items() if om.is_gpu_node(node["labels"])]
    reason = om.REASON_RECONCILED if gpu_nodes else om.REASON_NO_GPU_NODES
    return {"daemonsets": daemonsets, "labels": labels, "cluster_policy": {
        "state": om.CLUSTER_POLICY_READY, "conditions": [[om.CONDITION_ERROR, "False", "Ready"],
                                                         [om.CONDITION_READY, "True", reason]]}}


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

def clean_fleet(lab):
    """The fleet as NFD and the kubelet leave it: no label the operator or a test wrote,
    no node that joined late. Removing gpu.present makes the operator reconcile each node."""
    fleet = lab.fleet()
    for node in lab.core().list_node().items:
        name = node.metadata.name
        if name not in fleet:
            lab.delete_node(name)
            continue
        patch = dict((k, None) for k in (node.metadata.labels or {})
                     if k.startswith("nvidia.com/") and k not in SIMULATED_LABELS and k != om.MIG_CAPABLE_LABEL)
        if patch:
            lab.core().patch_node(name, {"metadata": {"labels": patch}})


def node_facts(lab):
    return dict((n.metadata.name, {"labels": dict(n.metadata.labels or {}),
                                   "taints": lab.api.sanitize_for_serialization(n.spec.taints) or []})
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
        before[scenario.late_node] = node_facts(lab)[scenario.late_node]
        lab.wait_settled(timeout=SETTLE_S)
    if before is None:
        before = dict((name, dict(facts, labels=dict((k, v) for k, v in facts["labels"].items()
                                                     if not k.startswith("nvidia.com/") or k == om.MIG_CAPABLE_LABEL)))
                      for name, facts in node_facts(lab).items())
    _settle_policy(lab)
    return before, observe(lab)


def _settle_policy(lab):
    from kubernetes import client
    try:
        _watch_policy_ready(client.CustomObjectsApi(lab.api), 60)
    except AssertionError:
        pass


# ---------------------------------------------------------------- the suite

@pytest.fixture(scope="module")
def real(lab):
    if lab.mode != "real":
        pytest.skip("needs the GPU Operator's upstream source (GPU_OPERATOR_SRC, ../shared/upstream/%s, or a clone "
                    "of the tag): this lab runs the offline simulator" % "gpu-operator-v26.3.2.tar.gz")
    yield lab
    clean_fleet(lab)
    lab.reset()


@pytest.fixture(scope="module")
def simulated(real, tmp_path_factory):
    """A second lab on the same fleet, running the offline simulator."""
    instance = Lab(workdir=str(tmp_path_factory.mktemp("sim-lab")), mode="simulated")
    instance.up()
    try:
        yield instance
    finally:
        instance.down()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_model_and_simulator_agree_with_the_real_operator(real, simulated, scenario):
    before, seen = run_scenario(real, scenario)
    assert seen["daemonsets"], "the real operator created no operand DaemonSet: %s" % json.dumps(seen, indent=1)
    predicted = predict(before, scenario.values)
    model_diffs, model_stale = unaccepted(scenario.name, "model", differences(predicted, seen))
    _sim_before, simulator_seen = run_scenario(simulated, scenario)
    sim_diffs, sim_stale = unaccepted(scenario.name, "simulator", differences(simulator_seen, seen))
    report = []
    if model_diffs:
        report.append("operand model vs the real operator:\n" + readable(model_diffs, "model", "real operator"))
    if sim_diffs:
        report.append("simulator vs the real operator:\n" + readable(sim_diffs, "simulator", "real operator"))
    for rule in model_stale + sim_stale:
        report.append("accepted difference no longer occurs, remove it from ACCEPTED: %r" % (rule,))
    assert not report, "\n\n".join(report)


# ---------------------------------------------------------------- the real chart renders what the role renders

def _role_renderings():
    """(name, values) of every chart-line-v26.3 combination the gpu_operator role renders
    in its unit tests (tests/unit/test_gpu_operator_chart.py), one per distinct values."""
    from tests.unit import test_gpu_operator_chart as chart_tests
    args = [("named-%s" % name, dict(kwargs)) for name, kwargs in sorted(chart_tests.SCENARIOS.items())
            if kwargs.get("chart_version", "v26.3.2") == "v26.3.2"]
    args += [("combination-%s" % "-".join(str(x) for x in c[1:]), chart_tests._combination_args(*c))
             for c in chart_tests.COMBINATIONS if c[0] == "v26.3.2"]
    return chart_tests, args


def test_the_real_chart_renders_every_values_combination_the_role_renders(real, capsys, tmp_path):
    """``helm template`` of the real chart (as packaged in the lab's repository) succeeds
    for each, and the ClusterPolicy it renders passes the lab API server's real CRD
    (server-side dry run)."""
    import subprocess
    from kubernetes import client
    chart_tests, renderings = _role_renderings()
    state = real.state()
    helm = os.path.join(state["helm_tools"], "helm")
    package = os.path.join(real.workdir, "chart-repo", "charts", "gpu-operator-%s.tgz" % OPERATOR_TAG)
    api = client.CustomObjectsApi(real.api)
    seen = {}
    for name, kwargs in renderings:
        rc, result = chart_tests.run(capsys, **kwargs)
        if rc != 0:
            continue  # refused by the role (its unit tests assert why): nothing reaches helm
        values = yaml.safe_load(yaml.safe_load(result["manifest_yaml"].split("---\n", 1)[1])["spec"]["valuesContent"])
        key = json.dumps(values, sort_keys=True)
        if key in seen:
            continue
        seen[key] = name
        values_file = tmp_path / ("%s.yaml" % len(seen))
        values_file.write_text(yaml.safe_dump(values))
        proc = subprocess.run([helm, "template", "gpu-operator", package, "--namespace", NAMESPACE,
                               "--kube-version", "v1.34.4", "-f", str(values_file)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
        assert proc.returncode == 0, "%s: helm template failed: %s" % (name, proc.stderr.strip())
        policies = [d for d in yaml.safe_load_all(proc.stdout) if d and d.get("kind") == "ClusterPolicy"]
        assert len(policies) == 1, "%s: the chart rendered %d ClusterPolicies" % (name, len(policies))
        policies[0]["metadata"]["name"] = "conformance-dry-run"
        accepted = api.create_cluster_custom_object(*(om.CLUSTER_POLICY_API + (policies[0],)), dry_run="All")
        assert accepted["spec"]["driver"]["enabled"] == values.get("driver", {}).get("enabled", True), name
    assert len(seen) >= 16, sorted(seen.values())


def test_a_value_the_chart_refuses_fails_the_install_job_with_helms_message(real):
    """As on RKE2: helm-controller's install Job runs helm, helm's template fails, the Job
    pod crash-loops with helm's message, and helmchart_wait reports it at once."""
    from tests.integration.modules import run_module
    clean_fleet(real)
    real.install_operator({"cdi": {"enabled": False, "nriPluginEnabled": True}})
    try:
        result = run_module("helmchart_wait", {"name": "gpu-operator", "timeout": 120}, real.kubeconfig)
        assert result.get("failed"), result
        assert result["job"] == "helm-install-gpu-operator"
        # helm's own error, read from the failed attempt's log (--previous: the pod restarted).
        assert any("the NRI Plugin cannot be enabled when CDI is disabled" in line for line in result["log_tail"]), \
            result["log_tail"]
        assert "the NRI Plugin cannot be enabled when CDI is disabled" in result["msg"]
    finally:
        real.install_operator(DEFAULTS)
        real.wait_settled(timeout=SETTLE_S)
