"""tests/lab/sched.py: a niced lab's components stay niced where the kernel schedules by session."""
import json
import os
import subprocess
import sys

from tests.lab import sched
from tests.lab.lab import ROOT

# A niced process starts a child in a session of its own, as the lab starts a component, and prints what
# keep_nice did, its own nice value, the child's scheduling group and its own.
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
    print(json.dumps([kept, os.getpriority(os.PRIO_PROCESS, 0), group, own]))
finally:
    child.kill()
"""


def test_a_niced_labs_component_gets_a_scheduling_group_as_niced_as_its_starter():
    # Relative to this run's own nice: make test runs the unit tests in a niced chain.
    done = subprocess.run(["nice", "-n", "5", sys.executable, "-c", CHILD], cwd=ROOT, check=True,
                          env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE, universal_newlines=True)
    kept, nice, group, own = json.loads(done.stdout)
    assert nice > 0
    if not os.path.exists("/proc/self/autogroup"):
        # No autogroups on this kernel: sessions share the CPU by their processes' nice values already.
        assert (kept, group) == (False, "")
        return
    assert kept is True
    assert group.endswith(" nice %d" % nice), (group, nice)
    # Its own session's group, not the starter's.
    assert group.split()[0] != own.split()[0], (group, own)


def test_at_normal_priority_no_group_is_touched(tmp_path, monkeypatch):
    group = tmp_path / "autogroup"
    group.write_text("/autogroup-1 nice 0\n")
    monkeypatch.setattr(sched, "AUTOGROUP", str(tmp_path / "autogroup") + "%.0s")
    monkeypatch.setattr(os, "getpriority", lambda which, who: 0)
    assert sched.keep_nice(0) is False
    assert group.read_text() == "/autogroup-1 nice 0\n"
    monkeypatch.setattr(os, "getpriority", lambda which, who: 7)
    assert sched.keep_nice(0) is True and group.read_text() == "7"


def test_a_process_already_gone_is_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sched, "AUTOGROUP", str(tmp_path / "gone" / "%d"))
    monkeypatch.setattr(os, "getpriority", lambda which, who: 10)
    assert sched.keep_nice(12345) is False
