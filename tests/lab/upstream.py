"""Where the lab's real judges come from: the GPU Operator's source at its release tag
(the operator binary, its chart, its CRDs and its operand manifests), and Argo CD's CRDs.

This module is the ONE place in the checkout that may look beside it at ``../shared``
(a developer's and CI's copy of the upstream sources); users clone the repository alone,
so every lookup has a fallback and a sentence saying what the lab falls back to.

The operator source is resolved in this order:

1. ``GPU_OPERATOR_SRC``: a source tree, or a ``git archive`` tarball of the tag;
2. ``../shared/upstream/gpu-operator-<version>.tar.gz`` beside the checkout (``GPU_OPERATOR_VERSION``,
   v26.3.2 by default);
3. a shallow clone of the tag from the operator's public source repository into the lab
   cache (for users with internet; an offline machine fails this in well under a second).

A tarball is unpacked once into the lab cache under a key made of the tag and its sha256,
so a different tarball of the "same" tag never reuses another's build.
"""

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_UPSTREAM = os.path.join(os.path.dirname(ROOT), "shared", "upstream")

# The GPU Operator versions the lab can run, each with its real operator and chart (the collection's
# KNOWN_CHART_VERSIONS); GPU_OPERATOR_VERSION picks one, the ADR's v26.3.2 by default. Each is built and cached
# under its own key (the tag and its tarball's sha256), so only the versions a run asks for are built.
OPERATOR_TAGS = ("v26.3.2", "v26.3.3", "v26.7.0")
DEFAULT_OPERATOR_TAG = "v26.3.2"
VERSION_ENV = "GPU_OPERATOR_VERSION"


def operator_tag(environ=None):
    """The GPU Operator version this lab runs: ``GPU_OPERATOR_VERSION`` (v26.7.0 or 26.7.0), else the default.
    Raises ValueError naming the versions it knows."""
    given = str((environ if environ is not None else os.environ).get(VERSION_ENV) or "").strip()
    if not given:
        return DEFAULT_OPERATOR_TAG
    tag = "v" + given.lstrip("v")
    if tag not in OPERATOR_TAGS:
        raise ValueError("%s=%s: the lab runs one of %s" % (VERSION_ENV, given, ", ".join(OPERATOR_TAGS)))
    return tag


OPERATOR_TAG = operator_tag()

# The helm major version that runs in the lab's helm-install Jobs: v4 as current RKE2 lines run it (klipper-helm
# since 2026-06), or v3 as the pinned RKE2 v1.34.1 runs it (klipper-helm v0.9.8: helm v3.18.4); tests/lab/build.sh
# builds both. LAB_HELM picks one.
HELM_LINES = ("v4", "v3")
HELM_ENV = "LAB_HELM"


def helm_line(environ=None):
    """The helm line the lab's install Jobs run: ``LAB_HELM`` (v4, 4, v3 or 3), v4 by default. Raises
    ValueError naming the lines it knows."""
    given = str((environ if environ is not None else os.environ).get(HELM_ENV) or "").strip()
    if not given:
        return HELM_LINES[0]
    line = "v" + given.lstrip("v")
    if line not in HELM_LINES:
        raise ValueError("%s=%s: the lab runs helm %s" % (HELM_ENV, given, " or ".join(HELM_LINES)))
    return line


def helm_binary(tools, line):
    """The helm of ``line`` in the helm-tools folder tests/lab/build.sh prints."""
    return os.path.join(tools, "helm") if line == "v4" else os.path.join(tools, line, "helm")


OPERATOR_TARBALL = "gpu-operator-%s.tar.gz" % OPERATOR_TAG
OPERATOR_GIT = "https://github.com/NVIDIA/gpu-operator.git"
# What a tree must hold to be the operator's source at the tag (vendor/ builds it offline).
OPERATOR_TREE_MARKERS = ("go.mod", "vendor/modules.txt", "cmd/gpu-operator", "assets",
                         "deployments/gpu-operator/Chart.yaml", "deployments/gpu-operator/crds")
