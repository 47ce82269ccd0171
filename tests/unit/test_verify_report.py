"""The verification report's layers below Kubernetes (hardware, host driver) from the preflight's
host facts, and the gpu_verify role reading them from the preflight's report."""
import json

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import host_facts
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check as nc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import verify_report as vr
from tests.unit import report_fleet
from tests.unit.fixtures.hosts.fake_host import FakeHost, a10_host, cpu_only_host, h100_preinstalled_host
from tests.unit.test_preflight_role import inventory, playbook


def node_report(config="container", advertised=None):
    """A GPU node as gpu_node_check reports it when every operand of its workload config runs."""
    names = [o.name for o in om.operands_for_workload(config)]
    return {"gpu_node": True, "workload_config": config, "expected_operands": names, "running_operands": names,
            "not_running": {}, "advertised": advertised or {"nvidia.com/gpu": 2}, "capacity": {},
            "untolerated_taints": [], "layer_failures": []}


def node_check(*names):
    return {"nodes": dict((name, node_report()) for name in names), "findings": [], "summary": {}}


def test_a_node_with_host_facts_gets_its_hardware_and_host_driver_layers(tmp_path):
    facts = {"gpu-a10": host_facts.gather(a10_host(tmp_path / "a10").root),
             "gpu-h100": host_facts.gather(h100_preinstalled_host(tmp_path / "h100").root)}
    report = vr.build_report("site", node_check("gpu-a10", "gpu-h100"), host_facts=facts)

    a10, h100 = report["nodes"]["gpu-a10"], report["nodes"]["gpu-h100"]
    assert a10["layers"]["hardware"] == {"state": vr.OK, "detail": "2 x A10 (10de:2236)"}
    assert a10["layers"]["host-driver"] == {"state": vr.NOT_APPLICABLE, "detail": "no host driver"}
    assert h100["layers"]["hardware"] == {"state": vr.OK, "detail": "4 x H100 (10de:2331)"}
    assert h100["layers"]["host-driver"] == {"state": vr.OK, "detail": "host driver 550.90.07"}
    assert a10["host_facts"] is facts["gpu-a10"]
    assert report["passed"] and [a10["status"], h100["status"]] == ["ok", "ok"]


def test_a_node_without_host_facts_is_not_checked_below_kubernetes(tmp_path):
    facts = {"gpu-a10": host_facts.gather(a10_host(tmp_path / "a10").root)}
    report = vr.build_report("site", node_check("gpu-a10", "gpu-other"), host_facts=facts)

    other = report["nodes"]["gpu-other"]
    assert other["layers"]["hardware"] == {"state": vr.NOT_CHECKED, "detail": "no host facts (preflight not run)"}
    assert other["layers"]["host-driver"]["state"] == vr.NOT_CHECKED
    assert other["host_facts"] is None
    assert other["status"] == "ok" and report["passed"]
    assert "| gpu-other | - | - | - | container | nvidia.com/gpu=2 | - | - | ok |" in vr.to_markdown(report)


def test_a_gpu_node_whose_host_shows_no_gpu_fails_at_the_hardware_layer(tmp_path):
    facts = {"gpu-a10": host_facts.gather(cpu_only_host(tmp_path / "cpu").root)}
    report = vr.build_report("site", node_check("gpu-a10"), host_facts=facts)

    node = report["nodes"]["gpu-a10"]
    assert node["layers"]["hardware"] == {"state": vr.FAILED, "detail": "no NVIDIA GPU on the PCI bus"}
    assert node["first_failed_layer"] == "hardware" and node["status"] == "failing"
    assert not report["passed"]
    assert "gpu-a10: layer hardware: no NVIDIA GPU on the PCI bus" in vr.failure_message(report)


def test_a_driver_installed_but_not_loaded_and_the_operators_loaded_driver_are_told_apart(tmp_path):
    installed = FakeHost(tmp_path / "installed").system().host_driver(loaded=False)
    installed.gpu("0000:17:00.0", "2236")
    operators = FakeHost(tmp_path / "operators").system().host_driver(module_path=None)
    operators.gpu("0000:17:00.0", "2236", driver="nvidia").file("/run/nvidia/validations/.driver-ctr-ready")
    facts = {"installed": host_facts.gather(installed.root), "operators": host_facts.gather(operators.root)}
    report = vr.build_report("site", node_check("installed", "operators"), host_facts=facts)

    assert report["nodes"]["installed"]["layers"]["host-driver"] == {
        "state": vr.OK, "detail": "host driver installed (/lib/modules/5.15.0-105-generic/updates/dkms/nvidia.ko.zst), "
                                  "not loaded"}
    assert report["nodes"]["operators"]["layers"]["host-driver"] == {
        "state": vr.NOT_APPLICABLE, "detail": "driver 550.54.15 of the GPU Operator's driver container"}


