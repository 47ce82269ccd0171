"""scripts/airgap-mirror.sh with stand-in copy tools: it refuses before copying anything
when the tool, the mirror or a source image is missing, and a failed copy stops the run
naming what was and was not copied."""
import os
import socket
import stat
import subprocess

import pytest

from tests.conftest import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "airgap-mirror.sh")

# A copy tool that logs its calls; inspect fails for references in STUB_MISSING, copy for
# sources in STUB_FAIL_COPY (both space-separated).
STUB = """#!/bin/bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
ref="${@: -1}"; ref="${ref#docker://}"
case "$1" in
  inspect|manifest) for m in $STUB_MISSING; do [ "$m" = "$ref" ] && exit 1; done
                    for m in $STUB_AMD64_ONLY; do [ "$m" = "$ref" ] && { echo "$AMD64_INDEX"; exit 0; }; done
                    echo "$BOTH_INDEX"; exit 0 ;;
  copy) src="${@: -2:1}"; src="${src#docker://}"
        for m in $STUB_FAIL_COPY; do [ "$m" = "$src" ] && exit 1; done; exit 0 ;;
esac
exit 3
"""


@pytest.fixture
def mirror():
    """A listening socket stands for the mirror registry (the kernel completes the TCP
    handshake; the script only checks that the mirror answers)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield "127.0.0.1:%d" % sock.getsockname()[1]
    sock.close()


def _bin(tmp_path, tools):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("bash", "sed", "timeout", "basename", "grep"):
        for folder in ("/usr/bin", "/bin"):
            if os.path.exists(os.path.join(folder, name)):
                os.symlink(os.path.join(folder, name), str(bindir / name))
                break
    for tool in tools:
        path = bindir / tool
        path.write_text(STUB)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return bindir


# What the stand-in registry answers: an index of both platforms, or (STUB_AMD64_ONLY) of amd64 alone.
BOTH_INDEX = ('{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": ['
              '{"digest": "sha256:aa", "platform": {"architecture": "amd64", "os": "linux"}}, '
              '{"digest": "sha256:bb", "platform": {"architecture": "arm64", "os": "linux"}}]}')
AMD64_INDEX = ('{"schemaVersion": 2, "manifests": [{"digest": "sha256:aa", "platform": {"architecture": "amd64", '
               '"os": "linux"}}]}')


def run(tmp_path, plan_text, tools=("skopeo",), args=(), missing="", fail_copy="", amd64_only=""):
    plan = tmp_path / "images.txt"
    plan.write_text(plan_text)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {"PATH": str(_bin(tmp_path, tools)), "STUB_LOG": str(log), "STUB_MISSING": missing,
           "STUB_FAIL_COPY": fail_copy, "STUB_AMD64_ONLY": amd64_only, "BOTH_INDEX": BOTH_INDEX,
           "AMD64_INDEX": AMD64_INDEX}
    proc = subprocess.run(["/bin/bash", SCRIPT] + list(args) + [str(plan)], capture_output=True, text=True, env=env,
                          check=False)
    return proc, log.read_text().splitlines()


def plan_for(mirror):
    return ("# Image plan\n\n# GPU Operator v26.3.2\n"
            "nvcr.io/nvidia/gpu-operator:v26.3.2 -> {m}/nvidia/gpu-operator:v26.3.2  # operator\n"
            "nvcr.io/nvidia/k8s/container-toolkit:v1.19.1 -> {m}/nvidia/k8s/container-toolkit:v1.19.1\n"
            "{m}/nvidia/vgpu-manager:580.126.20-ubuntu22.04 -> {m}/nvidia/vgpu-manager:580.126.20-ubuntu22.04\n"
            ).format(m=mirror)


def test_copies_every_image_multi_arch_and_skips_site_built_ones(tmp_path, mirror):
    proc, calls = run(tmp_path, plan_for(mirror))
    assert proc.returncode == 0, proc.stderr
    copies = [c for c in calls if c.startswith("skopeo copy")]
    assert copies == [
        "skopeo copy --all --retry-times 3 docker://nvcr.io/nvidia/gpu-operator:v26.3.2 "
        "docker://%s/nvidia/gpu-operator:v26.3.2" % mirror,
        "skopeo copy --all --retry-times 3 docker://nvcr.io/nvidia/k8s/container-toolkit:v1.19.1 "
        "docker://%s/nvidia/k8s/container-toolkit:v1.19.1" % mirror,
    ]
    # Every inspection happened before the first copy.
    assert calls.index(copies[0]) == 3 and all(c.startswith("skopeo inspect --raw") for c in calls[:3])
    assert "copied 2 image(s)" in proc.stdout


def test_crane_works_the_same(tmp_path, mirror):
    proc, calls = run(tmp_path, plan_for(mirror), tools=("crane",))
    assert proc.returncode == 0, proc.stderr
    assert "crane copy nvcr.io/nvidia/gpu-operator:v26.3.2 %s/nvidia/gpu-operator:v26.3.2" % mirror in calls


def test_no_tool_fails_before_anything(tmp_path, mirror):
    proc, calls = run(tmp_path, plan_for(mirror), tools=())
    assert proc.returncode == 1
    assert "neither skopeo nor crane is installed" in proc.stderr and "nothing was copied" in proc.stderr
    assert calls == []


def test_unreachable_mirror_fails_before_anything(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    closed = "127.0.0.1:%d" % sock.getsockname()[1]
    sock.close()
    proc, calls = run(tmp_path, plan_for(closed))
    assert proc.returncode == 1
    assert "the mirror %s does not answer" % closed in proc.stderr
    assert calls == []


def test_a_missing_source_fails_before_any_copy(tmp_path, mirror):
    proc, calls = run(tmp_path, plan_for(mirror), missing="nvcr.io/nvidia/k8s/container-toolkit:v1.19.1 "
                      "%s/nvidia/vgpu-manager:580.126.20-ubuntu22.04" % mirror)
    assert proc.returncode == 1
    assert "  nvcr.io/nvidia/k8s/container-toolkit:v1.19.1\n" in proc.stderr
    assert "vgpu-manager:580.126.20-ubuntu22.04 (built for the site: push it to the mirror)" in proc.stderr
    assert not [c for c in calls if " copy " in " %s " % c]


def test_a_failed_copy_stops_and_says_what_was_copied(tmp_path, mirror):
    proc, calls = run(tmp_path, plan_for(mirror), fail_copy="nvcr.io/nvidia/k8s/container-toolkit:v1.19.1")
    assert proc.returncode == 1
    assert "copying nvcr.io/nvidia/k8s/container-toolkit:v1.19.1 failed after 1 of 2 image(s)" in proc.stderr
    assert "not copied: 1 (this one and the rest; run again to resume)" in proc.stderr


def test_dry_run_copies_nothing(tmp_path, mirror):
    proc, calls = run(tmp_path, plan_for(mirror), args=("--dry-run",))
    assert proc.returncode == 0
    assert "would copy nvcr.io/nvidia/gpu-operator:v26.3.2 -> %s/nvidia/gpu-operator:v26.3.2" % mirror in proc.stdout
    assert not [c for c in calls if c.startswith("skopeo copy")]


def test_a_plan_without_a_mirror_is_refused(tmp_path, mirror):
    proc, calls = run(tmp_path, "nvcr.io/nvidia/gpu-operator:v26.3.2  # operator\n")
    assert proc.returncode == 1
    assert "line 1 has no mirror" in proc.stderr and "gpu_operator_image_registry" in proc.stderr
    assert calls == []


MIXED_PLAN = ("nvcr.io/nvidia/k8s-device-plugin:v0.19.2 -> {m}/nvidia/k8s-device-plugin:v0.19.2  # device-plugin "
              "[linux/amd64, linux/arm64]\n"
              "nvcr.io/nvidia/driver:580.126.20-ubuntu24.04 -> {m}/nvidia/driver:580.126.20-ubuntu24.04  # driver "
              "[linux/amd64]\n")


def test_a_mixed_architecture_plan_copies_when_every_index_has_its_platforms(tmp_path, mirror):
    proc, calls = run(tmp_path, MIXED_PLAN.format(m=mirror),
                      amd64_only="nvcr.io/nvidia/driver:580.126.20-ubuntu24.04")
    assert proc.returncode == 0, proc.stderr
    assert len([c for c in calls if c.startswith("skopeo copy --all")]) == 2


def test_an_image_without_an_arm64_variant_for_arm64_nodes_is_refused_before_copying(tmp_path, mirror):
    proc, calls = run(tmp_path, MIXED_PLAN.format(m=mirror), amd64_only="nvcr.io/nvidia/k8s-device-plugin:v0.19.2")
    assert proc.returncode == 1
    assert "nvcr.io/nvidia/k8s-device-plugin:v0.19.2 lacks linux/arm64" in proc.stderr
    assert "nothing was copied" in proc.stderr
    assert not [c for c in calls if " copy " in " %s " % c]
