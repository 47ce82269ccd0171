#!/usr/bin/env python
"""Runs lab tests many times in a row, optionally with a CPU hog beside them, and says how
often each failed: a flake is hunted, not waited for (docs/lab.md "Hunting flakes").

    scripts/flake-hunt.py --runs 10 --hog 2 tests/integration/test_waits_lab.py::test_x ...

Each run is a fresh pytest process (a fresh lab), so one run's state cannot hide another's
race. The hog is ``--hog`` processes spinning on the CPU at normal priority, each in a session
of its own as another job on the machine would be: where the kernel schedules by session
(sched_autogroup_enabled=1), the lab's components, each in its own session, would otherwise
share the CPU with all the hogs as with one (tests/lab/sched.py). On a 2-core machine they take
what the lab's control plane, operator and node agent would get, the way a slower or busier CI
machine would. It stops when the hunt stops (or is interrupted),
and its processes end by themselves after ``--hog-limit`` seconds should the hunt be killed.
The lab's component logs of every run stay in .build/lab-logs/ (tests/integration/conftest.py).
Exit 0 only when every run of every test passed."""

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# pytest's closing line: "3 passed, 1 failed in 12.3s" (any order, any subset).
_COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


def spin(limit):
    """A CPU hog in a session of its own that ends by itself after ``limit`` seconds."""
    os.setsid()
    end = time.monotonic() + limit
    while time.monotonic() < end:
        sum(range(100000))


def closing_counts(output):
    """{"passed": n, "failed": n, "error": n, "skipped": n} from pytest's last summary line."""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    lines = [line for line in output.splitlines() if _COUNTS.search(line) and " in " in line]
    for number, word in _COUNTS.findall(lines[-1] if lines else ""):
        counts["error" if word.startswith("error") else word] += int(number)
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of the whole selection (default 10)")
    parser.add_argument("--hog", type=int, default=0, help="CPU-spinning processes beside the tests (default 0)")
    parser.add_argument("--hog-limit", type=float, default=6 * 3600, help="a hog process's own end (s)")
    parser.add_argument("--log", default=os.path.join(ROOT, ".build", "flake-hunt.log"),
                        help="every run's pytest output, appended")
    parser.add_argument("tests", nargs="+", help="pytest node ids or paths")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.hog < 0:
        parser.error("--runs must be at least 1 and --hog at least 0")
    hogs = [multiprocessing.Process(target=spin, args=(args.hog_limit,), daemon=True) for _hog in range(args.hog)]
    for hog in hogs:
        hog.start()
    os.makedirs(os.path.dirname(args.log), exist_ok=True)
    results = []
    try:
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly"] + args.tests,
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
            took = time.monotonic() - started
            counts = closing_counts(proc.stdout)
            failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
            results.append((run, proc.returncode, counts, took, failed))
            with open(args.log, "a") as handle:
                handle.write("==== run %d of %d, hog %d, rc %d, %.0fs\n%s\n" % (
                    run, args.runs, args.hog, proc.returncode, took, proc.stdout))
            print("run %d/%d: rc %d, %d passed, %d failed, %d errors, %d skipped in %.0fs%s" % (
                run, args.runs, proc.returncode, counts["passed"], counts["failed"], counts["error"],
                counts["skipped"], took, "".join("\n    " + line for line in failed)), flush=True)
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join()
    bad = [r for r in results if r[1] != 0 or r[2]["failed"] or r[2]["error"] or r[2]["skipped"]]
    print("flake hunt: %d runs, hog %d: %d failed runs; passed %d, failed %d, errors %d, skipped %d (log: %s)" % (
        len(results), args.hog, len(bad), sum(r[2]["passed"] for r in results),
        sum(r[2]["failed"] for r in results), sum(r[2]["error"] for r in results),
        sum(r[2]["skipped"] for r in results), args.log))
    if bad:
        print("the failed runs' lab logs are in %s" % os.path.join(ROOT, ".build", "lab-logs"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
