# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the watch-based wait modules against the polling loop peers use, on a lab
this benchmark starts in a temporary directory (never the developer's .lab).

Each repetition holds every operand of gpu-container-2 down (lab switch), so the node
advertises no GPU and its operand chain is not Ready; starts the waiter; keeps the
condition false for the hold time (the plan's seconds plus a uniform draw from one polling
interval, the same for both waiters, so that the release falls anywhere in the loop's
interval); releases the node at T0 (taken right after the release call returns) and
measures T0 to the waiter's return, and the API requests the waiter made. Waiters, side by
side in this process:

- module: the collection's module, run as Ansible runs it (a subprocess), started and in
  its watch phase before the hold time begins; requests: its ``api_requests.total``;
- poll: ``until kubectl get ...; do sleep 5; done`` with the lab's pinned kubectl, started
  when the hold time begins; requests: kubectl calls.

An observer watch in this process also records when the API first shows the condition
true (the simulated operator needs from a few hundred milliseconds to a second to react to
the release on a busy host); "from the API change" is T0 replaced by that moment: what the
waiter itself adds.

    python -m bench.bench_waits [--plan allocatable=2:15,10:5,30:3,60:2 operands=2:8,30:2] [--interval 5]
        [--json runs.json] [--through-proxy]

``--through-proxy``: instead of the loop, the same module a second time with its kubeconfig
pointed at the lab's fault proxy (tests/lab/fault_proxy.py) in pass-through mode, each
repetition both ways: what the proxy the fault tests run through adds (it should add
nothing beyond noise).
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
for path in (COLLECTIONS, ROOT):
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om  # noqa: E402
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness  # noqa: E402
from tests.integration.conftest import FLEET_VALUES  # noqa: E402
from tests.integration.kube import wait_for  # noqa: E402
from tests.integration.modules import finish_module, start_module  # noqa: E402
from tests.lab.fault_proxy import FaultProxy  # noqa: E402
from tests.lab.lab import Lab  # noqa: E402

NODE = "gpu-container-2"
GPU = om.CONTAINER_RESOURCE
TIMEOUT = 300
DEFAULT_PLAN = {"allocatable": "2:15,10:5,30:3,60:2", "operands": "2:8,30:2"}


def _gpus(node):
    return readiness.count(node.status.allocatable, GPU)


class Scenario(object):
    """A condition on gpu-container-2: the module that waits for it, the kubectl command a
    polling loop runs with the test of its output, and how an observer watch in this
    process sees it (a core list function's name, its arguments, a test of the objects)."""

    def __init__(self, name, module, args, kinds, poll_argv, poll_done, observe, module_also=()):
        self.name = name
        self.module = module
        self.args = args
        self.kinds = kinds  # watched kinds: the module holds one connection per kind while it waits
        self.poll_argv = poll_argv
        self.poll_done = poll_done
        self.observe = observe
        # What the module's condition needs besides what the loop tests (an apps list function's name, its
        # arguments, a test of the objects): its "API change" is the last of them to hold.
        self.module_also = tuple(module_also)


def _operand_daemonsets_rolled_out(objects):
    """Every operand DaemonSet rolled out (kubernetes.core daemonset_ready): with its default selection
    gpu_allocatable_wait needs it too, and the DaemonSet controller writes it after the pods are Ready."""
    operands = [d for d in objects.values() if any(d.metadata.name.startswith(o.daemonset) for o in om.OPERANDS)]
    return bool(operands) and all(
        (d.status.observed_generation or 0) >= d.metadata.generation
        and (d.status.updated_number_scheduled or 0) == d.status.desired_number_scheduled == (d.status.number_ready or 0)
        for d in operands)


def _operand_pods_ready(objects):
    pods = [p for p in objects.values() if om.operand_of_pod(p.metadata.labels)]
    return bool(pods) and all(s.ready for p in pods for s in (p.status.container_statuses or ()))


SCENARIOS = dict((s.name, s) for s in (
    Scenario("allocatable", "gpu_allocatable_wait", {"timeout": TIMEOUT}, 4,
             ["get", "node", NODE, "-o", "jsonpath={.status.allocatable.%s}" % GPU.replace(".", "\\.")],
             lambda out: out.strip().isdigit() and int(out) >= 1,
             ("list_node", {"field_selector": "metadata.name=" + NODE},
              lambda objects: NODE in objects and _gpus(objects[NODE]) >= 1),
             module_also=[("list_namespaced_daemon_set", {"namespace": om.DEFAULT_NAMESPACE},
                           _operand_daemonsets_rolled_out)]),
    Scenario("operands", "operand_readiness", {"names": [NODE], "timeout": TIMEOUT}, 5,
             ["get", "pods", "-n", om.DEFAULT_NAMESPACE, "--field-selector", "spec.nodeName=" + NODE,
              "-o", "jsonpath={.items[*].status.containerStatuses[*].ready}"],
             lambda out: bool(out.split()) and all(word == "true" for word in out.split()),
             ("list_namespaced_pod", {"namespace": om.DEFAULT_NAMESPACE, "field_selector": "spec.nodeName=" + NODE},
              _operand_pods_ready)),
))


# ---------------------------------------------------------------- one repetition

def _hold(lab):
    lab.hold_down(NODE, "*")
    wait_for(lab.core().list_node, lambda o: _gpus(o[NODE]) == 0, field_selector="metadata.name=" + NODE)


def _settle(lab):
    # Back to the clean node before the next repetition: GPUs advertised again.
    wait_for(lab.core().list_node, lambda o: _gpus(o[NODE]) == 2, field_selector="metadata.name=" + NODE)


class _Observer(object):
    """Records when the API first shows the condition true: the loop's (``scenario.observe``), or with
    ``module`` the module's, the last of that and ``scenario.module_also`` to hold. Each part is watched
    in a thread of its own, with its own client (the main thread goes on using the lab's)."""

    def __init__(self, lab, scenario, module=False):
        from kubernetes import client
        parts = [(client.CoreV1Api,) + tuple(scenario.observe)]
        if module:
            parts += [(client.AppsV1Api,) + tuple(part) for part in scenario.module_also]
        self.seen = []
        self._threads = []
        for api_class, function, kwargs, predicate in parts:
            list_fn = getattr(api_class(lab.api_client()), function)
            thread = threading.Thread(target=self._watch, args=(list_fn, predicate, kwargs), name="observer",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def _watch(self, list_fn, predicate, kwargs):
        wait_for(list_fn, predicate, timeout=TIMEOUT, **kwargs)
        self.seen.append(time.monotonic())

    def changed_at(self):
        """When the last part came true (each thread joined)."""
        for thread in self._threads:
            thread.join()
        return max(self.seen)


def run_module_once(lab, scenario, hold, proxy=None):
    """One repetition of the module; through ``proxy`` (a FaultProxy) when given."""
    _hold(lab)
    if proxy is None:
        proc = start_module(scenario.module, scenario.args, lab.kubeconfig)
        lab.wait_api_connections(proc.pid, scenario.kinds)
    else:
        first = proxy.next_number()
        proc = start_module(scenario.module, scenario.args, proxy.kubeconfig_path)
        proxy.wait_open(scenario.kinds, since=first)
    observer = _Observer(lab, scenario, module=True)
    time.sleep(hold)
    lab.release(NODE)
    t0 = time.monotonic()
    result = finish_module(proc)
    t1 = time.monotonic()
    if result.get("failed"):
        raise RuntimeError("%s failed: %s" % (scenario.module, result.get("msg")))
    changed = observer.changed_at()
    _settle(lab)
    return {"latency": t1 - t0, "from_api": t1 - changed,
            "requests": result["api_requests"]["total"]}


def run_poll_once(lab, scenario, hold, interval):
    _hold(lab)
    kubectl = os.path.join(lab.bin_dir, "kubectl")
    env = dict(os.environ, KUBECONFIG=lab.kubeconfig, KUBECACHEDIR=os.path.join(lab.workdir, "kubectl-cache"))
    state = {"calls": 0, "ended": None, "error": None}

    def loop():
        while True:
            state["calls"] += 1
            out = subprocess.run([kubectl] + scenario.poll_argv, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, universal_newlines=True, check=False)
            if out.returncode == 0 and scenario.poll_done(out.stdout):
                state["ended"] = time.monotonic()
                return
            if out.returncode != 0:
                state["error"] = out.stderr.strip()
                return
            time.sleep(interval)

    observer = _Observer(lab, scenario)
    thread = threading.Thread(target=loop, name="kubectl-poll", daemon=True)
    thread.start()
    time.sleep(hold)
    lab.release(NODE)
    t0 = time.monotonic()
    thread.join()
    if state["error"]:
        raise RuntimeError("kubectl failed: %s" % state["error"])
    changed = observer.changed_at()
    _settle(lab)
    return {"latency": state["ended"] - t0, "from_api": state["ended"] - changed,
            "requests": state["calls"]}


# ---------------------------------------------------------------- statistics and report

def p95(values):
    """The 95th percentile, nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, int(math.ceil(0.95 * len(ordered))) - 1)]


def summary(runs, key):
    values = [r[key] for r in runs]
    return {"median": statistics.median(values), "p95": p95(values), "min": min(values), "max": max(values)}


def run(plan, interval, seed, through_proxy=False):
    rng = random.Random(seed)
    workdir = tempfile.mkdtemp(prefix="gpuplatform-bench-waits-")
    lab = Lab(workdir=workdir)
    lab.up()
    results = []
    proxy = None
    try:
        if through_proxy:
            proxy = FaultProxy(lab.state()["ports"]["apiserver"]).start()
            proxy.kubeconfig_path = proxy.kubeconfig(lab.kubeconfig, workdir)
        lab.reset(FLEET_VALUES)
        _settle(lab)
        for name, holds in plan:
            scenario = SCENARIOS[name]
            for hold, repetitions in holds:
                row = {"scenario": name, "module": scenario.module, "hold": hold, "repetitions": repetitions,
                       "module_runs": [], "poll_runs": []}
                for index in range(repetitions):
                    # Where the release falls in the loop's interval decides the loop's latency:
                    # a hold of a whole number of intervals would favour it every time.
                    held = hold + rng.uniform(0, interval)
                    row["module_runs"].append(run_module_once(lab, scenario, held))
                    if proxy is not None:
                        row["poll_runs"].append(run_module_once(lab, scenario, held, proxy))
                    else:
                        row["poll_runs"].append(run_poll_once(lab, scenario, held, interval))
                    print("[bench %s] %s hold %ss %d/%d: module %.3fs %d requests, other %.3fs %d requests" % (
                        time.strftime("%H:%M:%S"), name, hold, index + 1, repetitions,
                        row["module_runs"][-1]["latency"], row["module_runs"][-1]["requests"],
                        row["poll_runs"][-1]["latency"], row["poll_runs"][-1]["requests"]), file=sys.stderr, flush=True)
                for who in ("module", "poll"):
                    for key in ("latency", "from_api", "requests"):
                        row["%s_%s" % (who, key)] = summary(row["%s_runs" % who], key)
                results.append(row)
    finally:
        if proxy is not None:
            proxy.stop()
        lab.down()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def report_proxy(results):
    """The module direct against the module through the pass-through proxy."""
    lines = ["Waits on the lab (%s, Python %s, %d CPUs): the module direct and through the fault proxy in "
             "pass-through mode" % (platform.machine(), platform.python_version(), os.cpu_count() or 0), "",
             "| scenario (module) | held | runs | direct from T0 | proxy from T0 | direct from API change "
             "| proxy from API change | proxy/direct (medians from API change) |",
             "|---|---|---|---|---|---|---|---|"]
    for row in results:
        lines.append("| %s (%s) | %s s | %d | %s | %s | %s | %s | %.2fx |" % (
            row["scenario"], row["module"], row["hold"], row["repetitions"], _pair(row["module_latency"]),
            _pair(row["poll_latency"]), _pair(row["module_from_api"]), _pair(row["poll_from_api"]),
            _ratio(row["poll_from_api"]["median"], row["module_from_api"]["median"])))
    return "\n".join(lines)


def _ratio(a, b):
    return a / b if b else float("inf")


def _pair(stats):
    return "%.3f / %.3f" % (stats["median"], stats["p95"])


def _span(stats):
    if stats["min"] == stats["max"]:
        return "%g" % stats["min"]
    return "%g (%g-%g)" % (stats["median"], stats["min"], stats["max"])


def report(results, interval):
    lines = ["Waits on the lab (%s, Python %s, %d CPUs); poll: kubectl get, then sleep %gs, until true" % (
        platform.machine(), platform.python_version(), os.cpu_count() or 0, interval), "",
        "Seconds to return, median / p95, from the release (T0) and from the API change:", "",
        "| scenario (module) | held | runs | module from T0 | module from API change | poll from T0 "
        "| poll from API change | poll/module (medians from T0) |",
        "|---|---|---|---|---|---|---|---|"]
    for row in results:
        lines.append("| %s (%s) | %s+U(0,%g) s | %d | %s | %s | %s | %s | %.1fx |" % (
            row["scenario"], row["module"], row["hold"], interval, row["repetitions"], _pair(row["module_latency"]),
            _pair(row["module_from_api"]), _pair(row["poll_latency"]), _pair(row["poll_from_api"]),
            _ratio(row["poll_latency"]["median"], row["module_latency"]["median"])))
    lines += ["", "Requests per wait, median (min-max): the module's do not grow with the wait, the loop's do:", "",
              "| scenario | held | module API requests | poll kubectl calls | poll/module |", "|---|---|---|---|---|"]
    for row in results:
        lines.append("| %s | %s+U(0,%g) s | %s | %s | %.2fx |" % (
            row["scenario"], row["hold"], interval, _span(row["module_requests"]), _span(row["poll_requests"]),
            _ratio(row["poll_requests"]["median"], row["module_requests"]["median"])))
    return "\n".join(lines)


def parse_plan(items):
    """``name=hold:reps,hold:reps`` items -> [(name, [(hold, reps)])]."""
    plan = []
    for item in items:
        name, sep, spec = item.partition("=")
        if not sep or name not in SCENARIOS:
            raise argparse.ArgumentTypeError("plan: %r is not <scenario>=<hold>:<repetitions>,... (scenarios: %s)" % (
                item, ", ".join(sorted(SCENARIOS))))
        holds = []
        for part in spec.split(","):
            hold, sep, reps = part.partition(":")
            try:
                holds.append((float(hold) if "." in hold else int(hold), int(reps)))
            except ValueError:
                raise argparse.ArgumentTypeError("plan: %r in %r is not <hold seconds>:<repetitions>" % (part, item))
            if holds[-1][1] < 1:
                raise argparse.ArgumentTypeError("plan: %r needs at least one repetition" % part)
        plan.append((name, holds))
    return plan


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--plan", nargs="+", default=["%s=%s" % kv for kv in sorted(DEFAULT_PLAN.items())],
                        help="<scenario>=<hold seconds>:<repetitions>,... (default: %(default)s)")
    parser.add_argument("--interval", type=float, default=5.0, help="the polling loop's sleep (default: 5)")
    parser.add_argument("--seed", type=int, default=5, help="seed of the hold times' random part")
    parser.add_argument("--json", help="also write every run's numbers to this file")
    parser.add_argument("--through-proxy", action="store_true",
                        help="compare the module direct and through the fault proxy (pass-through) instead of the loop")
    args = parser.parse_args(argv)
    try:
        plan = parse_plan(args.plan)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    results = run(plan, args.interval, args.seed, args.through_proxy)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2, sort_keys=True)
    print(report_proxy(results) if args.through_proxy else report(results, args.interval))


if __name__ == "__main__":
    main()
