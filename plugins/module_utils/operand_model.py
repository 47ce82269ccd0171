# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU Operator's operand model: the one place that says which operands exist,
how they are labelled, selected and ordered, which workload config runs which, and
which resource a node of each config advertises.

Modules, roles (through the ``operand_model`` lookup of this collection), the docs
table (``docs/operand-model.md``, generated from here) and the lab's simulated
operator all read this file. Facts come from the GPU Operator v26.3.2 source (the
files and functions are cited where a rule comes from; ``controllers/`` unless a path
says otherwise), its chart, and kubevirt-gpu-device-plugin v1.5.0; see also
``shared/docs/gpu-operator-facts.md``. Keep this file free of I/O and of Ansible
imports so that every consumer can use it as plain data.

Two ways of reading settings, on purpose kept apart:

* ``policy_from_values`` (alias ``policy_from_spec``): chart values the role renders;
  a key the values leave out takes the chart v26.3.2 default.
* ``policy_from_cluster_policy``: a LIVE ClusterPolicy, read as the operator reads it
  (``IsEnabled()`` in ``api/nvidia/v1/clusterpolicy_types.go``): a missing ``enabled``
  takes the operator's own default, never the chart's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from collections import namedtuple

DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
OPERANDS_LABEL = DEPLOY_LABEL_PREFIX + "operands"
WORKLOAD_CONFIG_LABEL = "nvidia.com/gpu.workload.config"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
VGPU_CONFIG_LABEL = "nvidia.com/vgpu.config"
# Written by the vGPU device manager: pending, success or failed for the node's vgpu.config.
VGPU_CONFIG_STATE_LABEL = "nvidia.com/vgpu.config.state"
VGPU_CONFIG_STATES = ("pending", "success", "failed")
VGPU_CONFIG_FAILED = "failed"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
# state_manager.go: the operator writes mig.config=all-disabled on a MIG-capable node without one.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_DISABLED = "all-disabled"
# A vGPU host: hasMIGCapableGPU says no whatever the card (state_manager.go).
VGPU_HOST_DRIVER_LABEL = "nvidia.com/vgpu.host-driver-version"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# Set by GFD from NVML (k8s-device-plugin internal/lm/nvml.go): the driver loaded on the node.
DRIVER_VERSION_LABEL = "nvidia.com/cuda.driver-version.full"
# The kubelet's: the node's CPU architecture as Kubernetes names it (amd64, arm64).
ARCH_LABEL = "kubernetes.io/arch"
# Products hasMIGCapableGPU takes for MIG-capable when mig.capable is not on the node.
MIG_CAPABLE_PRODUCTS = ("h100", "a100", "a30")
# Set by GFD when the device plugin shares GPUs through MPS; the MPS control daemon selects it.
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
# Known for reporting only: the operator does not gate cc-manager on it (its DaemonSet
# selects nvidia.com/gpu.deploy.cc-manager alone).
CC_CAPABLE_LABEL = "nvidia.com/cc.capable"
# NFD labels that make a node a GPU node for the operator (gpuNodeLabels, vendor 0x10de):
# any of them "true". nvidia.com/gpu.present is the operator's echo of these, not a cause.
NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
NFD_LABEL_PREFIX = "feature.node.kubernetes.io/"
NFD_KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
GPU_TAINT_KEY = "nvidia.com/gpu"

CONTAINER = "container"
VM_PASSTHROUGH = "vm-passthrough"
VM_VGPU = "vm-vgpu"
WORKLOAD_CONFIGS = (CONTAINER, VM_PASSTHROUGH, VM_VGPU)
VM_CONFIGS = (VM_PASSTHROUGH, VM_VGPU)

# sandboxWorkloads.mode (v26.3): which sandbox runtime the VM nodes serve. The CRD
# defaults a missing mode to kubevirt (api/nvidia/v1/clusterpolicy_types.go).
SANDBOX_MODE_KUBEVIRT = "kubevirt"
SANDBOX_MODE_KATA = "kata"
SANDBOX_MODES = (SANDBOX_MODE_KUBEVIRT, SANDBOX_MODE_KATA)

# A deploy label switches its operand on only when its value is exactly "true".
DEPLOY_TRUE = "true"
DEPLOY_FALSE = "false"
# Never written by the operator: k8s-driver-manager (the driver DaemonSet's init container,
# so only with driver.enabled=true) writes it on a node whose host driver already works.
DEPLOY_PRE_INSTALLED = "pre-installed"

DEFAULT_NAMESPACE = "gpu-operator"
OPERATOR_DEPLOYMENT = "gpu-operator"
OPERATOR_POD_SELECTOR = ("app", "gpu-operator")
CLUSTER_POLICY_NAME = "cluster-policy"
CLUSTER_POLICY_API = ("nvidia.com", "v1", "clusterpolicies")
HELMCHART_API = ("helm.cattle.io", "v1", "helmcharts")
CONTAINER_RESOURCE = "nvidia.com/gpu"
RESOURCE_PREFIX = "nvidia.com/"

# The driver upgrade controller (upgrade_controller.go, driver name "gpu" from
# cmd/gpu-operator/main.go upgrade.SetDriverName) and the state machine it runs, NVIDIA
# k8s-operator-libs pkg/upgrade as vendored in gpu-operator v26.3.2 (consts.go): the node
# label UpgradeStateLabelKeyFmt "nvidia.com/%s-driver-upgrade-state", the skip label
# UpgradeSkipNodeLabelKeyFmt, the drain's pod skip label UpgradeSkipDrainDriverSelectorFmt,
# the annotation UpgradeInitialStateAnnotationKeyFmt (the node was cordoned before its upgrade).
DRIVER_UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
DRIVER_UPGRADE_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
DRIVER_UPGRADE_DRAIN_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade-drain.skip"
DRIVER_UPGRADE_INITIAL_UNSCHEDULABLE_ANNOTATION = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
# consts.go UpgradeState*, in the in-place flow's order (upgrade_state.go ApplyState); the
# node-maintenance states belong to the requestor mode (an external maintenance operator).
# No label (UpgradeStateUnknown, ""): not processed yet, or autoUpgrade is off.
UPGRADE_REQUIRED = "upgrade-required"
UPGRADE_CORDON_REQUIRED = "cordon-required"
UPGRADE_WAIT_FOR_JOBS_REQUIRED = "wait-for-jobs-required"
UPGRADE_POD_DELETION_REQUIRED = "pod-deletion-required"
UPGRADE_DRAIN_REQUIRED = "drain-required"
UPGRADE_NODE_MAINTENANCE_REQUIRED = "node-maintenance-required"
UPGRADE_POST_MAINTENANCE_REQUIRED = "post-maintenance-required"
UPGRADE_POD_RESTART_REQUIRED = "pod-restart-required"
UPGRADE_VALIDATION_REQUIRED = "validation-required"
UPGRADE_UNCORDON_REQUIRED = "uncordon-required"
UPGRADE_DONE = "upgrade-done"
UPGRADE_FAILED = "upgrade-failed"
DRIVER_UPGRADE_STATES = (
    UPGRADE_REQUIRED, UPGRADE_CORDON_REQUIRED, UPGRADE_WAIT_FOR_JOBS_REQUIRED, UPGRADE_POD_DELETION_REQUIRED,
    UPGRADE_DRAIN_REQUIRED, UPGRADE_NODE_MAINTENANCE_REQUIRED, UPGRADE_POST_MAINTENANCE_REQUIRED,
    UPGRADE_POD_RESTART_REQUIRED, UPGRADE_VALIDATION_REQUIRED, UPGRADE_UNCORDON_REQUIRED, UPGRADE_DONE, UPGRADE_FAILED)
