# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A site's GPU Operator decisions as chart values for RKE2, the checks that refuse a
bad combination before anything changes, and the HelmChart / Argo CD Application that
carry the values.

Pure: plain dicts in, plain dicts and lists of problems out. Every problem names the
key (chart values key, or the site decision that sets it) so the fix is obvious.
Facts: ``shared/docs/gpu-operator-facts.md`` sections 5 and 6 (chart values per line,
RKE2 specifics); operands and workload configs come from ``operand_model``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import manifest_yaml
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

RKE2_CONTAINERD_SOCKET = "/run/k3s/containerd/containerd.sock"
HELMCHART_NAMESPACE = "kube-system"
CHART_NAME = "gpu-operator"
CHART_REPO = "https://helm.ngc.nvidia.com/nvidia"
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "gpuplatform.rke2")
# What helm-controller's install Job does when it finds the release failed (a helm upgrade that
# failed half-way). helm-controller's default is reinstall (pkg/controllers/chart/chart.go,
# DefaultFailurePolicy), and klipper-helm's entry script then runs `helm uninstall` and installs
# again: every operand DaemonSet, driver and device plugin pod on every GPU node is deleted.
# abort leaves the failed release and everything it runs alone and fails the Job until a person
# acts (a fixed value, or a rollback). The collection renders abort unless the site says otherwise.
FAILURE_POLICIES = ("abort", "reinstall")
DEFAULT_FAILURE_POLICY = "abort"

# Chart lines this collection renders for, with what differs between them (facts 5, 6).
#   cdi_default: chart default of cdi.enabled (false before v25.10)
#   nri:         cdi.nriPluginEnabled exists (from v26.3.0)
#   volume_mounts_recipe: RKE2's v25.3 recipe (device list as volume mounts, runtimeClassName nvidia for GPU pods)
#   sandbox_mode: sandboxWorkloads.mode (kubevirt | kata) is a value of the line
#   versions_known: only the versions of KNOWN_CHART_VERSIONS on this line are rendered (the collection ships
#                   their values.yaml and knows their image defaults and issues); False: any patch release, with
#                   the values.yaml the site gives (chart_values_reference)
#   v26_7: the v26.7 chart: a ClusterPolicy or a GPUCluster (DRA) stack (clusterPolicy.deployCR,
#          gpuCluster.deployCR), the DCGM exporter's ServiceMonitor on by default, and its validations.yaml
#          refusing the NRI plugin without the toolkit and a device plugin config to create without a name or data
#   os_tag_major_only: {os-release ID: first major version} whose driver images the operator tags
#                      <ID><major> without the minor (getGPUNodeOSInfo: v26.3 for Rocky and RHEL 10+, v26.7 for
#                      RHEL, Rocky and Oracle Linux); other OSes keep <ID><VERSION_ID>
CHART_LINES = {
    (25, 3): {"name": "v25.3", "cdi_default": False, "nri": False, "volume_mounts_recipe": True, "sandbox_mode": False,
              "versions_known": False, "v26_7": False, "os_tag_major_only": {}},
    (25, 10): {"name": "v25.10", "cdi_default": True, "nri": False, "volume_mounts_recipe": False,
               "sandbox_mode": False, "versions_known": False, "v26_7": False, "os_tag_major_only": {}},
    (26, 3): {"name": "v26.3", "cdi_default": True, "nri": True, "volume_mounts_recipe": False, "sandbox_mode": True,
              "versions_known": True, "v26_7": False, "os_tag_major_only": {"rocky": 0, "rhel": 10}},
    (26, 7): {"name": "v26.7", "cdi_default": True, "nri": True, "volume_mounts_recipe": False, "sandbox_mode": True,
              "versions_known": True, "v26_7": True, "os_tag_major_only": {"rocky": 0, "rhel": 0, "ol": 0}},
}
DEFAULT_CHART_VERSION = "v26.3.2"
# The chart versions this collection knows: roles/gpu_operator/files holds each one's values.yaml (its own key
# check and image defaults), image_plan.NFD_CHART_VERSIONS its NFD subchart, KNOWN_ISSUES what is wrong with it.
KNOWN_CHART_VERSIONS = ("v26.3.2", "v26.3.3", "v26.7.0")

# What is known to be wrong with a chart version, each with its upstream source; gpu_operator_chart warns once
# per run when a site renders an affected version.
KNOWN_ISSUES = (
    {"versions": ("v26.3.2",), "fixed_in": "v26.3.3", "component": "device plugin v0.19.2",
     "summary": "it injects every InfiniBand device (/dev/infiniband/uverbs*) into every GPU container: device "
                "plugin v0.19.0 turned its MOFED (and GDS, GDRCopy) switches on by default, which breaks RDMA/NCCL "
                "jobs whose RDMA devices another device plugin or DRA driver hands out; device plugin v0.19.3 "
                "reverts the defaults",
     "source": "https://github.com/NVIDIA/k8s-device-plugin/issues/1692 (fix: NVIDIA/k8s-device-plugin#1837, "
               "released in https://github.com/NVIDIA/k8s-device-plugin/releases/tag/v0.19.3)"},
)

