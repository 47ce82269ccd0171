"""The lab: a real Kubernetes control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler) with kwok playing the kubelets of the fleet in
inventories/lab/hosts.yml. Everything binds to 127.0.0.1.

Two modes, chosen at `up` by whether the GPU Operator's upstream source can be had
(tests/lab/upstream.py):

- ``real``: the real GPU Operator (built from its source, run out of cluster with its
  manifests at /opt/gpu-operator in a private mount namespace), the real helm-controller
  (its own HelmChart CRDs), a chart repository on 127.0.0.1 holding the operator's real
  chart, and a job runner that plays the ``helm-install-*``/``helm-delete-*`` pods with
  the real helm;
- ``simulated`` (offline fallback): tests/lab/gpu_operator_sim.py stands in for
  helm-controller and the operator. ``LAB_REQUIRE_UPSTREAM=1`` (CI) makes this an error.

In both, tests/lab/node_agent.py plays what needs a kubelet or a GPU (operand pods and
their init gates, device plugin advertisement, GFD labels, the CUDA sample, faults).

One Lab object manages one work directory (``.lab`` for `make lab-up`, a temporary
one for the integration suite), so a developer's lab and the test lab never collide.
State (mode, ports, pids) lives in ``<workdir>/state.json``; processes run in their own
sessions so they outlive `labctl up`, and `labctl down` ends every one of them.
"""

import concurrent.futures
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import yaml

# Puts the collection on sys.path for labctl run on its own (outside pytest).
import tests.conftest  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_labels as nl
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om
from tests.lab import fleet as fleet_mod
from tests.lab import upstream
from tests.lab import chart_repo
from tests.lab import sched
from tests.lab.pki import ensure_pki

ROOT = fleet_mod.ROOT
HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "reference")
KWOK_LOGS_CRD = os.path.join(HERE, "kwok", "logs-crd.yaml")
# Offline: the CRDs a real install would bring (helm-controller's, the chart's).
SIMULATED_CRDS = (
    os.path.join(REFERENCE, "helm-controller-v0.16.26", "helm.cattle.io_helmcharts.yaml"),
    os.path.join(REFERENCE, "helm-controller-v0.16.26", "helm.cattle.io_helmchartconfigs.yaml"),
    os.path.join(REFERENCE, "gpu-operator-v26.3.2", "nvidia.com_clusterpolicies.yaml"),
)
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
COMPONENTS = {
    # operator-pods after gpu-operator: `down` stops them in reverse, so it never restarts a stopped operator.
    "real": CONTROL_PLANE + ("helm-controller", "chart-repo", "helm-job-runner", "gpu-operator", "operator-pods",
                             "node-agent"),
    "simulated": CONTROL_PLANE + ("node-agent",),
}
# What each component's command line contains (the lab's Python parts run as python -m).
BINARY = {"node-agent": "tests.lab.node_agent", "helm-job-runner": "tests.lab.helm_job_runner",
          "chart-repo": "tests.lab.chart_repo", "operator-pods": "tests.lab.operator_pods"}
SERVICE_CIDR = "10.96.0.0/16"
OPERATOR_NAMESPACE = "gpu-operator"
OPERATOR_VERSION = upstream.OPERATOR_TAG
HELM_LINE = upstream.helm_line()
# The version the offline simulator plays, whatever GPU_OPERATOR_VERSION says (its reference manifests).
SIMULATED_VERSION = "v26.3.2"
# Where a HelmChart gets the chart when the lab has no repository of its own (offline mode
# ignores it; the lab site's inventory reads LAB_CHART_REPO).
PUBLIC_CHART_REPO = "https://helm.ngc.nvidia.com/nvidia"
# A generated scale fleet's inventory, in the lab's work directory (`labctl up --nodes N`).
SCALE_INVENTORY = "hosts.yml"
# Lab set-up writes one object per node (register, label); this many at a time.
SETUP_CONCURRENCY = 8
# `labctl status` lists this many nodes one per line, then says how many there are.
STATUS_NODE_LINES = 30
# kwok renews each node's Lease every quarter of its duration: 40 s is 25 renewals a second
# at a thousand nodes, more API server work than the fleet's GPU layer makes. Fleets above
# LEASE_SCALE_NODES get a longer lease (up to LEASE_MAX_SECONDS), and the node lifecycle
# controller a grace period to match, so the lab's heartbeats stay near 100 nodes' worth.
LEASE_SECONDS = 40
LEASE_SCALE_NODES = 100
LEASE_MAX_SECONDS = 300


def _binary(component):
    return BINARY.get(component, component)


