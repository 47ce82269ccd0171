"""The lab's pure parts: the upstream lookup (tests/lab/upstream.py) on made-up trees and
tarballs, and the node agent's kubelet of operand pods (tests/lab/node_agent.py): the
init-container gates read from the operator's manifests, the files validators write,
reboots and hold-downs."""
import copy
import fcntl
import io
import os
import subprocess
import tarfile
import threading

import pytest

from tests.lab import node_agent, upstream
from tests.lab.lab import ROOT, Lab, LabError, operand_pod_exclusions
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om


def _tree(root):
    for marker in upstream.OPERATOR_TREE_MARKERS:
        path = os.path.join(root, marker)
        if "." in os.path.basename(marker):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()
        else:
            os.makedirs(path, exist_ok=True)
    return root


def _tarball(path, top):
    with tarfile.open(path, "w:gz") as archive:
        for marker in upstream.OPERATOR_TREE_MARKERS:
            name = "%s/%s" % (top, marker)
            if "." in os.path.basename(marker):
                info = tarfile.TarInfo(name)
                archive.addfile(info, io.BytesIO(b""))
            else:
                info = tarfile.TarInfo(name + "/keep")
                archive.addfile(info, io.BytesIO(b""))
    return path


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No ../shared, no clone, the cache under tmp_path."""
    monkeypatch.setattr(upstream, "SHARED_UPSTREAM", str(tmp_path / "no-shared"))
    monkeypatch.setattr(upstream, "OPERATOR_GIT", str(tmp_path / "no-such-repo"))
    monkeypatch.setenv("GPUPLATFORM_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GPU_OPERATOR_SRC", raising=False)
    return tmp_path


def test_a_source_tree_given_in_the_environment_is_used_as_it_is(isolated, monkeypatch):
    tree = _tree(str(isolated / "src"))
    monkeypatch.setenv("GPU_OPERATOR_SRC", tree)
    source = upstream.resolve_operator_source()
    assert source.tree == tree and source.origin.startswith("GPU_OPERATOR_SRC tree")


def test_a_tarball_is_unpacked_once_and_keyed_by_its_sha256(isolated, monkeypatch):
    tarball = _tarball(str(isolated / "op.tar.gz"), "gpu-operator-v26.3.2")
    monkeypatch.setenv("GPU_OPERATOR_SRC", tarball)
    first = upstream.resolve_operator_source()
    assert os.path.isdir(os.path.join(first.tree, "vendor"))
    assert "sha256:" in first.pin and first.pin.split("sha256:")[1] in first.origin
    again = upstream.resolve_operator_source()
    assert again.tree == first.tree


def test_the_shared_tarball_is_the_second_choice(isolated, monkeypatch):
    shared = isolated / "shared-upstream"
    shared.mkdir()
    _tarball(str(shared / upstream.OPERATOR_TARBALL), "gpu-operator-v26.3.2")
    monkeypatch.setattr(upstream, "SHARED_UPSTREAM", str(shared))
    assert "gpu-operator-v26.3.2.tar.gz" in upstream.resolve_operator_source().origin


def test_nothing_found_says_everything_it_tried(isolated, monkeypatch):
    monkeypatch.setenv("GPU_OPERATOR_SRC", str(isolated / "missing"))
    with pytest.raises(upstream.UpstreamMissing) as exc:
        upstream.resolve_operator_source()
    tried = exc.value.tried
    assert tried[0] == "GPU_OPERATOR_SRC=%s: no such file or folder" % (isolated / "missing")
    assert tried[1].endswith("gpu-operator-v26.3.2.tar.gz: not present")
    assert tried[2].startswith("git clone --depth 1 --branch v26.3.2 ")


def test_a_tarball_of_something_else_is_refused(isolated, monkeypatch):
    tarball = str(isolated / "other.tar.gz")
    with tarfile.open(tarball, "w:gz") as archive:
        archive.addfile(tarfile.TarInfo("other/README"), io.BytesIO(b""))
    monkeypatch.setenv("GPU_OPERATOR_SRC", tarball)
    with pytest.raises(upstream.UpstreamMissing, match="not a source archive of the tag"):
        upstream.resolve_operator_source()


def test_a_run_that_finds_the_source_being_unpacked_waits_and_uses_that_tree(isolated, monkeypatch):
    # make test runs lab suites side by side: two may unpack the same tarball at once, and each used to remove
    # the other's partial tree.
    tarball = _tarball(str(isolated / "op.tar.gz"), "gpu-operator-v26.3.2")
    monkeypatch.setenv("GPU_OPERATOR_SRC", tarball)
    said = []
    monkeypatch.setattr(upstream, "log", said.append)
    sha = upstream._sha256(tarball)  # pylint: disable=protected-access
    target = os.path.join(str(isolated / "cache"), "src", "gpu-operator-v26.3.2-%s" % sha[:12])
    os.makedirs(os.path.dirname(target))
    found = []
    with open(target + ".lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        waiting = threading.Thread(target=lambda: found.append(upstream.resolve_operator_source()))
        waiting.start()
        while not said and waiting.is_alive():
            waiting.join(0.05)
        assert said == ["another run is unpacking %s; waiting for it" % target] and waiting.is_alive()
        # The other run unpacks meanwhile (here: this test, as the module would).
        upstream._unpack_into(tarball, sha, "gpu-operator", "v26.3.2", upstream.OPERATOR_TREE_MARKERS,  # pylint: disable=protected-access
                              target, os.path.join(target, "gpu-operator-v26.3.2"))
        marker = os.path.join(target, "gpu-operator-v26.3.2", "vendor", "unpacked-once")
        open(marker, "w").close()
    waiting.join()
    # The waiting run found the tree and did not unpack it again (which would have removed the marker).
    assert found[0].tree == os.path.join(target, "gpu-operator-v26.3.2") and os.path.exists(marker)
    assert [line for line in said if line.startswith("unpacking")] == [said[1]] and len(said) == 2


FAKE_GO = """#!/bin/sh
# go build ... -o OUT PKG: says it started, waits for the test's release, writes OUT.
echo "$@" >> "$FAKE_GO_CALLS"
while [ "$1" != -o ]; do shift; done
while [ ! -e "$FAKE_GO_RELEASE" ]; do sleep 0.05; done
printf '#!/bin/sh\\n' > "$2"; chmod +x "$2"
"""


def _with_fake_go(tmp_path, script, **extra):
    """The environment of a build.sh run whose ``go`` is ``script`` and whose cache is under tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(script)
    (bin_dir / "go").chmod(0o755)
    return dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), GPUPLATFORM_LAB_CACHE=str(tmp_path / "cache"),
                **extra)


