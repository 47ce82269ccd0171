#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writes docs/operand-model.md from plugins/module_utils/operand_model.py, the one source
of truth; tests/unit/test_operand_docs.py keeps the committed file equal to render().

    gen-operand-docs.py            rewrite docs/operand-model.md
    gen-operand-docs.py --check    exit 1 when the committed file is out of date
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
if os.path.isdir(COLLECTIONS) and COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om  # noqa: E402

OUTPUT = os.path.join(ROOT, "docs", "operand-model.md")

# Examples that show each config's naming rule; the names come from operand_model's functions.
RESOURCE_EXAMPLES = {
    om.CONTAINER: (
        "`%s` (MIG mixed strategy: `nvidia.com/mig-<g>g.<mem>gb`; time-slicing with rename: `nvidia.com/gpu.shared`)"
        % om.CONTAINER_RESOURCE),
    om.VM_PASSTHROUGH: (
        "`nvidia.com/<PCI device name>` (see below), e.g. `GA102GL [A10]` -> `%s`"
        % om.passthrough_resource_name("GA102GL [A10]")),
    om.VM_VGPU: (
        "`nvidia.com/<vGPU type>` of the `%s` config, e.g. `A10-12Q` -> `%s` (%d on 2 x 24 GB cards)"
        % (om.VGPU_CONFIG_LABEL, om.vgpu_resource_name(om.vgpu_type_name("A10-12Q")), om.vgpu_count("A10-12Q", 24, 2))),
}
# pci.ids names that show each step of kubevirt-gpu-device-plugin's getDeviceName.
PASSTHROUGH_EXAMPLES = ("GA102GL [A10]", "GH100 [GH200 120GB / 480GB]", "GA100 [A800-SXM4-80GB]", "GH100 [H100 PCIe]")


# What operand_model.precompiled_driver_groups and gpu_operator_chart's warning stand on (issue 33).
PRECOMPILED_CHURN = [
    '### Precompiled drivers beside nodes without a driver container: the operator never comes to rest',
    '',
    'With `driver.usePrecompiled: true` the operator makes one driver DaemonSet per kernel and OS of **every** node labelled',
    '`nvidia.com/gpu.present=true`, whatever its `deploy.driver` (`controllers/object_controls.go`',
    '`getKernelVersionsMap`, called from `state_manager.go` `init` on every reconcile). Each pass first deletes every',
    'precompiled DaemonSet that wants no pod and has none misscheduled (`cleanupStalePrecompiledDaemonsets`:',
    '`desiredNumberScheduled == 0 && numberMisscheduled == 0`), then creates the per-kernel ones again',
    '(`precompiledDriverDaemonsets`). So a kernel that only nodes **without** a driver container run (a host with its own',
    'driver such as a DGX Spark, `deploy.driver=false`; a `vm-*` node; a node whose taint the DaemonSet does not tolerate)',
    'gets a DaemonSet that is created and deleted on every pass: the operator reconciles for ever (in the lab, about 2,600',
    '`Found Resource, updating...` lines and 250 `could not get daemonset ... not found` in 4 minutes), while its',
    'ClusterPolicy still says `ready`, because `isDaemonSetReady` calls a DaemonSet with no desired pod ready even when',
    'it cannot find it. The code is the same in v26.3.2, v26.3.3 and v26.7.0.',
    '',
    "This is the real operator's behaviour, not the lab's: the lab's nodes carry exactly the labels NFD and the operator",
    'put on a real node (`feature.node.kubernetes.io/kernel-version.full`, `gpu.present=true`), and the loop follows from',
    'the source lines above. The model says which DaemonSets churn (`operand_model.precompiled_driver_groups`: `churns`',
    'where no node of that kernel and OS runs the driver container), and `gpu_operator_chart` warns before the chart is',
    'delivered, naming each such node, its kernel and the DaemonSet, and the way out: turn `driver.usePrecompiled` off (the',
    "driver container builds for each node's kernel), or run a driver-container node on that kernel. It warns rather than",
    "refuses: the GPU layer works, the cost is the operator's constant writes. The conformance scenario",
    '`precompiled-driver` (with `gpu-spark-1` in the fleet) asserts the churn itself: such a DaemonSet is absent or, when',
    'present, exactly as the model says, and the real operator is seen creating and deleting it.',
]


