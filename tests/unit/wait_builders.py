"""Objects as the Kubernetes API returns them (plain dicts, camelCase keys) for the wait
modules' tests: GPU nodes, operand pods, the operator's Deployment, ClusterPolicies,
HelmCharts, install Jobs and their pods."""
import copy

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om

NS = om.DEFAULT_NAMESPACE
A10_PASSTHROUGH = "nvidia.com/GA102GL_A10"
A10_12Q = "nvidia.com/NVIDIA_A10-12Q"
# What a container GPU node runs with the chart defaults, in chain order.
CONTAINER_CHAIN = ["driver", "container-toolkit", "operator-validator", "device-plugin", "dcgm-exporter",
                   "gpu-feature-discovery"]
TRAINING_TAINT = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}


def node(name, config=None, gpu=True, labels=None, allocatable=None, capacity=None, taints=None, ready=True,
         unschedulable=False, labelled_as=None):
    """A node; a GPU node carries the deploy labels the operator writes for ``labelled_as``
    (default: ``config``, else container), under ``labels``."""
    node_labels = {"kubernetes.io/hostname": name}
    if gpu:
        node_labels.update({om.NFD_GPU_LABELS[0]: "true", om.GPU_PRESENT_LABEL: "true"})
        node_labels.update(om.deploy_labels_for(labelled_as or config or om.CONTAINER, labels or {}, om.policy()))
    if config:
        node_labels[om.WORKLOAD_CONFIG_LABEL] = config
    node_labels.update(labels or {})
    allocatable = dict((k, str(v)) for k, v in (allocatable or {}).items())
    capacity = dict((k, str(v)) for k, v in (capacity if capacity is not None else allocatable).items())
    allocatable.setdefault("cpu", "16")
    capacity.setdefault("cpu", "16")
    spec = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    condition = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
    if not ready:
        condition = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                     "message": "Kubelet stopped posting node status."}
    return {"metadata": {"name": name, "labels": node_labels}, "spec": spec,
            "status": {"allocatable": allocatable, "capacity": capacity, "conditions": [condition]}}


def gpu_node(name, gpus=2, **kwargs):
    kwargs.setdefault("allocatable", {om.CONTAINER_RESOURCE: gpus})
    return node(name, **kwargs)


