# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verification report of ADR step 6: per node and per layer, from the results
of the collection's own modules (operand_readiness, gpu_allocatable_wait,
cuda_sample, gpu_node_check) and the preflight's host facts. Pure functions: the
gpu_verify_report module writes what these return."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_objects as ko
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_check as nc
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

# Bottom up, as the ADR's diagnosis reads: below Kubernetes first.
REPORT_LAYERS = ("hardware", "host-driver", om.LAYER_DRIVER, om.LAYER_RUNTIME, om.LAYER_DEVICE_PLUGIN,
                 om.LAYER_ALLOCATABLE, "cuda-sample")
OK, FAILED, NOT_APPLICABLE, NOT_CHECKED = "ok", "failed", "n/a", "not checked"
# A layer whose operands are paused (a driver upgrade, a MIG or vGPU change): a transient
# state of a working node, neither off nor broken.
PAUSED = "paused"
STATES = (OK, FAILED, PAUSED, NOT_APPLICABLE, NOT_CHECKED)
# A GPU node's status, worst last.
STATUSES = (OK, "warning", PAUSED, "failing")
# Beside the layers, the summary counts the workload-label check (gpu_node_check's findings on
# nvidia.com/gpu.workload.config and on resources of several workload types), and the failing
# nodes whose only errors are other findings (an order violation, ...).
WORKLOAD_LABEL, OTHER_FINDINGS = "workload-label", "other findings"
WORKLOAD_LABEL_CODES = (nc.UNKNOWN_WORKLOAD_CONFIG, nc.LABEL_IGNORED, nc.MIXED_WORKLOAD)
# The one-line summary names this many failing nodes; the report lists them all.
SUMMARY_NAMES = 10
# The failure message of the task spells out this many failing nodes; the report has them all.
MESSAGE_NODES = 20
# Keys whose values change from run to run without the cluster changing.
VOLATILE_KEYS = ("generated_at", "elapsed", "duration", "durations", "api_requests", "pod", "log_tail", "steps_seconds")


def _layer(state, detail=""):
    return {"state": state, "detail": detail}


def _host_layers(facts):
    """hardware and host-driver layers from the preflight's host facts (host_facts.gather), when given."""
    if not facts:
        return _layer(NOT_CHECKED, "no host facts (preflight not run)"), _layer(NOT_CHECKED, "no host facts")
    gpus = (facts.get("hardware") or {}).get("gpus") or []
    models = {}
    for gpu in gpus:
        model = "%s (%s:%s)" % (gpu.get("model") or gpu.get("name") or "NVIDIA GPU", gpu.get("vendor_id"),
                                gpu.get("device_id"))
        models[model] = models.get(model, 0) + 1
    hw = _layer(OK, ", ".join("%d x %s" % (n, m) for m, n in sorted(models.items()))) if gpus \
        else _layer(FAILED, "no NVIDIA GPU on the PCI bus")
    driver = facts.get("host_driver") or {}
    if driver.get("preinstalled") and driver.get("loaded"):
        host_driver = _layer(OK, "host driver %s" % (driver.get("version") or "loaded"))
    elif driver.get("preinstalled"):
        host_driver = _layer(OK, "host driver installed (%s), not loaded" % driver.get("kernel_module"))
    elif driver.get("loaded"):
        # The GPU Operator's driver container, seen by a preflight rerun after rollout.
        host_driver = _layer(NOT_APPLICABLE, "driver %s of the GPU Operator's driver container"
                             % (driver.get("version") or "loaded"))
    else:
        host_driver = _layer(NOT_APPLICABLE, "no host driver")
    return hw, host_driver


def _text(value):
    return value if isinstance(value, str) and value else None


def node_identity(report, facts):
    """(architecture, GPU model, driver {version, source}) of one node: from the preflight's
    host facts when they were read, else from the node itself (the kubelet's arch label, GFD's
    product and driver version). The driver's source is where the operand model puts it: the
    operator's driver container (``container``) or the host (``host``); None where the node runs
    no driver (VM workloads)."""
    facts = facts if isinstance(facts, dict) else {}
    arch = _text((facts.get("architecture") or {}).get("kubernetes")) if isinstance(
        facts.get("architecture"), dict) else None
    models = sorted(set(g.get("model") for g in (facts.get("hardware") or {}).get("gpus") or ()
                        if isinstance(g, dict) and _text(g.get("model"))))
    state = (report.get("operand_states") or {}).get("driver") if isinstance(report.get("operand_states"), dict) \
        else None
    source = {"expected": "container", "host": "host"}.get(state)
    host_driver = facts.get("host_driver") if isinstance(facts.get("host_driver"), dict) else {}
    version = _text(report.get("driver_version"))
    if source == "host" and host_driver.get("preinstalled"):
        version = _text(host_driver.get("version")) or version
    driver = {"source": source, "version": version}
    if source == "host" and _text(host_driver.get("kernel_modules")):
        driver["kernel_modules"] = host_driver["kernel_modules"]
    return (arch or _text(report.get("architecture")), ", ".join(models) or _text(report.get("gpu_product")),
            driver)


