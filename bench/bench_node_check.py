# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of node_check.evaluate() on generated fleets of 100, 1,000 and 5,000 nodes
with about 20 pods per node (5,000 nodes: 100,000 pods).

Prints, per size, the best of several runs of evaluate() (wall and process CPU time), its
ratio against the 100-node baseline measured in the same process, and the per-node cost
ratio (1.0: time grows exactly linearly with the fleet); then what the module and the
CLI spend on a snapshot file's text (JSON parse, split, policy, check). Results go in
docs/benchmarks.md.

    make bench-node-check        (or: python -m bench.bench_node_check [--sizes 100 1000])
"""

from __future__ import absolute_import, division, print_function

import argparse
import gc
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
if os.path.isdir(COLLECTIONS) and COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check  # noqa: E402
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om  # noqa: E402

SIZES = (100, 1000, 5000)
PODS_PER_NODE = 20
NAMESPACE = om.DEFAULT_NAMESPACE
# Share of each kind of node in the generated fleet, out of 20.
FLEET_MIX = ((om.CONTAINER, 14), (om.VM_PASSTHROUGH, 2), (om.VM_VGPU, 2), (None, 2))
RESOURCES = {
    om.CONTAINER: (om.CONTAINER_RESOURCE, 8),
    om.VM_PASSTHROUGH: (om.passthrough_resource_name("GA102GL [A10]"), 2),
    om.VM_VGPU: (om.vgpu_resource_name(om.vgpu_type_name("A10-12Q")), 4),
}


def _node(name, config, policy):
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "rke2"}
    allocatable = {"cpu": "64", "memory": "515686576Ki", "pods": "110", "ephemeral-storage": "1796785402013"}
    if config:
        labels.update({om.NFD_GPU_LABELS[0]: "true", om.GPU_PRESENT_LABEL: "true", om.WORKLOAD_CONFIG_LABEL: config})
        labels.update(om.deploy_labels_for(config, labels, policy))
        if config == om.VM_VGPU:
            labels[om.VGPU_CONFIG_LABEL] = "A10-12Q"
        resource, count = RESOURCES[config]
        allocatable[resource] = str(count)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "uid": "uid-" + name,
                     "annotations": {"rke2.io/node-args": "[\"agent\"]"}},
        "spec": {"podCIDR": "10.42.0.0/24", "providerID": "rke2://" + name},
        "status": {
            "allocatable": allocatable, "capacity": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "nodeInfo": {"kubeletVersion": "v1.33.5+rke2r1", "containerRuntimeVersion": "containerd://2.1.4"},
        },
    }


def _pod(name, namespace, labels, node, ready=True, waiting=None):
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2026-11-30T10:02:00Z"}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "uid": "uid-" + name,
                     "ownerReferences": [{"kind": "DaemonSet", "name": name.rsplit("-", 1)[0], "controller": True}]},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.local/img:1", "resources": {"requests": {"cpu": "10m"}}}],
            "tolerations": list(om.DEFAULT_OPERAND_TOLERATIONS),
        },
        "status": {
            "phase": "Running", "podIP": "10.42.0.10", "hostIP": "192.0.2.10",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "main", "ready": ready, "restartCount": 0 if ready else 7, "state": state}],
        },
    }


def generate_fleet(nodes, pods_per_node=PODS_PER_NODE):
    """A snapshot like `kubectl get nodes,pods,daemonsets -A -o json` of a fleet of
    ``nodes`` nodes with ``pods_per_node`` pods each. One GPU node in 50 has its toolkit in
    CrashLoopBackOff and one in 50 has just joined (no operand pod yet), so the
    findings paths run too."""
    policy = node_check.policy_from_inputs([], {"sandbox_workloads_enabled": True})
    kinds = [config for config, share in FLEET_MIX for _slot in range(share)]
    result = {"nodes": [], "pods": [], "daemonsets": [], "clusterpolicies": []}
    for index in range(nodes):
        name = "node-%05d" % index
        config = kinds[index % len(kinds)]
        node = _node(name, config, policy)
        result["nodes"].append(node)
        operand_pods = []
        joined_late = config and index % 50 == 7
        if config and not joined_late:
            for operand_name in om.expected_operands(node["metadata"]["labels"], policy):
                o = om.operand(operand_name)
                broken = operand_name == "container-toolkit" and index % 50 == 3
                operand_pods.append(_pod("%s-%s" % (o.daemonset, name), NAMESPACE, dict([o.pod_selector]), name,
                                         ready=not broken, waiting="CrashLoopBackOff" if broken else None))
        result["pods"].extend(operand_pods)
        for slot in range(pods_per_node - len(operand_pods)):
            result["pods"].append(_pod("work-%s-%d" % (name, slot), "team-%d" % (slot % 4),
                                       {"app": "trainer", "pod-template-hash": "5d4f"}, name))
    return result


def _time(fn, repeat):
    """(wall, cpu) seconds, each the best of ``repeat`` runs. On a shared machine the
    process's CPU time is the steadier of the two: other jobs stretch wall time only."""
    wall = cpu = None
    for _run in range(repeat):
        gc.collect()
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        fn()
        elapsed_wall, elapsed_cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
        wall = elapsed_wall if wall is None else min(wall, elapsed_wall)
        cpu = elapsed_cpu if cpu is None else min(cpu, elapsed_cpu)
    return wall, cpu


