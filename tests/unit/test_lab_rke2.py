"""Where the lab's real rke2 comes from (tests/lab/upstream.py resolve_rke2_binary) and
what `labctl rke2-binary` says without one: molecule/rke2 skips its real-binary checks
with that reason, and CI (LAB_REQUIRE_UPSTREAM=1) fails instead."""
import io
import os
import tarfile

import pytest

from tests.lab import labctl, upstream


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No ../shared, no RKE2_BIN or RKE2_SRC, the cache under tmp_path."""
    monkeypatch.setattr(upstream, "SHARED_UPSTREAM", str(tmp_path / "no-shared"))
    monkeypatch.setenv("GPUPLATFORM_LAB_CACHE", str(tmp_path / "cache"))
    for name in ("RKE2_BIN", "RKE2_SRC", upstream.REQUIRE_ENV):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _binary(path, version_line):
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\necho '%s'\necho 'go version go1.24.6'\n" % version_line)
    os.chmod(path, 0o755)
    return path


def _source_tarball(path):
    with tarfile.open(path, "w:gz") as archive:
        for marker in upstream.RKE2_TREE_MARKERS:
            name = "rke2-%s/%s" % (upstream.RKE2_TAG, marker)
            archive.addfile(tarfile.TarInfo(name if "." in os.path.basename(marker) else name + "/keep"),
                            io.BytesIO(b""))
    return path


def test_an_official_binary_is_used_as_it_is(isolated, monkeypatch):
    binary = _binary(str(isolated / "rke2"), "rke2 version v1.34.1+rke2r1 (98b87c78e2c5a09fd8ff07bcaf4f102db1894a93)")
    monkeypatch.setenv("RKE2_BIN", binary)
    assert upstream.resolve_rke2_binary() == binary


def test_a_binary_of_another_version_is_refused_naming_it(isolated, monkeypatch):
    monkeypatch.setenv("RKE2_BIN", _binary(str(isolated / "rke2"), "rke2 version v1.33.5+rke2r1 (abc)"))
    with pytest.raises(upstream.UpstreamMissing) as exc:
        upstream.resolve_rke2_binary()
    assert "rke2 version v1.33.5+rke2r1 (abc) (wanted rke2 version v1.34.1+rke2r1)" in exc.value.tried[0]


def test_a_source_is_built_once_under_a_key_of_its_sha256(isolated, monkeypatch):
    monkeypatch.setenv("RKE2_SRC", _source_tarball(str(isolated / "rke2.tar.gz")))
    builds = []

    def build(tree, key):
        builds.append((tree, key))
        out = os.path.join(upstream.cache_root(), "rke2-%s" % key, "rke2")
        os.makedirs(os.path.dirname(out))
        return _binary(out, "rke2 version v1.34.1+rke2r1 (98b87c78)")

    first = upstream.resolve_rke2_binary(build)
    assert upstream.resolve_rke2_binary(build) == first and len(builds) == 1
    assert os.path.exists(os.path.join(builds[0][0], "scripts", "build-binary"))
    # Without a builder (labctl rke2-binary, molecule) a source not built yet is a reason, not a build.
    monkeypatch.setenv("GPUPLATFORM_LAB_CACHE", str(isolated / "other-cache"))
    with pytest.raises(upstream.UpstreamMissing, match="not built yet .make lab-build builds it."):
        upstream.resolve_rke2_binary()


def test_labctl_says_why_there_is_none_and_ci_fails(isolated, monkeypatch, capsys):
    assert labctl.main(["rke2-binary"]) == labctl.EXIT_NO_RKE2
    err = capsys.readouterr().err
    assert "RKE2_BIN: not set; RKE2_SRC: not set; " in err
    assert "/no-shared/rke2-v1.34.1+rke2r1.tar.gz: not present" in err
    monkeypatch.setenv(upstream.REQUIRE_ENV, "1")
    assert labctl.main(["rke2-binary"]) == 1
    assert "LAB_REQUIRE_UPSTREAM=1 and rke2 v1.34.1+rke2r1 not found" in capsys.readouterr().err
