"""A LAB-ONLY simulator of what helm-controller and the NVIDIA GPU Operator do to a
cluster, so that the collection's waits and checks can be proven against a real
control plane without GPUs.

What it plays, reading the operand model (plugins/module_utils/operand_model.py)
and the operator's own DaemonSet manifests (shared/reference/.../assets):

- helm-controller: a HelmChart for chart ``gpu-operator`` gets the Job
  ``helm-install-<name>`` in kube-system (kwok completes its pod; the lab switch
  annotation ``lab.gpuplatform.invalid/install: fail`` or unparsable values make it
  fail) and HelmChart ``status.jobName`` and conditions ``JobCreated`` / ``Failed``.
- the operator, once the install Job completed: namespace, Deployment
  ``gpu-operator``, ClusterPolicy ``cluster-policy`` from the chart values, and
  while the operator pod runs: node labelling as the facts file section 2 says, one
  DaemonSet per enabled operand (real manifests, namespace and images filled in),
  ClusterPolicy status.
- the site mirror: with the HelmChart annotation
  ``lab.gpuplatform.invalid/mirror-registry: <host[/path]>``, an operand pod with an
  image outside that mirror stays Running but not Ready in ``ImagePullBackOff``, the
  message naming the image (what an air-gapped node shows). Images are resolved by the
  collection's own rules (``image_plan.block_reference`` over the chart defaults
  coalesced with the values, ``operator_values.effective_values``), except that the
  driver's tag carries no OS suffix: the lab's nodes have no OS labels.
- the device plugins: a node advertises its workload config's resource only while
  its (sandbox) device plugin pod is Running and Ready.
- the CUDA sample: a pod running a ``cuda-sample`` image completes Succeeded with
  ``Test PASSED`` in its log, or Failed when the node's chain is broken or the lab
  switch says so.

Waiting for it: every reconcile publishes a summary in the ConfigMap
``kube-system/gpu-operator-sim`` (installed, settled, per-node report). A waiter that
writes a fresh token to that ConfigMap's annotation ``lab.gpuplatform.invalid/sync`` and
waits until the summary echoes it and says settled has seen the simulator catch up with
every write it made before (a summary read without that can predate the waiter's last
change).

The real DaemonSet controller creates the operand pods, the real scheduler places
them, kwok runs them. The simulator is level-based: every watch event triggers one
reconcile of the whole (small) lab.
"""

import argparse
import copy
import datetime
import hashlib
import json
import os
import queue
import sys
import threading
import time

import yaml
from kubernetes import client, config, watch

from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import effective_values, lookup
from tests.lab import fleet as fleet_mod

SIM_CONFIGMAP = "gpu-operator-sim"
HELM_FINALIZER = "wrangler.cattle.io/on-helm-chart-remove"
INSTALL_ANNOTATION = fleet_mod.LAB_ANNOTATION + "install"
MIRROR_ANNOTATION = fleet_mod.LAB_ANNOTATION + "mirror-registry"
VALUES_HASH_ANNOTATION = fleet_mod.LAB_ANNOTATION + "values-hash"
# A waiter writes a fresh token here on the summary ConfigMap; the summary echoes the token
# of the reconcile that computed it (see Simulator._sync_token).
SYNC_ANNOTATION = fleet_mod.LAB_ANNOTATION + "sync"
FAIL_LABEL = fleet_mod.LAB_ANNOTATION + "fail"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-operator-sim"}
# ClusterPolicy spec keys the chart renders from its values.
CLUSTER_POLICY_KEYS = (
    "operator", "daemonsets", "validator", "driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd",
    "migManager", "nodeStatusExporter", "gds", "gdrcopy", "vgpuManager", "vgpuDeviceManager", "vfioManager",
    "kataManager", "sandboxDevicePlugin", "kataSandboxDevicePlugin", "ccManager", "mig", "psa", "cdi",
    "sandboxWorkloads", "hostPaths",
)
CUDA_PASSED_LOG = ("[Vector addition of 50000 elements]", "Copy input data from the host memory to the CUDA device",
                   "CUDA kernel launch with 196 blocks of 256 threads",
                   "Copy output data from the CUDA device to the host memory", "Test PASSED", "Done")


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_of(values, path, chart_version):
    """The image the operator runs for a values block (``driver.manager`` too), by the
    collection's own reference rules; None when the block names no complete image (the
    real operator then fails that state and deploys nothing for it)."""
    block = lookup(values, path)
    if not isinstance(block, dict):
        return None
    app_version = chart_version if path in image_plan.APP_VERSION_BLOCKS else None
    return image_plan.block_reference(block, app_version)


