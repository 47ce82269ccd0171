"""Unit-test isolation for modules run in-process.

Ansible keeps module warnings in process-wide dicts that deduplicate, so a warning one
test's module raised would hide the same warning from the next test's module run. And
once any test imports controller code (a filter plugin's AnsibleFilterError), module_utils
believe they run on the controller and send warnings to the display instead of the
module result; a module under test runs on a target."""

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible.module_utils.common import warnings as ansible_warnings


@pytest.fixture(autouse=True)
def module_side_warnings(monkeypatch):
    monkeypatch.setattr(ansible_internal, "is_controller", False)
    ansible_warnings._global_warnings.clear()  # pylint: disable=protected-access
    ansible_warnings._global_deprecations.clear()  # pylint: disable=protected-access
    yield


@pytest.fixture(autouse=True)
def stopped_start_clock(monkeypatch):
    """A module's elapsed time counts its connect in real time (k8s_wait.start_clock), and unit tests assert
    elapsed times of their simulated clock: on a loaded host the fake connect's real milliseconds showed up
    in them (CI, 2026-12-06: elapsed 0.005 where 0 was simulated)."""
    monkeypatch.setattr(k8s_wait, "start_clock", lambda: 0.0)