def test_a_build_another_run_is_making_is_waited_for_not_made_twice(tmp_path):
    # build.sh's build_one: the second run waits on the binary's lock and finds it built (tests/lab/build.sh).
    env = _with_fake_go(tmp_path, FAKE_GO, FAKE_GO_CALLS=str(tmp_path / "calls"),
                        FAKE_GO_RELEASE=str(tmp_path / "release"))
    src = _tree(str(tmp_path / "src"))
    command = ["bash", os.path.join(ROOT, "tests", "lab", "build.sh"), "gpu-operator", src, "k1", "v26.3.2"]
    try:
        first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 universal_newlines=True)
        while not os.path.exists(str(tmp_path / "calls")) and first.poll() is None:
            threading.Event().wait(0.05)
        assert first.poll() is None, first.communicate()
        second = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  universal_newlines=True)
        line = second.stderr.readline()
        while line and "gpu-operator:" not in line:
            line = second.stderr.readline()
        assert line.rstrip().endswith("gpu-operator: another run is building it; waiting for that build"), line
    finally:
        # Whatever failed above, the fake go is let go and no build outlives the test.
        (tmp_path / "release").touch()
    out1, err1 = first.communicate()
    out2, err2 = second.communicate()
    assert first.returncode == 0 and second.returncode == 0, (err1, err2)
    binary = str(tmp_path / "cache" / "gpu-operator-k1" / "gpu-operator")
    assert out1.splitlines()[-1] == out2.splitlines()[-1] == binary and os.access(binary, os.X_OK)
    assert len((tmp_path / "calls").read_text().splitlines()) == 1
    assert "built by the run it waited for" in err2 and not os.path.exists(binary + ".tmp")


@pytest.mark.parametrize("value, required", [("", False), ("0", False), ("1", True), ("yes", True)])
def test_ci_requires_upstream(monkeypatch, value, required):
    monkeypatch.setenv(upstream.REQUIRE_ENV, value)
    assert upstream.upstream_required() is required