def test_gpu_verify_reads_the_preflight_report_by_kubernetes_node_name(tmp_path):
    # Both roles on their defaults: the preflight writes artifacts/<site>/preflight/preflight.json next to
    # the playbook, and gpu_verify reads it from there.
    hosts = {"a10-host": {"gpu_host_facts_root": a10_host(tmp_path / "a10").root, "k8s_node_name": "gpu-a10"}}
    path = inventory(tmp_path, hosts, site_name="site-x")
    preflight_play = tmp_path / "preflight.yml"
    preflight_play.write_text(yaml.safe_dump([{
        "name": "Preflight", "hosts": "gpu_nodes", "gather_facts": False,
        "roles": [{"role": "gpuplatform.rke2.gpu_preflight"}]}]))
    rc, out, _recap = playbook(path, playbook_path=str(preflight_play))
    assert rc == 0, out
    dest = tmp_path / "artifacts" / "site-x"
    preflight = json.loads((dest / "preflight" / "preflight.json").read_text())
    assert sorted(preflight["host_facts"]) == ["gpu-a10"]
    assert preflight["node_names"] == {"a10-host": "gpu-a10"}
    assert sorted(preflight["result"]["nodes"]) == ["a10-host"]

    verify = tmp_path / "verify.yml"
    verify.write_text(yaml.safe_dump([{
        "name": "Write the verification report", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Report", "ansible.builtin.include_role": {
                "name": "gpuplatform.rke2.gpu_verify", "tasks_from": "report.yml"}},
            # The role reads the report from its files: the registered result keeps the summary and
            # leaves the report (megabytes at a thousand nodes) out of every later task's variables.
            {"name": "The result", "ansible.builtin.assert": {"that": [
                "gpu_verify_report.summary is string", "gpu_verify_report.files | length == 3",
                "gpu_verify_report.report is not defined"]}}],
        "vars": {"gpu_verify_cuda_sample": False, "gpu_verify_fail": False,
                 "gpu_verify_node_check": node_check("gpu-a10", "gpu-b"),
                 "gpu_verify_operands": {}, "gpu_verify_allocatable": {}},
    }]))
    rc, out, _recap = playbook(path, playbook_path=str(verify))
    assert rc == 0, out
    nodes = json.loads((dest / "gpu-verify.json").read_text())["nodes"]
    assert nodes["gpu-a10"]["layers"]["hardware"] == {"state": "ok", "detail": "2 x A10 (10de:2236)"}
    assert nodes["gpu-a10"]["host_facts"]["iommu"]["enabled"] is True
    assert nodes["gpu-b"]["layers"]["hardware"]["state"] == "not checked"

    (dest / "preflight" / "preflight.json").unlink()
    rc, out, _recap = playbook(path, playbook_path=str(verify))
    assert rc == 0, out
    nodes = json.loads((dest / "gpu-verify.json").read_text())["nodes"]
    assert nodes["gpu-a10"]["layers"]["hardware"]["state"] == "not checked"
    assert nodes["gpu-a10"]["host_facts"] is None


# ---------------------------------------------------------------- from gpu_node_check's results

def checked(nodes, pods, isolated_nodes=()):
    """gpu_node_check's result for hand-built nodes and pods (chart defaults)."""
    snapshot = {"nodes": nodes, "pods": pods, "daemonsets": [], "clusterpolicies": []}
    return nc.check(snapshot, nc.policy_from_inputs([], {}), isolated_nodes=isolated_nodes)