# Values keys of one known chart version that another does not have (the v26.7.0 chart's new keys; its
# values.yaml and templates against v26.3.x's; tests/unit checks this against the shipped values files), by
# the versions that have them. ``hostPaths.kubeletRootDir`` and ``operator.metrics`` are read by v26.7.0's
# templates but only shown commented out in its values.yaml.
VERSIONED_KEYS = dict((key, ("v26.7.0",)) for key in (
    "clusterPolicy", "gpuCluster", "draDriver", "operator.env", "operator.nodeSelector",
    "dcgmExporter.serviceMonitor.scrapeTimeout", "hostPaths.kubeletRootDir", "operator.metrics"))
# Keys a chart line's templates no longer read (v26.3.x's templates read them): refused, as setting them
# would change nothing.
IGNORED_KEYS = {
    (26, 7): {
        "operator.initContainer": "v26.7.0's ClusterPolicy template no longer renders it (v26.3.x rendered "
                                  "spec.operator.initContainer, deprecated in the CRD)",
        "cdi.default": "v26.7.0's ClusterPolicy template no longer renders spec.cdi.default (v26.3.x did)",
        "driver.nvidiaDriverCRD.nodeSelector": "v26.7.0's default NVIDIADriver no longer takes it (v26.3.x set "
                                               "its spec.nodeSelector from it)",
    },
}

