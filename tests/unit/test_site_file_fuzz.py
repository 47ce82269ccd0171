"""A site file with a value of the wrong type (issue #38 item 6): a deterministic fuzz of every
site file under sites/, through everything ``make site/render`` runs on it.

Each site file, and the same file with the keys it leaves out filled in, is changed at every
key path: the value replaced by one of each type a YAML file gives (null, integer, float,
boolean, string, list, mapping, the empty ones, lists and mappings holding the wrong types),
the key renamed to a number (YAML reads an unquoted 7 as one), the key or list item deleted,
an unknown key added beside it; then a fixed-seed sample of two such changes at once.

Each mutant goes through the entry points ``make site/render`` reaches, in its order: the
site_inventory module's validate and render_problems (complete: true) and render, then
playbooks/site_render.yml's modules (gpu_operator_chart, gpu_node_labels step validate,
kubevirt_gpu_devices apply never: their main() in this process, arguments checked by their
argument spec as Ansible checks them) and filters (rke2_config, rke2_kube_vip_manifest,
rke2_helm_chart_config_files, gpu_label_plan), their inputs built from the rendered
inventory as the roles' defaults and tasks build them.

The rule: a mutant renders, or the site file's check refuses it (SiteError, one line) with a
problem that names the changed key, a key holding it or one under it, as the site file spells
keys (``nodes[1].gpu.count``, ``rke2.registries.mirrors."docker.io".endpoint``). A stage after
the check may refuse a value of the site file's own shape (a key deleted, a string for a
string) on its merits, in its own words (kube-vip without an interface); a value of another
shape it may refuse only by naming its key, and gpu_operator.extra_values' chart values by
their key in the chart. Any other end fails the test, which lists each mutant with what
happened: an argument spec's ``argument 'driver_enabled' is of type int``, a filter's
``rke2_profile 7``, or an exception (TypeError, AttributeError, KeyError, ...) with the last
frame of its traceback."""
import contextlib
import copy
import glob
import io
import json
import os
import random
import re
import traceback

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.module_utils.testing import patch_module_args
from ansible.plugins.filter.core import to_nice_yaml

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.filter import site_render as site_render_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_inventory as si
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_node_labels
from ansible_collections.gpuplatform.rke2.plugins.modules import gpu_operator_chart
from ansible_collections.gpuplatform.rke2.plugins.modules import kubevirt_gpu_devices
from tests.conftest import ROOT
from tests.unit.bad_input import paths


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


SITE_FILES = dict((os.path.basename(os.path.dirname(path)), _load(path))
                  for path in sorted(glob.glob(os.path.join(ROOT, "sites", "*", "site.yml"))))
GPU_OPERATOR_DEFAULTS = _load(os.path.join(ROOT, "roles", "gpu_operator", "defaults", "main.yml"))
GPU_NODE_LABELS_DEFAULTS = _load(os.path.join(ROOT, "roles", "gpu_node_labels", "defaults", "main.yml"))
RKE2_DEFAULTS = _load(os.path.join(ROOT, "roles", "rke2", "defaults", "main.yml"))
RKE2_VARS = _load(os.path.join(ROOT, "roles", "rke2", "vars", "main.yml"))


