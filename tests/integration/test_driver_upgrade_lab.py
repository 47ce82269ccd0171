"""gpu_driver_upgrade_wait against the real GPU Operator's driver upgrade controller (v26.3.2,
k8s-operator-libs pkg/upgrade): the driver version changed in the chart values, the controller
takes the driver nodes through its states one at a time (maxParallelUpgrades 1), evicts a GPU
workload through the Eviction API, restarts each driver pod, and the module follows it to the
end. A background watch of the nodes records every state label transition, independently of the
module, to check the parallel limit; a watch of the workload's pods records how it left."""

import threading
import time

import pytest
from kubernetes import client, watch

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness as rd
from ansible_collections.gpuplatform.rke2.plugins.module_utils.gpu import driver_upgrade as du
from tests.integration.conftest import FLEET_VALUES
from tests.integration.kube import wait_for
from tests.integration.modules import run_module

NS = om.DEFAULT_NAMESPACE
LABEL = om.DRIVER_UPGRADE_STATE_LABEL
OLD, NEW = "580.105.08", "580.126.20"
# The containerized driver with the controller on (the chart's defaults, spelled out): sandbox
# workloads off, since the controller does not run with them (upgrade_controller.go Reconcile).
VALUES = {"sandboxWorkloads": {"enabled": False},
          "driver": {"enabled": True, "version": OLD,
                     "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1}}}
WORKLOAD = "gpu-trainer"
WORKLOAD_NS = "default"
# The module's own deadline: the controller requeues every 2 minutes (plannedRequeueInterval),
# which is what moves a node on once its new driver pod is up.
TIMEOUT = 1500


def _values(version):
    values = dict(VALUES)
    values["driver"] = dict(VALUES["driver"], version=version)
    return values


class Recorder(object):
    """Every event of one watch, in order, from a background thread, until stopped. A watch
    connection that ends or breaks is resumed from the last resourceVersion seen, as
    client-go's reflector does, so no event is lost; one the server can no longer resume
    from (410 Gone) leaves a gap in the record, and ``stop`` raises then."""

    def __init__(self, list_fn, **kwargs):
        self.events = []
        self.stopped = False
        self.gap = None
        self.resumed = 0
        self._watch = watch.Watch()
        listed = list_fn(**kwargs)
        self.initial = list(listed.items)
        self._thread = threading.Thread(target=self._run, args=(list_fn, listed.metadata.resource_version, kwargs),
                                        daemon=True)
        self._thread.start()

    def _run(self, list_fn, version, kwargs):
        while not self.stopped:
            try:
                for event in self._watch.stream(list_fn, resource_version=version, **kwargs):
                    if event["type"] == "ERROR":
                        self.gap = "ERROR event: %s" % (event.get("raw_object") or event.get("object"))
                        return
                    version = event["object"].metadata.resource_version
                    self.events.append((event["type"], event["object"]))
            except client.ApiException as exc:
                self.gap = "watch refused: %s %s" % (exc.status, exc.reason)
                return
            except Exception:  # pylint: disable=broad-except  # a broken connection: resume it
                time.sleep(0.2)
            self.resumed += 1

    def stop(self):
        """Stops recording (the thread ends at its next event or when the lab goes down)."""
        self.stopped = True
        self._watch.stop()
        if self.gap:
            raise AssertionError("the record has a gap: %s" % self.gap)


def _node_dict(obj):
    return {"metadata": {"name": obj.metadata.name, "labels": obj.metadata.labels or {},
                         "annotations": obj.metadata.annotations or {}}}


def _transitions(recorder):
    """({node: [states in order]}, the most nodes in progress at once, those nodes) from the
    node watch, as the controller counts a slot (driver_upgrade.in_progress)."""
    current = dict((n.metadata.name, _node_dict(n)) for n in recorder.initial)
    states = dict((name, [du.upgrade_state(obj) or None]) for name, obj in current.items())
    peak, peak_nodes = 0, []
    for kind, obj in recorder.events:
        if kind not in ("ADDED", "MODIFIED"):
            continue
        node = _node_dict(obj)
        current[obj.metadata.name] = node
        seen = states.setdefault(obj.metadata.name, [])
        state = du.upgrade_state(node) or None
        if not seen or seen[-1] != state:
            seen.append(state)
        progressing = sorted(n for n, o in current.items() if du.in_progress(o))
        if len(progressing) > peak:
            peak, peak_nodes = len(progressing), progressing
    return states, peak, peak_nodes


def _driver_pods(lab):
    key, value = om.operand("driver").pod_selector
    return lab.core().list_namespaced_pod(NS, label_selector="%s=%s" % (key, value)).items


def _workload(node_name):
    """A Deployment of one pod that asks for a GPU on ``node_name``: the controller evicts it
    (pod-deletion-required) and its ReplicaSet makes it again."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": WORKLOAD, "namespace": WORKLOAD_NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": WORKLOAD}},
                     "template": {"metadata": {"labels": {"app": WORKLOAD}},
                                  "spec": {"nodeSelector": {"kubernetes.io/hostname": node_name},
                                           "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
                                           "containers": [{"name": "train", "image": "registry.lab.invalid/train:1",
                                                           "resources": {"limits": {om.CONTAINER_RESOURCE: "1"}}}]}}}}


def _workload_running(objects):
    return any(p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in objects.values())


@pytest.fixture
def upgrade_lab(real_operator):
    """The fleet with the containerized driver at OLD and the upgrade controller on, settled,
    and every driver node labelled upgrade-done by the controller."""
    lab = real_operator
    lab.reset(_values(OLD))
    apps = client.AppsV1Api(lab.api)
    try:
        yield lab
    finally:
        try:
            apps.delete_namespaced_deployment(WORKLOAD, WORKLOAD_NS)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        lab.reset(FLEET_VALUES)


def test_the_driver_upgrade_is_followed_node_by_node_to_the_end(upgrade_lab):
    lab = upgrade_lab
    kubeconfig = lab.kubeconfig
    # Before the change: the controller labels every driver node upgrade-done. It does not watch pods: the driver
    # pods that came after its first pass are seen at its next planned pass (every 2 minutes).
    with_driver = sorted(set(p.spec.node_name for p in _driver_pods(lab) if p.spec.node_name))
    wait_for(lab.core().list_node, lambda o: all((o[n].metadata.labels or {}).get(LABEL) == om.UPGRADE_DONE
                                                 for n in with_driver), timeout=300)
    before = run_module("gpu_driver_upgrade_wait", {"timeout": 300, "driver_version": OLD}, kubeconfig)
    assert not before.get("failed"), before.get("msg")
    driver_nodes = before["done_nodes"]
    assert len(driver_nodes) >= 4, driver_nodes
    assert all(info["state"] == om.UPGRADE_DONE for info in before["nodes"].values()), before["nodes"]
    gpus = dict((n.metadata.name, rd.count(n.status.allocatable, om.CONTAINER_RESOURCE))
                for n in lab.core().list_node().items if n.metadata.name in driver_nodes)
    assert all(gpus.values()), gpus

    # A GPU workload on one driver node, which the controller must evict.
    target = driver_nodes[0]
    client.AppsV1Api(lab.api).create_namespaced_deployment(WORKLOAD_NS, _workload(target))
    wait_for(lab.core().list_namespaced_pod, _workload_running, namespace=WORKLOAD_NS,
             label_selector="app=" + WORKLOAD)
    first_pod = [p.metadata.name for p in lab.core().list_namespaced_pod(
        WORKLOAD_NS, label_selector="app=" + WORKLOAD).items][0]

    nodes = Recorder(lab.core().list_node)
    pods = Recorder(lab.core().list_namespaced_pod, namespace=WORKLOAD_NS, label_selector="app=" + WORKLOAD)
    try:
        lab.install_operator(_values(NEW))
        result = run_module("gpu_driver_upgrade_wait", {"timeout": TIMEOUT, "driver_version": NEW}, kubeconfig)
    finally:
        nodes.stop()
        pods.stop()
    assert not result.get("failed"), result.get("msg")

    # Every driver node went through the controller's states to upgrade-done, one at a time.
    states, peak, peak_nodes = _transitions(nodes)
    assert sorted(result["done_nodes"]) == sorted(driver_nodes)
    for name in driver_nodes:
        seen = states[name]
        assert seen[0] == om.UPGRADE_DONE and seen[-1] == om.UPGRADE_DONE, (name, seen)
        assert om.UPGRADE_REQUIRED in seen and om.UPGRADE_POD_RESTART_REQUIRED in seen, (name, seen)
        assert result["nodes"][name]["state"] == om.UPGRADE_DONE
        assert du.image_has_version(result["nodes"][name]["image"], NEW), result["nodes"][name]
    assert peak == 1, (peak_nodes, states)
    assert result["max_parallel_upgrades"] == 1 and result["parallel_excess"] == []
    assert result["peak_in_progress"]["count"] == 1

    # As the API says it now: the labels, the driver pods of the new image, the GPUs advertised.
    listed = dict((n.metadata.name, n) for n in lab.core().list_node().items)
    for name in driver_nodes:
        assert listed[name].metadata.labels.get(LABEL) == om.UPGRADE_DONE
        assert not listed[name].spec.unschedulable, name
        assert rd.count(listed[name].status.allocatable, om.CONTAINER_RESOURCE) == gpus[name]
    running = [p for p in _driver_pods(lab) if p.spec.node_name in driver_nodes and not p.metadata.deletion_timestamp]
    assert sorted(p.spec.node_name for p in running) == sorted(driver_nodes)
    for pod in running:
        image = [c.image for c in pod.spec.containers if c.name == du.DRIVER_CONTAINER][0]
        assert du.image_has_version(image, NEW), (pod.metadata.name, image)

    # The workload left its node through the Eviction API (the API server marks an evicted pod
    # DisruptionTarget/EvictionByEvictionAPI before it deletes it), and runs there again.
    evicted = [o for kind, o in pods.events if o.metadata.name == first_pod and any(
        c.type == "DisruptionTarget" and c.reason == "EvictionByEvictionAPI" for c in (o.status.conditions or ()))]
    assert evicted, [(kind, o.metadata.name, [(c.type, c.reason) for c in o.status.conditions or ()])
                     for kind, o in pods.events]
    wait_for(lab.core().list_namespaced_pod, _workload_running, namespace=WORKLOAD_NS,
             label_selector="app=" + WORKLOAD)
