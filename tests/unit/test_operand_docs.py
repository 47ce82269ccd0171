"""docs/operand-model.md is generated from the operand model and stays equal to it."""

import importlib.util
import os
import subprocess
import sys

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR = os.path.join(ROOT, "scripts", "gen-operand-docs.py")
DOC = os.path.join(ROOT, "docs", "operand-model.md")


def generator():
    spec = importlib.util.spec_from_file_location("gen_operand_docs", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_rows(text, heading):
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[2:]]


def test_committed_doc_equals_a_fresh_render():
    with open(DOC) as handle:
        committed = handle.read()
    assert committed == generator().render(), "docs/operand-model.md is stale: run `make operand-docs`"


def test_workload_table_lists_each_configs_chain_and_resource():
    rows = table_rows(generator().render(), "## Workload configs")
    assert [row[0] for row in rows] == ["`%s`" % c for c in om.WORKLOAD_CONFIGS]
    for config, row in zip(om.WORKLOAD_CONFIGS, rows):
        names = [entry.split(" (")[0] for entry in row[1].split(", ") if not entry.startswith("only")]
        assert names == list(om.chain_for_workload(config))
        assert row[2].split("; ")[0] == om.RESOURCE_PLUGIN[config] == om.resource_plugin(config)
    assert [row[2] for row in rows[1:]] == [
        "sandbox-device-plugin; kata mode: kata-sandbox-device-plugin", "sandbox-device-plugin; kata mode: none"]
    assert "`nvidia.com/gpu`" in rows[0][3]
    assert "`nvidia.com/GA102GL_A10`" in rows[1][3]
    assert "`nvidia.com/NVIDIA_A10-12Q`" in rows[2][3]


def test_operand_table_has_a_row_per_operand():
    rows = table_rows(generator().render(), "## Operands")
    assert [row[0] for row in rows] == list(om.OPERAND_NAMES)
    by_name = dict((row[0], row) for row in rows)
    assert by_name["vfio-manager"][1:4] == ["`nvidia.com/gpu.deploy.vfio-manager`", "`nvidia-vfio-manager`",
                                            "`name=nvidia-vfio-manager`"]
    assert by_name["device-plugin"][4:8] == ["container-toolkit", "`devicePlugin`", "on", om.LAYER_DEVICE_PLUGIN]
    assert by_name["dcgm"][6] == "off"
    # What a live ClusterPolicy without enabled means (IsEnabled), beside the chart default.
    assert (by_name["dcgm"][10], by_name["sandbox-device-plugin"][10], by_name["operator-validator"][10]) == (
        "on", "off", "always (no switch)")
    assert by_name["cc-manager"][9] == "kata" and by_name["kata-sandbox-device-plugin"][9] == "kata"
    assert by_name["mps-control-daemon"][1] == "`nvidia.com/gpu.deploy.device-plugin` + `nvidia.com/mps.capable=true`"


def test_resource_name_table_shows_get_device_name():
    rows = table_rows(generator().render(), "## Resource names")
    assert ["`nvidia.com/GH100_GH200_120GB___480GB`", "`nvidia.com/GA100_A800SXM480GB`"] == [
        row[1] for row in rows if row[0] in ("`GH100 [GH200 120GB / 480GB]`", "`GA100 [A800-SXM4-80GB]`")]


def test_deploy_label_table_follows_the_sandbox_mode():
    rows = dict((row[0], row[1:]) for row in table_rows(generator().render(), "## Node labels the operator writes"))
    kubevirt, kata = rows["`vm-passthrough`"]
    assert "sandbox-device-plugin" in kubevirt.split(", ") and "kata-sandbox-device-plugin" in kata.split(", ")
    assert "sandbox-device-plugin" not in kata.split(", ")
    assert rows["`vm-vgpu`"][0] == rows["`vm-vgpu`"][1]


def test_check_mode_of_the_generator_detects_a_stale_file(tmp_path):
    stale = tmp_path / "operand-model.md"
    stale.write_text("# outdated\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".build", "collections"))
    proc = subprocess.run([sys.executable, GENERATOR, "--check", "--output", str(stale)],
                          capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 1 and "out of date" in proc.stderr
    proc = subprocess.run([sys.executable, GENERATOR, "--output", str(stale)], env=env, check=True)
    assert stale.read_text() == generator().render()