def _with_optional_keys(site):
    """The site plus the keys it leaves out (docs/rke2.md, the gpu_operator role's defaults), so
    that they are changed too."""
    site = copy.deepcopy(site)
    site["ansible"]["python_interpreter"] = "/usr/bin/python3"
    # With a VIP the nodes join through it: rke2.api_address follows it (the plain site file changes api_address).
    del site["rke2"]["api_address"]
    site["rke2"].update(api_vip="192.0.2.10", profile="cis", config_extra={"kubelet-arg": ["max-pods=200"]},
                        chart_values={"rke2-canal": {"flannel": {"backend": "vxlan"}}})
    site["rke2"]["etcd_snapshots"] = {
        "schedule_cron": "0 */6 * * *", "retention": 10, "compress": True,
        "s3": {"enabled": True, "endpoint": "minio.tirosh-home.example:9000", "bucket": "etcd-snapshots",
               "folder": "tirosh-home", "region": "eu-west-1", "bucket_lookup_type": "path", "retention": 14,
               "timeout": "2m", "proxy": "none", "endpoint_ca": "/etc/ssl/certs/minio-ca.pem",
               "skip_ssl_verify": False, "insecure": False, "access_key": "{{ vault_etcd_s3_access_key }}",
               "secret_key": "{{ vault_etcd_s3_secret_key }}", "session_token": "{{ vault_etcd_s3_session_token }}"}}
    site["rke2"]["registries"]["configs"] = {"registry.tirosh-home.example:5000": {
        "auth": {"username": "ops", "password": "{{ vault_registry_password }}"}}}
    site["gpu_operator"].update(
        version="v26.3.2", driver_enabled=True, driver_use_precompiled=False, driver_kernels=["6.8.0-60-generic"],
        driver_os_tags=["ubuntu24.04"], toolkit_enabled=True, cdi_enabled=True, nri_plugin_enabled=False,
        time_slicing={"replicas": 4, "rename_by_default": False, "fail_requests_greater_than_one": False,
                      "resource": "nvidia.com/gpu"},
        mig_strategy="single", failure_policy="abort", extra_values={"dcgmExporter": {"enabled": True}},
        name="gpu-operator", namespace="gpu-operator", image_registry="registry.tirosh-home.example:5000",
        argocd_namespace="argocd", argocd_project="default")
    nodes = dict((host["name"], host) for host in site["nodes"])
    gpu_1, gpu_2 = nodes["tirosh-gpu-1"], nodes["tirosh-gpu-2"]
    gpu_1.update(node_name="tirosh-gpu-1.lab", kernel="6.8.0-60-generic", interface="ens3", backend="netplan",
                 ansible_host="tirosh-gpu-1.tirosh-home.example")
    gpu_2["gpu"].update(pci_device_name="GA102GL [A10]", isolated=True, operands_disabled=["vfio-manager"])
    cpu_1 = nodes["tirosh-cpu-1"]
    cpu_1["labels"]["tier"] = "batch"
    cpu_1["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
    return site


BASES = {}
for _name, _site in SITE_FILES.items():
    BASES[_name] = _site
    if _name == "tirosh-home":  # the optional keys above are written for its hosts and models
        BASES[_name + "+optional-keys"] = _with_optional_keys(_site)

# One value of each type a YAML file gives, the empty ones, and lists and mappings holding the wrong types.
WRONG_VALUES = (None, 7, -1, 2.5, True, False, "x", "", [], {}, ["x"], [7], [None], [[]], [{"x": 1}],
                {"x": 1}, {"x": None}, {7: "x"})
UNKNOWN_KEY = "fuzz_unknown_key"


# ---------------------------------------------------------------- key paths as the site file's messages name them

def _key(path):
    """``nodes[1].gpu.count``; a mapping key holding a dot, a colon or a space quoted, as the registry names
    of ``rke2.registries.configs."registry.example:5000".auth`` are."""
    text = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            text += "[%d]" % part
        elif re.search(r"[.: ]", str(part)):
            text += '."%s"' % part
        else:
            text += ".%s" % (part,)
    return text.lstrip(".")


def _leading_key(problem):
    """The key a problem starts with: ``nodes[1].gpu.count`` of ``nodes[1].gpu.count: must be ...``."""
    match = re.match(r'((?:"[^"]*"|[^\s:"])+)', problem)
    return match.group(1) if match else ""


def _related(named, changed):
    """The key named is the changed key, one holding it or one under it."""
    return (named == changed or changed.startswith(named + ".") or changed.startswith(named + "[")
            or named.startswith(changed + ".") or named.startswith(changed + "["))


_CHART_VALUES_REFUSAL = re.compile(r"GPU Operator values refused: |gpu_label_plan: values\.")


def _names_a_changed_key(problem, changed_paths, checker=True):
    """``problem`` names a changed key, a key holding it or one under it. ``checker``: a problem of the site
    file's check, which starts with the key it is about; a refusal of a later stage must name the changed key
    (or one under it) in its text."""
    # A name quoted that needs no quotes is the same key: rke2.registries.mirrors."docker.io" needs them.
    problem = re.sub(r'\."([^".: ]*)"', r".\1", problem)
    for path in changed_paths:
        changed = _key(path)
        if re.search(r"(^|[\s(])" + re.escape(changed) + r"($|[\s:.\[),;])", problem):
            return True
        if path[:2] == ("gpu_operator", "extra_values"):
            # Chart values, which gpu_operator_chart checks against the chart's own and names by their key there
            # (any key, when the whole of extra_values was changed).
            if len(path) == 2 and _CHART_VALUES_REFUSAL.match(problem):
                return True
            if len(path) > 2 and re.search(r"(^|[\s(.])" + re.escape(_key(path[2:])) + r"($|[\s:.\[),;])", problem):
                return True
        if not checker:
            continue
        if _related(_leading_key(problem), changed):
            return True
        # An enclosing key named in the text: a host's model that gpu_models no longer has.
        for depth in range(1, len(path)):
            if re.search(r"(^|[\s(])" + re.escape(_key(path[:depth])) + r"($|[\s:),;])", problem):
                return True
    return False


# ---------------------------------------------------------------- the mutants

def _at(site, path):
    for part in path:
        site = site[part]
    return site


def _changes(site):
    """(description, change) for every single change of ``site``."""
    for path in paths(site):
        parent = _at(site, path[:-1])
        for value in WRONG_VALUES:
            yield "%s = %r" % (_key(path), value), (path, "value", value)
        yield "%s deleted" % _key(path), (path, "delete", None)
        if isinstance(parent, dict):
            yield "%s renamed to 7" % _key(path), (path, "rename", 7)
    for path in [()] + [p for p in paths(site) if isinstance(_at(site, p), dict)]:
        yield "%s added" % _key(path + (UNKNOWN_KEY,)), (path + (UNKNOWN_KEY,), "add", "x")


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "float", str: "str", list: "list", dict: "dict"}.get(type(value), repr(type(value)))