def test_a_gpu_node_kept_off_by_a_taint_fails_the_report_naming_the_taint_and_both_fixes():
    from tests.unit.wait_builders import TRAINING_TAINT, chain_pods, gpu_node
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-tainted-1", gpus=0, taints=[TRAINING_TAINT])]
    report = vr.build_report("lab", checked(nodes, chain_pods("gpu-1")))
    tainted = report["nodes"]["gpu-tainted-1"]
    assert tainted["status"] == "failing" and tainted["first_failed_layer"] == om.LAYER_DRIVER
    assert tainted["layers"][om.LAYER_DRIVER] == {
        "state": vr.FAILED, "detail": "driver: no pod: taint dedicated=training:NoSchedule not tolerated"}
    assert tainted["layers"][om.LAYER_ALLOCATABLE]["state"] == vr.FAILED
    assert report["passed"] is False
    assert report["summary"] == "1 of 2 GPU nodes failing: gpu-tainted-1 (driver); failed steps: node_check"
    markdown = vr.to_markdown(report)
    assert markdown.splitlines()[2].startswith("**FAILED**")
    message = vr.failure_message(report)
    assert "gpu-tainted-1: untolerated-taint: taint dedicated=training:NoSchedule is not tolerated" in message
    assert "daemonsets.tolerations" in message and "gpu_node_isolated: true" in message

    # Fixed by isolating it (the inventory's decision, label not set yet): no longer failing.
    isolated = vr.build_report("lab", checked(nodes, chain_pods("gpu-1"), isolated_nodes=["gpu-tainted-1"]))
    assert isolated["passed"] is True
    assert isolated["nodes"]["gpu-tainted-1"]["status"] == "warning"
    assert isolated["nodes"]["gpu-tainted-1"]["layers"][om.LAYER_DRIVER]["state"] == vr.NOT_APPLICABLE


def test_a_node_whose_operands_are_paused_is_reported_paused():
    from tests.unit.wait_builders import chain_pods, gpu_node
    labels = dict((om.deploy_label(o), "paused-for-mig-change")
                  for o in ["device-plugin", "dcgm-exporter", "gpu-feature-discovery"])
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-mig-1", gpus=0, labels=labels)]
    pods = chain_pods("gpu-1") + chain_pods("gpu-mig-1", ["driver", "container-toolkit", "operator-validator"])
    report = vr.build_report("lab", checked(nodes, pods))
    node = report["nodes"]["gpu-mig-1"]
    assert node["status"] == vr.PAUSED
    assert node["layers"][om.LAYER_DEVICE_PLUGIN]["state"] == vr.PAUSED
    assert node["layers"][om.LAYER_DEVICE_PLUGIN]["detail"].startswith(
        "device-plugin: paused: nvidia.com/gpu.deploy.device-plugin=paused-for-mig-change")
    assert node["layers"][om.LAYER_ALLOCATABLE] == {
        "state": vr.PAUSED,
        "detail": "nothing advertised while dcgm-exporter, device-plugin, gpu-feature-discovery are paused"}
    assert node["layers"][om.LAYER_DRIVER]["state"] == vr.OK
    assert report["passed"] is True and report["summary"] == "2 GPU nodes verified: 1 ok, 1 paused"
    assert "| gpu-mig-1 | - | - | version unknown (container) | container | - | - | - | ok | ok | paused | paused | - " \
        "| paused |" in vr.to_markdown(report)


# ---------------------------------------------------------------- at fleet scale: summary, order, versions, steps

def fleet_report(n=1000, faults=report_fleet.FAULTS_PER_1000):
    return vr.build_report("fleet", generated_at="2026-12-01T16:00:00Z", **report_fleet.inputs(n, faults))


FLEET = fleet_report()
FAULTS = dict((name, fault) for name, (_config, fault) in report_fleet.plan(1000).items() if fault)


def test_failing_nodes_come_by_their_lowest_broken_layer_bottom_up_then_by_name():
    order = FLEET["failing_nodes"]
    assert sorted(order) == sorted(n for n, f in FAULTS.items() if f != report_fleet.ISOLATED)
    rows = vr.REPORT_LAYERS + (vr.WORKLOAD_LABEL, vr.OTHER_FINDINGS)
    starts = [vr.first_failure(FLEET["nodes"][name]) for name in order]
    assert starts == [report_fleet.FIRST_FAILED[FAULTS[name]] for name in order]
    keys = [(rows.index(start), name) for start, name in zip(starts, order)]
    assert keys == sorted(keys)
    # Every node whose driver is broken first, then the container runtime's, ...
    assert [rows[rank] for rank in sorted(set(rank for rank, _name in keys))] == [
        "driver", "container-runtime", "device-plugin", "allocatable", "cuda-sample", "workload-label"]