RKE2_TAG = "v1.34.1+rke2r1"
RKE2_TARBALL = "rke2-%s.tar.gz" % RKE2_TAG
# Part of the cache key of a built rke2: bump it when build.sh rke2's flags change.
RKE2_RECIPE = 2
# What a tree must hold to be rke2's source (its modules come from the Go module proxy).
RKE2_TREE_MARKERS = ("go.mod", "main.go", "pkg/cli/cmds", "scripts/build-binary")
ARGOCD_CRDS_DIR = "argo-cd-v3.5.1-crds"
ARGOCD_CRD_FILES = ("application-crd.yaml", "appproject-crd.yaml")

# Set by CI (.ci/run): a lab without the upstream source is an error, not a fallback.
REQUIRE_ENV = "LAB_REQUIRE_UPSTREAM"


def cache_root():
    return os.environ.get("GPUPLATFORM_LAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "gpuplatform-rke2-lab")


def upstream_required():
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0", "false", "no")


def log(message):
    print("[lab-upstream %s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


class UpstreamMissing(RuntimeError):
    """No source could be had; ``tried`` says what was looked at, one line each."""

    def __init__(self, what, tried):
        self.what = what
        self.tried = list(tried)
        super(UpstreamMissing, self).__init__("%s not found; tried: %s" % (what, "; ".join(self.tried)))


class OperatorSource(object):
    """A resolved operator source tree. ``origin`` says where it came from (for the lab's
    one-line report), ``pin`` is part of every cache key built from it."""

    def __init__(self, tree, origin, pin):
        self.tree = tree
        self.origin = origin
        self.pin = pin

    @property
    def chart_dir(self):
        return os.path.join(self.tree, "deployments", "gpu-operator")

    @property
    def crd_files(self):
        crds = os.path.join(self.chart_dir, "crds")
        return sorted(os.path.join(crds, name) for name in os.listdir(crds) if name.endswith(".yaml"))

    @property
    def key(self):
        """The cache key of what is built from this source: the pin and the Go toolchain."""
        go_version = subprocess.run(["go", "env", "GOVERSION"], stdout=subprocess.PIPE, universal_newlines=True,
                                    check=True).stdout.strip()
        return hashlib.sha256(("%s %s" % (self.pin, go_version)).encode()).hexdigest()[:16]

    def __repr__(self):
        return "OperatorSource(%s, %s)" % (self.origin, self.tree)


def _is_operator_tree(path):
    return _is_tree(path, OPERATOR_TREE_MARKERS)


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_tree(path, markers):
    return all(os.path.exists(os.path.join(path, marker)) for marker in markers)


def _unpack(tarball, origin, tag):
    """Unpacks a ``git archive`` tarball of the operator's ``tag`` into the cache (once per sha256)."""
    sha, tree = _unpack_tree(tarball, "gpu-operator", tag, OPERATOR_TREE_MARKERS)
    return OperatorSource(tree, "%s (sha256 %s)" % (origin, sha), "%s sha256:%s" % (tag, sha))


@contextlib.contextmanager
def locked(path, doing="unpacking"):
    """Holds ``path``.lock (flock) for the block: suites that run side by side (make test runs lab
    suites beside the integration suite, and asks the other lines' operators ahead of them) may write
    the same cache entry at once, and each would remove the other's partial tree. Re-check inside."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log("another run is %s %s; waiting for it" % (doing, path))
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _unpack_tree(tarball, project, tag, markers):
    """Unpacks a ``git archive`` tarball of PROJECT at TAG into the cache once per sha256;
    returns (sha256, tree)."""
    sha = _sha256(tarball)
    target = os.path.join(cache_root(), "src", "%s-%s-%s" % (project, tag, sha[:12]))
    tree = os.path.join(target, "%s-%s" % (project, tag))
    if not _is_tree(tree, markers):
        with locked(target):
            _unpack_into(tarball, sha, project, tag, markers, target, tree)
    return sha, tree


def _unpack_into(tarball, sha, project, tag, markers, target, tree):
    """The unpack itself, under the lock; a run that waited for another's finds the tree there."""
    if not _is_tree(tree, markers):
        log("unpacking %s (sha256 %s...) into %s" % (tarball, sha[:12], target))
        shutil.rmtree(target, ignore_errors=True)
        partial = target + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial)
        with tarfile.open(tarball) as archive:
            archive.extractall(partial, filter="data")
        tops = os.listdir(partial)
        if len(tops) != 1 or not _is_tree(os.path.join(partial, tops[0]), markers):
            shutil.rmtree(partial, ignore_errors=True)
            raise UpstreamMissing("%s %s source" % (project, tag), [
                "%s: not a source archive of the tag (expected one top folder with %s)" % (
                    tarball, ", ".join(markers))])
        if tops[0] != os.path.basename(tree):
            os.rename(os.path.join(partial, tops[0]), os.path.join(partial, os.path.basename(tree)))
        os.rename(partial, target)


def _clone(tag, fetch=True):
    target = os.path.join(cache_root(), "src", "gpu-operator-%s-git" % tag)
    if _is_operator_tree(target):
        return target
    if not fetch:
        raise RuntimeError("no clone in the lab cache, and none made for this version")
    with locked(target, "cloning"):
        if not _is_operator_tree(target):
            _clone_into(tag, target)
    return target


def _clone_into(tag, target):
    partial = target + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    try:
        proc = subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch", tag, OPERATOR_GIT,
                               partial], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              env=env, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(str(exc))
    if proc.returncode != 0 or not _is_operator_tree(partial):
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(((proc.stdout or "").strip().splitlines() or ["clone incomplete"])[-1])
    os.rename(partial, target)


