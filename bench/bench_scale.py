# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the GPU steps, the waits and the checks at fleet scale, against the
per-node loop the usual GPU playbooks run, on labs of generated fleets this benchmark
starts in temporary directories (``tests/lab/fleet.py``: the lab fleet's node kinds in
their proportions, its inventory written beside the lab so that Ansible and the lab read
the same fleet).

For each size (a number of GPU nodes; the fleet has one CPU node per seven GPU nodes):

1. the GPU steps of site.yml as ``ansible-playbook`` runs them on the generated inventory:
   ``playbooks/gpu_node_labels.yml`` (labels from nothing), ``playbooks/gpu_operator.yml``
   (the HelmChart through the API and its rollout), ``playbooks/gpu_verify.yml`` (operand
   and allocatable waits, the CUDA sample on every GPU node that advertises
   ``nvidia.com/gpu``, gpu_node_check, the report); ``--no-steps`` rolls the operator out
   with the lab's own helper instead;
2. each wait module and gpu_node_check alone, as Ansible runs a module (a process of its
   own), on the rolled-out fleet: gpu_allocatable_wait, operand_readiness, helmchart_wait,
   node_ready_wait, gpu_node_check, cuda_sample (per node), gpu_node_labels (a rerun:
   nothing to change);
3. side by side in this process, the baseline, the per-node loop:
   - allocatable: one ``GET /api/v1/nodes/<node>`` per GPU node (the request the usual
     ``kubectl get node <node> -o jsonpath=...`` loop makes), from a Python loop, and the
     same with the lab's pinned kubectl, one process per node;
   - the CUDA sample: for each node in turn, create its pod, poll it every ``--sleep``
     seconds until it has ended, read its log, delete it, sleep ``--sleep`` seconds. The
     usual loop sleeps 5 s; measured with a shorter sleep (``--sleep``, default 0.5 s) and
     also given as what 5 s makes of the same measured pod times: for each node, its
     create-to-end time rounded up to the next 5 s poll, plus the 5 s sleep.

Requests and memory: every measured process carries ``bench/reqcount/sitecustomize.py``,
which counts each HTTP request urllib3 sends (list, watch, get, log, create, patch,
delete) and records the process's peak RSS at exit. Wall times are measured here.

    python -m bench.bench_scale [--gpu-nodes 10,100,1000] [--sleep 0.5] [--no-steps] [--json out.json]
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
for path in (COLLECTIONS, ROOT):
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om  # noqa: E402
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness  # noqa: E402
from tests.lab import fleet as fleet_mod  # noqa: E402
from tests.lab.lab import Lab  # noqa: E402

BENCH = os.path.join(ROOT, "bench")
REQCOUNT = os.path.join(BENCH, "reqcount")
GPU = om.CONTAINER_RESOURCE
NAMESPACE = om.DEFAULT_NAMESPACE
USUAL_SLEEP = 5.0
# The per-node loop gives up on a pod after this long (the module's own timeout is its deadline).
SERIAL_POD_TIMEOUT = 300
# The modules the gpu_verify role runs, as run alone here.
VERIFY_MODULES = ("operand_readiness", "gpu_allocatable_wait", "cuda_sample (per node)", "gpu_node_check")
DEFAULT_SIZES = (10, 100, 1000)
# The chart's default toleration and one for the lab fleet's reserved nodes (gpu-tainted-*).
STEPS_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                     {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"})


def nodes_for(gpu_nodes):
    """The smallest generated fleet with ``gpu_nodes`` GPU nodes: its node count."""
    nodes = gpu_nodes
    while len(fleet_mod.gpu_hosts(_fleet_of(nodes))) < gpu_nodes:
        nodes += 1
    return nodes


def _fleet_of(nodes):
    inventory = fleet_mod.scale_inventory(nodes)
    hosts = {}
    for group in inventory["all"]["children"].values():
        for name, host_vars in group["hosts"].items():
            hosts.setdefault(name, {}).update(host_vars or {})
    return hosts


def log(message):
    print("[bench-scale %s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


# The lab's own processes (the control plane, kwok's kubelets, the node agent, the operator) share this machine's
# two cores with what is measured; on a site the kubelets' work is on the GPU nodes and the control plane's on the
# servers. After a thousand nodes' rollout, or a run of 572 sample pods, they can keep both cores busy for a minute.
# So each module alone and the per-node loop start once the lab's processes use under QUIET_CORES over QUIET_WINDOW
# seconds, at every size alike; after QUIET_LIMIT seconds they start anyway, and the record says at what load. The
# verify playbook runs right after the rollout, as site.yml runs it. (A second verify timed this way was tried and
# dropped: the lab's CPU was quiet, yet the sample step of a verify that follows another at 1,000 GPU nodes took
# 57.5 and 81.8 s against 58.6 and 52.8 s for the first, docs/benchmarks.md, runs G and H.)
QUIET_CORES = 0.2
QUIET_WINDOW = 5.0
QUIET_LIMIT = 180.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids):
    """CPU seconds the processes ``pids`` and their reaped children have used (/proc/<pid>/stat:
    utime, stime, cutime, cstime); a process that is gone counts nothing."""
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid, encoding="ascii") as handle:
                # After the command's closing parenthesis: state is the first field, utime the 12th.
                fields = handle.read().rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15])
        except (IOError, IndexError, ValueError):
            continue
    return total / CLOCK_TICKS


