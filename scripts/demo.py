"""make demo: the main job on the lab, then the seeds' stories.

1. The lab (tests/lab) is brought up if it is not running: a real control plane with the fleet of
   inventories/lab/hosts.yml and the GPU Operator (the real one, built from its source, or offline the
   simulator); the demo names which.
2. The GPU part of site.yml runs on the lab inventory: step 5 (gate, node labels, GPU Operator HelmChart)
   and step 6 (operands in order, allocatable GPUs, CUDA sample, checks, report). Its PLAY RECAP is printed;
   a second `make demo` shows the same changed=0 run. It fails at the report step, as it must: the fleet's
   gpu-tainted-1 is a GPU node whose taint the operand DaemonSets do not tolerate, and the inventory takes no
   decision about it, so it has no GPU operands and nothing says that is intended.
3. The stories, each undone afterwards so the next run starts from the same cluster:
   - the tainted GPU node: the report fails on it and names both fixes (a toleration in the chart's
     daemonsets.tolerations, or isolating the node); isolating it (gpu_node_isolated) makes the verification
     pass;
   - one label isolates a node: its operand pods and advertised GPUs go, the node stays schedulable;
   - the "device plugin without toolkit" node: GPUs advertised, nothing errors, the check catches it;
   - a request for a resource nobody advertises stays Pending everywhere, with the scheduler's reason.
"""

import json
import os
import re
import subprocess
import sys
import time

from kubernetes import client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, ".build", "collections"), ROOT]

from tests.lab.lab import Lab  # noqa: E402  (after the path set-up)
from tests.integration.modules import run_module  # noqa: E402
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om  # noqa: E402
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov  # noqa: E402

SITE = "lab"
INVENTORY = os.path.join(ROOT, "inventories", SITE, "hosts.yml")
STORY_NODE = "gpu-container-2"
TAINTED_NODE = "gpu-tainted-1"
REPORT_TASK = "TASK [gpuplatform.rke2.gpu_verify : Write the JSON, Markdown and HTML report"
# The two ways out an untolerated-taint error names (plugins/module_utils/node_check.py).
FIXES = ("add a toleration to the chart's daemonsets.tolerations", "gpu_node_isolated: true in the inventory")


def say(title):
    print("\n\033[1m==> %s\033[0m" % title, flush=True)


def playbook(lab, playbook_path, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
               PYTHONPATH=os.path.join(ROOT, ".build", "collections"))
    env.update(lab.env())
    env["PATH"] = os.path.join(ROOT, ".venv", "bin") + os.pathsep + env.get("PATH", "")
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", INVENTORY, playbook_path] + list(args)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
                          universal_newlines=True)
    return proc.returncode, proc.stdout


def recap(output):
    lines = output[output.rfind("PLAY RECAP"):].splitlines()
    return [line for line in lines[1:] if ":" in line and "ok=" in line]


def changed_total(output):
    return sum(int(m) for m in re.findall(r"changed=(\d+)", "\n".join(recap(output))))


def check_table(lab, node=None):
    args = {"fail_on_findings": False}
    if node:
        args["nodes"] = [node]
    return run_module("gpu_node_check", args, lab.kubeconfig)


def print_findings(result, node=None):
    for finding in result.get("findings", []):
        if node is None or finding["node"] == node:
            print("   %-7s %-18s %-20s %s" % (finding["severity"], finding["node"], finding["code"], finding["message"]))