def _driver_cell(driver):
    if not driver.get("source"):
        return "-"
    return "%s (%s)" % (driver.get("version") or "version unknown", driver["source"])


def _cuda_by_node(cuda):
    result = {}
    for pod in (cuda or {}).get("pods") or []:
        if pod.get("node"):
            result[pod["node"]] = pod
    return result


def _allocatable_by_node(allocatable_results):
    result = {}
    for entry in allocatable_results or ():
        for name, node in ((entry or {}).get("nodes") or {}).items():
            result.setdefault(name, []).append(node)
    return result


# ---------------------------------------------------------------- input
# What build_report reads of the modules' registered results: each field absent or null,
# or of this shape. A result of the module itself always is; a hand-edited one (a vars
# file, a result from another version) is refused naming the field.
_STRINGS = ko.list_of(ko.STRING)
_DIAGNOSIS = ko.map_of(ko.mapping({"layer": ko.STRING, "operand": ko.STRING, "reason": ko.STRING}))
_STEP = {"failed": ko.BOOLEAN, "msg": ko.STRING, "diagnosis": _DIAGNOSIS, "elapsed": ko.NUMBER,
         "steps": ko.list_of(ko.mapping({"step": ko.STRING, "done": ko.BOOLEAN, "message": ko.STRING,
                                         "duration": ko.NUMBER}))}
INPUT_SHAPES = (
    ("step_gate", ko.mapping({"failed": ko.BOOLEAN, "message": ko.STRING, "elapsed": ko.NUMBER})),
    ("node_check", ko.mapping({
        "nodes": ko.map_of(ko.mapping({
            "gpu_node": ko.BOOLEAN, "workload_config": ko.STRING, "workload_label": ko.STRING,
            "driver_version": ko.STRING, "kubelet_version": ko.STRING,
            "expected_operands": ko.list_of(ko.one_of(om.OPERAND_NAMES, "an operand name")),
            "operand_states": ko.STRING_MAP,
            "running_operands": _STRINGS, "not_running": ko.STRING_MAP, "paused_operands": ko.STRING_MAP,
            "untolerated_taints": _STRINGS, "vgpu_config_state": ko.STRING,
            "advertised": ko.map_of(ko.INTEGER), "capacity": ko.map_of(ko.INTEGER),
            "layer_failures": ko.list_of(ko.mapping({"layer": ko.STRING, "operand": ko.STRING, "reason": ko.STRING},
                                                    required=("layer",))),
        })),
        "findings": ko.list_of(ko.mapping({"node": ko.STRING, "severity": ko.STRING, "code": ko.STRING,
                                           "message": ko.STRING})),
        "summary": ko.mapping({"by_code": ko.map_of(ko.INTEGER)}),
        "images": ko.mapping({"operator": ko.map_of(ko.INTEGER), "operands": ko.map_of(ko.map_of(ko.INTEGER))}),
        "elapsed": ko.NUMBER,
    })),
    ("operand_readiness", ko.mapping(_STEP)),
    ("allocatable", ko.list_of(ko.mapping(dict(_STEP, nodes=ko.map_of(ko.mapping({
        "ready": ko.BOOLEAN, "allocatable": ko.INTEGER, "capacity": ko.INTEGER})))))),
    ("cuda_sample", ko.mapping(dict(_STEP, pods=ko.list_of(ko.mapping({
        "node": ko.STRING, "passed": ko.BOOLEAN, "phase": ko.STRING, "reason": ko.STRING,
        "log_tail": _STRINGS}))))),
    ("host_facts", ko.map_of(ko.mapping({
        "hardware": ko.mapping({"gpus": ko.list_of(ko.mapping({
            "model": ko.STRING, "name": ko.STRING, "vendor_id": ko.STRING, "device_id": ko.STRING}))}),
        "host_driver": ko.mapping({"preinstalled": ko.BOOLEAN, "loaded": ko.BOOLEAN, "version": ko.STRING,
                                   "kernel_module": ko.STRING}),
    }))),
)


def read_inputs(**inputs):
    """Raise MalformedObject naming the option and the field (``node_check.nodes["gpu-1"].
    layer_failures[0] is a string, expected a mapping``) when a result the report reads
    has a shape it cannot read."""
    for name, shape in INPUT_SHAPES:
        if inputs.get(name) is not None:
            ko.check_shape(shape, inputs[name], name)


