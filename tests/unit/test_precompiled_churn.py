"""driver.usePrecompiled beside GPU nodes without a driver container: the operator makes a
precompiled driver DaemonSet for every GPU node's kernel and deletes the one that wants no
pod on its next pass, so a kernel that only such nodes run keeps it reconciling for ever
(operand_model.precompiled_driver_groups). The model says which DaemonSets churn, and the
gpu_operator_chart module warns before the chart is delivered."""

from ansible.module_utils.common import warnings as module_warnings

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from tests.unit.test_gpu_operator_chart import run as run_chart_module

GENERIC, SPARK = "5.15.0-122-generic", "6.17.0-1014-nvidia"
# The lab fleet's GPU nodes as the role hands them to the module (inventories/lab/hosts.yml).
FLEET = [
    {"name": "gpu-container-1", "workload_config": "container", "os_tag": "ubuntu22.04", "kernel": GENERIC},
    {"name": "gpu-container-2", "workload_config": "container", "os_tag": "ubuntu22.04", "kernel": GENERIC},
    {"name": "gpu-spark-1", "workload_config": "container", "os_tag": "ubuntu22.04", "kernel": SPARK,
     "operands_disabled": ["driver"]},
]
PRECOMPILED = {"driver_enabled": True, "driver_use_precompiled": True}


def test_a_kernel_only_nodes_without_a_driver_container_run_churns():
    groups = om.precompiled_driver_groups([
        {"name": "a", "kernel": GENERIC, "os_tag": "ubuntu22.04", "driver": True},
        {"name": "b", "kernel": GENERIC, "os_tag": "ubuntu22.04", "driver": False},
        {"name": "spark", "kernel": SPARK, "os_tag": "ubuntu22.04", "driver": False},
        {"name": "nfd-missing", "kernel": None, "os_tag": "ubuntu22.04", "driver": True},
    ])
    assert [(g["daemonset"], g["driver_nodes"], g["other_nodes"], g["churns"]) for g in groups] == [
        ("nvidia-driver-daemonset-5.15.0-122-generic-ubuntu22.04", ["a"], ["b"], False),
        ("nvidia-driver-daemonset-6.17.0-1014-nvidia-ubuntu22.04", [], ["spark"], True),
    ]


def test_the_same_kernel_on_another_os_is_a_daemonset_of_its_own():
    groups = om.precompiled_driver_groups([
        {"name": "a", "kernel": GENERIC, "os_tag": "ubuntu22.04", "driver": True},
        {"name": "b", "kernel": GENERIC, "os_tag": "ubuntu24.04", "driver": False}])
    assert [(g["os_tag"], g["churns"]) for g in groups] == [("ubuntu22.04", False), ("ubuntu24.04", True)]


def test_the_warning_names_the_node_its_kernel_the_daemonset_and_the_way_out():
    warnings = ov.precompiled_churn_warnings(PRECOMPILED, FLEET)
    assert len(warnings) == 1, warnings
    text = warnings[0]
    for part in ("gpu-spark-1", SPARK, "nvidia-driver-daemonset-6.17.0-1014-nvidia-ubuntu22.04",
                 "never stops reconciling", "driver.usePrecompiled off", "cleanupStalePrecompiledDaemonsets"):
        assert part in text, (part, text)
    assert "gpu-container-1" not in text


def test_no_warning_where_a_driver_node_shares_the_kernel_or_precompiled_is_off():
    shared = FLEET + [{"name": "gpu-spark-2", "workload_config": "container", "os_tag": "ubuntu22.04",
                       "kernel": SPARK}]
    assert ov.precompiled_churn_warnings(PRECOMPILED, shared) == []
    assert ov.precompiled_churn_warnings(dict(PRECOMPILED, driver_use_precompiled=False), FLEET) == []
    assert ov.precompiled_churn_warnings(dict(PRECOMPILED, driver_enabled=False), FLEET) == []


def test_vm_nodes_run_no_driver_container_and_count_as_such():
    nodes = [dict(FLEET[0]), {"name": "gpu-passthrough-1", "workload_config": "vm-passthrough",
                              "os_tag": "ubuntu22.04", "kernel": "6.8.0-45-generic"}]
    sandbox = {"enabled": True, "default_workload": "container"}
    warnings = ov.precompiled_churn_warnings(dict(PRECOMPILED, sandbox_workloads=sandbox), nodes)
    assert len(warnings) == 1 and "gpu-passthrough-1" in warnings[0], warnings
    # With sandbox workloads off the operator runs every node as container: its driver runs there.
    assert ov.precompiled_churn_warnings(PRECOMPILED, [dict(n, workload_config=None) for n in nodes]) == []


def test_an_unknown_kernel_is_said_and_site_wide_kernels_may_cover_a_driver_node_without_one():
    no_kernel = [dict(FLEET[0], kernel=None), FLEET[2]]
    # The driver node gives no kernel; the site-wide list says it may run the Spark's.
    assert ov.precompiled_churn_warnings(PRECOMPILED, no_kernel, driver_kernels=[SPARK]) == []
    assert len(ov.precompiled_churn_warnings(PRECOMPILED, no_kernel, driver_kernels=[GENERIC])) == 1
    unknown = ov.precompiled_churn_warnings(PRECOMPILED, [FLEET[0], dict(FLEET[2], kernel=None)])
    assert len(unknown) == 1 and "gpu-spark-1" in unknown[0] and "gives no kernel" in unknown[0], unknown


def _module(capsys, monkeypatch, **args):
    # A module's warnings are process-wide in ansible-core: each run here starts with none.
    monkeypatch.setattr(module_warnings, "_global_warnings", {})
    return run_chart_module(capsys, **args)


def test_the_module_warns_and_still_renders(capsys, monkeypatch):
    rc, result = _module(capsys, monkeypatch, driver_use_precompiled=True, extra_values={"driver": {"version": "580"}},
                         gpu_nodes=FLEET)
    assert rc == 0, result
    assert result["manifest"]["kind"] == "HelmChart"
    # ansible-core 2.20 hands warnings over as summaries: {"event": {"msg": ...}}.
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", ())]
    assert any("gpu-spark-1" in w and "never stops reconciling" in w for w in warnings), result
    rc, result = _module(capsys, monkeypatch, gpu_nodes=FLEET)
    # Only v26.3.2's known issue (test_chart_versions) is left.
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", ())]
    assert rc == 0 and [w for w in warnings if "known issue" not in w] == [], result
