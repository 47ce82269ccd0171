# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a change of the GPU Operator chart one upgrade a site may make? Pure functions over
the running release (its chart version and values, read from helm's record) and the planned
one (what the role renders). docs/upgrades.md says why each rule holds, with its source:

- one chart line at a time: NVIDIA supports an upgrade from a line to the next one (26.3 ->
  26.7), not over a line (25.10 -> 26.7); within a line any patch release may follow another;
- a lower version is not an upgrade: it is the role's rollback (gpu_operator_rollback), which
  delivers the manifest that ran before, values included;
- some changes take two upgrades: switching to the NVIDIADriver CRD (``driver.nvidiaDriverCRD``)
  is done on the operator that manages it, so it is not turned on in the step that moves to
  a new line; the same holds for the DRA stack (``gpuCluster.deployCR``) of v26.7;
- a change of the driver's version, image or driver manager is carried out by the operator's
  upgrade controller node by node (driver.upgradePolicy), so the plan says so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s import helm_release

# Values that must not change in the step that moves to another chart line (see the module doc).
SECOND_STEP_KEYS = ("driver.nvidiaDriverCRD.enabled", "gpuCluster.deployCR")
# Values whose change restarts the driver on every driver node, through the operator's upgrade controller.
DRIVER_KEYS = ("driver.version", "driver.repository", "driver.image", "driver.usePrecompiled",
               "driver.manager.version", "driver.manager.image", "driver.manager.repository")
INSTALL, SAME, PATCH, LINE = "install", "values", "patch", "line"


def _lines():
    return sorted(ov.CHART_LINES)


def kind(running_version, planned_version):
    """install (nothing runs), values (same version), patch (same line), line (next line or
    further), or None for a lower version."""
    if not running_version:
        return INSTALL
    running, planned = ov.parse_chart_version(running_version), ov.parse_chart_version(planned_version)
    if running == planned:
        return SAME
    if planned < running:
        return None
    return PATCH if planned[:2] == running[:2] else LINE


def values_changes(running_values, planned_values):
    """The dotted keys whose value differs, sorted: {"key": [before, after]} (None: unset)."""
    return helm_release.values_changes(running_values, planned_values)


def _value(values, path):
    return ov.lookup(values or {}, path)


def problems(running_version, planned_version, running_values=None, planned_values=None):
    """Why going from the running release to the planned one is not one upgrade; [] when it is."""
    if not running_version:
        return []
    for version, key in ((running_version, "running chart"), (planned_version, "planned chart")):
        if ov.parse_chart_version(version) is None or ov.chart_line(version) is None:
            return ["%s %s is not on a chart line the collection knows (%s)"
                    % (key, version, ", ".join(ov.CHART_LINES[k]["name"] for k in _lines()))]
    step = kind(running_version, planned_version)
    if step is None:
        return ["%s is lower than the running %s: that is a rollback, not an upgrade (gpu_operator_rollback=true "
                "delivers the manifest that ran before, with its values)" % (planned_version, running_version)]
    if step != LINE:
        return []
    lines = _lines()
    running_line = ov.parse_chart_version(running_version)[:2]
    planned_line = ov.parse_chart_version(planned_version)[:2]
    skipped = [ov.CHART_LINES[k]["name"] for k in lines if running_line < k < planned_line]
    found = []
    if skipped:
        plural = "s" if len(skipped) > 1 else ""
        found.append("%s -> %s skips the chart line%s %s: NVIDIA supports one line at a time; upgrade to the "
                     "last %s release first" % (running_version, planned_version, plural, ", ".join(skipped),
                                                skipped[0]))
    for key in SECOND_STEP_KEYS:
        if _value(planned_values, key) is True and _value(running_values, key) is not True:
            found.append("%s: true in the same upgrade as %s -> %s: move to the new line first, then turn it on "
                         "in a second upgrade" % (key, running_version, planned_version))
    return found


def driver_changes(running_values, planned_values, running_defaults=None, planned_defaults=None):
    """The DRIVER_KEYS whose effective value (the chart's values.yaml under the release's values)
    differs: {"key": [before, after]}. Without the charts' defaults a version change counts as
    one (a new chart may bring a new driver default)."""
    before = ov.effective_values(running_defaults or {}, running_values or {})
    after = ov.effective_values(planned_defaults or {}, planned_values or {})
    return dict((key, [_value(before, key), _value(after, key)]) for key in DRIVER_KEYS
                if _value(before, key) != _value(after, key))


def plan(running_version, planned_version, running_values=None, planned_values=None, running_defaults=None,
         planned_defaults=None):
    """What the change is: {"from", "to", "kind", "values_changed", "driver_changed", "driver_restart",
    "problems"}; ``*_defaults``: each chart's values.yaml, when known."""
    step = kind(running_version, planned_version)
    changed = values_changes(running_values, planned_values) if running_version else {}
    driver = driver_changes(running_values, planned_values, running_defaults, planned_defaults) \
        if running_version else {}
    unknown_defaults = running_defaults is None or planned_defaults is None
    return {
        "from": running_version,
        "to": planned_version,
        "kind": step or "downgrade",
        "values_changed": changed,
        "driver_changed": driver,
        # The operator's upgrade controller restarts the driver pod of every driver node, node by node.
        "driver_restart": bool(driver) or (unknown_defaults and step in (PATCH, LINE, None)),
        "problems": problems(running_version, planned_version, running_values, planned_values),
    }