@pytest.mark.parametrize("given, tag", [(None, "v26.3.2"), ("", "v26.3.2"), ("v26.7.0", "v26.7.0"),
                                        ("26.3.3", "v26.3.3"), (" v26.3.2 ", "v26.3.2")])
def test_the_lab_runs_the_operator_version_asked_for(given, tag):
    environ = {} if given is None else {upstream.VERSION_ENV: given}
    assert upstream.operator_tag(environ) == tag


@pytest.mark.parametrize("given", ["v26.3.1", "v27.1.0", "latest"])
def test_a_version_the_lab_cannot_run_is_refused_naming_those_it_can(given):
    with pytest.raises(ValueError) as info:
        upstream.operator_tag({upstream.VERSION_ENV: given})
    assert str(info.value) == "GPU_OPERATOR_VERSION=%s: the lab runs one of v26.3.2, v26.3.3, v26.7.0" % given


@pytest.mark.parametrize("given, line", [(None, "v4"), ("", "v4"), ("4", "v4"), ("v3", "v3"), (" 3 ", "v3")])
def test_the_lab_runs_the_helm_line_asked_for(given, line):
    environ = {} if given is None else {upstream.HELM_ENV: given}
    assert upstream.helm_line(environ) == line
    # v4 is the build's bin folder's helm, v3 its own folder's: two binaries named helm.
    assert upstream.helm_binary("/tools", line) == {"v4": "/tools/helm", "v3": "/tools/v3/helm"}[line]


@pytest.mark.parametrize("given", ["v2", "4.1.4", "helm4"])
def test_a_helm_line_the_lab_does_not_build_is_refused_naming_those_it_does(given):
    with pytest.raises(ValueError) as info:
        upstream.helm_line({upstream.HELM_ENV: given})
    assert str(info.value) == "LAB_HELM=%s: the lab runs helm v4 or v3" % given


def test_the_build_pins_the_helm_each_rke2_line_runs():
    # tests/lab/build.sh and docs/lab.md's table say the same versions.
    with open(os.path.join(ROOT, "tests", "lab", "build.sh")) as handle:
        script = handle.read()
    with open(os.path.join(ROOT, "docs", "lab.md")) as handle:
        doc = handle.read()
    for key, version in (("HELM_VERSION", "v4.1.4"), ("HELM3_VERSION", "v3.18.4")):
        assert "\n%s=%s\n" % (key, version) in script
        assert "helm@%s" % version in doc


def test_the_lab_runs_every_version_the_collection_knows():
    # One list in two places (the lab may not import the collection's module_utils at build time): kept equal here.
    from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
    assert upstream.OPERATOR_TAGS == ov.KNOWN_CHART_VERSIONS and upstream.DEFAULT_OPERATOR_TAG == ov.DEFAULT_CHART_VERSION


@pytest.mark.parametrize("container, gate", [
    ({"command": ["sh", "-c"], "args": ["until [ -f /run/nvidia/validations/toolkit-ready ]; do sleep 5; done"]},
     ("file", "toolkit-ready")),
    ({"command": ["sh", "-c"], "args": ["nvidia-validator"], "env": [{"name": "COMPONENT", "value": "driver"}]},
     ("validate", "driver")),
    ({"command": ["config-manager"], "env": [{"name": "ONESHOT", "value": "true"}]}, None),
    ({"command": ["driver-manager"], "args": ["uninstall_driver"]}, None),
])
def test_init_gates_are_read_from_the_operator_manifests_words(container, gate):
    assert node_agent.init_gate(container) == gate


def test_kwok_leaves_every_operand_pod_to_the_node_agent():
    terms = operand_pod_exclusions()
    excluded = dict((t["key"], set(t["values"])) for t in terms)
    for operand in om.OPERANDS:
        key, value = operand.pod_selector
        assert value in excluded['.metadata.labels["%s"]' % key]
    assert all(t["operator"] == "NotIn" for t in terms)


# ---------------------------------------------------------------- the node agent's kubelet of operand pods

def _pod(operand, init, name="p", node="n1", annotations=None):
    key, value = om.operand(operand).pod_selector
    return {"metadata": {"name": name, "uid": name, "labels": {key: value}, "annotations": annotations or {}},
            "spec": {"nodeName": node, "initContainers": init,
                     "containers": [{"name": "main", "image": "registry.lab.invalid/nvidia/x:1"}]}}