def log(message):
    print("[lab %s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def build(*args):
    """Runs tests/lab/build.sh ARGS (cached builds are instant) and returns its result line."""
    result = subprocess.run(["bash", os.path.join(HERE, "build.sh")] + list(args), stdout=subprocess.PIPE,
                            check=True, universal_newlines=True)
    return result.stdout.strip().splitlines()[-1]


def build_binaries():
    """The control plane's bin folder."""
    return build("control-plane")


def helm_tools(line):
    """The helm-tools folder (helm v4, helm-controller) with the helm of ``line`` in it: helm v3 is built
    only for a lab whose install Jobs run it."""
    return build("helm-tools", *(["v3"] if line == "v3" else []))


def rke2_binary(build_missing=True):
    """The real ``rke2`` binary (tests/lab/upstream.py says from where), built by
    build.sh when a source is there and it is not cached yet (``build_missing``); raises
    upstream.UpstreamMissing naming what was tried."""
    return upstream.resolve_rke2_binary(
        (lambda tree, key: build("rke2", tree, key)) if build_missing else None)


# The files the image copies from the chart into /opt (docker/Dockerfile at the tag: the CRDs the chart's upgrade
# hook applies with manage-crds, tests/lab/operator_pods.py): COPY deployments/<file>.yaml /opt/<file>.yaml.
DOCKERFILE_OPT_COPY = re.compile(r"^COPY\s+(deployments/\S+\.yaml)\s+/opt/(\S+\.yaml)\s*$", re.M)


def opt_chart_files(source):
    """[(file in the source tree, path under /opt)] the image's Dockerfile copies from the chart."""
    with open(os.path.join(source.tree, "docker", "Dockerfile")) as handle:
        return DOCKERFILE_OPT_COPY.findall(handle.read())


def operator_opt_tree(source, key):
    """The image's /opt layout (docker/Dockerfile: assets at /opt/gpu-operator, manifests
    under it, the chart's CRDs beside them, the validator's manifests at /opt/validator/manifests),
    built once per source key in the lab cache, under a lock: make test asks the other lines'
    operators ahead of the suites that run them, and a suite may ask the same one meanwhile."""
    opt = os.path.join(upstream.cache_root(), "gpu-operator-%s" % key, "opt")
    copies = opt_chart_files(source)

    def complete():
        return os.path.isdir(os.path.join(opt, "gpu-operator", "state-driver")) and all(
            os.path.isfile(os.path.join(opt, target)) for _source, target in copies)

    if not complete():
        with upstream.locked(opt, "writing"):
            if not complete():
                _write_opt_tree(source, copies, opt)
    return opt


def _write_opt_tree(source, copies, opt):
    partial = opt + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(os.path.join(source.tree, "assets"), os.path.join(partial, "gpu-operator"))
    shutil.copytree(os.path.join(source.tree, "manifests"), os.path.join(partial, "gpu-operator", "manifests"))
    for path, target in copies:
        os.makedirs(os.path.dirname(os.path.join(partial, target)), exist_ok=True)
        shutil.copy(os.path.join(source.tree, path), os.path.join(partial, target))
    validator_manifests = os.path.join(source.tree, "validator", "manifests")
    if os.path.isdir(validator_manifests):
        shutil.copytree(validator_manifests, os.path.join(partial, "validator", "manifests"))
    shutil.rmtree(opt, ignore_errors=True)
    os.rename(partial, opt)


HELMCHART_LABEL = "helmcharts.helm.cattle.io/chart"


# kwok's stages that move a pod through its life (stages.yaml): kwok must leave the pods that
# the node agent or the job runner plays out of each of them.
POD_LIFE_STAGES = ("pod-ready", "pod-ready-again", "pod-complete", "pod-fail-lab")


def operand_pod_exclusions():
    """kwok Stage selector terms that match no operand pod (by the operand model's pod
    selectors), so kwok leaves those pods to the node agent."""
    by_key = {}
    for operand in om.OPERANDS:
        key, value = operand.pod_selector
        by_key.setdefault(key, []).append(value)
    return [{"key": '.metadata.labels["%s"]' % key, "operator": "NotIn", "values": sorted(values)}
            for key, values in sorted(by_key.items())]


class LabError(RuntimeError):
    pass


class Lab(object):
    def __init__(self, workdir=None, fleet_file=None, bin_dir=None, mode=None, nodes=None, operator_version=None,
                 helm=None):
        """``mode``: "simulated" runs the offline simulator even where the upstream source
        is present (the conformance suite compares the two); None decides by the source.
        ``operator_version``: the GPU Operator version `up` starts (GPU_OPERATOR_VERSION's by
        default); a chart upgrade switches the running one (``switch_operator``).
        ``nodes``: a generated fleet of that many nodes (fleet.write_scale_inventory, into
        ``<workdir>/hosts.yml``, written at up); 0 the lab inventory; None (and no
        ``fleet_file``) the fleet this work directory's lab was started with.
        ``helm``: the helm line its install Jobs run, "v4" or "v3" (LAB_HELM's by default)."""
        self.workdir = os.path.abspath(workdir or os.path.join(ROOT, ".lab"))
        self.state_file = os.path.join(self.workdir, "state.json")
        self.nodes = nodes
        if nodes:
            self.fleet_file = os.path.join(self.workdir, SCALE_INVENTORY)
        elif fleet_file or nodes == 0:
            self.fleet_file = fleet_file or fleet_mod.DEFAULT_FLEET
        else:
            self.fleet_file = self.state().get("fleet_file") or fleet_mod.DEFAULT_FLEET
        self._bin_dir = bin_dir
        self.kubeconfig = os.path.join(self.workdir, "kubeconfig")
        self.logs_dir = os.path.join(self.workdir, "logs")
        self._children = {}
        self._components_checked = 0.0
        self._api = None
        self._mode = mode
        self.start_version = operator_version or OPERATOR_VERSION
        self.helm = helm or HELM_LINE
        if self.helm not in upstream.HELM_LINES:
            raise LabError("helm=%s: the lab runs helm %s" % (self.helm, " or ".join(upstream.HELM_LINES)))

    # ------------------------------------------------------------ state
    @property
    def bin_dir(self):
        if self._bin_dir is None:
            self._bin_dir = self.state().get("bin") or build_binaries()
        return self._bin_dir

    def state(self):
        try:
            with open(self.state_file) as handle:
                return json.load(handle)
        except (IOError, ValueError):
            return {}

    def _save_state(self, state):
        tmp = self.state_file + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(state, handle, indent=2, sort_keys=True)
        os.replace(tmp, self.state_file)

    @staticmethod
    def _alive(pid, binary):
        if not pid:
            return False
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                cmdline = handle.read().split(b"\0")
        except IOError:
            return False
        try:
            with open("/proc/%d/stat" % pid) as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return False
        except (IOError, IndexError):
            return False
        return any(binary.encode() in part for part in cmdline)

    @property
    def mode(self):
        """"real" (the GPU Operator, helm-controller and helm) or "simulated"; None before up."""
        return self.state().get("mode")

    def components(self):
        return COMPONENTS.get(self.mode or "simulated")

    def processes(self):
        """{component: pid or None} for the components this lab started."""
        pids = self.state().get("pids", {})
        return dict((c, pids.get(c) if self._alive(pids.get(c), _binary(c)) else None) for c in self.components())

    def env(self):
        """What a subprocess talking to this lab needs: its kubeconfig (as kubernetes.core
        and kubectl read it) and the chart repository the lab site's HelmChart points at."""
        return {"K8S_AUTH_KUBECONFIG": self.kubeconfig, "KUBECONFIG": self.kubeconfig,
                "LAB_CHART_REPO": self.chart_repo_url(), "LAB_INVENTORY": self.fleet_file,
                upstream.VERSION_ENV: self.operator_version(),
                # What make's SITE=lab steps read (the Makefile's SITE_ENV): this lab's, not .lab's.
                "LAB_" + upstream.VERSION_ENV: self.operator_version()}

    def operator_version(self):
        """The GPU Operator version this lab runs: the real one it was started with, or the one the simulator
        plays (v26.3.2: its manifests are that release's, tests/lab/reference)."""
        state = self.state()
        if state.get("mode") == "simulated":
            return SIMULATED_VERSION
        return state.get("operator_version") or OPERATOR_VERSION

    def operator_build(self, version, clone=True):
        """The real operator of ``version`` built (or found in the cache) with its /opt tree: the
        state keys of a running operator. Raises upstream.UpstreamMissing without its source."""
        source = upstream.resolve_operator_source(version, clone=clone)
        key = source.key
        return {"operator_bin": build("gpu-operator", source.tree, key, version),
                "operator_opt": operator_opt_tree(source, key), "operator_source": source.origin,
                "operator_version": version, "operator_crds": source.crd_files}

    def operator_opt(self, version):
        """The /opt tree of ``version``'s image (what its upgrade hook reads), without building the binary."""
        source = upstream.resolve_operator_source(version)
        return operator_opt_tree(source, source.key)

    def switch_operator(self, version):
        """LAB-ONLY: the operator Deployment's pod now runs ``version``'s image (a chart upgrade or
        rollback): the operator process stops and that version's binary starts with its /opt tree,
        built on first need (minutes) and cached per version. Called by tests/lab/operator_pods.py."""
        if self.mode != "real":
            raise LabError("switch_operator needs the real operator (lab mode %s)" % self.mode)
        built = self.operator_build(version)
        self._stop("gpu-operator", self.state()["pids"].get("gpu-operator"))
        state = self.state()
        state.update(built)
        self._save_state(state)
        self._start_operator()

    def chart_repo_url(self):
        return self.state().get("chart_repo") or PUBLIC_CHART_REPO

    def is_up(self):
        procs = self.processes()
        return all(procs.values()) and self._apiserver_ready(timeout=2)

    # ------------------------------------------------------------ processes
    def _spawn(self, component, argv, env=None):
        """Starts ``argv`` in its own session, output to logs/<component>.log."""
        os.makedirs(self.logs_dir, exist_ok=True)
        out = open(os.path.join(self.logs_dir, component + ".log"), "ab")
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=ROOT, env=full_env, start_new_session=True)
        sched.keep_nice(proc.pid)
        out.close()
        self._children[component] = proc
        state = self.state()
        state.setdefault("pids", {})[component] = proc.pid
        state.setdefault("argv", {})[component] = argv
        self._save_state(state)
        return proc

    def _stop(self, component, pid, grace=10.0):
        binary = _binary(component)
        if not self._alive(pid, binary):
            self._reap(component)
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except OSError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self._alive(pid, binary):
            self._reap(component)
            time.sleep(0.05)
        if self._alive(pid, binary):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            time.sleep(0.2)
        self._reap(component)
        if self._alive(pid, binary):
            raise LabError("%s (pid %d) did not stop" % (component, pid))

    def _reap(self, component):
        proc = self._children.get(component)
        if proc is not None and proc.poll() is not None:
            self._children.pop(component, None)

    def _ssl_context(self):
        pki = os.path.join(self.workdir, "pki")
        context = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        context.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        return context

    def _apiserver_ready(self, timeout=1.0):
        port = self.state().get("ports", {}).get("apiserver")
        if not port:
            return False
        try:
            with urllib.request.urlopen("https://127.0.0.1:%d/readyz" % port, context=self._ssl_context(),
                                        timeout=timeout) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    def _wait_for(self, what, predicate, timeout, component=None, why=None):
        """Start-up waits for local processes (the lab's own plumbing, not a product wait).
        ``why()``, when given, says at the timeout what was still missing; the component's
        log tail comes with it, as the lab's work directory may be gone when it is read."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if component and self._exited(component):
                raise LabError("%s exited during start-up (%s); see %s:\n%s" % (
                    component, self._exited(component), self._log_path(component), self._log_tail(component)))
            time.sleep(0.1)
        message = "%s not ready after %ss; logs in %s" % (what, timeout, self.logs_dir)
        if why is not None:
            message += "\nstill missing: %s" % why()
        if component:
            message += "\n%s log, last lines:\n%s" % (component, self._log_tail(component))
        raise LabError(message)

    def _exited(self, component):
        """How a component this Lab started has ended ("exit status N"), or None while it runs.
        The child's own Popen decides when this process started it; /proc otherwise."""
        proc = self._children.get(component)
        if proc is not None:
            code = proc.poll()
            return None if code is None else "exit status %s" % code
        pid = self.state().get("pids", {}).get(component)
        return None if self._alive(pid, _binary(component)) else "not running"

    def _log_path(self, component):
        return os.path.join(self.logs_dir, component + ".log")

    def _log_tail(self, component, lines=15):
        try:
            with open(self._log_path(component), errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except IOError:
            return "(no log)"

    def _etcd_ready(self):
        port = self.state()["ports"]["etcd"]
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1) as response:
                return b'"health":"true"' in response.read()
        except (urllib.error.URLError, OSError):
            return False

    def _start_etcd(self):
        ports = self.state()["ports"]
        data = os.path.join(self.workdir, "etcd-data")
        self._spawn("etcd", [
            os.path.join(self.bin_dir, "etcd"), "--name", "lab", "--data-dir", data,
            "--listen-client-urls", "http://127.0.0.1:%d" % ports["etcd"],
            "--advertise-client-urls", "http://127.0.0.1:%d" % ports["etcd"],
            "--listen-peer-urls", "http://127.0.0.1:%d" % ports["etcd_peer"],
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ports["etcd_peer"],
            "--initial-cluster", "lab=http://127.0.0.1:%d" % ports["etcd_peer"],
            "--listen-metrics-urls", "http://127.0.0.1:%d" % ports["etcd_metrics"],
            # A throw-away store: fsync buys nothing here and costs seconds per test.
            "--unsafe-no-fsync", "--quota-backend-bytes", str(2 * 1024 ** 3), "--log-level", "warn",
        ])
        self._wait_for("etcd", self._etcd_ready, 60, "etcd")

    def _apiserver_argv(self):
        ports = self.state()["ports"]
        pki = os.path.join(self.workdir, "pki")
        return [
            os.path.join(self.bin_dir, "kube-apiserver"),
            "--etcd-servers", "http://127.0.0.1:%d" % ports["etcd"],
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(ports["apiserver"]),
            "--tls-cert-file", os.path.join(pki, "apiserver.crt"),
            "--tls-private-key-file", os.path.join(pki, "apiserver.key"),
            "--client-ca-file", os.path.join(pki, "ca.crt"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", os.path.join(pki, "sa.pub"),
            "--service-account-signing-key-file", os.path.join(pki, "sa.key"),
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "Node,RBAC",
            # The GPU Operator's operands are privileged pods, as on a real site.
            "--allow-privileged=true",
            # kwok serves the kubelet API (logs) for every node on 127.0.0.1.
            "--kubelet-preferred-address-types", "InternalIP",
            "--endpoint-reconciler-type", "none",
            "--enable-priority-and-fairness=false",
            "--v", "1",
        ]

    def _start_apiserver(self):
        self._spawn("kube-apiserver", self._apiserver_argv())
        self._wait_for("kube-apiserver /readyz", self._apiserver_ready, 120, "kube-apiserver")

    def restart_apiserver(self, down_seconds=1.0):
        """Fault switch: stop kube-apiserver, keep it down ``down_seconds``, start it again."""
        pid = self.state().get("pids", {}).get("kube-apiserver")
        self._stop("kube-apiserver", pid)
        time.sleep(down_seconds)
        self._start_apiserver()
        self._api = None

    def api_connections(self, pid):
        """How many TCP connections process ``pid`` holds open to the API server. A wait
        module under test holds one per watched kind once its first lists are done, so a
        test can tell "it is waiting" from "it is still starting" without a sleep."""
        port = self.state().get("ports", {}).get("apiserver")
        sockets = set()
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            return 0
        for fd in fds:
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                sockets.add(target[len("socket:["):-1])
        established = 0
        for table in ("tcp", "tcp6"):
            try:
                with open("/proc/%d/net/%s" % (pid, table)) as handle:
                    rows = handle.read().splitlines()[1:]
            except IOError:
                continue
            for row in rows:
                fields = row.split()
                # remote address, state (01: ESTABLISHED), inode
                if fields[3] == "01" and fields[9] in sockets and int(fields[2].rsplit(":", 1)[1], 16) == port:
                    established += 1
        return established

    def wait_api_connections(self, pid, count, timeout=60):
        """Waits until process ``pid`` holds ``count`` connections to the API server;
        LabError when it exits first."""
        def enough():
            try:
                with open("/proc/%d/stat" % pid) as handle:
                    exited = handle.read().rsplit(")", 1)[1].split()[0] == "Z"
            except (IOError, IndexError):
                exited = True
            if exited:
                raise LabError("process %d exited before it held %d API server connections" % (pid, count))
            return self.api_connections(pid) >= count
        self._wait_for("%d API server connections of process %d" % (count, pid), enough, timeout)

    def _write_kubeconfig(self):
        pki = os.path.join(self.workdir, "pki")
        port = self.state()["ports"]["apiserver"]
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:%d" % port,
                                                     "certificate-authority": os.path.join(pki, "ca.crt")}}],
            "users": [{"name": "lab-admin", "user": {"client-certificate": os.path.join(pki, "admin.crt"),
                                                     "client-key": os.path.join(pki, "admin.key")}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab-admin"}}],
            "current-context": "lab",
        }
        with open(self.kubeconfig, "w") as handle:
            yaml.safe_dump(config, handle, default_flow_style=False)
        os.chmod(self.kubeconfig, 0o600)

    def _start_controllers(self):
        ports = self.state()["ports"]
        pki = os.path.join(self.workdir, "pki")
        self._spawn("kube-controller-manager", [
            os.path.join(self.bin_dir, "kube-controller-manager"),
            "--kubeconfig", self.kubeconfig, "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(ports["kcm"]),
            "--service-account-private-key-file", os.path.join(pki, "sa.key"),
            "--root-ca-file", os.path.join(pki, "ca.crt"),
            "--service-cluster-ip-range", SERVICE_CIDR,
            # Nothing here allocates pod CIDRs or talks to a cloud.
            "--controllers", "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
            "--v", "1",
        ] + ([] if self.lease_seconds() == LEASE_SECONDS else [
            # A node is NotReady when its Lease is older than this: a scale fleet's longer lease plus margin.
            "--node-monitor-grace-period", "%ds" % (self.lease_seconds() + 20)]) + self._scale_client_flags())
        self._spawn("kube-scheduler", [
            os.path.join(self.bin_dir, "kube-scheduler"),
            "--kubeconfig", self.kubeconfig, "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(ports["scheduler"]),
            "--v", "1",
        ] + self._scale_client_flags())

    def _scale_client_flags(self):
        """Client rate limits of the controller manager and the scheduler for a scale fleet.

        Their defaults (20 and 50 requests a second, events included) would make a thousand
        nodes' operand rollout minutes of throttled pod creates and bindings: a large cluster
        raises them the same way, and the figures should measure the collection, not this limit.
        """
        if len(self.fleet()) <= LEASE_SCALE_NODES:
            return []
        return ["--kube-api-qps", "200", "--kube-api-burst", "400"]

    def _kwok_config(self):
        path = os.path.join(self.workdir, "kwok.yaml")
        with open(os.path.join(HERE, "kwok", "stages.yaml")) as handle:
            stages = yaml.safe_load(handle)["stages"]
        # The node agent runs operand pods (their init gates decide when they start), and in
        # the real mode the job runner runs helm-controller's pods: kwok leaves both alone.
        # The job runner also ends its pods' deletion itself (grace period, then gone).
        helm_pods = [{"key": '.metadata.labels["%s"]' % HELMCHART_LABEL, "operator": "DoesNotExist"}]
        for stage in stages:
            matches = stage["spec"]["selector"]["matchExpressions"]
            if stage["metadata"]["name"] in POD_LIFE_STAGES:
                matches.extend(operand_pod_exclusions())
            if self.mode == "real" and stage["metadata"]["name"] in POD_LIFE_STAGES + ("pod-delete",):
                matches.extend(helm_pods)
            if self.mode == "real" and stage["metadata"]["name"] in POD_LIFE_STAGES:
                # The operator image's pods (its Deployment's, its upgrade hook's): tests/lab/operator_pods.py.
                matches.append({"key": '.metadata.labels["app.kubernetes.io/component"]', "operator": "NotIn",
                                "values": ["gpu-operator"]})
        with open(path, "w") as handle:
            # kwokctl fills these defaults itself; the kwok binary alone does not.
            handle.write("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"
                         "  podPlayStageParallelism: 4\n  nodePlayStageParallelism: 4\n  nodeLeaseParallelism: 4\n"
                         "  podsOnNodeSyncParallelism: 1\n  enablePodsOnNodeSyncListPager: true\n"
                         "  enablePodsOnNodeSyncStreamWatch: false\n  enableDebuggingHandlers: true\n")
            for stage in stages:
                handle.write("---\n")
                yaml.safe_dump(stage, handle, default_flow_style=False)
        return path

    def _start_kwok(self):
        ports = self.state()["ports"]
        pki = os.path.join(self.workdir, "pki")
        self._spawn("kwok", [
            os.path.join(self.bin_dir, "kwok"),
            "--kubeconfig", self.kubeconfig, "--config", self._kwok_config(),
            "--manage-nodes-with-annotation-selector", "%s=fake" % fleet_mod.KWOK_ANNOTATION,
            "--node-ip", "127.0.0.1", "--node-port", str(ports["kwok"]),
            "--server-address", "127.0.0.1:%d" % ports["kwok"],
            "--tls-cert-file", os.path.join(pki, "kwok.crt"), "--tls-private-key-file", os.path.join(pki, "kwok.key"),
            "--node-lease-duration-seconds", str(self.lease_seconds()),
            "--cidr", "10.244.0.0/16",
            "--enable-crds", "Logs",
        ])

    def lease_seconds(self):
        """The node Lease duration kwok gives this fleet (LEASE_SECONDS, longer for big fleets)."""
        nodes = len(self.fleet())
        if nodes <= LEASE_SCALE_NODES:
            return LEASE_SECONDS
        return min(LEASE_MAX_SECONDS, LEASE_SECONDS * nodes // LEASE_SCALE_NODES)

    def _python_env(self):
        return {"PYTHONPATH": os.pathsep.join([os.path.join(ROOT, ".build", "collections"), ROOT])}

    def _start_node_agent(self):
        argv = [sys.executable, "-u", "-m", "tests.lab.node_agent", "--kubeconfig", self.kubeconfig,
                "--workdir", self.workdir]
        if self.mode == "simulated":
            argv += ["--simulate-operator", os.path.join(REFERENCE, "gpu-operator-v26.3.2")]
        self._spawn("node-agent", argv, env=self._python_env())

    def _start_helm_controller(self):
        tools = self.state()["helm_tools"]
        # helm-controller is leader-elected (wrangler's lease, 30 s to renew) and exits when it
        # cannot renew in time. The lab runs one, with no contender: a host busy with a second,
        # 200-node lab, or an API server restart, must not end it (and every install after it).
        self._spawn("helm-controller", [os.path.join(tools, "helm-controller"), "--kubeconfig", self.kubeconfig],
                    env={"NODE_NAME": "cpu-1", "CATTLE_ELECTION_LEASE_DURATION": "24h",
                         "CATTLE_ELECTION_RENEW_DEADLINE": "23h"})
        # helm-controller installs its own, embedded HelmChart CRDs at start.
        self._wait_for("helm-controller's HelmChart CRDs", lambda: self._crds_established(
            {"helmcharts.helm.cattle.io", "helmchartconfigs.helm.cattle.io"}), 120, "helm-controller")

    def _start_chart_repo(self, source):
        """The operator's real charts, each packaged as its release (a tag's Chart.yaml says
        v1.0.0-devel), served on 127.0.0.1 the way an air-gapped site serves its mirror: the
        lab-up version's, and every other version the lab can run whose source is at hand
        (../shared/upstream, or a clone already in the lab cache), so that a HelmChart's
        version change is a real helm upgrade from one real chart to another."""
        state = self.state()
        port = state["ports"]["chart_repo"]
        url = chart_repo.repo_url(port)
        work = os.path.join(self.workdir, "chart-repo")
        helm = os.path.join(state["helm_tools"], "helm")
        versions = []
        for version in upstream.OPERATOR_TAGS:
            try:
                tree = source if version == self.start_version else upstream.resolve_operator_source(
                    version, clone=False)
            except upstream.UpstreamMissing as exc:
                log("chart repository: no gpu-operator %s (%s)" % (version, "; ".join(exc.tried)))
                continue
            repo = chart_repo.ChartRepo(tree.chart_dir, helm, work, url)
            repo.build(version, version)
            versions.append(version)
        state = self.state()
        state["chart_versions"] = versions
        self._save_state(state)
        self._spawn("chart-repo", [sys.executable, "-u", "-m", "tests.lab.chart_repo", "--dir", repo.charts_dir,
                                   "--port", str(port)], env=self._python_env())
        self._wait_for("chart repository %s" % url, lambda: chart_repo.serves(url), 30, "chart-repo")
        state = self.state()
        state["chart_repo"] = url
        self._save_state(state)

    def _start_job_runner(self):
        state = self.state()
        helm = upstream.helm_binary(state["helm_tools"], state.get("helm", self.helm))
        self._spawn("helm-job-runner", [
            sys.executable, "-u", "-m", "tests.lab.helm_job_runner", "--kubeconfig", self.kubeconfig,
            "--workdir", self.workdir, "--helm", helm], env=self._python_env())

    def _start_operator(self):
        """The real operator, out of cluster: it reads its manifests from the hard-coded
        /opt/gpu-operator, which a private mount namespace gives it (nothing on the host
        changes); loopback ports only, no leader election."""
        state = self.state()
        ports = state["ports"]
        script = 'mount --bind "$0" /opt && exec "$@"'
        self._spawn("gpu-operator", [
            "unshare", "-m", "--propagation", "private", "sh", "-c", script, state["operator_opt"],
            state["operator_bin"], "--leader-elect=false",
            "--metrics-bind-address=127.0.0.1:%d" % ports["operator_metrics"],
            "--health-probe-bind-address=127.0.0.1:%d" % ports["operator_health"],
        ], env={"KUBECONFIG": self.kubeconfig, "OPERATOR_NAMESPACE": OPERATOR_NAMESPACE})
        self._wait_for("gpu-operator health probe", lambda: self._http_ok(
            "http://127.0.0.1:%d/healthz" % ports["operator_health"]), 120, "gpu-operator")

    @staticmethod
    def _http_ok(url):
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def restart_operator(self):
        """Fault switch: the operator process stops and starts again (an operator pod restart)."""
        if self.mode != "real":
            raise LabError("restart_operator needs the real operator (lab mode %s)" % self.mode)
        self._stop("gpu-operator", self.state()["pids"]["gpu-operator"])
        self._start_operator()

    # ------------------------------------------------------------ API helpers
    def api_client(self):
        from kubernetes import client, config
        configuration = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
        return client.ApiClient(configuration)

    @property
    def api(self):
        if self._api is None:
            self._api = self.api_client()
        return self._api

    def core(self):
        from kubernetes import client
        return client.CoreV1Api(self.api)

    def _apply_crds(self, paths):
        from kubernetes import client
        ext = client.ApiextensionsV1Api(self.api)
        names = set()
        for path in paths:
            with open(path) as handle:
                for doc in yaml.safe_load_all(handle):
                    if not doc:
                        continue
                    names.add(doc["metadata"]["name"])
                    try:
                        ext.create_custom_resource_definition(doc)
                    except client.ApiException as exc:
                        if exc.status != 409:
                            raise
        self._wait_for("CRDs established (%s)" % ", ".join(sorted(names)), lambda: self._crds_established(names), 60)

    def _install_argocd_crds(self):
        """Argo CD's real Application and AppProject CRDs, so that the API server judges the
        Applications a site renders (server-side dry run) by Argo CD's own schema."""
        try:
            paths = upstream.resolve_argocd_crds()
        except upstream.UpstreamMissing as exc:
            if upstream.upstream_required():
                raise LabError("%s=1 and no Argo CD CRDs: %s" % (upstream.REQUIRE_ENV, "; ".join(exc.tried)))
            log("no Argo CD CRDs (%s): Applications are not checked against Argo CD's schema" % "; ".join(exc.tried))
            return
        log("installing Argo CD's Application and AppProject CRDs (%s)" % os.path.relpath(
            os.path.dirname(paths[0]), ROOT))
        self._apply_crds(paths)
        state = self.state()
        state["argocd_crds"] = True
        self._save_state(state)

    def _crds_established(self, wanted):
        from kubernetes import client
        ext = client.ApiextensionsV1Api(self.api)
        ready = set()
        for crd in ext.list_custom_resource_definition().items:
            for cond in (crd.status.conditions or []):
                if cond.type == "Established" and cond.status == "True":
                    ready.add(crd.metadata.name)
        return set(wanted) <= ready

    def fleet(self):
        return fleet_mod.load_fleet(self.fleet_file)

    def register_fleet(self):
        self._each(lambda item: self._create_node(fleet_mod.node_manifest(*item)), sorted(self.fleet().items()))

    @staticmethod
    def _each(function, items):
        """``function(item)`` for every item, SETUP_CONCURRENCY at a time (a fleet of a
        thousand nodes is registered and labelled in seconds, not minutes); the first
        error is raised."""
        with concurrent.futures.ThreadPoolExecutor(SETUP_CONCURRENCY) as pool:
            for future in [pool.submit(function, item) for item in items]:
                future.result()

    @staticmethod
    def raw_list(function, *args, **kwargs):
        """A list call's items as plain dicts (node_agent.list_items: no client models)."""
        from tests.lab.node_agent import list_items
        return list_items(function, *args, **kwargs)

    def _create_node(self, manifest):
        from kubernetes import client
        try:
            self.core().create_node(manifest)
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def _nodes_ready(self, names):
        nodes = dict((n["metadata"]["name"], n) for n in self.raw_list(self.core().list_node))
        for name in names:
            node = nodes.get(name)
            if node is None:
                return False
            if not any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (node.get("status") or {}).get("conditions") or ()):
                return False
        return True

    def _default_serviceaccount(self):
        from kubernetes import client
        try:
            self.core().read_namespaced_service_account("default", "default")
            return True
        except client.ApiException:
            return False

    # ------------------------------------------------------------ lifecycle
    def _choose_mode(self):
        """The real operator when its source can be had; else the simulator, said in one
        line, or an error naming what was tried when upstream is required (CI)."""
        if self._mode == "simulated":
            log("simulated GPU Operator asked for (tests/lab/gpu_operator_sim.py)")
            return "simulated", None
        try:
            source = upstream.resolve_operator_source(self.start_version)
        except upstream.UpstreamMissing as exc:
            if upstream.upstream_required():
                raise LabError("%s=1 and no GPU Operator source: %s" % (upstream.REQUIRE_ENV, "; ".join(exc.tried)))
            log("no GPU Operator %s source (%s): running the offline simulator of helm-controller and the operator "
                "(tests/lab/gpu_operator_sim.py) instead; it plays %s"
                % (self.start_version, "; ".join(exc.tried), SIMULATED_VERSION))
            return "simulated", None
        return "real", source

    def up(self):
        """Starts the lab (see the module docstring). A start that fails half-way stops what
        it started, so no process outlives the error."""
        self._refuse_another_version()
        try:
            self._up()
        except BaseException:
            if self.state().get("pids"):
                log("start-up failed: stopping what was started")
                try:
                    self.down()
                except LabError as exc:
                    log("while stopping: %s" % exc)
            raise

    def _refuse_another_version(self):
        """A running real lab is reused only for the version it runs now (its start version, or the one a
        chart upgrade switched it to); the refusal leaves it running (the error says how to stop it)."""
        running = self.state().get("operator_version") or upstream.DEFAULT_OPERATOR_TAG
        if self.state().get("mode") == "real" and running != self.start_version and self.is_up():
            raise LabError("the lab in %s runs GPU Operator %s, not %s (%s): stop it first (make lab-down)"
                           % (self.workdir, running, self.start_version, upstream.VERSION_ENV))

    def _up(self):
        if self.is_up():
            log("lab already up (%s, %s)" % (self.workdir, self.describe_operator()))
            self.register_fleet()
            return
        if self.state().get("pids"):
            log("lab partly up: stopping what is left first")
            self.down()
        started = time.monotonic()
        os.makedirs(self.workdir, exist_ok=True)
        if self.nodes:
            fleet_mod.write_scale_inventory(self.fleet_file, self.nodes)
            log("generated a fleet of %d nodes from %s: %s" % (
                self.nodes, os.path.relpath(fleet_mod.DEFAULT_FLEET, ROOT), self.fleet_file))
        mode, source = self._choose_mode()
        # Always through the build script: it returns the cache folder of the current pins.
        bin_dir = self._bin_dir = self._bin_dir or build_binaries()
        state = {"bin": bin_dir, "pids": {}, "mode": mode, "fleet_file": self.fleet_file, "ports": dict(
            (name, free_port()) for name in ("etcd", "etcd_peer", "etcd_metrics", "apiserver", "kcm", "scheduler",
                                             "kwok", "chart_repo", "operator_metrics", "operator_health"))}
        if mode == "real":
            state.update(self.operator_build(self.start_version), helm_tools=helm_tools(self.helm),
                         operator_start_version=self.start_version, helm=self.helm)
            log("GPU Operator %s (real, built from %s), helm %s in the install Jobs" % (
                self.start_version, source.origin, self.helm))
        ensure_pki(os.path.join(self.workdir, "pki"))
        shutil.rmtree(os.path.join(self.workdir, "etcd-data"), ignore_errors=True)
        shutil.rmtree(os.path.join(self.workdir, "podlogs"), ignore_errors=True)
        self._save_state(state)
        log("starting etcd")
        self._start_etcd()
        log("starting kube-apiserver")
        self._start_apiserver()
        self._write_kubeconfig()
        self._api = None
        if mode == "real":
            # The operator's CRDs as its chart ships them (helm installs crds/ only when absent;
            # the operator's manager needs them before it starts), and kwok's Logs.
            log("installing CRDs: the chart's ClusterPolicy and NVIDIADriver, kwok Logs")
            self._apply_crds(state["operator_crds"] + [KWOK_LOGS_CRD])
        else:
            log("installing CRDs (HelmChart, HelmChartConfig, ClusterPolicy from tests/lab/reference, kwok Logs)")
            self._apply_crds(list(SIMULATED_CRDS) + [KWOK_LOGS_CRD])
        self._install_argocd_crds()
        log("starting kube-controller-manager, kube-scheduler, kwok")
        self._start_controllers()
        self._start_kwok()
        log("registering the fleet from %s" % os.path.relpath(self.fleet_file, ROOT))
        self.register_fleet()
        names = sorted(self.fleet())
        # kwok takes a node through its stages a few at a time: a big fleet needs longer.
        self._wait_for("fleet nodes Ready", lambda: self._nodes_ready(names), 120 + len(names) // 5, "kwok")
        self._wait_for("default ServiceAccount", self._default_serviceaccount, 60, "kube-controller-manager")
        if mode == "real":
            log("starting helm-controller %s, the chart repository, the helm job runner" % "v0.16.27")
            self._start_helm_controller()
            self._start_chart_repo(source)
            self._start_job_runner()
            log("starting the GPU Operator %s out of cluster, and the player of its image's pods" % self.start_version)
            self._start_operator()
            self._spawn("operator-pods", [sys.executable, "-u", "-m", "tests.lab.operator_pods", "--workdir",
                                          self.workdir], env=self._python_env())
        log("starting the node agent (kubelets, device plugins, GFD, CUDA sample%s)" % (
            "" if mode == "real" else "; simulated operator"))
        self._start_node_agent()
        state = self.state()
        state["started_seconds"] = round(time.monotonic() - started, 1)
        self._save_state(state)
        log("lab up in %.1fs; %s; kubeconfig %s" % (
            time.monotonic() - started, self.describe_operator(), self.kubeconfig))

    def build_other_operators(self):
        """Builds (or finds cached) the real operator of every line the lab knows besides the one it runs, newest
        first: make test asks them ahead, niced beside the integration suite, whose driver upgrade suite (early in
        it) runs the newest line and whose chart upgrade suite runs them all. Without a line's source it says
        so, or fails naming what was tried when upstream is required (CI)."""
        # OPERATOR_TAGS is oldest first.
        for version in [tag for tag in reversed(upstream.OPERATOR_TAGS) if tag != self.start_version]:
            try:
                source = self.operator_build(version, clone=False)["operator_source"]
            except upstream.UpstreamMissing as exc:
                if upstream.upstream_required():
                    raise LabError("%s=1 and no GPU Operator %s source: %s" % (
                        upstream.REQUIRE_ENV, version, "; ".join(exc.tried)))
                log("no GPU Operator %s source (%s): the suites that ask it skip" % (version, "; ".join(exc.tried)))
                continue
            log("GPU Operator %s: the real operator, built from %s" % (version, source))

    def build(self, lab_binaries=True, rke2=True):
        """Builds (or finds cached) every binary the lab would run now (``lab_binaries``)
        and the real rke2 (``rke2``), and says which operator that is: what `make
        lab-build` does. Returns the operator's mode, or None when only rke2 was asked."""
        mode = None
        if lab_binaries:
            mode, source = self._choose_mode()
            groups = [build_binaries]
            if mode == "real":
                groups.append(lambda: (helm_tools(self.helm), self.operator_build(self.start_version)))
            # Side by side: a cold group spends long single-threaded stretches (module downloads, links) that
            # leave the other core to the next group (docs/lab.md, "The lab's binaries").
            with concurrent.futures.ThreadPoolExecutor(len(groups)) as pool:
                for done in [pool.submit(group) for group in groups]:
                    done.result()
            if mode == "real":
                log("GPU Operator %s: the real operator, built from %s" % (self.start_version, source.origin))
        if not rke2:
            return mode
        try:
            log("rke2 %s: %s (molecule/rke2 asks it)" % (upstream.RKE2_TAG, rke2_binary()))
        except upstream.UpstreamMissing as exc:
            if upstream.upstream_required():
                raise LabError("%s=1 and no rke2: %s" % (upstream.REQUIRE_ENV, "; ".join(exc.tried)))
            log("no rke2 (%s): molecule/rke2 skips its checks with the real binary" % "; ".join(exc.tried))
        return mode

    def roll_out_operator(self, timeout=300):
        """The lab fleet's GPU Operator (fleet.LAB_OPERATOR_VALUES) installed and settled:
        what `make lab-up` leaves running."""
        self.apply_fleet_labels()
        self.install_operator(fleet_mod.LAB_OPERATOR_VALUES)
        started = time.monotonic()
        self.wait_settled(timeout=timeout)
        log("GPU Operator rolled out on the fleet in %.1fs: %s" % (time.monotonic() - started,
                                                                   self.cluster_policy_status()))

    def cluster_policy_status(self):
        """``ready (Reconciled)``-style summary of the ClusterPolicy, or why there is none."""
        from kubernetes import client
        try:
            policy = client.CustomObjectsApi(self.api).get_cluster_custom_object(
                "nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            return "no ClusterPolicy"
        status = policy.get("status") or {}
        ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
        error = next((c for c in status.get("conditions") or () if c.get("type") == "Error"), {})
        reason = ready.get("reason") if ready.get("status") == "True" else error.get("reason") or ready.get("reason")
        return "ClusterPolicy cluster-policy %s (%s)" % (status.get("state") or "no state yet", reason or "-")

    def describe_operator(self):
        state = self.state()
        if state.get("mode") == "real":
            return "GPU Operator %s: the real operator, built from %s" % (self.operator_version(),
                                                                          state.get("operator_source"))
        return "GPU Operator %s: simulated (no upstream source; tests/lab/gpu_operator_sim.py)" % SIMULATED_VERSION

    def down(self):
        state = self.state()
        pids = state.get("pids", {})
        for component in reversed(self.components()):
            if pids.get(component):
                self._stop(component, pids[component])
        if os.path.exists(self.state_file):
            state["pids"] = {}
            self._save_state(state)
        shutil.rmtree(os.path.join(self.workdir, "etcd-data"), ignore_errors=True)
        leftovers = [c for c, pid in self.processes().items() if pid]
        if leftovers:
            raise LabError("still running after down: %s" % ", ".join(leftovers))
        self._api = None
        log("lab down (%s)" % self.workdir)

    def status(self):
        state = self.state()
        lines = ["workdir:    %s" % self.workdir, "kubeconfig: %s" % self.kubeconfig,
                 "operator:   %s" % self.describe_operator()]
        if state.get("chart_repo"):
            lines.append("charts:     %s (gpu-operator %s, the real charts)" % (
                state["chart_repo"], ", ".join(state.get("chart_versions") or [OPERATOR_VERSION])))
        for component, pid in self.processes().items():
            lines.append("  %-24s %s" % (component, ("running, pid %d" % pid) if pid else "stopped"))
        if self.is_up():
            lines.append("api server: https://127.0.0.1:%d (ready)" % state["ports"]["apiserver"])
            lines.append("gpu layer:  %s" % self.cluster_policy_status())
            nodes = self.core().list_node().items
            if len(nodes) > STATUS_NODE_LINES:
                lines.append("fleet:      %d nodes from %s (first %d below)" % (
                    len(nodes), self.fleet_file, STATUS_NODE_LINES))
            for node in nodes[:STATUS_NODE_LINES]:
                ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
                gpus = dict((k, v) for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/"))
                lines.append("  node %-20s %-8s %s" % (node.metadata.name, "Ready" if ready else "NotReady",
                                                       ", ".join("%s=%s" % kv for kv in sorted(gpus.items()))))
        return "\n".join(lines)

    # ------------------------------------------------------------ scenario helpers
    def install_operator(self, values=None, name="gpu-operator", version=None, annotations=None,
                         failure_policy=None):
        """Applies the gpu-operator HelmChart as the gpu_operator role would (tests use this
        to get a rolled-out operator without running the role); ``version``: the chart
        version, by default the one the lab runs now. ``failure_policy``: the HelmChart's
        failurePolicy (unset: helm-controller's default, reinstall)."""
        from kubernetes import client
        if not values:
            # helm upgrade given no values reuses the last release's, and klipper-helm passes
            # no --reset-values: "{}" would silently keep the previous values.
            raise LabError("install_operator needs chart values: with none, helm upgrade keeps the last release's")
        body = {
            "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": name, "namespace": "kube-system", "annotations": dict(annotations or {})},
            "spec": {"chart": "gpu-operator", "repo": self.chart_repo_url(),
                     "version": version or self.operator_version(),
                     "targetNamespace": "gpu-operator", "createNamespace": True,
                     "valuesContent": yaml.safe_dump(values or {}, default_flow_style=False)},
        }
        if failure_policy:
            body["spec"]["failurePolicy"] = failure_policy
        api = client.CustomObjectsApi(self.api)
        try:
            current = api.get_namespaced_custom_object("helm.cattle.io", "v1", "kube-system", "helmcharts", name)
            # Unchanged: no write, as an apply of the same chart makes none. A replace would
            # also drop helm-controller's finalizer, and its re-adding would move the chart's
            # managedFields time past its install Job (helmchart_wait reads that time).
            if current.get("spec") == body["spec"] and (
                    current["metadata"].get("annotations") or {}) == body["metadata"]["annotations"]:
                return current
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            body["metadata"]["finalizers"] = current["metadata"].get("finalizers") or []
            return api.replace_namespaced_custom_object("helm.cattle.io", "v1", "kube-system", "helmcharts", name, body)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        return api.create_namespaced_custom_object("helm.cattle.io", "v1", "kube-system", "helmcharts", body)

    def uninstall_operator(self, name="gpu-operator"):
        from kubernetes import client
        try:
            client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
                "helm.cattle.io", "v1", "kube-system", "helmcharts", name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def settled(self):
        """The simulator's own view: it writes the last reconcile's summary to a ConfigMap."""
        from kubernetes import client
        try:
            cm = self.core().read_namespaced_config_map("gpu-operator-sim", "kube-system")
        except client.ApiException:
            return None
        return json.loads((cm.data or {}).get("status", "null"))

    def _chart(self, name="gpu-operator"):
        from kubernetes import client
        try:
            return client.CustomObjectsApi(self.api).get_namespaced_custom_object(
                "helm.cattle.io", "v1", "kube-system", "helmcharts", name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            return None

    def wait_settled(self, timeout=120, installed=True):
        """Waits until the simulator has caught up with the current HelmChart (or its
        absence) and every operand pod reached its state (lab plumbing for test set-up;
        the product's waits are the collection's modules)."""
        # A fresh token the simulator echoes in its summary: a summary that carries it was
        # computed from a reconcile that read the cluster after every change made before this call.
        token = uuid.uuid4().hex
        self._sync(token)

        missing = ["no summary read yet"]

        def caught_up():
            self._check_components()
            missing[:] = [self._unsettled(token, installed)]
            return not missing[0]
        self._wait_for("GPU layer settled (%s)" % self.mode, caught_up, timeout, "node-agent", why=lambda: missing[0])
        return self.settled()

    def _check_components(self):
        """Raises LabError when one of the lab's processes has exited: no wait on this lab can
        end well then, and each would otherwise run to its timeout (the whole suite after it)."""
        now = time.monotonic()
        if now - self._components_checked < 1.0:
            return
        self._components_checked = now
        for component in self.components():
            if component == "gpu-operator":
                # Stopped and started on purpose (restart_operator; a chart upgrade switches its
                # version from another process): not a lab that broke.
                continue
            ended = self._exited(component)
            if ended:
                raise LabError("lab component %s has exited (%s); see %s:\n%s" % (
                    component, ended, self._log_path(component), self._log_tail(component)))

    def _unsettled(self, token, installed):
        """What keeps the node agent's last summary from saying the lab settled after the
        sync ``token`` was written ("" when nothing does)."""
        summary = self.settled() or {}
        if summary.get("sync") != token:
            return "no summary since the sync request (the last one answers %s)" % summary.get("sync")
        chart = self._chart()
        if installed:
            if chart is None:
                return "no gpu-operator HelmChart"
            if not summary.get("installed"):
                return "the chart is not installed yet"
            if (summary.get("chart_uid"), summary.get("chart_generation")) != (
                    chart["metadata"]["uid"], chart["metadata"]["generation"]):
                return "the summary is of generation %s, the chart is at %s" % (
                    summary.get("chart_generation"), chart["metadata"]["generation"])
        elif chart is not None or summary.get("chart_uid"):
            return "the chart is still there"
        if summary.get("settled"):
            return ""
        return "not settled: operands settled %s, %s" % (
            summary.get("operands_settled"), json.dumps(dict((k, v) for k, v in summary.items() if k not in (
                "nodes", "sync", "chart_uid")), sort_keys=True)[:1500])

    def _sync(self, token):
        from kubernetes import client
        body = {"metadata": {"name": "gpu-operator-sim", "annotations": {fleet_mod.LAB_ANNOTATION + "sync": token}}}
        try:
            self.core().patch_namespaced_config_map("gpu-operator-sim", "kube-system", body)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            self.core().create_namespaced_config_map("kube-system", body)

    def _annotate(self, node, key, value):
        self.core().patch_node(node, {"metadata": {"annotations": {key: value}}})

    def hold_down(self, node, *operands):
        """Fault switch: the named operand pods on ``node`` ("*": all) stay Running but not
        Ready (CrashLoopBackOff); default: container-toolkit, the "device plugin without
        toolkit" node."""
        self._annotate(node, fleet_mod.HOLD_DOWN_ANNOTATION, ",".join(operands or ("container-toolkit",)))

    def reboot(self, node):
        """Fault switch: the node reboots. /run is empty afterwards (its validation files are
        gone) and every operand pod on it runs its init containers again."""
        current = self.core().read_node(node)
        boot = int((current.metadata.annotations or {}).get(fleet_mod.LAB_ANNOTATION + "boot") or "0") + 1
        self.core().patch_node(node, {"metadata": {"annotations": {
            fleet_mod.LAB_ANNOTATION + "boot": str(boot), fleet_mod.LAB_ANNOTATION + "validations": None}}})

    def release(self, node):
        self._annotate(node, fleet_mod.HOLD_DOWN_ANNOTATION, None)

    def fail_cuda_sample(self, node, fail=True):
        self._annotate(node, fleet_mod.CUDA_SAMPLE_ANNOTATION, "fail" if fail else None)

    def advertise_override(self, node, resources):
        """Fault switch: the node advertises ``resources`` ({name: count}) whatever its
        workload config produces (a mismatched node); None restores the simulation."""
        self._annotate(node, fleet_mod.ADVERTISE_ANNOTATION, json.dumps(resources) if resources else None)

    def add_node(self, name, workload_config="container", gpus=2, model="A10", taints=None, labels=None,
                 vgpu_config=None, hold=False):
        """Fault switch: a node joins after start (not in the fleet file). ``hold`` keeps
        its operand pods from becoming Ready until ``release(name)``, so a test can look
        at the node while it has joined but its operands do not run yet."""
        fleet = self.fleet()
        models = next(iter(fleet.values())).get("gpu_models", {})
        host_vars = {"gpu_models": models, "lab_taints": taints or [], "lab_node_labels": dict(labels or {})}
        if gpus:
            host_vars.update({"gpu_model": model, "gpu_count": gpus})
        manifest = fleet_mod.node_manifest(name, host_vars)
        if gpus and workload_config:
            manifest["metadata"]["labels"]["nvidia.com/gpu.workload.config"] = workload_config
        if vgpu_config:
            manifest["metadata"]["labels"]["nvidia.com/vgpu.config"] = vgpu_config
        if hold:
            manifest["metadata"]["annotations"][fleet_mod.HOLD_DOWN_ANNOTATION] = "*"
        self._create_node(manifest)
        self._wait_for("node %s Ready" % name, lambda: self._nodes_ready([name]), 60, "kwok")

    def fleet_labels(self):
        """{node: the workload labels the fleet's inventory asks for}, as the gpu_node_labels
        role would put them from the same inventory (test set-up without running the role)."""
        # The role's own mapping from host variables to labels (node_labels.desired_labels):
        # gpu_operands_disabled: [driver] on a host with its own driver (gpu-spark-1),
        # gpu_node_isolated on the scale fleet's isolated nodes.
        return dict((name, nl.desired_labels({"workload_config": host_vars.get("gpu_workload_config"),
                                              "operands_disabled": host_vars.get("gpu_operands_disabled") or [],
                                              "isolated": bool(host_vars.get("gpu_node_isolated")),
                                              "vgpu_config": host_vars.get("gpu_vgpu_config")}))
                    for name, host_vars in sorted(self.fleet().items()))

    def apply_fleet_labels(self):
        """Puts the fleet's workload labels on the nodes."""
        patches = [(name, {"metadata": {"labels": labels}}) for name, labels in self.fleet_labels().items() if labels]
        self._each(lambda item: self.core().patch_node(*item), patches)

    def reset(self, values=None):
        """Back to the clean fleet between tests: nodes not in the fleet deleted, fault
        switches off, per-node operand switches removed, fleet labels, operator values."""
        wanted = self.fleet_labels()
        for node in self.core().list_node().items:
            name = node.metadata.name
            if name not in wanted:
                self.delete_node(name)
                continue
            current = node.metadata.labels or {}
            annotations = dict((k, None) for k in (node.metadata.annotations or {})
                               if k.startswith(fleet_mod.LAB_ANNOTATION) and k not in fleet_mod.NODE_STATE_ANNOTATIONS)
            labels = dict((k, None) for k, v in current.items()
                          if k.startswith("nvidia.com/gpu.deploy.") and v != "true" and wanted[name].get(k) != v)
            if labels:
                # The operator does not reconcile a removed deploy label; a missing common GPU
                # label makes it reconcile the node and put back the deploy labels it owns.
                labels["nvidia.com/gpu.present"] = None
            labels.update(dict((k, None) for k in current
                               if k in ("nvidia.com/gpu.workload.config", "nvidia.com/vgpu.config")))
            # The fleet's labels go in the same patch as the removals, never after them: a
            # deploy.driver=false removed on its own is an absent label the operator answers
            # with true within milliseconds, the driver pod lands on the Spark, and its
            # k8s-driver-manager labels the node pre-installed after the fleet's false is back.
            labels.update(wanted[name])
            labels = dict((k, v) for k, v in labels.items() if current.get(k) != v)
            if annotations or labels:
                self.core().patch_node(name, {"metadata": {"annotations": annotations, "labels": labels}})
        if values is not None:
            self.install_operator(values)
            self.wait_settled()

    def delete_node(self, name):
        from kubernetes import client
        try:
            self.core().delete_node(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
