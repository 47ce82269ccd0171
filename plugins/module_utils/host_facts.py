# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a GPU host has, read from files under a root path: the layer below Kubernetes.

Everything here reads files (sysfs, procfs, /etc, /lib/modules, RKE2's directories) under
``root``, so a test can point it at a fake tree. The one thing that is not a file, the
version a binary prints, comes through the injectable ``run`` callable and is only asked for
when no file says it. Parsers are pure functions over text.

Sources on a real host (what a fake tree has to hold):

- GPUs: ``/sys/bus/pci/devices/<address>/{vendor,device,class,sriov_totalvfs,sriov_numvfs}``
  and the links ``driver``, ``iommu_group``, ``physfn`` (SR-IOV virtual functions have it and
  are not counted as GPUs); names from ``/usr/share/misc/pci.ids`` or ``/usr/share/hwdata/pci.ids``.
- Host driver: ``/proc/driver/nvidia/version`` (loaded), ``/proc/modules``,
  ``/lib/modules/<kernel>/**/nvidia.ko*`` (installed), ``libnvidia-ml.so.1``, ``nvidia-smi``;
  ``/run/nvidia/validations/.driver-ctr-ready`` or ``/run/nvidia/driver/usr/src`` mean the
  loaded driver is the GPU Operator's driver container, not the host's.
- nouveau: ``/proc/modules``; ``blacklist nouveau`` / ``install nouveau /bin/false`` in
  ``modprobe.d`` directories; ``modprobe.blacklist=`` on the kernel command line.
- IOMMU: ``/proc/cmdline`` and the entries of ``/sys/kernel/iommu_groups``.
- OS, kernel and CPU architecture: ``/etc/os-release``, ``/proc/sys/kernel/osrelease``,
  ``/proc/sys/kernel/arch`` (Linux 6.1 and later; else what the caller passes as ``machine``,
  ``uname -m`` of the host the module runs on).
- Docker and the NVIDIA Container Toolkit on the host (a DGX OS install has both): their
  binaries, ``/etc/docker/daemon.json`` (its ``runtimes`` and ``default-runtime``),
  ``/etc/nvidia-container-runtime/config.toml``, CDI specs in ``/etc/cdi`` and ``/var/run/cdi``;
  versions from ``/var/lib/dpkg/status``, else ``dockerd --version`` / ``nvidia-ctk --version``.
  They serve Docker's own containerd, never RKE2's: facts for the report, not for the chart.
- RKE2: ``/etc/rancher/rke2/config.yaml`` and ``config.yaml.d/*.yaml`` (``profile``,
  ``data-dir``, ``pod-security-admission-config-file``); the version from the
  ``<data-dir>/bin`` link, which RKE2 points at ``<data-dir>/data/<runtime tag>-<hash>/bin``
  (rke2 ``pkg/bootstrap``), else from ``rke2 --version``; containerd's version from the
  ``starting containerd ... version=`` line of ``<data-dir>/agent/containerd/containerd.log``,
  else from ``containerd --version``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_objects import describe
from ansible_collections.gpuplatform.rke2.plugins.module_utils.rke2 import CONFIG_DIR as RKE2_CONFIG_DIR
from ansible_collections.gpuplatform.rke2.plugins.module_utils.rke2 import DATA_DIR as RKE2_DEFAULT_DATA_DIR
from ansible_collections.gpuplatform.rke2.plugins.module_utils.rke2 import version_in_output as parse_rke2_version

try:
    import yaml
except ImportError:  # PyYAML is optional on managed hosts; flat RKE2 configs still parse.
    yaml = None

SCHEMA_VERSION = 1
NVIDIA_VENDOR_ID = "10de"
# PCI base class 03 (display), subclasses 00 (VGA) and 02 (3D controller): the functions
# NFD's pci-0300_10de / pci-0302_10de labels and the GPU Operator count as GPUs.
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")
PCI_IDS_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids")

# Fallback when the host has no pci.ids: names exactly as the PCI ID repository
# (https://pci-ids.ucw.cz, github.com/pciutils/pciids, pci.ids commit 006181e2) spells them,
# since the passthrough resource name is derived from that spelling.
KNOWN_GPUS = {
    "1eb8": ("TU104GL [Tesla T4]", "T4"),
    "20b0": ("GA100 [A100 SXM4 40GB]", "A100"),
    "20b1": ("GA100 [A100 PCIe 40GB]", "A100"),
    "20b2": ("GA100 [A100 SXM4 80GB]", "A100"),
    "20b5": ("GA100 [A100 PCIe 80GB]", "A100"),
    "20f1": ("GA100 [A100 PCIe 40GB]", "A100"),
    "2236": ("GA102GL [A10]", "A10"),
    "2321": ("GH100 [H100L 94GB]", "H100"),
    "2330": ("GH100 [H100 SXM5 80GB]", "H100"),
    "2331": ("GH100 [H100 PCIe]", "H100"),
    "2335": ("GH100 [H200 SXM 141GB]", "H200"),
    "233b": ("GH100 [H200 NVL]", "H200"),
    "26b9": ("AD102GL [L40S]", "L40S"),
    # DGX Spark: the GPU of the GB10 Grace Blackwell superchip (pci.ids since 2025-10-31).
    "2e12": ("GB20B [GB10]", "GB10"),
}
# What a card cannot do whatever the site asks: {device id: {"mig": False, workload config: False,
# "why": the reason}}. GB10 is the integrated GPU of a Grace SoC; it shares the CPU's LPDDR5X over
# NVLink-C2C (nvidia-smi: "Memory-Usage: Not Supported"), has no SR-IOV (no vGPU), no MIG, and is not
# a discrete card the host can hand to a VM through vfio-pci.
PLATFORM_LIMITS = {
    "2e12": {"mig": False, "vm-passthrough": False, "vm-vgpu": False,
             "why": "GB10 is the integrated GPU of a Grace Blackwell SoC sharing the CPU's memory (DGX Spark): "
                    "no MIG, no SR-IOV for vGPU, no discrete device to pass to a VM"},
}
# ``uname -m`` -> the name Kubernetes (kubernetes.io/arch), RKE2's artifacts and image indexes use.
KUBERNETES_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

# The chip code that opens every NVIDIA pci.ids name says the architecture.
ARCHITECTURES = (
    ("GB", "blackwell"),
    ("GH", "hopper"),
    ("AD", "ada-lovelace"),
    ("GA", "ampere"),
    ("TU", "turing"),
    ("GV", "volta"),
    ("GP", "pascal"),
    ("GM", "maxwell"),
    ("GK", "kepler"),
)
# From Ampere on, vGPU runs on SR-IOV virtual functions instead of mediated devices.
SRIOV_VGPU_ARCHITECTURES = ("ampere", "ada-lovelace", "hopper", "blackwell")

LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64",
            "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu")
BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/bin")
MODPROBE_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/usr/lib/modprobe.d",
                 "/lib/modprobe.d")
MODULE_DIRS = ("/lib/modules", "/usr/lib/modules")
NVIDIA_MODULE_FILES = ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.zst", "nvidia.ko.gz")
# Debian packages whose versions the facts report (``/var/lib/dpkg/status``).
DOCKER_PACKAGES = ("docker-ce", "docker.io", "moby-engine")
TOOLKIT_PACKAGES = ("nvidia-container-toolkit",)
DOCKER_BINARIES = ("/usr/bin/dockerd", "/usr/local/bin/dockerd", "/usr/sbin/dockerd")
DOCKER_DAEMON_JSON = "/etc/docker/daemon.json"
TOOLKIT_BINARIES = ("/usr/bin/nvidia-ctk", "/usr/local/bin/nvidia-ctk")
TOOLKIT_RUNTIMES = ("/usr/bin/nvidia-container-runtime", "/usr/local/bin/nvidia-container-runtime")
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
# The GPU Operator's driver container marks its own driver here (state-driver DaemonSet).
OPERATOR_DRIVER_MARKERS = ("/run/nvidia/validations/.driver-ctr-ready", "/run/nvidia/driver/usr/src")

# Where the install script (tarball: INSTALL_RKE2_TAR_PREFIX /usr/local, or /opt/rke2 when
# /usr/local is read-only) and the RPMs put the binary.
RKE2_BINARIES = ("/usr/local/bin/rke2", "/usr/bin/rke2", "/opt/rke2/bin/rke2")
# RKE2 writes this when no pod-security-admission-config-file is set (rke2 pkg/rke2/psa.go).
RKE2_DEFAULT_PSA_FILE = "/etc/rancher/rke2/rke2-pss.yaml"

_NVIDIA_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")
# "NVIDIA UNIX Open Kernel Module for aarch64  580.142" (open) or "NVIDIA UNIX x86_64 Kernel Module
# 550.54.15" (proprietary): the first line of /proc/driver/nvidia/version says which was loaded.
_OPEN_MODULE_RE = re.compile(r"\bOpen Kernel Module\b")
_DOCKER_VERSION_RE = re.compile(r"version\s+v?(\d+\.\d+\.\d+[^\s,]*)", re.I)
_RUNTIME_TAG_RE = re.compile(r"^(v\d+\.\d+\.\d+)-(rke2r\d+)-[0-9a-f]{12}$")
_CONTAINERD_LOG_RE = re.compile(r'msg="starting containerd".*?\bversion="?(v?\d+\.\d+\.\d+[^\s"]*)')
_CONTAINERD_VERSION_RE = re.compile(r"\s(v?\d+\.\d+\.\d+\S*)")


class FactReader(object):
    """Reads files under ``root``; what cannot be read is recorded, never raised."""

    def __init__(self, root="/"):
        self.root = root or "/"
        self.errors = []

    def path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def exists(self, path):
        return os.path.lexists(self.path(path))

    def read(self, path):
        """The file's text, or None when it is absent; unreadable files go to ``errors``."""
        full = self.path(path)
        if not os.path.lexists(full):
            return None
        try:
            with open(full, "rb") as handle:
                return handle.read().decode("utf-8", "replace")
        except (IOError, OSError) as exc:
            self.errors.append({"path": path, "error": str(exc)})
            return None

    def lines(self, path):
        """Iterate a possibly large file line by line (containerd.log)."""
        full = self.path(path)
        if not os.path.isfile(full):
            return
        try:
            with open(full, "rb") as handle:
                for raw in handle:
                    yield raw.decode("utf-8", "replace")
        except (IOError, OSError) as exc:
            self.errors.append({"path": path, "error": str(exc)})

    def listdir(self, path):
        full = self.path(path)
        if not os.path.isdir(full):
            return []
        try:
            return sorted(os.listdir(full))
        except (IOError, OSError) as exc:
            self.errors.append({"path": path, "error": str(exc)})
            return []

    def link_name(self, path):
        """The last component of a symlink's target (``driver`` -> ``nvidia``), or None."""
        full = self.path(path)
        if not os.path.islink(full):
            return None
        return os.path.basename(os.readlink(full).rstrip("/"))

    def link_target(self, path):
        """A symlink's target as a path on the host (absolute targets stay inside root)."""
        full = self.path(path)
        if not os.path.islink(full):
            return None
        target = os.readlink(full)
        if not target.startswith("/"):
            target = os.path.normpath(os.path.join(os.path.dirname("/" + path.lstrip("/")), target))
        return target


# ---------------------------------------------------------------- parsers (pure)

def parse_os_release(text):
    """``/etc/os-release`` as a dict of its KEY=value lines, quotes removed."""
    result = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        result[key.strip()] = value
    return result


def parse_proc_modules(text):
    """Names of the loaded kernel modules from ``/proc/modules``."""
    return set(line.split()[0] for line in (text or "").splitlines() if line.strip())


def parse_cmdline(text):
    """The kernel command line as a dict; bare flags map to ``""``, repeated keys keep the last."""
    result = {}
    for token in (text or "").split():
        key, _sep, value = token.partition("=")
        result[key] = value
    return result


def parse_nvidia_version(text):
    """The driver version from ``/proc/driver/nvidia/version`` (proprietary or open module)."""
    match = _NVIDIA_VERSION_RE.search(text or "")
    return match.group(1) if match else None


def parse_nvidia_kernel_modules(text):
    """``open`` or ``proprietary``: which kernel modules /proc/driver/nvidia/version says are
    loaded (Blackwell cards, GB10 included, run only the open ones); None without the file."""
    if not parse_nvidia_version(text):
        return None
    return "open" if _OPEN_MODULE_RE.search(text) else "proprietary"


def kubernetes_architecture(machine):
    """``aarch64`` -> ``arm64``, ``x86_64`` -> ``amd64`` (kubernetes.io/arch); None when unknown."""
    return KUBERNETES_ARCHITECTURES.get((machine or "").strip().lower())


def parse_dpkg_status(text, names):
    """{package: version} of the ``names`` dpkg says are installed (``/var/lib/dpkg/status``)."""
    found = {}
    for stanza in (text or "").split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith((" ", "\t")):
                fields[key.strip()] = value.strip()
        if fields.get("Package") in names and fields.get("Status", "").endswith(" installed") and fields.get("Version"):
            found[fields["Package"]] = fields["Version"]
    return found


def upstream_version(package_version):
    """A Debian package version without epoch and revision: ``5:29.2.1-1~ubuntu.24.04~noble`` -> ``29.2.1``."""
    version = (package_version or "").split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version or None


def parse_tool_version(output):
    """``Docker version 29.2.1, build 1234567`` / ``NVIDIA Container Toolkit CLI version 1.19.0`` -> the version."""
    match = _DOCKER_VERSION_RE.search(output or "")
    return match.group(1) if match else None


def parse_pci_ids(text, vendor=NVIDIA_VENDOR_ID):
    """Device id -> name for one vendor of a pci.ids file."""
    names = {}
    inside = False
    for line in (text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        if not line.startswith("\t"):
            inside = line[:4].lower() == vendor
            continue
        if inside and not line.startswith("\t\t"):
            device, _sep, name = line.strip().partition(" ")
            names[device.lower()] = name.strip()
    return names


def architecture_of(name):
    """The GPU architecture from a pci.ids device name (``GA102GL [A10]`` -> ``ampere``), or None."""
    for prefix, arch in ARCHITECTURES:
        if (name or "").startswith(prefix):
            return arch
    return None


def model_of(device_id, name):
    """The short model (``A10``) from the built-in table, else the bracketed part of the name."""
    if device_id in KNOWN_GPUS:
        return KNOWN_GPUS[device_id][1]
    match = re.search(r"\[([^\]]+)\]", name or "")
    return match.group(1) if match else None


def nouveau_blacklist_lines(text):
    """The lines of a modprobe.d file that keep nouveau from loading."""
    found = []
    for line in (text or "").splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[1] == "nouveau" and words[0] == "blacklist":
            found.append(" ".join(words))
        elif len(words) >= 3 and words[:2] == ["install", "nouveau"] and os.path.basename(words[2]) in ("false", "true"):
            found.append(" ".join(words))
    return found


def parse_runtime_tag(tag):
    """``v1.31.13-rke2r1-0123456789ab`` (an RKE2 data dir) -> ``v1.31.13+rke2r1``."""
    match = _RUNTIME_TAG_RE.match(tag or "")
    return "%s+%s" % match.groups() if match else None


def parse_containerd_version(output):
    """``containerd github.com/k3s-io/containerd v2.1.4-k3s1 <rev>`` -> ``v2.1.4-k3s1``."""
    match = _CONTAINERD_VERSION_RE.search(output or "")
    return match.group(1) if match else None


def load_yaml(text):
    """A YAML document; without PyYAML only flat ``key: value`` files (RKE2's config.yaml) parse."""
    if yaml is not None:
        return yaml.safe_load(text)
    return flat_yaml(text)


def flat_yaml(text):
    """Top-level ``key: scalar`` pairs of a YAML file; nested or list values are skipped."""
    result = {}
    for line in (text or "").splitlines():
        if not line or line[0] in " \t#-" or ":" not in line:
            continue
        key, _sep, value = line.partition(":")
        value = value.split(" #", 1)[0].strip()
        if not value:
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        result[key.strip().strip("\"'")] = value
    return result


def psa_from_admission_config(document):
    """(default enforce level, exempt namespaces) from an AdmissionConfiguration (or a bare
    PodSecurityConfiguration); ``(None, None)`` when it has no PodSecurity plugin; ValueError
    when its defaults or exemptions have another shape."""
    if not isinstance(document, dict):
        return None, None
    config = None
    if document.get("kind") == "PodSecurityConfiguration":
        config = document
    for plugin in document.get("plugins") or ():
        if isinstance(plugin, dict) and plugin.get("name") == "PodSecurity":
            config = plugin.get("configuration")
    if not isinstance(config, dict):
        return None, None
    defaults = config.get("defaults") or {}
    exemptions = config.get("exemptions") or {}
    if not isinstance(defaults, dict) or not isinstance(exemptions, dict):
        raise ValueError("defaults and exemptions must be mappings")
    enforce = defaults.get("enforce", "privileged")
    namespaces = exemptions.get("namespaces") or []
    # A level and a list of names, or the file is not one the API server reads: say so.
    if (enforce is not None and not isinstance(enforce, str)) or not isinstance(namespaces, list) \
            or not all(isinstance(name, str) for name in namespaces):
        raise ValueError("defaults.enforce must be a level and exemptions.namespaces a list of namespace names")
    return enforce, list(namespaces)


# ---------------------------------------------------------------- readers over a tree

def gpus(reader, pci_names=None):
    """The NVIDIA GPUs (physical functions of the display class) under /sys/bus/pci/devices."""
    base = "/sys/bus/pci/devices"
    result = []
    for address in reader.listdir(base):
        dev = base + "/" + address
        vendor = (reader.read(dev + "/vendor") or "").strip().lower()
        if vendor != "0x" + NVIDIA_VENDOR_ID:
            continue
        pci_class = (reader.read(dev + "/class") or "").strip().lower()
        if not pci_class.startswith(GPU_CLASS_PREFIXES):
            continue
        if reader.exists(dev + "/physfn"):
            continue
        device_id = (reader.read(dev + "/device") or "").strip().lower().replace("0x", "")
        name, source = None, None
        if pci_names and device_id in pci_names:
            name, source = pci_names[device_id], "pci.ids"
        elif device_id in KNOWN_GPUS:
            name, source = KNOWN_GPUS[device_id][0], "builtin"
        total_vfs = _int_or_none(reader.read(dev + "/sriov_totalvfs"))
        result.append({
            "address": address,
            "vendor_id": NVIDIA_VENDOR_ID,
            "device_id": device_id,
            "class": pci_class,
            "name": name,
            "name_source": source,
            "model": model_of(device_id, name),
            "architecture": architecture_of(name),
            "driver": reader.link_name(dev + "/driver"),
            "iommu_group": reader.link_name(dev + "/iommu_group"),
            "sriov": {
                "capable": bool(total_vfs),
                "total_vfs": total_vfs or 0,
                "num_vfs": _int_or_none(reader.read(dev + "/sriov_numvfs")) or 0,
            },
        })
    return result


def pci_names(reader):
    for path in PCI_IDS_PATHS:
        text = reader.read(path)
        if text:
            return parse_pci_ids(text), path
    return {}, None


def host_driver(reader, kernel_release, modules, packages=None):
    version_text = reader.read("/proc/driver/nvidia/version")
    operator_managed = any(reader.exists(p) for p in OPERATOR_DRIVER_MARKERS)
    loaded = version_text is not None or "nvidia" in modules
    kernel_module = _find_module(reader, kernel_release)
    preinstalled = bool(kernel_module) or (loaded and not operator_managed)
    return {
        "loaded": loaded,
        "version": parse_nvidia_version(version_text),
        "kernel_modules": parse_nvidia_kernel_modules(version_text),
        # nvidia-driver-580-open and friends: the package a distribution (DGX OS) installed it from.
        "packages": dict((name, version) for name, version in sorted((packages or {}).items())
                         if name.startswith("nvidia-driver-")),
        "kernel_module": kernel_module,
        "libnvidia_ml": _first_existing(reader, [d + "/libnvidia-ml.so.1" for d in LIB_DIRS]),
        "nvidia_smi": _first_existing(reader, [d + "/nvidia-smi" for d in BIN_DIRS]),
        "operator_managed": operator_managed,
        "preinstalled": preinstalled,
    }


def _find_module(reader, kernel_release):
    """The host's nvidia.ko for the running kernel, or None (DKMS, distro packages and
    the .run installer all put it somewhere below /lib/modules/<release>)."""
    if not kernel_release:
        return None
    for base in MODULE_DIRS:
        top = reader.path(base + "/" + kernel_release)
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                if name in NVIDIA_MODULE_FILES:
                    return "/" + os.path.relpath(os.path.join(dirpath, name), reader.root)
    return None


def nouveau(reader, modules, cmdline):
    sources = []
    for directory in MODPROBE_DIRS:
        for name in reader.listdir(directory):
            if not name.endswith(".conf"):
                continue
            path = directory + "/" + name
            for line in nouveau_blacklist_lines(reader.read(path)):
                sources.append("%s: %s" % (path, line))
    for key in ("modprobe.blacklist", "module_blacklist", "rd.driver.blacklist"):
        if "nouveau" in cmdline.get(key, "").split(","):
            sources.append("/proc/cmdline: %s=%s" % (key, cmdline[key]))
    return {"loaded": "nouveau" in modules, "blacklisted": bool(sources), "blacklist_sources": sources}


def iommu(reader, cmdline):
    groups = len(reader.listdir("/sys/kernel/iommu_groups"))
    return {
        # Groups exist only when the kernel really enabled an IOMMU, whatever the command line says.
        "enabled": groups > 0,
        "groups": groups,
        "cmdline": dict((key, cmdline[key]) for key in ("intel_iommu", "amd_iommu", "iommu") if key in cmdline),
    }


def architecture(reader, machine=None):
    """The CPU architecture: ``/proc/sys/kernel/arch`` (Linux 6.1+), else ``machine``
    (the caller's ``uname -m``, only meaningful when root is the running host)."""
    value, source = (reader.read("/proc/sys/kernel/arch") or "").strip(), "/proc/sys/kernel/arch"
    if not value and machine:
        value, source = machine.strip(), "uname -m"
    return {"machine": value or None, "kubernetes": kubernetes_architecture(value),
            "source": source if value else None}


def _dpkg_packages(reader):
    names = DOCKER_PACKAGES + TOOLKIT_PACKAGES
    text = reader.read("/var/lib/dpkg/status")
    found = parse_dpkg_status(text, names)
    # Driver packages are many (nvidia-driver-580-open, -server, ...): take every installed one.
    for stanza in (text or "").split("\n\n"):
        name = next((line.split(":", 1)[1].strip() for line in stanza.splitlines() if line.startswith("Package:")), "")
        if name.startswith("nvidia-driver-"):
            found.update(parse_dpkg_status(stanza, (name,)))
    return found


def _versioned(reader, packages, names, binary, run):
    """(version, source): the first installed package of ``names``, else ``binary --version``."""
    for name in names:
        if packages.get(name):
            return upstream_version(packages[name]), "/var/lib/dpkg/status (%s %s)" % (name, packages[name])
    if binary and run is not None:
        version = parse_tool_version(_run(reader, run, [reader.path(binary), "--version"]))
        if version:
            return version, "%s --version" % binary
    return None, None


def docker(reader, packages, run=None):
    """Docker on the host and the runtimes its daemon.json gives it. Docker runs its own
    containerd; RKE2's kubelet never talks to it."""
    binary = _first_existing(reader, DOCKER_BINARIES)
    version, source = _versioned(reader, packages, DOCKER_PACKAGES, binary, run)
    text = reader.read(DOCKER_DAEMON_JSON)
    daemon = {}
    if text is not None:
        try:
            daemon = json.loads(text or "{}")
        except ValueError as exc:
            reader.errors.append({"path": DOCKER_DAEMON_JSON, "error": "not JSON: %s" % exc})
    daemon = daemon if isinstance(daemon, dict) else {}
    if daemon.get("default-runtime") is not None and not isinstance(daemon["default-runtime"], str):
        reader.errors.append({"path": DOCKER_DAEMON_JSON, "error": "default-runtime is %s, not a runtime name"
                                                                   % describe(daemon.pop("default-runtime"))})
    return {
        "installed": bool(binary or version),
        "binary": binary,
        "version": version,
        "version_source": source,
        "daemon_json": DOCKER_DAEMON_JSON if text is not None else None,
        "runtimes": sorted(daemon.get("runtimes") or {}) if isinstance(daemon.get("runtimes"), dict) else [],
        "default_runtime": daemon.get("default-runtime"),
    }


def container_toolkit(reader, packages, run=None):
    """The NVIDIA Container Toolkit installed on the host (nvidia-ctk, the runtime, its
    config, the CDI specs it generated)."""
    binary = _first_existing(reader, TOOLKIT_BINARIES)
    runtime = _first_existing(reader, TOOLKIT_RUNTIMES)
    version, source = _versioned(reader, packages, TOOLKIT_PACKAGES, binary, run)
    cdi = ["%s/%s" % (d, n) for d in CDI_DIRS for n in reader.listdir(d) if n.endswith((".yaml", ".yml", ".json"))]
    return {
        "installed": bool(binary or runtime or version),
        "nvidia_ctk": binary,
        "runtime": runtime,
        "version": version,
        "version_source": source,
        "config": TOOLKIT_CONFIG if reader.exists(TOOLKIT_CONFIG) else None,
        "cdi_specs": cdi,
    }


# The options of RKE2's config that the facts read as paths.
_RKE2_PATH_OPTIONS = ("data-dir", "pod-security-admission-config-file")


def rke2_config(reader):
    """RKE2's merged config (config.yaml, then config.yaml.d/*.yaml in name order, later wins)
    and the files it came from."""
    merged, files = {}, []
    paths = [RKE2_CONFIG_DIR + "/config.yaml"]
    paths += [RKE2_CONFIG_DIR + "/config.yaml.d/" + n for n in reader.listdir(RKE2_CONFIG_DIR + "/config.yaml.d")
              if n.endswith((".yaml", ".yml"))]
    for path in paths:
        text = reader.read(path)
        if text is None:
            continue
        try:
            document = load_yaml(text)
        except Exception as exc:  # a broken config is a fact to report, not a crash
            reader.errors.append({"path": path, "error": "not YAML: %s" % exc})
            continue
        files.append(path)
        if isinstance(document, dict):
            for key in _RKE2_PATH_OPTIONS:
                if key in document and not (isinstance(document[key], str) and document[key]):
                    # RKE2 would not start with it; the facts read the default and say why.
                    reader.errors.append({"path": path, "error": "%s is %s, not a path: read as unset"
                                                                 % (key, describe(document.pop(key)))})
            merged.update(document)
    return merged, files


def pod_security(reader, config):
    """The PSA admission config the API server on this host reads, when this host has one."""
    path = config.get("pod-security-admission-config-file") or RKE2_DEFAULT_PSA_FILE
    text = reader.read(path)
    if text is None:
        return {"config_file": None, "default_enforce": None, "exempt_namespaces": None}
    try:
        if yaml is None:
            raise ValueError("PyYAML is not installed on this host")
        document = yaml.safe_load(text)
        for plugin in (document or {}).get("plugins") or ():
            if isinstance(plugin, dict) and plugin.get("name") == "PodSecurity" and plugin.get("path"):
                nested = plugin["path"]
                if not nested.startswith("/"):
                    nested = os.path.join(os.path.dirname(path), nested)
                plugin["configuration"] = yaml.safe_load(reader.read(nested) or "")
        enforce, exempt = psa_from_admission_config(document)
    except Exception as exc:
        reader.errors.append({"path": path, "error": "cannot read the PodSecurity configuration: %s" % exc})
        enforce, exempt = None, None
    return {"config_file": path, "default_enforce": enforce, "exempt_namespaces": exempt}


def rke2(reader, run=None):
    config, files = rke2_config(reader)
    data_dir = config.get("data-dir") or RKE2_DEFAULT_DATA_DIR
    binary = _first_existing(reader, RKE2_BINARIES)
    version, source = None, None
    bin_target = reader.link_target(data_dir + "/bin")
    if bin_target:
        version = parse_runtime_tag(os.path.basename(os.path.dirname(bin_target.rstrip("/"))))
        source = "%s/bin -> %s" % (data_dir, bin_target) if version else None
    if not version and binary and run is not None:
        version = parse_rke2_version(_run(reader, run, [reader.path(binary), "--version"]))
        source = "%s --version" % binary if version else None
    profile = config.get("profile")
    return {
        "installed": bool(binary or bin_target),
        "binary": binary,
        "version": version,
        "version_source": source,
        "data_dir": data_dir,
        "config_files": files,
        "profile": str(profile) if profile is not None else None,
        "pod_security": pod_security(reader, config),
    }, data_dir, bin_target


def containerd(reader, data_dir, bin_target, run=None):
    log = data_dir + "/agent/containerd/containerd.log"
    version = None
    for line in reader.lines(log):
        match = _CONTAINERD_LOG_RE.search(line)
        if match:
            version = match.group(1)  # the last start wins: containerd restarts with RKE2 upgrades
    if version:
        return {"version": version, "source": log}
    binary = (bin_target or data_dir + "/bin") + "/containerd"
    if run is not None and reader.exists(binary):
        version = parse_containerd_version(_run(reader, run, [reader.path(binary), "--version"]))
        if version:
            return {"version": version, "source": "%s --version" % binary}
    return {"version": None, "source": None}


def gather(root="/", run=None, machine=None):
    """All host facts as one plain dict (the ``gpu_host`` fact).

    ``run(argv) -> (rc, stdout, stderr)`` runs a binary for the versions no file records;
    None runs nothing. ``machine``: ``uname -m`` of the running host, for kernels without
    /proc/sys/kernel/arch (pass it only when ``root`` is that host)."""
    reader = FactReader(root)
    kernel_release = (reader.read("/proc/sys/kernel/osrelease") or "").strip() or None
    cmdline_text = (reader.read("/proc/cmdline") or "").strip()
    cmdline = parse_cmdline(cmdline_text)
    modules = parse_proc_modules(reader.read("/proc/modules"))
    names, names_file = pci_names(reader)
    found = gpus(reader, names)
    os_release = parse_os_release(reader.read("/etc/os-release"))
    rke2_facts, data_dir, bin_target = rke2(reader, run)
    packages = _dpkg_packages(reader)
    return {
        "schema": SCHEMA_VERSION,
        "root": reader.root,
        "hardware": {"gpus": found, "count": len(found), "pci_ids": names_file},
        "host_driver": host_driver(reader, kernel_release, modules, packages),
        "nouveau": nouveau(reader, modules, cmdline),
        "iommu": iommu(reader, cmdline),
        "sriov": {
            "capable_gpus": sum(1 for g in found if g["sriov"]["capable"]),
            "total_vfs": sum(g["sriov"]["total_vfs"] for g in found),
        },
        "os": {
            "id": os_release.get("ID"),
            "version_id": os_release.get("VERSION_ID"),
            "pretty_name": os_release.get("PRETTY_NAME"),
        },
        "kernel": {"release": kernel_release, "cmdline": cmdline_text},
        "architecture": architecture(reader, machine),
        "docker": docker(reader, packages, run),
        "container_toolkit": container_toolkit(reader, packages, run),
        "rke2": rke2_facts,
        "containerd": containerd(reader, data_dir, bin_target, run),
        "errors": reader.errors,
    }


def _first_existing(reader, paths):
    for path in paths:
        if reader.exists(path):
            return path
    return None


def _int_or_none(text):
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _run(reader, run, argv):
    try:
        rc, out, err = run(argv)
    except (IOError, OSError) as exc:
        reader.errors.append({"path": argv[0], "error": str(exc)})
        return None
    if rc != 0:
        reader.errors.append({"path": argv[0], "error": "exit %s: %s" % (rc, (err or out or "").strip()[:200])})
        return None
    return out