def _from_text(text):
    """What the module and the CLI do with a snapshot file's text (gpu_node_check.run())."""
    with node_check.paused_gc():
        snapshot = node_check.split_snapshot(node_check.parse_documents(text))
        policy = node_check.policy_from_inputs(snapshot["clusterpolicies"], {"sandbox_workloads_enabled": True},
                                               snapshot["daemonsets"])
        result = node_check.check(snapshot, policy)
        del snapshot
    return result


def run(sizes=SIZES, repeat=3):
    """Per size: nodes, pods, findings, evaluate() (wall, cpu) and from-JSON (wall, cpu)
    seconds, best of ``repeat``."""
    policy = node_check.policy_from_inputs([], {"sandbox_workloads_enabled": True})
    rows = []
    for size in sizes:
        fleet = generate_fleet(size)
        result = node_check.evaluate(fleet["nodes"], fleet["pods"], policy, fleet["daemonsets"])
        evaluate = _time(lambda: node_check.evaluate(fleet["nodes"], fleet["pods"], policy, fleet["daemonsets"]), repeat)
        row = {"nodes": size, "pods": len(fleet["pods"]), "findings": len(result["findings"]), "evaluate": evaluate}
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet["nodes"] + fleet["pods"]})
        del fleet  # the module and the CLI hold only what they read
        if _from_text(text)["findings"] != result["findings"]:
            raise AssertionError("the snapshot text gives other findings than the objects it was made of")
        row.update(from_text=_time(lambda: _from_text(text), repeat), megabytes=len(text) / 1e6)
        rows.append(row)
    return rows


def report(rows):
    base = rows[0]
    lines = [
        "python %s on %s, %d CPUs; best of runs, seconds (wall / process CPU); ratios on CPU time"
        % (platform.python_version(), platform.machine(), os.cpu_count() or 0),
        "%7s %8s %9s %15s %8s %9s %18s" % (
            "nodes", "pods", "findings", "evaluate()", "vs %d" % base["nodes"], "per node", "from JSON text"),
    ]
    for row in rows:
        ratio = row["evaluate"][1] / base["evaluate"][1]
        per_node = ratio / (row["nodes"] / base["nodes"])
        lines.append("%7d %8d %9d %7.3f / %5.3f %7.1fx %8.2fx %7.3f / %5.3f (%d MB)" % (
            row["nodes"], row["pods"], row["findings"], row["evaluate"][0], row["evaluate"][1], ratio, per_node,
            row["from_text"][0], row["from_text"][1], row["megabytes"]))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(report(run(args.sizes, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
