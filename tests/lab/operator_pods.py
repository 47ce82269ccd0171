"""LAB-ONLY: the kubelet and the container of the pods that run the GPU Operator's own image
(the chart's pods labelled ``app.kubernetes.io/component=gpu-operator``), so that a chart
upgrade in the lab does what it does on a node:

- the operator Deployment's pod: its image's tag (the chart's ``operator.version``, by default
  its appVersion) says which operator runs. When the tag is another version the lab can run
  (tests/lab/upstream.py OPERATOR_TAGS), the lab stops the operator process and starts that
  version's binary with that version's /opt/gpu-operator tree (``Lab.switch_operator``: built
  on first need, cached per version), as a node pulls the new image and the new operator pod
  takes over the ClusterPolicy. The pod turns Running and Ready once that process answers its
  health probe, so the Deployment's rollout (and the collection's ``operand_readiness``, which
  waits for the Deployment) follows the process. A tag the lab cannot run leaves the running
  operator as it is, said in the log, and the pod Ready, as kwok played it before.
- the chart's ``pre-upgrade`` hook Job ``gpu-operator-upgrade-crd`` (``operator.upgradeCRD``,
  on by default): its container runs ``/usr/bin/manage-crds apply --filepath=/opt/gpu-operator/
  <crd>.yaml ...`` from the operator image. Here each file is read from the /opt tree of the
  image's version (what the image holds, docker/Dockerfile) and applied as k8s-operator-libs'
  crdutil does it (create, or update over the current resourceVersion; then wait until
  established), and the pod ends Succeeded (or Failed with the error), so helm's hook waits for
  the new CRDs exactly as on a node.
- another Job pod of the image (``cleanup_crd``, off by default) ends Succeeded, as kwok ended it.

kwok leaves these pods alone in the real mode (tests/lab/lab.py ``_kwok_config``) and still
ends their deletion. Events are handled one at a time in one thread: the newest pod is the
last word on which version runs.
"""

import argparse
import datetime
import subprocess
import sys
import time

import yaml
from kubernetes import client, watch

from tests.lab import upstream
from tests.lab.lab import OPERATOR_NAMESPACE, Lab, LabError

COMPONENT_LABEL = "app.kubernetes.io/component"
SELECTOR = COMPONENT_LABEL + "=gpu-operator"
MANAGE_CRDS = "/usr/bin/manage-crds"
IMAGE_OPT = "/opt/"
CRD_ESTABLISHED_S = 60


def log(message):
    print("%s %s" % (datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3], message),
          file=sys.stderr, flush=True)


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_version(image):
    """The lab version an image's tag names ("v26.3.3" for ...gpu-operator:v26.3.3 or :26.3.3),
    or None for a tag the lab cannot run (or a digest)."""
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    tag = "v" + tag.lstrip("v") if tag else ""
    return tag if tag in upstream.OPERATOR_TAGS else None


def owner_kind(pod):
    return next((o.get("kind") for o in pod["metadata"].get("ownerReferences") or () if o.get("controller")), None)


def crd_files(container):
    """The files ``manage-crds apply`` is given (--filepath=F or --filepath F), or None when the
    container runs something else."""
    if (container.get("command") or [None])[0] != MANAGE_CRDS:
        return None
    args = list(container.get("args") or ())
    if not args or args[0] != "apply":
        return None
    files = []
    for index, arg in enumerate(args):
        if arg.startswith("--filepath="):
            files.append(arg.split("=", 1)[1])
        elif arg == "--filepath" and index + 1 < len(args):
            files.append(args[index + 1])
    return files


def status_patch(container, phase, ready, state, now):
    flag = "True" if ready else "False"
    conditions = [{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"}] + [
        {"type": kind, "status": flag, "lastTransitionTime": now} for kind in ("Ready", "ContainersReady")]
    return {"status": {"phase": phase, "conditions": conditions, "startTime": now, "hostIP": "127.0.0.1",
                       "hostIPs": [{"ip": "127.0.0.1"}],
                       "containerStatuses": [{"name": container["name"], "image": container["image"], "imageID": "",
                                              "ready": ready, "started": "running" in state, "restartCount": 0,
                                              "state": state}]}}


def running(container, now):
    return status_patch(container, "Running", True, {"running": {"startedAt": now}}, now)


def finished(container, exit_code, message, now):
    state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                            "message": message, "startedAt": now, "finishedAt": now}}
    return status_patch(container, "Succeeded" if exit_code == 0 else "Failed", False, state, now)


def waiting(container, reason, message, now):
    return status_patch(container, "Pending", False, {"waiting": {"reason": reason, "message": message}}, now)


def handled(pod):
    """Whether the pod needs nothing more from this player (played, ended, or going)."""
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or not (pod.get("spec") or {}).get("nodeName"):
        return True
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