def _fits(value, example):
    """``value`` has the shape of the site file's own ``example``: the same type, a list of items of the types
    its items have, a mapping of keys it has with values of their shape."""
    if _type_name(value) != _type_name(example):
        return False
    if isinstance(value, list):
        return all(any(_fits(item, known) for known in example) for item in value)
    if isinstance(value, dict):
        return all(key in example and _fits(item, example[key]) for key, item in value.items())
    return True


def _keeps_the_shape(path, value, example):
    """A change of the value at ``path`` keeps the site file's shape: null is YAML's "not given" (but not under
    gpu_operator, whose settings reach the role as given, null included), or a value of the example's shape."""
    return (value is None and path[0] != "gpu_operator") or _fits(value, example)


def _list_item(path):
    return isinstance(path[-1], int) and not isinstance(path[-1], bool)


def _apply(site, changes):
    """(the site with ``changes`` made, the key paths they touch, whether one of the changes keeps the shape of
    the site file: a key deleted, a value of the type it had). A change of another shape alone is the single
    changes' test; a refusal of two changes cannot say which one it is about."""
    site, touched, fits = copy.deepcopy(site), [], False

    # A list item deleted last, the highest index first: the other changes' paths still point at what they change.
    def order(change):
        deletes_an_item = _list_item(change[0]) and change[1] == "delete"
        return (deletes_an_item, -change[0][-1] if deletes_an_item else 0)

    for path, kind, value in sorted(changes, key=order):
        try:
            parent = _at(site, path[:-1])
            if kind != "add":
                _at(parent, path[-1:])
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced what held this key
        if not isinstance(parent, (dict, list)) or (kind in ("add", "rename") and not isinstance(parent, dict)):
            continue  # ... with a string, which has items too
        if kind == "add":
            parent[path[-1]] = value
        elif kind == "delete":
            fits = True
            del parent[path[-1]]
            if _list_item(path):  # the items after it move up: so do the keys of the changes made to them
                depth = len(path) - 1
                touched = [t[:depth] + (t[depth] - 1,) + t[depth + 1:]
                           if t[:depth] == path[:-1] and len(t) > depth and t[depth] > path[-1] else t
                           for t in touched]
        elif kind == "rename":
            parent[value] = parent.pop(path[-1])
            touched.append(path[:-1] + (str(value),))  # a key, not an index: gpu_models.7
        else:
            fits = fits or _keeps_the_shape(path, value, parent[path[-1]])
            parent[path[-1]] = copy.deepcopy(value)
        touched.append(path)
    return site, touched, fits