# The toolkit env of RKE2's v25.3 recipe, and the device plugin's, beside CONTAINERD_SOCKET.
VOLUME_MOUNTS_TOOLKIT_ENV = (
    ("ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "false"),
    ("ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "true"),
)
VOLUME_MOUNTS_DEVICE_PLUGIN_ENV = (("DEVICE_LIST_STRATEGY", "volume-mounts"),)
# The runtime class GPU pods must name on the v25.3 recipe (the operator's operator.runtimeClass).
VOLUME_MOUNTS_RUNTIME_CLASS = "nvidia"

# The pre-CDI recipe that points the toolkit at RKE2's containerd config: it has broken
# clusters after reboot and overridden registries.yaml, and CONTAINERD_RUNTIME_CLASS is
# overwritten by operator.runtimeClass anyway. The RKE2 agent finds and registers the
# nvidia runtime by itself.
OBSOLETE_TOOLKIT_ENV = {
    "CONTAINERD_CONFIG": "RKE2 owns containerd's config (config.toml is regenerated from config.toml.tmpl at every "
                         "start); pointing the toolkit at either has broken clusters after reboot and overridden "
                         "registries.yaml",
    "CONTAINERD_RUNTIME_CLASS": "operator.runtimeClass sets the runtime class; this env is overwritten anyway",
    "CONTAINERD_SET_AS_DEFAULT": "RKE2 registers the nvidia runtime by itself; making it containerd's default "
                                 "runtime sends every pod through it",
}

# Enumerated chart values: key -> allowed values.
ENUMERATED_VALUES = {
    "sandboxWorkloads.defaultWorkload": om.WORKLOAD_CONFIGS,
    "sandboxWorkloads.mode": ("kubevirt", "kata"),
    "mig.strategy": ("none", "single", "mixed"),
    "driver.kernelModuleType": ("auto", "open", "proprietary"),
    "daemonsets.updateStrategy": ("RollingUpdate", "OnDelete"),
}

# Chart keys the chart's templates read that values.yaml only mentions in a comment
# (for example ``#version: ""`` = "defaults to the chart's appVersion"), and the one
# subchart key this collection sets (the NFD image, for mirrors). Anything below these
# paths is accepted by the unknown-key check.
CHART_KEYS_OUTSIDE_VALUES = (
    "operator.version",
    "validator.version",
    "nodeStatusExporter.version",
    "dcgmExporter.config",
    "dcgmExporter.hpcJobMapping",
    "dcgmExporter.podLabelAllowlistRegex",
    "node-feature-discovery.image",
)
# The same, per chart line.
CHART_KEYS_OUTSIDE_VALUES_BY_LINE = {(26, 7): ("hostPaths.kubeletRootDir", "operator.metrics")}

# RKE2 releases whose containerd is 2.1 or later, by Kubernetes minor: the first patch
# release (with rke2r1) that ships it. Every minor from 1.35 on has it; 1.30 and older never.
RKE2_CONTAINERD_21 = {31: 13, 32: 9, 33: 5, 34: 1}
RKE2_CONTAINERD_21_ALL_FROM_MINOR = 35

TIME_SLICING_CONFIG_NAME = "time-slicing-config"
TIME_SLICING_PROFILE = "any"

_RFC1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RKE2_VERSION = re.compile(r"^v?1\.(\d+)\.(\d+)(?:\+rke2r(\d+))?$")


class ValuesError(ValueError):
    """Raised with every problem found, each naming its key."""

    def __init__(self, problems):
        self.problems = list(problems)
        super(ValuesError, self).__init__("; ".join(self.problems))


# ---------------------------------------------------------------- versions

def parse_chart_version(version):
    """``v26.3.2`` -> (26, 3, 2); None when it is not a chart version."""
    match = om.CHART_VERSION_RE.match(str(version or ""))
    if not match:
        return None
    return tuple(int(part) for part in match.groups())


def chart_line(version):
    """The CHART_LINES entry of a chart version, or None for an unsupported line."""
    parsed = parse_chart_version(version)
    return CHART_LINES.get(parsed[:2]) if parsed else None


def canonical_version(version):
    """``26.3.2`` -> ``v26.3.2``: versions as KNOWN_CHART_VERSIONS writes them."""
    return "v" + str(version or "").lstrip("v")


def version_problems(version, key="chart_version"):
    """Why the collection cannot render ``version``: not a chart version, not on a supported line, or not one of
    the KNOWN_CHART_VERSIONS of a line whose versions it tracks; [] when it can. ``key``: the setting named in
    the message (the module's option, or the site file's key)."""
    known = ", ".join(KNOWN_CHART_VERSIONS)
    parsed = parse_chart_version(version)
    if parsed is None:
        return ["%s: %r is not a chart version (expected one of %s)" % (key, version, known)]
    line = CHART_LINES.get(parsed[:2])
    if line is None:
        return ["%s: %s is not on a supported chart line (%s; the versions this collection knows: %s)"
                % (key, version, ", ".join(l["name"] + ".x" for _k, l in sorted(CHART_LINES.items())), known)]
    if line["versions_known"] and canonical_version(version) not in KNOWN_CHART_VERSIONS:
        return ["%s: %s is not a version this collection knows (%s): it ships each one's values.yaml "
                "and knows its images, values keys and issues" % (key, version, known)]
    return []


def known_issue_warnings(version):
    """One warning per KNOWN_ISSUES entry that affects ``version``, naming the version that fixes it and the
    upstream source."""
    return ["GPU Operator %s, known issue of its %s: %s. Fixed in %s (set chart_version: %s). Source: %s"
            % (version, issue["component"], issue["summary"], issue["fixed_in"], issue["fixed_in"], issue["source"])
            for issue in KNOWN_ISSUES if canonical_version(version) in issue["versions"]]


def parse_rke2_version(version):
    """``v1.33.5+rke2r1`` -> (33, 5, 1) (minor, patch, rke2 release); None when unparsable."""
    match = _RKE2_VERSION.match(str(version or "").strip())
    if not match:
        return None
    minor, patch, release = match.groups()
    return int(minor), int(patch), int(release or 1)


def rke2_has_containerd_21(version):
    """Whether an RKE2 release ships containerd 2.1 or later (what NRI needs)."""
    minor, patch, _release = parse_rke2_version(version)
    if minor >= RKE2_CONTAINERD_21_ALL_FROM_MINOR:
        return True
    first = RKE2_CONTAINERD_21.get(minor)
    return first is not None and patch >= first


def is_rfc1123_name(name):
    return bool(name) and len(name) <= 253 and bool(_RFC1123_SUBDOMAIN.match(name))


# ---------------------------------------------------------------- dict helpers

def lookup(mapping, path, default=None):
    """``mapping['a']['b']`` for path ``a.b``; ``default`` when any step is missing."""
    for key in path.split("."):
        if not isinstance(mapping, dict) or key not in mapping:
            return default
        mapping = mapping[key]
    return mapping


def nested(path, value):
    """``{'a': {'b': value}}`` for path ``a.b``."""
    result = value
    for key in reversed(path.split(".")):
        result = {key: result}
    return result


def deep_merge(base, override):
    """``override`` merged into a copy of ``base``: maps merge key by key, anything else
    (lists included) is replaced, as Helm merges values files. A None in ``override``
    is kept: Helm reads it as "remove the chart default"."""
    result = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def effective_values(defaults, values):
    """What the chart's templates see: ``values`` over the chart defaults, where a None
    removes the default (Helm's coalescing)."""
    result = copy.deepcopy(defaults or {})
    for key, value in (values or {}).items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = effective_values(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def env_list(pairs):
    return [{"name": name, "value": value} for name, value in pairs]


def _env_entries(values, path):
    env = lookup(values, path)
    return [e for e in env if isinstance(e, dict)] if isinstance(env, list) else []


# ---------------------------------------------------------------- decisions -> values

def default_decisions():
    """The decisions the role and module start from (chart v26.3.2, RKE2, CDI)."""
    return {
        "chart_version": DEFAULT_CHART_VERSION,
        "namespace": om.DEFAULT_NAMESPACE,
        "driver_enabled": True,
        "driver_use_precompiled": False,
        "toolkit_enabled": True,
        "cdi_enabled": None,  # None: the chart line's default
        "nri_plugin_enabled": False,
        "sandbox_workloads": {"enabled": False, "default_workload": om.CONTAINER, "mode": "kubevirt"},
        "vgpu_manager": None,  # {repository, image, version}
        "time_slicing": None,  # {replicas, rename_by_default, fail_requests_greater_than_one, resource}
        "mig_strategy": None,  # None: the chart default (single)
        "extra_values": {},
    }


def time_slicing_config(replicas, mig_strategy="none", rename_by_default=False,
                        fail_requests_greater_than_one=False, resource=om.CONTAINER_RESOURCE):
    """The device plugin config (``version: v1``) that shares each GPU ``replicas`` ways,
    as the YAML text the chart puts into its ConfigMap."""
    config = {
        "version": "v1",
        "flags": {"migStrategy": mig_strategy or "none"},
        "sharing": {"timeSlicing": {
            "renameByDefault": bool(rename_by_default),
            "failRequestsGreaterThanOne": bool(fail_requests_greater_than_one),
            "resources": [{"name": resource, "replicas": int(replicas)}],
        }},
    }
    return manifest_yaml.dump(config)


def canonical(values):
    """A copy with every map's keys sorted: the same values always read the same, in the
    HelmChart and in the Argo CD Application."""
    if isinstance(values, dict):
        return dict((key, canonical(values[key])) for key in sorted(values, key=str))
    if isinstance(values, list):
        return [canonical(item) for item in values]
    return copy.deepcopy(values)


def render_values(decisions):
    """The chart values a site's decisions stand for on RKE2, the extra values merged last.

    Only what the site decides is written; everything else stays the chart's default,
    so the HelmChart shows the site's choices and nothing more. The caller checks the
    decisions first (``decision_problems``: a supported chart line) and the result after
    (``values_problems``)."""
    line = chart_line(decisions["chart_version"])
    # NRI asked for through extra values counts too. A line without the NRI plugin keeps
    # the socket recipe (NRI is refused there anyway).
    extra = decisions.get("extra_values") or {}
    nri = bool(decisions.get("nri_plugin_enabled") or lookup(extra, "cdi.nriPluginEnabled") is True) and line["nri"]
    toolkit_enabled = bool(decisions.get("toolkit_enabled", True))
    values = {
        "driver": {"enabled": bool(decisions.get("driver_enabled", True))},
        "toolkit": {"enabled": toolkit_enabled},
    }
    if decisions.get("driver_use_precompiled"):
        values["driver"]["usePrecompiled"] = True
    if toolkit_enabled and not nri:
        # With NRI the toolkit leaves containerd alone: no socket, no env at all.
        env = [("CONTAINERD_SOCKET", RKE2_CONTAINERD_SOCKET)]
        if line["volume_mounts_recipe"]:
            env.extend(VOLUME_MOUNTS_TOOLKIT_ENV)
        values["toolkit"]["env"] = env_list(env)
    if line["volume_mounts_recipe"] and toolkit_enabled:
        # The device list as volume mounts only works with the toolkit env above; a host
        # runtime keeps the device plugin's default.
        values["devicePlugin"] = {"env": env_list(VOLUME_MOUNTS_DEVICE_PLUGIN_ENV)}

    cdi_enabled = decisions.get("cdi_enabled")
    if cdi_enabled is None:
        cdi_enabled = line["cdi_default"]
    values["cdi"] = {"enabled": bool(cdi_enabled)}
    if line["nri"]:
        values["cdi"]["nriPluginEnabled"] = nri

    if line["v26_7"]:
        # Choices the v26.7 chart makes for a site, made here on purpose (a site turns either on through
        # extra_values): its DCGM exporter ServiceMonitor is on by default, though only a cluster with the
        # Prometheus Operator's ServiceMonitor CRD can hold one (without it the operator skips it silently), and
        # the GPUCluster (DRA) stack, experimental, stays off like the chart's default says today.
        values["dcgmExporter"] = {"serviceMonitor": {"enabled": False}}
        values["gpuCluster"] = {"deployCR": False}

    sandbox = decisions.get("sandbox_workloads") or {}
    values["sandboxWorkloads"] = {"enabled": bool(sandbox.get("enabled"))}
    if sandbox.get("enabled"):
        values["sandboxWorkloads"]["defaultWorkload"] = sandbox.get("default_workload") or om.CONTAINER
        if line["sandbox_mode"]:
            values["sandboxWorkloads"]["mode"] = sandbox.get("mode") or "kubevirt"

    vgpu = decisions.get("vgpu_manager") or {}
    if vgpu.get("repository"):
        values["vgpuManager"] = {"enabled": True, "repository": vgpu["repository"],
                                 "image": vgpu.get("image") or "vgpu-manager", "version": vgpu.get("version")}

    mig_strategy = decisions.get("mig_strategy")
    if mig_strategy:
        values["mig"] = {"strategy": mig_strategy}

    slicing = decisions.get("time_slicing") or {}
    if slicing.get("replicas"):
        data = time_slicing_config(
            slicing["replicas"], mig_strategy=mig_strategy or "none",
            rename_by_default=slicing.get("rename_by_default", False),
            fail_requests_greater_than_one=slicing.get("fail_requests_greater_than_one", False),
            resource=slicing.get("resource") or om.CONTAINER_RESOURCE)
        values.setdefault("devicePlugin", {})["config"] = {
            "create": True, "name": TIME_SLICING_CONFIG_NAME, "default": TIME_SLICING_PROFILE,
            "data": {TIME_SLICING_PROFILE: data},
        }
    return deep_merge(values, decisions.get("extra_values") or {})


# ---------------------------------------------------------------- checks

def decision_problems(decisions, nodes=None):
    """Problems with the decisions themselves and against the inventory, each naming its
    key. ``nodes``: [{name, workload_config}] of the inventory's ``gpu_nodes`` (config
    None: the node has no ``gpu_workload_config`` and gets the default workload)."""
    problems = []
    version = decisions.get("chart_version")
    line = chart_line(version)
    wrong_version = version_problems(version)
    if wrong_version:
        return wrong_version

    namespace = decisions.get("namespace") or ""
    if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", namespace) or len(namespace) > 63:
        problems.append("namespace: %r is not a valid namespace name (RFC 1123 label)" % namespace)

    if decisions.get("nri_plugin_enabled") and not line["nri"]:
        problems.append(_NRI_CHART % version)

    sandbox = decisions.get("sandbox_workloads") or {}
    for key, option in (("defaultWorkload", "default_workload"), ("mode", "mode")):
        value = sandbox.get(option)
        allowed = ENUMERATED_VALUES["sandboxWorkloads." + key]
        if value is not None and value not in allowed:
            problems.append(_not_one_of("sandboxWorkloads." + key, value))
    if sandbox.get("mode") not in (None, "kubevirt") and not line["sandbox_mode"]:
        problems.append("sandboxWorkloads.mode: %r needs chart v26.3.0 or later (chart_version is %s)"
                        % (sandbox.get("mode"), version))

    mig = decisions.get("mig_strategy")
    if mig is not None and mig not in ENUMERATED_VALUES["mig.strategy"]:
        problems.append(_not_one_of("mig.strategy", mig))

    slicing = decisions.get("time_slicing") or {}
    replicas = slicing.get("replicas")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2):
        problems.append("time_slicing.replicas: %r must be an integer of at least 2 (one GPU shared that many ways)"
                        % (replicas,))

    vgpu = decisions.get("vgpu_manager") or {}
    if vgpu.get("repository") and not vgpu.get("version"):
        problems.append("vgpuManager.version: the vGPU manager image %s/%s needs its version (the driver version "
                        "it was built with)" % (vgpu["repository"], vgpu.get("image") or "vgpu-manager"))

    problems.extend(inventory_problems(decisions, nodes or []))
    return problems


def node_workload_configs(nodes, sandbox):
    """{node: effective workload config} as the operator will decide it (facts 2)."""
    policy = {"sandbox_workloads_enabled": bool(sandbox.get("enabled")),
              "default_workload": sandbox.get("default_workload") or om.CONTAINER}
    result = {}
    for node in nodes:
        labels = {}
        if node.get("workload_config"):
            labels[om.WORKLOAD_CONFIG_LABEL] = node["workload_config"]
        result[node["name"]] = om.effective_workload_config(labels, policy)[0]
    return result


def inventory_problems(decisions, nodes):
    problems = []
    sandbox = decisions.get("sandbox_workloads") or {}
    by_config = {}
    for node in nodes:
        config = node.get("workload_config")
        if config is not None and config not in om.WORKLOAD_CONFIGS:
            problems.append("gpu_workload_config: host %s has %r, not one of %s"
                            % (node["name"], config, ", ".join(om.WORKLOAD_CONFIGS)))
            continue
        by_config.setdefault(config, []).append(node["name"])
    vm_hosts = sorted(by_config.get(om.VM_PASSTHROUGH, []) + by_config.get(om.VM_VGPU, []))
    if vm_hosts and not sandbox.get("enabled"):
        problems.append("sandboxWorkloads.enabled: false, but hosts %s have a vm-* gpu_workload_config; with sandbox "
                        "workloads off the operator treats every node as container and never reads "
                        "nvidia.com/gpu.workload.config" % ", ".join(vm_hosts))
    effective = node_workload_configs([n for n in nodes if n.get("workload_config") in (None,) + om.WORKLOAD_CONFIGS],
                                      sandbox)
    vgpu_hosts = sorted(name for name, config in effective.items() if config == om.VM_VGPU)
    mode = sandbox.get("mode") or om.SANDBOX_MODE_KUBEVIRT
    if vgpu_hosts and sandbox.get("enabled") and om.resource_plugin(om.VM_VGPU, {"sandbox_mode": mode}) is None:
        # isStateEnabled: in kata mode the KubeVirt device plugin is not deployed and the
        # Kata one serves vm-passthrough nodes only, so a vGPU node would advertise nothing.
        problems.append("sandboxWorkloads.mode: %s, but hosts %s are vm-vgpu nodes: in %s mode the operator runs no "
                        "device plugin on vm-vgpu nodes (the Kata device plugin serves vm-passthrough only), so "
                        "they would advertise no vGPU" % (mode, ", ".join(vgpu_hosts), mode))
    vgpu = decisions.get("vgpu_manager") or {}
    if vgpu_hosts and not vgpu.get("repository"):
        problems.append("vgpuManager.repository: hosts %s are vm-vgpu nodes but no vGPU manager image is set (NVIDIA "
                        "does not publish it: build it from the vGPU manager package and push it to your registry)"
                        % ", ".join(vgpu_hosts))
    return problems


def values_problems(values, decisions, reference=None, rke2_version=None):
    """Problems in the final values (decisions, extra values, mirror): the RKE2 rules of
    the chart line, enumerated values, and keys the chart's values.yaml does not have."""
    problems = []
    version = decisions["chart_version"]
    line = chart_line(version)
    nri = bool(lookup(values, "cdi.nriPluginEnabled", False))

    for index, entry in enumerate(_env_entries(values, "toolkit.env")):
        name = entry.get("name")
        where = "toolkit.env[%d] %s" % (index, name)
        if not isinstance(name, str):
            problems.append("toolkit.env[%d].name: must be a string, got %r" % (index, name))
        elif name in OBSOLETE_TOOLKIT_ENV:
            problems.append("%s: the obsolete containerd-config recipe is refused on RKE2: %s"
                            % (where, OBSOLETE_TOOLKIT_ENV[name]))
        elif nri and line["nri"] and str(name).startswith("CONTAINERD_"):
            problems.append("%s: with cdi.nriPluginEnabled the toolkit does not touch containerd; set no toolkit env"
                            % where)
        elif name in dict(VOLUME_MOUNTS_TOOLKIT_ENV) and not line["volume_mounts_recipe"]:
            problems.append("%s: part of RKE2's v25.3 recipe only; chart %s injects devices through CDI"
                            % (where, version))
    if lookup(values, "toolkit.enabled", True) is not False and not (nri and line["nri"]):
        socket = [e.get("value") for e in _env_entries(values, "toolkit.env") if e.get("name") == "CONTAINERD_SOCKET"]
        if socket != [RKE2_CONTAINERD_SOCKET]:
            problems.append("toolkit.env: must set CONTAINERD_SOCKET=%s exactly once on RKE2 (extra_values replace "
                            "the whole list)" % RKE2_CONTAINERD_SOCKET)
    for index, entry in enumerate(_env_entries(values, "devicePlugin.env")):
        if entry.get("name") == "DEVICE_LIST_STRATEGY" and not line["volume_mounts_recipe"]:
            problems.append("devicePlugin.env[%d] DEVICE_LIST_STRATEGY: part of RKE2's v25.3 recipe only; chart %s "
                            "uses CDI" % (index, version))

    if nri:
        if not line["nri"]:
            problems.append(_NRI_CHART % version)
        if lookup(values, "cdi.enabled", line["cdi_default"]) is not True:
            problems.append("cdi.nriPluginEnabled: the NRI plugin needs cdi.enabled: true (the chart rejects it "
                            "without CDI)")
        if rke2_version:
            if parse_rke2_version(rke2_version) is None:
                problems.append("rke2_version: %r is not an RKE2 version (expected like v1.33.5+rke2r1)"
                                % rke2_version)
            elif not rke2_has_containerd_21(rke2_version):
                problems.append("cdi.nriPluginEnabled: RKE2 %s ships containerd older than 2.1, which the NRI plugin "
                                "needs (containerd 2.1 comes with v1.31.13, v1.32.9, v1.33.5, v1.34.1 +rke2r1 and "
                                "later)" % rke2_version)

    if line["v26_7"]:
        problems.extend(v26_7_problems(values, reference or {}, version))

    for path in sorted(ENUMERATED_VALUES):
        value = lookup(values, path)
        if value is not None and value not in ENUMERATED_VALUES[path]:
            problems.append(_not_one_of(path, value))
    if lookup(values, "driver.usePrecompiled") and lookup(values, "driver.enabled", True):
        driver_version = str(lookup(values, "driver.version", lookup(reference or {}, "driver.version", "")))
        if "." in driver_version:
            problems.append("driver.version: %r with driver.usePrecompiled must be the driver branch (for example "
                            "%s): precompiled images are tagged <branch>-<kernel>-<os>"
                            % (driver_version, driver_version.split(".", 1)[0]))
    if reference is not None:
        problems.extend(unknown_keys(values, reference, version=version))
    return problems


def v26_7_problems(values, reference, version):
    """What the v26.7 chart's validations.yaml would fail the install on, refused before anything changes with
    the way out: the GPUCluster (DRA) stack beside a ClusterPolicy or without the NVIDIADriver CRD, the NRI
    plugin without the toolkit, a device plugin config to create without its name or data."""
    def value(path):
        return lookup(values, path, lookup(reference, path))

    problems = []
    if value("gpuCluster.deployCR") is True:
        if value("clusterPolicy.deployCR") is not False:
            problems.append("gpuCluster.deployCR: true beside clusterPolicy.deployCR: true (true unless set): the "
                            "GPUCluster (DRA) stack cannot run beside a ClusterPolicy (chart %s refuses both); set "
                            "clusterPolicy.deployCR: false as well, or leave gpuCluster.deployCR off" % version)
        if value("driver.enabled") is not False and value("driver.nvidiaDriverCRD.enabled") is not True:
            problems.append("gpuCluster.deployCR: the GPUCluster stack runs the driver through the NVIDIADriver CRD: "
                            "set driver.nvidiaDriverCRD.enabled: true (or driver.enabled: false for a host driver)")
    if value("cdi.nriPluginEnabled") is True and value("toolkit.enabled") is False:
        problems.append("cdi.nriPluginEnabled: chart %s refuses the NRI plugin with toolkit.enabled: false (\"the "
                        "NRI Plugin cannot be enabled when the Container Toolkit is disabled\"): keep the toolkit on "
                        "(with NRI it leaves containerd's config alone) or turn the NRI plugin off" % version)
    if value("devicePlugin.config.create") is True:
        for key in ("name", "data"):
            if not value("devicePlugin.config." + key):
                problems.append("devicePlugin.config.%s: chart %s refuses devicePlugin.config.create: true with an "
                                "empty %s" % (key, version, key))
    return problems


def unique(problems):
    """Problems in order, each once (a decision and the value it renders can both be wrong)."""
    seen = set()
    return [p for p in problems if not (p in seen or seen.add(p))]


_NRI_CHART = "cdi.nriPluginEnabled: the NRI plugin needs chart v26.3.0 or later (chart_version is %s)"


def _not_one_of(path, value):
    return "%s: %r is not one of %s" % (path, value, ", ".join(ENUMERATED_VALUES[path]))


def _under(path, keys):
    """The first of ``keys`` that ``path`` is or lies below, else None."""
    for key in keys:
        if path == key or path.startswith(key + "."):
            return key
    return None


def _allowed_outside(path, version=None):
    parsed = parse_chart_version(version)
    by_line = CHART_KEYS_OUTSIDE_VALUES_BY_LINE.get(parsed[:2], ()) if parsed else ()
    return _under(path, CHART_KEYS_OUTSIDE_VALUES + by_line) is not None


def unknown_keys(values, reference, prefix="", version=None):
    """Problems for every key of ``values`` the chart's values.yaml (``reference``) does
    not have. A map that is empty in values.yaml (labels, annotations, config data) is
    free-form; lists are not looked into. With the chart ``version``: a key of another
    known version (VERSIONED_KEYS) is named as such, and keys the version's templates
    ignore (IGNORED_KEYS) are refused."""
    problems = []
    parsed = parse_chart_version(version)
    ignored = IGNORED_KEYS.get(parsed[:2], {}) if parsed else {}
    for key, value in sorted(values.items(), key=lambda kv: str(kv[0])):
        path = prefix + str(key)
        if _under(path, ignored):
            problems.append("%s: chart %s ignores it: %s" % (path, version, ignored[_under(path, ignored)]))
            continue
        if _allowed_outside(path, version):
            continue
        if key not in reference:
            versioned = _under(path, VERSIONED_KEYS)
            if version and versioned and canonical_version(version) not in VERSIONED_KEYS[versioned]:
                problems.append("%s: a value of chart %s, not of chart %s (chart_version): its values.yaml has no "
                                "%s" % (path, " and ".join(VERSIONED_KEYS[versioned]), version, versioned))
            else:
                problems.append("%s: not a value of the chart (its values.yaml has no such key%s)"
                                % (path, _did_you_mean(key, reference)))
            continue
        known = reference[key]
        if isinstance(known, dict) and known:
            if value is None:
                continue
            if not isinstance(value, dict):
                problems.append("%s: the chart expects a map here, got %r" % (path, value))
                continue
            problems.extend(unknown_keys(value, known, path + ".", version))
        elif isinstance(value, dict) and known is not None and not isinstance(known, dict):
            problems.append("%s: the chart expects a %s here, not a map" % (path, type(known).__name__))
    return problems


def _did_you_mean(key, reference):
    lowered = str(key).lower()
    for candidate in reference:
        if str(candidate).lower() == lowered:
            return "; did you mean %s?" % candidate
    return ""


# ---------------------------------------------------------------- manifests

def chart_content(archive_bytes):
    """A chart archive (.tgz bytes) as HelmChart ``spec.chartContent``."""
    return base64.b64encode(archive_bytes).decode("ascii")


def helmchart(values_content, chart_version, target_namespace=om.DEFAULT_NAMESPACE, name=CHART_NAME,
              repo=CHART_REPO, content=None, failure_policy=DEFAULT_FAILURE_POLICY):
    """The ``helm.cattle.io/v1 HelmChart`` for RKE2's helm-controller. With ``content``
    (base64 chart archive) the chart comes from the manifest itself, not a repo.
    ``failure_policy``: see FAILURE_POLICIES."""
    if failure_policy not in FAILURE_POLICIES:
        raise ValueError("failure_policy must be one of %s, got %r" % (", ".join(FAILURE_POLICIES), failure_policy))
    spec = {"chart": CHART_NAME, "version": chart_version}
    if content:
        spec["chartContent"] = content
    else:
        spec["repo"] = repo
    spec.update({"targetNamespace": target_namespace, "createNamespace": True, "failurePolicy": failure_policy,
                 "valuesContent": values_content})
    return {
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": name, "namespace": HELMCHART_NAMESPACE, "labels": dict([MANAGED_BY_LABEL])},
        "spec": spec,
    }


def argocd_application(values, chart_version, target_namespace=om.DEFAULT_NAMESPACE, name=CHART_NAME,
                       repo=CHART_REPO, argocd_namespace="argocd", project="default"):
    """The same chart and values as an Argo CD ``Application`` (the ADR's long-term way
    of managing platform add-ons). It replaces the HelmChart; never run both for one
    cluster (two controllers would fight over one release)."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": argocd_namespace, "labels": dict([MANAGED_BY_LABEL]),
                     "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
        "spec": {
            "project": project,
            "source": {"repoURL": repo, "chart": CHART_NAME, "targetRevision": chart_version,
                       "helm": {"releaseName": name, "valuesObject": values}},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": target_namespace},
            # The ClusterPolicy CRD is too large for client-side apply's last-applied annotation.
            "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                           "syncOptions": ["CreateNamespace=true", "ServerSideApply=true"]},
        },
    }


def workload_runtime_class(chart_version):
    """The runtimeClassName GPU pods must set on this chart line (v25.3 recipe), or None."""
    line = chart_line(chart_version)
    return VOLUME_MOUNTS_RUNTIME_CLASS if line and line["volume_mounts_recipe"] else None


def precompiled_churn_warnings(decisions, nodes, driver_kernels=()):
    """What driver.usePrecompiled will do on this inventory that a site should hear before it
    happens: one warning per kernel that only GPU nodes without a driver container run
    (operand_model.precompiled_driver_groups: the operator then never stops reconciling),
    and one for such nodes whose kernel the inventory does not give. ``nodes`` as for
    decision_problems (with ``kernel``, ``os_tag``, ``operands_disabled``);
    ``driver_kernels``: the site-wide kernels of driver nodes that give none."""
    if decisions.get("driver_enabled") is False or not decisions.get("driver_use_precompiled"):
        return []
    configs = node_workload_configs(nodes, decisions.get("sandbox_workloads") or {})
    facts = [{"name": n["name"], "kernel": n.get("kernel"), "os_tag": n.get("os_tag"),
              "driver": configs.get(n["name"]) == om.CONTAINER and "driver" not in (n.get("operands_disabled") or ())}
             for n in nodes]
    # A driver node without a kernel of its own may run any of the site-wide kernels.
    maybe_covered = set(driver_kernels or ()) if any(f["driver"] and not f["kernel"] for f in facts) else set()
    warnings = [om.precompiled_churn_message(group) for group in om.precompiled_driver_groups(facts)
                if group["churns"] and group["kernel"] not in maybe_covered]
    unknown = sorted(f["name"] for f in facts if not f["driver"] and not f["kernel"])
    if unknown:
        warnings.append("driver.usePrecompiled: %s %s no driver container and the inventory gives no kernel "
                        "(gpu_kernel_version): unless a node that runs the driver container has the same kernel "
                        "and OS, the GPU Operator creates and deletes a precompiled driver DaemonSet for it on every "
                        "reconcile and never comes to rest. Source: %s"
                        % (", ".join(unknown), "runs" if len(unknown) == 1 else "run", om.PRECOMPILED_SOURCE))
    return warnings
