"""LAB-ONLY, OFFLINE FALLBACK: a stand-in for helm-controller and the NVIDIA GPU Operator,
used only when the lab has no upstream source of the operator (tests/lab/upstream.py);
with the source, the lab runs the real operator, the real chart, helm and helm-controller
instead, and the conformance suite (tests/integration/test_operator_conformance_lab.py)
compares this stand-in with the real operator on the same scenarios: where they differ,
the stand-in is wrong.

What it plays, reading the operand model (plugins/module_utils/operand_model.py), the
chart's values file the gpu_operator role ships and the operator's own DaemonSet
manifests (tests/lab/reference/gpu-operator-v26.3.2/assets):

- helm-controller: a HelmChart for chart ``gpu-operator`` gets the Job
  ``helm-install-<name>`` in kube-system (kwok completes its pod; the lab switch
  annotation ``lab.gpuplatform.invalid/install: fail`` or unparsable values make it
  fail) and HelmChart ``status.jobName`` and conditions ``JobCreated`` / ``Failed``.
- helm, once that Job completed: the release record a successful install or upgrade
  leaves (``sh.helm.release.v1.<name>.v<revision>``, the one before it superseded;
  tests/lab/helm_record.py), which the collection reads before an upgrade as on a site;
  ``helm uninstall`` removes them.
- the operator, once the install Job completed: namespace, Deployment
  ``gpu-operator``, ClusterPolicy ``cluster-policy`` from the chart values, and
  while the operator pod runs: node labelling as the operand model says, one DaemonSet
  per enabled operand (real manifests, namespace and images filled in, images resolved by
  the collection's own rules), ClusterPolicy status in the operator's words.

What a node does with those pods (init gates, device plugins, CUDA sample, faults) is
tests/lab/node_agent.py, the same in both modes; this class runs inside its loop.
"""

import copy
import hashlib
import json
import os
import sys

import yaml
from kubernetes import client

from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from ansible_collections.gpuplatform.rke2.plugins.module_utils.operator_values import effective_values, lookup
from tests.lab import fleet as fleet_mod
from tests.lab import helm_record
from tests.lab.node_agent import ignoring, list_items, now_rfc3339, pod_running_ready

ROOT = fleet_mod.ROOT
CHART_VALUES = os.path.join(ROOT, "roles", "gpu_operator", "files", "gpu-operator-v26.3.2-values.yaml")
HELM_FINALIZER = "wrangler.cattle.io/on-helm-chart-remove"
KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"
OS_ID_LABEL = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION_LABEL = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
INSTALL_ANNOTATION = fleet_mod.LAB_ANNOTATION + "install"
VALUES_HASH_ANNOTATION = fleet_mod.LAB_ANNOTATION + "values-hash"
FAIL_LABEL = fleet_mod.LAB_ANNOTATION + "fail"
# The version it plays (its reference manifests and values are v26.3.2's): a HelmChart without spec.version gets it.
PLAYED_VERSION = "v26.3.2"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-operator-sim"}
# ClusterPolicy spec keys the chart renders from its values.
CLUSTER_POLICY_KEYS = (
    "operator", "daemonsets", "validator", "driver", "toolkit", "devicePlugin", "dcgm", "dcgmExporter", "gfd",
    "migManager", "nodeStatusExporter", "gds", "gdrcopy", "vgpuManager", "vgpuDeviceManager", "vfioManager",
    "kataManager", "sandboxDevicePlugin", "kataSandboxDevicePlugin", "ccManager", "mig", "psa", "cdi",
    "sandboxWorkloads", "hostPaths",
)


def image_of(values, path, chart_version):
    """The image the operator runs for a values block (``driver.manager`` too), by the
    collection's own reference rules; None when the block names no complete image (the
    real operator then fails that state and deploys nothing for it)."""
    block = lookup(values, path)
    if not isinstance(block, dict):
        return None
    app_version = chart_version if path in image_plan.APP_VERSION_BLOCKS else None
    return image_plan.block_reference(block, app_version)