# common_manager.go GetUpgradesInProgress: every managed node but those unlabelled, done or
# still upgrade-required holds one of maxParallelUpgrades' slots (upgrade-failed too).
UPGRADE_NOT_IN_PROGRESS = ("", UPGRADE_REQUIRED, UPGRADE_DONE)

# ClusterPolicy status as the operator saves it (clusterpolicy_controller.go Reconcile,
# internal/conditions). status.state is ready or notReady: "ignored" (a second
# ClusterPolicy) is set in memory and never saved, so no live object carries it.
CLUSTER_POLICY_READY = "ready"
CLUSTER_POLICY_NOT_READY = "notReady"
CLUSTER_POLICY_STATES = (CLUSTER_POLICY_READY, CLUSTER_POLICY_NOT_READY)
CONDITION_READY = "Ready"
CONDITION_ERROR = "Error"
# Ready=True reasons. Only Reconciled says the operands are up, and only in the sense that
# every enabled operand DaemonSet has numberUnavailable == 0 (one that targets no node counts
# as ready: isDaemonSetReady in object_controls.go).
REASON_RECONCILED = "Reconciled"
REASON_NO_GPU_NODES = "NoGPUNodes"
REASON_NFD_LABELS_MISSING = "NFDLabelsMissing"
READY_REASONS = (REASON_RECONCILED, REASON_NO_GPU_NODES, REASON_NFD_LABELS_MISSING)
# On failure: Ready=False with reason Error, and Error=True with one of these.
REASON_ERROR = "Error"
REASON_RECONCILE_FAILED = "ReconcileFailed"
REASON_OPERAND_NOT_READY = "OperandNotReady"
ERROR_REASONS = (REASON_RECONCILE_FAILED, REASON_OPERAND_NOT_READY)

# The vGPU device manager's configs (object_controls.go VgpuDMDefaultConfigMapName /
# VgpuDMDefaultConfigName; the ConfigMap's file is config.yaml, a v1 "vgpu-configs" map).
VGPU_DEVICES_CONFIGMAP = "default-vgpu-devices-config"
VGPU_DEFAULT_CONFIG = "default"
VGPU_CONFIG_FILE = "config.yaml"

# Layers of the ADR's per-layer diagnosis, bottom up.
LAYER_DRIVER = "driver"
LAYER_RUNTIME = "container-runtime"
LAYER_DEVICE_PLUGIN = "device-plugin"
LAYER_ALLOCATABLE = "allocatable"
LAYER_MONITORING = "monitoring"
LAYER_VALIDATION = "validation"
LAYERS = (LAYER_DRIVER, LAYER_RUNTIME, LAYER_DEVICE_PLUGIN, LAYER_ALLOCATABLE)

Operand = namedtuple(
    "Operand",
    [
        "name",  # operand name; for all but the MPS control daemon also the suffix of its deploy label
        "daemonset",  # DaemonSet name in the operator namespace
        "pod_selector",  # (label key, value) that selects its pods; some use name=, not app=
        "workload_configs",  # effective workload configs that run it
        "depends_on",  # operands that must run first on the same node (those expected there)
        "values_key",  # chart values / ClusterPolicy spec key holding enabled and the image
        "enabled_by_default",  # chart v26.3.2 default of <values_key>.enabled
        "layer",  # diagnosis layer
        "capability_label",  # node label the DaemonSet's nodeSelector also requires "true" (MPS), or None
        "asset",  # the operator's manifest under assets/ (None: not shipped in the reference)
        "deploy_label",  # the nvidia.com/gpu.deploy.* label its DaemonSet selects ("true")
        "sandbox_modes",  # sandboxWorkloads.mode values the operator deploys it in; None: any
        "enabled_if_unset",  # IsEnabled() of a live ClusterPolicy without <values_key>.enabled; None: no switch
    ],
)


def _operand(name, daemonset, pod_selector, workload_configs, depends_on, values_key, enabled_by_default, layer,
             asset, capability_label=None, deploy_label=None, sandbox_modes=None, enabled_if_unset=True):
    return Operand(name, daemonset, pod_selector, workload_configs, depends_on, values_key, enabled_by_default,
                   layer, capability_label, asset, deploy_label or DEPLOY_LABEL_PREFIX + name, sandbox_modes,
                   enabled_if_unset)


