"""Which chart changes are one upgrade (module_utils/gpu/upgrade_path.py): one line at a time,
no downgrade (that is the rollback), two-step switches not in a line change, and what the plan
says about the driver."""
import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils.gpu import upgrade_path as up


@pytest.mark.parametrize("running, planned, kind", [
    (None, "v26.3.2", "install"),
    ("v26.3.2", "v26.3.2", "values"),
    ("v26.3.2", "v26.3.3", "patch"),
    ("v26.3.3", "v26.7.0", "line"),
    ("v26.3.2", "v26.7.0", "line"),      # from an older patch of the line: still the next line
])
def test_the_kind_of_each_allowed_step(running, planned, kind):
    assert up.kind(running, planned) == kind
    assert up.problems(running, planned) == []


def test_a_line_may_not_be_skipped():
    found = up.problems("v25.10.1", "v26.7.0")
    assert found == ["v25.10.1 -> v26.7.0 skips the chart line v26.3: NVIDIA supports one line at a time; upgrade "
                     "to the last v26.3 release first"]
    assert "lines v25.10, v26.3" in up.problems("v25.3.4", "v26.7.0")[0]


def test_a_lower_version_is_the_rollback():
    found = up.problems("v26.7.0", "v26.3.3")
    assert len(found) == 1 and "lower than the running v26.7.0" in found[0] and "gpu_operator_rollback" in found[0]
    assert up.plan("v26.3.3", "v26.3.2")["kind"] == "downgrade"


@pytest.mark.parametrize("key, values", [
    ("driver.nvidiaDriverCRD.enabled", {"driver": {"nvidiaDriverCRD": {"enabled": True}}}),
    ("gpuCluster.deployCR", {"gpuCluster": {"deployCR": True}}),
])
def test_a_second_step_switch_is_not_turned_on_while_changing_line(key, values):
    found = up.problems("v26.3.3", "v26.7.0", {}, values)
    assert len(found) == 1 and found[0].startswith(key + ": true in the same upgrade as v26.3.3 -> v26.7.0")
    # On the new line it is its own upgrade; already on, it may stay on.
    assert up.problems("v26.7.0", "v26.7.0", {}, values) == []
    assert up.problems("v26.3.3", "v26.7.0", values, values) == []


def test_an_unknown_line_is_named():
    assert "running chart v24.9.2 is not on a chart line" in up.problems("v24.9.2", "v26.3.2")[0]
    assert "planned chart nonsense" in up.problems("v26.3.2", "nonsense")[0]


def test_values_changes_are_dotted_keys_with_before_and_after():
    assert up.values_changes({"driver": {"enabled": True, "version": "1"}, "mig": {"strategy": "single"}},
                             {"driver": {"enabled": True, "version": "2"}, "toolkit": {"enabled": False}}) == {
        "driver.version": ["1", "2"], "mig.strategy": ["single", None], "toolkit.enabled": [None, False]}


def test_the_plan_says_when_the_driver_restarts():
    defaults_a = {"driver": {"version": "580.1", "manager": {"version": "v0.9"}}}
    defaults_b = {"driver": {"version": "595.91.07", "manager": {"version": "v0.9"}}}
    # A new chart default moves the driver, though the values did not change.
    moved = up.plan("v26.3.3", "v26.7.0", {}, {}, defaults_a, defaults_b)
    assert moved["driver_changed"] == {"driver.version": ["580.1", "595.91.07"]} and moved["driver_restart"]
    # A site that pins its driver keeps it across the chart change.
    pinned = {"driver": {"version": "580.1"}}
    kept = up.plan("v26.3.3", "v26.7.0", pinned, pinned, defaults_a, defaults_b)
    assert kept["driver_changed"] == {} and not kept["driver_restart"]
    # Without the charts' defaults a version change may move it: said, not hidden.
    assert up.plan("v26.3.2", "v26.3.3")["driver_restart"]
    assert not up.plan("v26.3.2", "v26.3.2", pinned, pinned)["driver_restart"]
    assert up.plan(None, "v26.3.2")["driver_restart"] is False