def _operand_note(o):
    # Every note after the first starts with "only" (tests/unit/test_operand_docs.py splits on ", ").
    notes = []
    if not o.enabled_by_default:
        notes.append("off by default")
    if o.sandbox_modes:
        notes.append("only in %s mode" % " or ".join(o.sandbox_modes))
    if o.capability_label:
        notes.append("only where `%s=true`" % o.capability_label)
    if o.name == "mig-manager":
        notes.append("only on a MIG-capable GPU")
    return "%s (%s)" % (o.name, ", ".join(notes)) if notes else o.name


def _selector(o):
    return " + ".join("`%s=%s`" % kv if kv[0] != o.deploy_label else "`%s`" % kv[0]
                      for kv in sorted(om.node_selector(o).items(), key=lambda kv: kv[0] != o.deploy_label))


def _plugin_cell(config):
    kubevirt = om.resource_plugin(config, {"sandbox_mode": om.SANDBOX_MODE_KUBEVIRT})
    kata = om.resource_plugin(config, {"sandbox_mode": om.SANDBOX_MODE_KATA})
    return kubevirt if kata == kubevirt else "%s; kata mode: %s" % (kubevirt, kata or "none")


def _unset(o):
    if o.enabled_if_unset is None:
        return "always (no switch)"
    return "on" if o.enabled_if_unset else "off"


def _row(cells):
    return "| " + " | ".join(cells) + " |"


VERSIONED_LABEL_ON = "every GPU node, each workload config, `true` when absent; removed with the other deploy labels"


