"""Checks against the real rke2 binary (make lab-build builds it; tests/lab/upstream.py says
from where). Apart from the unit tests because that binary is the lab's longest cold build:
make test builds it while the lab suites run and runs these after it, before molecule/rke2.
Without a binary they skip with what was tried; LAB_REQUIRE_UPSTREAM=1 (CI) makes that a failure."""
import os

import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_flags
from tests.lab import rke2_flags as generator
from tests.lab import upstream


def _real_rke2():
    try:
        return upstream.resolve_rke2_binary()
    except upstream.UpstreamMissing as exc:
        if upstream.upstream_required():
            raise
        pytest.skip("no real rke2 to compare with (%s)" % "; ".join(exc.tried))
    return None


def test_the_committed_list_matches_the_real_binary():
    binary = _real_rke2()
    with open(generator.TARGET) as handle:
        committed = handle.read()
    assert generator.generate(binary) == committed, (
        "%s is not what %s --help lists: run make rke2-flags" % (os.path.relpath(generator.TARGET), binary))
    assert rke2_flags.RKE2_VERSION == upstream.RKE2_TAG