def node_state(lab, name):
    node = lab.core().read_node(name)
    gpus = dict((k, v) for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/"))
    pods = lab.core().list_namespaced_pod("gpu-operator", field_selector="spec.nodeName=%s" % name).items
    # The operator's operands (the model's pod selectors), not NFD's worker, which runs on every node.
    operands = [om.operand_of_pod(p.metadata.labels) for p in pods if not p.metadata.deletion_timestamp]
    return {"schedulable": not node.spec.unschedulable, "advertised": gpus,
            "operand_pods": sorted(o.name for o in operands if o is not None)}


def story_isolation(lab):
    say("Story 2: one label takes %s out of the GPU layer, without cordoning it" % STORY_NODE)
    before = node_state(lab, STORY_NODE)
    print("   before: %d operand pods, advertised %s, schedulable %s" % (
        len(before["operand_pods"]), before["advertised"], before["schedulable"]))
    rc, out = playbook(lab, "playbooks/gpu_node_labels.yml", "-l", STORY_NODE, "-e", "gpu_node_isolated=true")
    if rc != 0:
        print(out)
        raise SystemExit("story 2: labelling failed")
    print("   gpu_node_labels set nvidia.com/gpu.deploy.operands=false on %s" % STORY_NODE)
    lab.wait_settled()
    after = node_state(lab, STORY_NODE)
    print("   after:  %d operand pods, advertised %s, schedulable %s" % (
        len(after["operand_pods"]), after["advertised"] or "nothing", after["schedulable"]))
    rc, out = playbook(lab, "playbooks/gpu_node_labels.yml", "-l", STORY_NODE)
    lab.wait_settled()
    restored = node_state(lab, STORY_NODE)
    print("   the inventory without the variable removes the label again: %d operand pods, advertised %s" % (
        len(restored["operand_pods"]), restored["advertised"]))


def story_toolkit(lab):
    say("Story 3: the device plugin runs without the container toolkit on %s" % STORY_NODE)
    lab.hold_down(STORY_NODE, "container-toolkit")
    lab.wait_settled()
    state = node_state(lab, STORY_NODE)
    print("   the node still advertises %s and no controller reports an error" % state["advertised"])
    result = check_table(lab, STORY_NODE)
    print("   gpu_node_check on %s:" % STORY_NODE)
    print_findings(result, STORY_NODE)
    lab.release(STORY_NODE)
    lab.wait_settled()
    errors = [f for f in check_table(lab, STORY_NODE)["findings"] if f["severity"] == "error"]
    print("   released: %s" % ("still failing" if errors else "ok"))


def story_pending(lab):
    say("Story 4: a request for a resource nobody advertises stays Pending everywhere")
    result = run_module("cuda_sample", {"resource": "nvidia.com/A100_SXM4_80GB", "timeout": 20,
                                        "name_prefix": "demo-wrong-resource"}, lab.kubeconfig)
    print("   cuda_sample asked for nvidia.com/A100_SXM4_80GB: %s" % ("failed" if result.get("failed") else "passed"))
    print("   " + "\n   ".join(result.get("msg", "").splitlines()[:4]))


def next_version(version):
    """The next chart version the collection knows after ``version`` (None at the newest)."""
    later = [v for v in ov.KNOWN_CHART_VERSIONS if ov.parse_chart_version(v) > ov.parse_chart_version(version)]
    return min(later, key=ov.parse_chart_version) if later else None


def running_chart(lab):
    chart = client.CustomObjectsApi(lab.api).get_namespaced_custom_object(
        "helm.cattle.io", "v1", "kube-system", "helmcharts", "gpu-operator")
    return chart["spec"].get("version"), chart["metadata"]["resourceVersion"]


def story_upgrade(lab):
    current = lab.operator_version()
    target = next_version(current)
    say("Story 5, day 2: an upgrade of the GPU Operator to %s, shown before anything changes" % (target or "-"))
    if target is None:
        print("   %s is the newest version the collection knows: nothing to upgrade to" % current)
        return
    if target not in lab.state().get("chart_versions", ()):
        print("   the lab's chart repository has no %s (its source is not at hand, so the lab serves %s only): "
              "left out" % (target, current))
        return
    before = running_chart(lab)
    command = 'make rke2/gpu/operator/upgrade SITE=lab OPERATOR_ARGS="--check -e gpu_operator_version=%s"' % target
    print("   " + command)
    rc, out = playbook(lab, "playbooks/gpu_operator.yml", "--check", "--diff", "-e", "gpu_operator_expect_upgrade=true",
                       "-e", "gpu_operator_version=%s" % target)
    if rc != 0:
        print(out[-6000:])
        raise SystemExit("story 5: the check-mode upgrade failed (rc %d)" % rc)
    shown = upgrade_lines(out)
    print("   " + "\n   ".join(shown or ["(the role showed no upgrade plan)"]))
    after = running_chart(lab)
    print("   check mode: the HelmChart is as it was (chart %s, resourceVersion %s); without --check the role "
          "delivers it and waits for the new operator, every operand DaemonSet rolled to the new images, "
          "allocatable GPUs and a CUDA sample (docs/upgrades.md)" % (after[0], "unchanged" if after == before
                                                                     else "CHANGED"))
    if after != before:
        raise SystemExit("story 5: check mode changed the HelmChart")


def upgrade_lines(output):
    """The role's "Show the change from the running release" message, one line each."""
    at = output.find("Show the change from the running release")
    if at < 0:
        return []
    block = output[at:output.find("TASK [", at + 1)]
    lines = [line.strip().rstrip(",") for line in block.splitlines()[1:]]
    return [line.strip('"') for line in lines if line.startswith('"') and not line.startswith('"msg"')]


def read_report():
    with open(os.path.join(ROOT, "artifacts", SITE, "gpu-verify.json")) as handle:
        return json.load(handle)


def print_report(report):
    print("   %s: %s" % ("PASSED" if report["passed"] else "FAILED", report["summary"]))
    for name, node in sorted(report["nodes"].items()):
        advertised = ", ".join("%s=%s" % kv for kv in sorted(node["advertised"].items())) or "-"
        driver = node.get("driver") or {}
        driver_text = "%s (%s)" % (driver.get("version") or "?", driver["source"]) if driver.get("source") else "-"
        print("   %-18s %-6s %-12s %-22s %-15s %-30s %s" % (
            name, node.get("architecture") or "-", node.get("gpu_model") or "-", driver_text,
            node["workload_config"], advertised, node["status"]))


def failed_task(output):
    """The header of the one task that failed in ``output``, or None when none or several did."""
    fatal = [m.start() for m in re.finditer(r"^fatal: \[", output, re.M)]
    if len(fatal) != 1:
        return None
    headers = re.findall(r"^TASK \[.*$", output[:fatal[0]], re.M)
    return headers[-1] if headers else None


def expected_failure(rc, out, report):
    """The first run fails at the report step, on the tainted node alone; anything else stops the demo."""
    failing = sorted(name for name, node in report["nodes"].items() if node["status"] == "failing")
    task = failed_task(out)
    if rc == 0 or report["passed"] or failing != [TAINTED_NODE] or not (task or "").startswith(REPORT_TASK):
        print(out[-6000:])
        raise SystemExit("site.yml on the lab: expected the verification to fail at the report step on %s alone "
                         "(rc %d, failing %s, failed task %s)" % (TAINTED_NODE, rc, failing or "none", task))


def taint_message():
    """The untolerated-taint line of the tainted node in the Markdown report."""
    with open(os.path.join(ROOT, "artifacts", SITE, "gpu-verify.md")) as handle:
        for line in handle:
            if line.startswith("- error %s `untolerated-taint`: " % TAINTED_NODE):
                return line.split(": ", 1)[1].strip()
    raise SystemExit("artifacts/%s/gpu-verify.md has no untolerated-taint error for %s" % (SITE, TAINTED_NODE))


def story_tainted(lab, report):
    say("Story 1: %s has a taint its operands do not tolerate: the verification fails on it" % TAINTED_NODE)
    node = report["nodes"][TAINTED_NODE]
    print("   %s: %s, first failed layer %s, running %s of %d expected operands" % (
        TAINTED_NODE, node["status"], node["first_failed_layer"], len(node["running_operands"]),
        len(node["expected_operands"])))
    message = taint_message()
    print("   artifacts/%s/gpu-verify.md: untolerated-taint: %s" % (SITE, message))
    missing = [fix for fix in FIXES if fix not in message]
    if missing:
        raise SystemExit("the untolerated-taint message does not name: %s" % "; ".join(missing))
    print("   it names both fixes: (1) %s, (2) %s" % FIXES)

    print("   fix (2): isolate it, as the inventory would with gpu_node_isolated: true for %s" % TAINTED_NODE)
    rc, out = playbook(lab, "playbooks/gpu_node_labels.yml", "-l", TAINTED_NODE, "-e", "gpu_node_isolated=true")
    if rc != 0:
        print(out)
        raise SystemExit("story 1: labelling failed")
    lab.wait_settled()
    rc, out = playbook(lab, "playbooks/gpu_verify.yml")
    report = read_report()
    if rc != 0 or not report["passed"]:
        print(out[-6000:])
        raise SystemExit("story 1: the verification still fails with %s isolated (rc %d)" % (TAINTED_NODE, rc))
    print("   gpu_node_labels set nvidia.com/gpu.deploy.operands=false on %s; step 6 again:" % TAINTED_NODE)
    print_report(report)

    # Undone: the inventory as it is, the node failing again, as the next make demo expects.
    rc, out = playbook(lab, "playbooks/gpu_node_labels.yml", "-l", TAINTED_NODE)
    if rc != 0:
        print(out)
        raise SystemExit("story 1: undoing the isolation failed")
    lab.wait_settled()
    errors = [f for f in check_table(lab, TAINTED_NODE)["findings"] if f["severity"] == "error"]
    print("   undone (the inventory without the variable): %s has %d error findings again" % (
        TAINTED_NODE, len(errors)))
    if not errors:
        raise SystemExit("story 1: %s does not fail again after the isolation was undone" % TAINTED_NODE)


def main():
    lab = Lab()
    say("Lab: real kube-apiserver, controller-manager, scheduler, etcd; kwok nodes; the GPU Operator")
    lab.up()
    print(lab.status())
    say(lab.describe_operator())

    say("site.yml, GPU steps 5 and 6 on inventories/lab (gate, node labels, GPU Operator, verification)")
    started = time.monotonic()
    rc, out = playbook(lab, "site.yml", "--tags", "gpu", "--skip-tags", "preflight")
    print("\n".join(recap(out)))
    print("   %.1f s, changed=%d in total" % (time.monotonic() - started, changed_total(out)))
    report_path = os.path.join(ROOT, "artifacts", SITE, "gpu-verify.json")
    if not os.path.exists(report_path):
        print(out[-6000:])
        raise SystemExit("site.yml failed on the lab before the report (rc %d)" % rc)
    report = read_report()
    expected_failure(rc, out, report)
    print("   failed at the report step, as expected: %s has no GPU operands and nothing says that is intended"
          % TAINTED_NODE)
    say("Verification report: artifacts/%s/gpu-verify.{json,md,html}" % SITE)
    print_report(report)

    story_tainted(lab, report)
    story_isolation(lab)
    story_toolkit(lab)
    story_pending(lab)
    story_upgrade(lab)
    say("Done, on GPU Operator %s (make demo GPU_OPERATOR_VERSION=v26.7.0 runs another line). The lab keeps "
        "running (make lab-status, make lab-down); a second make demo reports changed=0 and fails on %s the same "
        "way." % (lab.operator_version(), TAINTED_NODE))


if __name__ == "__main__":
    main()