def wait_quiet(lab, limit=QUIET_LIMIT):
    """Waits until the lab's processes use under QUIET_CORES cores over QUIET_WINDOW
    seconds, at most ``limit`` seconds: {"waited": seconds, "lab_cores": their load over
    the last window}."""
    pids = [pid for pid in lab.processes().values() if pid]
    started = time.monotonic()
    while True:
        before, cpu = time.monotonic(), cpu_seconds(pids)
        time.sleep(QUIET_WINDOW)
        cores = (cpu_seconds(pids) - cpu) / (time.monotonic() - before)
        waited = time.monotonic() - started
        if cores < QUIET_CORES or waited >= limit:
            return {"waited": round(waited, 1), "lab_cores": round(cores, 2)}


class Meter(object):
    """Runs measured processes with the request counter and reads its records."""

    def __init__(self, lab, workdir):
        self.lab = lab
        self.log_path = os.path.join(workdir, "requests.jsonl")
        self.task_log_path = os.path.join(workdir, "tasks.jsonl")
        self.env = dict(os.environ)
        self.env.update(lab.env())
        self.env.update({
            "BENCH_REQUEST_LOG": self.log_path,
            "BENCH_TASK_LOG": self.task_log_path,
            "ANSIBLE_CALLBACK_PLUGINS": os.path.join(BENCH, "callbacks"),
            "ANSIBLE_CALLBACKS_ENABLED": "bench_task_times",
            "PYTHONPATH": os.pathsep.join([REQCOUNT, COLLECTIONS, ROOT]),
            "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
            "ANSIBLE_HOME": os.path.join(ROOT, ".build", "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": os.path.join(ROOT, ".build", "ansible-tmp"),
            "ANSIBLE_REMOTE_TEMP": os.path.join(ROOT, ".build", "ansible-tmp"),
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        })

    def _records(self, path=None):
        """The JSON lines a measured process appended to ``path`` (the request log), emptied."""
        path = path or self.log_path
        try:
            with open(path, encoding="utf-8") as handle:
                records = [json.loads(line) for line in handle if line.strip()]
        except IOError:
            records = []
        if os.path.exists(path):
            os.unlink(path)
        return records

    def module(self, name, args):
        """One module run as Ansible runs it: (result, wall seconds, its process record)."""
        self._records()
        handle = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump({"ANSIBLE_MODULE_ARGS": dict(args, kubeconfig=self.lab.kubeconfig)}, handle)
        handle.close()
        started = time.monotonic()
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", name + ".py"), handle.name],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, check=False,
                              universal_newlines=True)
        wall = time.monotonic() - started
        os.unlink(handle.name)
        try:
            result = json.loads(proc.stdout)
        except ValueError as exc:
            raise RuntimeError("%s printed no JSON (rc %s): %s" % (name, proc.returncode, proc.stderr[-2000:])) from exc
        records = self._records()
        return result, wall, (records[0] if records else {"requests": {"total": 0}, "max_rss_mb": None})

    def playbook(self, playbook, inventory, extra=()):
        """One ansible-playbook run: (rc, wall seconds, {module: record}, [task times], output tail)."""
        self._records()
        self._records(self.task_log_path)
        started = time.monotonic()
        proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
                               os.path.join(ROOT, "playbooks", playbook)] + list(extra),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT, check=False,
                              universal_newlines=True)
        wall = time.monotonic() - started
        by_module = {}
        for record in self._records():
            module = os.path.basename(record["argv"][0]).replace("AnsiballZ_", "").replace(".py", "")
            entry = by_module.setdefault(module, {"runs": 0, "requests": {}, "max_rss_mb": 0.0, "wall": 0.0})
            entry["runs"] += 1
            entry["wall"] = round(entry["wall"] + record["wall"], 3)
            entry["max_rss_mb"] = max(entry["max_rss_mb"], record["max_rss_mb"])
            for kind, count in record["requests"].items():
                entry["requests"][kind] = entry["requests"].get(kind, 0) + count
        return proc.returncode, wall, by_module, self._records(self.task_log_path), proc.stdout[-3000:]