# ---------------------------------------------------------------- make site/render, stage by stage

SOURCE = "sites/%s/site.yml"


class Refused(Exception):
    """A stage refused the site cleanly (a module's fail_json, a filter's AnsibleFilterError)."""

    def __init__(self, stage, message):
        super(Refused, self).__init__("%s: %s" % (stage, message))
        self.stage, self.message = stage, message


_MODULE_RESULTS = {}


def _module(module, args):
    """The result of a module's main() with ``args``, as Ansible runs it (arguments checked by its argument
    spec), or Refused with its message; the same arguments give the same result (Ansible hands them on as
    JSON), so each is run once."""
    key = (module.__name__, json.dumps(args, default=repr))
    if key not in _MODULE_RESULTS:
        out = io.StringIO()
        with patch_module_args(copy.deepcopy(args)), contextlib.redirect_stdout(out):
            try:
                module.main()
            except SystemExit as exc:
                _MODULE_RESULTS[key] = (exc.code, json.loads(out.getvalue()))
    rc, result = _MODULE_RESULTS[key]
    if rc != 0:
        raise Refused(module.__name__.rsplit(".", 1)[-1], result.get("msg"))
    return result


_FILTER_RESULTS = {}


def _filter(name, function, *args, **kwargs):
    """A filter's result, as the task that calls it gets it; the same arguments give the same result (a filter
    is a pure function), so each is computed once: thousands of mutants differ from the site file in one key."""
    key = (name, repr(args), repr(sorted(kwargs.items())))
    if key not in _FILTER_RESULTS:
        _FILTER_RESULTS[key] = _filter_once(name, function, *args, **kwargs)
    return _FILTER_RESULTS[key]


def _filter_once(name, function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except AnsibleFilterError as exc:
        # A filter turns a TypeError (or KeyError) from deep inside into a message too ("argument of type 'int'
        # is not iterable"): that is a traceback all the same, reported where it was raised.
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, Exception) and not isinstance(cause, ValueError):
            # pylint infers the class of __cause__, not the instance the isinstance above checked.
            raise cause  # pylint: disable=raising-non-exception
        raise Refused(name, str(exc))


# libyaml where PyYAML has it: the same data, a tenth of the time.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _dump(data):
    return yaml.dump(data, Dumper=_DUMPER, default_flow_style=False, sort_keys=False)


def _inventory(files):
    """(group_vars, hostvars, groups) as Ansible reads the rendered inventory: group_vars/all.yml under each
    host's own variables."""
    hosts = yaml.load(files[si.HOSTS_FILE].split("---\n", 1)[1], Loader=_LOADER)["all"]["children"]
    group_vars = yaml.load(files[si.GROUP_VARS_FILE].split("---\n", 1)[1], Loader=_LOADER)
    groups = dict((group, list((members or {}).get("hosts") or {})) for group, members in hosts.items())
    hostvars = {}
    for group, members in hosts.items():
        for host, host_vars in ((members or {}).get("hosts") or {}).items():
            hostvars.setdefault(host, dict(group_vars)).update(host_vars or {})
    groups["all"] = list(hostvars)
    return group_vars, hostvars, groups


def _literal(defaults):
    """A role's defaults that are no template (the templated ones are computed below, as their Jinja says)."""
    return dict((k, v) for k, v in defaults.items() if not (isinstance(v, str) and "{{" in v))


