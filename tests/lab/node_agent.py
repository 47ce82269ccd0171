"""LAB-ONLY: what the fleet's hosts would do that a control plane cannot, because it takes
a kubelet, a container runtime or a GPU. Everything the GPU Operator decides (node
labels, which DaemonSets exist, their selectors, ClusterPolicy status) comes from the
real operator (or, offline, tests/lab/gpu_operator_sim.py); this agent plays only:

- the kubelet running operand pods, including the order their init containers impose.
  The gates are read from each pod's own init containers (the operator's manifests):
  ``until [ -f /run/nvidia/validations/<file> ]`` waits for that file; an init container
  running ``nvidia-validator`` with ``COMPONENT=<c>`` waits for its component and then
  writes ``<c>-ready`` (cmd/nvidia-validator: driver, toolkit, cuda, plugin, vfio-pci,
  vgpu-manager, vgpu-devices, cc-manager; the sandbox validator also writes
  ``workload-type``). The files of a node live in its annotation
  ``lab.gpuplatform.invalid/validations`` (its /run), so they outlive pod restarts and a
  "reboot" (fault switch) clears them, after which every operand pod on the node runs its
  init containers again. A pod blocked at a gate stays Pending in ``Init``.
- faults: a held-down operand runs but is not Ready (CrashLoopBackOff); an image outside
  the site mirror (HelmChart annotation ``lab.gpuplatform.invalid/mirror-registry``) is
  ImagePullBackOff naming the image;
- the device plugins: a node advertises its workload config's resource only while its
  (sandbox) device plugin pod is Running and Ready (kubevirt-gpu-device-plugin's names for
  passthrough, the vGPU type for vGPU nodes);
- k8s-driver-manager on a host with its own driver (the fleet's ``lab_host_driver``, a DGX
  Spark): the driver pod's init container finds ``nvidia-smi`` working on the host, labels the
  node ``nvidia.com/gpu.deploy.driver=pre-installed`` and fails (v0.11.0 ``uninstallDriver``:
  ``isHostDriver``, ``disableContainerizedDriver``); the DaemonSet controller then takes the pod
  off the node, which no longer matches its selector;
- gpu-feature-discovery: the product, memory (none for a GPU sharing the host's memory, GB10)
  and count labels, and the driver version labels, while its pod is Ready;
- the CUDA sample: a pod running a ``cuda-sample`` image completes Succeeded with
  ``Test PASSED`` in its log (served through the pod log endpoint), or Failed when the
  node's chain is broken or the lab switch says so.

Waiting for it: every reconcile publishes a summary in the ConfigMap
``kube-system/gpu-operator-sim`` (installed, settled, per-node report). A waiter that
writes a fresh token to that ConfigMap's annotation ``lab.gpuplatform.invalid/sync`` and
waits until the summary echoes it and says settled has seen the agent catch up with every
write it made before. With the real operator, "settled" also needs the cluster to have
been quiet for a moment: the operator reacts to node changes within milliseconds, and
nothing it writes says which change it has seen.
"""

import argparse
import base64
import concurrent.futures
import datetime
import gzip
import json
import os
import queue
import re
import sys
import threading
import time

import yaml
from kubernetes import client, config, watch

from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils import readiness
from tests.lab import fleet as fleet_mod

SIM_CONFIGMAP = "gpu-operator-sim"
SYNC_ANNOTATION = fleet_mod.LAB_ANNOTATION + "sync"
MIRROR_ANNOTATION = fleet_mod.LAB_ANNOTATION + "mirror-registry"
VALIDATIONS_ANNOTATION = fleet_mod.LAB_ANNOTATION + "validations"
BOOT_ANNOTATION = fleet_mod.LAB_ANNOTATION + "boot"
# On an operand pod: the node boot in which its init containers completed.
INITIALIZED_ANNOTATION = fleet_mod.LAB_ANNOTATION + "initialized-boot"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-operator-sim"}
CUDA_PASSED_LOG = ("[Vector addition of 50000 elements]", "Copy input data from the host memory to the CUDA device",
                   "CUDA kernel launch with 196 blocks of 256 threads",
                   "Copy output data from the CUDA device to the host memory", "Test PASSED", "Done")
# How long the cluster must be quiet before a summary may say settled (real operator).
QUIET_SECONDS = 1.0
# A reconcile without any event this often, in case a watch missed one; on a fleet of more
# than SAFETY_NODES_PER_SECOND * SAFETY_SECONDS nodes, once per SAFETY_NODES_PER_SECOND nodes a
# second. A pass lists and reads the whole fleet, about 3 s of CPU at a thousand nodes: every
# 30 s there, it took a tenth of the machine's two cores, from the API server and the module
# being measured, in every scale figure (a scale benchmark's verify met one or two of them).
SAFETY_SECONDS = 30.0
SAFETY_NODES_PER_SECOND = 10.0


# The pod conditions a kubelet writes from its containers' states (and rewrites when
# someone else changed them).
KUBELET_CONDITIONS = ("Initialized", "Ready", "ContainersReady")

# A reconcile this long is logged: on the lab fleet one takes well under a second, so
# a longer one is a stalled request or a fleet too large for the machine.
SLOW_RECONCILE_SECONDS = 10.0


def log(message):
    """One line on stderr (the lab keeps it as node-agent.log), stamped like the control
    plane's own logs so a stall can be lined up with theirs."""
    print("%s %s" % (datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3], message),
          file=sys.stderr, flush=True)


def safety_seconds(fleet_size):
    """How long the reconcile waits for an event before a pass of its own, on a fleet of
    ``fleet_size`` nodes."""
    return max(SAFETY_SECONDS, fleet_size / SAFETY_NODES_PER_SECOND)