WAIT_TOOLKIT = {"name": "toolkit-validation", "image": "v", "command": ["sh", "-c"],
                "args": ["until [ -f /run/nvidia/validations/toolkit-ready ]; do sleep 5; done"]}


def _validate(component):
    return {"name": "%s-validation" % component, "image": "v", "command": ["sh", "-c"], "args": ["nvidia-validator"],
            "env": [{"name": "COMPONENT", "value": component}]}


def _node(annotations=None, allocatable=None):
    return {"metadata": {"name": "n1", "uid": "u1", "labels": {}, "annotations": annotations or {}},
            "status": {"allocatable": allocatable or {}}}


def _state(pod, node, files, ready=(), targets=None, held=()):
    agent = node_agent.NodeAgent.__new__(node_agent.NodeAgent)
    return agent._pod_state(pod, node, files, set(ready), targets or {}, set(held), None)


def test_a_device_plugin_waits_in_init_until_the_toolkit_validation_wrote_its_file():
    pod = _pod("device-plugin", [WAIT_TOOLKIT])
    blocked = _state(pod, _node(), set())
    assert (blocked["phase"], blocked["blocked"]) == ("Pending", "toolkit-validation")
    assert "toolkit-ready" in blocked["message"]
    assert _state(pod, _node(), {"toolkit-ready"}) == {"phase": "Running", "ready": True, "blocked": None}


def test_the_operator_validator_writes_toolkit_ready_only_once_the_toolkit_runs():
    pod = _pod("operator-validator", [_validate("driver"), _validate("toolkit"), _validate("cuda"), _validate("plugin")])
    toolkit_ds = {"container-toolkit": [{"nodeSelector": {}}], "driver": [{"nodeSelector": {}}]}
    files = set()
    state = _state(pod, _node(), files, ready={"driver"}, targets=toolkit_ds)
    assert state["blocked"] == "toolkit-validation" and files == {"driver-ready"}
    # The toolkit runs: toolkit-ready and cuda-ready are written; plugin waits for GPUs.
    state = _state(pod, _node(), files, ready={"driver", "container-toolkit"}, targets=toolkit_ds)
    assert state["blocked"] == "plugin-validation" and files == {"driver-ready", "toolkit-ready", "cuda-ready"}
    assert "GPU resources are not yet discovered" in state["message"]
    gpus = _node(allocatable={"nvidia.com/gpu": "2"})
    assert _state(pod, gpus, files, ready={"driver", "container-toolkit"}, targets=toolkit_ds)["ready"] is True


def test_with_no_driver_daemonset_targeting_the_node_the_host_driver_validates():
    pod = _pod("container-toolkit", [_validate("driver")])
    files = set()
    assert _state(pod, _node(), files, targets={})["ready"] is True and files == {"driver-ready"}


def test_after_a_reboot_an_initialized_pod_runs_its_gates_again():
    pod = _pod("device-plugin", [WAIT_TOOLKIT], annotations={node_agent.INITIALIZED_ANNOTATION: "u1/0"})
    assert _state(pod, _node(), set())["ready"] is True  # initialized in this boot: the files no longer matter
    rebooted = _node(annotations={node_agent.BOOT_ANNOTATION: "1"})
    assert _state(pod, rebooted, set())["blocked"] == "toolkit-validation"


def test_a_node_registered_again_under_the_same_name_is_a_new_host():
    pod = _pod("device-plugin", [WAIT_TOOLKIT], annotations={node_agent.INITIALIZED_ANNOTATION: "u1/0"})
    again = _node()
    again["metadata"]["uid"] = "u2"
    assert _state(pod, again, set())["blocked"] == "toolkit-validation"


def test_a_held_down_operand_runs_without_turning_ready():
    state = _state(_pod("container-toolkit", []), _node(), set(), held={"container-toolkit"})
    assert (state["phase"], state["ready"], state["reason"]) == ("Running", False, "CrashLoopBackOff")


class _StatusWrites:
    """patch_namespaced_pod_status as the node agent calls it (raw answer), recorded."""

    def __init__(self):
        self.bodies = []

    def patch_namespaced_pod_status(self, name, namespace, body, _preload_content=False):
        import types
        self.bodies.append(body)
        return types.SimpleNamespace(data=b"{}", status=200, reason="OK", release_conn=lambda: None)