def _gpu_operator(localhost, hostvars, groups):
    """roles/gpu_operator/tasks/validate.yml: the gpu_operator_chart task's arguments."""
    gv = dict(_literal(GPU_OPERATOR_DEFAULTS), **localhost)
    chart_version = gv.get("gpu_operator_chart_version", gv["gpu_operator_version"])
    gv.setdefault("gpu_operator_image_registry", localhost.get("rke2_system_default_registry") or None)
    nodes = [{"name": host, "workload_config": hostvars[host].get("gpu_workload_config"),
              "os_tag": hostvars[host].get("gpu_os_tag"), "kernel": hostvars[host].get("gpu_kernel_version"),
              "arch": hostvars[host].get("rke2_arch"),
              "operands_disabled": hostvars[host].get("gpu_operands_disabled", [])}
             for host in groups.get(gv["gpu_operator_gpu_nodes_group"], [])]
    args = dict(
        name=gv["gpu_operator_name"], chart_version=chart_version, chart_repo=gv["gpu_operator_chart_repo"],
        chart_archive=gv["gpu_operator_chart_archive"], failure_policy=gv["gpu_operator_failure_policy"],
        chart_values_reference=os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v%s-values.yaml"
                                            % re.sub("^v", "", str(chart_version))),
        gpu_nodes=nodes, rke2_version=localhost.get("rke2_version"), rke2_image_lists=[],
        cluster_architectures=sorted(set(hostvars[h]["rke2_arch"] for h in groups["all"]
                                         if "rke2_arch" in hostvars[h])))
    for option in ("namespace", "driver_enabled", "driver_use_precompiled", "toolkit_enabled", "cdi_enabled",
                   "nri_plugin_enabled", "sandbox_workloads", "vgpu_manager", "time_slicing", "mig_strategy",
                   "image_registry", "extra_values", "driver_os_tags", "driver_kernels", "argocd_namespace",
                   "argocd_project"):
        args[option] = gv["gpu_operator_" + option]
    return _module(gpu_operator_chart, args), gv


def _jinja_attribute(value, name):
    """``value.name | default(none)`` in Jinja: a mapping's key, else undefined."""
    return value.get(name) if isinstance(value, dict) else None


