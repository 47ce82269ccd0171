"""A site file with a value of the wrong type (issue #38 item 6): every key of the example
site, its value replaced by one of each other type, its name by a number (YAML reads an
unquoted 7 as one), and a fixed-seed sample of two such changes at once. ``make site/render``'s
inventory step (validate, render_problems, render, node_keys) ends each one in a rendered
inventory or in a SiteError whose problems name the changed key or one that holds it, never
in another exception from deep inside (rke2.cni_value's TypeError on ``cni: 7``,
operand_model's AttributeError on a numeric ``gpu_models.<model>.pci_device_name``)."""
import copy
import os
import random
import re

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_inventory as si
from tests.conftest import ROOT
from tests.unit.bad_input import paths

SOURCE = "sites/tirosh-home/site.yml"
with open(os.path.join(ROOT, SOURCE)) as _handle:
    EXAMPLE = yaml.safe_load(_handle)


def _with_optional_keys(site):
    """The example plus keys it leaves out, so that they are changed too."""
    site = copy.deepcopy(site)
    site["rke2"].update(api_vip="192.0.2.10", profile="cis", config_extra={"write-kubeconfig-mode": "0600"})
    site["rke2"]["registries"]["configs"] = {"registry.tirosh-home.example:5000": {
        "auth": {"username": "ops", "password": "{{ vault_registry_password }}"}}}
    site["gpu_operator"].update(driver_use_precompiled=True, driver_kernels=["6.8.0-60-generic"])
    gpu_1, gpu_2, cpu_1 = site["nodes"][1], site["nodes"][2], site["nodes"][5]
    gpu_1.update(node_name="tirosh-gpu-1.lab", kernel="6.8.0-60-generic", interface="ens3", backend="netplan",
                 ansible_host="tirosh-gpu-1.tirosh-home.example")
    gpu_2["gpu"].update(pci_device_name="GA102GL [A10]", isolated=True, operands_disabled=["dcgm-exporter"])
    cpu_1["labels"]["tier"] = "batch"
    cpu_1["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
    return site


SITES = {"example": EXAMPLE, "example-with-optional-keys": _with_optional_keys(EXAMPLE)}
# One value of each type a YAML file gives, and the empty ones.
WRONG_VALUES = (7, 2.5, "x", "", True, None, ["x"], [7], [], {"x": 1}, {})


def _key(path):
    """A path as the site file's messages name it: nodes[1].gpu.count."""
    text = ""
    for part in path:
        text += "[%d]" % part if isinstance(part, int) and not isinstance(part, bool) else ".%s" % (part,)
    return text.lstrip(".")


def _at(site, path):
    for part in path:
        site = site[part]
    return site


def _changes(site):
    """(description, change) for every single change: each value replaced by each wrong
    value, each mapping key renamed to a number."""
    for path in paths(site):
        for value in WRONG_VALUES:
            yield "%s = %r" % (_key(path), value), (path, "value", value)
        if isinstance(_at(site, path[:-1]), dict):
            yield "%s renamed to 7" % _key(path), (path, "key", 7)


def _apply(site, changes):
    """The site with ``changes`` made; the keys they touch (as the messages name them)."""
    site, touched = copy.deepcopy(site), []
    for path, kind, value in changes:
        try:
            parent = _at(site, path[:-1])
            _at(parent, path[-1:])
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced what held this key
        if kind == "key":
            parent[value] = parent.pop(path[-1])
            path = path[:-1] + (str(value),)  # a key, not an index: gpu_models.7
        else:
            parent[path[-1]] = copy.deepcopy(value)
        touched.append(path)
    return site, touched


def _names_a_touched_key(problem, touched):
    # The key of the change, or of a mapping or list holding it, starts the problem or is named in it (a
    # vm-passthrough host refused when gpu_operator.sandbox_workloads.enabled is not true).
    for path in touched:
        for depth in range(len(path), 0, -1):
            if re.search(r"(^|[ (])" + re.escape(_key(path[:depth])) + r"($|[:. \[)])", problem):
                return True
    return False


def render_site(site, touched):
    """What make site/render's inventory step does with a site file (site_inventory with
    complete: true): rendered files, or SiteError naming a touched key."""
    try:
        si.validate(site, SOURCE)
        problems = si.render_problems(site)
        if problems:
            raise si.SiteError(SOURCE, problems)
    except si.SiteError as exc:
        assert str(exc).startswith(SOURCE + ": ") and "\n" not in str(exc), str(exc)
        assert any(_names_a_touched_key(p, touched) for p in exc.problems), exc.problems
        return None
    files = si.render(site, SOURCE, yaml.safe_dump)
    assert sorted(files) == [si.GROUP_VARS_FILE, si.HOSTS_FILE]
    hosts = yaml.safe_load(files[si.HOSTS_FILE])["all"]["children"]
    assert set(si.node_keys(site)) == set().union(*(group["hosts"] for group in hosts.values()))
    return files


@pytest.mark.parametrize("name", sorted(SITES))
def test_the_sites_the_fuzz_starts_from_render(name):
    assert render_site(copy.deepcopy(SITES[name]), [])


@pytest.mark.parametrize("name", sorted(SITES))
def test_each_key_of_another_type_renders_or_is_refused_by_name(name):
    for description, change in _changes(SITES[name]):
        site, touched = _apply(SITES[name], [change])
        try:
            render_site(site, touched)
        except Exception as exc:  # pylint: disable=broad-except
            raise AssertionError("%s: %s: %r" % (name, description, exc)) from exc


@pytest.mark.parametrize("name", sorted(SITES))
def test_two_keys_of_another_type_render_or_are_refused_by_name(name):
    changes = list(_changes(SITES[name]))
    rng = random.Random(38)  # fixed: the same pairs on every run, so a failure reproduces
    for _pair in range(300):
        pair = rng.sample(changes, 2)
        site, touched = _apply(SITES[name], [change for _description, change in pair])
        try:
            render_site(site, touched)
        except Exception as exc:  # pylint: disable=broad-except
            raise AssertionError("%s: %s: %r" % (name, " and ".join(d for d, _c in pair), exc)) from exc


@pytest.mark.parametrize("change, problem", [
    ((("rke2", "cni"), "value", 7), "rke2.cni must be a CNI name or a list [multus, <cni>], got 7"),
    ((("rke2", "cni"), "value", {"x": 1}), "rke2.cni must be a CNI name or a list [multus, <cni>], got {'x': 1}"),
    ((("gpu_models", "A10", "pci_device_name"), "value", 7), "gpu_models.A10.pci_device_name: must be a string, got 7"),
    ((("gpu_models", "A10"), "key", 7), "gpu_models.7: a model name must be a string"),
])
def test_the_wrong_types_that_crashed_are_refused_by_key(change, problem):
    site, _touched = _apply(EXAMPLE, [change])
    with pytest.raises(si.SiteError) as caught:
        si.validate(site, SOURCE)
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems
