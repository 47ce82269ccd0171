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
- OS and kernel: ``/etc/os-release``, ``/proc/sys/kernel/osrelease``.
- RKE2: ``/etc/rancher/rke2/config.yaml`` and ``config.yaml.d/*.yaml`` (``profile``,
  ``data-dir``, ``pod-security-admission-config-file``); the version from the
  ``<data-dir>/bin`` link, which RKE2 points at ``<data-dir>/data/<runtime tag>-<hash>/bin``
  (rke2 ``pkg/bootstrap``), else from ``rke2 --version``; containerd's version from the
  ``starting containerd ... version=`` line of ``<data-dir>/agent/containerd/containerd.log``,
  else from ``containerd --version``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

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
}

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
# The GPU Operator's driver container marks its own driver here (state-driver DaemonSet).
OPERATOR_DRIVER_MARKERS = ("/run/nvidia/validations/.driver-ctr-ready", "/run/nvidia/driver/usr/src")

# Where the install script (tarball: INSTALL_RKE2_TAR_PREFIX /usr/local, or /opt/rke2 when
# /usr/local is read-only) and the RPMs put the binary.
RKE2_BINARIES = ("/usr/local/bin/rke2", "/usr/bin/rke2", "/opt/rke2/bin/rke2")
# RKE2 writes this when no pod-security-admission-config-file is set (rke2 pkg/rke2/psa.go).
RKE2_DEFAULT_PSA_FILE = "/etc/rancher/rke2/rke2-pss.yaml"

_NVIDIA_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")
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
    PodSecurityConfiguration); ``(None, None)`` when it has no PodSecurity plugin."""
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
    return defaults.get("enforce", "privileged"), list(exemptions.get("namespaces") or ())


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


def host_driver(reader, kernel_release, modules):
    version_text = reader.read("/proc/driver/nvidia/version")
    operator_managed = any(reader.exists(p) for p in OPERATOR_DRIVER_MARKERS)
    loaded = version_text is not None or "nvidia" in modules
    kernel_module = _find_module(reader, kernel_release)
    preinstalled = bool(kernel_module) or (loaded and not operator_managed)
    return {
        "loaded": loaded,
        "version": parse_nvidia_version(version_text),
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


def gather(root="/", run=None):
    """All host facts as one plain dict (the ``gpu_host`` fact).

    ``run(argv) -> (rc, stdout, stderr)`` runs a binary for the versions no file records;
    None runs nothing."""
    reader = FactReader(root)
    kernel_release = (reader.read("/proc/sys/kernel/osrelease") or "").strip() or None
    cmdline_text = (reader.read("/proc/cmdline") or "").strip()
    cmdline = parse_cmdline(cmdline_text)
    modules = parse_proc_modules(reader.read("/proc/modules"))
    names, names_file = pci_names(reader)
    found = gpus(reader, names)
    os_release = parse_os_release(reader.read("/etc/os-release"))
    rke2_facts, data_dir, bin_target = rke2(reader, run)
    return {
        "schema": SCHEMA_VERSION,
        "root": reader.root,
        "hardware": {"gpus": found, "count": len(found), "pci_ids": names_file},
        "host_driver": host_driver(reader, kernel_release, modules),
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