def _jinja_int(value):
    """``value | int`` in Jinja: the whole number, 0 when it is none."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _jinja_bool(value):
    """``value | bool`` in Ansible: true, yes, on, 1 (and their strings) are true, everything else false."""
    return boolean(value, strict=False)


def _gpu_node_labels(operator_vars, hostvars, groups):
    """roles/gpu_node_labels/tasks/validate.yml and kubevirt_render.yml."""
    lv = dict(_literal(GPU_NODE_LABELS_DEFAULTS), **operator_vars)
    sandbox = operator_vars["gpu_operator_sandbox_workloads"]
    settings = [{"name": hostvars[h].get("k8s_node_name") or h, "host": h,
                 "workload_config": hostvars[h].get("gpu_workload_config"),
                 "operands_disabled": hostvars[h].get("gpu_operands_disabled") or [],
                 "isolated": hostvars[h].get("gpu_node_isolated", False) in (True, "true", "yes", "on", "1", 1),
                 "vgpu_config": hostvars[h].get("gpu_vgpu_config")}
                for h in groups.get(lv["gpu_node_labels_group"], [])]
    args = dict(step="validate", nodes=settings, sandbox_workloads_enabled=_jinja_attribute(sandbox, "enabled"),
                sandbox_off_action=lv["gpu_node_labels_sandbox_off_action"])
    if _jinja_attribute(sandbox, "default_workload"):
        args["default_workload"] = _jinja_attribute(sandbox, "default_workload")
    validated = _module(gpu_node_labels, args)
    kubevirt = _module(kubevirt_gpu_devices, dict(
        gpu_models=operator_vars.get("gpu_models", {}), apply="never",
        adopt_existing=lv["gpu_node_labels_adopt_existing"], example_vmi_image=lv["gpu_node_labels_example_vmi_image"],
        nodes=[{"name": hostvars[h].get("k8s_node_name") or h, "host": h,
                "workload_config": hostvars[h].get("gpu_workload_config"),
                "vgpu_config": hostvars[h].get("gpu_vgpu_config"), "gpu_model": hostvars[h].get("gpu_model")}
               for h in groups.get(lv["gpu_node_labels_group"], [])]))
    files = {}
    if kubevirt["rendered"]["example_vmis"]:
        files["permitted-host-devices.yaml"] = _filter("to_nice_yaml", to_nice_yaml,
                                                       kubevirt["rendered"]["permitted_host_devices"], indent=2)
    for vmi in kubevirt["rendered"]["example_vmis"]:
        files[vmi["metadata"]["name"] + ".yaml"] = (vmi["spec"]["domain"]["devices"]["gpus"][0]["deviceName"]
                                                    + _filter("to_nice_yaml", to_nice_yaml, vmi, indent=2))
    return validated, settings, files


def _rke2_host(host, hostvars, groups, registries, etcd_s3):
    """roles/rke2/tasks/render.yml (config_content.yml) on ``host``: its files; ``registries`` and ``etcd_s3`` as
    playbooks/site_render.yml hands them to the role."""
    hv = dict(_literal(RKE2_DEFAULTS), **hostvars[host])
    servers = groups.get("rke2_servers", [])
    role = "server" if host in servers else "agent"
    api_vip = hv["rke2_api_vip"]
    first_server = hostvars[servers[0]].get("ansible_host", servers[0])
    api_address = hv.get("rke2_api_address") or (api_vip if len(api_vip) > 0 else first_server)
    first = host == servers[0]
    node_ip = hv["host_network_address"].split("/")[0] if "host_network_address" in hv else ""
    config = _filter("rke2_config", rke2_filters.rke2_config, role, node_name=hv.get("k8s_node_name", host),
                     join_address="" if first else api_address,
                     token_file="" if first else RKE2_VARS["_rke2_token_file"].replace(
                         "{{ _rke2_config_dir }}", RKE2_VARS["_rke2_config_dir"]),
                     agent_token_file="", node_ip=node_ip, node_labels=hv["rke2_node_labels"],
                     node_taints=hv["rke2_node_taints"],
                     tls_san=[api_address] + ([api_vip] if len(api_vip) > 0 else []) + hv["rke2_tls_san"],
                     cni=hv["rke2_cni"], system_default_registry=hv["rke2_system_default_registry"],
                     profile=hv["rke2_profile"], selinux=False,
                     etcd_snapshots={"schedule_cron": hv["rke2_etcd_snapshot_schedule_cron"],
                                     "retention": _jinja_int(hv["rke2_etcd_snapshot_retention"]),
                                     "compress": _jinja_bool(hv["rke2_etcd_snapshot_compress"]), "s3": etcd_s3},
                     extra=hv["rke2_config_extra"])
    files = {"config.yaml": _filter("to_nice_yaml", to_nice_yaml, config, indent=2, sort_keys=False)}
    if len(registries) > 0:
        files["registries.yaml"] = _filter("to_nice_yaml", to_nice_yaml, registries, indent=2, sort_keys=False)
    if role == "server" and len(api_vip) > 0:
        taken = [hostvars[h].get("host_network_address", "") for h in servers + groups.get("rke2_agents", [])]
        files["kube-vip.yaml"] = _filter(
            "rke2_kube_vip_manifest", rke2_filters.rke2_kube_vip_manifest, api_vip,
            interface=hv.get("host_network_interface", ""), image=hv["rke2_kube_vip_image"],
            node_address=hv.get("host_network_address", ""), api_address=api_address, taken=[t for t in taken if t],
            host=host, airgapped=hv["rke2_artifact_source"] == "local",
            system_default_registry=hv["rke2_system_default_registry"],
            mirrors=_jinja_attribute(registries, "mirrors") or {})
    if role == "server":
        files.update(_filter("rke2_helm_chart_config_files", rke2_filters.rke2_helm_chart_config_files,
                             hv["rke2_chart_values"], hv["rke2_cni"], canal_interface=hv["rke2_canal_interface"],
                             canal_mtu=hv["rke2_canal_mtu"], header="# header\n"))
    return files


def site_render(site, name):
    """What ``make site/render SITE=<name>`` does with ``site``: {stage: what it rendered}, or SiteError or
    Refused."""
    source = SOURCE % name
    si.validate(site, source)
    problems = si.render_problems(site)
    if problems:
        raise si.SiteError(source, problems)
    files = si.render(site, source, _dump)
    assert sorted(files) == [si.GROUP_VARS_FILE, si.HOSTS_FILE]
    localhost, hostvars, groups = _inventory(files)
    # The label plan points each host at its key in the site file: a host rendered under another name (a name
    # of false becomes "False") would be planned without one.
    assert set(si.node_keys(site)) == set(groups["all"])
    # The site_inventory module's result, as the later plays read it (JSON: what Ansible passes on).
    registries = json.loads(json.dumps((site.get("rke2") or {}).get("registries") or {}, default=str))
    etcd_s3 = json.loads(json.dumps(((site.get("rke2") or {}).get("etcd_snapshots") or {}).get("s3") or {},
                                    default=str))
    site_keys = si.node_keys(site)
    chart, operator_vars = _gpu_operator(localhost, hostvars, groups)
    validated, settings, kubevirt_files = _gpu_node_labels(operator_vars, hostvars, groups)
    rendered = {"inventory": files, "chart": chart["manifest_yaml"], "kubevirt": kubevirt_files}
    for host in groups.get("rke2_servers", []) + groups.get("rke2_agents", []):
        rendered["rke2/hosts/" + host] = _rke2_host(host, hostvars, groups, registries, etcd_s3)
    rendered["labels"] = _filter("gpu_label_plan", site_render_filters.gpu_label_plan, validated["nodes"],
                                 settings=settings, values=chart["values"], site_keys=site_keys, source=source,
                                 site=name)
    return rendered


# ---------------------------------------------------------------- the rule

def _finding(name, description, site, touched, fits):
    """None when the mutant renders or is refused as the rule says; else what went wrong, in one line.
    ``fits``: a change keeps the site file's shape (a key deleted or nulled, a value of its type), so a
    stage after the site file's check may refuse it on its merits, naming its own variable."""
    site_name = name.split("+")[0]
    try:
        site_render(site, site_name)
    except si.SiteError as exc:
        if not (str(exc).startswith(SOURCE % site_name + ": ") and "\n" not in str(exc)):
            return "%s: %s: a refusal of more than one line: %r" % (name, description, str(exc))
        if not any(_names_a_changed_key(p, touched) for p in exc.problems):
            return "%s: %s: refused without naming the key: %s" % (name, description, "; ".join(exc.problems))
        return None
    except Refused as exc:
        if fits or _names_a_changed_key(exc.message, touched, checker=False):
            return None
        return "%s: %s: a value of the wrong type accepted by the site file's check, then refused by %s: %s" % (
            name, description, exc.stage, exc.message)
    except Exception as exc:  # pylint: disable=broad-except
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return "%s: %s: %s: %s at %s:%d in %s" % (
            name, description, type(exc).__name__, exc, os.path.relpath(frame.filename, ROOT), frame.lineno,
            frame.name)
    return None


def _report(findings):
    return "%d mutants end in neither a rendering nor a refusal as the rule says:\n%s" % (
        len(findings), "\n".join(findings[:40]))


@pytest.mark.parametrize("name", sorted(BASES))
def test_the_sites_the_fuzz_starts_from_render(name):
    rendered = site_render(copy.deepcopy(BASES[name]), name.split("+")[0])
    assert rendered["chart"] and rendered["labels"]
    assert all("config.yaml" in files for stage, files in rendered.items() if stage.startswith("rke2/hosts/"))


@pytest.mark.parametrize("name", sorted(BASES))
def test_each_change_renders_or_is_refused_by_its_key(name):
    findings = []
    for description, change in _changes(BASES[name]):
        site, touched, fits = _apply(BASES[name], [change])
        finding = _finding(name, description, site, touched, fits)
        if finding:
            findings.append(finding)
    assert not findings, _report(findings)


PAIRS = 1500


@pytest.mark.parametrize("name", sorted(BASES))
def test_two_changes_render_or_are_refused_by_their_keys(name):
    changes = list(_changes(BASES[name]))
    rng = random.Random(38)  # fixed: the same pairs on every run, so a failure reproduces
    findings = []
    for _pair in range(PAIRS):
        pair = rng.sample(changes, 2)
        site, touched, fits = _apply(BASES[name], [change for _description, change in pair])
        finding = _finding(name, " and ".join(d for d, _c in pair), site, touched, fits)
        if finding:
            findings.append(finding)
    assert not findings, _report(findings)


def test_the_fuzz_covers_every_key_path_with_every_wrong_type():
    for name, site in BASES.items():
        described = set(description for description, _change in _changes(site))
        for path in paths(site):
            for value in WRONG_VALUES:
                assert "%s = %r" % (_key(path), value) in described
        assert len(described) > 1000, (name, len(described))


@pytest.mark.parametrize("change, problem", [
    # The site file's check at 86e9e38^ (the two tracebacks the issue names, rke2.py and operand_model.py).
    ((("rke2", "cni"), "value", 7), "rke2.cni must be a CNI name or a list [multus, <cni>], got 7"),
    ((("rke2", "cni"), "value", {"x": 1}), "rke2.cni must be a CNI name or a list [multus, <cni>], got {'x': 1}"),
    ((("gpu_models", "A10", "pci_device_name"), "value", 7), "gpu_models.A10.pci_device_name: must be a string, got 7"),
    ((("gpu_models", "A10"), "rename", 7), "gpu_models.7: a model name must be a string"),
    # What this fuzz found beyond the inventory: a TypeError in rke2.build_config and rke2_api_vip.problems,
    ((("rke2", "system_default_registry"), "value", 7),
     "rke2.system_default_registry must be a registry host[:port] (a string), got 7"),
    # in Ansible's argument spec (set_fallbacks) under gpu_operator_chart,
    ((("gpu_operator", "vgpu_manager"), "value", 7),
     "gpu_operator.vgpu_manager: must be a mapping of image, repository, version, got 7"),
    ((("gpu_operator", "time_slicing"), "add", 7),
     "gpu_operator.time_slicing: must be a mapping of fail_requests_greater_than_one, rename_by_default, replicas, "
     "resource, got 7"),
    # in the rke2_kube_vip_manifest filter,
    ((("rke2", "registries", "mirrors"), "value", 7),
     "rke2.registries.mirrors: must be a mapping of registry name to its settings, got 7"),
    ((("rke2", "registries", "mirrors", "docker.io", "endpoint"), "value", "x"),
     'rke2.registries.mirrors."docker.io".endpoint: must be a list of strings'),
    # a host rendered as "False",
    ((("nodes", 0, "name"), "value", False), "nodes[0].name: must be a string, got False"),
    ((("nodes", 0, "address"), "value", False), "nodes[0].address: must be a string, got False"),
    # the refusals of gpu_operator_chart's argument spec, in terms of its own options,
    ((("gpu_operator", "sandbox_workloads", "mode"), "value", 7),
     "gpu_operator.sandbox_workloads.mode: 7 is not one of kubevirt, kata"),
    ((("gpu_operator", "sandbox_workloads", "default_workload"), "rename", 7),
     "gpu_operator.sandbox_workloads.7: unknown key (allowed: default_workload, enabled, mode)"),
    ((("gpu_operator", "driver_enabled"), "add", None),
     "gpu_operator.driver_enabled: must be true or false, got null (leave the key out for the default)"),
    ((("gpu_operator", "version"), "add", None), "gpu_operator.version: must be a chart version string like"),
    # and of the rke2 filters, in terms of the role's variables.
    ((("rke2", "profile"), "add", 7), "rke2.profile: 7 is not one of cis, etcd (or empty for none)"),
    ((("rke2", "api_address"), "value", ["x"]), "rke2.api_address: must be a host name or IP address, got ['x']"),
    ((("rke2", "chart_values"), "add", {"x": 1}), "rke2.chart_values.x: RKE2 deploys no chart 'x'"),
    ((("network", "interface"), "value", ["x"]), "network.interface: must be a string, got ['x']"),
    # Values of another type that rendered without a word: rke2_version: false, site_name: false, taints: {}.
    ((("rke2", "version"), "value", False), "rke2.version False is not an RKE2 release version"),
    ((("site",), "value", False), "site: False must be a lower-case DNS label"),
    ((("nodes", 5, "taints"), "add", {}), "nodes[5].taints must be a list of {key, value, effect}"),
    ((("ansible", "become"), "value", "x"), "ansible.become: must be true or false, got 'x'"),
])
def test_the_wrong_types_the_fuzz_found_are_refused_by_key(change, problem):
    site, _touched, _fits = _apply(SITE_FILES["tirosh-home"], [change])
    with pytest.raises(si.SiteError) as caught:
        si.validate(site, SOURCE % "tirosh-home")
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems
