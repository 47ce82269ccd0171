"""LAB-ONLY: the kubelet and the klipper-helm container for the Jobs the real
helm-controller creates, so that a HelmChart in the lab is installed by the real helm.

Why: the lab runs the real k3s-io helm-controller (v0.16.27). For every
``helm.cattle.io/v1 HelmChart`` it creates a Job ``helm-install-<name>``
(``helm-delete-<name>`` while the chart is being deleted) whose one pod runs the
klipper-helm image's ``entry`` script. The lab has no container runtime, and kwok (which
plays every other pod's kubelet) leaves pods labelled ``helmcharts.helm.cattle.io/chart``
alone. This process plays them, so the real Job controller and the real helm-controller
see what they would see on a node:

- the kubelet: the pod's volumes (the projected ``values`` Secrets at /config, the chart
  content ConfigMap at /chart, the ``auth`` Secret, the ``ca-files`` ConfigMap) written
  to a folder per run, an optional Secret that is missing skipped, a missing required one
  holding the pod in ContainerCreating until it appears; status Running; exit 0 ->
  Succeeded; a failure -> restart (restartPolicy OnFailure) after the kubelet's back-off
  (10 s doubling to 5 min) with CrashLoopBackOff, the last termination and restartCount
  in the status; the container log in CRI format, served through a kwok ``Logs`` object
  (``kubectl logs``, ``--previous`` for the attempt before); a deleted pod gets its grace
  period (the entry script ignores SIGTERM so helm is not interrupted), is then killed,
  set terminal and removed.
- the entry script (klipper-helm as paired with helm-controller v0.16.27: config-hash
  label, ``retry`` failure policy, server-side apply): its decisions are reimplemented
  here (``repo_steps``, ``release_steps``): release status -> install / upgrade / reset
  and retry / failure policy / uninstall. The helm-set-status plugin is played by
  rewriting the release record the way helm's storage does; helm-mapkubeapis is not
  installed (the lab's charts use no removed APIs) and is logged as skipped.
- the pod's identity: the Job's cluster-admin service account is the lab's admin
  kubeconfig; helm's default namespace is the pod's (HELM_NAMESPACE), as in-cluster;
  ``%{KUBERNETES_API}%`` in a chart URL is the lab API server's host:port.

Helm v3 and v4: the real image ships helm v4, and the script passes ``--server-side`` /
``--force-conflicts``. Helm v3 has no server-side apply, so with helm v3 those flags are
left out (helm v3 applies client-side); with helm v4 they are passed as the script does.

The decisions are plain functions over the pod (a dict) and helm's answers, unit-tested
in tests/unit/test_lab_helm_job_runner.py; ``Runner`` (list+watch) and ``PodWorker``
(one pod's life) do the I/O. Each run prints one line (pod, the decisive helm command,
its exit status) to stdout for the lab's log.
"""

import argparse
import base64
import dataclasses
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

from kubernetes import client, config, watch

from tests.lab import helm_record
from tests.lab import sched

CHART_LABEL = "helmcharts.helm.cattle.io/chart"
CONFIG_HASH_LABEL = "helmcharts.helm.cattle.io/configHash"
CONTAINER = "helm"
# Where helm-controller's pod template mounts each volume (pkg/controllers/chart/chart.go).
MOUNTS = {"values": "/config", "content": "/chart", "auth": "/auth", "ca-files": "/ca-files", "tmp": "/tmp"}
# ENV of the klipper-helm image (its Dockerfile); the pod's env comes on top.
IMAGE_ENV = {"STABLE_REPO_URL": "https://charts.helm.sh/stable/"}
KUBERNETES_API = "%{KUBERNETES_API}%"
RESET_STATUSES = ("pending-install", "pending-upgrade", "pending-rollback", "superseded", "uninstalling")
RETRY_UPGRADE_STATUSES = ("pending-upgrade", "superseded")
FAILED_STATUSES = ("deleted", "failed", "null", "unknown")
TERMINAL_PHASES = ("Succeeded", "Failed")
BACKOFF_INITIAL_S = 10
BACKOFF_MAX_S = 300
HELM_TIMEOUT_S = 300  # helm's own default --timeout
GUARD_MARGIN_S = 120  # on top of it: a hung helm is killed (the lab's guard; a node has none)
DEFAULT_GRACE_S = 30
MOUNT_RETRY_S = 5
TERMINATION_MESSAGE_MAX = 4096  # what the kubelet reads of /dev/termination-log
KILLED_EXIT_CODE = 137


def say(message):
    print("[helm-job-runner %s] %s" % (time.strftime("%H:%M:%S"), message), flush=True)


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------ the pod, as a run plan
class MountError(Exception):
    """A volume the kubelet cannot set up yet (what it reports as FailedMount)."""


@dataclasses.dataclass
class SecretProjection:
    """One Secret source of a projected volume: ``items`` maps key -> path; empty means
    every key under its own name."""
    name: str
    optional: bool
    items: list


@dataclasses.dataclass
class RunPlan:
    """What the pod spec says the container runs with."""
    namespace: str
    pod: str
    uid: str
    image: str
    args: list
    env: dict
    values: list  # SecretProjection of the projected volume "values" (/config)
    content: str  # ConfigMap of the volume "content" (/chart), or None
    auth: str  # Secret of the volume "auth" (/auth), or None
    ca_files: str  # ConfigMap of the volume "ca-files" (/ca-files), or None
    grace_s: int


def plan_from_pod(pod):
    meta, spec = pod["metadata"], pod["spec"]
    container = next((c for c in spec["containers"] if c["name"] == CONTAINER), spec["containers"][0])
    # helm-controller sets plain values only; valueFrom would need the downward API.
    env = dict((e["name"], e.get("value") or "") for e in container.get("env") or () if "valueFrom" not in e)
    volumes = dict((v["name"], v) for v in spec.get("volumes") or ())
    values = []
    for source in ((volumes.get("values") or {}).get("projected") or {}).get("sources") or ():
        secret = source.get("secret")
        if secret:
            values.append(SecretProjection(secret["name"], bool(secret.get("optional")),
                                           [(i["key"], i["path"]) for i in secret.get("items") or ()]))

    def source_name(volume, kind, field):
        return ((volumes.get(volume) or {}).get(kind) or {}).get(field)

    grace = spec.get("terminationGracePeriodSeconds")
    return RunPlan(namespace=meta["namespace"], pod=meta["name"], uid=meta["uid"], image=container.get("image", ""),
                   args=list(container.get("args") or ()), env=env, values=values,
                   content=source_name("content", "configMap", "name"), auth=source_name("auth", "secret", "secretName"),
                   ca_files=source_name("ca-files", "configMap", "name"),
                   grace_s=DEFAULT_GRACE_S if grace is None else int(grace))


def project(projections, read):
    """The files of a projected volume: path -> bytes. ``read(name)`` gives a Secret's
    decoded data, or None when it does not exist. Like the kubelet: a missing optional
    Secret or key is skipped, a missing required one fails the mount."""
    files = {}
    for projection in projections:
        data = read(projection.name)
        if data is None:
            if projection.optional:
                continue
            raise MountError('secret "%s" not found' % projection.name)
        for key, path in projection.items or [(k, k) for k in sorted(data)]:
            if key in data:
                files[path] = data[key]
            elif not projection.optional:
                raise MountError('couldn\'t find key %s in Secret %s' % (key, projection.name))
    return files


def values_files(paths):
    """The values files, in the order of the script's ``for VALUES_FILE in /config/*.yaml``:
    top-level, not hidden, ``.yaml``, sorted bytewise (the image's C locale)."""
    return sorted(p for p in paths if "/" not in p and not p.startswith(".") and p.endswith(".yaml"))


def decoded_data(data):
    """A Secret's ``data`` (base64 strings, as the API returns them) -> key -> bytes."""
    return dict((k, base64.b64decode(v)) for k, v in (data or {}).items())


# ------------------------------------------------------------------ the entry script's decisions
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def go_duration_seconds(text):
    """Seconds in a Go duration (``5m0s``: what helm-controller writes into TIMEOUT)."""
    total, position = 0.0, 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if not text or position != len(text):
        raise ValueError("not a Go duration: %r" % text)
    return total


def helm_guard_seconds(env):
    """How long the lab lets one helm command run: its --timeout (or helm's default) and a margin."""
    try:
        timeout = go_duration_seconds(env["TIMEOUT"]) if env.get("TIMEOUT") else HELM_TIMEOUT_S
    except ValueError:
        timeout = HELM_TIMEOUT_S  # helm itself rejects the flag at once
    return timeout + GUARD_MARGIN_S


def api_endpoint(server_url):
    """host:port of the API server a kubeconfig names (what %{KUBERNETES_API}% stands for)."""
    return urllib.parse.urlsplit(server_url).netloc


@dataclasses.dataclass(frozen=True)
class Release:
    """What ``helm status --output json`` says: empty strings when there is no release."""
    status: str = ""
    revision: str = ""
    apply_method: str = ""


def release_of(status_json):
    try:
        answer = json.loads(status_json)
    except ValueError:
        return Release()
    if not isinstance(answer, dict):
        return Release()

    def text(value):
        return "" if value is None else str(value)
    return Release(text((answer.get("info") or {}).get("status")), text(answer.get("version")),
                   text(answer.get("apply_method")))


def ssa_args(revision, apply_method, server_side, force_conflicts):
    """The script's server-side-apply flags (helm v4). ``auto`` means true for a first
    install. The script's test for dropping --force-conflicts when SERVER_SIDE is false
    compares with the text ``^false$`` (never equal), so only ``auto`` without a
    server-side-applied release drops it; this keeps what the pod does."""
    if not revision and server_side == "auto":
        server_side = "true"
    if force_conflicts == "true" and server_side == "auto" and apply_method != "ssa":
        force_conflicts = "false"
    flags = []
    if server_side:
        flags.append("--server-side=" + server_side)
    if force_conflicts:
        flags.append("--force-conflicts=" + force_conflicts)
    return flags


@dataclasses.dataclass(frozen=True)
class Step:
    """One thing the entry script does. ``echo``: a line on stdout (the container log);
    ``term``: a line in /dev/termination-log; ``helm``: a helm command (``stdin`` fed to it;
    ``fatal``: under errexit its failure ends the script with its status); ``set-status``:
    the helm-set-status plugin; ``mapkubeapis``: the helm-mapkubeapis plugin; ``exit``:
    the end (``code`` None: the status of the last helm command)."""
    kind: str
    text: str = ""
    argv: tuple = ()
    stdin: bytes = None
    fatal: bool = False
    code: int = None


def echo(text):
    return Step("echo", text=text)


def term(text):
    return Step("term", text=text)


def helm(*argv, stdin=None, fatal=False):
    return Step("helm", argv=tuple(argv), stdin=stdin, fatal=fatal)


def exit_with(code=None):
    return Step("exit", code=code)


def chart_flags(env, ca_file):
    """CA_FILE_ARG INSECURE_TLS_ARG PLAIN_HTTP_ARG TIMEOUT_ARG LABELS_ARG: what every
    install and upgrade carries after the chart, in the script's order."""
    flags = tls_flags(env, ca_file)
    if env.get("PLAIN_HTTP") == "true":
        flags.append("--plain-http")
    if env.get("TIMEOUT"):
        flags += ["--timeout", env["TIMEOUT"]]
    if env.get("CONFIG_HASH"):
        flags += ["--labels", "%s=%s" % (CONFIG_HASH_LABEL, env["CONFIG_HASH"])]
    return flags


def tls_flags(env, ca_file):
    flags = ["--ca-file", ca_file] if ca_file else []
    if env.get("INSECURE_SKIP_TLS_VERIFY") == "true":
        flags.append("--insecure-skip-tls-verify")
    return flags


def repo_steps(env, chart, ca_file, auth, auth_dir, errexit):
    """helm_repo_init: a chart given as an http(s) URL needs no repository; a ``stable/``
    chart gets the stable repository; with REPO set, the repository is added under the
    chart's name (with the auth Secret's username/password or client certificate) and
    updated. ``auth``: the /auth file names present -> content. ``errexit``: whether the
    script still runs under ``set -e`` (it stops doing so once chart content was decoded),
    so a failing ``repo add`` ends it."""
    if re.search(r"https?://", chart):
        return [echo("chart path is a url, skipping repo update"), helm("repo", "remove", "stable")]
    tls = tls_flags(env, ca_file)
    steps = []
    if chart.startswith("stable/"):
        steps += [helm("repo", "add", *tls, "stable", env.get("STABLE_REPO_URL", ""), fatal=errexit),
                  helm("repo", "update", fatal=errexit)]
    if env.get("REPO"):
        name = env.get("NAME", "").split("/", 1)[0]
        passing = ["--pass-credentials"] if env.get("AUTH_PASS_CREDENTIALS") == "true" else []
        if "username" in auth and "password" in auth:
            username = auth["username"].decode().rstrip("\n")
            add = helm("repo", "add", *tls, *passing, "--username", username, "--password-stdin", name, env["REPO"],
                       stdin=auth["password"], fatal=errexit)
        elif "tls.crt" in auth and "tls.key" in auth:
            add = helm("repo", "add", *tls, *passing, "--cert-file", os.path.join(auth_dir, "tls.crt"),
                       "--key-file", os.path.join(auth_dir, "tls.key"), name, env["REPO"], fatal=errexit)
        else:
            add = helm("repo", "add", *tls, name, env["REPO"], fatal=errexit)
        steps += [add, helm("repo", "update", fatal=errexit)]
    return steps


def release_steps(args, env, release, chart, flags, values, server_side_apply):
    """helm_update: what to do given the container args (``install ...`` or ``delete``),
    the env, the current release, the chart (name, URL or decoded file), ``chart_flags``,
    the values files in order, and whether helm has server-side apply (v4)."""
    name, target = env.get("NAME", ""), env.get("TARGET_NAMESPACE", "")
    values_args = [a for path in values for a in ("--values", path)]

    def ssa(revision, apply_method):
        if not server_side_apply:
            return []
        return ssa_args(revision, apply_method, env.get("SERVER_SIDE", ""), env.get("FORCE_CONFLICTS", ""))

    def install(ssa_flags):
        return helm(*args, name, chart, *flags, *ssa_flags, *values_args)

    def upgrade():
        return helm("upgrade", *args[1:], name, chart, *flags, *ssa(release.revision, release.apply_method),
                    *values_args)

    def revision_mismatch():
        expected = env.get("EXPECTED_RELEASE_REVISION", "")
        if not expected or expected == release.revision:
            return []
        text = "Current release revision %s does not match expected revision %s" % (release.revision, expected)
        return [term(text), echo(text), exit_with(0)]

    if args[:1] == ["delete"]:
        if not release.revision:
            return [term("No helm chart installed; nothing to delete"), exit_with(0)]
        return revision_mismatch() or [term("Uninstalling helm chart"),
                                       helm("uninstall", name, "--namespace", target, "--wait"), exit_with(0)]
    current = ssa(release.revision, release.apply_method)
    if not release.revision and not release.status:
        return [term("Installing helm chart"), install(current), exit_with()]
    mismatch = revision_mismatch()
    if mismatch:
        return mismatch
    steps, status = [], release.status
    if status in RESET_STATUSES:
        steps += [echo("Previous helm job was interrupted, updating status from %s to failed" % status),
                  term("Resetting helm release status from '%s' to 'failed'" % status), Step("set-status", text="failed")]
        if status in RETRY_UPGRADE_STATUSES:
            return steps + [term("Retrying upgrade of helm chart"), echo("Retrying upgrade of %s" % name), upgrade(),
                            exit_with()]
        status = "failed"
    if status == "deployed":
        return steps + [echo("Already installed %s" % name), Step("mapkubeapis"), term("Upgrading helm chart"),
                        echo("Upgrading %s" % name), upgrade(), exit_with()]
    if status in FAILED_STATUSES:
        policy = env.get("FAILURE_POLICY") or "reinstall"
        if policy == "abort":
            text = ("Release status is '%s' and failure policy is '%s'; waiting for operator intervention"
                    % (status, env.get("FAILURE_POLICY", "")))
            return steps + [term(text), echo(text), exit_with(1)]
        if policy == "reinstall":
            return steps + [term("Uninstalling %s helm chart" % status),
                            helm("uninstall", name, "--namespace", target, "--wait"), echo("Deleted"),
                            term("Installing helm chart"), install(ssa("", "")), exit_with()]
        if policy == "retry":
            # The script ends this branch with exit 0 whatever the upgrade did.
            return steps + [term("Upgrading %s from failed state" % name), upgrade(), exit_with(0)]
        text = "Unknown failure policy '%s'" % env.get("FAILURE_POLICY", "")
        return steps + [term(text), echo(text), exit_with(1)]
    return steps + [term("Installing helm chart"), install(current), exit_with()]


def termination_message(term_lines):
    """The termination message a kubelet reports: what the entry script wrote to
    /dev/termination-log (its own lines, never helm's error: that is in the container's
    log), the last 4096 bytes."""
    text = "".join(line + "\n" for line in term_lines)
    return text.encode()[-TERMINATION_MESSAGE_MAX:].decode(errors="ignore")


# ------------------------------------------------------------------ the kubelet's status
def container_status(plan, restarts, state, last_state, ready):
    return {"name": CONTAINER, "image": plan.image, "ready": ready, "started": "running" in state,
            "restartCount": restarts, "state": state, "lastState": last_state or {}}


def terminated(exit_code, message, started_at, finished_at):
    return {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                           "message": message, "startedAt": started_at, "finishedAt": finished_at}}


def pod_status(phase, ready, container, now, reason=None, start_time=None):
    """A status patch: phase, the pod conditions the kubelet keeps, the container."""
    flag = "True" if ready else "False"
    message = "containers with unready status: [%s]" % CONTAINER if reason == "ContainersNotReady" else None
    conditions = [{"type": "PodScheduled", "status": "True"}, {"type": "Initialized", "status": "True"}]
    conditions += [{"type": kind, "status": flag, "reason": reason, "message": message, "lastTransitionTime": now}
                   for kind in ("Ready", "ContainersReady")]
    status = {"phase": phase, "conditions": conditions, "containerStatuses": [container]}
    if start_time:
        status["startTime"] = start_time
    return {"status": status}


def running_status(plan, restarts, last_state, now, first_start):
    return pod_status("Running", True, container_status(plan, restarts, {"running": {"startedAt": now}}, last_state, True),
                      now, start_time=now if first_start else None)


def crash_loop_status(plan, restarts, last_state, backoff_s, now):
    message = "back-off %ds restarting failed container=%s pod=%s_%s(%s)" % (
        backoff_s, CONTAINER, plan.pod, plan.namespace, plan.uid)
    state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
    return pod_status("Running", False, container_status(plan, restarts, state, last_state, False), now,
                      reason="ContainersNotReady")


def creating_status(plan, restarts, last_state, phase, now):
    state = {"waiting": {"reason": "ContainerCreating"}}
    return pod_status(phase, False, container_status(plan, restarts, state, last_state, False), now,
                      reason="ContainersNotReady")


def finished_status(plan, restarts, final_state, last_state, now):
    phase = "Succeeded" if final_state["terminated"]["exitCode"] == 0 else "Failed"
    return pod_status(phase, False, container_status(plan, restarts, final_state, last_state, False), now,
                      reason="PodCompleted")


# ------------------------------------------------------------------ I/O: one pod's life
class PodLog(object):
    """The container log in CRI format (``<RFC3339Nano> <stream> F <line>``), the attempt
    before kept as the previous log."""

    def __init__(self, directory, plan):
        base = os.path.join(directory, "%s_%s_%s" % (plan.namespace, plan.pod, plan.uid))
        self.path, self.previous = base + ".log", base + ".previous.log"
        self._lock = threading.Lock()
        for path in (self.path, self.previous):
            open(path, "a").close()

    def new_attempt(self):
        with self._lock:
            os.replace(self.path, self.previous)
            open(self.path, "w").close()

    def write(self, stream, line):
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with self._lock, open(self.path, "a") as handle:
            handle.write("%s %s F %s\n" % (stamp, stream, line))


@dataclasses.dataclass
class Mounts:
    """A run's folder: the pod's volumes and its emptyDirs (home, /tmp) as local folders."""
    root: str
    values: list  # local paths of the values files, in the script's order
    auth: dict  # /auth file name -> content

    def path(self, volume, *names):
        return os.path.join(self.root, volume, *names)

    def display(self, text):
        """A command line as the pod would show it (its mount paths, not the run folder)."""
        for volume, mount in MOUNTS.items():
            text = text.replace(self.path(volume), mount)
        return text


class PodWorker(object):
    """One pod, from scheduled to removed: runs the entry script until it succeeds
    (restarting it with back-off), then waits for the pod's deletion and completes it."""

    def __init__(self, runner, pod):
        self.runner = runner
        self.plan = plan_from_pod(pod)
        status = pod.get("status") or {}
        self.phase = status.get("phase")
        statuses = status.get("containerStatuses") or [{}]
        self.restarts = statuses[0].get("restartCount", 0)
        self.last_state = statuses[0].get("lastState") or {}
        self.started = bool(status.get("startTime"))
        self.final_state = None  # the container's terminated state once the pod is terminal or killed
        self.deleting = threading.Event()
        self.gone = False
        self.kill_at = None
        self.log = None
        self.thread = threading.Thread(target=self._life, daemon=True, name="pod-%s" % self.plan.pod)

    @property
    def ref(self):
        return "%s/%s" % (self.plan.namespace, self.plan.pod)

    # -------------------------------------------------------- events from the runner
    def pod_deleting(self, pod):
        if self.kill_at is None:
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            self.kill_at = time.monotonic() + (self.plan.grace_s if grace is None else grace)
        self.deleting.set()

    def pod_gone(self):
        self.gone = True
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.plan.grace_s
        self.deleting.set()

    def kill_due(self):
        return self.kill_at is not None and time.monotonic() >= self.kill_at

    # -------------------------------------------------------- the pod's life
    def _life(self):
        try:
            if self.phase not in TERMINAL_PHASES:
                self._run_until_success()
            self.deleting.wait()
            if not self.gone:
                self._complete_deletion()
        except Exception as exc:  # keep the runner alive; the pod shows where it stopped
            print("%s: %r" % (self.ref, exc), file=sys.stderr, flush=True)
        finally:
            self.runner.forget(self.plan.uid)

    def _run_until_success(self):
        backoff = BACKOFF_INITIAL_S
        while not self.deleting.is_set():
            mounts = self._mount()
            if mounts is None:
                return
            try:
                exit_code, message, started_at = self._attempt(mounts)
            finally:
                shutil.rmtree(mounts.root, ignore_errors=True)
            state = terminated(exit_code, message, started_at, now_rfc3339())
            if self.deleting.is_set() or exit_code == 0:
                self.final_state = state
                self._patch(finished_status(self.plan, self.restarts, state, self.last_state, now_rfc3339()))
                return
            self.last_state = state
            self.restarts += 1
            self._patch(crash_loop_status(self.plan, self.restarts, self.last_state, backoff, now_rfc3339()))
            if self.deleting.wait(backoff):
                return
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _complete_deletion(self):
        """What the kubelet does with a deleted pod once its container stopped: a terminal
        phase, then the final delete (the Job controller removes its finalizer)."""
        if self.phase not in TERMINAL_PHASES and self.final_state is None:
            previous = self.last_state.get("terminated")
            final = {"terminated": dict(previous)} if previous else terminated(
                KILLED_EXIT_CODE, "", now_rfc3339(), now_rfc3339())
            self._patch(finished_status(self.plan, self.restarts, final, None, now_rfc3339()))
        options = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=self.plan.uid))
        self.runner.retry(lambda: self.runner.core.delete_namespaced_pod(
            self.plan.pod, self.plan.namespace, body=options), lambda: self.gone)

    def _patch(self, body):
        self.runner.retry(lambda: self.runner.core.patch_namespaced_pod_status(
            self.plan.pod, self.plan.namespace, body), lambda: self.gone)

    # -------------------------------------------------------- volumes
    def _mount(self):
        """The pod's volumes in a fresh run folder (re-read every attempt, as the kubelet
        refreshes Secret volumes); None when the pod was deleted while they were missing."""
        reported = None
        while not self.deleting.is_set():
            root = os.path.join(self.runner.workdir, "helm-runs", "%s_%s_%d" % (
                self.plan.namespace, self.plan.pod, self.restarts))
            shutil.rmtree(root, ignore_errors=True)
            try:
                return self._write_volumes(root)
            except Exception as exc:  # MountError, or the API server unreachable: the kubelet retries
                shutil.rmtree(root, ignore_errors=True)
                text = "MountVolume.SetUp failed: %s" % (exc.reason if isinstance(exc, client.ApiException) else exc)
                if text != reported:
                    say("%s: %s" % (self.ref, text))
                    phase = "Running" if self.started else "Pending"
                    self._patch(creating_status(self.plan, self.restarts, self.last_state, phase, now_rfc3339()))
                    reported = text
            self.deleting.wait(MOUNT_RETRY_S)
        return None

    def _write_volumes(self, root):
        runner, plan = self.runner, self.plan

        def secret_data(name):
            secret = runner.read_or_none(runner.core.read_namespaced_secret, name, plan.namespace)
            return None if secret is None else decoded_data(secret.get("data"))

        def config_map_files(name):
            config_map = runner.read_or_none(runner.core.read_namespaced_config_map, name, plan.namespace)
            if config_map is None:
                raise MountError('configmap "%s" not found' % name)
            files = dict((k, v.encode()) for k, v in (config_map.get("data") or {}).items())
            files.update((k, base64.b64decode(v)) for k, v in (config_map.get("binaryData") or {}).items())
            return files

        volumes = {"values": project(plan.values, secret_data)}
        if plan.content:
            volumes["content"] = config_map_files(plan.content)
        if plan.auth:
            auth = secret_data(plan.auth)
            if auth is None:
                raise MountError('secret "%s" not found' % plan.auth)
            volumes["auth"] = auth
        if plan.ca_files:
            volumes["ca-files"] = config_map_files(plan.ca_files)
        for volume in ("home", "tmp", "values", "content", "auth", "ca-files"):
            os.makedirs(os.path.join(root, volume), exist_ok=True)
        for volume, files in volumes.items():
            for path, data in files.items():
                local = os.path.join(root, volume, path)
                os.makedirs(os.path.dirname(local), exist_ok=True)
                with open(local, "wb") as handle:
                    handle.write(data)
        values = [os.path.join(root, "values", p) for p in values_files(volumes["values"])]
        return Mounts(root=root, values=values, auth=volumes.get("auth", {}))

    # -------------------------------------------------------- one attempt
    def _attempt(self, mounts):
        """Starts the container and runs the entry script; returns exit code, termination
        message and start time."""
        if self.log is None:
            self.log = PodLog(os.path.join(self.runner.workdir, "podlogs"), self.plan)
            self.runner.publish_logs(self.plan, self.log)
        else:
            self.log.new_attempt()
        started_at = now_rfc3339()
        self._patch(running_status(self.plan, self.restarts, self.last_state, started_at, not self.started))
        self.started = True
        entry = Entry(self, mounts)
        try:
            exit_code = entry.run()
        except (OSError, ValueError) as exc:  # a file or base64 -d failing: bash reports it and exits 1
            entry.out("stderr", "entry: %s" % exc)
            exit_code, entry.error_line = 1, str(exc)
        error_line = entry.error_line if exit_code else None
        say("%s: %s -> rc %d%s" % (self.ref, entry.decisive or "entry", exit_code, ": " + error_line if error_line else ""))
        return exit_code, termination_message(entry.term_lines), started_at