def test_the_summary_counts_the_nodes_by_status_and_by_layer():
    view = FLEET["overview"]
    per_fault = dict((kind, count) for kind, count in report_fleet.FAULTS_PER_1000)
    failing = sum(count for kind, count in per_fault.items() if kind != report_fleet.ISOLATED)
    assert view["gpu_nodes"] == 1000
    assert view["by_status"] == {"ok": 1000 - failing - per_fault[report_fleet.ISOLATED],
                                 "warning": per_fault[report_fleet.ISOLATED], "paused": 0, "failing": failing}
    expected_first = dict((row, 0) for row in vr.REPORT_LAYERS + (vr.WORKLOAD_LABEL, vr.OTHER_FINDINGS))
    for kind, count in per_fault.items():
        if kind in report_fleet.FIRST_FAILED:
            expected_first[report_fleet.FIRST_FAILED[kind]] += count
    assert view["first_failed_layer"] == expected_first
    for row, counts in view["by_layer"].items():
        assert sum(counts.values()) == 1000, row
    # A crashed driver breaks the layers above it too: each such node counts as failed in all of them.
    driver_first = expected_first["driver"]
    assert view["by_layer"]["driver"]["failed"] == driver_first
    assert view["by_layer"]["container-runtime"]["failed"] == driver_first + per_fault["toolkit-crash"]
    assert view["by_layer"]["workload-label"] == {"ok": 997, "failed": 3, "paused": 0, "n/a": 0, "not checked": 0}
    assert view["by_layer"]["cuda-sample"]["failed"] == per_fault["cuda-sample-fails"]


def test_the_one_line_summary_names_ten_failing_nodes_and_the_failure_message_twenty():
    summary = FLEET["summary"]
    assert summary.startswith("54 of 1000 GPU nodes failing: %s (driver); " % FLEET["failing_nodes"][0])
    assert summary.count(" (") == vr.SUMMARY_NAMES and "; and 44 more; failed steps: " in summary
    message = vr.failure_message(FLEET).splitlines()
    named = sorted(set(line.split(":")[0].strip() for line in message[1:-1]))
    assert named == sorted(FLEET["failing_nodes"][:vr.MESSAGE_NODES])
    assert message[-1] == "  and 34 more failing nodes: the report (gpu-verify.md, gpu-verify.html) lists them all"


def test_the_versions_are_what_the_nodes_and_pods_run_counted_per_node():
    versions = FLEET["versions"]
    assert versions["rke2"] == {report_fleet.RKE2: 1040, report_fleet.RKE2_PREVIOUS: 10}
    assert versions["gpu-operator"] == {report_fleet.IMAGES["gpu-operator"]: 1}
    # No driver version where the driver never came up (GFD writes the label).
    assert versions["driver"] == {"580.126.20, container driver": 843, "version unknown, container driver": 17}
    toolkit = versions["operand_images"]["container-toolkit"]
    assert toolkit == {report_fleet.IMAGES["container-toolkit"]: 847}
    rows = dict(vr.version_rows(FLEET))
    assert rows["RKE2 (kubelet)"] == [(report_fleet.RKE2, 1040, "node"), (report_fleet.RKE2_PREVIOUS, 10, "node")]
    assert "| container-toolkit image | nvcr.io/nvidia/k8s/container-toolkit:v1.18.1 (847 GPU nodes) |" \
        in vr.to_markdown(FLEET)


def test_running_images_counts_gpu_nodes_per_image_and_leaves_terminating_and_other_pods_out():
    from tests.unit.wait_builders import chain_pods, gpu_node, node, operator_pod
    pods = chain_pods("gpu-1", ["device-plugin"]) + chain_pods("gpu-2", ["device-plugin"]) \
        + chain_pods("gpu-3", ["device-plugin"]) + chain_pods("cpu-1", ["device-plugin"]) + [operator_pod()]
    for pod, image in zip(pods, ["dp:v0.18.1", "dp:v0.18.1", "dp:v0.17.4", "dp:v0.18.1", "op:v26.3.2"]):
        pod["spec"]["containers"][0]["image"] = image
    pods[2]["metadata"]["deletionTimestamp"] = "2026-12-01T16:00:00Z"
    other = chain_pods("gpu-1", ["device-plugin"])[0]
    other["metadata"]["namespace"] = "elsewhere"
    other["spec"]["containers"][0]["image"] = "dp:elsewhere"
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2"), gpu_node("gpu-3"), node("cpu-1", gpu=False)]
    nodes[0]["status"]["nodeInfo"] = {"kubeletVersion": "v1.34.1+rke2r1"}
    result = nc.check({"nodes": nodes, "pods": pods + [other], "daemonsets": []}, nc.policy_from_inputs([], {}))
    assert result["images"] == {"operator": {"op:v26.3.2": 1}, "operands": {"device-plugin": {"dp:v0.18.1": 2}}}
    assert [result["nodes"][n]["kubelet_version"] for n in ("gpu-1", "gpu-2")] == ["v1.34.1+rke2r1", None]