def operand_pod(operand_name, node_name, ready=True, waiting=None, init_waiting=None, phase="Running",
                unschedulable=None, namespace=NS):
    o = om.operand(operand_name)
    key, value = o.pod_selector
    spec = {"containers": [{"name": "main"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}}}
    status = {"phase": phase}
    if unschedulable:
        status = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                      "reason": "Unschedulable", "message": unschedulable}]}
    else:
        spec["nodeName"] = node_name
        if init_waiting:
            status = {"phase": "Pending", "initContainerStatuses": [
                {"name": "init", "ready": False, "state": {"waiting": {"reason": init_waiting}}}],
                "containerStatuses": [{"name": "main", "ready": False,
                                       "state": {"waiting": {"reason": "PodInitializing"}}}]}
        elif phase == "Running":
            state = {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2026-11-30T10:00:00Z"}}
            status["containerStatuses"] = [{"name": "main", "ready": ready and not waiting, "restartCount": 0,
                                            "state": state}]
        elif waiting:
            status["containerStatuses"] = [{"name": "main", "ready": False, "state": {"waiting": {"reason": waiting}}}]
    return {"metadata": {"name": "%s-%s" % (o.daemonset, node_name), "namespace": namespace, "labels": {key: value}},
            "spec": spec, "status": status}


def chain_pods(node_name, operands=tuple(CONTAINER_CHAIN), **overrides):
    """Running, Ready pods of ``operands`` on a node; ``overrides``: operand -> pod kwargs."""
    return [operand_pod(o, node_name, **overrides.get(o.replace("-", "_"), {})) for o in operands]


def daemonset(operand_name, tolerations, namespace=NS):
    """An operand DaemonSet; the operator renders the ClusterPolicy's daemonsets.tolerations into it."""
    o = om.operand(operand_name)
    return {"metadata": {"name": o.daemonset, "namespace": namespace},
            "spec": {"template": {"spec": {"tolerations": tolerations}}}}


def deployment(available=True, replicas=1, generation=2, observed=2, namespace=NS, updated=None, old=0):
    """``updated``: replicas of the current template (all by default); ``old``: replicas of
    earlier templates still running (a rollout in progress)."""
    conditions = [{"type": "Available", "status": "True" if available else "False",
                   "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable"}]
    if not available:
        conditions.append({"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                           "message": 'ReplicaSet "gpu-operator-6c9b8d7f5" is progressing.'})
    return {"metadata": {"name": om.OPERATOR_DEPLOYMENT, "namespace": namespace, "generation": generation},
            "spec": {"replicas": replicas},
            "status": {"observedGeneration": observed, "replicas": replicas + old,
                       "updatedReplicas": replicas if updated is None else updated,
                       "availableReplicas": replicas + old if available else 0, "conditions": conditions}}


def operator_pod(waiting=None, namespace=NS):
    key, value = om.OPERATOR_POD_SELECTOR
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {"metadata": {"name": "gpu-operator-6c9b8d7f5-abcde", "namespace": namespace, "labels": {key: value}},
            "spec": {"nodeName": "server-1", "containers": [{"name": "gpu-operator"}]},
            "status": {"phase": "Pending" if waiting else "Running",
                       "containerStatuses": [{"name": "gpu-operator", "ready": not waiting, "state": state}]}}


def clusterpolicy(spec=None, state="ready", ready="True", reason="Reconciled", name=om.CLUSTER_POLICY_NAME,
                  namespace=NS, conditions=True):
    status = {"state": state, "namespace": namespace}
    if conditions:
        status["conditions"] = [{"type": "Ready", "status": ready, "reason": reason,
                                 "message": "ClusterPolicy is ready" if ready == "True" else "not ready"}]
    return {"metadata": {"name": name, "creationTimestamp": "2026-11-30T09:00:00Z"},
            "spec": copy.deepcopy(spec or {}), "status": status}


SANDBOX_SPEC = {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "container"}}


def helmchart(name="gpu-operator", namespace="kube-system", job_name=None, failed=None, spec_time=None,
              deleting=False):
    status = {}
    if job_name:
        status = {"jobName": job_name, "conditions": [
            {"type": "JobCreated", "status": "True", "reason": "Job created",
             "message": "Applying HelmChart using Job %s/%s" % (namespace, job_name)}]}
    if failed:
        status.setdefault("conditions", []).append({"type": "Failed", "status": "True", "reason": failed[0],
                                                    "message": failed[1]})
    meta = {"name": name, "namespace": namespace, "generation": 1}
    if spec_time:
        meta["managedFields"] = [
            {"manager": "kubectl", "operation": "Update", "time": spec_time,
             "fieldsV1": {"f:spec": {"f:valuesContent": {}}}},
            {"manager": "helm-controller", "operation": "Update", "subresource": "status", "time": "2030-01-01T00:00:00Z",
             "fieldsV1": {"f:status": {"f:jobName": {}}}},
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T10:00:00Z"
    return {"metadata": meta, "spec": {"chart": "gpu-operator", "valuesContent": "driver:\n  enabled: false\n"},
            "status": status}


def job(name="helm-install-gpu-operator", uid="job-uid-1", created="2026-11-30T10:00:00Z", complete=False, failed=0,
        namespace="kube-system", chart="gpu-operator", config_hash=None):
    """helm-controller's install Job; ``config_hash``: the CONFIG_HASH it puts in the Job's env."""
    status = {}
    if complete:
        status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    if failed:
        status["failed"] = failed
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": created,
                         "labels": {"helmcharts.helm.cattle.io/chart": chart}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "helm", "env": [{"name": "CONFIG_HASH", "value": config_hash}] if config_hash else []}]}}},
            "status": status}


def job_pod(name="helm-install-gpu-operator-x7k2p", job_uid="job-uid-1", phase="Running", state=None, last_state=None,
            restarts=0, namespace="kube-system", chart="gpu-operator", created="2026-11-30T10:00:01Z"):
    status = {"name": "helm", "ready": phase == "Running" and not state, "restartCount": restarts,
              "state": state or {"running": {}}}
    if last_state:
        status["lastState"] = last_state
    return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created,
                         "labels": {"helmcharts.helm.cattle.io/chart": chart},
                         "ownerReferences": [{"kind": "Job", "uid": job_uid, "controller": True}]},
            "spec": {"nodeName": "server-1", "containers": [{"name": "helm"}]},
            "status": {"phase": phase, "containerStatuses": [status]}}


def cache(**kinds):
    """The engine's cache layout: {kind: {namespace/name: object}}."""
    result = {}
    for kind, items in kinds.items():
        entries = {}
        for obj in items:
            meta = obj["metadata"]
            key = "%s/%s" % (meta["namespace"], meta["name"]) if meta.get("namespace") else meta["name"]
            entries[key] = obj
        result[kind] = entries
    return result
