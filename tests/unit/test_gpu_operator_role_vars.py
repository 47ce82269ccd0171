"""The gpu_operator role's own decisions in roles/gpu_operator/vars/main.yml, templated by
ansible's Templar as a play would: when step 5 ends with the driver upgrade wait."""
import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "roles", "gpu_operator", "vars", "main.yml"), encoding="utf-8") as _handle:
    ROLE_VARS = yaml.safe_load(_handle)


def templated(name, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(ROLE_VARS[name]))


def chart(kind="patch", driver_restart=True, values=None):
    """What gpu_operator_chart registers (its upgrade and values)."""
    return {"changed": False, "upgrade": {"kind": kind, "driver_restart": driver_restart, "from": "v26.3.2",
                                          "to": "v26.3.3"}, "values": values or {}}


@pytest.mark.parametrize("registered, waits", [
    (chart(), True),
    (chart(values={"driver": {"version": "580.126.20", "upgradePolicy": {"maxParallelUpgrades": 1}}}), True),
    (chart(kind="line"), True),
    # Nothing the controller restarts, or nothing installed before.
    (chart(driver_restart=False), False),
    (chart(kind="install", driver_restart=False), False),
    # The controller does not run: no containerized driver, autoUpgrade off, sandbox workloads on.
    (chart(values={"driver": {"enabled": False}}), False),
    (chart(values={"driver": {"upgradePolicy": {"autoUpgrade": False}}}), False),
    (chart(values={"sandboxWorkloads": {"enabled": True}}), False),
    # validate.yml skipped (a rollback): its register holds no upgrade.
    ({"changed": False, "skipped": True}, False),
])
def test_the_driver_upgrade_wait_runs_when_the_change_restarts_the_driver_and_the_controller_runs(registered, waits):
    assert templated("_gpu_operator_driver_upgrade", gpu_operator_chart=registered) == waits


def test_without_a_rendering_there_is_no_driver_upgrade_to_wait_for():
    assert templated("_gpu_operator_driver_upgrade") is False


@pytest.mark.parametrize("registered, upgrading", [
    (chart(kind="patch"), True),
    (chart(kind="values", driver_restart=False), True),
    (chart(kind="install", driver_restart=False), False),
    ({"changed": False, "skipped": True}, False),
])
def test_the_operand_wait_is_given_the_charts_images_on_an_upgrade(registered, upgrading):
    assert templated("_gpu_operator_upgrading", gpu_operator_chart=registered) == upgrading