def test_the_workload_label_check_fails_on_a_label_the_operator_ignores_or_does_not_know():
    nodes = dict((name, node_report()) for name in ("typo", "plain", "labelled"))
    nodes["labelled"]["workload_label"] = "container"
    findings = [{"node": "typo", "severity": "error", "code": "unknown-workload-config",
                 "message": "nvidia.com/gpu.workload.config=vm-passthru is not a workload config"}]
    report = vr.build_report("site", {"nodes": nodes, "findings": findings, "summary": {}})
    assert report["nodes"]["typo"]["workload_label"] == {
        "state": vr.FAILED, "detail": "unknown-workload-config: nvidia.com/gpu.workload.config=vm-passthru is not a "
                                      "workload config"}
    assert report["nodes"]["plain"]["workload_label"] == {
        "state": vr.OK, "detail": "no nvidia.com/gpu.workload.config: container"}
    assert report["nodes"]["labelled"]["workload_label"]["detail"] == "nvidia.com/gpu.workload.config=container"
    assert report["failing_nodes"] == ["typo"] and vr.first_failure(report["nodes"]["typo"]) == vr.WORKLOAD_LABEL
    assert report["summary"] == "1 of 3 GPU nodes failing: typo (workload-label); failed steps: node_check"


def test_each_step_shows_how_long_it_took_and_the_operand_wait_its_own_steps():
    rows = vr.step_rows(FLEET)
    assert [row[0] for row in rows] == [
        "step_gate", "operand_readiness", "operand_readiness: operator", "operand_readiness: cluster-policy",
        "operand_readiness: operands", "allocatable[0]", "cuda_sample", "node_check"]
    assert [row[2] for row in rows] == [0.4, 600.4, 0.1, 0.0, 600.3, 600.2, 48.7, 0.9]
    assert rows[0][1:] == (True, 0.4, "step 5 (GPU Operator) is verified: step 6 may start")
    assert FLEET["elapsed"] == round(0.4 + 600.4 + 600.2 + 48.7 + 0.9, 3)
    untimed = vr.build_report("site", node_check("gpu-1"))
    assert untimed["elapsed"] is None
    markdown = vr.to_markdown(untimed)
    assert "| node_check | True | not timed |" in markdown
    # Without the gate's result (gpu_verify_gate: false) its row says so; nothing fails for it.
    assert "| step_gate | None | not timed | not run |" in markdown
    assert untimed["passed"] is True
    # Timings are no change to the site.
    assert vr.stable(untimed) == vr.stable(dict(untimed, elapsed=12.5))


def test_the_markdown_puts_the_summary_first_then_the_failing_nodes_then_the_table():
    markdown = vr.to_markdown(FLEET)
    headings = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert headings == ["## Summary", "## Versions", "## Steps", "## Failing nodes (54)", "## Other findings (70)",
                        "## All GPU nodes (1000)"]
    failing = [line[4:] for line in markdown.splitlines() if line.startswith("### ")]
    assert failing == FLEET["failing_nodes"]
    assert "| driver | 930 | 20 | 0 | 50 | 0 | 20 |" in markdown
    first = FLEET["failing_nodes"][0]
    assert "- **%s** / driver: driver: CrashLoopBackOff" % first in markdown
    assert markdown.index("## Failing nodes") < markdown.index("| %s | amd64 |" % first)


def test_the_pages_hold_nothing_the_json_does_not():
    # Markdown and HTML are rendered from the report alone: from its JSON they come out the same.
    for report in (FLEET, fleet_report(6, (("toolkit-crash", 1),))):
        from_json = json.loads(vr.to_json(report))
        assert vr.to_markdown(from_json) == vr.to_markdown(report)
        assert vr.to_html(from_json) == vr.to_html(report)