def _kubelet_pass(pod):
    import threading
    agent = node_agent.NodeAgent.__new__(node_agent.NodeAgent)
    agent.core, agent._lock, agent.changes = _StatusWrites(), threading.Lock(), 0
    agent._set_pod_state(pod, {"phase": "Running", "ready": True, "blocked": None}, "u1/0")
    return agent.core.bodies


def test_the_kubelet_puts_back_the_ready_condition_the_node_lifecycle_controller_took():
    pod = _pod("container-toolkit", [], annotations={node_agent.INITIALIZED_ANNOTATION: "u1/0"})
    pod["metadata"]["namespace"] = om.DEFAULT_NAMESPACE
    written = _kubelet_pass(pod)
    assert len(written) == 1
    pod["status"] = written[0]["status"]
    assert _kubelet_pass(pod) == []  # a second pass over its own status writes nothing
    # kube-controller-manager marks the pods of a node it thinks unreachable not Ready (after a
    # kube-apiserver restart its informers come back late); the containers' statuses are untouched.
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition.update(status="False", reason=None)
    written = _kubelet_pass(pod)
    assert len(written) == 1 and node_agent.condition_statuses(written[0]["status"])["Ready"] == "True"


# ---------------------------------------------------------------- the lab's settle wait says what is missing

def _unsettled(tmp_path, summary, chart):
    from tests.lab.lab import Lab
    lab = Lab(workdir=str(tmp_path))
    lab.settled = lambda: summary
    lab._chart = lambda name="gpu-operator": chart
    return lab._unsettled("token-1", installed=True)


CHART = {"metadata": {"uid": "u1", "generation": 3}}
SETTLED = {"sync": "token-1", "installed": True, "chart_uid": "u1", "chart_generation": 3, "settled": True,
           "operands_settled": True, "nodes": {"gpu-1": {}}}


def test_the_settle_wait_is_done_only_on_a_settled_summary_of_its_own_sync_and_chart(tmp_path):
    assert _unsettled(tmp_path, SETTLED, CHART) == ""


@pytest.mark.parametrize("change, chart, words", [
    ({"sync": "token-0"}, CHART, "no summary since the sync request (the last one answers token-0)"),
    ({}, None, "no gpu-operator HelmChart"),
    ({"installed": False}, CHART, "the chart is not installed yet"),
    ({"chart_generation": 2}, CHART, "the summary is of generation 2, the chart is at 3"),
    ({"settled": False, "operands_settled": False, "wrote": True}, CHART, "not settled: operands settled False"),
])
def test_the_settle_wait_names_what_keeps_the_lab_unsettled(tmp_path, change, chart, words):
    said = _unsettled(tmp_path, dict(SETTLED, **change), chart)
    assert said.startswith(words)
    if "wrote" in change:
        assert '"wrote": true' in said and "gpu-1" not in said


def test_the_node_agent_is_not_woken_by_a_nodes_heartbeat_alone():
    from tests.lab.node_agent import node_without_heartbeat
    node = {"metadata": {"name": "gpu-1", "resourceVersion": "10", "labels": {"a": "b"}},
            "spec": {"taints": []},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}, "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-03T19:00:00Z",
                 "lastTransitionTime": "2026-12-03T18:00:00Z"}]}}
    heartbeat = copy.deepcopy(node)
    heartbeat["metadata"]["resourceVersion"] = "11"
    heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-03T19:10:00Z"
    assert node_without_heartbeat(heartbeat) == node_without_heartbeat(node)
    for change in (lambda n: n["metadata"]["labels"].update(c="d"),
                   lambda n: n["status"]["conditions"][0].update(status="Unknown"),
                   lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "0"}),
                   lambda n: n["spec"].update(unschedulable=True)):
        changed = copy.deepcopy(heartbeat)
        change(changed)
        assert node_without_heartbeat(changed) != node_without_heartbeat(node)


def _daemonset(name, selector, status):
    return {"metadata": {"name": name, "namespace": "gpu-operator", "generation": 1},
            "spec": {"template": {"spec": {"nodeSelector": selector}}}, "status": status}


CHURNING = _daemonset("nvidia-driver-daemonset-6.17.0-1014-nvidia-ubuntu22.04",
                      {om.deploy_label("driver"): "true", om.NFD_KERNEL_LABEL: "6.17.0-1014-nvidia"}, {})
SPARK = {"metadata": {"name": "gpu-spark-1",
                      "labels": {om.deploy_label("driver"): "false", om.NFD_KERNEL_LABEL: "6.17.0-1014-nvidia"}},
         "spec": {}}