# ---------------------------------------------------------------- the collection

def module_plan(lab, timeout, relabel="gpu_node_labels (rerun)"):
    """(label, module, args) of each module run alone on the rolled-out fleet."""
    fleet = lab.fleet()
    names = sorted(fleet)
    isolated = sorted(n for n, v in fleet.items() if v.get("gpu_node_isolated"))
    label_nodes = [{"name": n, "host": n, "workload_config": v.get("gpu_workload_config"),
                    "operands_disabled": v.get("gpu_operands_disabled") or [],
                    "isolated": bool(v.get("gpu_node_isolated")), "vgpu_config": v.get("gpu_vgpu_config")}
                   for n, v in sorted(fleet.items()) if n in fleet_mod.gpu_hosts(fleet)]
    sandbox = {"sandbox_workloads_enabled": True, "default_workload": "container"}
    return [
        ("gpu_allocatable_wait", "gpu_allocatable_wait", {"resource": GPU, "timeout": timeout}),
        ("operand_readiness", "operand_readiness", {"require_reconciled": True, "timeout": timeout}),
        ("helmchart_wait", "helmchart_wait", {"name": "gpu-operator", "timeout": timeout}),
        ("node_ready_wait", "node_ready_wait", {"names": names, "timeout": timeout}),
        ("gpu_node_check", "gpu_node_check", {"fail_on_findings": False, "isolated_nodes": isolated}),
        # The tolerations the verify role gives the samples: those of the operand DaemonSets (steps_vars).
        ("cuda_sample (per node)", "cuda_sample", {"per_node": True, "timeout": timeout,
                                                   "tolerations": list(STEPS_TOLERATIONS)}),
        (relabel, "gpu_node_labels", dict(sandbox, step="apply", nodes=label_nodes)),
    ]


def run_modules(meter, lab, timeout, steps=True):
    rows = []
    # Without the steps the lab set the labels: the module adopts them (an ownership annotation per node).
    relabel = "gpu_node_labels (rerun)" if steps else "gpu_node_labels (adopting the lab's labels)"
    for label, module, args in module_plan(lab, timeout, relabel):
        quiet = wait_quiet(lab)
        result, wall, record = meter.module(module, args)
        if result.get("failed"):
            raise RuntimeError("%s failed: %s" % (module, str(result.get("msg"))[:2000]))
        row = {"what": label, "wall": round(wall, 3), "requests": record["requests"],
               "max_rss_mb": record["max_rss_mb"], "module_api_requests": result.get("api_requests"), "quiet": quiet}
        if module == "cuda_sample":
            row["pods"] = len(result.get("pods") or ())
        rows.append(row)
        pods = " (%d pods)" % row["pods"] if "pods" in row else ""
        figures = (label, wall, record["requests"]["total"], record["max_rss_mb"] or 0, pods, quiet["waited"],
                   quiet["lab_cores"])
        log("  %-26s %7.2fs %5d requests %6.1f MB%s (lab quiet after %.0f s: %.2f cores)" % figures)
    return rows