class OperatorSimulator(object):
    def __init__(self, api_client, reference):
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.node_api = client.NodeV1Api(api_client)
        self.reference = reference
        with open(CHART_VALUES) as handle:
            self.chart_defaults = yaml.safe_load(handle)
        self.assets = {}
        for operand in om.OPERANDS:
            if operand.asset:
                with open(os.path.join(reference, "assets", operand.asset)) as handle:
                    self.assets[operand.name] = yaml.safe_load(handle)
        self.changes = 0
        self.namespace = None
        # {node: (workload.config, deploy.operands)} as the last labelling saw them.
        self._label_triggers = {}

    def _json(self, obj):
        return self.api.sanitize_for_serialization(obj)

    _list = staticmethod(list_items)

    _ignore = staticmethod(ignoring)

    def reconcile(self, chart):
        """One pass over the current HelmChart (or its absence); returns the summary's
        operator part. ``self.changes`` counts the writes it made."""
        self.changes = 0
        self.namespace = None
        if chart is None or chart["metadata"].get("deletionTimestamp"):
            self.teardown(chart)
            return {"installed": False}
        installed, values, namespace = self.helm_controller(chart)
        self.namespace = namespace
        result = {"installed": installed, "namespace": namespace}
        if installed:
            result.update(self.operator(chart, values, namespace))
            self.release_record(chart, namespace)
        return result

    def _release_records(self, release, namespace=None):
        args = (self.core.list_namespaced_secret, namespace) if namespace else (self.core.list_secret_for_all_namespaces,)
        return self._list(*args, label_selector=helm_record.selector(release),
                          field_selector="type=" + helm_record.SECRET_TYPE)

    def release_record(self, chart, namespace):
        """What helm leaves in the release namespace once the install Job succeeded: a deployed
        revision with the chart's version and the values it was given, the previous one
        superseded (pkg/action/upgrade.go). Nothing when the latest one already says so."""
        release = chart["metadata"]["name"]
        spec = chart["spec"]
        version = str(spec.get("version") or PLAYED_VERSION)
        values = yaml.safe_load(spec.get("valuesContent") or "") or {}
        latest = helm_record.latest_record(self._release_records(release, namespace))
        if latest is not None:
            record = helm_record.record_of_secret(latest)
            if ((record.get("info") or {}).get("status") == helm_record.DEPLOYED and record.get("config") == values
                    and (record.get("chart") or {}).get("metadata", {}).get("version") == version):
                return
            self.core.patch_namespaced_secret(latest["metadata"]["name"], namespace,
                                              helm_record.status_patch(latest, helm_record.SUPERSEDED))
        revision = helm_record.version_of(latest) + 1 if latest is not None else 1
        metadata = {"name": (spec.get("chart") or "gpu-operator").rsplit("/", 1)[-1], "version": version, "appVersion": version}
        self.core.create_namespaced_secret(namespace, helm_record.release_secret(release, namespace, revision, metadata,
                                                                                 values))
        self.changes += 1

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
        version = str(chart["spec"].get("version") or PLAYED_VERSION)
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
        pods = self._list(self.core.list_namespaced_pod, namespace)
        operator_up = any(p["metadata"].get("labels", {}).get("app") == "gpu-operator" and pod_running_ready(p)
                          for p in pods)
        if not operator_up:
            # No operator process: nothing reconciles, the status stays as it was.
            return {"operator_running": False}
        policy = om.policy_from_spec(values, namespace)
        nodes = self._list(self.core.list_node)
        self.label_nodes(nodes, policy)
        self.daemonsets(values, version, namespace, policy, self._list(self.core.list_node))
        daemonsets = self._list(self.apps.list_namespaced_daemon_set, namespace)
        gpu_nodes = [n for n in nodes if om.is_gpu_node(n["metadata"].get("labels"))]
        # Like the real operator (controllers/clusterpolicy_controller.go): a state is ready
        # when its DaemonSet has no unavailable pod, which says nothing about GPU nodes the
        # DaemonSets cannot reach.
        unready = sorted(ds["metadata"]["name"] for ds in daemonsets
                         if (ds.get("status") or {}).get("numberUnavailable", 0)
                         or (ds.get("status") or {}).get("numberReady", 0)
                         != (ds.get("status") or {}).get("desiredNumberScheduled", 0))
        if unready:
            self._cluster_policy_status(om.CLUSTER_POLICY_NOT_READY, om.REASON_OPERAND_NOT_READY,
                                        "ClusterPolicy is not ready, states not ready: [%s]" % " ".join(unready))
        elif not gpu_nodes:
            self._cluster_policy_status(om.CLUSTER_POLICY_READY, om.REASON_NO_GPU_NODES,
                                        "No GPU node found, watching for new nodes to join the cluster.")
        else:
            self._cluster_policy_status(om.CLUSTER_POLICY_READY, om.REASON_RECONCILED,
                                        "ClusterPolicy is ready as all resources have been successfully reconciled")
        return {"operator_running": True}

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

    def _cluster_policy_status(self, state, reason, message):
        """The operator's wording (internal/conditions): ready sets Ready=True with the reason
        and Error=False reason Ready; notReady sets Ready=False reason Error and Error=True
        with the reason. ``ignored`` is never saved."""
        args = ("nvidia.com", "v1", "clusterpolicies", om.CLUSTER_POLICY_NAME)
        current = self._ignore((404,), self.custom.get_cluster_custom_object, *args)
        if current is None:
            return
        if state == om.CLUSTER_POLICY_READY:
            conditions = [{"type": "Ready", "status": "True", "reason": reason, "message": message},
                          {"type": "Error", "status": "False", "reason": "Ready", "message": ""}]
        else:
            conditions = [{"type": "Ready", "status": "False", "reason": "Error", "message": ""},
                          {"type": "Error", "status": "True", "reason": reason, "message": message}]
        old = current.get("status") or {}
        comparable = [dict((k, c.get(k) or "") for k in ("type", "status", "reason", "message"))
                      for c in old.get("conditions") or ()]
        if old.get("state") == state and comparable == conditions:
            return
        stamp = now_rfc3339()
        for condition in conditions:
            condition["lastTransitionTime"] = stamp
        self.custom.patch_cluster_custom_object_status(*(args + ({"status": {
            "state": state, "namespace": self.namespace,
            "conditions": conditions}},)))
        self.changes += 1

    def label_nodes(self, nodes, policy):
        """The operator's node labelling (om.operator_node_labels), on the operator's own
        triggers only (controllers/clusterpolicy_controller.go: a node event reconciles when
        a common GPU label is missing or outdated, or workload.config or deploy.operands
        changed): a deploy label someone removed stays removed until one of those happens."""
        for node in nodes:
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            trigger = (labels.get(om.WORKLOAD_CONFIG_LABEL), labels.get(om.OPERANDS_LABEL))
            wanted = om.operator_node_labels(labels, policy)
            common_outdated = om.GPU_PRESENT_LABEL in wanted and labels.get(om.GPU_PRESENT_LABEL) != \
                wanted[om.GPU_PRESENT_LABEL]
            mig_label_missing = om.is_gpu_node(labels) and om.has_mig_capable_gpu(labels) and \
                om.deploy_label("mig-manager") not in labels
            if self._label_triggers.get(name) == trigger and not common_outdated and not mig_label_missing:
                continue
            self._label_triggers[name] = trigger
            patch = dict((k, v) for k, v in wanted.items() if labels.get(k) != v)
            if patch:
                self.core.patch_node(name, {"metadata": {"labels": patch}})
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

    def daemonsets(self, values, version, namespace, policy, nodes):
        """One DaemonSet per enabled operand; precompiled drivers one per kernel and OS of
        the GPU nodes (gpu.present=true, whatever their deploy.driver: getKernelVersionsMap),
        each also selecting its kernel (object_controls.go transformPrecompiledDriverDaemonset)."""
        wanted = {}
        for operand in om.OPERANDS:
            if operand.name not in self.assets or not policy["operands_enabled"].get(operand.name):
                continue
            ds = self._daemonset_manifest(operand, values, version, namespace)
            if ds is None:
                print("daemonsets: %s is enabled but its values name no complete image" % operand.name,
                      file=sys.stderr, flush=True)
                continue
            if operand.name == "driver" and (values.get("driver") or {}).get("usePrecompiled"):
                for kernel, os_tag in sorted(set(self._kernel_and_os(n) for n in nodes if (
                        n["metadata"].get("labels") or {}).get(om.GPU_PRESENT_LABEL) == "true")):
                    variant = copy.deepcopy(ds)
                    variant["metadata"]["name"] = om.precompiled_driver_daemonset(kernel, os_tag)
                    variant["spec"]["template"]["spec"]["nodeSelector"][KERNEL_LABEL] = kernel
                    wanted[variant["metadata"]["name"]] = variant
                continue
            wanted[operand.daemonset] = ds
        for name, ds in sorted(wanted.items()):
            account = ds["spec"]["template"]["spec"].get("serviceAccountName")
            if account:
                self._ensure(self.core.read_namespaced_service_account, self.core.create_namespaced_service_account,
                             self.core.patch_namespaced_service_account, account, namespace,
                             {"metadata": {"name": account}}, lambda o: o["metadata"]["name"])
            self._ensure(self.apps.read_namespaced_daemon_set, self.apps.create_namespaced_daemon_set,
                         self.apps.patch_namespaced_daemon_set, name, namespace, ds,
                         lambda o: json.dumps([o["spec"]["template"]["spec"].get("tolerations"),
                                               o["spec"]["template"]["spec"].get("nodeSelector"), [
                             c["image"] for c in (o["spec"]["template"]["spec"].get("initContainers") or [])
                             + o["spec"]["template"]["spec"]["containers"]]], sort_keys=True))
        for ds in self._list(self.apps.list_namespaced_daemon_set, namespace,
                             label_selector="app.kubernetes.io/managed-by=gpu-operator-sim"):
            if ds["metadata"]["name"] not in wanted:
                self._ignore((404,), self.apps.delete_namespaced_daemon_set, ds["metadata"]["name"], namespace)
                self.changes += 1

    @staticmethod
    def _kernel_and_os(node):
        labels = node["metadata"].get("labels") or {}
        return labels.get(KERNEL_LABEL) or "", "%s%s" % (labels.get(OS_ID_LABEL) or "", labels.get(OS_VERSION_LABEL) or "")

    def teardown(self, chart):
        """helm uninstall: the operator's objects go; the labels it set and the resources
        its device plugins advertised are removed from the nodes."""
        for ds in self._list(self.apps.list_daemon_set_for_all_namespaces,
                             label_selector="app.kubernetes.io/managed-by=gpu-operator-sim"):
            self._ignore((404,), self.apps.delete_namespaced_daemon_set, ds["metadata"]["name"],
                         ds["metadata"]["namespace"])
            self.changes += 1
        for dep in self._list(self.apps.list_deployment_for_all_namespaces,
                              label_selector="app=gpu-operator"):
            self._ignore((404,), self.apps.delete_namespaced_deployment, dep["metadata"]["name"],
                         dep["metadata"]["namespace"])
            self.changes += 1
        if self._ignore((404,), self.custom.delete_cluster_custom_object, "nvidia.com", "v1", "clusterpolicies",
                        om.CLUSTER_POLICY_NAME) is not None:
            self.changes += 1
        release = chart["metadata"]["name"] if chart else "gpu-operator"
        job = self._ignore((404,), self.batch.delete_namespaced_job, "helm-install-%s" % release, "kube-system",
                           propagation_policy="Background")
        if job is not None:
            self.changes += 1
        for record in self._release_records(release):
            if self._ignore((404,), self.core.delete_namespaced_secret, record["metadata"]["name"],
                            record["metadata"]["namespace"]) is not None:
                self.changes += 1
        for node in self._list(self.core.list_node):
            labels = node["metadata"].get("labels") or {}
            patch = dict((k, None) for k, v in labels.items()
                         if (k.startswith(om.DEPLOY_LABEL_PREFIX) and k != om.OPERANDS_LABEL
                             and v == om.DEPLOY_TRUE) or k == om.GPU_PRESENT_LABEL)
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
