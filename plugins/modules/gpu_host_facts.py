#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_host_facts
short_description: Read the GPU host facts that decide the GPU Operator's chart values and node labels
version_added: 0.1.0
description:
  - Reads, without changing anything, what a GPU host has below Kubernetes, the facts the GPU preflight
    (role C(gpuplatform.rke2.gpu_preflight)) turns into decisions and refusals.
  - NVIDIA GPUs from sysfs (vendor C(0x10de), display class C(0x0300)/C(0x0302), SR-IOV virtual functions
    left out) with their device id, class, bound driver, IOMMU group, SR-IOV capability, and the
    C(pci.ids) name (C(/usr/share/misc/pci.ids) or C(/usr/share/hwdata/pci.ids), else a built-in table of
    T4, A10, A100, H100, H200 and L40S ids), model and architecture.
  - A host driver loaded (C(/proc/driver/nvidia/version), C(/proc/modules)) or installed
    (C(nvidia.ko) below C(/lib/modules/<kernel>)), and whether a loaded driver is the GPU Operator's
    driver container (C(/run/nvidia/validations/.driver-ctr-ready)).
  - nouveau loaded or blacklisted (C(modprobe.d) files, C(modprobe.blacklist=) on the kernel command line).
  - Whether the loaded driver runs the open or the proprietary kernel modules (the first line of
    C(/proc/driver/nvidia/version)), and the C(nvidia-driver-*) packages dpkg installed it from.
  - IOMMU (kernel command line and C(/sys/kernel/iommu_groups)), OS (C(/etc/os-release)) and kernel.
  - The CPU architecture from C(/proc/sys/kernel/arch) (Linux 6.1 and later), else, when O(root) is C(/),
    the running host's C(uname -m); as Kubernetes names it too (C(aarch64) -> C(arm64)).
  - Docker (binary, version, the runtimes and default runtime of C(/etc/docker/daemon.json)) and the NVIDIA
    Container Toolkit (C(nvidia-ctk), C(nvidia-container-runtime), its config, CDI specs) on the host, with
    versions from C(/var/lib/dpkg/status), else C(dockerd --version) / C(nvidia-ctk --version). DGX OS ships
    both; they configure Docker's containerd, never RKE2's.
  - RKE2 version (from the C(<data-dir>/bin) link RKE2 keeps to its runtime, else C(rke2 --version)),
    containerd version (from C(containerd.log), else C(containerd --version)), the C(profile) and the
    Pod Security admission configuration from C(/etc/rancher/rke2/config.yaml) and C(config.yaml.d).
  - Files that exist but cannot be read, and settings in them of another shape (a C(data-dir) that is no path, a
    C(default-runtime) that is no name; each then read as unset), are listed under C(errors); run it with
    privilege escalation.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
options:
  root:
    description:
      - The root of the tree to read; every path above is read below it.
      - A test or a chroot points it at a fake sysfs/procfs tree.
    type: path
    default: /
  run_version_commands:
    description:
      - Run C(rke2 --version) and C(containerd --version) when no file records the version
        (RKE2 installed but never started), and C(dockerd --version) / C(nvidia-ctk --version) when dpkg does not.
      - The binaries are run from below O(root).
    type: bool
    default: true
notes:
  - Read-only; supports check mode.
  - The returned C(gpu_host) fact is the per-node section of the verification report.
"""

EXAMPLES = r"""
- name: Read the GPU host facts
  gpuplatform.rke2.gpu_host_facts:
  become: true

- name: Read a fake host tree (tests)
  gpuplatform.rke2.gpu_host_facts:
    root: /tmp/fake-a10-host
    run_version_commands: false