def test_a_daemonset_the_operator_creates_and_deletes_for_ever_does_not_keep_the_lab_unsettled():
    # With driver.usePrecompiled the real operator writes the Spark's kernel's driver DaemonSet on every pass
    # (operand_model.precompiled_driver_groups): the controller never sees it, and it targets no node.
    assert node_agent.NodeAgent._operands_settled([CHURNING], [], [SPARK]) is True
    assert node_agent.quiet_breaker("daemonsets", {"type": "ADDED", "object": CHURNING}) == ""
    assert node_agent.quiet_breaker("daemonsets", {"type": "DELETED", "object": CHURNING}) == ""
    # A DaemonSet that targets a node, or has pods, still counts until its controller caught up.
    targeted = copy.deepcopy(SPARK)
    targeted["metadata"]["labels"][om.deploy_label("driver")] = "true"
    assert node_agent.NodeAgent._operands_settled([CHURNING], [], [targeted]) is False
    placed = dict(CHURNING, status={"desiredNumberScheduled": 0, "currentNumberScheduled": 1})
    assert node_agent.NodeAgent._operands_settled([placed], [], [SPARK]) is False
    assert node_agent.quiet_breaker("daemonsets", {"type": "MODIFIED", "object": placed}) == (
        "MODIFIED daemonsets gpu-operator/nvidia-driver-daemonset-6.17.0-1014-nvidia-ubuntu22.04")
    assert node_agent.quiet_breaker("nodes", {"type": "MODIFIED", "object": SPARK}) == "MODIFIED nodes gpu-spark-1"
    assert node_agent.quiet_breaker("sync", {"type": "MODIFIED", "object": {}}) == ""


def test_the_node_agents_safety_pass_comes_less_often_on_a_large_fleet():
    # The lab fleet and CI's 200-node fleet keep the 30 s pass; a thousand nodes' pass, seconds of CPU on the
    # machine the benchmark measures on, comes once per ten nodes a second.
    assert node_agent.safety_seconds(0) == node_agent.safety_seconds(7) == node_agent.SAFETY_SECONDS == 30.0
    assert node_agent.safety_seconds(200) == node_agent.safety_seconds(300) == 30.0
    assert node_agent.safety_seconds(1143) == 114.3


# ---------------------------------------------------------------- the reset between tests keeps the fleet's labels

class _RecordingCore:
    """list_node over plain nodes; patch_node recorded in order."""

    def __init__(self, nodes):
        from types import SimpleNamespace
        self.items = [SimpleNamespace(metadata=SimpleNamespace(name=name, labels=dict(labels), annotations={}))
                      for name, labels in nodes.items()]
        self.patches = []

    def list_node(self):
        from types import SimpleNamespace
        return SimpleNamespace(items=self.items)

    def patch_node(self, name, body):
        self.patches.append((name, body))


def _reset(tmp_path, nodes):
    from tests.lab.lab import Lab
    lab = Lab(workdir=str(tmp_path), nodes=0)
    core = _RecordingCore(nodes)
    lab.core = lambda: core
    lab.delete_node = lambda name: core.patches.append((name, "deleted"))
    wanted = lab.fleet_labels()
    lab.reset()
    return wanted, core.patches


def test_a_reset_never_removes_a_fleet_label_the_node_already_has(tmp_path):
    # Removing the Spark's deploy.driver=false, even to put it back a moment later, is an absent
    # label the operator answers with true: the driver pod lands and k8s-driver-manager labels the
    # node pre-installed after the fleet's false is back (a flaky CI run, 2026-12-04).
    from tests.lab.lab import Lab
    wanted = Lab(workdir=str(tmp_path), nodes=0).fleet_labels()
    spark = [name for name, labels in wanted.items() if labels.get(om.deploy_label("driver")) == om.DEPLOY_FALSE]
    assert spark, "the lab fleet has a host with its own driver"
    clean = dict((name, dict(labels, **{om.deploy_label("driver"): om.DEPLOY_TRUE}) if name not in spark else
                  dict(labels, **{"nvidia.com/gpu.present": "true"}))
                 for name, labels in wanted.items())
    assert _reset(tmp_path, clean)[1] == []


