"""Issue 7's acceptance on the lab: the gpu_node_labels role, run by ansible-playbook as an
operator would, labels the fleet through the lab's API server; the simulated GPU Operator
follows the labels (operand pods, advertised resources), the scheduler follows the
resources, and every refusal leaves the cluster as it was.

Each test starts from the fleet as the role finds it on a new site: the operator installed
with the suite's chart values and no label of the role on any node, so every GPU node runs
the chart's default workload (container)."""

import json
import os
import re
import subprocess
import threading
import uuid

import pytest
import yaml
from kubernetes import client, watch

from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_labels as nl
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from tests.integration.conftest import FLEET_VALUES
from tests.integration.kube import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
ANSIBLE_PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")
PLAYBOOK = os.path.join(ROOT, "playbooks", "gpu_node_labels.yml")
LAB_INVENTORY = os.path.join(ROOT, "inventories", "lab", "hosts.yml")
NS = om.DEFAULT_NAMESPACE
# Pods this suite creates carry this label, so a failed test's leftovers are found and removed.
TEST_POD_LABEL = ("gpuplatform.rke2/test", "gpu-node-labels-lab")
# A hang guard for waits on the cluster, not a measure of speed: the lab shares two cores.
WAIT_S = 600

# The GPU nodes the operand DaemonSets reach (gpu-tainted-1 carries a taint they do not tolerate).
GPU_NODES = ("gpu-container-1", "gpu-container-2", "gpu-passthrough-1", "gpu-vgpu-1", "gpu-spark-1")
# gpu-spark-1 (arm64, 1 x GB10) brings its own driver: no driver pod runs there, labelled or not
# (unlabelled, k8s-driver-manager marks it pre-installed; the inventory sets deploy.driver=false).
HOST_DRIVER_NODES = ("gpu-spark-1",)
GPUS = {"gpu-spark-1": 1}
UNLABELLED = dict((node, (om.CONTAINER, {"nvidia.com/gpu": GPUS.get(node, 2)})) for node in GPU_NODES)
# What the lab inventory makes of them: 2 x A10 each; A10-12Q gives 24 GB / 12 GB = 2 vGPUs per card.
LABELLED = {
    "gpu-container-1": (om.CONTAINER, {"nvidia.com/gpu": 2}),
    "gpu-container-2": (om.CONTAINER, {"nvidia.com/gpu": 2}),
    "gpu-passthrough-1": (om.VM_PASSTHROUGH, {"nvidia.com/GA102GL_A10": 2}),
    "gpu-vgpu-1": (om.VM_VGPU, {"nvidia.com/NVIDIA_A10-12Q": 4}),
    "gpu-spark-1": (om.CONTAINER, {"nvidia.com/gpu": 1}),
}
# In place of a workload config: a node out of the GPU layer, where no operand runs.
ISOLATED = None


# ---------------------------------------------------------------- the role, as an operator runs it

def write_inventory(tmp_path, hosts=None, site_vars=None):
    """The lab inventory with per-host changes (``{host: {var: value}}``, None removes the
    variable) and site variables merged into ``all.vars`` one level deep; the role's site
    folder points into ``tmp_path`` so the checkout stays clean."""
    with open(LAB_INVENTORY) as handle:
        inventory = yaml.safe_load(handle)
    gpu_hosts = inventory["all"]["children"]["gpu_nodes"]["hosts"]
    for host, changes in (hosts or {}).items():
        for key, value in changes.items():
            if value is None:
                gpu_hosts[host].pop(key, None)
            else:
                gpu_hosts[host][key] = value
    site = inventory["all"]["vars"]
    for key, value in (site_vars or {}).items():
        if isinstance(value, dict) and isinstance(site.get(key), dict):
            site[key] = dict(site[key], **value)
        else:
            site[key] = value
    site["gpu_node_labels_site_dir"] = str(tmp_path / "site")
    path = tmp_path / ("hosts-%s.yml" % uuid.uuid4().hex[:6])
    path.write_text(yaml.safe_dump(inventory, default_flow_style=False))
    return str(path)


def gpu_hosts():
    """The lab inventory's gpu_nodes hosts (the play's hosts)."""
    with open(LAB_INVENTORY) as handle:
        return list(yaml.safe_load(handle)["all"]["children"]["gpu_nodes"]["hosts"])