def build_report(site, node_check, readiness=None, allocatable_results=None, cuda=None, host_facts=None,
                 generated_at=None, step_gate=None):
    """The report as a dict: ``passed``, ``summary``, ``nodes`` (per node: workload
    config, resources, operands, layers, findings, status) and ``steps``. Its inputs
    are read first (read_inputs)."""
    read_inputs(node_check=node_check, operand_readiness=readiness, allocatable=allocatable_results,
                cuda_sample=cuda, host_facts=host_facts, step_gate=step_gate)
    node_check = node_check or {}
    findings = node_check.get("findings") or []
    cuda_nodes = _cuda_by_node(cuda)
    alloc_nodes = _allocatable_by_node(allocatable_results)
    diagnosis = {}
    for source in (readiness or {}, ) + tuple(allocatable_results or ()) + ((cuda or {}),):
        # The wait modules return {node: {layer, operand, reason, ...}}.
        for node_name, entry in (source.get("diagnosis") or {}).items():
            if entry not in diagnosis.get(node_name, []):
                diagnosis.setdefault(node_name, []).append(entry)
    nodes = {}
    for name, report in sorted((node_check.get("nodes") or {}).items()):
        if not report.get("gpu_node"):
            continue
        node_findings = [f for f in findings if f.get("node") == name]
        errors = [f for f in node_findings if f.get("severity") == "error"]
        hw, host_driver = _host_layers((host_facts or {}).get(name))
        layers = {"hardware": hw, "host-driver": host_driver}
        failures = dict((f["layer"], f) for f in reversed(report.get("layer_failures") or []))
        expected = report.get("expected_operands") or []
        paused = report.get("paused_operands") or {}
        for layer in (om.LAYER_DRIVER, om.LAYER_RUNTIME, om.LAYER_DEVICE_PLUGIN):
            members = [op for op in expected if om.operand(op).layer == layer]
            not_running = report.get("not_running") or {}
            if layer in failures:
                failure = failures[layer]
                layers[layer] = _layer(FAILED, "%s: %s" % (failure.get("operand"), failure.get("reason")))
            elif any(m in paused for m in members):
                layers[layer] = _layer(PAUSED, "; ".join("%s: %s" % (m, not_running[m]) for m in members
                                                         if m in paused and m in not_running))
            elif any(m in not_running for m in members):
                # Not a broken layer (node_check reports none): kept off by a taint on a node
                # the inventory isolates.
                kept_off = ["%s: %s" % (m, not_running[m]) for m in members if m in not_running]
                layers[layer] = _layer(NOT_APPLICABLE, "; ".join(kept_off))
            elif members:
                layers[layer] = _layer(OK, ", ".join(members) + " running")
            else:
                layers[layer] = _layer(NOT_APPLICABLE, "provided by the host or not part of %s"
                                       % report.get("workload_config"))
        advertised = report.get("advertised") or {}
        if om.LAYER_ALLOCATABLE in failures:
            failure = failures[om.LAYER_ALLOCATABLE]
            layers[om.LAYER_ALLOCATABLE] = _layer(FAILED, failure.get("reason", ""))
        elif any(not n.get("ready", True) for n in alloc_nodes.get(name, [])):
            counts = ", ".join("%s of %s allocatable" % (n.get("allocatable"), n.get("capacity"))
                               for n in alloc_nodes[name] if not n.get("ready", True))
            why = "; ".join("%s (%s): %s" % (d.get("layer"), d.get("operand"), d.get("reason"))
                            for d in diagnosis.get(name, []) if d.get("layer"))
            layers[om.LAYER_ALLOCATABLE] = _layer(FAILED, "not usable (%s)%s" % (counts, ": " + why if why else ""))
        elif paused:
            layers[om.LAYER_ALLOCATABLE] = _layer(PAUSED, "%s while %s %s paused" % (
                ", ".join("%s=%s" % kv for kv in sorted(advertised.items())) or "nothing advertised",
                ", ".join(sorted(paused)), "is" if len(paused) == 1 else "are"))
        elif report.get("vgpu_config_state") == "pending":
            layers[om.LAYER_ALLOCATABLE] = _layer(NOT_CHECKED, "vGPU config pending (%s=pending)"
                                                  % om.VGPU_CONFIG_STATE_LABEL)
        elif advertised:
            layers[om.LAYER_ALLOCATABLE] = _layer(OK, ", ".join("%s=%s" % kv for kv in sorted(advertised.items())))
        elif expected and not report.get("untolerated_taints"):
            layers[om.LAYER_ALLOCATABLE] = _layer(FAILED, "nothing advertised")
        elif expected:
            layers[om.LAYER_ALLOCATABLE] = _layer(NOT_APPLICABLE, "nothing advertised: operands kept off by taint %s"
                                                  % ", ".join(report["untolerated_taints"]))
        else:
            layers[om.LAYER_ALLOCATABLE] = _layer(NOT_APPLICABLE, "no operands expected")
        pod = cuda_nodes.get(name)
        if pod is None:
            layers["cuda-sample"] = _layer(NOT_CHECKED, "no sample pod ran here")
        elif pod.get("passed", pod.get("phase") == "Succeeded"):
            layers["cuda-sample"] = _layer(OK, "phase %s" % pod.get("phase"))
        else:
            # cuda_sample returns the log's last lines as a list.
            layers["cuda-sample"] = _layer(FAILED, "phase %s: %s" % (pod.get("phase"), pod.get("reason") or (
                (pod.get("log_tail") or [""])[-1])))
        arch, gpu_model, driver = node_identity(report, (host_facts or {}).get(name))
        failed_layers = [layer for layer in REPORT_LAYERS if layers[layer]["state"] == FAILED]
        status = "failing" if (failed_layers or errors) else (
            PAUSED if paused else ("warning" if node_findings else "ok"))
        nodes[name] = {
            "workload_config": report.get("workload_config"),
            "architecture": arch,
            "gpu_model": gpu_model,
            "driver": driver,
            "expected_operands": expected,
            "running_operands": report.get("running_operands") or [],
            "advertised": advertised,
            "capacity": report.get("capacity") or {},
            "layers": layers,
            "first_failed_layer": failed_layers[0] if failed_layers else None,
            "workload_label": _workload_label(report, node_findings),
            "kubelet_version": report.get("kubelet_version"),
            "findings": node_findings,
            "diagnosis": diagnosis.get(name, []),
            "host_facts": (host_facts or {}).get(name),
            "status": status,
        }
    steps = {
        # A failed gate stops the play before the report: here it passed, or was not run.
        "step_gate": _step(step_gate),
        "operand_readiness": _step(readiness),
        "allocatable": [_step(r) for r in allocatable_results or ()],
        "cuda_sample": _step(cuda),
        "node_check": {"passed": not any(f.get("severity") == "error" for f in findings),
                       "message": _check_summary(node_check.get("summary")), "elapsed": node_check.get("elapsed")},
    }
    step_failures = [k for k, v in steps.items() if isinstance(v, dict) and v.get("passed") is False]
    step_failures += ["allocatable"] if any(s.get("passed") is False for s in steps["allocatable"]) else []
    failing = failing_order(nodes)
    passed = not failing and not step_failures and bool(nodes)
    if passed:
        summary = "%d GPU nodes verified: %s" % (len(nodes), ", ".join(
            "%d %s" % (sum(1 for r in nodes.values() if r["status"] == s), s) for s in ("ok", "warning", PAUSED)
            if any(r["status"] == s for r in nodes.values())))
    elif not nodes:
        summary = "no GPU node found"
    else:
        named = ["%s (%s)" % (n, first_failure(nodes[n])) for n in failing[:SUMMARY_NAMES]]
        if len(failing) > SUMMARY_NAMES:
            named.append("and %d more" % (len(failing) - SUMMARY_NAMES))
        summary = "%d of %d GPU nodes failing: %s" % (len(failing), len(nodes), "; ".join(named) or "-")
        if step_failures:
            summary += "; failed steps: %s" % ", ".join(sorted(set(step_failures)))
    timed = [s.get("elapsed") for s in [steps["step_gate"], steps["operand_readiness"], steps["cuda_sample"],
                                        steps["node_check"]] + steps["allocatable"]
             if isinstance(s.get("elapsed"), (int, float))]
    return {"site": site, "generated_at": generated_at, "passed": passed, "summary": summary,
            "layers": list(REPORT_LAYERS), "overview": overview(nodes), "failing_nodes": failing,
            "versions": versions(node_check, nodes), "steps": steps,
            "elapsed": round(sum(timed), 3) if timed else None, "nodes": nodes}