def test_a_reset_puts_the_fleets_label_back_in_the_patch_that_removes_a_tests(tmp_path):
    from tests.lab.lab import Lab
    wanted = Lab(workdir=str(tmp_path), nodes=0).fleet_labels()
    spark = [name for name, labels in wanted.items() if labels.get(om.deploy_label("driver")) == om.DEPLOY_FALSE][0]
    container = [name for name, labels in wanted.items() if labels.get(om.WORKLOAD_CONFIG_LABEL) == "container"
                 and name != spark][0]
    nodes = dict((name, dict(labels)) for name, labels in wanted.items())
    nodes[spark].update({om.deploy_label("driver"): om.DEPLOY_PRE_INSTALLED, "nvidia.com/gpu.present": "true"})
    nodes[container].update({om.deploy_label("container-toolkit"): om.DEPLOY_FALSE, om.WORKLOAD_CONFIG_LABEL: "vm-passthrough",
                             "nvidia.com/gpu.present": "true"})
    nodes["gpu-late-1"] = {}
    patches = dict(_reset(tmp_path, nodes)[1])
    assert patches.pop("gpu-late-1") == "deleted"
    assert patches == {
        spark: {"metadata": {"annotations": {}, "labels": {
            om.deploy_label("driver"): om.DEPLOY_FALSE, "nvidia.com/gpu.present": None}}},
        container: {"metadata": {"annotations": {}, "labels": {
            om.deploy_label("container-toolkit"): None, "nvidia.com/gpu.present": None, om.WORKLOAD_CONFIG_LABEL: "container"}}},
    }


def test_another_version_comes_from_its_own_tarball_never_from_the_lab_up_source(isolated, monkeypatch):
    shared = isolated / "shared-upstream"
    shared.mkdir()
    _tarball(str(shared / "gpu-operator-v26.3.3.tar.gz"), "gpu-operator-v26.3.3")
    monkeypatch.setattr(upstream, "SHARED_UPSTREAM", str(shared))
    monkeypatch.setenv("GPU_OPERATOR_SRC", _tree(str(isolated / "src")))
    source = upstream.resolve_operator_source("v26.3.3")
    assert "gpu-operator-v26.3.3.tar.gz" in source.origin and source.pin.startswith("v26.3.3 sha256:")
    assert source.tree.endswith("gpu-operator-v26.3.3")


def test_without_clone_a_missing_version_is_not_cloned(isolated, monkeypatch):
    with pytest.raises(upstream.UpstreamMissing) as exc:
        upstream.resolve_operator_source("v26.7.0", clone=False)
    tried = exc.value.tried
    assert tried[1].endswith("gpu-operator-v26.7.0.tar.gz: not present")
    assert tried[2].endswith("no clone in the lab cache, and none made for this version")


FAKE_GO_INSTALL = """#!/bin/sh
# go env GOVERSION: a version; go install MODULE@VERSION: records the module, writes GOBIN/<last path element>.
if [ "$1" = env ]; then echo go1.0-fake; exit 0; fi
echo "$@" >> "$FAKE_GO_CALLS"
for arg; do module=$arg; done
name=${module%@*}; name=${name##*/}
printf '#!/bin/sh\\n' > "$GOBIN/$name"; chmod +x "$GOBIN/$name"
"""


@pytest.mark.parametrize("args, helms", [((), ["helm.sh/helm/v4/cmd/helm@v4.1.4"]),
                                         (("v3",), ["helm.sh/helm/v4/cmd/helm@v4.1.4",
                                                    "helm.sh/helm/v3/cmd/helm@v3.18.4"])])
def test_helm_v3_is_built_only_for_a_lab_that_runs_it(tmp_path, args, helms):
    # helm v4 packages the chart repository whatever the install Jobs run; v3 goes to its own folder.
    env = _with_fake_go(tmp_path, FAKE_GO_INSTALL, FAKE_GO_CALLS=str(tmp_path / "calls"))
    done = subprocess.run(["bash", os.path.join(ROOT, "tests", "lab", "build.sh"), "helm-tools"] + list(args),
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=True)
    tools = done.stdout.splitlines()[-1]
    built = [line.split()[-1] for line in (tmp_path / "calls").read_text().splitlines()]
    assert built == helms + ["github.com/k3s-io/helm-controller@v0.16.27"]
    assert upstream.helm_binary(tools, "v4") == os.path.join(tools, "helm") and os.access(
        os.path.join(tools, "helm"), os.X_OK)
    assert os.access(upstream.helm_binary(tools, "v3"), os.X_OK) == bool(args)


