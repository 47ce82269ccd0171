# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""BENCH-ONLY: each task's wall time in an ansible-playbook run, as the controller sees it.

bench/bench_scale.py enables this callback for the playbooks it measures and names a
file in BENCH_TASK_LOG. A task's time runs from its start on the controller to its
result there: templating its arguments, starting the module process, the module
itself, and handing its result back (the module's own wall time is in the request
counter's record, so the difference is Ansible's). One JSON line per task result.
Without BENCH_TASK_LOG it does nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: bench_task_times
    type: aggregate
    short_description: each task's wall time, for bench/bench_scale.py
    description: Appends one JSON line per task result to the file named in BENCH_TASK_LOG.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super(CallbackModule, self).__init__(*args, **kwargs)
        self._log = os.environ.get("BENCH_TASK_LOG")
        self._started = {}

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._started[task._uuid] = time.monotonic()

    def _record(self, result, status):
        if not self._log:
            return
        task = result._task
        started = self._started.get(task._uuid)
        with open(self._log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"task": task.get_name(), "action": task.action, "status": status,
                                     "wall": round(time.monotonic() - started, 3) if started else None}) + "\n")

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")
