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
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

# Bottom up, as the ADR's diagnosis reads: below Kubernetes first.
REPORT_LAYERS = ("hardware", "host-driver", om.LAYER_DRIVER, om.LAYER_RUNTIME, om.LAYER_DEVICE_PLUGIN,
                 om.LAYER_ALLOCATABLE, "cuda-sample")
OK, FAILED, NOT_APPLICABLE, NOT_CHECKED = "ok", "failed", "n/a", "not checked"
# A layer whose operands are paused (a driver upgrade, a MIG or vGPU change): a transient
# state of a working node, neither off nor broken.
PAUSED = "paused"
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
_STEP = {"failed": ko.BOOLEAN, "msg": ko.STRING, "diagnosis": _DIAGNOSIS}
INPUT_SHAPES = (
    ("node_check", ko.mapping({
        "nodes": ko.map_of(ko.mapping({
            "gpu_node": ko.BOOLEAN, "workload_config": ko.STRING, "driver_version": ko.STRING,
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
                 generated_at=None):
    """The report as a dict: ``passed``, ``summary``, ``nodes`` (per node: workload
    config, resources, operands, layers, findings, status) and ``steps``. Its inputs
    are read first (read_inputs)."""
    read_inputs(node_check=node_check, operand_readiness=readiness, allocatable=allocatable_results,
                cuda_sample=cuda, host_facts=host_facts)
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
            "findings": node_findings,
            "diagnosis": diagnosis.get(name, []),
            "host_facts": (host_facts or {}).get(name),
            "status": status,
        }
    failing = sorted(n for n, r in nodes.items() if r["status"] == "failing")
    steps = {
        "operand_readiness": _step(readiness),
        "allocatable": [_step(r) for r in allocatable_results or ()],
        "cuda_sample": _step(cuda),
        "node_check": {"passed": not any(f.get("severity") == "error" for f in findings),
                       "message": _check_summary(node_check.get("summary"))},
    }
    step_failures = [k for k, v in steps.items() if isinstance(v, dict) and v.get("passed") is False]
    step_failures += ["allocatable"] if any(s.get("passed") is False for s in steps["allocatable"]) else []
    passed = not failing and not step_failures and bool(nodes)
    if passed:
        summary = "%d GPU nodes verified: %s" % (len(nodes), ", ".join(
            "%d %s" % (sum(1 for r in nodes.values() if r["status"] == s), s) for s in ("ok", "warning", PAUSED)
            if any(r["status"] == s for r in nodes.values())))
    elif not nodes:
        summary = "no GPU node found"
    else:
        summary = "%d of %d GPU nodes failing: %s" % (len(failing), len(nodes), "; ".join(
            "%s (%s)" % (n, nodes[n]["first_failed_layer"] or "findings") for n in failing) or "-")
        if step_failures:
            summary += "; failed steps: %s" % ", ".join(sorted(set(step_failures)))
    return {"site": site, "generated_at": generated_at, "passed": passed, "summary": summary,
            "layers": list(REPORT_LAYERS), "nodes": nodes, "steps": steps}


def _check_summary(summary):
    if not isinstance(summary, dict):
        return str(summary or "")
    codes = ", ".join("%s=%s" % kv for kv in sorted((summary.get("by_code") or {}).items()))
    return "%s GPU nodes, %s ok; %s errors, %s warnings%s" % (
        summary.get("gpu_nodes"), summary.get("ok_nodes"), summary.get("errors"), summary.get("warnings"),
        " (%s)" % codes if codes else "")


def _step(result):
    if result is None:
        return {"passed": None, "message": "not run"}
    return {"passed": not result.get("failed", False), "message": result.get("msg") or "",
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


def to_markdown(report):
    lines = ["# GPU verification report: %s" % report["site"], "",
             "**%s** - %s" % ("PASSED" if report["passed"] else "FAILED", report["summary"]), "",
             "Generated %s." % (report.get("generated_at") or "now"), "",
             "| node | arch | GPU | driver | workload config | advertised | " + " | ".join(report["layers"])
             + " | status |",
             "|---|---|---|---|---|---|" + "---|" * len(report["layers"]) + "---|"]
    for name, node in sorted(report["nodes"].items()):
        advertised = ", ".join("%s=%s" % kv for kv in sorted(node["advertised"].items())) or "-"
        cells = [name, node.get("architecture") or "-", node.get("gpu_model") or "-",
                 _driver_cell(node.get("driver") or {}), node["workload_config"], advertised] + [
            _MARK[node["layers"][layer]["state"]] for layer in report["layers"]] + [node["status"]]
        lines.append(_row(cells))
    lines += ["", "## Per-layer diagnosis", ""]
    details = []
    for name, node in sorted(report["nodes"].items()):
        details += ["- **%s** / %s: %s" % (name, layer, node["layers"][layer]["detail"])
                    for layer in report["layers"] if node["layers"][layer]["state"] == FAILED]
        details += ["- %s %s `%s`: %s" % (f.get("severity"), name, f.get("code"), f.get("message"))
                    for f in node["findings"]]
    lines += details or ["Every layer of every GPU node is healthy."]
    lines += ["", "## Steps", "", "| step | passed | message |", "|---|---|---|"]
    steps = [(key, report["steps"][key]) for key in ("operand_readiness", "cuda_sample", "node_check")]
    steps += [("allocatable[%d]" % i, step) for i, step in enumerate(report["steps"]["allocatable"])]
    lines += [_row([key, step.get("passed"), step.get("message") or ""]) for key, step in steps]
    return "\n".join(lines) + "\n"


def _row(cells):
    """One Markdown table row; cell text on one line, no stray column separators."""
    return "| %s |" % " | ".join(str(c).replace("\n", " ").replace("|", "/")[:300] for c in cells)


def _escape(text):
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def to_html(report):
    rows = []
    for name, node in sorted(report["nodes"].items()):
        cells = "".join('<td class="%s" title="%s">%s</td>' % (
            node["layers"][layer]["state"].replace(" ", "-").replace("/", ""), _escape(node["layers"][layer]["detail"]),
            _escape(_MARK[node["layers"][layer]["state"]])) for layer in report["layers"])
        rows.append("<tr><th>%s</th><td>%s</td><td>%s</td><td>%s</td><td>%s</td>%s<td>%s</td></tr>" % (
            _escape(name), _escape(node.get("architecture") or "-"), _escape(node.get("gpu_model") or "-"),
            _escape(_driver_cell(node.get("driver") or {})), _escape(node["workload_config"]), cells,
            _escape(node["status"])))
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>GPU verification: %s</title><style>"
            "body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:4px 8px}"
            ".ok{background:#dfd}.failed{background:#fbb}.na{color:#888}.paused{background:#ffd}</style></head><body>"
            "<h1>GPU verification: %s</h1><p><b>%s</b> - %s</p><table><tr><th>node</th><th>arch</th><th>GPU</th>"
            "<th>driver</th><th>workload config</th>%s"
            "<th>status</th></tr>%s</table><p>Hover a cell for its detail; the JSON report has everything.</p>"
            "</body></html>\n") % (
        _escape(report["site"]), _escape(report["site"]), "PASSED" if report["passed"] else "FAILED",
        _escape(report["summary"]), "".join("<th>%s</th>" % _escape(l) for l in report["layers"]), "".join(rows))


def failure_message(report):
    """The per-layer diagnosis a failing verification ends with."""
    lines = ["GPU verification of site %s failed: %s" % (report["site"], report["summary"])]
    for name, node in sorted(report["nodes"].items()):
        if node["status"] != "failing":
            continue
        for layer in report["layers"]:
            entry = node["layers"][layer]
            if entry["state"] == FAILED:
                lines.append("  %s: layer %s: %s" % (name, layer, entry["detail"]))
        for finding in node["findings"]:
            if finding.get("severity") == "error":
                lines.append("  %s: %s: %s" % (name, finding.get("code"), finding.get("message")))
    return "\n".join(lines)
