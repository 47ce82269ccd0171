# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What keeps an operand of the GPU Operator waiting on a node that is otherwise fine:
the validation gates its pods wait at, and the pause values other components write into
its deploy label while they work. Facts from the GPU Operator v26.3.2 manifests
(``assets/``) and ``cmd/nvidia-validator``; plain data, no I/O, read by the checks, the
waits and the labels role alike (``operand_model`` says which operands exist).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

# Transient values other components write into deploy labels while they work on a node:
# the operand's pod leaves, and the writer sets "true" again when done. Neither a user's
# decision (not "false") nor a fault. Value -> who and why.
PAUSE_VALUES = {
    "paused-for-driver-upgrade": "k8s-driver-manager is upgrading the driver",
    "paused-for-mig-change": "mig-parted is applying a MIG configuration",
    "paused-for-vgpu-change": "the vGPU device manager is applying a vGPU configuration",
}

# Ordering on a node comes from init containers that wait for status files under
# VALIDATIONS_DIR. The validators write those files, so they are gates, not leaves:
# without them nothing above starts, and /run is empty after a reboot.
# operand -> ((init container, status file, operand that writes it), ...).
VALIDATIONS_DIR = "/run/nvidia/validations"
Gate = namedtuple("Gate", ["init_container", "status_file", "writer"])
_TOOLKIT_GATE = (Gate("toolkit-validation", "toolkit-ready", "operator-validator"),)
GATES = {
    "device-plugin": _TOOLKIT_GATE,
    "mps-control-daemon": _TOOLKIT_GATE,
    "gpu-feature-discovery": _TOOLKIT_GATE,
    "dcgm": _TOOLKIT_GATE,
    "dcgm-exporter": _TOOLKIT_GATE,
    "mig-manager": _TOOLKIT_GATE,
    "sandbox-device-plugin": (Gate("vfio-pci-validation", "vfio-pci-ready", "sandbox-validator"),
                              Gate("vgpu-devices-validation", "vgpu-devices-ready", "sandbox-validator")),
    "vgpu-device-manager": (Gate("vgpu-manager-validation", "vgpu-manager-ready", "sandbox-validator"),),
}

# The validators' own init containers, in order, each with the operand it waits on and
# what it does: a validator stuck in one of them has its cause there, lower down (the
# operator-validator turns Ready only once the device plugin advertises GPUs).
VALIDATOR_STEPS = {
    "operator-validator": (
        ("driver-validation", "driver", "waits for a working driver"),
        ("toolkit-validation", "container-toolkit", "checks the container toolkit, then writes toolkit-ready"),
        ("cuda-validation", "container-toolkit", "runs a CUDA workload through the toolkit"),
        ("plugin-validation", "device-plugin", "waits until the node advertises GPUs"),
    ),
    "sandbox-validator": (
        ("cc-manager-validation", "cc-manager", "waits for the CC mode to be set"),
        ("vfio-pci-validation", "vfio-manager", "waits for the GPUs to be bound to vfio-pci"),
        ("vgpu-manager-validation", "vgpu-manager", "waits for the vGPU manager"),
        ("vgpu-devices-validation", "vgpu-device-manager", "waits for the vGPU devices"),
    ),
}
VALIDATORS = tuple(VALIDATOR_STEPS)


def gated_by(validator):
    """The operands that wait for a file ``validator`` writes, in table order."""
    return tuple(name for name, gates in GATES.items() if any(g.writer == validator for g in gates))


def status_files(validator):
    """The status files ``validator`` writes for the operands gated by it."""
    files = []
    for gates in GATES.values():
        for gate in gates:
            if gate.writer == validator and gate.status_file not in files:
                files.append(gate.status_file)
    return tuple(files)
