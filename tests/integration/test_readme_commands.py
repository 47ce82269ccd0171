"""Every command README.md shows, run as a new user types it, so the README cannot drift
from what works (issue 16).

The commands are read from the README itself: each `make ...` line of its ``sh`` blocks and
each inline `make ...`. Every one must be known below, either run (offline on the example
site, or against the suite's lab where a cluster is needed) or excluded with the reason it
cannot run here (it needs real hosts); a command the README gains or loses fails
``test_every_readme_command_is_known`` until this file says how to run it.

Offline commands run on the checkout's example site and must leave its committed files as
they were (same text, same mtimes): what a fresh clone renders is what it holds."""

import json
import os
import re
import shlex
import subprocess

import pytest

from tests.integration.gpu_operator import without_operator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
EXAMPLE = "tirosh-home"

REAL_HOSTS = "needs the site's real hosts (SSH to them); molecule and the lab cover its roles"

# README command -> how it runs here. ("offline", [commands]) run on the example site;
# ("lab", [commands]) run in order against the suite's lab ({kubeconfig} is the lab's);
# ("excluded", reason) do not run. <site> is the example site.
KNOWN = {
    "make demo": ("excluded", "the main job itself (scripts/demo.py on a lab of its own); not part of make test"),
    "make test": ("excluded", "runs this test"),
    "make integration-helm3": ("excluded", "part of make test, which runs this test"),
    "make help": ("offline", ["make help"]),
    "make site/render SITE=<site>": ("offline", ["make site/render SITE=tirosh-home"]),
    "make site/render SITE=tirosh-home": ("offline", ["make site/render SITE=tirosh-home"]),
    "make site-check": ("offline", ["make site-check"]),
    "make inventory/render": ("offline", ["make inventory/render SITE=tirosh-home"]),
    "make inventory/render SITE=<site>": ("offline", ["make inventory/render SITE=tirosh-home"]),
    "make airgap/plan SITE=tirosh-home": ("offline", ["make airgap/plan SITE=tirosh-home"]),
    'make rke2/gpu/operator/apply SITE=tirosh-home OPERATOR_ARGS="-e gpu_operator_delivery=none"': (
        "offline", ['make rke2/gpu/operator/apply SITE=tirosh-home OPERATOR_ARGS="-e gpu_operator_delivery=none"']),
    # Against a cluster: the example site's hosts are not here, the lab's are.
    "make rke2/gpu/labels": ("lab", ["make rke2/gpu/labels SITE=lab"]),
    "make rke2/gpu/operator/apply": ("lab", ["make rke2/gpu/operator/apply SITE=lab"]),
    "make rke2/gpu/operator/apply SITE=tirosh-home": ("lab", ["make rke2/gpu/operator/apply SITE=lab"]),
    "make rke2/gpu/operator/upgrade SITE=tirosh-home OPERATOR_ARGS=--check": (
        "lab", ["make rke2/gpu/operator/upgrade SITE=lab OPERATOR_ARGS=--check"]),
    "make rke2/gpu/verify": ("lab", ["make rke2/gpu/verify SITE=lab"]),
    "make check KUBECONFIG=~/.kube/config": ("lab", ["make check KUBECONFIG={kubeconfig}"]),
    "make site SITE=<site>": ("excluded", REAL_HOSTS),
    "make site SITE=tirosh-home": ("excluded", REAL_HOSTS),
    "make host/network": ("excluded", REAL_HOSTS),
    "make rke2/server/install": ("excluded", REAL_HOSTS),
    "make rke2/agent/install": ("excluded", REAL_HOSTS),
    "make rke2/kubeconfig": ("excluded", REAL_HOSTS),
    "make rke2/gpu/preflight": ("excluded", "gathers the GPU hosts' facts over SSH; tests/unit/test_preflight_role.py"),
    "make argocd/apply": ("excluded", "needs Argo CD in the cluster and the site's Applications; its gate is "
                                      "tests/integration/test_site_lab.py's"),
    "make lab-up": ("excluded", "starts the developer's own lab in .lab, which the suite never touches; the lab "
                                "fixture starts one the same way in a work directory of its own"),
    "make lab-up LAB_NODES=1000": ("excluded", "starts the developer's own lab in .lab (see make lab-up); "
                                               "tests/integration/test_scale_lab.py starts a generated fleet the "
                                               "same way (labctl's --nodes, the lab_of_size fixture)"),
    "make lab-status": ("excluded", "shows the developer's own lab in .lab (see make lab-up)"),
    "make lab-down": ("excluded", "stops the developer's own lab in .lab (see make lab-up)"),
}

# The order the lab commands run in: labels, the operator, verification, then the check.
LAB_ORDER = ["make rke2/gpu/labels SITE=lab", "make rke2/gpu/operator/apply SITE=lab",
             "make rke2/gpu/operator/upgrade SITE=lab OPERATOR_ARGS=--check", "make rke2/gpu/verify SITE=lab",
             "make check KUBECONFIG={kubeconfig}"]
# The lab's fleet has, on purpose, a GPU node with a taint the operands do not tolerate (README, "The
# lab"): verification and the check may fail on it, and must then name it and nothing else.
TAINTED = "gpu-tainted-1"


def _verify_fails_only_on_the_tainted_node(run):
    assert re.search(r"\b1 of \d+ GPU nodes failing: %s\b" % TAINTED, run.stdout)
    assert "taint dedicated=training:NoSchedule not tolerated" in run.stdout