def pod_running_ready(pod):
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    statuses = status.get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


class Simulator(object):
    def __init__(self, api_client, workdir, reference):
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.node_api = client.NodeV1Api(api_client)
        self.workdir = workdir
        self.reference = reference
        self.events = queue.Queue()
        with open(os.path.join(reference, "values.yaml")) as handle:
            self.chart_defaults = yaml.safe_load(handle)
        self.assets = {}
        for operand in om.OPERANDS:
            if operand.asset:
                with open(os.path.join(reference, "assets", operand.asset)) as handle:
                    self.assets[operand.name] = yaml.safe_load(handle)
        self.changes = 0

    # ------------------------------------------------------------ plumbing
    def _json(self, obj):
        return self.api.sanitize_for_serialization(obj)

    def _watch(self, name, list_fn, **kwargs):
        """One thread per kind: every event (and every reconnect) wakes the reconciler."""
        while True:
            try:
                for _event in watch.Watch().stream(list_fn, timeout_seconds=300, **kwargs):
                    self.events.put(name)
            except Exception as exc:  # the API server restarts under us in fault tests
                print("watch %s: %s" % (name, exc), file=sys.stderr, flush=True)
                time.sleep(0.5)
            self.events.put(name)

    def run(self):
        watches = (
            ("nodes", self.core.list_node, {}),
            ("pods", self.core.list_pod_for_all_namespaces, {}),
            ("daemonsets", self.apps.list_daemon_set_for_all_namespaces, {}),
            ("jobs", self.batch.list_namespaced_job, {"namespace": "kube-system"}),
            ("helmcharts", self.custom.list_namespaced_custom_object,
             {"group": "helm.cattle.io", "version": "v1", "namespace": "kube-system", "plural": "helmcharts"}),
            ("sync", self.core.list_namespaced_config_map,
             {"namespace": "kube-system", "field_selector": "metadata.name=" + SIM_CONFIGMAP}),
        )
        for name, fn, kwargs in watches:
            threading.Thread(target=self._watch, args=(name, fn), kwargs=kwargs, daemon=True).start()
        while True:
            try:
                self.events.get(timeout=10)
            except queue.Empty:
                pass
            # Coalesce a burst of events into one reconcile.
            time.sleep(0.05)
            while not self.events.empty():
                self.events.get_nowait()
            try:
                self.reconcile()
            except client.ApiException as exc:
                print("reconcile: %s %s %s" % (exc.status, exc.reason, (exc.body or "")[:600]), file=sys.stderr, flush=True)
                time.sleep(0.5)
                self.events.put("retry")
            except Exception as exc:
                print("reconcile: %r" % exc, file=sys.stderr, flush=True)
                time.sleep(0.5)
                self.events.put("retry")

    def _ignore(self, status, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except client.ApiException as exc:
            if exc.status not in status:
                raise
            return None

    # ------------------------------------------------------------ reconcile
    def _sync_token(self):
        """The token a waiter last wrote on the summary ConfigMap. Read before anything else,
        so a summary that echoes it was computed from every write the waiter made before."""
        current = self._ignore((404,), self.core.read_namespaced_config_map, SIM_CONFIGMAP, "kube-system")
        return ((current.metadata.annotations or {}).get(SYNC_ANNOTATION)) if current is not None else None

    def reconcile(self):
        self.changes = 0
        sync = self._sync_token()
        charts = [c for c in self.custom.list_namespaced_custom_object(
            "helm.cattle.io", "v1", "kube-system", "helmcharts")["items"] if c["spec"].get("chart") == "gpu-operator"]
        chart = charts[0] if charts else None
        summary = {"installed": False, "settled": False, "nodes": {},
                   "chart_generation": chart["metadata"].get("generation") if chart else None,
                   "chart_uid": chart["metadata"].get("uid") if chart else None, "sync": sync}
        if chart is None or chart["metadata"].get("deletionTimestamp"):
            self.teardown(chart)
            summary["settled"] = self.changes == 0
            self.publish(summary)
            return
        installed, values, namespace = self.helm_controller(chart)
        summary.update(installed=installed, namespace=namespace)
        if installed:
            summary.update(self.operator(chart, values, namespace))
        pods = self._json(self.core.list_pod_for_all_namespaces())["items"]
        self.cuda_samples(pods)
        summary["settled"] = bool(summary.get("operands_settled")) and self.changes == 0
        self.publish(summary)

    def publish(self, summary):
        body = {"metadata": {"name": SIM_CONFIGMAP, "namespace": "kube-system", "labels": dict(MANAGED_BY)},
                "data": {"status": json.dumps(summary, sort_keys=True)}}
        current = self._ignore((404,), self.core.read_namespaced_config_map, SIM_CONFIGMAP, "kube-system")
        if current is None:
            self.core.create_namespaced_config_map("kube-system", body)
        elif (current.data or {}).get("status") != body["data"]["status"]:
            self.core.patch_namespaced_config_map(SIM_CONFIGMAP, "kube-system", body)

    # ------------------------------------------------------------ helm-controller
    def _set_chart_status(self, chart, job_name, failed_message=None):
        conditions = [{"type": "JobCreated", "status": "True", "reason": "", "message": "Applying HelmChart using Job kube-system/%s" % job_name}]
        if failed_message:
            conditions.append({"type": "Failed", "status": "True", "reason": "Error", "message": failed_message})
        status = {"jobName": job_name, "conditions": conditions}
        current = chart.get("status") or {}
        comparable = [dict((k, c.get(k)) for k in ("type", "status", "message")) for c in current.get("conditions") or []]
        wanted = [dict((k, c.get(k)) for k in ("type", "status", "message")) for c in conditions]
        if current.get("jobName") == job_name and comparable == wanted:
            return
        self.custom.patch_namespaced_custom_object_status(
            "helm.cattle.io", "v1", "kube-system", "helmcharts", chart["metadata"]["name"],
            {"status": status})
        self.changes += 1

    def helm_controller(self, chart):
        name = chart["metadata"]["name"]
        if HELM_FINALIZER not in (chart["metadata"].get("finalizers") or []):
            self.custom.patch_namespaced_custom_object(
                "helm.cattle.io", "v1", "kube-system", "helmcharts", name,
                {"metadata": {"finalizers": (chart["metadata"].get("finalizers") or []) + [HELM_FINALIZER]}})
            self.changes += 1
        spec = chart["spec"]
        namespace = spec.get("targetNamespace") or "default"
        parse_error = None
        try:
            values = yaml.safe_load(spec.get("valuesContent") or "") or {}
            if not isinstance(values, dict):
                raise ValueError("values are not a map")
        except (yaml.YAMLError, ValueError) as exc:
            values, parse_error = {}, "failed to parse valuesContent: %s" % exc
        fail = parse_error or ((chart["metadata"].get("annotations") or {}).get(INSTALL_ANNOTATION) == "fail"
                               and "INSTALLATION FAILED: lab switch %s=fail" % INSTALL_ANNOTATION)
        digest = hashlib.sha256(json.dumps([spec.get("valuesContent"), spec.get("version"), spec.get("set"),
                                            bool(fail)], sort_keys=True).encode()).hexdigest()[:16]
        job_name = "helm-install-" + name
        job = self._ignore((404,), self.batch.read_namespaced_job, job_name, "kube-system")
        job = self._json(job) if job is not None else None
        if job is not None and (job["metadata"].get("annotations") or {}).get(VALUES_HASH_ANNOTATION) != digest:
            # helm-controller replaces the install Job when the chart changes.
            self.batch.delete_namespaced_job(job_name, "kube-system", propagation_policy="Background")
            self.changes += 1
            return False, values, namespace
        if job is None:
            self._create_install_job(job_name, name, digest, fail, spec)
            self._set_chart_status(chart, job_name)
            return False, values, namespace
        status = job.get("status") or {}
        if status.get("failed"):
            message = "Helm Install Error: %s" % (fail or "install job failed")
            self._set_chart_status(chart, job_name, failed_message=message)
            return False, values, namespace
        self._set_chart_status(chart, job_name)
        if not status.get("succeeded"):
            return False, values, namespace
        return True, effective_values(self.chart_defaults, values), namespace

    def _create_install_job(self, job_name, chart_name, digest, fail, spec):
        labels = {"helmcharts.helm.cattle.io/chart": chart_name}
        pod_labels = dict(labels)
        if fail:
            pod_labels[FAIL_LABEL] = "true"
        job = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name, "namespace": "kube-system", "labels": labels,
                         "annotations": {VALUES_HASH_ANNOTATION: digest}},
            "spec": {
                "backoffLimit": 1000,
                "template": {
                    "metadata": {"labels": pod_labels},
                    "spec": {
                        "restartPolicy": "OnFailure" if not fail else "Never",
                        "containers": [{"name": "helm", "image": "rancher/klipper-helm:v0.9.8-build20250709",
                                        "args": ["install", "--namespace", spec.get("targetNamespace") or "default",
                                                 "--version", str(spec.get("version") or "")]}],
                    },
                },
            },
        }
        self.batch.create_namespaced_job("kube-system", job)
        self.changes += 1

    # ------------------------------------------------------------ operator
    def _ensure(self, read, create, patch, name, namespace, body, compare):
        current = self._ignore((404,), read, name, namespace) if namespace else self._ignore((404,), read, name)
        if current is None:
            if namespace:
                create(namespace, body)
            else:
                create(body)
            self.changes += 1
            return
        current = self._json(current)
        if compare(current) != compare(body):
            if namespace:
                patch(name, namespace, body)
            else:
                patch(name, body)
            self.changes += 1

    def operator(self, chart, values, namespace):
        version = str(chart["spec"].get("version") or "v26.3.2")
        self._ensure(self.core.read_namespace, self.core.create_namespace, self.core.patch_namespace, namespace, None,
                     {"metadata": {"name": namespace}}, lambda o: o["metadata"]["name"])
        operator_image = image_of(values, "operator", version)
        if operator_image is None:
            print("operator: the values name no complete operator image", file=sys.stderr, flush=True)
            return {"operator_running": False}
        deployment = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": om.OPERATOR_DEPLOYMENT, "namespace": namespace, "labels": {"app": "gpu-operator"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gpu-operator"}},
                     "template": {"metadata": {"labels": {"app": "gpu-operator"}},
                                  "spec": {"tolerations": values["operator"].get("tolerations") or [],
                                           "containers": [{"name": "gpu-operator", "image": operator_image}]}}},
        }
        self._ensure(self.apps.read_namespaced_deployment, self.apps.create_namespaced_deployment,
                     self.apps.patch_namespaced_deployment, om.OPERATOR_DEPLOYMENT, namespace, deployment,
                     lambda o: o["spec"]["template"]["spec"]["containers"][0]["image"])
        spec = dict((k, values[k]) for k in CLUSTER_POLICY_KEYS if k in values)
        self._ensure_cluster_policy(spec)
        if not values.get("cdi", {}).get("nriPluginEnabled"):
            self._ensure(self.node_api.read_runtime_class, self.node_api.create_runtime_class,
                         self.node_api.patch_runtime_class, values["operator"].get("runtimeClass") or "nvidia", None,
                         {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                          "metadata": {"name": values["operator"].get("runtimeClass") or "nvidia"}, "handler": "nvidia"},
                         lambda o: o.get("handler"))
        pods = self._json(self.core.list_namespaced_pod(namespace))["items"]
        operator_up = any(p["metadata"].get("labels", {}).get("app") == "gpu-operator" and pod_running_ready(p)
                          for p in pods)
        if not operator_up:
            self._cluster_policy_status("notReady", "False", "OperatorNotRunning", "gpu-operator pod not running", namespace)
            return {"operator_running": False}
        policy = om.policy_from_spec(values, namespace)
        nodes = self._json(self.core.list_node())["items"]
        self.label_nodes(nodes, policy)
        self.daemonsets(values, version, namespace, policy)
        mirror = (chart["metadata"].get("annotations") or {}).get(MIRROR_ANNOTATION)
        nodes = self._json(self.core.list_node())["items"]
        self.operand_pods(nodes, pods, mirror)
        pods = self._json(self.core.list_namespaced_pod(namespace))["items"]
        report = self.advertise(nodes, pods, policy)
        daemonsets = self._json(self.apps.list_namespaced_daemon_set(namespace))["items"]
        settled = self._operands_settled(daemonsets, pods, nodes)
        gpu_nodes = [n for n in nodes if om.is_gpu_node(n["metadata"].get("labels"))]
        # Like the real operator: ready when every operand DaemonSet has as many ready pods
        # as it wants, which says nothing about GPU nodes the DaemonSets cannot reach.
        unready = sorted(ds["metadata"]["name"] for ds in daemonsets
                         if (ds.get("status") or {}).get("numberReady", 0)
                         != (ds.get("status") or {}).get("desiredNumberScheduled", 0))
        if not gpu_nodes:
            self._cluster_policy_status("ready", "True", "NoGPUNodes", "no GPU node in the cluster", namespace)
        elif not unready and settled:
            self._cluster_policy_status("ready", "True", "Reconciled", "ClusterPolicy is ready", namespace)
        else:
            self._cluster_policy_status("notReady", "False", "OperandNotReady",
                                        "not ready: %s" % ", ".join(unready or ["rolling out"]), namespace)
        return {"operator_running": True, "operands_settled": settled, "nodes": report, "mirror": mirror}

    def _ensure_cluster_policy(self, spec):
        args = ("nvidia.com", "v1", "clusterpolicies")
        current = self._ignore((404,), self.custom.get_cluster_custom_object, *(args + (om.CLUSTER_POLICY_NAME,)))
        body = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                "metadata": {"name": om.CLUSTER_POLICY_NAME}, "spec": spec}
        if current is None:
            self.custom.create_cluster_custom_object(*(args + (body,)))
            self.changes += 1
            return
        # The CRD prunes unknown fields; compare what the API kept with what it keeps of ours.
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        dry = self.custom.replace_cluster_custom_object(*(args + (om.CLUSTER_POLICY_NAME, body)), dry_run="All")
        if dry["spec"] != current["spec"]:
            self.custom.replace_cluster_custom_object(*(args + (om.CLUSTER_POLICY_NAME, body)))
            self.changes += 1

    def _cluster_policy_status(self, state, ready, reason, message, namespace):
        args = ("nvidia.com", "v1", "clusterpolicies", om.CLUSTER_POLICY_NAME)
        current = self._ignore((404,), self.custom.get_cluster_custom_object, *args)
        if current is None:
            return
        old = current.get("status") or {}
        old_cond = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), {})
        if (old.get("state"), old_cond.get("status"), old_cond.get("reason"), old_cond.get("message")) == (
                state, ready, reason, message) and old.get("namespace") == namespace:
            return
        status = {"state": state, "namespace": namespace, "conditions": [
            {"type": "Ready", "status": ready, "reason": reason, "message": message,
             "lastTransitionTime": now_rfc3339()},
            {"type": "Error", "status": "False" if ready == "True" else "True", "reason": reason, "message": message,
             "lastTransitionTime": now_rfc3339()}]}
        self.custom.patch_cluster_custom_object_status(*(args + ({"status": status},)))
        self.changes += 1

    def label_nodes(self, nodes, policy):
        """Facts file section 2: the operator's node labelling."""
        for node in nodes:
            labels = node["metadata"].get("labels") or {}
            if not om.is_gpu_node(labels):
                continue
            config_name = om.effective_workload_config(labels, policy)[0]
            desired = {om.GPU_PRESENT_LABEL: "true"}
            if config_name in om.WORKLOAD_CONFIGS:
                desired.update(om.deploy_labels_for(config_name, labels, policy))
            patch = {}
            for key, value in desired.items():
                if labels.get(key) != value:
                    patch[key] = value
            for key in labels:
                if key.startswith(om.DEPLOY_LABEL_PREFIX) and key != om.OPERANDS_LABEL and key not in desired:
                    patch[key] = None
            if patch:
                self.core.patch_node(node["metadata"]["name"], {"metadata": {"labels": patch}})
                self.changes += 1

    def _daemonset_manifest(self, operand, values, version, namespace):
        ds = copy.deepcopy(self.assets[operand.name])
        ds["metadata"]["namespace"] = namespace
        ds["metadata"].setdefault("labels", {}).update(MANAGED_BY)
        pod_spec = ds["spec"]["template"]["spec"]
        # The operator drops the OpenShift driver-toolkit side container off OpenShift.
        pod_spec["containers"] = [c for c in pod_spec["containers"] if not c["name"].startswith("openshift-driver-toolkit")]
        main_image = image_of(values, operand.values_key, version)
        validator_image = image_of(values, "validator", version)
        manager_image = image_of(values, "driver.manager", version)
        if None in (main_image, validator_image, manager_image):
            return None
        for container in (pod_spec.get("initContainers") or []) + pod_spec.get("containers", []):
            if container["name"].endswith("-validation") or "validator" in container["name"]:
                container["image"] = validator_image
            elif container["name"] == "k8s-driver-manager":
                container["image"] = manager_image
            else:
                container["image"] = main_image
        pod_spec["tolerations"] = copy.deepcopy(values.get("daemonsets", {}).get("tolerations") or [])
        return ds

    def daemonsets(self, values, version, namespace, policy):
        for operand in om.OPERANDS:
            if operand.name not in self.assets:
                continue
            enabled = policy["operands_enabled"].get(operand.name)
            if enabled:
                ds = self._daemonset_manifest(operand, values, version, namespace)
                if ds is None:
                    print("daemonsets: %s is enabled but its values name no complete image" % operand.name,
                          file=sys.stderr, flush=True)
                    continue
                account = ds["spec"]["template"]["spec"].get("serviceAccountName")
                if account:
                    self._ensure(self.core.read_namespaced_service_account,
                                 self.core.create_namespaced_service_account,
                                 self.core.patch_namespaced_service_account, account, namespace,
                                 {"metadata": {"name": account}}, lambda o: o["metadata"]["name"])
                self._ensure(self.apps.read_namespaced_daemon_set, self.apps.create_namespaced_daemon_set,
                             self.apps.patch_namespaced_daemon_set, operand.daemonset, namespace, ds,
                             lambda o: json.dumps([o["spec"]["template"]["spec"].get("tolerations"), [
                                 c["image"] for c in (o["spec"]["template"]["spec"].get("initContainers") or [])
                                 + o["spec"]["template"]["spec"]["containers"]]], sort_keys=True))
            elif self._ignore((404,), self.apps.delete_namespaced_daemon_set, operand.daemonset, namespace) is not None:
                self.changes += 1

    def operand_pods(self, nodes, pods, mirror):
        """Holds pods down on a node (lab switch) or in ImagePullBackOff when their image
        is not in the site mirror; releases them otherwise."""
        held = {}
        for node in nodes:
            value = (node["metadata"].get("annotations") or {}).get(fleet_mod.HOLD_DOWN_ANNOTATION) or ""
            held[node["metadata"]["name"]] = set(v.strip() for v in value.split(",") if v.strip())
        for pod in pods:
            operand = om.operand_of_pod(pod["metadata"].get("labels"))
            status = pod.get("status") or {}
            if operand is None or status.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            node = pod["spec"].get("nodeName")
            images = [c["image"] for c in (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]]
            outside = [i for i in images if mirror and not image_plan.within(i, mirror)]
            if operand.name in held.get(node, ()) or "*" in held.get(node, ()):
                reason, message = "CrashLoopBackOff", "back-off 5m0s restarting failed container (lab hold-down)"
            elif outside:
                reason, message = "ImagePullBackOff", 'Back-off pulling image "%s": not in mirror %s' % (outside[0], mirror)
            else:
                reason = None
            self._set_pod_state(pod, reason, message if reason else None)

    def _set_pod_state(self, pod, reason, message):
        status = pod["status"]
        statuses = status.get("containerStatuses") or []
        current = [(s.get("ready"), ((s.get("state") or {}).get("waiting") or {}).get("reason")) for s in statuses]
        want_ready = reason is None
        if all(r == want_ready and w == reason for r, w in current):
            return
        new_statuses = []
        for container in pod["spec"]["containers"]:
            entry = {"name": container["name"], "image": container["image"], "ready": want_ready,
                     "restartCount": 0 if want_ready else 5}
            if want_ready:
                entry["state"] = {"running": {"startedAt": now_rfc3339()}}
                entry["started"] = True
            else:
                entry["state"] = {"waiting": {"reason": reason, "message": message}}
                entry["started"] = False
            new_statuses.append(entry)
        flag = "True" if want_ready else "False"
        patch = {"status": {"containerStatuses": new_statuses, "conditions": [
            {"type": "Ready", "status": flag, "reason": None if want_ready else "ContainersNotReady"},
            {"type": "ContainersReady", "status": flag, "reason": None if want_ready else "ContainersNotReady"}]}}
        self.core.patch_namespaced_pod_status(pod["metadata"]["name"], pod["metadata"]["namespace"], patch)
        self.changes += 1

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

    def advertise(self, nodes, pods, policy):
        by_node = {}
        for pod in pods:
            operand = om.operand_of_pod(pod["metadata"].get("labels"))
            if operand and pod_running_ready(pod):
                by_node.setdefault(pod["spec"].get("nodeName"), set()).add(operand.name)
        report = {}
        for node in nodes:
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            if not om.is_gpu_node(labels):
                continue
            config_name = om.effective_workload_config(labels, policy)[0]
            running = by_node.get(name, set())
            plugin = om.RESOURCE_PLUGIN.get(config_name)
            advertised = self._resources_for(node, config_name) if plugin in running else {}
            expected = set(om.expected_operands(labels, policy))
            report[name] = {"workload_config": config_name, "running": sorted(running),
                            "expected": sorted(expected), "advertised": advertised,
                            "ready": expected <= running}
            status = node.get("status") or {}
            current = om.gpu_resources(status.get("allocatable"))
            if current == advertised and om.gpu_resources(status.get("capacity")) == advertised:
                continue
            patch = {"capacity": {}, "allocatable": {}}
            for section in ("capacity", "allocatable"):
                for key in status.get(section) or {}:
                    if key.startswith("nvidia.com/") and key not in advertised:
                        patch[section][key] = None
                for key, count in advertised.items():
                    patch[section][key] = str(count)
            self.core.patch_node_status(name, {"status": patch})
            self.changes += 1
        return report

    @staticmethod
    def _operands_settled(daemonsets, pods, nodes):
        """Every operand DaemonSet's controller caught up, and every operand pod reached the
        state the simulator gives it (Ready, or held down). Caught up: it counts at least
        the nodes its selector matches and whose taints it tolerates, so a deploy label the
        simulator just set keeps the lab unsettled until the controller saw it. (A deleted
        node stays counted until its orphaned pods are collected, about a minute; nothing
        waits on that.)"""
        for ds in daemonsets:
            status = ds.get("status") or {}
            if status.get("observedGeneration") != ds["metadata"].get("generation"):
                return False
            template = ds["spec"]["template"]["spec"]
            selector = (template.get("nodeSelector") or {}).items()
            wanted = sum(1 for n in nodes if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector)
                         and not om.untolerated_taints((n.get("spec") or {}).get("taints"), template.get("tolerations")))
            desired = status.get("desiredNumberScheduled", 0)
            if desired != status.get("currentNumberScheduled", 0) or desired < wanted:
                return False
        for pod in pods:
            if om.operand_of_pod(pod["metadata"].get("labels")) is None:
                continue
            if (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                return False
        return True

    # ------------------------------------------------------------ CUDA sample
    def cuda_samples(self, pods):
        running_by_node = {}
        for pod in pods:
            operand = om.operand_of_pod(pod["metadata"].get("labels"))
            if operand and pod_running_ready(pod):
                running_by_node.setdefault(pod["spec"].get("nodeName"), set()).add(operand.name)
        nodes = None
        for pod in pods:
            containers = pod["spec"].get("containers") or []
            if not any("cuda-sample" in c.get("image", "") for c in containers):
                continue
            if (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            if nodes is None:
                nodes = dict((n["metadata"]["name"], n) for n in self._json(self.core.list_node())["items"])
            node = nodes.get(pod["spec"].get("nodeName")) or {"metadata": {}}
            annotations = node["metadata"].get("annotations") or {}
            running = running_by_node.get(pod["spec"].get("nodeName"), set())
            if annotations.get(fleet_mod.CUDA_SAMPLE_ANNOTATION) == "fail":
                lines = ("[Vector addition of 50000 elements]",
                         "Failed to allocate device vector A (error code no CUDA-capable device is detected)!")
            elif "container-toolkit" not in running and "device-plugin" in running:
                # The silent failure: GPUs advertised, but no runtime hook to expose them.
                lines = ("[Vector addition of 50000 elements]",
                         "Failed to allocate device vector A (error code CUDA driver version is insufficient for CUDA runtime version)!")
            else:
                lines = CUDA_PASSED_LOG
            self._finish_pod(pod, lines, 0 if lines is CUDA_PASSED_LOG else 1)

    def _finish_pod(self, pod, lines, exit_code):
        meta = pod["metadata"]
        directory = os.path.join(self.workdir, "podlogs")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "%s_%s_%s.log" % (meta["namespace"], meta["name"], meta["uid"]))
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with open(path, "w") as handle:
            for line in lines:
                handle.write("%s stdout F %s\n" % (stamp, line))
        containers = [c["name"] for c in pod["spec"]["containers"]]
        logs = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                  "uid": meta["uid"]}]},
                "spec": {"logs": [{"containers": containers, "logsFile": path}]}}
        self._ignore((409,), self.custom.create_namespaced_custom_object, "kwok.x-k8s.io", "v1alpha1",
                     meta["namespace"], "logs", logs)
        finished = now_rfc3339()
        statuses = [{"name": c["name"], "image": c["image"], "ready": False, "restartCount": 0, "started": False,
                     "state": {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                                              "startedAt": finished, "finishedAt": finished}}}
                    for c in pod["spec"]["containers"]]
        phase = "Succeeded" if exit_code == 0 else "Failed"
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {
            "phase": phase, "containerStatuses": statuses,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"},
                           {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"}]}})
        self.changes += 1

    # ------------------------------------------------------------ uninstall
    def teardown(self, chart):
        """helm uninstall: the operator's objects go; the labels it set and the resources
        its device plugins advertised are removed from the nodes."""
        for ds in self._json(self.apps.list_daemon_set_for_all_namespaces(
                label_selector="app.kubernetes.io/managed-by=gpu-operator-sim"))["items"]:
            self._ignore((404,), self.apps.delete_namespaced_daemon_set, ds["metadata"]["name"],
                         ds["metadata"]["namespace"])
            self.changes += 1
        for dep in self._json(self.apps.list_deployment_for_all_namespaces(
                label_selector="app=gpu-operator"))["items"]:
            self._ignore((404,), self.apps.delete_namespaced_deployment, dep["metadata"]["name"],
                         dep["metadata"]["namespace"])
            self.changes += 1
        if self._ignore((404,), self.custom.delete_cluster_custom_object, "nvidia.com", "v1", "clusterpolicies",
                        om.CLUSTER_POLICY_NAME) is not None:
            self.changes += 1
        job = self._ignore((404,), self.batch.delete_namespaced_job, "helm-install-%s" % (
            chart["metadata"]["name"] if chart else "gpu-operator"), "kube-system", propagation_policy="Background")
        if job is not None:
            self.changes += 1
        for node in self._json(self.core.list_node())["items"]:
            labels = node["metadata"].get("labels") or {}
            patch = dict((k, None) for k, v in labels.items()
                         if (k.startswith(om.DEPLOY_LABEL_PREFIX) and k != om.OPERANDS_LABEL
                             and v in (om.DEPLOY_TRUE, om.DEPLOY_PRE_INSTALLED)) or k == om.GPU_PRESENT_LABEL)
            if patch:
                self.core.patch_node(node["metadata"]["name"], {"metadata": {"labels": patch}})
                self.changes += 1
            status = node.get("status") or {}
            res = dict((section, dict((k, None) for k in (status.get(section) or {}) if k.startswith("nvidia.com/")))
                       for section in ("capacity", "allocatable"))
            if res["capacity"] or res["allocatable"]:
                self.core.patch_node_status(node["metadata"]["name"], {"status": res})
                self.changes += 1
        if chart is not None and HELM_FINALIZER in (chart["metadata"].get("finalizers") or []) and self.changes == 0:
            finalizers = [f for f in chart["metadata"]["finalizers"] if f != HELM_FINALIZER]
            self.custom.patch_namespaced_custom_object("helm.cattle.io", "v1", "kube-system", "helmcharts",
                                                       chart["metadata"]["name"], {"metadata": {"finalizers": finalizers}})
            self.changes += 1


def main(argv=None):
    parser = argparse.ArgumentParser(description="LAB-ONLY simulated helm-controller + NVIDIA GPU Operator")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--reference", required=True, help="shared/reference/gpu-operator-<version>")
    args = parser.parse_args(argv)
    configuration = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    Simulator(client.ApiClient(configuration), args.workdir, args.reference).run()


if __name__ == "__main__":
    main()