class Entry(object):
    """The klipper-helm entry script for one attempt: environment, chart, repository,
    release status, then the steps ``release_steps`` chooses."""

    def __init__(self, worker, mounts):
        self.worker, self.mounts, self.plan = worker, mounts, worker.plan
        runner = worker.runner
        self.term_lines = []
        self.error_line = None  # last stderr line of the last helm command
        self.decisive = None  # the last helm command (or script line), for the runner's log
        self.killed = False
        home = mounts.path("home")
        self.script_env = dict(IMAGE_ENV, **self.plan.env)  # what the script sees
        self.env = dict(self.script_env)  # what helm runs with: the pod's identity is the lab's
        self.env.update(PATH=os.environ.get("PATH", "/usr/bin:/bin"), HOME=home,
                        HELM_CACHE_HOME=os.path.join(home, ".cache", "helm"),
                        HELM_CONFIG_HOME=os.path.join(home, ".config", "helm"),
                        HELM_DATA_HOME=os.path.join(home, ".local", "share", "helm"),
                        KUBECONFIG=runner.kubeconfig, HELM_NAMESPACE=self.plan.namespace, TMPDIR=mounts.path("tmp"))
        self.guard_s = helm_guard_seconds(self.script_env)

    def out(self, stream, line):
        self.worker.log.write(stream, line)

    def run(self):
        env, mounts = self.script_env, self.mounts
        name = env.get("NAME", "")
        if env.get("HELM_VERSION") == "v2":
            text = "Helm v2 is EOL effective 2020-11-13; upgrade your chart to helm v3"
            return self._steps([term(text), echo(text), exit_with(64)])
        chart = env.get("CHART", "").replace(KUBERNETES_API, self.worker.runner.api_endpoint)
        ca_file = self._ca_bundle()
        errexit = True
        encoded = mounts.path("content", "%s.tgz.base64" % name)
        if os.path.isfile(encoded):
            chart = mounts.path("tmp", "%s.tgz" % name)
            with open(encoded, "rb") as source, open(chart, "wb") as target:
                target.write(base64.b64decode(source.read(), validate=False))
            errexit = False
        if self.plan.args[:1] != ["delete"]:
            code = self._steps(repo_steps(env, chart, ca_file, mounts.auth, mounts.path("auth"), errexit))
            if code is not None:
                return code
        target = env.get("TARGET_NAMESPACE", "")
        _code, status_json = self._helm(("status", "--namespace", target, name, "--output", "json"), capture=True)
        if self.killed:
            return KILLED_EXIT_CODE
        release = release_of(status_json)
        steps = release_steps(self.plan.args, env, release, chart, chart_flags(env, ca_file), mounts.values,
                              self.worker.runner.helm_major >= 4)
        return self._steps(steps)

    def _ca_bundle(self):
        """/tmp/ca-file.pem from /config/ca-file.pem (the chart's repoCA) and /ca-files/*."""
        sources = [self.mounts.path("values", "ca-file.pem")] if os.path.isfile(
            self.mounts.path("values", "ca-file.pem")) else []
        sources += sorted(os.path.join(self.mounts.path("ca-files"), n) for n in os.listdir(self.mounts.path("ca-files"))
                          if not n.startswith("."))
        if not sources:
            return None
        bundle = self.mounts.path("tmp", "ca-file.pem")
        with open(bundle, "wb") as target:
            for path in sources:
                with open(path, "rb") as source:
                    target.write(b"\n" + source.read())
        return bundle

    def _steps(self, steps):
        """Runs steps; returns the script's exit code once it ends, None if the steps ran out."""
        code = 0
        for step in steps:
            if step.kind == "echo":
                self.out("stdout", step.text)
                self.decisive = step.text
            elif step.kind == "term":
                self.term_lines.append(step.text)
                self.decisive = step.text
            elif step.kind == "helm":
                code = self._helm(step.argv, stdin=step.stdin)[0]
                if self.killed:
                    return KILLED_EXIT_CODE
                if step.fatal and code != 0:
                    return code
            elif step.kind == "set-status":
                self._set_status(step.text)
            elif step.kind == "mapkubeapis":
                name, target = self.script_env.get("NAME", ""), self.script_env.get("TARGET_NAMESPACE", "")
                self.out("stderr", "+ helm mapkubeapis %s --namespace %s" % (name, target))
                self.out("stdout", "lab: the helm-mapkubeapis plugin is not installed; skipped")
            elif step.kind == "exit":
                if step.code is None:
                    return code
                self.error_line = None  # the script's own verdict, not helm's
                return step.code
        return None

    def _helm(self, argv, stdin=None, capture=False):
        """Runs one helm command, its output into the container log (stdout kept instead
        when ``capture``); returns (exit code, stdout if captured)."""
        shown = self.mounts.display("helm " + shlex.join(argv))
        self.out("stderr", "+ " + shown)
        process = subprocess.Popen([self.worker.runner.helm] + list(argv), env=self.env, cwd=self.mounts.path("home"),
                                   stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        sched.keep_nice(process.pid)
        captured, errors = [], []
        readers = [threading.Thread(target=self._pump, args=(process.stdout, "stdout", captured if capture else None)),
                   threading.Thread(target=self._pump, args=(process.stderr, "stderr", errors))]
        for reader in readers:
            reader.start()
        if stdin is not None:
            try:
                process.stdin.write(stdin)
                process.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + self.guard_s
        while True:
            try:
                code = process.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                overdue = time.monotonic() >= deadline
                if overdue or self.worker.kill_due():
                    try:
                        os.killpg(process.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    process.wait()
                    self.killed = not overdue
                    code = KILLED_EXIT_CODE
                    if overdue:
                        self.out("stderr", "lab: helm ran past %ds; killed" % self.guard_s)
                    break
        for reader in readers:
            reader.join()
        if not capture:
            self.decisive = shown
            self.error_line = next((line for line in reversed(errors) if line.strip()), None)
        return code, "\n".join(captured)

    def _pump(self, pipe, stream, keep):
        for raw in iter(pipe.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            if keep is not None:
                keep.append(line)
            if keep is None or stream == "stderr":
                self.out(stream, line)
        pipe.close()

    def _set_status(self, status):
        """The helm-set-status plugin: the latest release record gets ``status``, in its
        body and its ``status`` label (the one helm-controller reads)."""
        env = self.script_env
        name, target = env.get("NAME", ""), env.get("TARGET_NAMESPACE", "")
        self.out("stderr", "+ helm set-status --namespace %s %s %s" % (target, name, status))
        try:
            self.worker.runner.set_release_status(target, name, status, env.get("HELM_DRIVER") or "secret")
        except Exception as exc:  # the script goes on either way
            self.out("stderr", "Error: %s" % (exc.reason if isinstance(exc, client.ApiException) else exc))


# ------------------------------------------------------------------ I/O: the watch
class Runner(object):
    def __init__(self, api_client, kubeconfig, workdir, helm_binary):
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.kubeconfig = os.path.abspath(kubeconfig)
        self.workdir = os.path.abspath(workdir)
        self.helm = helm_binary
        self.api_endpoint = api_endpoint(api_client.configuration.host)
        version = subprocess.run([helm_binary, "version", "--template", "{{.Version}}"], stdout=subprocess.PIPE,
                                 check=True, universal_newlines=True).stdout.strip()
        self.helm_major = int(re.match(r"v?(\d+)", version).group(1))
        self.workers = {}
        self.seen = set()  # every pod uid ever handled: a stale event never starts a second run
        self.lock = threading.Lock()
        for folder in ("podlogs", "helm-runs"):
            os.makedirs(os.path.join(self.workdir, folder), exist_ok=True)
        say("helm %s (%s); API %s" % (version, "server-side apply" if self.helm_major >= 4 else "client-side apply",
                                      self.api_endpoint))

    def _json(self, obj):
        return self.api.sanitize_for_serialization(obj)

    def read_or_none(self, read, *args):
        try:
            return self._json(read(*args))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def retry(self, call, given_up):
        """Calls the API until it answers (the lab restarts the API server in fault tests);
        a 404 or a refusal ends it, as does ``given_up()``."""
        while True:
            try:
                return call()
            except client.ApiException as exc:
                if exc.status == 404:
                    return None
                if exc.status and exc.status < 500 and exc.status != 429:
                    print("api: %s %s %s" % (exc.status, exc.reason, (exc.body or "")[:400]), file=sys.stderr, flush=True)
                    return None
            except Exception as exc:  # connection refused while the API server restarts
                print("api: %r" % exc, file=sys.stderr, flush=True)
            if given_up():
                return None
            time.sleep(1)

    def publish_logs(self, plan, log):
        """The kwok Logs object that serves the pod's log files for kubectl logs."""
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": plan.pod, "namespace": plan.namespace,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": plan.pod, "uid": plan.uid}]},
                "spec": {"logs": [{"containers": [CONTAINER], "logsFile": log.path, "previousLogsFile": log.previous}]}}

        def create():
            try:
                return self.custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", plan.namespace, "logs", body)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
        self.retry(create, lambda: False)

    def set_release_status(self, namespace, name, status, driver):
        selector = helm_record.selector(name)
        if driver in ("secret", "secrets"):
            objects = self._json(self.core.list_namespaced_secret(
                namespace, label_selector=selector, field_selector="type=" + helm_record.SECRET_TYPE))["items"]
        elif driver in ("configmap", "configmaps"):
            objects = self._json(self.core.list_namespaced_config_map(namespace, label_selector=selector))["items"]
        else:
            raise ValueError("lab: set-status is not played for HELM_DRIVER=%s" % driver)
        record_object = helm_record.latest_record(objects)
        if record_object is None:
            raise LookupError("release: not found")
        if driver.startswith("secret"):
            self.core.patch_namespaced_secret(record_object["metadata"]["name"], namespace,
                                              helm_record.status_patch(record_object, status))
        else:
            record = helm_record.decode_release(record_object["data"]["release"])
            record.setdefault("info", {})["status"] = status
            body = {"metadata": {"labels": helm_record.status_labels(status)},
                    "data": {"release": helm_record.encode_release(record)}}
            self.core.patch_namespaced_config_map(record_object["metadata"]["name"], namespace, body)

    def forget(self, uid):
        with self.lock:
            self.workers.pop(uid, None)

    def handle(self, kind, pod):
        meta = pod["metadata"]
        uid = meta["uid"]
        with self.lock:
            worker = self.workers.get(uid)
            if kind == "DELETED":
                if worker:
                    worker.pod_gone()
                return
            if worker is None:
                if uid in self.seen or not (pod.get("spec") or {}).get("nodeName"):
                    return
                worker = PodWorker(self, pod)
                self.workers[uid] = worker
                self.seen.add(uid)
                if meta.get("deletionTimestamp"):
                    worker.pod_deleting(pod)
                worker.thread.start()
            elif meta.get("deletionTimestamp"):
                worker.pod_deleting(pod)

    def sync(self, pods):
        """A fresh list: every pod handled, and pods that vanished while the watch was down gone."""
        listed = set(p["metadata"]["uid"] for p in pods)
        with self.lock:
            vanished = [w for uid, w in self.workers.items() if uid not in listed]
        for worker in vanished:
            worker.pod_gone()
        for pod in pods:
            self.handle("ADDED", pod)

    def run(self):
        last_error = None
        while True:
            try:
                listing = self.core.list_pod_for_all_namespaces(label_selector=CHART_LABEL)
                self.sync(self._json(listing)["items"])
                for event in watch.Watch().stream(self.core.list_pod_for_all_namespaces, label_selector=CHART_LABEL,
                                                  resource_version=listing.metadata.resource_version,
                                                  timeout_seconds=300):
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.handle(event["type"], event["raw_object"])
            except Exception as exc:  # the API server restarts under us in fault tests; relist
                if repr(exc) != last_error:  # once per outage, not once a second
                    print("watch pods: %r" % exc, file=sys.stderr, flush=True)
                    last_error = repr(exc)
                time.sleep(1)
            else:
                last_error = None


def main(argv=None):
    parser = argparse.ArgumentParser(description="LAB-ONLY kubelet + klipper-helm for helm-controller's Jobs")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--helm", required=True, help="the helm binary")
    args = parser.parse_args(argv)
    configuration = client.Configuration()
    config.load_kube_config(config_file=args.kubeconfig, client_configuration=configuration)
    Runner(client.ApiClient(configuration), args.kubeconfig, args.workdir, args.helm).run()


if __name__ == "__main__":
    main()
