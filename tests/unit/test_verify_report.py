"""The verification report's layers below Kubernetes (hardware, host driver) from the preflight's
host facts, and the gpu_verify role reading them from the preflight's report."""
import json

import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import host_facts
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import verify_report as vr
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
        "tasks": [{"name": "Report", "ansible.builtin.include_role": {
            "name": "gpuplatform.rke2.gpu_verify", "tasks_from": "report.yml"}}],
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
    from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check as nc
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