# Writes of one reconcile (pod states, node resources and labels, finished samples) this
# many at a time: a thousand-node fleet's rollout is ten thousand of them, and one after
# another they would make the lab, not the collection, what a scale benchmark measures.
WRITE_CONCURRENCY = 8
# The collection's CUDA sample pods (readiness.sample_pod's labels) end as soon as they run,
# through a watch of their own: a thousand-node reconcile (every node and operand pod listed)
# takes seconds, and a sample waiting for the next one would make every sample pod of a scale
# benchmark as slow as the lab. Other pods that run a cuda-sample image end in the reconcile.
SAMPLE_SELECTOR = "%s=cuda-sample" % readiness.SAMPLE_LABEL_NAME
# ...and their events do not wake the reconcile: nothing in it depends on them, and five
# events for each of a thousand sample pods would keep the whole-fleet pass running back to
# back, taking a core and the API server's time from the pods it is meant to simulate.
RECONCILED_PODS = "%s!=cuda-sample" % readiness.SAMPLE_LABEL_NAME
# How long a sample pod's end waits for kwok to serve its log, and how often it asks.
LOG_SERVED_SECONDS = 10.0
LOG_SERVED_RETRY = 0.1

_WAIT_FOR_FILE = re.compile(r"until \[ -f /run/nvidia/validations/([\w.-]+) \]")
# cmd/nvidia-validator: the status file each component writes when it validated.
VALIDATOR_FILES = {
    "driver": "driver-ready", "toolkit": "toolkit-ready", "cuda": "cuda-ready", "plugin": "plugin-ready",
    "vfio-pci": "vfio-pci-ready", "vgpu-manager": "vgpu-manager-ready", "vgpu-devices": "vgpu-devices-ready",
    "cc-manager": "cc-manager-ready",
}
# The operand whose pod a validator component checks on its node; when no DaemonSet of
# that operand targets the node, the host provides it (driver.enabled=false and friends).
VALIDATED_OPERAND = {
    "driver": "driver", "toolkit": "container-toolkit", "vfio-pci": "vfio-manager",
    "vgpu-manager": "vgpu-manager", "vgpu-devices": "vgpu-device-manager", "cc-manager": "cc-manager",
}
# k8s-driver-manager (the driver pod's init container) on a node whose host driver works.
DRIVER_MANAGER_CONTAINER = "k8s-driver-manager"
HOST_DRIVER_MESSAGE = ("NVIDIA GPU driver is already pre-installed on the node, disabling the containerized driver "
                       "(labelled %s=%s)" % (om.deploy_label("driver"), om.DEPLOY_PRE_INSTALLED))
# gpu-feature-discovery's driver version labels (k8s-device-plugin internal/lm/nvml.go newVersionLabeler).
DRIVER_VERSION_LABELS = ("nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.driver-version.major",
                         "nvidia.com/cuda.driver-version.minor", "nvidia.com/cuda.driver-version.revision")
