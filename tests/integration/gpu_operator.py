"""The GPU Operator step against the lab: the role run the way an operator runs it
(ansible-playbook in a subprocess, the collection from this checkout, the lab site's
inventory), what the default callback printed (recap counts, each task's outcome), and
what the cluster then holds (the HelmChart, the operands running on each node)."""

import os
import re
import subprocess
import sys

import yaml
from kubernetes import client

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
LAB_INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
HELMCHART = ("helm.cattle.io", "v1", "kube-system", "helmcharts", "gpu-operator")

_TASK = re.compile(r"^TASK \[(?:[\w.]+ : )?(.*?)\] \**$")
_OUTCOME = re.compile(r"^(ok|changed|skipping|fatal|failed): \[")


class PlaybookRun(object):
    def __init__(self, proc):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    @property
    def recap(self):
        """{ok, changed, failed, ...: int} of the play's one host."""
        lines = [l for l in self.stdout.splitlines() if l.startswith("localhost ") and "changed=" in l]
        assert lines, "no PLAY RECAP in the output:\n%s\n%s" % (self.stdout[-3000:], self.stderr[-2000:])
        return dict((key, int(value)) for key, value in (part.split("=") for part in lines[-1].split(":", 1)[1].split()))

    def outcomes(self, task):
        """The outcomes (ok, changed, skipping, fatal) the callback printed for the task
        named ``task`` (without its role prefix), in the order it ran."""
        found, current = [], None
        for line in self.stdout.splitlines():
            header = _TASK.match(line)
            if header:
                current = header.group(1)
                continue
            outcome = _OUTCOME.match(line)
            if outcome and current == task:
                found.append(outcome.group(1))
        return found

    def __str__(self):
        return "rc %s\n%s\n%s" % (self.returncode, self.stdout[-6000:], self.stderr[-2000:])


def run_playbook(playbook, kubeconfig, workdir, *args, inventory=LAB_INVENTORY, env=None):
    """Runs ``playbooks/<playbook>`` on ``inventory`` against the cluster of ``kubeconfig``;
    Ansible's home and temp files go to ``workdir``."""
    full_env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
                    PYTHONPATH=COLLECTIONS, K8S_AUTH_KUBECONFIG=kubeconfig, ANSIBLE_NOCOLOR="1",
                    ANSIBLE_HOME=os.path.join(workdir, "ansible-home"),
                    ANSIBLE_LOCAL_TEMP=os.path.join(workdir, "ansible-tmp"))
    full_env.update(env or {})
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory,
               os.path.join(ROOT, "playbooks", playbook)] + list(args)
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          env=full_env, cwd=ROOT, check=False)
    return PlaybookRun(proc)


def role_runner(lab, workdir):
    """A function that runs playbooks/gpu_operator.yml with extra arguments against ``lab``,
    the site folder under ``workdir`` (the checkout's sites/lab stays untouched); it knows
    where the site's manifest, its previous version and the image plan are."""
    site = os.path.join(str(workdir), "site")

    def run(*args):
        return run_playbook("gpu_operator.yml", lab.kubeconfig, str(workdir), "-e", "gpu_operator_site_dir=%s" % site,
                            *args)
    run.site = site
    run.manifest = os.path.join(site, "rke2", "gpu-operator.helmchart.yaml")
    run.previous = os.path.join(site, "rke2", "gpu-operator.helmchart.previous.yaml")
    run.images = os.path.join(site, "airgap", "images.txt")
    return run


def assert_applied(run):
    """The role ran through, and its own waits passed: the install Job, then every node's
    operands in order."""
    assert run.returncode == 0 and run.recap["failed"] == 0, str(run)
    assert run.outcomes("Wait for the HelmChart's install Job (a Failed condition is reported at once)") == ["ok"], \
        str(run)
    assert run.outcomes("Wait for the operator and its operands, node by node in order") == ["ok"], str(run)


def manifest_values(path):
    """The chart values of the HelmChart manifest the role wrote at ``path``."""
    with open(path) as handle:
        chart = [d for d in yaml.safe_load_all(handle) if d][0]
    return yaml.safe_load(chart["spec"]["valuesContent"])


def without_operator(lab):
    """The fleet with its workload labels, no GPU Operator and nothing the simulator still
    has to tear down."""
    lab.reset()
    lab.uninstall_operator()
    lab.wait_settled(installed=False)


def helmchart(lab):
    """The gpu-operator HelmChart as a dict, or None."""
    try:
        return client.CustomObjectsApi(lab.api).get_namespaced_custom_object(*HELMCHART)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        return None


def running_operands(lab, namespace="gpu-operator"):
    """{node: {operand}} of the operand pods that are Running and Ready, read from the cluster."""
    running = {}
    for pod in lab.core().list_namespaced_pod(namespace).items:
        operand = om.operand_of_pod(pod.metadata.labels)
        statuses = pod.status.container_statuses or []
        if operand and pod.status.phase == "Running" and statuses and all(s.ready for s in statuses) \
                and not pod.metadata.deletion_timestamp:
            running.setdefault(pod.spec.node_name, set()).add(operand.name)
    return running


def wait_mirror_enforced(lab, mirror):
    """Waits until the simulator caught up with the current HelmChart and every change made
    before (Lab.wait_settled), and checks it enforced ``mirror``; returns its summary."""
    summary = lab.wait_settled()
    assert summary.get("mirror") == mirror, summary.get("mirror")
    return summary