# Controller state order (state_manager.go init, v26.3); every table below keeps it.
# enabled_if_unset is each spec's IsEnabled() (api/nvidia/v1/clusterpolicy_types.go);
# validators have no switch: the operator-validator always runs, the sandbox validator
# whenever sandbox workloads are on (isStateEnabled).
OPERANDS = (
    _operand("driver", "nvidia-driver-daemonset", ("app", "nvidia-driver-daemonset"),
             (CONTAINER,), (), "driver", True, LAYER_DRIVER, "state-driver.daemonset.yaml"),
    _operand("container-toolkit", "nvidia-container-toolkit-daemonset", ("app", "nvidia-container-toolkit-daemonset"),
             (CONTAINER,), ("driver",), "toolkit", True, LAYER_RUNTIME, "state-container-toolkit.daemonset.yaml"),
    _operand("operator-validator", "nvidia-operator-validator", ("app", "nvidia-operator-validator"),
             (CONTAINER,), ("driver", "container-toolkit"), "validator", True, LAYER_VALIDATION,
             "state-operator-validation.daemonset.yaml", enabled_if_unset=None),
    _operand("device-plugin", "nvidia-device-plugin-daemonset", ("app", "nvidia-device-plugin-daemonset"),
             (CONTAINER,), ("container-toolkit",), "devicePlugin", True, LAYER_DEVICE_PLUGIN,
             "state-device-plugin.daemonset.yaml"),
    # Deployed whenever the device plugin is (isStateEnabled "state-mps-control-daemon"); its
    # pods land only where GFD has set mps.capable=true (assets/state-mps-control-daemon).
    _operand("mps-control-daemon", "nvidia-device-plugin-mps-control-daemon",
             ("app", "nvidia-device-plugin-mps-control-daemon"),
             (CONTAINER,), ("container-toolkit",), "devicePlugin", True, LAYER_DEVICE_PLUGIN,
             "state-mps-control-daemon.daemonset.yaml", capability_label=MPS_CAPABLE_LABEL,
             deploy_label=DEPLOY_LABEL_PREFIX + "device-plugin"),
    # DCGMSpec.IsEnabled() is true when unset although the chart default is false.
    _operand("dcgm", "nvidia-dcgm", ("app", "nvidia-dcgm"),
             (CONTAINER,), ("container-toolkit",), "dcgm", False, LAYER_MONITORING, None),
    _operand("dcgm-exporter", "nvidia-dcgm-exporter", ("app", "nvidia-dcgm-exporter"),
             (CONTAINER,), ("container-toolkit",), "dcgmExporter", True, LAYER_MONITORING,
             "state-dcgm-exporter.daemonset.yaml"),
    _operand("gpu-feature-discovery", "gpu-feature-discovery", ("app", "gpu-feature-discovery"),
             (CONTAINER,), ("container-toolkit",), "gfd", True, LAYER_DEVICE_PLUGIN,
             "gpu-feature-discovery.daemonset.yaml"),
    # Placed by its deploy label, which the operator sets where hasMIGCapableGPU (see
    # has_mig_capable_gpu); no capability label in its nodeSelector.
    _operand("mig-manager", "nvidia-mig-manager", ("app", "nvidia-mig-manager"),
             (CONTAINER,), ("container-toolkit",), "migManager", True, LAYER_DEVICE_PLUGIN,
             "state-mig-manager.daemonset.yaml"),
    _operand("node-status-exporter", "nvidia-node-status-exporter", ("app", "nvidia-node-status-exporter"),
             (CONTAINER,), (), "nodeStatusExporter", False, LAYER_MONITORING,
             "state-node-status-exporter.daemonset.yaml", enabled_if_unset=False),
    _operand("vgpu-manager", "nvidia-vgpu-manager-daemonset", ("app", "nvidia-vgpu-manager-daemonset"),
             (VM_VGPU,), (), "vgpuManager", False, LAYER_DRIVER, "state-vgpu-manager.daemonset.yaml",
             enabled_if_unset=False),
    _operand("vgpu-device-manager", "nvidia-vgpu-device-manager", ("app", "nvidia-vgpu-device-manager"),
             (VM_VGPU,), ("vgpu-manager",), "vgpuDeviceManager", True, LAYER_RUNTIME,
             "state-vgpu-device-manager.daemonset.yaml", enabled_if_unset=False),
    _operand("sandbox-validator", "nvidia-sandbox-validator", ("app", "nvidia-sandbox-validator"),
             VM_CONFIGS, ("vfio-manager", "vgpu-device-manager"), "validator", True,
             LAYER_VALIDATION, "state-sandbox-validation.daemonset.yaml", enabled_if_unset=None),
    _operand("vfio-manager", "nvidia-vfio-manager", ("name", "nvidia-vfio-manager"),
             (VM_PASSTHROUGH,), (), "vfioManager", True, LAYER_DRIVER, "state-vfio-manager.daemonset.yaml",
             enabled_if_unset=False),
    # KubeVirt's device plugin: only in kubevirt mode (isStateEnabled), on both VM configs.
    _operand("sandbox-device-plugin", "nvidia-sandbox-device-plugin-daemonset",
             ("app", "nvidia-sandbox-device-plugin-daemonset"),
             VM_CONFIGS, ("vfio-manager", "vgpu-device-manager"), "sandboxDevicePlugin", True,
             LAYER_DEVICE_PLUGIN, "state-sandbox-device-plugin.daemonset.yaml",
             sandbox_modes=(SANDBOX_MODE_KUBEVIRT,), enabled_if_unset=False),
    # Kata's device plugin: only in kata mode, on vm-passthrough nodes only (getEffectiveStateLabels
    # swaps the label on passthrough nodes; vm-vgpu nodes get no device plugin in kata mode).
    _operand("kata-sandbox-device-plugin", "nvidia-kata-sandbox-device-plugin-daemonset",
             ("app", "nvidia-kata-sandbox-device-plugin-daemonset"),
             (VM_PASSTHROUGH,), ("vfio-manager",), "kataSandboxDevicePlugin", True, LAYER_DEVICE_PLUGIN,
             "state-kata-device-plugin.daemonset.yaml", sandbox_modes=(SANDBOX_MODE_KATA,), enabled_if_unset=False),
    _operand("kata-manager", "nvidia-kata-manager", ("name", "nvidia-kata-manager"),
             (VM_PASSTHROUGH,), (), "kataManager", False, LAYER_RUNTIME, "state-kata-manager.daemonset.yaml",
             enabled_if_unset=False),
    # Only in kata mode (isStateEnabled), on every VM node: its DaemonSet selects
    # deploy.cc-manager alone, which the operator sets on vm-passthrough and vm-vgpu nodes.
    _operand("cc-manager", "nvidia-cc-manager", ("name", "nvidia-cc-manager"),
             VM_CONFIGS, (), "ccManager", True, LAYER_DRIVER, "state-cc-manager.daemonset.yaml",
             sandbox_modes=(SANDBOX_MODE_KATA,), enabled_if_unset=False),
)

_BY_NAME = dict((o.name, o) for o in OPERANDS)
_BY_DAEMONSET = dict((o.daemonset, o) for o in OPERANDS)
OPERAND_NAMES = tuple(o.name for o in OPERANDS)
# Operands whose absence the host can make up for: a pre-installed driver, a runtime
# set up on the host. Switching them off is the documented pattern, not a break.
HOST_PROVIDABLE = ("driver", "container-toolkit")
# The device plugin of each workload config in kubevirt mode (the default): the operand
# that advertises resources. resource_plugin() gives it for any mode.
RESOURCE_PLUGIN = {CONTAINER: "device-plugin", VM_PASSTHROUGH: "sandbox-device-plugin", VM_VGPU: "sandbox-device-plugin"}
_KATA_RESOURCE_PLUGIN = {CONTAINER: "device-plugin", VM_PASSTHROUGH: "kata-sandbox-device-plugin", VM_VGPU: None}

# The deploy labels the operator writes "true" on a GPU node of each config, when absent
# (state_manager.go gpuStateLabels). mig-manager's label is added apart (container nodes
# with a MIG-capable GPU); in kata mode a vm-passthrough node gets kata-sandbox-device-plugin
# instead of sandbox-device-plugin (getEffectiveStateLabels). The MPS control daemon has no
# label of its own.
STATE_LABEL_OPERANDS = {
    CONTAINER: ("driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm", "dcgm-exporter",
                "node-status-exporter", "operator-validator"),
    VM_PASSTHROUGH: ("sandbox-device-plugin", "sandbox-validator", "vfio-manager", "kata-manager", "cc-manager"),
    VM_VGPU: ("sandbox-device-plugin", "vgpu-manager", "vgpu-device-manager", "sandbox-validator", "cc-manager"),
}

# Deploy labels the operator writes on every GPU node beside its operands', with the first operator line that
# writes them. v26.7.0 adds nvidia.com/gpu.deploy.client to each workload config's state labels
# (controllers/state_manager.go gpuStateLabels): "true" unless set, removed with the others
# (removeAllGPUStateLabels); no DaemonSet of the ClusterPolicy stack selects on it. Seen on the lab's real
# v26.7.0 operator (tests/integration/test_operator_conformance_lab.py).
CLIENT_LABEL = DEPLOY_LABEL_PREFIX + "client"
VERSIONED_STATE_LABELS = ((CLIENT_LABEL, (26, 7)),)


# A GPU Operator chart version (v26.3.2, 26.7.0, v26.7.0-rc.1): operator_values parses chart versions with it too.
CHART_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+][0-9A-Za-z.-]+)?$")


