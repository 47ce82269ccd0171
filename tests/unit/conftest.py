"""Unit-test isolation: Ansible keeps module warnings and deprecations in process-wide
dicts that deduplicate, so a warning one test's module raised would hide the same
warning from the next test's module run."""

import pytest
from ansible.module_utils.common import warnings as ansible_warnings


@pytest.fixture(autouse=True)
def fresh_ansible_warnings():
    ansible_warnings._global_warnings.clear()  # pylint: disable=protected-access
    ansible_warnings._global_deprecations.clear()  # pylint: disable=protected-access
    yield