def steps_vars(workdir, nodes):
    """Extra variables of the GPU steps: the operand DaemonSets tolerate the fleet's
    reservation taint (the fix the report gives for such a node), so that every GPU node
    of the lab fleet but the isolated ones runs its operands and the verify passes; the
    report and the site's rendered files go to the lab's work directory."""
    return {"gpu_operator_extra_values": {"daemonsets": {"tolerations": list(STEPS_TOLERATIONS)}},
            "gpu_verify_dest": os.path.join(workdir, "artifacts"),
            "gpu_operator_site_dir": os.path.join(workdir, "site"),
            "gpu_node_labels_site_dir": os.path.join(workdir, "site"),
            # The lab inventory's 120 s and 45 s suit its seven nodes; a rollout on a thousand takes longer.
            "gpu_operator_wait_timeout": max(600, nodes), "gpu_verify_timeout": max(600, nodes)}


def run_steps(meter, lab):
    rows = []
    extra = ["-e", json.dumps(steps_vars(lab.workdir, len(lab.fleet())))]
    for playbook in ("gpu_node_labels.yml", "gpu_operator.yml", "gpu_verify.yml"):
        rc, wall, by_module, tasks, tail = meter.playbook(playbook, lab.fleet_file, extra)
        if rc != 0:
            raise RuntimeError("ansible-playbook %s failed (rc %d):\n%s" % (playbook, rc, tail))
        total = sum(m["requests"].get("total", 0) for m in by_module.values())
        rows.append({"what": playbook, "wall": round(wall, 3), "requests_total": total, "modules": by_module,
                     "tasks": tasks,
                     "max_rss_mb": max([m["max_rss_mb"] for m in by_module.values()] or [0])})
        log("  %-26s %7.2fs %5d requests, largest module %.1f MB" % (playbook, wall, total, rows[-1]["max_rss_mb"]))
    return rows


# ---------------------------------------------------------------- the per-node loop

def baseline_allocatable(lab):
    """One GET per GPU node, as ``kubectl get node <n>`` does, from a Python loop."""
    core = lab.core()
    nodes = fleet_mod.gpu_hosts(lab.fleet())
    started = time.monotonic()
    advertising = 0
    for name in nodes:
        response = core.read_node(name, _preload_content=False)
        node = json.loads(response.data)
        response.release_conn()
        advertising += readiness.count((node.get("status") or {}).get("allocatable"), GPU) >= 1
    return {"what": "allocatable, GET per node (Python)", "wall": round(time.monotonic() - started, 3),
            "requests": {"total": len(nodes)}, "nodes": len(nodes), "advertising": advertising}


def baseline_allocatable_kubectl(lab, env):
    """The same with the lab's kubectl, one process per node (what a shell or command loop runs)."""
    kubectl = os.path.join(lab.bin_dir, "kubectl")
    nodes = fleet_mod.gpu_hosts(lab.fleet())
    kube_env = dict(env, KUBECONFIG=lab.kubeconfig, KUBECACHEDIR=os.path.join(lab.workdir, "kubectl-cache"))
    jsonpath = "jsonpath={.status.allocatable.%s}" % GPU.replace(".", "\\.")
    # The discovery cache warmed first, as a loop's later iterations find it.
    subprocess.run([kubectl, "get", "node", nodes[0], "-o", jsonpath], env=kube_env, stdout=subprocess.PIPE,
                   check=True)
    started = time.monotonic()
    for name in nodes:
        subprocess.run([kubectl, "get", "node", name, "-o", jsonpath], env=kube_env, stdout=subprocess.PIPE,
                       check=True)
    return {"what": "allocatable, kubectl get node per node", "wall": round(time.monotonic() - started, 3),
            "requests": {"total": len(nodes)}, "nodes": len(nodes)}