class Run(object):
    RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)

    def __init__(self, rc, output):
        self.rc = rc
        self.output = output

    def recap(self):
        """{host: {"ok", "changed", "unreachable", "failed"}} from the PLAY RECAP."""
        return dict((m.group(1), dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups()[1:]))))
                    for m in self.RECAP.finditer(self.output))

    def statuses(self, task):
        """The per-host status words (ok, changed, skipping, fatal) the run printed for ``task``."""
        block = self.output.split("TASK [%s] *" % task, 1)[1].split("\nTASK [", 1)[0].split("\nPLAY RECAP", 1)[0]
        return re.findall(r"^(ok|changed|skipping|fatal): \[", block, re.M)

    def unwrapped(self):
        """The output with every run of white space as one blank (the display wraps warnings
        at the terminal width)."""
        return " ".join(self.output.split())

    def failure(self):
        """(task name, result) of the task that failed."""
        marker = self.output.index("FAILED! => ")
        task = re.findall(r"^TASK \[(.*?)\] \*", self.output[:marker], re.M)[-1]
        result = json.JSONDecoder().raw_decode(self.output[marker + len("FAILED! => "):])[0]
        return task, result

    def __repr__(self):
        return "ansible-playbook rc=%s\n%s" % (self.rc, self.output[-6000:])


def run_role(lab, inventory, *args):
    """playbooks/gpu_node_labels.yml on ``inventory`` against ``lab``; Ansible's home and temp
    files go next to the inventory."""
    workdir = os.path.dirname(inventory)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    env.update(ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
               PYTHONPATH=COLLECTIONS, K8S_AUTH_KUBECONFIG=lab.kubeconfig, ANSIBLE_NOCOLOR="1",
               ANSIBLE_HOME=os.path.join(workdir, "ansible-home"), ANSIBLE_LOCAL_TEMP=os.path.join(workdir, "ansible-tmp"),
               # One JSON document per result: messages are not folded as the YAML format folds them.
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", inventory, PLAYBOOK] + list(args), cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    return Run(proc.returncode, proc.stdout)


# ---------------------------------------------------------------- what the cluster shows

def expected_operands(config):
    """The operands a node of ``config`` runs under the suite's chart values: that config's
    chain, minus operands the values disable and those needing a capability (MIG, CC) the
    lab's A10s lack."""
    policy = om.policy_from_spec(FLEET_VALUES)
    return set(name for name in om.chain_for_workload(config)
               if om.operand_state_on_node(om.operand(name), {}, policy, config) == "expected")


def _running_ready(pod):
    return (pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
            and bool(pod.status.container_statuses) and all(s.ready for s in pod.status.container_statuses))


def operand_pods(pods, node):
    """[(operand, running and ready)] of the operand pods bound to ``node``."""
    result = []
    for pod in pods.values():
        operand = om.operand_of_pod(pod.metadata.labels)
        if operand and pod.spec.node_name == node:
            result.append((operand.name, _running_ready(pod)))
    return result


def wait_for_fleet(lab, want):
    """Waits until every node of ``want`` ({node: (workload config or ISOLATED, resources)})
    runs exactly that config's operands, all Running and Ready, none leaving, and advertises
    exactly those GPU resources; returns (pods, nodes)."""
    core = lab.core()

    def operands_as_wanted(pods):
        for node, (config, _resources) in want.items():
            found = operand_pods(pods, node)
            wanted = expected_operands(config) if config is not ISOLATED else set()
            if node in HOST_DRIVER_NODES:
                wanted.discard("driver")
            if set(f[0] for f in found) != wanted or len(found) != len(wanted) or not all(f[1] for f in found):
                return False
        return True

    def resources_as_wanted(nodes):
        return all(om.gpu_resources(nodes[node].status.allocatable) == resources
                   for node, (_config, resources) in want.items())

    pods = wait_for(core.list_namespaced_pod, operands_as_wanted, timeout=WAIT_S, namespace=NS)
    nodes = wait_for(core.list_node, resources_as_wanted, timeout=WAIT_S)
    return pods, nodes


class Snapshot(dict):
    """The nodes as listed, plus every node write from that list on, recorded by a watch
    opened at once. Reading the writes afterwards from an object's own resourceVersion fails
    with 410 Gone when that version has left the API server's watch cache (a node untouched
    for long, a slow run on a loaded machine); a watch from the list's fresh version does not."""

    def __init__(self, lab):
        core = lab.core()
        listed = core.list_node()
        super().__init__((n.metadata.name, n) for n in listed.items)
        self.writes = []
        self.error = None
        self._seen = threading.Condition()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._record, args=(core, listed.metadata.resource_version),
                                        daemon=True)
        self._thread.start()

    def _record(self, core, since):
        try:
            for event in self._watch.stream(core.list_node, resource_version=since, timeout_seconds=WAIT_S):
                with self._seen:
                    self.writes.append(event["object"])
                    self._seen.notify_all()
        # A broken watch fails versions(), below, instead of a warning from a dying thread.
        except Exception as error:  # pylint: disable=broad-except
            with self._seen:
                self.error = self.error or error
                self._seen.notify_all()

    def versions(self, name, until):
        """Every version of node ``name`` written since the list, up to resourceVersion ``until``."""
        def reached():
            return any(v.metadata.name == name and v.metadata.resource_version == until for v in self.writes)
        with self._seen:
            self._seen.wait_for(lambda: reached() or self.error, timeout=WAIT_S)
            assert reached(), (name, until, self.error)
            versions = [v for v in self.writes if v.metadata.name == name]
        return versions[:[v.metadata.resource_version for v in versions].index(until) + 1]

    def close(self):
        """The watch ends at its next event, or with the lab (the error is kept, not raised)."""
        self._watch.stop()