# A component that needs another's file first.
VALIDATOR_NEEDS = {"toolkit": ("driver-ready",), "cuda": ("toolkit-ready",), "plugin": ("toolkit-ready",)}


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ignoring(status, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or None when the API answers with one of the ``status`` codes."""
    try:
        return fn(*args, **kwargs)
    except client.ApiException as exc:
        if exc.status not in status:
            raise
        return None


def list_items(function, *args, **kwargs):
    """A list call's items as plain dicts, decoded from the JSON without the client's
    models: at a thousand nodes and ten thousand pods the models take longer to build than
    a whole reconcile takes otherwise (the node agent, the simulator, the lab's set-up)."""
    return read_object(function, *args, **kwargs)["items"]


def read_object(function, *args, **kwargs):
    """A read (or a write's answer) as a plain dict, decoded from the JSON without the
    client's models (list_items' reason). An answer that is not 2xx raises ApiException,
    as the client does only when it builds the models."""
    response = function(*args, _preload_content=False, **kwargs)
    try:
        body = response.data
    finally:
        response.release_conn()
    if not 200 <= response.status <= 299:
        error = client.ApiException(status=response.status, reason=response.reason)
        error.body = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        raise error
    return json.loads(body) if body else None


def node_without_heartbeat(node):
    """What the reconcile reads of a node, as a string to compare: everything but the
    heartbeat kwok writes into each node's conditions every few minutes, and the
    resourceVersion that write bumps. At a thousand nodes the heartbeats are a node update
    every half second; each woke a whole-fleet reconcile that changed nothing."""
    meta = dict(node.get("metadata") or {})
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    status = dict(node.get("status") or {})
    status["conditions"] = [dict(c, lastHeartbeatTime=None) for c in status.get("conditions") or ()]
    return json.dumps([meta, node.get("spec"), status], sort_keys=True)


def condition_statuses(status):
    """{condition type: status} of the pod conditions the kubelet owns."""
    return dict((c.get("type"), c.get("status")) for c in (status or {}).get("conditions") or ()
                if c.get("type") in KUBELET_CONDITIONS)


def pod_running_ready(pod):
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    statuses = status.get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


def init_gate(container):
    """What an operand's init container waits for: ("file", name), ("validate", component)
    or None (it completes at once: config-manager-init, k8s-driver-manager, ...)."""
    text = " ".join((container.get("command") or []) + (container.get("args") or []))
    found = _WAIT_FOR_FILE.search(text)
    if found:
        return "file", found.group(1)
    if "nvidia-validator" in text:
        env = dict((e.get("name"), e.get("value")) for e in container.get("env") or ())
        if env.get("COMPONENT"):
            return "validate", env["COMPONENT"]
    return None


def host_driver(node):
    """The driver version the host brings (the fleet's lab_host_driver), or None."""
    hw = json.loads((node["metadata"].get("annotations") or {}).get(fleet_mod.HARDWARE_ANNOTATION) or "null") or {}
    return hw.get("host_driver")


def node_files(node):
    value = (node["metadata"].get("annotations") or {}).get(VALIDATIONS_ANNOTATION) or ""
    return set(v for v in value.split(",") if v)


def node_boot(node):
    """Which boot of which host: a node object deleted and registered again under the same
    name is a new host (an empty /run), even for pods of the old one not yet collected."""
    return "%s/%s" % (node["metadata"].get("uid") or "", (node["metadata"].get("annotations") or {}).get(
        BOOT_ANNOTATION) or "0")


def places_no_pod(daemonset):
    """The DaemonSet wants no pod and has none (its status says so, or it has none yet). Its
    events cannot change what a kubelet does, and a real operator may write such DaemonSets
    for ever: with driver.usePrecompiled, a kernel that only nodes without a driver container
    run gets a precompiled driver DaemonSet that the operator deletes as stale and creates
    again on every pass (operand_model.precompiled_driver_groups)."""
    status = daemonset.get("status") or {}
    counts = ("desiredNumberScheduled", "currentNumberScheduled", "numberMisscheduled", "numberReady")
    return not any(status.get(k) for k in counts)


def quiet_breaker(name, event):
    """Whether a watch event of kind ``name`` counts against the cluster being quiet, and
    what it was ("" when it does not count): the summary names the last one, so a lab that
    never settles says what kept it busy."""
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    if name == "sync" or (name == "daemonsets" and places_no_pod(obj)):
        return ""
    where = "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p)
    return "%s %s %s" % (event.get("type") or "?", name, where)


def selects(template_spec, node):
    """The DaemonSet pod template ``template_spec`` targets ``node`` (nodeSelector and taints)."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (template_spec.get("nodeSelector") or {}).items()):
        return False
    return not om.untolerated_taints((node.get("spec") or {}).get("taints"), template_spec.get("tolerations"))


class NodeAgent(object):
    def __init__(self, api_client, workdir, operator_simulator=None):
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.workdir = workdir
        # Offline: the simulated helm-controller and operator run in this loop too.
        self.operator_simulator = operator_simulator
        self.events = queue.Queue()
        self.changes = 0
        self.last_event = time.monotonic()
        self.last_event_what = ""  # quiet_breaker of the last event that counted
        self.quiet_pending = False
        self.fleet_size = 0  # nodes the last reconcile saw
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(WRITE_CONCURRENCY, thread_name_prefix="write")
        self._sample_pool = concurrent.futures.ThreadPoolExecutor(WRITE_CONCURRENCY, thread_name_prefix="sample")
        self._samples_ending = set()  # uids of sample pods the sample watch is ending
        self._logs_served = set()  # uids of sample pods whose log was handed to kwok early
        self._logs_created = set()  # of those, the ones whose Logs object kwok has

    # ------------------------------------------------------------ plumbing
    def _json(self, obj):
        return self.api.sanitize_for_serialization(obj)

    _list = staticmethod(list_items)

    def _changed(self, count=1):
        with self._lock:
            self.changes += count

    def _concurrently(self, function, items):
        """``function(*item)`` for every item, WRITE_CONCURRENCY at a time; the first error is raised."""
        for future in [self._pool.submit(function, *item) for item in items]:
            future.result()

    def _watch(self, name, list_fn, **kwargs):
        """One thread per kind: every event (and every reconnect) wakes the reconciler, but a
        node's heartbeat (node_without_heartbeat). The events are not decoded into the
        client's models: at a thousand nodes the nodes' status updates alone kept a core
        busy doing that."""
        seen = {}
        while True:
            try:
                for event in watch.Watch().stream(list_fn, timeout_seconds=300, deserialize=False, **kwargs):
                    if name == "nodes":
                        node = event.get("object") or {}
                        key = (node.get("metadata") or {}).get("name")
                        state = node_without_heartbeat(node) if event.get("type") == "MODIFIED" else None
                        changed = state is None or seen.get(key) != state
                        seen[key] = state
                        if not changed:
                            continue
                    what = quiet_breaker(name, event)
                    if what:
                        self.last_event = time.monotonic()
                        self.last_event_what = what
                    elif name != "sync":
                        # A DaemonSet that wants no pod and has none: nothing for a kubelet to do,
                        # and no reason to run a whole-fleet reconcile (a churning operator
                        # writes one every few milliseconds).
                        continue
                    self.events.put(name)
            except Exception as exc:  # the API server restarts under us in fault tests
                log("watch %s: %s" % (name, exc))
                time.sleep(0.5)
            self.events.put(name)

    def run(self):
        watches = (
            ("nodes", self.core.list_node, {}),
            ("pods", self.core.list_pod_for_all_namespaces, {"label_selector": RECONCILED_PODS}),
            ("daemonsets", self.apps.list_daemon_set_for_all_namespaces, {}),
            ("jobs", self.batch.list_namespaced_job, {"namespace": "kube-system"}),
            ("helmcharts", self.custom.list_namespaced_custom_object,
             {"group": "helm.cattle.io", "version": "v1", "namespace": "kube-system", "plural": "helmcharts"}),
            ("clusterpolicies", self.custom.list_cluster_custom_object,
             {"group": "nvidia.com", "version": "v1", "plural": "clusterpolicies"}),
            ("sync", self.core.list_namespaced_config_map,
             {"namespace": "kube-system", "field_selector": "metadata.name=" + SIM_CONFIGMAP}),
        )
        for name, fn, kwargs in watches:
            threading.Thread(target=self._watch, args=(name, fn), kwargs=kwargs, daemon=True).start()
        threading.Thread(target=self._watch_samples, daemon=True).start()
        self.quiet_pending = False
        while True:
            # Woken by an event; or, when the last summary waited only for the cluster to be
            # quiet, when it will have been; else a slow safety pass.
            timeout = safety_seconds(self.fleet_size)
            if self.quiet_pending:
                timeout = max(0.05, self.last_event + QUIET_SECONDS - time.monotonic())
            try:
                self.events.get(timeout=timeout)
            except queue.Empty:
                pass
            # Coalesce a burst of events into one reconcile.
            time.sleep(0.05)
            while not self.events.empty():
                self.events.get_nowait()
            started = time.monotonic()
            try:
                self.reconcile()
                if time.monotonic() - started > SLOW_RECONCILE_SECONDS:
                    log("reconcile took %.1fs" % (time.monotonic() - started))
            except client.ApiException as exc:
                log("reconcile: %s %s %s" % (exc.status, exc.reason, (exc.body or "")[:600]))
                time.sleep(0.5)
                self.events.put("retry")
            except Exception as exc:
                log("reconcile: %r" % exc)
                time.sleep(0.5)
                self.events.put("retry")

    _ignore = staticmethod(ignoring)

    def _sync_token(self):
        """The token a waiter last wrote on the summary ConfigMap. Read before anything else,
        so a summary that echoes it was computed from every write the waiter made before."""
        current = self._ignore((404,), self.core.read_namespaced_config_map, SIM_CONFIGMAP, "kube-system")
        return ((current.metadata.annotations or {}).get(SYNC_ANNOTATION)) if current is not None else None

    # ------------------------------------------------------------ reconcile
    def reconcile(self):
        self.changes = 0
        sync = self._sync_token()
        quiet_since = self.last_event
        charts = [c for c in self.custom.list_namespaced_custom_object(
            "helm.cattle.io", "v1", "kube-system", "helmcharts")["items"] if c["spec"].get("chart") == "gpu-operator"]
        chart = charts[0] if charts else None
        summary = {"installed": False, "settled": False, "nodes": {}, "sync": sync,
                   "mode": "simulated" if self.operator_simulator else "real",
                   "chart_generation": chart["metadata"].get("generation") if chart else None,
                   "chart_uid": chart["metadata"].get("uid") if chart else None}
        operator_settled = True
        if self.operator_simulator is not None:
            result = self.operator_simulator.reconcile(chart)
            summary.update(result)
            operator_settled = self.operator_simulator.changes == 0 and (chart is None or result.get("installed"))
            self.changes += self.operator_simulator.changes
        elif chart is not None and not chart["metadata"].get("deletionTimestamp"):
            summary["installed"] = self.chart_installed(chart)
            summary["namespace"] = chart["spec"].get("targetNamespace") or "default"
            # helm records the release deployed once the ClusterPolicy exists; the operator
            # creates the operand DaemonSets in its next pass through every state, and writes
            # status.state at the end of it. Until then no DaemonSet says what will run: a
            # quiet moment in between (a busy host) is not the settled fleet.
            unreconciled = self.unreconciled_clusterpolicies()
            if unreconciled:
                summary["unreconciled_clusterpolicies"] = unreconciled
                operator_settled = False
        mirror = ((chart or {}).get("metadata", {}).get("annotations") or {}).get(MIRROR_ANNOTATION)
        summary["mirror"] = mirror
        nodes = self._list(self.core.list_node)
        self.fleet_size = len(nodes)
        pods = self._list(self.core.list_pod_for_all_namespaces)
        daemonsets = self._list(self.apps.list_daemon_set_for_all_namespaces)
        self.operand_pods(nodes, pods, daemonsets, mirror)
        pods = self._list(self.core.list_pod_for_all_namespaces)
        summary["nodes"] = self.advertise(nodes, pods)
        self.feature_discovery(nodes, pods)
        self.cuda_samples(nodes, pods)
        operands_settled = self._operands_settled(daemonsets, pods, nodes)
        summary["operands_settled"] = operands_settled
        quiet = self.operator_simulator is not None or time.monotonic() - quiet_since >= QUIET_SECONDS
        self.quiet_pending = not quiet
        # What the lab's wait names when the summary never says settled (wrote: this pass changed something;
        # last_event: the last event that counted against quiet, when that is what it waits for).
        summary.update(wrote=self.changes > 0, operator_settled=operator_settled, quiet=quiet)
        if not quiet:
            summary["last_event"] = self.last_event_what
        if chart is None:
            summary["settled"] = self.changes == 0 and operands_settled and quiet and operator_settled
        else:
            summary["settled"] = (bool(summary["installed"]) and operands_settled and operator_settled
                                  and self.changes == 0 and quiet)
        self.publish(summary)

    def publish(self, summary):
        body = {"metadata": {"name": SIM_CONFIGMAP, "namespace": "kube-system", "labels": dict(MANAGED_BY)},
                "data": {"status": json.dumps(summary, sort_keys=True)}}
        current = self._ignore((404,), self.core.read_namespaced_config_map, SIM_CONFIGMAP, "kube-system")
        if current is None:
            self._ignore((409,), self.core.create_namespaced_config_map, "kube-system", body)
        elif (current.data or {}).get("status") != body["data"]["status"]:
            self.core.patch_namespaced_config_map(SIM_CONFIGMAP, "kube-system", body)

    def unreconciled_clusterpolicies(self):
        """The ClusterPolicies the operator has not yet been through (no status.state)."""
        try:
            items = self.custom.list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies")["items"]
        except client.ApiException as exc:
            if exc.status == 404:  # the chart's CRD is not there yet
                return []
            raise
        return sorted(cp["metadata"]["name"] for cp in items if not (cp.get("status") or {}).get("state"))

    def chart_installed(self, chart):
        """helm-controller's install Job completed AND helm's own record (the release
        Secret) says the chart's CURRENT values and version are deployed: a completed Job
        of the values before the last change is not an install of these."""
        job_name = (chart.get("status") or {}).get("jobName")
        if not job_name or not job_name.startswith("helm-install-"):
            return False
        job = self._ignore((404,), self.batch.read_namespaced_job, job_name, chart["metadata"]["namespace"])
        if job is None or not any(c.type == "Complete" and c.status == "True" for c in (job.status.conditions or [])):
            return False
        release = deployed_release(self.core, chart["metadata"]["name"], chart["spec"].get("targetNamespace") or
                                   chart["metadata"]["namespace"])
        if release is None:
            return False
        try:
            wanted = yaml.safe_load(chart["spec"].get("valuesContent") or "") or {}
        except yaml.YAMLError:
            return False
        return (release.get("config") or {}) == wanted and \
            ((release.get("chart") or {}).get("metadata") or {}).get("version") == str(chart["spec"].get("version"))

    # ------------------------------------------------------------ the kubelet of operand pods
    def operand_pods(self, nodes, pods, daemonsets, mirror):
        """Drives every operand pod through its init gates to Running, Ready or held."""
        by_name = dict((n["metadata"]["name"], n) for n in nodes)
        operand_pods = [p for p in pods if om.operand_of_pod(p["metadata"].get("labels")) is not None
                        and p["spec"].get("nodeName") in by_name and not p["metadata"].get("deletionTimestamp")]
        files = dict((name, node_files(node)) for name, node in by_name.items())
        held = {}
        for name, node in by_name.items():
            value = (node["metadata"].get("annotations") or {}).get(fleet_mod.HOLD_DOWN_ANNOTATION) or ""
            held[name] = set(v.strip() for v in value.split(",") if v.strip())
        targets = {}
        for ds in daemonsets:
            operand = om.operand_for_daemonset(ds["metadata"]["name"])
            if operand is not None:
                targets.setdefault(operand.name, []).append(ds["spec"]["template"]["spec"])
        # A pod's state depends on other pods' readiness on the same node (a validator
        # checks the driver pod, a device plugin waits for the toolkit validation), so
        # iterate each node to a fixpoint: a chain of N operands settles in at most N passes.
        states, on_node = {}, {}
        for pod in operand_pods:
            on_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
        for name, node_pods in on_node.items():
            node = by_name[name]
            for _pass in range(len(om.OPERANDS) + 2):
                ready = set(om.operand_of_pod(pod["metadata"].get("labels")).name for pod in node_pods
                            if (states.get(pod["metadata"]["uid"]) or {}).get("ready"))
                changed = False
                for pod in node_pods:
                    state = self._pod_state(pod, node, files[name], ready, targets, held.get(name, set()), mirror)
                    if states.get(pod["metadata"]["uid"]) != state:
                        states[pod["metadata"]["uid"]] = state
                        changed = True
                if not changed:
                    break
        self._concurrently(self._set_pod_state, [
            (pod, states[pod["metadata"]["uid"]], node_boot(by_name[pod["spec"]["nodeName"]])) for pod in operand_pods])
        self._driver_manager(operand_pods, by_name)
        self._concurrently(self._patch_node, [
            (name, {"metadata": {"annotations": {VALIDATIONS_ANNOTATION: ",".join(sorted(files[name])) or None}}})
            for name, node in by_name.items() if files[name] != node_files(node)])

    def _patch_node(self, name, body):
        read_object(self.core.patch_node, name, body)
        self._changed()

    def _driver_manager(self, operand_pods, by_name):
        """k8s-driver-manager's answer to a host driver: the node's deploy.driver label becomes
        pre-installed (the operator keeps a value it finds)."""
        for pod in operand_pods:
            operand = om.operand_of_pod(pod["metadata"].get("labels"))
            node = by_name[pod["spec"]["nodeName"]]
            labels = node["metadata"].get("labels") or {}
            if operand.name == "driver" and host_driver(node) and \
                    labels.get(om.deploy_label("driver")) != om.DEPLOY_PRE_INSTALLED:
                read_object(self.core.patch_node, node["metadata"]["name"], {"metadata": {"labels": {
                    om.deploy_label("driver"): om.DEPLOY_PRE_INSTALLED}}})
                labels[om.deploy_label("driver")] = om.DEPLOY_PRE_INSTALLED
                self._changed()

    def _provided_on(self, operand_name, node, ready, targets):
        """The component an operand provides is there: its pod is Ready on the node, or no
        DaemonSet of it targets the node (the host provides it)."""
        if operand_name in ready:
            return True
        return not any(selects(spec, node) for spec in targets.get(operand_name, ()))

    def _pod_state(self, pod, node, files, ready, targets, held, mirror):
        """{phase, ready, blocked (init container name), waiting reason and message}; writes
        the files a validator init container produces into ``files``."""
        operand = om.operand_of_pod(pod["metadata"].get("labels"))
        annotations = pod["metadata"].get("annotations") or {}
        if operand.name == "driver" and host_driver(node):
            return {"phase": "Pending", "ready": False, "blocked": DRIVER_MANAGER_CONTAINER,
                    "message": HOST_DRIVER_MESSAGE}
        initialized = annotations.get(INITIALIZED_ANNOTATION) == node_boot(node)
        if not initialized:
            for container in pod["spec"].get("initContainers") or ():
                gate = init_gate(container)
                if gate is None:
                    continue
                kind, what = gate
                if kind == "file":
                    if what not in files:
                        return {"phase": "Pending", "ready": False, "blocked": container["name"],
                                "message": "waiting for /run/nvidia/validations/%s" % what}
                    continue
                if operand.name == "sandbox-validator":
                    files.add("workload-type")
                validated = VALIDATED_OPERAND.get(what)
                missing = [f for f in VALIDATOR_NEEDS.get(what, ()) if f not in files]
                if what == "plugin":
                    allocatable = (node.get("status") or {}).get("allocatable") or {}
                    if not om.gpu_resources(allocatable):
                        return {"phase": "Pending", "ready": False, "blocked": container["name"],
                                "message": "GPU resources are not yet discovered by the node"}
                if missing or (validated and not self._provided_on(validated, node, ready, targets)):
                    return {"phase": "Pending", "ready": False, "blocked": container["name"],
                            "message": "waiting for the %s to be ready" % (validated or ", ".join(missing))}
                if what in VALIDATOR_FILES:
                    files.add(VALIDATOR_FILES[what])
        images = [c["image"] for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]]
        outside = [i for i in images if mirror and not image_plan.within(i, mirror)]
        if operand.name in held or "*" in held:
            return {"phase": "Running", "ready": False, "blocked": None, "reason": "CrashLoopBackOff",
                    "message": "back-off 5m0s restarting failed container (lab hold-down)"}
        if outside:
            return {"phase": "Running", "ready": False, "blocked": None, "reason": "ImagePullBackOff",
                    "message": 'Back-off pulling image "%s": not in mirror %s' % (outside[0], mirror)}
        return {"phase": "Running", "ready": True, "blocked": None}

    def _set_pod_state(self, pod, state, boot):
        status = pod.get("status") or {}
        want = self._pod_status(pod, state)
        current_statuses = [(s.get("name"), s.get("ready"), list((s.get("state") or {}).keys()),
                             ((s.get("state") or {}).get("waiting") or {}).get("reason"))
                            for s in status.get("containerStatuses") or ()]
        wanted_statuses = [(s["name"], s["ready"], list(s["state"].keys()), (s["state"].get("waiting") or {}).get("reason"))
                           for s in want["containerStatuses"]]
        current_init = [list((s.get("state") or {}).keys()) for s in status.get("initContainerStatuses") or ()]
        wanted_init = [list(s["state"].keys()) for s in want["initContainerStatuses"]]
        # The conditions too, as a kubelet's status manager does: kube-controller-manager's node
        # lifecycle controller sets Ready=False on every pod of a node it thinks unreachable
        # (as after a kube-apiserver restart, when its informers come back late), and only
        # the kubelet puts it back. The DaemonSet counts such a pod unavailable.
        current_conditions = condition_statuses(status)
        wanted_conditions = condition_statuses(want)
        if state["blocked"] is None and (pod["metadata"].get("annotations") or {}).get(INITIALIZED_ANNOTATION) != boot:
            read_object(self.core.patch_namespaced_pod, pod["metadata"]["name"], pod["metadata"]["namespace"], {
                "metadata": {"annotations": {INITIALIZED_ANNOTATION: boot}}})
            self._changed()
        if status.get("phase") == want["phase"] and current_statuses == wanted_statuses and current_init == wanted_init \
                and current_conditions == wanted_conditions:
            return
        read_object(self.core.patch_namespaced_pod_status, pod["metadata"]["name"], pod["metadata"]["namespace"],
                    {"status": want})
        self._changed()

    @staticmethod
    def _pod_status(pod, state):
        now = now_rfc3339()
        inits = pod["spec"].get("initContainers") or []
        init_statuses, reached = [], state["blocked"] is None
        blocked_seen = False
        for container in inits:
            entry = {"name": container["name"], "image": container["image"], "restartCount": 0}
            if state["blocked"] is None or not blocked_seen and container["name"] != state["blocked"]:
                entry.update(ready=True, state={"terminated": {"exitCode": 0, "reason": "Completed",
                                                               "startedAt": now, "finishedAt": now}})
            elif container["name"] == state["blocked"]:
                blocked_seen = True
                entry.update(ready=False, started=True, state={"running": {"startedAt": now}})
            else:
                entry.update(ready=False, state={"waiting": {"reason": "PodInitializing"}})
            init_statuses.append(entry)
        statuses = []
        for container in pod["spec"]["containers"]:
            entry = {"name": container["name"], "image": container["image"], "ready": bool(state["ready"]),
                     "restartCount": 0 if state["ready"] or not reached else 5}
            if not reached:
                entry["state"] = {"waiting": {"reason": "PodInitializing"}}
                entry["started"] = False
            elif state["ready"]:
                entry["state"] = {"running": {"startedAt": now}}
                entry["started"] = True
            else:
                entry["state"] = {"waiting": {"reason": state["reason"], "message": state["message"]}}
                entry["started"] = False
            statuses.append(entry)
        flag = "True" if state["ready"] else "False"
        conditions = [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Initialized", "status": "True" if reached else "False",
             "reason": None if reached else "ContainersNotInitialized",
             "message": None if reached else "containers with incomplete status: [%s] (%s)" % (
                 state["blocked"], state.get("message"))},
            {"type": "Ready", "status": flag, "reason": None if state["ready"] else "ContainersNotReady"},
            {"type": "ContainersReady", "status": flag, "reason": None if state["ready"] else "ContainersNotReady"},
        ]
        result = {"phase": state["phase"], "conditions": conditions, "initContainerStatuses": init_statuses,
                  "containerStatuses": statuses, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}]}
        if not (pod.get("status") or {}).get("startTime"):
            result["startTime"] = now
        return result

    # ------------------------------------------------------------ device plugins and GFD
    def _resources_for(self, node, config_name):
        annotations = node["metadata"].get("annotations") or {}
        override = annotations.get(fleet_mod.ADVERTISE_ANNOTATION)
        if override:
            return dict((k, int(v)) for k, v in json.loads(override).items())
        hw = json.loads(annotations.get(fleet_mod.HARDWARE_ANNOTATION) or "null")
        if not hw:
            return {}
        if config_name == om.CONTAINER:
            return {om.CONTAINER_RESOURCE: hw["count"]}
        if config_name == om.VM_PASSTHROUGH:
            return {om.passthrough_resource_name(hw["pci_device_name"]): hw["count"]}
        profile = (node["metadata"].get("labels") or {}).get(om.VGPU_CONFIG_LABEL) or "%s-12Q" % hw["model"]
        return {om.vgpu_resource_name(om.vgpu_type_name(profile)): om.vgpu_count(profile, hw["memory_gb"], hw["count"])}

    @staticmethod
    def _ready_by_node(pods):
        by_node = {}
        for pod in pods:
            operand = om.operand_of_pod(pod["metadata"].get("labels"))
            if operand and pod_running_ready(pod):
                by_node.setdefault(pod["spec"].get("nodeName"), set()).add(operand.name)
        return by_node

    def advertise(self, nodes, pods):
        """Each (sandbox) device plugin advertises what its node has while it is Ready; the
        workload config the plugin serves is the one the operator deployed it for."""
        by_node = self._ready_by_node(pods)
        report, patches = {}, []
        for node in nodes:
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            running = by_node.get(name, set())
            if "device-plugin" in running:
                advertised = self._resources_for(node, om.CONTAINER)
            elif "sandbox-device-plugin" in running:
                config_name = om.VM_VGPU if labels.get(om.WORKLOAD_CONFIG_LABEL) == om.VM_VGPU else om.VM_PASSTHROUGH
                advertised = self._resources_for(node, config_name)
            else:
                advertised = {}
            if om.is_gpu_node(labels) or advertised:
                report[name] = {"running": sorted(running), "advertised": advertised}
            status = node.get("status") or {}
            if om.gpu_resources(status.get("allocatable")) == advertised and \
                    om.gpu_resources(status.get("capacity")) == advertised:
                continue
            patch = {"capacity": {}, "allocatable": {}}
            for section in ("capacity", "allocatable"):
                for key in status.get(section) or {}:
                    if key.startswith("nvidia.com/") and key not in advertised:
                        patch[section][key] = None
                for key, count in advertised.items():
                    patch[section][key] = str(count)
            patches.append((name, {"status": patch}))
        self._concurrently(self._patch_node_status, patches)
        return report

    def _patch_node_status(self, name, body):
        read_object(self.core.patch_node_status, name, body)
        self._changed()

    def feature_discovery(self, nodes, pods):
        """gpu-feature-discovery's labels from the node's (simulated) hardware while its pod is Ready."""
        by_node = self._ready_by_node(pods)
        drivers = self._ready_driver_images(pods)
        patches = []
        for node in nodes:
            annotations = node["metadata"].get("annotations") or {}
            hw = json.loads(annotations.get(fleet_mod.HARDWARE_ANNOTATION) or "null")
            if not hw or "gpu-feature-discovery" not in by_node.get(node["metadata"]["name"], ()):
                continue
            labels = node["metadata"].get("labels") or {}
            wanted = {"nvidia.com/gpu.product": hw.get("product") or "NVIDIA-%s" % hw["model"],
                      "nvidia.com/gpu.count": str(hw["count"])}
            # NVML has no memory of its own for GB10 (nvidia-smi: "Not Supported"): GFD sets no memory label.
            if not hw.get("unified_memory"):
                wanted["nvidia.com/gpu.memory"] = str(hw["memory_gb"] * 1024)
            version = self._driver_version(node, drivers)
            if version:
                parts = (version.split(".") + ["", ""])[:3]
                wanted.update(zip(DRIVER_VERSION_LABELS, [version] + parts))
            patch = dict((k, v) for k, v in wanted.items() if labels.get(k) != v)
            if patch:
                patches.append((node["metadata"]["name"], {"metadata": {"labels": patch}}))
        self._concurrently(self._patch_node, patches)

    @staticmethod
    def _ready_driver_images(pods):
        """{node name: the image of its Ready driver pod}, the first one listed."""
        images = {}
        for pod in pods:
            operand = om.operand_of_pod(pod["metadata"].get("labels"))
            if operand and operand.name == "driver" and pod_running_ready(pod):
                images.setdefault(pod["spec"].get("nodeName"), pod["spec"]["containers"][0]["image"])
        return images

    @staticmethod
    def _driver_version(node, drivers):
        """The driver NVML reports on the node: the host's, else the Ready driver pod's (its image
        tag is <version>-<os>); ``drivers``: _ready_driver_images."""
        if host_driver(node):
            return host_driver(node)
        image = drivers.get(node["metadata"]["name"])
        if image is None:
            return None
        tag = image.rpartition(":")[2]
        return tag.split("-", 1)[0] if tag and tag[0].isdigit() else None

    @staticmethod
    def _operands_settled(daemonsets, pods, nodes):
        """Every operand DaemonSet's controller caught up, and no operand pod is still on its
        way (terminating or not yet given its state). Caught up: it counts at least the nodes
        its selector matches and whose taints it tolerates, so a deploy label just set keeps
        the lab unsettled until the controller saw it."""
        for ds in daemonsets:
            if om.operand_for_daemonset(ds["metadata"]["name"]) is None:
                continue
            status = ds.get("status") or {}
            template = ds["spec"]["template"]["spec"]
            wanted = sum(1 for n in nodes if selects(template, n))
            if not wanted and places_no_pod(ds):
                # Targets no node and placed no pod: no node's state depends on it, whether or not
                # its controller has seen it (a churning precompiled driver DaemonSet never is).
                continue
            if status.get("observedGeneration") != ds["metadata"].get("generation"):
                return False
            desired = status.get("desiredNumberScheduled", 0)
            if desired != status.get("currentNumberScheduled", 0) or desired < wanted:
                return False
        for pod in pods:
            if om.operand_of_pod(pod["metadata"].get("labels")) is None:
                continue
            if pod["metadata"].get("deletionTimestamp") or not (pod.get("status") or {}).get("containerStatuses"):
                return False
        return True

    # ------------------------------------------------------------ CUDA sample
    @staticmethod
    def _runs_sample(pod):
        containers = pod["spec"].get("containers") or []
        return (any("cuda-sample" in c.get("image", "") for c in containers)
                and (pod.get("status") or {}).get("phase") == "Running"
                and not pod["metadata"].get("deletionTimestamp"))

    @staticmethod
    def _sample_log(node, running):
        """The log lines and exit code of a sample on ``node`` (its object, or None), whose
        Running and Ready operands are ``running``."""
        annotations = ((node or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get(fleet_mod.CUDA_SAMPLE_ANNOTATION) == "fail":
            return ("[Vector addition of 50000 elements]",
                    "Failed to allocate device vector A (error code no CUDA-capable device is detected)!"), 1
        if "container-toolkit" not in running and "device-plugin" in running:
            # The silent failure: GPUs advertised, but no runtime hook to expose them.
            return ("[Vector addition of 50000 elements]",
                    "Failed to allocate device vector A (error code CUDA driver version is insufficient for "
                    "CUDA runtime version)!"), 1
        return CUDA_PASSED_LOG, 0

    def cuda_samples(self, nodes, pods):
        running_by_node = self._ready_by_node(pods)
        by_name = dict((n["metadata"]["name"], n) for n in nodes)
        finished = []
        for pod in pods:
            if not self._runs_sample(pod) or pod["metadata"].get("uid") in self._samples_ending:
                continue
            node_name = pod["spec"].get("nodeName")
            lines, exit_code = self._sample_log(by_name.get(node_name), running_by_node.get(node_name, set()))
            finished.append((pod, lines, exit_code))
        with self._lock:  # the sample watch leaves these alone
            self._samples_ending.update(pod["metadata"].get("uid") for pod, _lines, _code in finished)
        self._concurrently(self._finish_pod, finished)

    def _watch_samples(self):
        """Ends each of the collection's sample pods once it runs, from its node and that
        node's pods as they are then (SAMPLE_SELECTOR). A pod's log is handed to kwok when
        the pod is first seen, so that kwok has it by the time the pod ends."""
        while True:
            try:
                for event in watch.Watch().stream(self.core.list_pod_for_all_namespaces, label_selector=SAMPLE_SELECTOR,
                                                  timeout_seconds=300, deserialize=False):
                    pod = event["object"]
                    uid = pod["metadata"].get("uid")
                    if event["type"] == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                        continue
                    if uid not in self._logs_served:
                        with self._lock:
                            self._logs_served.add(uid)
                        self._sample_pool.submit(self._hand_log_to_kwok, pod)
                    if not self._runs_sample(pod) or uid in self._samples_ending:
                        continue
                    with self._lock:
                        self._samples_ending.add(uid)
                    self._sample_pool.submit(self._end_sample, pod)
            except Exception as exc:  # the API server restarts under us in fault tests
                log("watch samples: %s" % exc)
                time.sleep(0.5)

    def _hand_log_to_kwok(self, pod):
        try:
            serve_log(self.custom, self.workdir, pod, None)
            with self._lock:
                self._logs_created.add(pod["metadata"].get("uid"))
        except Exception as exc:  # the pod's end creates the Logs object anyway
            log("log of %s: %s" % (pod["metadata"].get("name"), exc))

    def _end_sample(self, pod):
        node_name = pod["spec"].get("nodeName")
        try:
            node = read_object(self.core.read_node, node_name)
            on_node = self._list(self.core.list_pod_for_all_namespaces, field_selector="spec.nodeName=" + node_name)
            lines, exit_code = self._sample_log(node, self._ready_by_node(on_node).get(node_name, set()))
            self._finish_pod(pod, lines, exit_code)
        except Exception as exc:  # the reconcile ends it instead
            log("sample %s: %s" % (pod["metadata"].get("name"), exc))
            with self._lock:
                self._samples_ending.discard(pod["metadata"].get("uid"))
            self.events.put("samples")

    def _finish_pod(self, pod, lines, exit_code):
        meta = pod["metadata"]
        # The Logs object points at the file: once kwok has it, rewriting the file is enough.
        serve_log(self.custom, self.workdir, pod, lines, create=meta.get("uid") not in self._logs_created)
        self._await_log_served(pod, lines)
        finished = now_rfc3339()
        statuses = [{"name": c["name"], "image": c["image"], "ready": False, "restartCount": 0, "started": False,
                     "state": {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                              "startedAt": finished, "finishedAt": finished}}}
                    for c in pod["spec"]["containers"]]
        phase = "Succeeded" if exit_code == 0 else "Failed"
        read_object(self.core.patch_namespaced_pod_status, meta["name"], meta["namespace"], {"status": {
            "phase": phase, "containerStatuses": statuses,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"},
                           {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"}]}})
        self._changed()

    def _await_log_served(self, pod, lines):
        """Until the pod's log endpoint returns ``lines`` (at most LOG_SERVED_SECONDS): a kubelet
        has a container's log before it reports the container terminated, while kwok serves a
        log only once its informer has the Logs object, which under load or after an API server
        restart comes a moment later. A reader that sees the pod end must find its log. kwok's
        cache cannot be watched from here, so this asks."""
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        deadline = time.monotonic() + LOG_SERVED_SECONDS
        while True:
            try:
                text = self.core.read_namespaced_pod_log(meta["name"], meta["namespace"], container=container)
                if lines[-1] in text:
                    return
            except client.ApiException as exc:
                if exc.status == 404:  # the pod is gone: nobody will read its log
                    return
            if time.monotonic() >= deadline:
                log("log of %s/%s not served after %ss" % (meta["namespace"], meta["name"], LOG_SERVED_SECONDS))
                return
            time.sleep(LOG_SERVED_RETRY)


def deployed_release(core, name, namespace):
    """Helm's record of the deployed release ``name`` (its storage Secret, decoded:
    base64, gzip, JSON), or None."""
    secrets = core.list_namespaced_secret(namespace, label_selector="owner=helm,name=%s,status=deployed" % name).items
    if not secrets:
        return None
    newest = max(secrets, key=lambda s: int((s.metadata.labels or {}).get("version") or 0))
    raw = base64.b64decode(base64.b64decode((newest.data or {}).get("release") or ""))
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def serve_log(custom, workdir, pod, lines, create=True):
    """Writes ``lines`` as the pod's container log (CRI format) and serves it through
    kwok's Logs resource, so the real pod log endpoint returns it. ``lines`` None: the
    log file is created empty if it is not there (nothing written yet is overwritten). A Logs
    object that exists already (the sample watch gave it to kwok early) is left as it is;
    ``create`` False: the caller knows it exists, only the file is written."""
    meta = pod["metadata"]
    directory = os.path.join(workdir, "podlogs")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "%s_%s_%s.log" % (meta["namespace"], meta["name"], meta["uid"]))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with open(path, "a" if lines is None else "w") as handle:
        for line in lines or ():
            handle.write("%s stdout F %s\n" % (stamp, line))
    containers = [c["name"] for c in pod["spec"]["containers"]]
    logs = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                              "uid": meta["uid"]}]},
            "spec": {"logs": [{"containers": containers, "logsFile": path}]}}
    if not create:
        return
    try:
        custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", meta["namespace"], "logs", logs)
    except client.ApiException as exc:
        if exc.status != 409:
            raise


def main(argv=None):
    parser = argparse.ArgumentParser(description="LAB-ONLY node agent: kubelet, device plugins, GFD, CUDA sample")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--simulate-operator", metavar="REFERENCE",
                        help="offline: also simulate helm-controller and the GPU Operator from this reference folder")
    args = parser.parse_args(argv)
    configuration = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    api_client = client.ApiClient(configuration)
    simulator = None
    if args.simulate_operator:
        from tests.lab.gpu_operator_sim import OperatorSimulator
        simulator = OperatorSimulator(api_client, args.simulate_operator)
    NodeAgent(api_client, args.workdir, simulator).run()


if __name__ == "__main__":
    main()