def test_gpu_node_check_times_itself_and_the_report_shows_it(tmp_path):
    from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_node_check
    snapshot = report_fleet.cluster(6, (("toolkit-crash", 1),))
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        dict(obj, kind=kind) for kind, key in (("Node", "nodes"), ("Pod", "pods"), ("ClusterPolicy", "clusterpolicies"))
        for obj in snapshot[key]]}))
    result = gpu_node_check.run({"snapshot": [str(path)], "nodes": None, "isolated_nodes": []})
    assert isinstance(result["elapsed"], float) and result["elapsed"] >= 0
    assert result["images"]["operands"]["container-toolkit"] == {report_fleet.IMAGES["container-toolkit"]: 6}
    report = vr.build_report("site", result)
    assert report["steps"]["node_check"]["elapsed"] == result["elapsed"] == report["elapsed"]
    assert report["versions"]["gpu-operator"] == {report_fleet.IMAGES["gpu-operator"]: 1}


def test_the_role_hands_gpu_node_checks_result_to_the_report_through_its_file(tmp_path):
    """gpu_node_check with result_file registers only its summary (the rest, about 1 KB a node, is in the file), and
    the role's report task reads the file; in check mode nothing is written and the whole result is registered."""
    snapshot = report_fleet.cluster(6, (("toolkit-crash", 1),))
    snapshot_path = tmp_path / "snapshot.json"
    snapshot_path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        dict(obj, kind=kind) for kind, key in (("Node", "nodes"), ("Pod", "pods"), ("ClusterPolicy", "clusterpolicies"))
        for obj in snapshot[key]]}))
    path = inventory(tmp_path, {}, site_name="site-x")
    dest = tmp_path / "artifacts" / "site-x"
    result_file = dest / "gpu-node-check.json"
    verify = tmp_path / "verify.yml"
    verify.write_text(yaml.safe_dump([{
        "name": "Check and report", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Check", "register": "gpu_verify_node_check", "gpuplatform.rke2.gpu_node_check": {
                "snapshot": [str(snapshot_path)], "fail_on_findings": False,
                "result_file": "{{ omit if ansible_check_mode else '%s' }}" % result_file}},
            {"name": "What is registered", "ansible.builtin.copy": {
                "content": "{{ gpu_verify_node_check | to_json }}", "dest": str(tmp_path / "registered.json")},
             "check_mode": False},
            {"name": "Report", "ansible.builtin.include_role": {
                "name": "gpuplatform.rke2.gpu_verify", "tasks_from": "report.yml"}}],
        "vars": {"gpu_verify_cuda_sample": False, "gpu_verify_fail": False,
                 "gpu_verify_operands": {}, "gpu_verify_allocatable": {}},
    }]))
    rc, out, _recap = playbook(path, "--check", playbook_path=str(verify))
    assert rc == 0, out
    registered = json.loads((tmp_path / "registered.json").read_text())
    assert "result_file" not in registered and "gpu-0000" in registered["nodes"]
    checked_nodes = sorted(registered["nodes"])
    assert not result_file.exists() and not (dest / "gpu-verify.json").exists()

    rc, out, _recap = playbook(path, playbook_path=str(verify))
    assert rc == 0, out
    registered = json.loads((tmp_path / "registered.json").read_text())
    assert sorted(registered) == ["changed", "elapsed", "failed", "result_file", "summary"]
    assert registered["result_file"] == str(result_file) and registered["changed"] is False
    whole = json.loads(result_file.read_text())
    assert oct(result_file.stat().st_mode & 0o777) == "0o644"
    assert whole["summary"] == registered["summary"] and sorted(whole["nodes"]) == checked_nodes and whole["findings"]
    report = json.loads((dest / "gpu-verify.json").read_text())
    assert sorted(report["nodes"]) == sorted(n for n, node in whole["nodes"].items() if node["gpu_node"])
    assert report["summary"] == vr.build_report("site-x", whole)["summary"]


def test_the_report_names_a_node_check_file_it_cannot_read(tmp_path):
    from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_verify_report
    missing = tmp_path / "gone.json"
    with pytest.raises(ValueError, match="node_check_file: cannot read %s" % missing):
        gpu_verify_report.read_node_check_file(str(missing))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="node_check_file: .*bad.json is not JSON"):
        gpu_verify_report.read_node_check_file(str(tmp_path / "bad.json"))
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValueError, match="holds a list, expected gpu_node_check's result"):
        gpu_verify_report.read_node_check_file(str(tmp_path / "list.json"))