def snapshot(lab):
    return Snapshot(lab)


def assert_untouched(lab, before):
    """No node's labels, annotations or spec changed since ``before`` and none was written
    since, except by kwok's kubelet heartbeat (every 10 to 20 minutes, status only): each
    write in between is read back from the watch and shown to be status only."""
    core = lab.core()
    try:
        for name, old in sorted(before.items()):
            new = core.read_node(name)
            assert new.metadata.labels == old.metadata.labels, name
            assert new.metadata.annotations == old.metadata.annotations, name
            assert new.spec == old.spec, name
            if new.metadata.resource_version == old.metadata.resource_version:
                continue
            for version in before.versions(name, new.metadata.resource_version):
                assert (version.metadata.labels, version.metadata.annotations, version.spec) == (
                    old.metadata.labels, old.metadata.annotations, old.spec), (name, version.metadata.resource_version)
    finally:
        before.close()


def labels_of(node):
    return dict((k, v) for k, v in (node.metadata.labels or {}).items()
                if k in (om.WORKLOAD_CONFIG_LABEL, om.VGPU_CONFIG_LABEL, om.OPERANDS_LABEL))


def _pod_body(resources, node=None):
    name = "gpu-labels-" + uuid.uuid4().hex[:8]
    spec = {"containers": [{"name": "main", "image": "registry.lab.invalid/workload:1",
                            "resources": {"limits": resources}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "labels": dict([TEST_POD_LABEL])}}


def create_pods(lab, *bodies):
    core = lab.core()
    for body in bodies:
        core.create_namespaced_pod("default", body)
    names = [b["metadata"]["name"] for b in bodies]

    def placed(objects):
        # Bound to a node and running there, or refused by the scheduler.
        for name in names:
            pod = objects.get(name)
            if pod is None:
                return False
            if pod.spec.node_name:
                if pod.status.phase != "Running":
                    return False
            elif not any(c.type == "PodScheduled" and c.reason == "Unschedulable"
                         for c in (pod.status.conditions or [])):
                return False
        return True
    return wait_for(core.list_namespaced_pod, placed, timeout=WAIT_S, namespace="default")


def remove_test_pods(lab):
    core = lab.core()
    selector = "%s=%s" % TEST_POD_LABEL
    for pod in core.list_namespaced_pod("default", label_selector=selector).items:
        try:
            core.delete_namespaced_pod(pod.metadata.name, "default", grace_period_seconds=0)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    wait_for(core.list_namespaced_pod, lambda o: not o, timeout=WAIT_S, namespace="default", label_selector=selector)


# ---------------------------------------------------------------- fixtures

@pytest.fixture
def unlabelled(lab):
    """The fleet with the operator installed and nothing of the role's on any node: the labels
    its ownership annotation lists, the annotation, a drain cordon it left; and the fleet's
    workload labels other suites' fixtures put on."""
    remove_test_pods(lab)
    core = lab.core()
    for node in core.list_node().items:
        annotations = node.metadata.annotations or {}
        owned = json.loads(annotations.get(nl.OWNED_LABELS_ANNOTATION) or "[]")
        labels = dict((key, None) for key in node.metadata.labels or {}
                      if key in owned or key in (om.WORKLOAD_CONFIG_LABEL, om.VGPU_CONFIG_LABEL))
        forget = {nl.OWNED_LABELS_ANNOTATION: None, nl.CORDONED_ANNOTATION: None}
        patch = {"metadata": {"labels": labels, "annotations": forget}}
        if nl.CORDONED_ANNOTATION in annotations:
            patch["spec"] = {"unschedulable": None}
        if labels or nl.OWNED_LABELS_ANNOTATION in annotations or nl.CORDONED_ANNOTATION in annotations:
            core.patch_node(node.metadata.name, patch)
    lab.install_operator(FLEET_VALUES)
    wait_for_fleet(lab, UNLABELLED)
    lab.wait_settled(timeout=WAIT_S)
    yield lab
    remove_test_pods(lab)


@pytest.fixture
def labelled(unlabelled, tmp_path):
    """The fleet after one run of the role with the lab inventory, once the operator followed."""
    inventory = write_inventory(tmp_path)
    first = run_role(unlabelled, inventory)
    assert first.rc == 0, first
    wait_for_fleet(unlabelled, LABELLED)
    return {"lab": unlabelled, "inventory": inventory}


# ---------------------------------------------------------------- three workload types

def test_role_labels_three_workload_types_and_the_operator_follows(unlabelled, tmp_path):
    inventory = write_inventory(tmp_path)
    result = run_role(unlabelled, inventory)
    assert result.rc == 0, result
    # The operator runs each type's operands on each node, and no other, and each node
    # advertises its type's resource, and no other.
    nodes = wait_for_fleet(unlabelled, LABELLED)[1]
    for node, (config, _resources) in LABELLED.items():
        want = {om.WORKLOAD_CONFIG_LABEL: config}
        if config == om.VM_VGPU:
            want[om.VGPU_CONFIG_LABEL] = "A10-12Q"
        assert labels_of(nodes[node]) == want, node
        owned = sorted(list(want) + ([om.deploy_label("driver")] if node in HOST_DRIVER_NODES else []))
        assert json.loads(nodes[node].metadata.annotations[nl.OWNED_LABELS_ANNOTATION]) == owned, node
        if node in HOST_DRIVER_NODES:
            assert nodes[node].metadata.labels[om.deploy_label("driver")] == om.DEPLOY_FALSE, node
        assert not nodes[node].spec.unschedulable, node
    # The acceptance names these operands; the model's chains and the values must agree with it.
    assert expected_operands(om.VM_PASSTHROUGH) == {"vfio-manager", "sandbox-validator", "sandbox-device-plugin"}
    assert expected_operands(om.VM_VGPU) == {"vgpu-manager", "vgpu-device-manager", "sandbox-validator",
                                             "sandbox-device-plugin"}
    assert {"driver", "container-toolkit", "device-plugin"} <= expected_operands(om.CONTAINER)
    # The tainted GPU node is labelled like any other; its operands cannot come.
    tainted = unlabelled.core().read_node("gpu-tainted-1")
    assert labels_of(tainted) == {om.WORKLOAD_CONFIG_LABEL: om.CONTAINER}
    # KubeVirt is not installed in the lab: the devices are rendered to the site folder.
    kubevirt = str(tmp_path / "site" / "kubevirt")
    assert sorted(os.listdir(kubevirt)) == ["gpu-example-ga102gl-a10.yaml", "gpu-example-nvidia-a10-12q.yaml",
                                            "permitted-host-devices.yaml"]
    with open(os.path.join(kubevirt, "permitted-host-devices.yaml")) as handle:
        devices = yaml.safe_load(handle)["spec"]["configuration"]["permittedHostDevices"]
    assert devices == {
        "pciHostDevices": [{"pciVendorSelector": "10DE:2236", "resourceName": "nvidia.com/GA102GL_A10",
                            "externalResourceProvider": True}],
        "mediatedDevices": [{"mdevNameSelector": "NVIDIA A10-12Q", "resourceName": "nvidia.com/NVIDIA_A10-12Q",
                             "externalResourceProvider": True}],
    }


def test_each_workload_lands_on_its_own_node_and_another_types_request_stays_pending(labelled):
    lab = labelled["lab"]
    own = dict((resource, config) for config, resources in LABELLED.values() for resource in resources)
    nodes_of = dict((config, set(n for n, (c, _resources) in LABELLED.items() if c == config)) for config in own.values())
    anywhere = dict((resource, _pod_body({resource: "1"})) for resource in own)
    # Each type's resource pinned to a node of the next type.
    crossed = {
        "nvidia.com/gpu": "gpu-passthrough-1",
        "nvidia.com/GA102GL_A10": "gpu-vgpu-1",
        "nvidia.com/NVIDIA_A10-12Q": "gpu-container-1",
    }
    assert set(crossed) == set(own)
    pinned = dict((resource, _pod_body({resource: "1"}, node)) for resource, node in crossed.items())
    pods = create_pods(lab, *(list(anywhere.values()) + list(pinned.values())))
    for resource, body in anywhere.items():
        pod = pods[body["metadata"]["name"]]
        assert pod.spec.node_name in nodes_of[own[resource]], (resource, pod.spec.node_name)
        assert pod.status.phase == "Running", resource
    for resource, body in pinned.items():
        pod = pods[body["metadata"]["name"]]
        assert pod.spec.node_name is None and pod.status.phase == "Pending", resource
        condition = [c for c in pod.status.conditions if c.type == "PodScheduled"][0]
        assert condition.reason == "Unschedulable", resource
        assert "Insufficient %s" % resource in condition.message, (resource, condition.message)


def test_second_run_reports_no_change_and_writes_nothing(labelled):
    lab = labelled["lab"]
    lab.wait_settled(timeout=WAIT_S)
    before = snapshot(lab)
    second = run_role(lab, labelled["inventory"])
    assert second.rc == 0, second
    recap = second.recap()
    assert sorted(recap) == sorted(gpu_hosts())
    assert all(counts["changed"] == 0 and counts["failed"] == 0 for counts in recap.values()), recap
    assert_untouched(lab, before)


# ---------------------------------------------------------------- isolation

def test_isolating_a_node_removes_its_operands_and_gpus_and_keeps_it_schedulable(labelled, tmp_path):
    lab = labelled["lab"]
    taints = lab.core().read_node("gpu-container-2").spec.taints
    isolated = write_inventory(tmp_path, {"gpu-container-2": {"gpu_node_isolated": True}})
    result = run_role(lab, isolated)
    assert result.rc == 0, result
    want = dict(LABELLED, **{"gpu-container-2": (ISOLATED, {})})
    nodes = wait_for_fleet(lab, want)[1]
    node = nodes["gpu-container-2"]
    assert labels_of(node) == {om.WORKLOAD_CONFIG_LABEL: om.CONTAINER, om.OPERANDS_LABEL: om.DEPLOY_FALSE}
    # Out of the GPU layer, not cordoned: no unschedulable flag, no taint of ours.
    assert not node.spec.unschedulable
    assert node.spec.taints == taints
    plain = _pod_body({}, "gpu-container-2")
    pods = create_pods(lab, plain)
    assert pods[plain["metadata"]["name"]].spec.node_name == "gpu-container-2"
    assert pods[plain["metadata"]["name"]].status.phase == "Running"

    # Dropping the variable removes the label it set: the node rejoins the GPU layer.
    result = run_role(lab, labelled["inventory"])
    assert result.rc == 0, result
    nodes = wait_for_fleet(lab, LABELLED)[1]
    assert om.OPERANDS_LABEL not in nodes["gpu-container-2"].metadata.labels


# ---------------------------------------------------------------- an operand off, then on again

def test_dropping_an_operand_from_gpu_operands_disabled_sets_its_label_true_and_it_returns(labelled, tmp_path):
    lab = labelled["lab"]
    node, operand = "gpu-container-2", "dcgm-exporter"
    label = om.deploy_label(operand)
    off = run_role(lab, write_inventory(tmp_path, {node: {"gpu_operands_disabled": [operand]}}))
    assert off.rc == 0, off

    def operand_gone(pods):
        found = operand_pods(pods, node)
        return (set(f[0] for f in found) == expected_operands(om.CONTAINER) - {operand}
                and all(f[1] for f in found))
    wait_for(lab.core().list_namespaced_pod, operand_gone, timeout=WAIT_S, namespace=NS)
    switched_off = lab.core().read_node(node)
    assert switched_off.metadata.labels[label] == om.DEPLOY_FALSE
    assert label in json.loads(switched_off.metadata.annotations[nl.OWNED_LABELS_ANNOTATION])

    # Back to the lab inventory: the label is set to true, not removed. The operator does not
    # reconcile a node whose deploy label goes, so an absent label would leave it off.
    on = run_role(lab, labelled["inventory"])
    assert on.rc == 0, on
    # The role runs once for all nodes: its changes count on the play's first host.
    assert sum(counts["changed"] for counts in on.recap().values()) > 0, on
    nodes = wait_for_fleet(lab, LABELLED)[1]
    assert nodes[node].metadata.labels[label] == om.DEPLOY_TRUE
    # true is the operator's own value: the role no longer owns the label.
    assert label not in json.loads(nodes[node].metadata.annotations[nl.OWNED_LABELS_ANNOTATION])
    assert (operand, True) in operand_pods(wait_for_fleet(lab, LABELLED)[0], node)

    lab.wait_settled(timeout=WAIT_S)
    before = snapshot(lab)
    again = run_role(lab, labelled["inventory"])
    assert again.rc == 0, again
    assert all(counts["changed"] == 0 and counts["failed"] == 0 for counts in again.recap().values()), again
    assert_untouched(lab, before)


# ---------------------------------------------------------------- check mode

def test_check_diff_lists_label_changes_per_node_and_changes_nothing(unlabelled, tmp_path):
    lab = unlabelled
    inventory = write_inventory(tmp_path, {"gpu-container-2": {"gpu_operands_disabled": ["dcgm-exporter"]}})
    before = snapshot(lab)
    result = run_role(lab, inventory, "--check", "--diff")
    assert result.rc == 0, result
    blocks = dict((m.group(1), m.group(2)) for m in re.finditer(
        r"^--- before: node/(\S+) labels\n\+\+\+ after: node/\1 labels\n(.*?)(?=\n\n|\n--- |\Z)",
        result.output, re.M | re.S))
    assert sorted(blocks) == sorted(gpu_hosts()), result
    for node, (config, _resources) in LABELLED.items():
        assert "+%s=%s" % (om.WORKLOAD_CONFIG_LABEL, config) in blocks[node].splitlines(), blocks[node]
    assert "+%s=A10-12Q" % om.VGPU_CONFIG_LABEL in blocks["gpu-vgpu-1"].splitlines()
    # The operator's own value is shown going away.
    disabled = om.deploy_label("dcgm-exporter")
    assert "-%s=true" % disabled in blocks["gpu-container-2"].splitlines()
    assert "+%s=false" % disabled in blocks["gpu-container-2"].splitlines()
    assert result.recap()["gpu-container-1"]["changed"] > 0
    assert_untouched(lab, before)
    assert not os.path.exists(str(tmp_path / "site" / "kubevirt"))


# ---------------------------------------------------------------- refusals

REFUSALS = {
    "unknown-workload": (
        {"hosts": {"gpu-container-1": {"gpu_workload_config": "vm-gpu"}}},
        "host gpu-container-1: gpu_workload_config 'vm-gpu' is not a workload config "
        "(one of: container, vm-passthrough, vm-vgpu)"),
    "unknown-operand": (
        {"hosts": {"gpu-container-1": {"gpu_operands_disabled": ["dcgm-exportr"]}}},
        "host gpu-container-1: gpu_operands_disabled lists 'dcgm-exportr', which is not an operand (known: "),
    "vm-while-sandbox-off": (
        {"site_vars": {"gpu_operator_sandbox_workloads": {"enabled": False}}},
        "host gpu-passthrough-1: gpu_workload_config 'vm-passthrough' while sandbox workloads are off in the "
        "site's chart values (sandboxWorkloads.enabled: false)"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_inventory_refusal_names_the_value_and_changes_nothing(unlabelled, tmp_path, case):
    edits, message = REFUSALS[case]
    inventory = write_inventory(tmp_path, **edits)
    before = snapshot(unlabelled)
    result = run_role(unlabelled, inventory)
    assert result.rc != 0, result
    task, failed = result.failure()
    assert task == "gpuplatform.rke2.gpu_node_labels : Check workload configs, operand names, vGPU profiles and " \
                   "sandbox workloads", result
    assert message in failed["msg"], failed["msg"]
    if case == "vm-while-sandbox-off":
        assert "host gpu-vgpu-1: gpu_workload_config 'vm-vgpu' while sandbox workloads are off" in failed["msg"]
    assert_untouched(unlabelled, before)
    assert not os.path.exists(str(tmp_path / "site"))


def _gpu_pod_on(lab, node):
    body = _pod_body({om.CONTAINER_RESOURCE: "1"}, node)
    pod = create_pods(lab, body)[body["metadata"]["name"]]
    assert pod.spec.node_name == node and pod.status.phase == "Running"
    return pod


def test_workload_switch_under_a_gpu_pod_is_refused_then_drained(unlabelled, tmp_path):
    lab = unlabelled
    pod = _gpu_pod_on(lab, "gpu-container-1")
    switch = {"gpu-container-1": {"gpu_workload_config": om.VM_PASSTHROUGH}}
    before = snapshot(lab)
    refused = run_role(lab, write_inventory(tmp_path, switch))
    assert refused.rc != 0, refused
    task, failed = refused.failure()
    assert task == "gpuplatform.rke2.gpu_node_labels : Plan the label changes and guard workload switches"
    assert ("host gpu-container-1: switching the workload config from container to vm-passthrough is refused "
            "while GPU workloads run there (the driver changes under them): pod default/%s using nvidia.com/gpu"
            % pod.metadata.name) in failed["msg"], failed["msg"]
    # One refused node stops the run before any node is labelled.
    assert_untouched(lab, before)
    assert lab.core().read_namespaced_pod(pod.metadata.name, "default").metadata.uid == pod.metadata.uid

    drained = run_role(lab, write_inventory(tmp_path, switch, {"gpu_node_labels_drain": True}))
    assert drained.rc == 0, drained
    assert drained.statuses("gpuplatform.rke2.gpu_node_labels : Cordon the nodes that switch, evict their GPU pods "
                            "and VMs, wait for them to go") == ["changed"], drained
    remaining = lab.core().list_namespaced_pod("default", field_selector="metadata.name=" + pod.metadata.name)
    assert [p.metadata.uid for p in remaining.items] == []
    want = dict(LABELLED, **{"gpu-container-1": (om.VM_PASSTHROUGH, {"nvidia.com/GA102GL_A10": 2})})
    nodes = wait_for_fleet(lab, want)[1]
    node = nodes["gpu-container-1"]
    assert node.metadata.labels[om.WORKLOAD_CONFIG_LABEL] == om.VM_PASSTHROUGH
    # The drain's cordon is lifted with the switch.
    assert not node.spec.unschedulable
    assert nl.CORDONED_ANNOTATION not in (node.metadata.annotations or {})


def test_workload_switch_under_a_gpu_pod_goes_ahead_with_force(unlabelled, tmp_path):
    lab = unlabelled
    pod = _gpu_pod_on(lab, "gpu-container-1")
    forced = run_role(lab, write_inventory(tmp_path, {"gpu-container-1": {"gpu_workload_config": om.VM_PASSTHROUGH}},
                                           {"gpu_node_labels_force": True}))
    assert forced.rc == 0, forced
    node = lab.core().read_node("gpu-container-1")
    assert node.metadata.labels[om.WORKLOAD_CONFIG_LABEL] == om.VM_PASSTHROUGH
    assert not node.spec.unschedulable
    # Force switches under the pod; it is not evicted.
    assert lab.core().read_namespaced_pod(pod.metadata.name, "default").metadata.uid == pod.metadata.uid


def test_vm_workload_while_sandbox_off_is_only_a_warning_when_told_so(unlabelled, tmp_path):
    lab = unlabelled
    inventory = write_inventory(tmp_path, site_vars={"gpu_operator_sandbox_workloads": {"enabled": False},
                                                     "gpu_node_labels_sandbox_off_action": "warn"})
    result = run_role(lab, inventory)
    assert result.rc == 0, result
    for host, config in (("gpu-passthrough-1", om.VM_PASSTHROUGH), ("gpu-vgpu-1", om.VM_VGPU)):
        assert ("[WARNING]: host %s: gpu_workload_config '%s' while sandbox workloads are off in the site's chart "
                "values" % (host, config)) in result.unwrapped(), result
    node = lab.core().read_node("gpu-passthrough-1")
    assert node.metadata.labels[om.WORKLOAD_CONFIG_LABEL] == om.VM_PASSTHROUGH