def render():
    lines = [
        "# Operand model",
        "",
        "Generated by `scripts/gen-operand-docs.py` from `plugins/module_utils/operand_model.py`;",
        "do not edit by hand (`make operand-docs` rewrites it, `tests/unit/test_operand_docs.py` fails when",
        "it is out of date).",
        "",
        "## Workload configs",
        "",
        "The value of `%s` on a GPU node decides its operands, but only while" % om.WORKLOAD_CONFIG_LABEL,
        "`sandboxWorkloads.enabled` is true: otherwise every node is `%s` and the label is never read." % om.CONTAINER,
        "A node without the label gets `sandboxWorkloads.defaultWorkload` (chart default `%s`)."
        % om.CHART_DEFAULTS["default_workload"],
        "Operands are listed in the order they come up on a node.",
        "",
        _row(("label value", "operands (in chain order)", "device plugin", "resource name")),
        _row(("---",) * 4),
    ]
    for config in om.WORKLOAD_CONFIGS:
        chain = ", ".join(_operand_note(om.operand(name)) for name in om.chain_for_workload(config))
        lines.append(_row(("`%s`" % config, chain, _plugin_cell(config), RESOURCE_EXAMPLES[config])))
    kata_only = [o.name for o in om.OPERANDS if o.sandbox_modes == (om.SANDBOX_MODE_KATA,)]
    kubevirt_only = [o.name for o in om.OPERANDS if o.sandbox_modes == (om.SANDBOX_MODE_KUBEVIRT,)]
    lines += [
        "",
        "`sandboxWorkloads.mode` (`%s` by default, or `%s`) decides the VM nodes' operands: %s runs only in"
        % (om.SANDBOX_MODE_KUBEVIRT, om.SANDBOX_MODE_KATA, ", ".join(kubevirt_only)),
        "%s mode, %s only in %s mode. In %s mode a vm-passthrough node runs %s, a vm-vgpu node runs no"
        % (om.SANDBOX_MODE_KUBEVIRT, ", ".join(kata_only), om.SANDBOX_MODE_KATA, om.SANDBOX_MODE_KATA,
           om.resource_plugin(om.VM_PASSTHROUGH, {"sandbox_mode": om.SANDBOX_MODE_KATA})),
        "device plugin at all, and cc-manager runs on every VM node (it is not gated on `%s`)." % om.CC_CAPABLE_LABEL,
        "mig-manager runs where the operator sets its deploy label: on a container node whose GPU is MIG-capable",
        "(`hasMIGCapableGPU`: never with `%s`; else `%s` when present; else `%s` names %s)."
        % (om.VGPU_HOST_DRIVER_LABEL, om.MIG_CAPABLE_LABEL, om.GPU_PRODUCT_LABEL,
           ", ".join(p.upper() for p in om.MIG_CAPABLE_PRODUCTS)),
        "",
        "## Operands",
        "",
        "Each operand is a DaemonSet in the operator's namespace (`%s` by default) whose pods run on nodes" % om.DEFAULT_NAMESPACE,
        "labelled `<deploy label>=%s`; any other value, or no label, keeps them off. `%s=%s` removes every"
        % (om.DEPLOY_TRUE, om.OPERANDS_LABEL, om.DEPLOY_FALSE),
        "deploy label from a node. Defaults are chart v26.3.2's `<values key>.enabled`; the last column is what a",
        "live ClusterPolicy without `<values key>.enabled` means to the operator (its `IsEnabled()`): chart defaults",
        "are not filled into a live ClusterPolicy.",
        "",
        _row(("operand", "deploy label", "DaemonSet", "pod selector", "depends on", "values key", "default",
              "layer", "workload configs", "sandbox mode", "unset in a ClusterPolicy")),
        _row(("---",) * 11),
    ]
    for o in om.OPERANDS:
        lines.append(_row((
            o.name,
            _selector(o),
            "`%s`" % o.daemonset,
            "`%s=%s`" % o.pod_selector,
            ", ".join(o.depends_on) or "-",
            "`%s`" % o.values_key,
            "on" if o.enabled_by_default else "off",
            o.layer,
            ", ".join(o.workload_configs),
            " or ".join(o.sandbox_modes) if o.sandbox_modes else "any",
            _unset(o),
        )))
    lines += [
        "",
        "The host may provide %s instead: `<values key>.enabled=false` (no DaemonSet; the operator still"
        % " and ".join("`%s`" % name for name in om.HOST_PROVIDABLE),
        "writes the deploy label `%s`), or on one node the deploy label `%s`, or for the driver `%s`, which"
        % (om.DEPLOY_TRUE, om.DEPLOY_FALSE, om.DEPLOY_PRE_INSTALLED),
        "k8s-driver-manager writes (so only with `driver.enabled=true`) where the host driver already works;",
        "what depends on them is then satisfied. The operator never writes `%s`." % om.DEPLOY_PRE_INSTALLED,
        "The diagnosis layers, bottom up: %s." % ", ".join(om.LAYERS),
        "",
        "The driver is also recognised in its variants: precompiled drivers run one DaemonSet per kernel and OS",
        "(e.g. `%s`, pods `app=%s`), and with the NVIDIADriver CRD the driver pods are labelled"
        % (om.precompiled_driver_daemonset("5.15.0-127-generic", "ubuntu22.04"), om.operand("driver").daemonset),
        "`app=nvidia-<type>-driver-<os>-<hash>` (`vgpu-host-manager` type: the vgpu-manager).",
        "",
    ] + PRECOMPILED_CHURN + [
        "",
        "## Node labels the operator writes",
        "",
        "A node is a GPU node when NFD sets one of %s to `true`; the operator then sets `%s=true`"
        % (", ".join("`%s`" % k for k in om.NFD_GPU_LABELS), om.GPU_PRESENT_LABEL),
        "(alone, that label makes no GPU node: the operator flips it to `false` and removes the deploy labels when",
        "the NFD labels go). On a GPU node it writes these deploy labels `%s` when absent, keeps any existing"
        % om.DEPLOY_TRUE,
        "value, and removes those of other configs:",
        "",
        _row(("workload config", "kubevirt mode", "kata mode")),
        _row(("---",) * 3),
    ]
    for config in om.WORKLOAD_CONFIGS:
        cells = ["`%s`" % config]
        for mode in om.SANDBOX_MODES:
            names = list(om.state_label_operands(config, mode))
            if config == om.CONTAINER:
                names.append("mig-manager (MIG-capable GPU)")
            cells.append(", ".join(names))
        lines.append(_row(cells))
    lines += [
        "",
        "It also writes `%s=%s` on a MIG-capable node without one (migManager enabled, its config default"
        % (om.MIG_CONFIG_LABEL, om.MIG_CONFIG_DISABLED),
        "`%s`). It never writes `%s`." % (om.MIG_CONFIG_DISABLED, om.DEPLOY_PRE_INSTALLED),
        "",
        "By operator line (`operand_model.VERSIONED_STATE_LABELS`; the model takes the line from the chart version,",
        "`policy_from_values(..., operator_version=...)`, and without one is v26.3's):",
        "",
        _row(("label", "written from", "on", "what selects on it")),
        _row(("---",) * 4),
    ] + [_row(("`%s`" % key, "v%d.%d" % since, VERSIONED_LABEL_ON, "no DaemonSet of the ClusterPolicy stack"))
         for key, since in om.VERSIONED_STATE_LABELS] + [
        "",
        "## Resource names",
        "",
        "Resources are classified by the names the operands advertise; an `nvidia.com/*` resource no operand of this",
        "model advertises (another NVIDIA component's, such as the network operator's `nvidia.com/hostdev`) is not",
        "a GPU Operator resource. Passthrough names follow kubevirt-gpu-device-plugin v1.5.0 `getDeviceName`",
        "exactly: the pci.ids name, TrimSpace, upper case, `/` and `.` to `_`, each run of blanks to one `_`, then",
        "every character outside `[a-zA-Z0-9_.]` dropped (hyphens and brackets go, runs of `_` stay, nothing is",
        "trimmed after). KubeVirt's `permittedHostDevices` uses the same names.",
        "",
        _row(("pci.ids name", "resource")),
        _row(("---",) * 2),
    ]
    for name in PASSTHROUGH_EXAMPLES:
        lines.append(_row(("`%s`" % name, "`%s`" % om.passthrough_resource_name(name))))
    lines += [
        "",
        "`%s` holds a config NAME of the vGPU device manager's ConfigMap (`%s`, or"
        % (om.VGPU_CONFIG_LABEL, om.VGPU_DEVICES_CONFIGMAP),
        "`vgpuDeviceManager.config.name`); a node without the label gets `vgpuDeviceManager.config.default`"
        " (`%s`)." % om.VGPU_DEFAULT_CONFIG,
        "The default file names a config after each profile (`A10-12Q`), but custom and MIG-backed names exist;",
        "the ConfigMap says which vGPU types and how many a config creates. `%s` (%s) says whether it"
        % (om.VGPU_CONFIG_STATE_LABEL, ", ".join("`%s`" % v for v in om.VGPU_CONFIG_STATES)),
        "was applied.",
        "",
        "## ClusterPolicy status",
        "",
        "`status.state` is %s (`ignored` is set in memory for a second ClusterPolicy, never saved)."
        % " or ".join("`%s`" % s for s in om.CLUSTER_POLICY_STATES),
        "`%s=True` comes with reason %s; only `%s` means the operands are up, and only in the sense"
        % (om.CONDITION_READY, ", ".join("`%s`" % r for r in om.READY_REASONS), om.REASON_RECONCILED),
        "that every enabled operand DaemonSet has `numberUnavailable == 0` (one that targets no node counts as ready).",
        "On failure: `%s=False` reason `%s`, and `%s=True` reason %s."
        % (om.CONDITION_READY, om.REASON_ERROR, om.CONDITION_ERROR, " or ".join("`%s`" % r for r in om.ERROR_REASONS)),
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true", help="only compare with the committed file")
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        with open(args.output) as handle:
            if handle.read() != text:
                print("%s is out of date: run scripts/gen-operand-docs.py" % args.output, file=sys.stderr)
                return 1
        return 0
    with open(args.output, "w") as handle:
        handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
