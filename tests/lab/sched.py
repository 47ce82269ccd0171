"""A lab process's share of the CPU where the kernel schedules by session.

The lab starts each of its components, and the helm job runner each helm, in a session of its own (stopped as a
group). Where the kernel groups tasks by session (``/proc/sys/kernel/sched_autogroup_enabled`` = 1, Debian's
default), each session is a scheduling group, and groups share the CPU equally whatever their processes' nice
values: a lab started by a niced suite (make test runs the other lines' lab suites at nice 10 beside the
integration suite) would take as much of the CPU as the integration suite's own lab. ``keep_nice`` gives the new
session's group the nice value of the process that started it."""
import os

AUTOGROUP = "/proc/%d/autogroup"


def keep_nice(pid):
    """Gives the scheduling group of ``pid``'s session this process's nice value when that is above 0. Returns
    whether it did: not without autogroups (no such file), nor for a process already gone."""
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice <= 0:
        return False
    try:
        with open(AUTOGROUP % pid, "w", encoding="ascii") as group:
            group.write(str(nice))
    except OSError:
        return False
    return True