def operator_line(version):
    """``v26.7.0`` -> (26, 7); None for None or what is not a version (the model then is v26.3's)."""
    match = CHART_VERSION_RE.match(str(version or "").strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def extra_state_labels(version):
    """The deploy labels beside the operands' that the operator ``version`` writes on every GPU node."""
    line = operator_line(version)
    return tuple(key for key, since in VERSIONED_STATE_LABELS if line is not None and line >= since)


# Chart defaults of the values that decide the model (chart v26.3.2).
CHART_DEFAULTS = {
    "namespace": DEFAULT_NAMESPACE,
    "sandbox_workloads_enabled": False,
    "default_workload": CONTAINER,
    "sandbox_mode": SANDBOX_MODE_KUBEVIRT,
    "driver_enabled": True,
    "toolkit_enabled": True,
    "operands_enabled": dict((o.name, o.enabled_by_default) for o in OPERANDS),
}


def operand(name):
    """The Operand called ``name``; KeyError names the unknown operand."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError("unknown operand %r (known: %s)" % (name, ", ".join(OPERAND_NAMES)))


# DaemonSets and pod ``app`` labels the operator derives from an operand's own name:
# precompiled drivers get one DaemonSet per kernel and OS, nvidia-driver-daemonset-<kernel>-<os>
# (transformPrecompiledDriverDaemonset; its pods keep app=nvidia-driver-daemonset), the
# OpenShift driver toolkit one per RHCOS version (transformOpenShiftDriverToolkitContainer,
# pods app=<DaemonSet name>), and the NVIDIADriver CRD's controller one per node pool named
# nvidia-<driver type>-driver-<os>-<hash> (internal/state/driver.go getDriverAppName; the
# vgpu-host-manager type selects deploy.vgpu-manager, the others deploy.driver).
_DERIVED_NAMES = (
    (re.compile(r"^nvidia-driver-daemonset-."), "driver"),
    (re.compile(r"^nvidia-vgpu-manager-daemonset-."), "vgpu-manager"),
    (re.compile(r"^nvidia-vgpu-host-manager-driver-."), "vgpu-manager"),
    (re.compile(r"^nvidia-(gpu|vgpu)-driver-."), "driver"),
)


def _derived_operand(name):
    for pattern, operand_name in _DERIVED_NAMES:
        if name and pattern.match(name):
            return _BY_NAME[operand_name]
    return None


def operand_for_daemonset(daemonset_name):
    """The Operand a DaemonSet belongs to, or None: its own DaemonSet, and the driver's
    per-kernel (precompiled), per-RHCOS and NVIDIADriver-CRD variants."""
    return _BY_DAEMONSET.get(daemonset_name) or _derived_operand(daemonset_name)


def sanitized_kernel_version(kernel):
    """A kernel version as the operator puts it into a precompiled driver DaemonSet's name:
    arch dropped, ``_`` to ``.``, one trailing ``.`` trimmed, lower case
    (object_controls.go getSanitizedKernelVersion)."""
    version = re.sub(r"x86_64(?:_64k)?|aarch64(?:_64k)?", "", kernel).replace("_", ".")
    if version.endswith("."):
        version = version[:-1]
    return version.lower()


def precompiled_driver_daemonset(kernel, os_tag):
    """``nvidia-driver-daemonset-<kernel>-<os>``: the precompiled driver DaemonSet of one
    kernel (``feature.node.kubernetes.io/kernel-version.full``) and OS tag (``ubuntu22.04``)."""
    return "%s-%s-%s" % (operand("driver").daemonset, sanitized_kernel_version(kernel), os_tag)


def deploy_label(name):
    """The deploy label the operand's DaemonSet selects. For the MPS control daemon that is
    the device plugin's: it has no switch of its own (see has_own_deploy_label)."""
    return operand(name).deploy_label


def has_own_deploy_label(name):
    """Whether ``nvidia.com/gpu.deploy.<name>`` switches this operand, and only it, on or off."""
    return operand(name).deploy_label == DEPLOY_LABEL_PREFIX + name


def node_selector(operand_):
    """The nodeSelector of the operand's DaemonSet, as a dict."""
    selector = {operand_.deploy_label: DEPLOY_TRUE}
    if operand_.capability_label:
        selector[operand_.capability_label] = "true"
    return selector


def _runs_in_mode(operand_, mode):
    return operand_.sandbox_modes is None or (mode or SANDBOX_MODE_KUBEVIRT) in operand_.sandbox_modes


def operands_for_workload(config, mode=None):
    """Operands of one workload config, in controller order; with ``mode`` (a
    sandboxWorkloads.mode) only those the operator deploys in that mode."""
    if config not in WORKLOAD_CONFIGS:
        raise ValueError("unknown workload config %r (one of: %s)" % (config, ", ".join(WORKLOAD_CONFIGS)))
    return tuple(o for o in OPERANDS if config in o.workload_configs and (mode is None or _runs_in_mode(o, mode)))


def resource_plugin(config, policy_=None):
    """The operand that advertises a node's resources under ``policy_``'s sandbox mode
    (kubevirt when not given), or None: in kata mode a vm-vgpu node gets no device plugin."""
    mode = (policy_ or {}).get("sandbox_mode") or SANDBOX_MODE_KUBEVIRT
    return (_KATA_RESOURCE_PLUGIN if mode == SANDBOX_MODE_KATA else RESOURCE_PLUGIN)[config]


def pod_matches(operand_, pod_labels):
    key, value = operand_.pod_selector
    return (pod_labels or {}).get(key) == value


def operand_of_pod(pod_labels):
    """Which operand a pod belongs to, from its labels; None for other pods. Driver pods of
    the per-RHCOS and NVIDIADriver-CRD DaemonSets carry ``app=<their DaemonSet's name>``."""
    for o in OPERANDS:
        if pod_matches(o, pod_labels):
            return o
    return _derived_operand((pod_labels or {}).get("app"))


def is_gpu_node(labels):
    """The operator's own test (state_manager.go hasGPULabels): one of the NFD PCI labels
    of vendor 0x10de is "true". ``nvidia.com/gpu.present=true`` alone is not enough: the
    operator flips it to false, and strips the deploy labels, when the NFD labels go."""
    labels = labels or {}
    return any(labels.get(key) == "true" for key in NFD_GPU_LABELS)


def has_mig_capable_gpu(labels):
    """state_manager.go hasMIGCapableGPU: no on a vGPU host (the vgpu host driver label is
    set); else the ``nvidia.com/mig.capable`` label decides when present; else the product
    name (``nvidia.com/gpu.product``) names an H100, A100 or A30."""
    labels = labels or {}
    if labels.get(VGPU_HOST_DRIVER_LABEL):
        return False
    if MIG_CAPABLE_LABEL in labels:
        return labels[MIG_CAPABLE_LABEL] == "true"
    product = (labels.get(GPU_PRODUCT_LABEL) or "").lower()
    return any(name in product for name in MIG_CAPABLE_PRODUCTS)


def _lookup(mapping, path, default):
    for key in path.split("."):
        if not isinstance(mapping, dict) or key not in mapping:
            return default
        mapping = mapping[key]
    return mapping


def _apply_sandbox_rule(enabled, sandbox, mode=SANDBOX_MODE_KUBEVIRT):
    """The operator deploys no sandbox operand while sandbox workloads are off, and none
    outside its sandbox mode (state_manager.go isStateEnabled)."""
    for o in OPERANDS:
        if (not sandbox and CONTAINER not in o.workload_configs) or not _runs_in_mode(o, mode):
            enabled[o.name] = False
    return enabled


def policy_from_spec(spec, namespace=None, operator_version=None):
    """The settings that decide the model, from chart VALUES (what the role renders;
    a ClusterPolicy spec shares their keys) of the chart ``operator_version``. Missing
    keys take the chart defaults. For a live ClusterPolicy use policy_from_cluster_policy."""
    return policy(spec=spec, overrides={"namespace": namespace, "operator_version": operator_version})


policy_from_values = policy_from_spec


def policy_from_cluster_policy(spec, namespace=None, overrides=None):
    """The settings that decide the model, read from a LIVE ClusterPolicy's spec as the
    operator reads it: no chart default is filled in (see policy(live=True))."""
    overrides = dict(overrides or {})
    if overrides.get("namespace") is None:
        overrides["namespace"] = namespace
    return policy(overrides, spec, live=True)


def _enabled(operand_, spec, live):
    if operand_.enabled_if_unset is None:
        # The validators have no switch: always on (the sandbox rule turns the sandbox one off).
        return True
    value = _lookup(spec, operand_.values_key + ".enabled", None)
    if value is None:
        return operand_.enabled_if_unset if live else operand_.enabled_by_default
    return bool(value)


def policy(overrides=None, spec=None, live=False):
    """A policy from a ClusterPolicy spec (or chart values) with explicit overrides on
    top; keys of ``overrides`` whose value is None are ignored. Derived flags (the
    driver and toolkit operands, the sandbox operands, the MPS control daemon that comes
    with the device plugin) follow the overrides.

    ``live=False`` (chart values): a missing ``<key>.enabled`` takes the chart default.
    ``live=True`` (a ClusterPolicy in the cluster): it takes the operator's ``IsEnabled()``
    default (api/nvidia/v1/clusterpolicy_types.go): false for nodeStatusExporter,
    vgpuManager, vgpuDeviceManager, vfioManager, sandboxDevicePlugin,
    kataSandboxDevicePlugin, kataManager and ccManager, true for driver, toolkit,
    devicePlugin, dcgm, dcgmExporter, gfd and migManager; the CRD's defaults (mode
    kubevirt, defaultWorkload container, vgpuDeviceManager.config.default "default",
    migManager.config.default all-disabled) apply as the API server applies them."""
    spec = spec or {}
    enabled = dict((o.name, _enabled(o, spec, live)) for o in OPERANDS)
    mig_config = _lookup(spec, "migManager.config", None)
    if live:
        # The operator writes mig.config only when migManager.config is set and its default is
        # all-disabled; the CRD fills a missing default with all-disabled.
        mig_default = (mig_config.get("default") or MIG_CONFIG_DISABLED) if isinstance(mig_config, dict) else None
    else:
        mig_default = _lookup(spec, "migManager.config.default", MIG_CONFIG_DISABLED)
    result = {
        "namespace": DEFAULT_NAMESPACE,
        # The operator's version (v26.7.0), where known: what it writes beyond v26.3 (extra_state_labels).
        "operator_version": None,
        "sandbox_workloads_enabled": bool(_lookup(spec, "sandboxWorkloads.enabled",
                                                  CHART_DEFAULTS["sandbox_workloads_enabled"])),
        "default_workload": _lookup(spec, "sandboxWorkloads.defaultWorkload", CONTAINER) or CONTAINER,
        "sandbox_mode": _lookup(spec, "sandboxWorkloads.mode", SANDBOX_MODE_KUBEVIRT) or SANDBOX_MODE_KUBEVIRT,
        "driver_enabled": enabled["driver"],
        "toolkit_enabled": enabled["container-toolkit"],
        "operands_enabled": enabled,
        "mig_config_default": mig_default,
        # object_controls.go TransformVGPUDeviceManager: the ConfigMap and the config a node
        # without nvidia.com/vgpu.config gets.
        "vgpu_devices_configmap": _lookup(spec, "vgpuDeviceManager.config.name", "") or VGPU_DEVICES_CONFIGMAP,
        "vgpu_default_config": _lookup(spec, "vgpuDeviceManager.config.default", "") or VGPU_DEFAULT_CONFIG,
    }
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in result:
            raise KeyError("unknown policy key %r" % key)
        result[key] = value
    enabled = dict(result["operands_enabled"])
    enabled["driver"] = bool(result["driver_enabled"])
    enabled["container-toolkit"] = bool(result["toolkit_enabled"])
    # isStateEnabled "state-mps-control-daemon": DevicePlugin.IsEnabled().
    enabled["mps-control-daemon"] = bool(enabled.get("device-plugin"))
    result["operands_enabled"] = _apply_sandbox_rule(enabled, result["sandbox_workloads_enabled"],
                                                     result["sandbox_mode"])
    return result


def effective_workload_config(labels, policy_):
    """(config, label_value): the workload config the operator applies to a node.

    Sandbox workloads off: every node is ``container`` and the label is never read.
    On: a valid label decides; a node without it, or with a value the operator does not
    know, gets the default workload (``container`` when that is not valid either), as
    the operator does (state_manager.go getWorkloadConfig). The label value is returned
    so callers can report it."""
    labels = labels or {}
    value = labels.get(WORKLOAD_CONFIG_LABEL)
    if not policy_["sandbox_workloads_enabled"]:
        return CONTAINER, value
    if value in WORKLOAD_CONFIGS:
        return value, value
    default = policy_["default_workload"]
    return (default if default in WORKLOAD_CONFIGS else CONTAINER), value


def not_applicable_reason(operand_, labels, policy_, config):
    """Why an operand is not part of a node (its state would be ``n/a``), as a phrase, or
    None when it is."""
    labels = labels or {}
    if config not in operand_.workload_configs:
        return "the node's workload config %s does not run it" % config
    mode = (policy_ or {}).get("sandbox_mode") or SANDBOX_MODE_KUBEVIRT
    if not _runs_in_mode(operand_, mode):
        return "the operator deploys it only with sandboxWorkloads.mode %s (the mode is %s)" % (
            " or ".join(operand_.sandbox_modes), mode)
    if operand_.capability_label and labels.get(operand_.capability_label) != "true":
        return "the node lacks %s=true" % operand_.capability_label
    if operand_.name == "mig-manager" and operand_.deploy_label not in labels and not has_mig_capable_gpu(labels):
        return "the node has no MIG-capable GPU (%s, %s, %s)" % (
            VGPU_HOST_DRIVER_LABEL, MIG_CAPABLE_LABEL, GPU_PRODUCT_LABEL)
    return None


def operand_state_on_node(operand_, labels, policy_, config):
    """How one operand stands on one node, from labels and policy alone:

    ``expected``   it should run there;
    ``host``       the host provides it (disabled cluster-wide, or pre-installed/false
                   for a host-providable operand): dependants are satisfied;
    ``off``        switched off by its deploy label;
    ``disabled``   not enabled in the policy;
    ``n/a``        not part of this node's workload config, sandbox mode or capability
                   (not_applicable_reason says which);
    ``isolated``   the node has ``gpu.deploy.operands=false``.
    """
    labels = labels or {}
    if labels.get(OPERANDS_LABEL) == DEPLOY_FALSE:
        return "isolated"
    if not_applicable_reason(operand_, labels, policy_, config):
        return "n/a"
    if not policy_["operands_enabled"].get(operand_.name, operand_.enabled_by_default):
        return "host" if operand_.name in HOST_PROVIDABLE else "disabled"
    value = labels.get(operand_.deploy_label)
    # Absent: the operator sets it to "true" on its next reconcile of this node.
    if value is None or value == DEPLOY_TRUE:
        return "expected"
    if operand_.name in HOST_PROVIDABLE:
        return "host"
    return "off"


def expected_operands(labels, policy_):
    """Operands that should run on a node (controller order); empty for non-GPU nodes."""
    if not is_gpu_node(labels):
        return ()
    config = effective_workload_config(labels, policy_)[0]
    return tuple(o.name for o in OPERANDS
                 if operand_state_on_node(o, labels, policy_, config) == "expected")


def dependency_chain(name):
    """All operands ``name`` depends on, transitively, dependencies first."""
    seen = []

    def visit(n):
        for dep in operand(n).depends_on:
            if dep not in seen:
                visit(dep)
                seen.append(dep)

    visit(name)
    return tuple(seen)


def chain_for_workload(config, mode=None):
    """The order operands come up in on a node of ``config``: a topological order of
    that config's operands (those of ``mode`` when given) that keeps controller order
    among independent ones."""
    members = [o.name for o in operands_for_workload(config, mode)]
    ordered = []
    for name in members:
        for dep in dependency_chain(name):
            if dep in members and dep not in ordered:
                ordered.append(dep)
        if name not in ordered:
            ordered.append(name)
    return tuple(ordered)


def state_label_operands(config, mode=None):
    """The operands whose deploy labels the operator writes on a GPU node of ``config``
    in ``mode`` (state_manager.go getEffectiveStateLabels), controller order."""
    names = list(STATE_LABEL_OPERANDS[config])
    if config == VM_PASSTHROUGH and (mode or SANDBOX_MODE_KUBEVIRT) == SANDBOX_MODE_KATA:
        names = [n for n in names if n != "sandbox-device-plugin"] + ["kata-sandbox-device-plugin"]
    return tuple(o.name for o in OPERANDS if o.name in names)


def deploy_labels_for(config, labels, policy_):
    """The deploy labels the operator would leave on a GPU node, as a dict.

    The labels of ``config`` (and of its sandbox mode) become "true" unless already set:
    an existing value wins, whoever wrote it. mig-manager's label is added on a container
    node with a MIG-capable GPU and kept there once set. Deploy labels that belong only
    to other configs are dropped; ``operands=false`` strips them all. The operator writes
    no other value: never ``pre-installed``, not even with driver.enabled=false
    (state_manager.go addGPUStateLabels, removeGPUStateLabels)."""
    labels = labels or {}
    if labels.get(OPERANDS_LABEL) == DEPLOY_FALSE:
        return {}
    mode = policy_.get("sandbox_mode") or SANDBOX_MODE_KUBEVIRT
    names = set(state_label_operands(config, mode))
    mig = operand("mig-manager").deploy_label
    result = {}
    for o in OPERANDS:
        key = o.deploy_label
        if o.name in names:
            result[key] = labels.get(key, DEPLOY_TRUE)
        elif o.name == "mig-manager" and config == CONTAINER and (mig in labels or has_mig_capable_gpu(labels)):
            result[key] = labels.get(key, DEPLOY_TRUE)
    for key in extra_state_labels(policy_.get("operator_version")):
        result[key] = labels.get(key, DEPLOY_TRUE)
    return result


def mig_config_label_for(labels, policy_):
    """``{nvidia.com/mig.config: all-disabled}`` when the operator writes it on a GPU node,
    else {}: migManager enabled, a MIG-capable GPU, no mig.config yet, and
    migManager.config.default all-disabled (state_manager.go labelGPUNodes; it checks
    neither the workload config nor gpu.deploy.operands)."""
    labels = labels or {}
    if (policy_["operands_enabled"].get("mig-manager") and has_mig_capable_gpu(labels)
            and not labels.get(MIG_CONFIG_LABEL) and policy_.get("mig_config_default") == MIG_CONFIG_DISABLED):
        return {MIG_CONFIG_LABEL: MIG_CONFIG_DISABLED}
    return {}


# Every deploy label the operator removes when it no longer belongs (removeGPUStateLabels,
# removeAllGPUStateLabels): those of the operands with a label of their own. Other
# nvidia.com/gpu.deploy.* keys are not the operator's and stay.
STATE_LABELS = tuple(o.deploy_label for o in OPERANDS if o.deploy_label == DEPLOY_LABEL_PREFIX + o.name)


def operator_node_labels(labels, policy_):
    """Every label the operator itself writes on a node from its current labels, as a
    dict (None: removed): nvidia.com/gpu.present, the deploy labels, mig.config.

    A GPU node gets gpu.present=true, its deploy labels (deploy_labels_for; its other
    state labels removed) and mig.config (mig_config_label_for); a node that has lost its
    NFD GPU labels but still says gpu.present=true gets it set to false and every state
    label removed; any other node is left alone (state_manager.go labelGPUNodes)."""
    labels = labels or {}
    result = {}
    state_labels = STATE_LABELS + extra_state_labels(policy_.get("operator_version"))
    if is_gpu_node(labels):
        config = effective_workload_config(labels, policy_)[0]
        result[GPU_PRESENT_LABEL] = "true"
        desired = deploy_labels_for(config, labels, policy_)
        result.update(desired)
        result.update(mig_config_label_for(labels, policy_))
        result.update((key, None) for key in state_labels if key in labels and key not in desired)
    elif labels.get(GPU_PRESENT_LABEL) == "true":
        result[GPU_PRESENT_LABEL] = "false"
        result.update((key, None) for key in state_labels if key in labels)
    return result


# ---------------------------------------------------------------- resource names

# Characters kubevirt-gpu-device-plugin's getDeviceName keeps, and Go's regexp \s (RE2:
# ASCII blanks only), and the runes Go's strings.TrimSpace trims (unicode.IsSpace).
_DEVICE_NAME_DROP = re.compile(r"[^a-zA-Z0-9_.]+")
_GO_BLANKS = re.compile(r"[\t\n\f\r ]+")
_GO_SPACE = u"\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            u"\u2028\u2029\u202f\u205f\u3000"


def _go_upper(text):
    # Go's strings.ToUpper maps rune to rune; Python's str.upper may expand (ß -> SS).
    return "".join(c.upper() if len(c.upper()) == 1 else c for c in text)


def passthrough_device_name(pci_device_name):
    """kubevirt-gpu-device-plugin v1.5.0 ``getDeviceName``, exactly: TrimSpace, upper
    case, ``/`` and ``.`` to ``_``, each run of blanks to one ``_``, then every character
    outside ``[a-zA-Z0-9_.]`` dropped. Hyphens and brackets go, runs of ``_`` stay,
    nothing is trimmed after: ``GH100 [GH200 120GB / 480GB]`` -> ``GH100_GH200_120GB___480GB``."""
    name = _go_upper(pci_device_name.strip(_GO_SPACE))
    name = name.replace("/", "_").replace(".", "_")
    name = _GO_BLANKS.sub("_", name)
    return _DEVICE_NAME_DROP.sub("", name)


def passthrough_resource_name(pci_device_name):
    """``GA102GL [A10]`` -> ``nvidia.com/GA102GL_A10``: the resource the sandbox device
    plugin advertises for a passthrough GPU, and the ``resourceName`` KubeVirt must permit
    (passthrough_device_name)."""
    return RESOURCE_PREFIX + passthrough_device_name(pci_device_name)


def vgpu_resource_name(vgpu_type):
    """``NVIDIA A10-12Q`` -> ``nvidia.com/NVIDIA_A10-12Q``."""
    return RESOURCE_PREFIX + vgpu_type.strip().replace(" ", "_")


def vgpu_type_name(profile):
    """A vGPU profile (``A10-12Q``) as the vGPU type the node advertises (``NVIDIA A10-12Q``)."""
    return profile if profile.upper().startswith(("NVIDIA ", "GRID ")) else "NVIDIA " + profile


# A vGPU profile: <board>-<frame buffer GB><series> (A10-12Q), MIG-backed
# <board>-<slices>-<frame buffer GB><series>[ME] (A100-1-5C, A100-1-5CME).
_VGPU_PROFILE_RE = re.compile(r"^(?P<board>.+?)-(?:(?P<slices>\d+)-)?(?P<fb>\d+)[ABCQ](?P<me>ME)?$")


def is_vgpu_profile(name):
    """Whether ``name`` is a vGPU profile (``A10-12Q``, ``A100-1-5CME``) rather than some
    other config name of the vGPU device manager's ConfigMap."""
    return bool(_VGPU_PROFILE_RE.match(name or ""))


def vgpu_profile_board(profile):
    """``A10-12Q`` -> ``A10``, ``A100-1-5C`` -> ``A100``; None for a name that is no profile."""
    match = _VGPU_PROFILE_RE.match(profile or "")
    return match.group("board") if match else None


def vgpu_count(profile, card_memory_gb, cards):
    """How many vGPUs of a time-sliced ``profile`` ``cards`` cards give: memory per card
    over the profile's frame buffer (``A10-12Q``: 12 GB), times cards. (A MIG-backed
    profile's count follows the MIG geometry: the ConfigMap knows it, see
    resolve_vgpu_config.)"""
    match = re.search(r"-(\d+)[ABCQ]$", profile)
    if not match:
        raise ValueError("not a vGPU profile: %r (expected e.g. A10-12Q)" % profile)
    return (card_memory_gb // int(match.group(1))) * cards


def effective_vgpu_config(labels, policy_=None):
    """The vGPU device manager config a vm-vgpu node gets: its ``nvidia.com/vgpu.config``,
    else the policy's default config (``default``)."""
    return (labels or {}).get(VGPU_CONFIG_LABEL) or (policy_ or {}).get("vgpu_default_config") or VGPU_DEFAULT_CONFIG


def vgpu_device_configs(config_file):
    """The ``vgpu-configs`` map (config name -> [entry]) of a vGPU device manager config
    file (the ConfigMap's ``config.yaml``, parsed). ValueError on another shape."""
    if not isinstance(config_file, dict) or not isinstance(config_file.get("vgpu-configs"), dict):
        raise ValueError("not a vGPU device manager config: expected a map with version: v1 and vgpu-configs")
    return config_file["vgpu-configs"]


def _pci_filter_id(device_id):
    """``10DE:2236`` or ``0x223610DE`` -> ``0X223610DE`` (the device-filter form: device id,
    then vendor id)."""
    text = str(device_id).strip().upper()
    if ":" in text:
        vendor, device = text.split(":", 1)
        return "0X%s%s" % (device, vendor)
    return text if text.startswith("0X") else "0X" + text


def _entry_filters(entry):
    value = entry.get("device-filter")
    if value is None:
        return None
    return [_pci_filter_id(v) for v in (value if isinstance(value, list) else [value])]


def resolve_vgpu_config(name, vgpu_configs=None, device_id=None, cards=None, memory_gb=None,
                        configmap=VGPU_DEVICES_CONFIGMAP):
    """The vGPU devices the vGPU device manager creates on a node for the config ``name``
    (the node's ``nvidia.com/vgpu.config``, a config NAME of the ConfigMap ``configmap``).

    Returns ``{"config", "devices", "source"}``: ``devices`` maps each vGPU profile to how
    many the node gets (None where that is not known), or is None when nothing is known.

    * ``vgpu_configs`` known (vgpu_device_configs of the ConfigMap): the config's entries
      that apply to the card (no device-filter, or one naming ``device_id``, like
      ``10DE:2236``; with no device_id every entry applies and filtered ones count None),
      their per-card counts times the cards they cover (``devices: all`` -> ``cards``).
      A name the ConfigMap lacks is refused: ValueError naming the ConfigMap.
    * unknown: a plain profile (``A10-12Q``) still resolves, as the default ConfigMap
      names a config after each profile; its count follows the card's memory
      (vgpu_count) for a time-sliced profile with ``memory_gb`` and ``cards`` known.
      Any other name is returned unresolved (``devices`` None): only the ConfigMap can say."""
    if vgpu_configs is not None:
        if name not in vgpu_configs:
            known = sorted(vgpu_configs)
            shown = ", ".join(known[:12]) + (", ... (%d more)" % (len(known) - 12) if len(known) > 12 else "")
            raise ValueError("%s=%s: the vGPU device manager's ConfigMap %s has no config %r (its configs: %s)"
                             % (VGPU_CONFIG_LABEL, name, configmap, name, shown or "none"))
        wanted = _pci_filter_id(device_id) if device_id else None
        devices = {}
        for entry in vgpu_configs[name] or ():
            if not isinstance(entry, dict):
                continue
            filters = _entry_filters(entry)
            if filters is not None and wanted is not None and wanted not in filters:
                continue
            covered = entry.get("devices", "all")
            if covered == "all":
                covered = cards
            elif isinstance(covered, list):
                covered = len(covered)
            else:
                covered = None
            for profile, per_card in sorted((entry.get("vgpu-devices") or {}).items()):
                count = None
                if filters is None or wanted is not None:
                    if isinstance(per_card, int) and isinstance(covered, int):
                        count = per_card * covered
                if profile in devices:
                    count = None if count is None or devices[profile] is None else devices[profile] + count
                devices[profile] = count
        return {"config": name, "devices": devices, "source": configmap}
    match = _VGPU_PROFILE_RE.match(name or "")
    if not match:
        return {"config": name, "devices": None, "source": None}
    count = None
    if not match.group("slices") and not match.group("me") and isinstance(memory_gb, int) and isinstance(cards, int):
        count = vgpu_count(name, memory_gb, cards)
    return {"config": name, "devices": {name: count}, "source": "profile"}


# Resources of this model's operands (kubevirt mode), by the names they use:
#  container: the device plugin's nvidia.com/gpu, gpu.shared (time-slicing/MPS rename),
#    mig-<g>g.<mem>gb[+me][.shared] (MIG mixed strategy);
#  vm-vgpu: the sandbox device plugin's vGPU type name with blanks to "_" (NVIDIA_A10-12Q,
#    GRID_T4-16Q, NVIDIA_A100-1-5CME): a type prefix and a -<frame buffer><series> tail;
#  vm-passthrough: getDeviceName's alphabet after upper-casing ([A-Z0-9_], no hyphen), or
#    the bare PCI device id when pci.ids does not know the card.
# Any other nvidia.com/* name (the network operator's hostdev or rdma_shared_device_a, a
# custom rename) is not this model's: resource_workload_config gives None.
_CONTAINER_RESOURCE_RE = re.compile(r"^(?:gpu|mig-\d+g\.\d+gb(?:\+[a-z]+)*)(?:\.shared)?$")
_VGPU_RESOURCE_RE = re.compile(r"^(?:NVIDIA|GRID)_\S+-\d+[ABCQ](?:ME)?$")
_PASSTHROUGH_RESOURCE_RE = re.compile(r"^(?:[A-Z0-9_]+|[0-9a-f]{4})$")


def resource_workload_config(resource_name):
    """Which workload config advertises a resource, by the GPU Operator's own names, or
    None for a resource no operand of this model advertises (not ``nvidia.com/``, or an
    ``nvidia.com/`` name of another NVIDIA component)."""
    if not resource_name.startswith(RESOURCE_PREFIX):
        return None
    short = resource_name[len(RESOURCE_PREFIX):]
    if _CONTAINER_RESOURCE_RE.match(short):
        return CONTAINER
    if _VGPU_RESOURCE_RE.match(short):
        return VM_VGPU
    if _PASSTHROUGH_RESOURCE_RE.match(short):
        return VM_PASSTHROUGH
    return None


def is_gpu_operator_resource(resource_name):
    """Whether an operand of this model advertises the resource (resource_workload_config)."""
    return resource_workload_config(resource_name) is not None


def _counts(resources, keep):
    result = {}
    for key, value in (resources or {}).items():
        if not keep(key):
            continue
        try:
            count = int(str(value))
        except ValueError:
            continue
        if count > 0:
            result[key] = count
    return result


def gpu_resources(resources):
    """The GPU Operator's resources of a capacity or allocatable map, as ints, zero
    dropped; other ``nvidia.com/*`` resources are left out (other_nvidia_resources)."""
    return _counts(resources, is_gpu_operator_resource)


def other_nvidia_resources(resources):
    """The ``nvidia.com/*`` entries of a capacity or allocatable map that no operand of
    this model advertises, as ints, zero dropped: to report, never to judge a GPU node by."""
    return _counts(resources, lambda key: key.startswith(RESOURCE_PREFIX) and not is_gpu_operator_resource(key))


# ---------------------------------------------------------------- ClusterPolicy status

def _condition(cluster_policy, kind):
    for condition in ((cluster_policy or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return condition
    return {}


def cluster_policy_status(cluster_policy):
    """What a ClusterPolicy's status says, in the operator's words:
    ``{"state", "ready", "reason", "message", "error_reason", "operands_reconciled"}``.

    ``ready`` is the Ready condition (True/False/None when absent); ``operands_reconciled``
    is true only for state ready with Ready=True reason Reconciled: Ready=True with
    NoGPUNodes or NFDLabelsMissing says nothing about operands. On failure Ready=False has
    reason Error and the Error condition's reason (ReconcileFailed, OperandNotReady) is
    ``error_reason``."""
    status = (cluster_policy or {}).get("status") or {}
    ready = _condition(cluster_policy, CONDITION_READY)
    error = _condition(cluster_policy, CONDITION_ERROR)
    ready_status = {"True": True, "False": False}.get(ready.get("status"))
    return {
        "state": status.get("state"),
        "ready": ready_status,
        "reason": ready.get("reason"),
        "message": ready.get("message") or (error.get("message") if ready_status is False else None),
        "error_reason": error.get("reason") if error.get("status") == "True" else None,
        "operands_reconciled": (status.get("state") == CLUSTER_POLICY_READY and ready_status is True
                                and ready.get("reason") == REASON_RECONCILED),
    }


# ---------------------------------------------------------------- taints

def tolerates(tolerations, taint):
    """Kubernetes toleration semantics for one taint (NoSchedule/NoExecute only)."""
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True
    for tol in tolerations or ():
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        key = tol.get("key")
        op = tol.get("operator", "Equal")
        if not key and op == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if op == "Exists" or tol.get("value", "") == taint.get("value", ""):
            return True
    return False


DEFAULT_OPERAND_TOLERATIONS = ({"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},)
# The DaemonSet controller adds these tolerations to every DaemonSet pod by itself.
DAEMONSET_AUTO_TOLERATIONS = tuple(
    {"key": "node.kubernetes.io/" + key, "operator": "Exists", "effect": effect}
    for key, effect in (("not-ready", "NoExecute"), ("unreachable", "NoExecute"), ("disk-pressure", "NoSchedule"),
                        ("memory-pressure", "NoSchedule"), ("pid-pressure", "NoSchedule"),
                        ("unschedulable", "NoSchedule"))
)


def untolerated_taints(node_taints, tolerations=DEFAULT_OPERAND_TOLERATIONS):
    """Taints of a node that keep the operand DaemonSets' pods off it."""
    allowed = tuple(tolerations or ()) + DAEMONSET_AUTO_TOLERATIONS
    return [t for t in (node_taints or ()) if not tolerates(allowed, t)]


# Precompiled drivers and nodes without a driver container. With driver.usePrecompiled the
# operator makes one driver DaemonSet per (kernel, OS) of every node labelled gpu.present=true,
# whatever its deploy.driver (controllers/object_controls.go getKernelVersionsMap, called from
# state_manager.go init on every reconcile), and each pass first deletes every precompiled
# DaemonSet that wants no pod and has none misscheduled (cleanupStalePrecompiledDaemonsets),
# then creates the per-kernel ones again (precompiledDriverDaemonsets). A kernel that only
# nodes without a driver container run (a host with its own driver such as a DGX Spark, a
# vm-* node, a node whose driver is switched off or whose taint the DaemonSet does not
# tolerate) therefore gets a DaemonSet that is created and deleted on every pass: the
# operator never stops reconciling, while its ClusterPolicy says ready (isDaemonSetReady
# calls a DaemonSet that wants no pod ready, even one it cannot find). Read in the v26.3.2,
# v26.3.3 and v26.7.0 sources; the functions are the same in all three.
PRECOMPILED_SOURCE = ("NVIDIA/gpu-operator controllers/object_controls.go getKernelVersionsMap, "
                      "cleanupStalePrecompiledDaemonsets, precompiledDriverDaemonsets (v26.3.2 to v26.7.0)")


def precompiled_driver_groups(nodes):
    """The precompiled driver DaemonSets the operator makes for ``nodes``: an iterable of
    ``{"name", "kernel", "os_tag", "driver"}``, one per GPU node (gpu.present=true), with
    ``driver`` true where the driver DaemonSet places a pod (deploy.driver=true and every taint
    tolerated). Nodes without a kernel are left out (the operator refuses them: NFD missing).

    Returns ``[{"daemonset", "kernel", "os_tag", "driver_nodes", "other_nodes", "churns"}]``
    sorted by DaemonSet name; ``churns`` is true where no node of that kernel and OS runs the
    driver container: the operator deletes that DaemonSet as stale and creates it again on
    every reconcile."""
    groups = {}
    for node in nodes:
        if not node.get("kernel"):
            continue
        key = (node["kernel"], node.get("os_tag") or "")
        group = groups.setdefault(key, {"daemonset": precompiled_driver_daemonset(*key), "kernel": key[0],
                                        "os_tag": key[1], "driver_nodes": [], "other_nodes": []})
        group["driver_nodes" if node.get("driver") else "other_nodes"].append(node["name"])
    for group in groups.values():
        group["driver_nodes"].sort()
        group["other_nodes"].sort()
        group["churns"] = not group["driver_nodes"]
    return sorted(groups.values(), key=lambda g: g["daemonset"])


def precompiled_churn_message(group):
    """Why the operator will never come to rest for one churning group of
    precompiled_driver_groups, and what a site can do about it."""
    return ("driver.usePrecompiled: %s (kernel %s) %s no driver container, and no node that runs one has that "
            "kernel: the GPU Operator still makes the precompiled driver DaemonSet %s for it (every gpu.present "
            "node's kernel counts), deletes it on its next pass because it wants no pod, and creates it again, "
            "so it never stops reconciling (its ClusterPolicy still says ready). Turn driver.usePrecompiled off "
            "(the driver container then builds for each node's kernel), or run a driver-container node on that "
            "kernel. Source: %s"
            % (", ".join(group["other_nodes"]), group["kernel"], "runs" if len(group["other_nodes"]) == 1 else "run",
               group["daemonset"], PRECOMPILED_SOURCE))