def test_a_helm_line_build_sh_does_not_know_is_refused_before_any_build(tmp_path):
    env = dict(os.environ, GPUPLATFORM_LAB_CACHE=str(tmp_path / "cache"))
    done = subprocess.run(["bash", os.path.join(ROOT, "tests", "lab", "build.sh"), "helm-tools", "v2"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert done.returncode == 2 and "usage:" in done.stderr and "helm-tools [v3]" in done.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("start, built", [("v26.3.2", ["v26.7.0", "v26.3.3"]), ("v26.7.0", ["v26.3.3", "v26.3.2"])])
def test_make_test_asks_the_other_lines_operators_newest_first(tmp_path, monkeypatch, start, built):
    # The driver upgrade suite, early in the integration suite, runs the newest line.
    asked = []
    monkeypatch.setattr(Lab, "operator_build",
                        lambda self, version, clone=True: asked.append((version, clone)) or {"operator_source": "x"})
    Lab(workdir=str(tmp_path), operator_version=start).build_other_operators()
    assert asked == [(version, False) for version in built]


@pytest.mark.parametrize("required", [False, True])
def test_a_line_without_its_source_is_skipped_or_refused_when_upstream_is_required(tmp_path, monkeypatch, required):
    def operator_build(self, version, clone=True):
        if version == "v26.7.0":
            raise upstream.UpstreamMissing("gpu-operator v26.7.0", ["../shared/upstream/gpu-operator-v26.7.0.tar.gz: not present"])
        asked.append(version)
        return {"operator_source": "x"}

    asked = []
    monkeypatch.setattr(Lab, "operator_build", operator_build)
    monkeypatch.setenv(upstream.REQUIRE_ENV, "1" if required else "0")
    lab = Lab(workdir=str(tmp_path), operator_version="v26.3.2")
    if required:
        with pytest.raises(LabError, match=r"no GPU Operator v26\.7\.0 source: .*gpu-operator-v26\.7\.0\.tar\.gz"):
            lab.build_other_operators()
        assert asked == []
    else:
        lab.build_other_operators()
        assert asked == ["v26.3.3"]


def test_two_runs_asking_the_same_operators_opt_tree_write_it_once(isolated, monkeypatch):
    # make test asks the other lines' operators ahead of the integration suite, whose driver upgrade suite may ask
    # the same one meanwhile: both removed and rewrote one opt.partial ("File exists", a failed CI run).
    from tests.lab import lab as lab_mod  # pylint: disable=import-outside-toplevel

    tree = _tree(str(isolated / "src"))
    for folder in ("assets/state-driver", "manifests", "deployments/gpu-operator/crds", "docker"):
        os.makedirs(os.path.join(tree, folder), exist_ok=True)
    open(os.path.join(tree, "assets", "state-driver", "0500_daemonset.yaml"), "w").close()
    with open(os.path.join(tree, "docker", "Dockerfile"), "w") as dockerfile:
        dockerfile.write("COPY deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml "
                         "/opt/nvidia.com_clusterpolicies.yaml\n")
    open(os.path.join(tree, "deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml"), "w").close()
    source = upstream.OperatorSource(tree=tree, origin="test", pin="v26.7.0")
    said = []
    monkeypatch.setattr(upstream, "log", said.append)
    opt = os.path.join(str(isolated / "cache"), "gpu-operator-k1", "opt")
    os.makedirs(os.path.dirname(opt))
    found = []
    with open(opt + ".lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        waiting = threading.Thread(target=lambda: found.append(lab_mod.operator_opt_tree(source, "k1")))
        waiting.start()
        while not said and waiting.is_alive():
            waiting.join(0.05)
        assert said == ["another run is writing %s; waiting for it" % opt] and waiting.is_alive()
        # The other run writes the tree meanwhile (here: this test, as the lab would).
        lab_mod._write_opt_tree(source, lab_mod.opt_chart_files(source), opt)  # pylint: disable=protected-access
        marker = os.path.join(opt, "gpu-operator", "written-once")
        open(marker, "w").close()
    waiting.join()
    # The waiting run found the tree complete and did not write it again (which would have removed the marker).
    assert found == [opt] and os.path.exists(marker)
    assert os.path.isfile(os.path.join(opt, "nvidia.com_clusterpolicies.yaml"))
