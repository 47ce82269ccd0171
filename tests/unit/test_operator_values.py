"""module_utils/operator_values: site decisions -> chart values for RKE2, and the checks."""
import os

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from tests.conftest import ROOT

# The chart's v26.3.2 values.yaml as the role ships it (upstream's file under a comment header).
REFERENCE_VALUES = os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v26.3.2-values.yaml")
SOCKET = {"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"}


@pytest.fixture(scope="module")
def reference():
    with open(REFERENCE_VALUES) as handle:
        return yaml.safe_load(handle)


def decisions(**overrides):
    result = ov.default_decisions()
    result.update(overrides)
    return result


def problems_of(reference, nodes=None, rke2_version=None, **overrides):
    d = decisions(**overrides)
    found = ov.decision_problems(d, nodes)
    if ov.chart_line(d["chart_version"]):
        found += ov.values_problems(ov.render_values(d), d, reference, rke2_version)
    return ov.unique(found)


@pytest.mark.parametrize("version, line", [
    ("v26.3.2", "v26.3"), ("26.3.0", "v26.3"), ("v25.10.1", "v25.10"), ("v25.3.4", "v25.3"),
    ("v24.9.2", None), ("v26.7.0", "v26.7"), ("v26.9.0", None),
])
def test_chart_lines(version, line):
    found = ov.chart_line(version)
    assert (found["name"] if found else None) == line


@pytest.mark.parametrize("version, has_21", [
    ("v1.30.14+rke2r1", False), ("v1.31.12+rke2r1", False), ("v1.31.13+rke2r1", True),
    ("v1.32.8+rke2r2", False), ("v1.32.9+rke2r1", True), ("v1.33.4+rke2r1", False), ("v1.33.5+rke2r1", True),
    ("v1.34.0+rke2r1", False), ("v1.34.1+rke2r1", True), ("v1.35.0+rke2r1", True), ("1.33.6", True),
])
def test_rke2_releases_with_containerd_21(version, has_21):
    assert ov.rke2_has_containerd_21(version) is has_21


def test_v26_3_defaults_set_only_the_rke2_socket():
    values = ov.render_values(decisions())
    assert values == {
        "driver": {"enabled": True},
        "toolkit": {"enabled": True, "env": [SOCKET]},
        "cdi": {"enabled": True, "nriPluginEnabled": False},
        "sandboxWorkloads": {"enabled": False},
    }


def test_v25_10_has_no_nri_key_and_cdi_on():
    values = ov.render_values(decisions(chart_version="v25.10.1"))
    assert values["cdi"] == {"enabled": True}
    assert values["toolkit"]["env"] == [SOCKET]
    assert "devicePlugin" not in values