def _check_fails_only_on_the_tainted_node(run):
    errors = [line for line in run.stdout.splitlines() if line.startswith("error ")]
    assert errors and all(line.split()[1] == TAINTED for line in errors), errors


LAB_MAY_FAIL = {
    "make rke2/gpu/verify SITE=lab": _verify_fails_only_on_the_tainted_node,
    "make check KUBECONFIG={kubeconfig}": _check_fails_only_on_the_tainted_node,
}

_FENCE = re.compile(r"^```(\w*)\s*$")
_INLINE = re.compile(r"`(make [^`]+)`")


def readme_commands(text):
    """The README's make commands, in order, each once: `make` lines of ``sh`` blocks
    (their trailing comment dropped) and inline `make ...` spans of the prose and tables."""
    found, block = [], None
    for line in text.splitlines():
        fence = _FENCE.match(line.strip())
        if fence:
            block = None if block is not None else fence.group(1)
            continue
        if block is not None:
            if block == "sh":
                command = re.split(r"\s+#", line.strip(), maxsplit=1)[0].strip()
                if command.startswith("make "):
                    found.append(command)
            continue
        found.extend(m.group(1) for m in _INLINE.finditer(line))
    result = []
    for command in (" ".join(c.split()) for c in found):
        if command not in result:
            result.append(command)
    return result


def _commands():
    with open(README) as handle:
        return readme_commands(handle.read())


def run_make(command, env=None):
    """``command`` as a user types it in the checkout, outside any make of the suite."""
    full_env = dict(env or os.environ)
    for key in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"):
        full_env.pop(key, None)
    full_env["ANSIBLE_NOCOLOR"] = "1"
    return subprocess.run(shlex.split(command), cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, check=False)


def example_files():
    """{path: (text, mtime_ns)} of the example site's committed files."""
    found = {}
    for top in (os.path.join("sites", EXAMPLE), os.path.join("inventories", EXAMPLE)):
        for base, _dirs, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                path = os.path.join(base, name)
                with open(path) as handle:
                    found[os.path.relpath(path, ROOT)] = (handle.read(), os.stat(path).st_mtime_ns)
    return found


def test_the_readme_parser_finds_block_and_inline_commands():
    text = "\n".join(["Run `make help` or `make site SITE=<site>`.", "```sh",
                      "make site/render SITE=x   # render it", "  make   check KUBECONFIG=y", ".lab/bin kubectl", "```",
                      "```yaml", "make: not a command", "```", "| `make a`, `make b` |"])
    assert readme_commands(text) == ["make help", "make site SITE=<site>", "make site/render SITE=x",
                                     "make check KUBECONFIG=y", "make a", "make b"]


def test_every_readme_command_is_known():
    commands = _commands()
    unknown = [c for c in commands if c not in KNOWN]
    assert not unknown, "README commands this test does not know how to run (add them to KNOWN): %s" % unknown
    gone = sorted(c for c in KNOWN if c not in commands)
    assert not gone, "KNOWN lists commands the README no longer shows: %s" % gone
    for command, (kind, how) in KNOWN.items():
        assert kind in ("offline", "lab", "excluded"), command
        if kind == "lab":
            assert all(c in LAB_ORDER for c in how), command


def _offline():
    runs = []
    for command in _commands():
        kind, how = KNOWN.get(command, ("unknown", None))
        if kind == "offline":
            runs.extend(c for c in how if c not in runs)
    return runs


@pytest.mark.parametrize("command", _offline())
def test_offline_readme_command_works_on_the_example_site_and_changes_no_committed_file(command):
    before = example_files()
    run = run_make(command)
    assert run.returncode == 0, "%s\n%s" % (command, run.stdout[-6000:])
    assert example_files() == before, "%s changed the example site's committed files" % command
    if command == "make help":
        assert "site/render" in run.stdout and "site-check" in run.stdout
    if command.startswith("make airgap/plan"):
        assert "nvcr.io/nvidia/driver:" in run.stdout


@pytest.fixture(scope="module")
def readme_lab(lab):
    """The lab without the GPU Operator, as a new cluster is; left the same way."""
    without_operator(lab)
    yield lab
    without_operator(lab)


def test_lab_readme_commands_work_on_the_lab(readme_lab, lab_env):
    wanted = set()
    for command in _commands():
        kind, how = KNOWN.get(command, ("unknown", None))
        if kind == "lab":
            wanted.update(how)
    assert wanted, "the README shows no command that needs a cluster"
    before = example_files()
    for command in [c for c in LAB_ORDER if c in wanted]:
        run = run_make(command.format(kubeconfig=readme_lab.kubeconfig), env=lab_env)
        if run.returncode != 0 and command in LAB_MAY_FAIL:
            try:
                LAB_MAY_FAIL[command](run)
            except AssertionError:
                raise AssertionError("%s\n%s" % (command, run.stdout[-8000:]))
        else:
            assert run.returncode == 0, "%s\n%s" % (command, run.stdout[-8000:])
        if command.startswith("make check"):
            assert "gpu-container-1" in run.stdout and re.search(r"\d+ nodes \(\d+ GPU\)", run.stdout), \
                run.stdout[-4000:]
    report = os.path.join(ROOT, "artifacts", "lab", "gpu-verify.json")
    if "make rke2/gpu/verify SITE=lab" in wanted:
        with open(report) as handle:
            assert json.load(handle)["nodes"]["gpu-container-1"]["status"] == "ok"
    assert example_files() == before
