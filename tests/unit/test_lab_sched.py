"""tests/lab/sched.py: a niced lab's components stay niced where the kernel schedules by session."""
import json
import os
import subprocess
import sys

from tests.lab import sched
from tests.lab.lab import ROOT

# A process at nice 10 starts a child in a session of its own, as the lab starts a component, and prints what
# keep_nice did and the child's scheduling group.
CHILD = """
import json, os, subprocess
from tests.lab import sched
child = subprocess.Popen(["sleep", "30"], start_new_session=True)
try:
    kept = sched.keep_nice(child.pid)
    try:
        group = open("/proc/%d/autogroup" % child.pid).read().strip()
    except OSError:
        group = ""
    own = open("/proc/self/autogroup").read().strip() if os.path.exists("/proc/self/autogroup") else ""
    print(json.dumps([kept, group, own]))
finally:
    child.kill()
"""


def _run(nice):
    done = subprocess.run(["nice", "-n", str(nice), sys.executable, "-c", CHILD], cwd=ROOT, check=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE, universal_newlines=True)
    return json.loads(done.stdout)


def test_a_niced_labs_component_gets_a_niced_scheduling_group():
    kept, group, own = _run(10)
    if not os.path.exists("/proc/self/autogroup"):
        # No autogroups on this kernel: sessions share the CPU by their processes' nice values already.
        assert (kept, group) == (False, "")
        return
    assert kept is True
    assert group.endswith(" nice 10"), group
    # Its own session's group, not the starter's.
    assert group.split()[0] != own.split()[0], (group, own)


def test_a_lab_at_normal_priority_leaves_the_groups_alone():
    kept, group, _own = _run(0)
    assert kept is False
    if os.path.exists("/proc/self/autogroup"):
        assert group.endswith(" nice 0"), group


def test_a_process_already_gone_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sched, "AUTOGROUP", str(tmp_path / "gone" / "%d"))
    monkeypatch.setattr(os, "getpriority", lambda which, who: 10)
    assert sched.keep_nice(12345) is False