def test_v25_3_gets_the_volume_mounts_recipe_and_cdi_off():
    values = ov.render_values(decisions(chart_version="v25.3.4"))
    assert values["toolkit"]["env"] == [
        SOCKET,
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
        {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"},
    ]
    assert values["devicePlugin"] == {"env": [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]}
    assert values["cdi"] == {"enabled": False}
    assert ov.workload_runtime_class("v25.3.4") == "nvidia"
    assert ov.workload_runtime_class("v26.3.2") is None


def test_nri_means_no_toolkit_env_at_all():
    values = ov.render_values(decisions(nri_plugin_enabled=True))
    assert values["toolkit"] == {"enabled": True}
    assert values["cdi"] == {"enabled": True, "nriPluginEnabled": True}


def test_toolkit_off_means_no_toolkit_env():
    assert ov.render_values(decisions(toolkit_enabled=False))["toolkit"] == {"enabled": False}


def test_sandbox_vgpu_time_slicing_and_mig():
    values = ov.render_values(decisions(
        sandbox_workloads={"enabled": True, "default_workload": "vm-passthrough", "mode": "kubevirt"},
        vgpu_manager={"repository": "registry.site/nvidia", "image": "vgpu-manager", "version": "580.126.20"},
        time_slicing={"replicas": 4, "rename_by_default": True}, mig_strategy="mixed"))
    assert values["sandboxWorkloads"] == {"enabled": True, "defaultWorkload": "vm-passthrough", "mode": "kubevirt"}
    assert values["vgpuManager"] == {"enabled": True, "repository": "registry.site/nvidia", "image": "vgpu-manager",
                                     "version": "580.126.20"}
    assert values["mig"] == {"strategy": "mixed"}
    config = values["devicePlugin"]["config"]
    assert (config["create"], config["name"], config["default"]) == (True, "time-slicing-config", "any")
    parsed = yaml.safe_load(config["data"]["any"])
    assert parsed == {"version": "v1", "flags": {"migStrategy": "mixed"}, "sharing": {"timeSlicing": {
        "renameByDefault": True, "failRequestsGreaterThanOne": False,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}


def test_sandbox_mode_is_a_v26_3_value_only(reference):
    values = ov.render_values(decisions(chart_version="v25.10.1",
                                        sandbox_workloads={"enabled": True, "default_workload": "container",
                                                           "mode": "kubevirt"}))
    assert "mode" not in values["sandboxWorkloads"]
    assert problems_of(reference, chart_version="v25.10.1",
                       sandbox_workloads={"enabled": True, "mode": "kata"}) == [
        "sandboxWorkloads.mode: 'kata' needs chart v26.3.0 or later (chart_version is v25.10.1)"]


def test_extra_values_merge_last_and_lists_replace():
    values = ov.render_values(decisions(extra_values={
        "toolkit": {"resources": {"limits": {"memory": "1Gi"}}},
        "driver": {"enabled": False, "version": None},
    }))
    assert values["toolkit"] == {"enabled": True, "env": [SOCKET], "resources": {"limits": {"memory": "1Gi"}}}
    assert values["driver"] == {"enabled": False, "version": None}
    assert ov.deep_merge({"a": [1, 2], "b": {"c": 1}}, {"a": [3], "b": {"d": 2}}) == {"a": [3], "b": {"c": 1, "d": 2}}


def test_effective_values_follow_helm_coalescing():
    defaults = {"driver": {"enabled": True, "version": "580"}, "toolkit": {"env": []}}
    assert ov.effective_values(defaults, {"driver": {"version": None}, "toolkit": {"env": [SOCKET]}}) == \
        {"driver": {"enabled": True}, "toolkit": {"env": [SOCKET]}}


def test_defaults_are_valid_on_every_line(reference):
    for version in ("v25.3.4", "v25.10.1", "v26.3.2"):
        assert problems_of(reference, chart_version=version) == []


@pytest.mark.parametrize("overrides, rke2_version, expected", [
    (dict(nri_plugin_enabled=True, cdi_enabled=False), None,
     ["cdi.nriPluginEnabled: the NRI plugin needs cdi.enabled: true (the chart rejects it without CDI)"]),
    (dict(nri_plugin_enabled=True, chart_version="v25.10.1"), None,
     ["cdi.nriPluginEnabled: the NRI plugin needs chart v26.3.0 or later (chart_version is v25.10.1)"]),
    (dict(nri_plugin_enabled=True), "v1.33.4+rke2r1",
     ["cdi.nriPluginEnabled: RKE2 v1.33.4+rke2r1 ships containerd older than 2.1, which the NRI plugin needs "
      "(containerd 2.1 comes with v1.31.13, v1.32.9, v1.33.5, v1.34.1 +rke2r1 and later)"]),
    (dict(nri_plugin_enabled=True), "1.33", ["rke2_version: '1.33' is not an RKE2 version (expected like "
                                             "v1.33.5+rke2r1)"]),
    (dict(chart_version="v24.9.2"), None,
     ["chart_version: v24.9.2 is not on a supported chart line (v25.3.x, v25.10.x, v26.3.x, v26.7.x; the versions "
      "this collection knows: v26.3.2, v26.3.3, v26.7.0)"]),
    (dict(chart_version="latest"), None,
     ["chart_version: 'latest' is not a chart version (expected one of v26.3.2, v26.3.3, v26.7.0)"]),
    (dict(chart_version="v26.3.1"), None,
     ["chart_version: v26.3.1 is not a version this collection knows (v26.3.2, v26.3.3, v26.7.0): it ships each "
      "one's values.yaml and knows its images, values keys and issues"]),
    (dict(namespace="GPU_Operator"), None,
     ["namespace: 'GPU_Operator' is not a valid namespace name (RFC 1123 label)"]),
    (dict(mig_strategy="half"), None, ["mig.strategy: 'half' is not one of none, single, mixed"]),
    (dict(time_slicing={"replicas": 1}), None,
     ["time_slicing.replicas: 1 must be an integer of at least 2 (one GPU shared that many ways)"]),
    (dict(vgpu_manager={"repository": "registry.site/nvidia"}), None,
     ["vgpuManager.version: the vGPU manager image registry.site/nvidia/vgpu-manager needs its version (the "
      "driver version it was built with)"]),
    (dict(sandbox_workloads={"enabled": True, "default_workload": "vm-everything"}), None,
     ["sandboxWorkloads.defaultWorkload: 'vm-everything' is not one of container, vm-passthrough, vm-vgpu"]),
])
def test_invalid_decisions_name_their_key(reference, overrides, rke2_version, expected):
    assert problems_of(reference, rke2_version=rke2_version, **overrides) == expected


def test_nri_on_a_new_enough_rke2_passes(reference):
    assert problems_of(reference, rke2_version="v1.33.5+rke2r1", nri_plugin_enabled=True) == []


@pytest.mark.parametrize("name, value", [
    ("CONTAINERD_CONFIG", "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl"),
    ("CONTAINERD_RUNTIME_CLASS", "nvidia"),
    ("CONTAINERD_SET_AS_DEFAULT", "true"),
])
def test_the_obsolete_recipe_is_refused_naming_the_entry(reference, name, value):
    env = [SOCKET, {"name": name, "value": value}]
    found = problems_of(reference, extra_values={"toolkit": {"env": env}})
    assert len(found) == 1
    assert found[0].startswith("toolkit.env[1] %s: the obsolete containerd-config recipe is refused on RKE2" % name)


@pytest.mark.parametrize("overrides, expected", [
    (dict(extra_values={"toolkit": {"env": [{"name": "FOO", "value": "1"}]}}),
     "toolkit.env: must set CONTAINERD_SOCKET=/run/k3s/containerd/containerd.sock exactly once on RKE2 "
     "(extra_values replace the whole list)"),
    (dict(nri_plugin_enabled=True, extra_values={"toolkit": {"env": [SOCKET]}}),
     "toolkit.env[0] CONTAINERD_SOCKET: with cdi.nriPluginEnabled the toolkit does not touch containerd; set no "
     "toolkit env"),
    (dict(extra_values={"toolkit": {"env": [SOCKET, {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS",
                                                     "value": "true"}]}}),
     "toolkit.env[1] ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS: part of RKE2's v25.3 recipe only; chart "
     "v26.3.2 injects devices through CDI"),
    (dict(extra_values={"devicePlugin": {"env": [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]}}),
     "devicePlugin.env[0] DEVICE_LIST_STRATEGY: part of RKE2's v25.3 recipe only; chart v26.3.2 uses CDI"),
    (dict(chart_version="v25.10.1", extra_values={"cdi": {"nriPluginEnabled": True}}),
     "cdi.nriPluginEnabled: the NRI plugin needs chart v26.3.0 or later (chart_version is v25.10.1)"),
    (dict(extra_values={"cdi": {"enabled": False, "nriPluginEnabled": True}}),
     "cdi.nriPluginEnabled: the NRI plugin needs cdi.enabled: true (the chart rejects it without CDI)"),
    (dict(extra_values={"mig": {"strategy": "both"}}), "mig.strategy: 'both' is not one of none, single, mixed"),
    (dict(extra_values={"daemonsets": {"updateStrategy": "Recreate"}}),
     "daemonsets.updateStrategy: 'Recreate' is not one of RollingUpdate, OnDelete"),
    (dict(extra_values={"driver": {"enabeld": False}}),
     "driver.enabeld: not a value of the chart (its values.yaml has no such key)"),
    (dict(extra_values={"Driver": {"enabled": False}}),
     "Driver: not a value of the chart (its values.yaml has no such key; did you mean driver?)"),
    (dict(extra_values={"driver": {"upgradePolicy": {"drain": {"enabled": True}}}}),
     "driver.upgradePolicy.drain.enabled: not a value of the chart (its values.yaml has no such key)"),
    (dict(extra_values={"driver": "off"}), "driver: the chart expects a map here, got 'off'"),
    (dict(extra_values={"driver": {"version": {"branch": 580}}}),
     "driver.version: the chart expects a str here, not a map"),
    (dict(extra_values={"node-feature-discovery": {"worker": {"extraArgs": ["-v"]}}}),
     "node-feature-discovery.worker.extraArgs: not a value of the chart (its values.yaml has no such key)"),
    (dict(driver_use_precompiled=True),
     "driver.version: '580.126.20' with driver.usePrecompiled must be the driver branch (for example 580): "
     "precompiled images are tagged <branch>-<kernel>-<os>"),
])
def test_invalid_values_name_their_key(reference, overrides, expected):
    assert problems_of(reference, **overrides) == [expected]


def test_chart_keys_outside_values_yaml_and_free_form_maps_are_accepted(reference):
    extra = {
        "operator": {"version": "v26.3.2"}, "validator": {"version": "v26.3.2"},
        "daemonsets": {"labels": {"team": "platform"}, "annotations": {"a": "b"}},
        "node-feature-discovery": {"image": {"repository": "registry.site/nfd/node-feature-discovery",
                                             "tag": "v0.18.3"}},
        "dcgmExporter": {"config": {"name": "metrics", "create": True, "data": "DCGM_FI_DEV_SM_CLOCK, gauge, x"}},
        "driver": {"usePrecompiled": True, "version": "580", "upgradePolicy": {"autoUpgrade": False}},
        "devicePlugin": {"config": {"data": {"a100": "version: v1\n"}}},
        "toolkit": {"env": [SOCKET, {"name": "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "value": "x"}]},
    }
    assert problems_of(reference, extra_values=extra) == []


@pytest.mark.parametrize("nodes, overrides, expected", [
    ([{"name": "gpu-1", "workload_config": "vm-passthrough"}, {"name": "gpu-0", "workload_config": "vm-vgpu"}], {},
     ["sandboxWorkloads.enabled: false, but hosts gpu-0, gpu-1 have a vm-* gpu_workload_config; with sandbox "
      "workloads off the operator treats every node as container and never reads nvidia.com/gpu.workload.config"]),
    ([{"name": "gpu-2", "workload_config": "vm-vgpu"}], {"sandbox_workloads": {"enabled": True}},
     ["vgpuManager.repository: hosts gpu-2 are vm-vgpu nodes but no vGPU manager image is set (NVIDIA does not "
      "publish it: build it from the vGPU manager package and push it to your registry)"]),
    ([{"name": "gpu-3", "workload_config": None}],
     {"sandbox_workloads": {"enabled": True, "default_workload": "vm-vgpu"}},
     ["vgpuManager.repository: hosts gpu-3 are vm-vgpu nodes but no vGPU manager image is set (NVIDIA does not "
      "publish it: build it from the vGPU manager package and push it to your registry)"]),
    ([{"name": "gpu-4", "workload_config": "vm"}], {"sandbox_workloads": {"enabled": True}},
     ["gpu_workload_config: host gpu-4 has 'vm', not one of container, vm-passthrough, vm-vgpu"]),
    # Kata mode gives vm-vgpu nodes no device plugin (isStateEnabled); vm-passthrough is fine.
    ([{"name": "gpu-5", "workload_config": "vm-vgpu"}, {"name": "gpu-6", "workload_config": "vm-passthrough"}],
     {"sandbox_workloads": {"enabled": True, "mode": "kata"},
      "vgpu_manager": {"repository": "r.site/nvidia", "version": "580.126.20"}},
     ["sandboxWorkloads.mode: kata, but hosts gpu-5 are vm-vgpu nodes: in kata mode the operator runs no device "
      "plugin on vm-vgpu nodes (the Kata device plugin serves vm-passthrough only), so they would advertise no vGPU"]),
    ([{"name": "gpu-6", "workload_config": "vm-passthrough"}], {"sandbox_workloads": {"enabled": True, "mode": "kata"}},
     []),
])
def test_inventory_problems(reference, nodes, overrides, expected):
    assert problems_of(reference, nodes=nodes, **overrides) == expected


def test_inventory_with_sandbox_on_and_a_vgpu_image_passes(reference):
    nodes = [{"name": "a", "workload_config": "container"}, {"name": "b", "workload_config": "vm-passthrough"},
             {"name": "c", "workload_config": "vm-vgpu"}]
    assert problems_of(reference, nodes=nodes, sandbox_workloads={"enabled": True},
                       vgpu_manager={"repository": "r.site/nvidia", "version": "580.126.20"}) == []


def test_helmchart_from_a_repo_or_from_chart_content():
    from_repo = ov.helmchart("driver: {}\n", "v26.3.2")
    assert from_repo["spec"]["repo"] == "https://helm.ngc.nvidia.com/nvidia"
    assert "chartContent" not in from_repo["spec"]
    assert from_repo["metadata"] == {"name": "gpu-operator", "namespace": "kube-system",
                                     "labels": {"app.kubernetes.io/managed-by": "gpuplatform.rke2"}}
    embedded = ov.helmchart("driver: {}\n", "v26.3.2", content=ov.chart_content(b"\x1f\x8b archive"))
    assert embedded["spec"]["chartContent"] == "H4sgYXJjaGl2ZQ=="
    assert "repo" not in embedded["spec"]
    assert (embedded["spec"]["targetNamespace"], embedded["spec"]["createNamespace"]) == ("gpu-operator", True)


def test_argocd_application_carries_the_same_values():
    values = {"driver": {"enabled": False}}
    app = ov.argocd_application(values, "v26.3.2", argocd_namespace="argo")
    assert app["metadata"]["namespace"] == "argo"
    assert app["spec"]["source"] == {"repoURL": "https://helm.ngc.nvidia.com/nvidia", "chart": "gpu-operator",
                                     "targetRevision": "v26.3.2",
                                     "helm": {"releaseName": "gpu-operator", "valuesObject": values}}
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]


def test_time_slicing_config_is_the_device_plugin_config_format():
    text = ov.time_slicing_config(3, "single", resource="nvidia.com/gpu")
    assert text.startswith("version: v1\n")
    assert yaml.safe_load(text) == {"version": "v1", "flags": {"migStrategy": "single"}, "sharing": {"timeSlicing": {
        "renameByDefault": False, "failRequestsGreaterThanOne": False,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}}


def test_canonical_sorts_every_map():
    assert list(ov.canonical({"b": 1, "a": {"d": [{"z": 1, "y": 2}], "c": 0}})) == ["a", "b"]
    assert list(ov.canonical({"a": {"d": [{"z": 1, "y": 2}], "c": 0}})["a"]["d"][0]) == ["y", "z"]


@pytest.mark.parametrize("name, ok", [("gpu-operator", True), ("gpu.operator", True), ("GPU-operator", False),
                                      ("gpu_operator", False), ("-gpu", False), ("", False)])
def test_rfc1123_names(name, ok):
    assert ov.is_rfc1123_name(name) is ok


def test_the_helmchart_carries_its_failure_policy():
    # helm-controller reinstalls a failed release unless told otherwise; the collection renders abort.
    assert ov.helmchart("{}\n", "v26.3.2")["spec"]["failurePolicy"] == "abort"
    assert ov.helmchart("{}\n", "v26.3.2", failure_policy="reinstall")["spec"]["failurePolicy"] == "reinstall"
    with pytest.raises(ValueError, match="failure_policy must be one of abort, reinstall, got 'retry'"):
        ov.helmchart("{}\n", "v26.3.2", failure_policy="retry")