class Player(object):
    def __init__(self, lab):
        self.lab = lab
        self.api = lab.api
        self.core = client.CoreV1Api(self.api)
        self.ext = client.ApiextensionsV1Api(self.api)
        self.played = set()

    def play(self, pod):
        meta = pod["metadata"]
        if handled(pod) or meta["uid"] in self.played:
            return
        container = pod["spec"]["containers"][0]
        version = image_version(container["image"])
        now = now_rfc3339()
        if owner_kind(pod) == "Job":
            files = crd_files(container)
            if files is None:
                self._patch(meta, finished(container, 0, "", now), "ends Succeeded (%s)" % container["image"])
            elif version is None:
                self._patch(meta, waiting(container, "ImagePullBackOff", "the lab runs no image %s (it runs %s)" % (
                    container["image"], ", ".join(upstream.OPERATOR_TAGS)), now), "cannot run %s" % container["image"])
            else:
                self._patch(meta, running(container, now), "runs manage-crds apply (%s)" % version)
                code, message = self.apply_crds(version, files)
                self._patch(meta, finished(container, code, message, now_rfc3339()), message)
        else:
            if version is None:
                log("pod %s: image %s is no version the lab runs; the running operator (%s) stays" % (
                    meta["name"], container["image"], self.lab.operator_version()))
            elif version != self.lab.operator_version():
                log("pod %s: image %s: switching the operator from %s to %s" % (
                    meta["name"], container["image"], self.lab.operator_version(), version))
                started = time.monotonic()
                try:
                    self.lab.switch_operator(version)
                except (LabError, subprocess.CalledProcessError, upstream.UpstreamMissing) as exc:
                    self._patch(meta, waiting(container, "CrashLoopBackOff", "lab: operator %s: %s" % (version, exc),
                                              now_rfc3339()), "operator %s did not start: %s" % (version, exc))
                    self.played.add(meta["uid"])
                    return
                log("operator %s running (switch took %.1fs)" % (version, time.monotonic() - started))
            self._patch(meta, running(container, now_rfc3339()), "Running and Ready (operator %s)" % (
                self.lab.operator_version()))
        self.played.add(meta["uid"])

    def apply_crds(self, version, files):
        """manage-crds apply, LAB-ONLY: each /opt/... file read from the version's /opt tree, each CRD
        created or updated over its current resourceVersion (crdutil.applyCRDs), then established."""
        opt = self.lab.operator_opt(version)
        names = []
        try:
            for path in files:
                if not path.startswith(IMAGE_OPT):
                    raise ValueError("%s is not in the image's /opt" % path)
                with open(opt + "/" + path[len(IMAGE_OPT):]) as handle:
                    docs = [d for d in yaml.safe_load_all(handle) if d and d.get("kind") == "CustomResourceDefinition"]
                for doc in docs:
                    names.append(doc["metadata"]["name"])
                    try:
                        current = self.ext.read_custom_resource_definition(doc["metadata"]["name"])
                    except client.ApiException as exc:
                        if exc.status != 404:
                            raise
                        self.ext.create_custom_resource_definition(doc)
                        continue
                    doc["metadata"]["resourceVersion"] = current.metadata.resource_version
                    self.ext.replace_custom_resource_definition(doc["metadata"]["name"], doc)
            self._wait_established(names)
        except (client.ApiException, IOError, ValueError) as exc:
            return 1, "manage-crds apply (%s): %s" % (version, getattr(exc, "reason", None) or exc)
        return 0, "applied %d CRDs of %s: %s" % (len(names), version, ", ".join(names))

    def _wait_established(self, names):
        pending = set(names)
        stream = watch.Watch().stream(self.ext.list_custom_resource_definition, timeout_seconds=CRD_ESTABLISHED_S)
        for event in stream:
            crd = event["object"]
            if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or ()):
                pending.discard(crd.metadata.name)
            if not pending:
                return
        raise ValueError("not established after %ss: %s" % (CRD_ESTABLISHED_S, ", ".join(sorted(pending))))

    def _patch(self, meta, body, what):
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], body)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        log("pod %s: %s" % (meta["name"], what))

    def run(self):
        last_error = None
        while True:
            try:
                listing = self.core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=SELECTOR)
                pods = self.api.sanitize_for_serialization(listing)["items"]
                for pod in sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"]):
                    self.play(pod)
                for event in watch.Watch().stream(self.core.list_namespaced_pod, OPERATOR_NAMESPACE,
                                                  label_selector=SELECTOR, timeout_seconds=300,
                                                  resource_version=listing.metadata.resource_version):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.play(event["raw_object"])
                last_error = None
            except Exception as exc:  # pylint: disable=broad-except  # the API server restarts in fault tests
                if repr(exc) != last_error:
                    log("watch pods: %r" % exc)
                    last_error = repr(exc)
                time.sleep(1)


def main(argv=None):
    parser = argparse.ArgumentParser(description="LAB-ONLY player of the GPU Operator image's pods")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)
    Player(Lab(workdir=args.workdir)).run()


if __name__ == "__main__":
    main()