# ---------------------------------------------------------------- summary, order, versions

def _workload_label(report, node_findings):
    """The workload-label check of one node: failed when gpu_node_check found the label
    unknown, ignored, or the node advertising resources of several workload types."""
    wrong = [f for f in node_findings if f.get("code") in WORKLOAD_LABEL_CODES and f.get("severity") == "error"]
    if wrong:
        return _layer(FAILED, "; ".join("%s: %s" % (f.get("code"), f.get("message")) for f in wrong))
    label = report.get("workload_label")
    return _layer(OK, "%s=%s" % (om.WORKLOAD_CONFIG_LABEL, label) if label else
                  "no %s: %s" % (om.WORKLOAD_CONFIG_LABEL, report.get("workload_config")))


def failing_order(nodes):
    """The failing nodes in the order the report lists them: by their lowest broken layer,
    bottom up as the ADR's diagnosis reads (every node whose driver is broken together,
    then the container runtime's, ...), then those failing on the workload label, then on
    other error findings; by name within each."""
    def key(name):
        node = nodes[name]
        if node["first_failed_layer"] in REPORT_LAYERS:
            rank = REPORT_LAYERS.index(node["first_failed_layer"])
        elif node["workload_label"]["state"] == FAILED:
            rank = len(REPORT_LAYERS)
        else:
            rank = len(REPORT_LAYERS) + 1
        return rank, name
    return sorted((n for n, r in nodes.items() if r["status"] == "failing"), key=key)


