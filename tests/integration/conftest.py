"""The lab for the integration suite: one control plane per test session, in its own
work directory (a developer's `make lab-up` lab is never touched), torn down at the end."""

import contextlib
import os
import shutil
import tempfile

import pytest

from tests.lab.fleet import LAB_OPERATOR_VALUES
from tests.lab import upstream
from tests.lab.lab import Lab

# The operator values the suite's clean fleet runs with (the lab's own, tests/lab/fleet.py).
FLEET_VALUES = LAB_OPERATOR_VALUES
# Where each lab's component logs are kept once its work directory is removed: a lab failure
# that shows only after the session (a settle wait that timed out) is read there.
KEPT_LOGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         ".build", "lab-logs")


@contextlib.contextmanager
def started_lab(nodes=None, operator_version=None):
    """A lab in a work directory of its own, stopped and removed on the way out; ``nodes``:
    a generated fleet of that many nodes (tests/lab/fleet.py), else the lab inventory's;
    ``operator_version``: the GPU Operator version it starts (GPU_OPERATOR_VERSION's by default)."""
    workdir = tempfile.mkdtemp(prefix="gpuplatform-lab-")
    instance = Lab(workdir=workdir, nodes=nodes, operator_version=operator_version)
    instance.up()
    try:
        yield instance
    finally:
        try:
            instance.down()
        finally:
            _keep_logs(instance)
            shutil.rmtree(workdir, ignore_errors=True)


def _keep_logs(instance):
    kept = os.path.join(KEPT_LOGS, os.path.basename(instance.workdir))
    try:
        shutil.copytree(instance.logs_dir, kept, dirs_exist_ok=True)
    except OSError as exc:
        print("lab logs not kept (%s): %s" % (kept, exc))
    else:
        print("lab logs kept in %s" % kept)


@pytest.fixture(scope="session")
def lab():
    with started_lab() as instance:
        # Every ansible-playbook the suite runs renders the lab site's HelmChart, which points
        # at the lab's chart repository (inventories/lab/hosts.yml reads LAB_CHART_REPO).
        os.environ["LAB_CHART_REPO"] = instance.chart_repo_url()
        # ... and renders it for the version the lab runs.
        os.environ[upstream.VERSION_ENV] = instance.operator_version()
        # ... also through make's SITE=lab steps, which otherwise ask the developer's own .lab.
        os.environ["LAB_" + upstream.VERSION_ENV] = instance.operator_version()
        yield instance


@pytest.fixture(scope="module")
def lab_of_size():
    """``lab_of_size(n)``: a second lab, of n generated nodes in the lab fleet's proportions
    (its inventory: ``lab.fleet_file``), stopped when the test module is done."""
    with contextlib.ExitStack() as stack:
        yield lambda nodes: stack.enter_context(started_lab(nodes=nodes))


@pytest.fixture
def fleet_values():
    return dict(FLEET_VALUES)


@pytest.fixture
def gpu_lab(lab):
    """The clean fleet with workload labels and the GPU Operator rolled out; faults and
    per-node switches a test leaves behind are undone before the next test."""
    lab.reset(FLEET_VALUES)
    yield lab
    lab.reset()


@pytest.fixture
def lab_env(lab):
    """Environment for subprocesses (ansible-playbook, CLIs) that talk to the lab."""
    env = dict(os.environ)
    env.update(lab.env())
    return env


@pytest.fixture(scope="session")
def real_operator(lab):
    """The lab, when it runs the real GPU Operator; the suites that judge the collection
    by the real operator, chart and helm are skipped (offline only: CI requires it)."""
    require_real_operator(lab, "needs the GPU Operator's upstream source (GPU_OPERATOR_SRC, ../shared/upstream/"
                               "gpu-operator-%s.tar.gz, or a clone of the tag): this lab runs the offline simulator"
                          % upstream.OPERATOR_TAG)
    return lab


def require_real_operator(lab, why):
    """Skips the test (``why``) when ``lab`` runs the offline simulator, or fails it under
    LAB_REQUIRE_UPSTREAM=1 (CI): there the lab refuses to start without the source, and this
    says the same should a lab come up simulated anyway."""
    if lab.mode != "real":
        if upstream.upstream_required():
            pytest.fail("LAB_REQUIRE_UPSTREAM=1, yet the lab runs the offline simulator")
        pytest.skip(why)