def baseline_cuda_serial(lab, sleep, sample=None):
    """A CUDA sample pod per node, created and awaited one after another (poll every
    ``sleep`` s, then sleep ``sleep`` s); also what the usual 5 s sleeps make of the
    measured pod times. ``sample``: run the loop on that many nodes only (spread over the
    fleet) and scale its time and requests to every node, said in the result."""
    core = lab.core()
    nodes = sorted(n["metadata"]["name"] for n in lab.raw_list(core.list_node)
                   if readiness.count((n.get("status") or {}).get("allocatable"), GPU) >= 1
                   and not (n.get("spec") or {}).get("unschedulable"))
    looped = nodes if not sample or sample >= len(nodes) else nodes[::int(math.ceil(len(nodes) / float(sample)))]
    requests, pod_times = 0, []
    started = time.monotonic()
    for index, node in enumerate(looped):
        name = "bench-serial-%d" % index
        pod = readiness.sample_pod(name, NAMESPACE, "bench-serial", node=node, image=readiness.SAMPLE_IMAGE,
                                   resource=GPU, count_=1, runtime_class_name=None, tolerations=STEPS_TOLERATIONS)
        created = time.monotonic()
        core.create_namespaced_pod(NAMESPACE, pod)
        requests += 1
        while True:
            requests += 1
            phase = core.read_namespaced_pod(name, NAMESPACE).status.phase
            if phase in ("Succeeded", "Failed"):
                break
            if time.monotonic() - created > SERIAL_POD_TIMEOUT:
                core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
                raise RuntimeError("the per-node loop's pod %s on %s is still %s after %ds" % (
                    name, node, phase, SERIAL_POD_TIMEOUT))
            time.sleep(sleep)
        pod_times.append(time.monotonic() - created)
        core.read_namespaced_pod_log(name, NAMESPACE)
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        requests += 2
        time.sleep(sleep)
    scale = len(nodes) / float(len(looped))
    wall = (time.monotonic() - started) * scale
    at_usual = sum(math.ceil(t / USUAL_SLEEP) * USUAL_SLEEP + USUAL_SLEEP for t in pod_times) * scale
    return {"what": "CUDA sample, one node after another (sleep %.1fs)" % sleep, "wall": round(wall, 3),
            "requests": {"total": int(round(requests * scale))}, "pods": len(nodes), "looped": len(looped),
            "scaled_from": len(looped) if len(looped) < len(nodes) else None, "sleep": sleep,
            "at_5s_sleeps": round(at_usual, 1), "pod_median": round(sorted(pod_times)[len(pod_times) // 2], 3)}


# ---------------------------------------------------------------- one size, the run

def run_size(gpu_nodes, args):
    nodes = nodes_for(gpu_nodes)
    workdir = tempfile.mkdtemp(prefix="gpuplatform-bench-scale-")
    lab = Lab(workdir=workdir, nodes=nodes)
    row = {"gpu_nodes": gpu_nodes, "nodes": nodes}
    log("%d GPU nodes (%d nodes): starting the lab" % (gpu_nodes, nodes))
    started = time.monotonic()
    lab.up()
    try:
        row["lab_up"] = round(time.monotonic() - started, 1)
        row["mode"] = lab.mode
        meter = Meter(lab, workdir)
        timeout = max(600, nodes)
        if args.steps:
            log("%d GPU nodes: the GPU steps (ansible-playbook on %s)" % (gpu_nodes, lab.fleet_file))
            row["steps"] = run_steps(meter, lab)
        else:
            # The lab's own rollout, with the steps' values, and operand_readiness waiting it out (what
            # gpu_operator.yml's wait does) as the one measured process.
            started = time.monotonic()
            lab.apply_fleet_labels()
            lab.install_operator(dict(fleet_mod.LAB_OPERATOR_VALUES, daemonsets={"tolerations": list(STEPS_TOLERATIONS)}))
            result, wall, record = meter.module("operand_readiness", {"require_reconciled": True, "timeout": timeout})
            if result.get("failed"):
                raise RuntimeError("operand_readiness during the rollout failed: %s" % str(result.get("msg"))[:2000])
            row["rollout_wait"] = {"what": "operand_readiness (waits out the rollout)", "wall": round(wall, 3),
                                   "requests": record["requests"], "max_rss_mb": record["max_rss_mb"]}
            log("  %-26s %7.2fs %5d requests %6.1f MB" % (
                "operand_readiness, rollout", wall, record["requests"]["total"], record["max_rss_mb"] or 0))
            lab.wait_settled(timeout=timeout)
            row["rollout"] = round(time.monotonic() - started, 1)
        lab.wait_settled(timeout=timeout)
        log("%d GPU nodes: each module alone" % gpu_nodes)
        row["modules"] = run_modules(meter, lab, timeout, args.steps)
        log("%d GPU nodes: the per-node loop" % gpu_nodes)
        # The loop gets the same quiet lab as the modules alone.
        row["baseline_quiet"] = wait_quiet(lab)
        row["baseline"] = [baseline_allocatable(lab), baseline_allocatable_kubectl(lab, meter.env),
                           baseline_cuda_serial(lab, args.sleep, args.serial_sample)]
        for entry in row["baseline"]:
            log("  %-46s %8.2fs %5d requests" % (entry["what"], entry["wall"], entry["requests"]["total"]))
    finally:
        lab.down()
        shutil.rmtree(workdir, ignore_errors=True)
    return row


def machine():
    load = os.getloadavg()
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "load_at_start": [round(x, 2) for x in load]}


def ratios(rows):
    """The figures docs/benchmarks.md states, against the baselines of the same run."""
    out = []
    by_size = dict((r["gpu_nodes"], r) for r in rows)
    smallest = by_size[min(by_size)]
    for size, row in sorted(by_size.items()):
        modules = dict((m["what"], m) for m in row["modules"])
        base = dict((b["what"].split(",")[0], b) for b in row["baseline"])
        cuda = modules["cuda_sample (per node)"]
        cuda_base = base["CUDA sample"]
        alloc = modules["gpu_allocatable_wait"]
        alloc_base = base["allocatable"]
        line = {"gpu_nodes": size,
                "cuda_sample_vs_serial_loop_measured": round(cuda_base["wall"] / cuda["wall"], 1),
                "cuda_sample_vs_serial_loop_5s": round(cuda_base["at_5s_sleeps"] / cuda["wall"], 1),
                "allocatable_requests_module_vs_loop": "%d vs %d" % (
                    alloc["requests"]["total"], alloc_base["requests"]["total"]),
                "cuda_sample_vs_smallest": round(cuda["wall"] / dict((m["what"], m) for m in smallest["modules"])[
                    "cuda_sample (per node)"]["wall"], 2)}
        # The verify's own work, from its modules run alone (also where the run had no playbooks).
        verify_modules = sum(modules[name]["wall"] for name in VERIFY_MODULES)
        small_modules = dict((m["what"], m) for m in smallest["modules"])
        line["verify_modules_wall"] = round(verify_modules, 2)
        line["verify_modules_vs_smallest"] = round(verify_modules / sum(
            small_modules[name]["wall"] for name in VERIFY_MODULES), 2)
        line["verify_modules_vs_serial_loop_5s"] = round(
            (cuda_base["at_5s_sleeps"] + alloc_base["wall"]) / verify_modules, 1)
        verify = [s for s in row.get("steps") or () if s["what"] == "gpu_verify.yml"]
        small_verify = [s for s in smallest.get("steps") or () if s["what"] == "gpu_verify.yml"]
        if verify and small_verify:
            line["verify_vs_smallest"] = round(verify[0]["wall"] / small_verify[0]["wall"], 2)
            line["verify_vs_serial_loop_5s"] = round(
                (cuda_base["at_5s_sleeps"] + alloc_base["wall"]) / verify[0]["wall"], 1)
        out.append(line)
    return out


def _entries(row, group):
    value = row.get(group) or ()
    return [value] if isinstance(value, dict) else list(value)


def markdown(report):
    """The tables docs/benchmarks.md shows, from a report (this run's or ``--tables FILE``)."""
    sizes = report["sizes"]
    head = "| what | " + " | ".join("%d GPU nodes (%d nodes)" % (r["gpu_nodes"], r["nodes"]) for r in sizes) + " |"
    rule = "| --- |" + " ---: |" * len(sizes)
    lines = [head, rule]

    def cell(entry):
        if entry is None:
            return "-"
        rss = entry.get("max_rss_mb")
        requests = entry.get("requests", {}).get("total", entry.get("requests_total"))
        text = "%.2f s, %s req" % (entry["wall"], requests)
        if entry.get("scaled_from"):
            text += " (%d pods, scaled from %d)" % (entry["pods"], entry["scaled_from"])
        elif "pods" in entry:
            text += " (%d pods)" % entry["pods"]
        return text + (", %.0f MB" % rss if rss else "")

    names = []
    for row in sizes:
        for group in ("steps", "rollout_wait", "modules", "baseline"):
            for entry in _entries(row, group):
                if entry["what"] not in names:
                    names.append(entry["what"])
    for name in names:
        found = []
        for row in sizes:
            entries = [e for group in ("steps", "rollout_wait", "modules", "baseline") for e in _entries(row, group)
                       if e["what"] == name]
            found.append(cell(entries[0] if entries else None))
        lines.append("| %s | %s |" % (name, " | ".join(found)))
    serial = [[e for e in r["baseline"] if e["what"].startswith("CUDA sample")][0] for r in sizes]
    lines.append("| CUDA sample loop with 5 s sleeps (computed from the pod times above) | %s |" % " | ".join(
        "%.0f s" % e["at_5s_sleeps"] for e in serial))
    return "\n".join(lines + [""] + task_table(sizes))


def task_table(sizes, playbook="gpu_verify.yml"):
    """Where a playbook's time goes: each task's wall on the controller and, for a module
    of the collection, the module process's own (the rest is Ansible's: templating the
    arguments, starting the process, taking the result back)."""
    runs = [([e for e in _entries(r, "steps") if e["what"] == playbook] or [{}])[0] for r in sizes]
    if not any(run.get("tasks") for run in runs):
        return []

    def row_of(task):
        # A module of the collection runs once in the playbook: its row is the module's, so
        # a task name templated with a per-run path (the report's dest) is still one row.
        return task["action"] if task["action"].startswith("gpuplatform.rke2.") else task["task"]

    rows, labels = [], {}
    for run in runs:
        for task in run.get("tasks") or ():
            if row_of(task) not in labels:
                rows.append(row_of(task))
                labels[row_of(task)] = task["task"]
    lines = ["| %s, task: controller wall (module process) | %s |" % (playbook, " | ".join(
        "%d GPU nodes" % r["gpu_nodes"] for r in sizes)), "| --- |" + " ---: |" * len(sizes)]
    for row in rows:
        cells = []
        for run in runs:
            task = next((t for t in run.get("tasks") or () if row_of(t) == row and t["wall"] is not None), None)
            if task is None:
                cells.append("-")
                continue
            module = (run.get("modules") or {}).get(task["action"].rsplit(".", 1)[-1])
            cells.append("%.2f s%s" % (task["wall"], " (%.2f s)" % module["wall"] if module else ""))
        lines.append("| %s | %s |" % (labels[row], " | ".join(cells)))
    lines.append("| the whole playbook | %s |" % " | ".join("%.2f s" % run["wall"] if run else "-" for run in runs))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--gpu-nodes", default=",".join(str(s) for s in DEFAULT_SIZES),
                        help="comma-separated fleet sizes in GPU nodes (default 10,100,1000)")
    parser.add_argument("--sleep", type=float, default=0.5,
                        help="the per-node loop's poll interval and sleep, seconds (the usual 5 s is also computed)")
    parser.add_argument("--no-steps", dest="steps", action="store_false",
                        help="skip the ansible-playbook GPU steps (the lab rolls the operator out itself)")
    parser.add_argument("--serial-sample", type=int, metavar="N",
                        help="run the per-node CUDA loop on N nodes spread over the fleet and scale it to all")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--tables", metavar="FILE", help="print the Markdown tables of an earlier --json file; run nothing")
    args = parser.parse_args(argv)
    if args.tables:
        with open(args.tables, encoding="utf-8") as handle:
            print(markdown(json.load(handle)))
        return 0
    try:
        sizes = [int(s) for s in args.gpu_nodes.split(",") if s.strip()]
    except ValueError:
        parser.error("--gpu-nodes: %r is not a comma-separated list of whole numbers" % args.gpu_nodes)
    if not sizes or min(sizes) < 1:
        parser.error("--gpu-nodes: give at least one size of 1 or more")
    # SIGTERM (a cancelled job) ends the run through its finally clauses: every lab stopped.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    report = {"machine": machine(), "sleep": args.sleep, "sizes": []}
    for size in sizes:
        report["sizes"].append(run_size(size, args))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump(report, handle, indent=2, sort_keys=True)
    report["ratios"] = ratios(report["sizes"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2, sort_keys=True)
    print(markdown(report))
    print(json.dumps(report["ratios"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