- name: Show the GPUs the host has
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu_host']['hardware']['gpus'] | map(attribute='name') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts, under one key.
  returned: always
  type: dict
  contains:
    gpu_host:
      description: What the host has; see docs/preflight.md for every field.
      returned: always
      type: dict
      contains:
        schema:
          description: Version of this layout.
          type: int
          sample: 1
        root:
          description: The root the facts were read under.
          type: str
          sample: /
        hardware:
          description: NVIDIA GPUs (C(gpus), C(count)) and the C(pci.ids) file used for names (C(pci_ids)).
          type: dict
          sample:
            count: 1
            pci_ids: /usr/share/misc/pci.ids
            gpus:
              - address: "0000:17:00.0"
                vendor_id: "10de"
                device_id: "2236"
                class: "0x030200"
                name: GA102GL [A10]
                name_source: pci.ids
                model: A10
                architecture: ampere
                driver: nvidia
                iommu_group: "23"
                sriov: {capable: true, total_vfs: 32, num_vfs: 0}
        host_driver:
          description: A driver on the host; C(preinstalled) is true for a host driver, false for none or the operator's.
          type: dict
          sample: {loaded: true, version: 550.54.15, kernel_modules: open, packages: {nvidia-driver-550-open: 550.54.15-0ubuntu1},
                   kernel_module: /lib/modules/6.8.0-45-generic/updates/dkms/nvidia.ko.zst,
                   libnvidia_ml: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1, nvidia_smi: /usr/bin/nvidia-smi,
                   operator_managed: false, preinstalled: true}
        nouveau:
          description: nouveau loaded, blacklisted, and where it is blacklisted.
          type: dict
          sample: {loaded: false, blacklisted: true, blacklist_sources: ["/etc/modprobe.d/blacklist-nouveau.conf: blacklist nouveau"]}
        iommu:
          description: IOMMU enabled (groups exist), the number of groups, and the IOMMU kernel parameters.
          type: dict
          sample: {enabled: true, groups: 87, cmdline: {intel_iommu: "on", iommu: pt}}
        sriov:
          description: GPUs able to create SR-IOV virtual functions, and how many in total.
          type: dict
          sample: {capable_gpus: 2, total_vfs: 64}
        os:
          description: From /etc/os-release.
          type: dict
          sample: {id: ubuntu, version_id: "22.04", pretty_name: Ubuntu 22.04.4 LTS}
        kernel:
          description: The running kernel's release and command line.
          type: dict
          sample: {release: 5.15.0-105-generic, cmdline: "BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt"}
        architecture:
          description: The CPU architecture (C(machine) as uname prints it, C(kubernetes) as kubernetes.io/arch names it) and where it was read.
          type: dict
          sample: {machine: aarch64, kubernetes: arm64, source: /proc/sys/kernel/arch}
        docker:
          description: Docker on the host; it serves Docker's own containerd, not RKE2's.
          type: dict
          sample: {installed: true, binary: /usr/bin/dockerd, version: 29.2.1, daemon_json: /etc/docker/daemon.json,
                   version_source: "/var/lib/dpkg/status (docker-ce 5:29.2.1-1~ubuntu.24.04~noble)",
                   runtimes: [nvidia], default_runtime: nvidia}
        container_toolkit:
          description: The NVIDIA Container Toolkit installed on the host.
          type: dict
          sample: {installed: true, nvidia_ctk: /usr/bin/nvidia-ctk, runtime: /usr/bin/nvidia-container-runtime,
                   version: 1.19.0, version_source: "/var/lib/dpkg/status (nvidia-container-toolkit 1.19.0-1)",
                   config: /etc/nvidia-container-runtime/config.toml, cdi_specs: [/var/run/cdi/nvidia.yaml]}
        rke2:
          description: RKE2 installed, its version and where it came from, profile, config files, Pod Security config.
          type: dict
          sample:
            installed: true
            binary: /usr/local/bin/rke2
            version: v1.31.13+rke2r1
            version_source: /var/lib/rancher/rke2/bin -> /var/lib/rancher/rke2/data/v1.31.13-rke2r1-0123456789ab/bin
            data_dir: /var/lib/rancher/rke2
            config_files: [/etc/rancher/rke2/config.yaml]
            profile: cis
            pod_security: {config_file: /etc/rancher/rke2/rke2-pss.yaml, default_enforce: restricted,
                           exempt_namespaces: [kube-system, cis-operator-system, tigera-operator]}
        containerd:
          description: The containerd RKE2 runs, and where its version came from.
          type: dict
          sample: {version: v2.1.4-k3s1, source: /var/lib/rancher/rke2/agent/containerd/containerd.log}
        errors:
          description: Files that exist but could not be read or parsed, settings in them of another shape, and
            failed version commands.
          type: list
          elements: dict
          sample: []
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuplatform.rke2.plugins.module_utils.host_facts import gather


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            run_version_commands=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg="root %r is not a directory" % root)

    def run(argv):
        return module.run_command(argv, check_rc=False)

    # uname -m describes the tree only when the tree is this host.
    machine = platform.machine() if os.path.realpath(root) == "/" else None
    facts = gather(root, run if module.params["run_version_commands"] else None, machine)
    module.exit_json(changed=False, ansible_facts={"gpu_host": facts})


if __name__ == "__main__":
    main()
