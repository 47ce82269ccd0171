# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""BENCH-ONLY: counts the HTTP requests of a Python process and records its peak memory.

bench/bench_scale.py puts this folder first on PYTHONPATH of the processes it measures
(a module run alone, ansible-playbook and the module processes it starts) and names a
file in BENCH_REQUEST_LOG. Every request urllib3 sends (the kubernetes client's
transport) is counted by kind; at exit the process appends one JSON line: its command
line, the counts, its wall time and its peak resident set size. Without
BENCH_REQUEST_LOG it does nothing.
"""

import atexit
import json
import os
import sys
import threading
import time

LOG = os.environ.get("BENCH_REQUEST_LOG")


def _kind(method, url):
    """list, watch, get, log, create, patch, delete or other, from the request alone."""
    path, _sep, query = (url or "").partition("?")
    if method == "GET":
        if "watch=true" in query or "watch=True" in query:
            return "watch"
        if path.endswith("/log"):
            return "log"
        # /api/v1/nodes, /api/v1/namespaces/x/pods, /apis/g/v/ns/x/plural: a collection when
        # the segment count after the version says so (odd: collection; even: one object).
        parts = [p for p in path.split("/") if p]
        version_at = 1 if parts[:1] == ["api"] else 2
        rest = parts[version_at + 1:]
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            rest = rest[2:]
        return "list" if len(rest) % 2 == 1 else "get"
    return {"POST": "create", "PATCH": "patch", "PUT": "replace", "DELETE": "delete"}.get(method, "other")


def _peak_rss_mb():
    """The process's peak resident set (VmHWM). Not getrusage's ru_maxrss: Linux carries
    that across execve from the image before it, so a process started by a bigger parent
    reports the parent's peak."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    return None


def _install():
    import urllib3.connectionpool

    counts = {}
    lock = threading.Lock()
    started = time.monotonic()
    original = urllib3.connectionpool.HTTPConnectionPool.urlopen

    def urlopen(self, method, url, *args, **kwargs):
        # Retries and redirects re-enter urlopen; each is a request of its own on the wire.
        kind = _kind(method, url)
        with lock:
            counts[kind] = counts.get(kind, 0) + 1
        return original(self, method, url, *args, **kwargs)

    urllib3.connectionpool.HTTPConnectionPool.urlopen = urlopen

    def record():
        if not counts:
            return
        line = {"pid": os.getpid(), "argv": sys.argv[:2], "requests": dict(counts, total=sum(counts.values())),
                "wall": round(time.monotonic() - started, 3),
                "max_rss_mb": _peak_rss_mb()}
        with open(LOG, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, sort_keys=True) + "\n")

    atexit.register(record)


if LOG:
    try:
        _install()
    except ImportError:
        pass