def first_failure(node):
    """Where a failing node's diagnosis starts: its lowest broken layer, else the workload
    label, else its other error findings."""
    if node["first_failed_layer"]:
        return node["first_failed_layer"]
    return WORKLOAD_LABEL if node["workload_label"]["state"] == FAILED else OTHER_FINDINGS


def overview(nodes):
    """The report's summary, counts only: GPU nodes by status; per layer (and the workload
    label) how many nodes are in each state; and how many failing nodes each layer is the
    lowest broken one of, which is where their diagnosis starts."""
    by_status = dict((status, 0) for status in STATUSES)
    rows = REPORT_LAYERS + (WORKLOAD_LABEL,)
    by_layer = dict((row, dict((state, 0) for state in STATES)) for row in rows)
    first_failed = dict((row, 0) for row in rows + (OTHER_FINDINGS,))
    for node in nodes.values():
        by_status[node["status"]] += 1
        for layer in REPORT_LAYERS:
            by_layer[layer][node["layers"][layer]["state"]] += 1
        by_layer[WORKLOAD_LABEL][node["workload_label"]["state"]] += 1
        if node["status"] == "failing":
            first_failed[first_failure(node)] += 1
    return {"gpu_nodes": len(nodes), "by_status": by_status, "by_layer": by_layer,
            "first_failed_layer": first_failed}


def _count(values):
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def versions(node_check, nodes):
    """What the verification saw running, each value with how many nodes (the operator: pods)
    it was seen on; nothing here is inferred. ``rke2``: every node's kubelet version (an RKE2
    node's is RKE2's); ``gpu-operator``: the operator pods' image; ``driver``: the driver NVML
    reports on each GPU node (GFD's label, or the preflight's host driver) and where it comes
    from; ``operand_images``: per operand, the image its pods run on the GPU nodes (the
    container toolkit's and the device plugin's tags are their versions)."""
    images = node_check.get("images") or {}
    return {
        "rke2": _count(r.get("kubelet_version") or "unknown" for r in (node_check.get("nodes") or {}).values()),
        "gpu-operator": dict(images.get("operator") or {}),
        "driver": _count("%s, %s driver" % (n["driver"].get("version") or "version unknown", n["driver"]["source"])
                         for n in nodes.values() if n["driver"].get("source")),
        "operand_images": dict((name, dict(counts)) for name, counts in (images.get("operands") or {}).items()),
    }