def resolve_operator_source(tag=None, clone=True):
    """The GPU Operator source at ``tag`` (the lab-up version, OPERATOR_TAG, by default), or
    UpstreamMissing saying what was tried. ``GPU_OPERATOR_SRC`` is the source of the lab-up version
    only; another version comes from ``../shared/upstream`` or a clone, made only when ``clone`` (an
    upgrade to it asks; the chart repository's listing at lab-up takes a clone already in the cache)."""
    tag = tag or OPERATOR_TAG
    tried = []
    given = os.environ.get("GPU_OPERATOR_SRC")
    if given and tag != OPERATOR_TAG:
        tried.append("GPU_OPERATOR_SRC=%s: the source of %s (the lab-up version), not of %s" % (
            given, OPERATOR_TAG, tag))
    elif given:
        if os.path.isdir(given):
            if _is_operator_tree(given):
                return OperatorSource(os.path.abspath(given), "GPU_OPERATOR_SRC tree %s" % given,
                                      "%s tree:%s" % (tag, os.path.abspath(given)))
            tried.append("GPU_OPERATOR_SRC=%s: not an operator source tree (needs %s)" % (
                given, ", ".join(OPERATOR_TREE_MARKERS)))
        elif os.path.isfile(given):
            return _unpack(given, "GPU_OPERATOR_SRC tarball %s" % given, tag)
        else:
            tried.append("GPU_OPERATOR_SRC=%s: no such file or folder" % given)
    else:
        tried.append("GPU_OPERATOR_SRC: not set")
    shared = os.path.join(SHARED_UPSTREAM, "gpu-operator-%s.tar.gz" % tag)
    if os.path.isfile(shared):
        return _unpack(shared, os.path.relpath(shared, ROOT), tag)
    tried.append("%s: not present" % os.path.relpath(shared, ROOT))
    try:
        tree = _clone(tag, fetch=clone)
        head = subprocess.run(["git", "-C", tree, "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                              universal_newlines=True, check=False).stdout.strip()
        return OperatorSource(tree, "shallow clone of %s at %s (%s)" % (OPERATOR_GIT, tag, head[:12]),
                              "%s git:%s" % (tag, head))
    except RuntimeError as exc:
        tried.append("git clone --depth 1 --branch %s %s: %s" % (tag, OPERATOR_GIT, exc))
    raise UpstreamMissing("GPU Operator %s source" % tag, tried)


def _go_version():
    return subprocess.run(["go", "env", "GOVERSION"], stdout=subprocess.PIPE, universal_newlines=True,
                          check=True).stdout.strip()


def _run_version(binary):
    try:
        proc = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=60, check=False)
    except OSError as exc:
        return str(exc)
    return (proc.stdout or "").strip().splitlines()[0] if proc.returncode == 0 and proc.stdout else (
        "rc %s: %s" % (proc.returncode, (proc.stdout or "").strip()[-200:]))


def resolve_rke2_binary(build=None):
    """The path of a real ``rke2`` binary at the pinned tag, or UpstreamMissing naming what
    was tried. In order: ``RKE2_BIN`` (an official release binary, used as it is);
    ``RKE2_SRC`` (a source tree or a ``git archive`` tarball of the tag); the tarball in
    ``../shared/upstream``. A source is built by ``build(tree, key)`` (tests/lab/build.sh
    rke2 SRC KEY; a cached build returns at once). Every candidate must say
    ``rke2 version <tag>``."""
    tried = []
    given = os.environ.get("RKE2_BIN")
    if given:
        version = _run_version(given) if os.access(given, os.X_OK) else "not an executable file"
        if version.startswith("rke2 version %s" % RKE2_TAG):
            return os.path.abspath(given)
        tried.append("RKE2_BIN=%s: %s (wanted rke2 version %s)" % (given, version, RKE2_TAG))
    else:
        tried.append("RKE2_BIN: not set")
    source = None
    given = os.environ.get("RKE2_SRC")
    if given:
        if os.path.isdir(given) and _is_tree(given, RKE2_TREE_MARKERS):
            source = (os.path.abspath(given), "%s tree:%s" % (RKE2_TAG, os.path.abspath(given)))
        elif os.path.isfile(given):
            sha, tree = _unpack_tree(given, "rke2", RKE2_TAG, RKE2_TREE_MARKERS)
            source = (tree, "%s sha256:%s" % (RKE2_TAG, sha))
        else:
            tried.append("RKE2_SRC=%s: neither an rke2 source tree (needs %s) nor a tarball" % (
                given, ", ".join(RKE2_TREE_MARKERS)))
    else:
        tried.append("RKE2_SRC: not set")
    shared = os.path.join(SHARED_UPSTREAM, RKE2_TARBALL)
    if source is None:
        if os.path.isfile(shared):
            sha, tree = _unpack_tree(shared, "rke2", RKE2_TAG, RKE2_TREE_MARKERS)
            source = (tree, "%s sha256:%s" % (RKE2_TAG, sha))
        else:
            tried.append("%s: not present" % os.path.relpath(shared, ROOT))
    if source is None:
        raise UpstreamMissing("rke2 %s" % RKE2_TAG, tried)
    tree, pin = source
    key = hashlib.sha256(("%s %s recipe %d" % (pin, _go_version(), RKE2_RECIPE)).encode()).hexdigest()[:16]
    binary = os.path.join(cache_root(), "rke2-%s" % key, "rke2")
    if not os.access(binary, os.X_OK):
        if build is None:
            tried.append("%s: not built yet (make lab-build builds it)" % binary)
            raise UpstreamMissing("rke2 %s" % RKE2_TAG, tried)
        binary = build(tree, key)
    return binary


def resolve_argocd_crds():
    """Paths of Argo CD's Application and AppProject CRDs (``ARGOCD_CRDS``: a folder
    holding them; else ``../shared/upstream``), or UpstreamMissing."""
    tried = []
    for label, folder in (("ARGOCD_CRDS", os.environ.get("ARGOCD_CRDS")),
                          (os.path.join("..", "shared", "upstream", ARGOCD_CRDS_DIR),
                           os.path.join(SHARED_UPSTREAM, ARGOCD_CRDS_DIR))):
        if not folder:
            tried.append("%s: not set" % label)
            continue
        paths = [os.path.join(folder, name) for name in ARGOCD_CRD_FILES]
        if all(os.path.isfile(p) for p in paths):
            return paths
        tried.append("%s: no %s" % (label, " and ".join(ARGOCD_CRD_FILES)))
    raise UpstreamMissing("Argo CD CRDs", tried)