def version_rows(report):
    """(component, [(value, count, unit)]) in the order the report shows them, values
    most seen first."""
    found = report.get("versions") or {}

    def values(counts, unit):
        return [(value, count, unit) for value, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    rows = [("RKE2 (kubelet)", values(found.get("rke2") or {}, "node")),
            ("GPU Operator", values(found.get("gpu-operator") or {}, "pod")),
            ("driver", values(found.get("driver") or {}, "GPU node"))]
    operand_images = found.get("operand_images") or {}
    known = [o.name for o in om.OPERANDS]
    rows += [("%s image" % name, values(operand_images[name], "GPU node"))
             for name in known + sorted(set(operand_images) - set(known)) if name in operand_images]
    return rows


def step_rows(report):
    """(step, passed, seconds, message) in the order gpu_verify runs them; the operand
    wait's own steps (operator, ClusterPolicy, operands) under it."""
    steps = report["steps"]
    # A report of an older version has no step_gate entry.
    rows = [("step_gate", steps.get("step_gate") or _step(None)), ("operand_readiness", steps["operand_readiness"])]
    rows += [("allocatable[%d]" % i, step) for i, step in enumerate(steps["allocatable"])]
    rows += [("cuda_sample", steps["cuda_sample"]), ("node_check", steps["node_check"])]
    result = []
    for name, step in rows:
        result.append((name, step.get("passed"), step.get("elapsed"), step.get("message") or ""))
        for sub in step.get("steps_seconds") or ():
            result.append(("%s: %s" % (name, sub.get("step")), sub.get("done"), sub.get("duration"),
                           sub.get("message") or ""))
    return result


def _check_summary(summary):
    if not isinstance(summary, dict):
        return str(summary or "")
    codes = ", ".join("%s=%s" % kv for kv in sorted((summary.get("by_code") or {}).items()))
    return "%s nodes (%s GPU), %s without errors; %s errors, %s warnings%s" % (
        summary.get("nodes"), summary.get("gpu_nodes"), summary.get("ok_nodes"), summary.get("errors"),
        summary.get("warnings"),
        " (%s)" % codes if codes else "")


def _step(result):
    if result is None:
        return {"passed": None, "message": "not run"}
    # step_gate says why in ``message``, the waits in ``msg``.
    return {"passed": not result.get("failed", False), "message": result.get("msg") or result.get("message") or "",
            "elapsed": result.get("elapsed"), "steps_seconds": result.get("steps")}


def stable(report):
    """The report without what changes from run to run on an unchanged cluster: the
    part that decides whether writing it is a change."""
    def strip(value):
        if isinstance(value, dict):
            return dict((k, strip(v)) for k, v in value.items() if k not in VOLATILE_KEYS)
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(copy.deepcopy(report))


def to_json(report):
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


_MARK = {OK: "ok", FAILED: "FAILED", NOT_APPLICABLE: "n/a", NOT_CHECKED: "-", PAUSED: "paused"}
_SUMMARY_ROWS = REPORT_LAYERS + (WORKLOAD_LABEL,)
# The summary's last column: how many failing nodes' diagnosis starts at the row's layer.
FIRST_BROKEN = "failing from here"


def _seconds(value):
    return "%.1f s" % value if isinstance(value, (int, float)) and not isinstance(value, bool) else "not timed"


def _values_text(values):
    if not values:
        return "not seen"
    return "; ".join("%s (%d %s%s)" % (value, count, unit, "" if count == 1 else "s") for value, count, unit in values)


def _failing_lines(report, name):
    """The diagnosis of one failing node, one line each: its broken layers bottom up, the
    workload label when it is wrong, then its error findings."""
    node = report["nodes"][name]
    lines = [(layer, node["layers"][layer]["detail"]) for layer in report["layers"]
             if node["layers"][layer]["state"] == FAILED]
    if node["workload_label"]["state"] == FAILED:
        lines.append((WORKLOAD_LABEL, node["workload_label"]["detail"]))
    return lines, [f for f in node["findings"] if f.get("severity") == "error"]


def _other_findings(report):
    """(node, finding) of what is not an error of a failing node: warnings, in report order."""
    failing = set(report["failing_nodes"])
    return [(name, f) for name, node in sorted(report["nodes"].items()) for f in node["findings"]
            if name not in failing or f.get("severity") != "error"]


def to_markdown(report):
    """Summary (by status, by layer, versions, step times), the failing nodes with their
    diagnosis, the other findings, then every GPU node's row."""
    view = report["overview"]
    lines = ["# GPU verification report: %s" % report["site"], "",
             "**%s** - %s" % ("PASSED" if report["passed"] else "FAILED", report["summary"]), "",
             "Generated %s." % (report.get("generated_at") or "now"), "",
             "## Summary", "",
             "| GPU nodes | " + " | ".join(STATUSES) + " |", "|---|" + "---|" * len(STATUSES),
             _row([view["gpu_nodes"]] + [view["by_status"][s] for s in STATUSES]), "",
             "| layer | " + " | ".join(STATES) + " | %s |" % FIRST_BROKEN,
             "|---|" + "---|" * (len(STATES) + 1)]
    lines += [_row([row] + [view["by_layer"][row][state] for state in STATES]
                   + [view["first_failed_layer"][row]]) for row in _SUMMARY_ROWS]
    if view["first_failed_layer"][OTHER_FINDINGS]:
        lines.append(_row([OTHER_FINDINGS] + [""] * len(STATES) + [view["first_failed_layer"][OTHER_FINDINGS]]))
    lines += ["", "## Versions", "", "| component | seen running |", "|---|---|"]
    lines += [_row([component, _values_text(values)]) for component, values in version_rows(report)]
    lines += ["", "## Steps", "", "Took %s in the steps above (writing this report is not counted)."
              % _seconds(report.get("elapsed")), "", "| step | passed | took | message |", "|---|---|---|---|"]
    lines += [_row([name, passed, _seconds(took), message]) for name, passed, took, message in step_rows(report)]
    lines += ["", "## Failing nodes (%d)" % len(report["failing_nodes"]), ""]
    if not report["failing_nodes"]:
        lines.append("None.")
    for name in report["failing_nodes"]:
        node = report["nodes"][name]
        layers, errors = _failing_lines(report, name)
        lines += ["### %s" % name, "",
                  "%s, %s; diagnosis starts at: %s" % (node["workload_config"], node.get("architecture") or "-",
                                                       first_failure(node)), ""]
        lines += ["- **%s** / %s: %s" % (name, layer, detail) for layer, detail in layers]
        lines += ["- %s %s `%s`: %s" % (f.get("severity"), name, f.get("code"), f.get("message")) for f in errors]
        lines.append("")
    others = _other_findings(report)
    lines += ["## Other findings (%d)" % len(others), ""]
    lines += ["- %s %s `%s`: %s" % (f.get("severity"), name, f.get("code"), f.get("message")) for name, f in others]
    lines += ["None."] if not others else []
    lines += ["", "## All GPU nodes (%d)" % len(report["nodes"]), "",
              "| node | arch | GPU | driver | workload config | advertised | " + " | ".join(report["layers"])
              + " | status |",
              "|---|---|---|---|---|---|" + "---|" * len(report["layers"]) + "---|"]
    for name, node in sorted(report["nodes"].items()):
        advertised = ", ".join("%s=%s" % kv for kv in sorted(node["advertised"].items())) or "-"
        cells = [name, node.get("architecture") or "-", node.get("gpu_model") or "-",
                 _driver_cell(node.get("driver") or {}), node["workload_config"], advertised] + [
            _MARK[node["layers"][layer]["state"]] for layer in report["layers"]] + [node["status"]]
        lines.append(_row(cells))
    return "\n".join(lines) + "\n"


def _row(cells):
    """One Markdown table row; cell text on one line, no stray column separators."""
    return "| %s |" % " | ".join(str(c).replace("\n", " ").replace("|", "/")[:300] for c in cells)


def _escape(text):
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"))


def _css_class(state):
    return state.replace(" ", "-").replace("/", "")


def _table(head, rows, attrs=""):
    return "<table%s><tr>%s</tr>%s</table>" % (attrs, "".join("<th>%s</th>" % _escape(h) for h in head), "".join(rows))


_CSS = ("body{font:14px/1.35 sans-serif;margin:12px 16px}h1{font-size:20px;margin:0 0 4px}"
        "h2{font-size:16px;margin:14px 0 4px}h3{font-size:14px;margin:0}"
        "table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #ccc;padding:1px 6px;text-align:left;"
        "vertical-align:top}td.n{text-align:right}th,td.n{white-space:nowrap}#top{display:flex;flex-wrap:wrap;gap:0 24px;align-items:flex-start}"
        "#versions{flex:1 1 420px;min-width:0}.verdict{font-size:15px;margin:0 0 6px}.verdict .failed,.verdict .ok{padding:0 4px}"
        ".ok{background:#dfd}.failed{background:#fbb}.na{color:#888}.paused{background:#ffd}.warning{background:#ffd}.failing{background:#fbb}"
        ".node{margin:6px 0;padding:3px 8px;border-left:4px solid #c00;background:#fff6f6}"
        ".node ul{margin:2px 0;padding-left:20px}.node .where{color:#555;font-weight:normal}")


def to_html(report):
    """The Markdown's sections in one page; the summary fits the first screen, each failing
    node's diagnosis is written out, and the table's cells carry their detail too."""
    view = report["overview"]
    status_cells = "".join('<td class="n %s">%d</td>' % (
        _css_class(s) if view["by_status"][s] and s != OK else "", view["by_status"][s]) for s in STATUSES)
    status_table = _table(("GPU nodes",) + STATUSES, ['<tr><td class="n">%d</td>%s</tr>' % (
        view["gpu_nodes"], status_cells)])
    layer_rows = []
    for row in _SUMMARY_ROWS + ((OTHER_FINDINGS,) if view["first_failed_layer"][OTHER_FINDINGS] else ()):
        counts = view["by_layer"].get(row)
        if counts:
            cells = "".join('<td class="n %s">%d</td>' % (
                FAILED if counts[state] and state == FAILED else "", counts[state]) for state in STATES)
        else:
            cells = '<td colspan="%d"></td>' % len(STATES)
        layer_rows.append('<tr><th>%s</th>%s<td class="n">%d</td></tr>' % (
            _escape(row), cells, view["first_failed_layer"][row]))
    layer_table = _table(("layer",) + STATES + (FIRST_BROKEN,), layer_rows, ' class="layers"')
    version_table = _table(("component", "seen running"), ["<tr><th>%s</th><td>%s</td></tr>" % (
        _escape(component), _escape(_values_text(values))) for component, values in version_rows(report)])
    step_rows_html = ['<tr><th>%s</th><td class="%s">%s</td><td class="n">%s</td><td>%s</td></tr>' % (
        _escape(name), OK if passed else (FAILED if passed is False else ""), _escape(passed), _seconds(took),
        _escape(message)) for name, passed, took, message in step_rows(report)]
    step_table = _table(("step", "passed", "took", "message"), step_rows_html)
    failing = []
    for name in report["failing_nodes"]:
        node = report["nodes"][name]
        layers, errors = _failing_lines(report, name)
        items = ["<li><b>%s</b>: %s</li>" % (_escape(layer), _escape(detail)) for layer, detail in layers]
        items += ["<li>%s <code>%s</code>: %s</li>" % (_escape(f.get("severity")), _escape(f.get("code")),
                                                       _escape(f.get("message"))) for f in errors]
        failing.append('<div class="node" id="node-%s"><h3>%s <span class="where">%s, %s; diagnosis starts at: %s'
                       '</span></h3><ul>%s</ul></div>' % (
                           _escape(name), _escape(name), _escape(node["workload_config"]),
                           _escape(node.get("architecture") or "-"), _escape(first_failure(node)), "".join(items)))
    others = ["<li>%s %s <code>%s</code>: %s</li>" % (_escape(f.get("severity")), _escape(name), _escape(f.get("code")),
                                                      _escape(f.get("message"))) for name, f in _other_findings(report)]
    rows = []
    for name, node in sorted(report["nodes"].items()):
        cells = "".join('<td class="%s" title="%s">%s</td>' % (
            _css_class(node["layers"][layer]["state"]), _escape(node["layers"][layer]["detail"]),
            _escape(_MARK[node["layers"][layer]["state"]])) for layer in report["layers"])
        label = '<a href="#node-%s">%s</a>' % (_escape(name), _escape(name)) if node["status"] == "failing" \
            else _escape(name)
        rows.append("<tr><th>%s</th><td>%s</td><td>%s</td><td>%s</td><td>%s</td>%s<td class=\"%s\">%s</td></tr>" % (
            label, _escape(node.get("architecture") or "-"), _escape(node.get("gpu_model") or "-"),
            _escape(_driver_cell(node.get("driver") or {})), _escape(node["workload_config"]), cells,
            _css_class(node["status"]) if node["status"] != OK else "", _escape(node["status"])))
    verdict = "PASSED" if report["passed"] else "FAILED"
    return "".join((
        '<!doctype html><html><head><meta charset="utf-8"><title>GPU verification: %s</title><style>%s</style>'
        "</head><body>" % (_escape(report["site"]), _CSS),
        '<h1>GPU verification: %s</h1><p class="verdict"><b class="%s">%s</b> %s</p>' % (
            _escape(report["site"]), OK if report["passed"] else FAILED, verdict, _escape(report["summary"])),
        '<div id="top"><section id="summary"><h2>Summary</h2>%s%s</section>' % (status_table, layer_table),
        '<section id="versions"><h2>Versions</h2>%s</section></div>' % version_table,
        '<section id="steps"><h2>Steps</h2><p>Took %s in the steps above (writing this report is not '
        'counted).</p>%s</section>' % (_seconds(report.get("elapsed")), step_table),
        '<section id="failing"><h2>Failing nodes (%d)</h2>%s</section>' % (
            len(failing), "".join(failing) or "<p>None.</p>"),
        '<section id="findings"><h2>Other findings (%d)</h2>%s</section>' % (
            len(others), "<ul>%s</ul>" % "".join(others) if others else "<p>None.</p>"),
        '<section id="nodes"><h2>All GPU nodes (%d)</h2>' % len(report["nodes"]),
        _table(("node", "arch", "GPU", "driver", "workload config") + tuple(report["layers"]) + ("status",), rows),
        "<p>Each layer cell's detail is its tooltip too; the JSON report (gpu-verify.json) has everything "
        "this page shows.</p></section></body></html>\n"))


def failure_message(report):
    """The per-layer diagnosis a failing verification ends with: the first MESSAGE_NODES
    failing nodes in report order; the report lists them all."""
    lines = ["GPU verification of site %s failed: %s" % (report["site"], report["summary"])]
    failing = report["failing_nodes"]
    for name in failing[:MESSAGE_NODES]:
        node = report["nodes"][name]
        for layer in report["layers"]:
            entry = node["layers"][layer]
            if entry["state"] == FAILED:
                lines.append("  %s: layer %s: %s" % (name, layer, entry["detail"]))
        for finding in node["findings"]:
            if finding.get("severity") == "error":
                lines.append("  %s: %s: %s" % (name, finding.get("code"), finding.get("message")))
    if len(failing) > MESSAGE_NODES:
        lines.append("  and %d more failing nodes: the report (gpu-verify.md, gpu-verify.html) lists them all"
                     % (len(failing) - MESSAGE_NODES))
    return "\n".join(lines)
