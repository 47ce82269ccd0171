"""The rke2 role's pure logic: config.yaml content, the artifact checksum file and the
upgrade rule (module_utils/rke2.py), the filters over it, and the checksum_verify module."""
import hashlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from tests.unit.module_harness import run_module

SERVER_URL = "https://192.0.2.11:9345"


# ---------------------------------------------------------------- config.yaml

def test_first_server_starts_the_cluster_without_server_or_token():
    config = rke2.build_config("server", "cp-1", tls_san=["192.0.2.11", "api.example", "192.0.2.11"])
    assert config == {"node-name": "cp-1", "tls-san": ["192.0.2.11", "api.example"], "cni": "canal"}


def test_joining_agent_gets_server_token_file_labels_and_taints_in_order():
    config = rke2.build_config(
        "agent", "gpu-1", join_address="192.0.2.11", token_file="/etc/rancher/rke2/cluster-token", node_ip="192.0.2.21",
        node_labels={"zone": "shelf-2", "gpuplatform.example/rack": "r1"},
        node_taints=[{"key": "dedicated", "value": "training", "effect": "NoSchedule"},
                     {"key": "maintenance", "effect": "NoExecute"}],
        system_default_registry="registry.example:5000", profile="cis", extra={"kubelet-arg": ["max-pods=250"]})
    assert config["server"] == SERVER_URL
    assert list(config) == ["node-name", "server", "token-file", "node-ip", "node-label", "node-taint",
                            "profile", "protect-kernel-defaults", "kubelet-arg"]
    assert config["node-label"] == ["gpuplatform.example/rack=r1", "zone=shelf-2"]
    assert config["node-taint"] == ["dedicated=training:NoSchedule", "maintenance:NoExecute"]
    assert "cni" not in config and "tls-san" not in config


def test_system_default_registry_goes_to_servers_only():
    # rke2 agent keeps the flag hidden and ignores it (pkg/cli/cmds/agent.go deprecatedFlags).
    agent = rke2.build_config("agent", "gpu-1", join_address="192.0.2.11", system_default_registry="registry.example:5000")
    server = rke2.build_config("server", "cp-1", system_default_registry="registry.example:5000")
    assert "system-default-registry" not in agent
    assert server["system-default-registry"] == "registry.example:5000"


def test_cis_profile_sets_protect_kernel_defaults_and_refuses_it_false():
    config = rke2.build_config("server", "cp-1", profile="cis")
    assert config["profile"] == "cis" and config["protect-kernel-defaults"] is True
    assert "protect-kernel-defaults" not in rke2.build_config("server", "cp-1", profile="etcd")
    with pytest.raises(ValueError, match="sets protect-kernel-defaults to False: rke2_profile cis needs it true"):
        rke2.build_config("server", "cp-1", profile="cis", extra={"protect-kernel-defaults": False})


def test_profile_names_what_rke2_accepts():
    with pytest.raises(ValueError, match=r"rke2_profile 'cis-1.23': RKE2 v1.34.1\+rke2r1 accepts cis or etcd"):
        rke2.build_config("server", "cp-1", profile="cis-1.23")


def test_no_token_value_is_ever_part_of_config():
    config = rke2.build_config("agent", "gpu-1", join_address="192.0.2.11", token_file="/etc/rancher/rke2/cluster-token")
    assert "token" not in config
    with pytest.raises(ValueError, match="rke2_config_extra sets 'token'"):
        rke2.build_config("agent", "gpu-1", join_address="192.0.2.11", extra={"token": "K10abc::server:secret"})


@pytest.mark.parametrize("kwargs,needle", [
    (dict(role="worker"), "rke2_node_role 'worker'"),
    (dict(role="agent"), "an agent needs an address to join through"),
    (dict(node_name="GPU_1"), "k8s_node_name 'GPU_1'"),
    (dict(join_address="https://192.0.2.11:9345"), "must be a bare host name or IP address"),
    (dict(node_labels={"zone": True}), "value of 'zone' must be a string"),
    (dict(node_labels={"zone": "a b"}), "value 'a b' of 'zone'"),
    (dict(node_labels={"-zone": "a"}), "'-zone' is not a valid label"),
    (dict(node_labels={"Bad_Prefix/zone": "a"}), "prefix of 'Bad_Prefix/zone'"),
    (dict(node_taints=[{"key": "a", "effect": "NoScheduled"}]), r"rke2_node_taints\[0\]: effect 'NoScheduled'"),
    (dict(node_taints=[{"key": "a", "effect": "NoSchedule", "operator": "Equal"}]), "unknown field operator"),
    (dict(node_taints={"key": "a"}), "must be a list"),
    (dict(cni="weave"), "rke2_cni 'weave'"),
    (dict(cni=["multus"]), "multus must be followed by exactly one"),
    (dict(system_default_registry="https://registry.example"), "without scheme or path"),
    (dict(extra={"node-label": ["a=b"]}), "rke2_config_extra sets 'node-label'"),
    (dict(extra=["a"]), "rke2_config_extra must be a mapping"),
])
def test_bad_input_names_the_key_or_value(kwargs, needle):
    args = dict(kwargs)
    node_role = args.pop("role", "server")
    args.setdefault("node_name", "cp-1")
    with pytest.raises(ValueError, match=needle):
        rke2.build_config(node_role, **args)


@pytest.mark.parametrize("key", ["disable", "etcd-disable-snapshots", "advertise-address", "agent-token",
                                 "datastore-endpoint", "etcd-expose-metrics", "kube-apiserver-arg+"])
def test_agent_refuses_server_only_extra_keys(key):
    flag = key.rstrip("+")
    with pytest.raises(ValueError, match=r"'%s', a server flag: rke2 agent v1.34.1\+rke2r1 has no --%s" % (
            key.replace("+", r"\+"), flag)):
        rke2.build_config("agent", "gpu-1", join_address="192.0.2.11", extra={key: "x"})


@pytest.mark.parametrize("role", ["server", "agent"])
@pytest.mark.parametrize("key", ["data-dir", "d", "data-dir+"])
def test_a_data_dir_that_would_move_the_roles_files_is_refused(role, key):
    with pytest.raises(ValueError, match=r"rke2_config_extra sets '%s': the role and its checks read RKE2's files "
                                         r"under /var/lib/rancher/rke2" % key.replace("+", r"\+")):
        rke2.build_config(role, "cp-1", join_address="192.0.2.11", extra={key: "/data/rke2"})


def test_agent_keeps_the_flags_it_has():
    config = rke2.build_config("agent", "gpu-1", join_address="192.0.2.11",
                               extra={"kubelet-arg": ["max-pods=250"], "node-external-ip": "198.51.100.7",
                                      "protect-kernel-defaults": True})
    assert config["node-external-ip"] == "198.51.100.7" and config["protect-kernel-defaults"] is True


def test_selinux_is_typed():
    assert rke2.build_config("agent", "gpu-1", join_address="192.0.2.11", selinux=True)["selinux"] is True
    assert "selinux" not in rke2.build_config("server", "cp-1")
    with pytest.raises(ValueError, match="rke2_config_extra sets 'selinux'"):
        rke2.build_config("server", "cp-1", extra={"selinux": True})
    with pytest.raises(ValueError, match="rke2_selinux 'yes' must be true or false"):
        rke2.build_config("server", "cp-1", selinux="yes")


def test_a_server_keeps_its_server_flags():
    assert rke2.build_config("server", "cp-1", extra={"disable": ["rke2-ingress-nginx"]})["disable"] == ["rke2-ingress-nginx"]


def test_multus_comes_first_with_its_cni():
    assert rke2.build_config("server", "cp-1", cni=["multus", "cilium"])["cni"] == ["multus", "cilium"]


def test_server_url_brackets_ipv6():
    assert rke2.server_url("192.0.2.11") == SERVER_URL
    assert rke2.server_url("2001:db8::11") == "https://[2001:db8::11]:9345"


def test_filter_turns_errors_into_filter_errors():
    with pytest.raises(AnsibleFilterError, match="rke2 config.yaml: .*'NoScheduled'"):
        rke2_filters.rke2_config("server", node_name="cp-1", node_taints=[{"key": "a", "effect": "NoScheduled"}])


# ---------------------------------------------------------------- versions

@pytest.mark.parametrize("installed,target,needle", [
    (None, "v1.34.1+rke2r1", ""),
    ("v1.34.1+rke2r1", "v1.34.1+rke2r1", ""),
    ("v1.33.5+rke2r1", "v1.34.1+rke2r1", ""),
    ("v1.34.1+rke2r1", "v1.34.1+rke2r2", ""),
    ("v1.34.1+rke2r1", "v1.33.9+rke2r1", "does not support downgrades"),
    ("v1.34.1+rke2r2", "v1.34.1+rke2r1", "does not support downgrades"),
    ("v1.32.9+rke2r1", "v1.34.1+rke2r1", "one minor version at a time"),
])
def test_upgrade_rule(installed, target, needle):
    error = rke2.upgrade_error(installed, target)
    assert (needle in error) if needle else error == ""


def test_bad_target_version_is_named():
    with pytest.raises(AnsibleFilterError, match="rke2_version 'latest'"):
        rke2_filters.rke2_upgrade_error("latest", "")


def test_installed_version_from_version_output():
    output = "rke2 version v1.34.1+rke2r1 (7b2a4e0d)\ngo version go1.24.6 X:boringcrypto\n"
    assert rke2_filters.rke2_installed_version(output) == "v1.34.1+rke2r1"
    assert rke2_filters.rke2_installed_version("command not found") == ""


# ---------------------------------------------------------------- checksums

def _sha(data):
    return hashlib.sha256(data).hexdigest()


def test_parse_checksums_reads_sha256sum_output():
    text = "%s  rke2.linux-amd64.tar.gz\n%s *rke2-images.linux-amd64.tar.zst\n\n" % ("a" * 64, "B" * 64)
    assert rke2.parse_checksums(text) == {"rke2.linux-amd64.tar.gz": "a" * 64,
                                          "rke2-images.linux-amd64.tar.zst": "b" * 64}


@pytest.mark.parametrize("text,needle", [
    ("", "lists no files"),
    ("deadbeef  rke2.linux-amd64.tar.gz\n", "line 1 is not"),
    ("%s\n" % ("a" * 64), "line 1 is not"),
    ("%s  x\n%s  x\n" % ("a" * 64, "b" * 64), "lists x twice"),
])
def test_bad_checksum_file_is_named(text, needle):
    with pytest.raises(ValueError, match=needle):
        rke2.parse_checksums(text, "sha256sum-amd64.txt")


def test_checksum_problems_name_each_file():
    expected = {"a.tar.gz": "1" * 64, "b.tar.zst": "2" * 64}
    problems = rke2.checksum_problems(expected, {"a.tar.gz": "1" * 64, "b.tar.zst": "3" * 64, "c.txt": "4" * 64,
                                                 "d": None}, "sha256sum-amd64.txt")
    assert problems == [
        "b.tar.zst: sha256 %s does not match %s in sha256sum-amd64.txt (corrupted or wrong file)" % ("3" * 64, "2" * 64),
        "c.txt: not listed in sha256sum-amd64.txt",
        "d: file is missing",
    ]


def _bundle(tmp_path):
    tarball, images = b"tarball bytes", b"image bytes"
    (tmp_path / "rke2.linux-amd64.tar.gz").write_bytes(tarball)
    (tmp_path / "rke2-images.linux-amd64.tar.zst").write_bytes(images)
    (tmp_path / "sha256sum-amd64.txt").write_text("%s  rke2.linux-amd64.tar.gz\n%s  rke2-images.linux-amd64.tar.zst\n"
                                                  % (_sha(tarball), _sha(images)))
    return dict(path=str(tmp_path), checksum_file="sha256sum-amd64.txt",
                files=["rke2.linux-amd64.tar.gz", "rke2-images.linux-amd64.tar.zst"])


def test_checksum_verify_module_passes_a_good_bundle(tmp_path):
    rc, result = run_module("checksum_verify", _bundle(tmp_path), tmp_path)
    assert rc == 0 and result["changed"] is False
    assert result["sha256"]["rke2.linux-amd64.tar.gz"] == _sha(b"tarball bytes")


def test_checksum_verify_module_names_the_corrupted_file(tmp_path):
    args = _bundle(tmp_path)
    (tmp_path / "rke2.linux-amd64.tar.gz").write_bytes(b"tarball bytez")
    rc, result = run_module("checksum_verify", args, tmp_path)
    assert rc != 0 and result["failed"]
    assert "rke2.linux-amd64.tar.gz: sha256" in result["msg"] and "sha256sum-amd64.txt" in result["msg"]
    assert result["problems"] == [p for p in result["problems"] if p.startswith("rke2.linux-amd64.tar.gz")]


def test_checksum_verify_module_names_a_missing_checksum_file(tmp_path):
    args = _bundle(tmp_path)
    (tmp_path / "sha256sum-amd64.txt").unlink()
    rc, result = run_module("checksum_verify", args, tmp_path)
    assert rc != 0 and "cannot read the checksum file %s/sha256sum-amd64.txt" % tmp_path in result["msg"]


# ---------------------------------------------------------------- node readiness

def _node(name, ready="True", version="v1.34.1+rke2r1", reason=None, message=None):
    condition = {"type": "Ready", "status": ready}
    if reason:
        condition.update(reason=reason, message=message)
    return {"metadata": {"name": name, "resourceVersion": "1"},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, condition],
                       "nodeInfo": {"kubeletVersion": version}}}


@pytest.mark.parametrize("node,kubelet_version,ready,needle", [
    (None, None, False, "not registered"),
    ({"metadata": {"name": "n"}, "status": {}}, None, False, "no Ready condition yet"),
    (_node("n", "False", reason="KubeletNotReady", message="container runtime network not ready"), None, False,
     "Ready=False (KubeletNotReady: container runtime network not ready)"),
    (_node("n", "Unknown"), None, False, "Ready=Unknown"),
    (_node("n", version="v1.33.5+rke2r1"), "v1.34.1+rke2r1", False, "its kubelet is v1.33.5+rke2r1, not v1.34.1+rke2r1"),
    (_node("n"), "v1.34.1+rke2r1", True, "Ready (kubelet v1.34.1+rke2r1)"),
    (_node("n", version="v1.33.5+rke2r1"), None, True, "Ready (kubelet v1.33.5+rke2r1)"),
])
def test_node_state(node, kubelet_version, ready, needle):
    state = rke2.node_state(node, kubelet_version)
    assert state[0] is ready and needle in state[1], state


_NO_CNI = ("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
           "message:Network plugin returns error: cni plugin not initialized")


@pytest.mark.parametrize("node,ready,needle", [
    # What a node of a cni: none cluster reports: the kubelet runs, only the network plugin is missing.
    (_node("n", "False", reason="KubeletNotReady", message=_NO_CNI), True, "up, waiting for the site's CNI"),
    # Any other error as well: not up ("[a, b]" is how the kubelet joins several).
    (_node("n", "False", reason="KubeletNotReady", message="[container runtime is down, %s]" % _NO_CNI), False,
     "Ready=False (KubeletNotReady: [container runtime is down"),
    (_node("n", "False", reason="KubeletNotReady", message="PLEG is not healthy"), False, "Ready=False"),
    (_node("n", "False", version="v1.33.5+rke2r1", reason="KubeletNotReady", message=_NO_CNI), False,
     "waiting for a CNI, and its kubelet is v1.33.5+rke2r1, not v1.34.1+rke2r1"),
    (_node("n"), True, "Ready (kubelet v1.34.1+rke2r1)"),
    (None, False, "not registered"),
])
def test_a_node_without_cni_is_up_when_the_network_plugin_is_all_it_lacks(node, ready, needle):
    state = rke2.node_state(node, "v1.34.1+rke2r1", without_cni=True)
    assert state[0] is ready and needle in state[1], state
    # Without the option the same node is not ready: the default wait still needs Ready=True.
    if node is not None and node["status"]["conditions"][-1]["status"] == "False":
        assert not rke2.node_state(node, "v1.34.1+rke2r1")[0]


def test_wait_without_cni_returns_for_a_node_that_lacks_only_the_network_plugin():
    from ansible_collections.gpuplatform.rke2.plugins.modules import node_ready_wait
    api = _FakeNodesApi([], [{"type": "ADDED", "object": _node("cp-1", "False", reason="KubeletNotReady",
                                                               message=_NO_CNI)}])
    done, states, _result = node_ready_wait.wait(api, ["cp-1"], "v1.34.1+rke2r1", 30, without_cni=True)
    assert done and states["cp-1"]["state"].startswith("up, waiting for the site's CNI")


def test_nodes_ready_and_the_failure_message_name_each_waiting_node():
    done, states = rke2.nodes_ready([_node("cp-1"), _node("gpu-1", "False")], ["cp-1", "gpu-1", "gpu-2"])
    assert not done
    assert states["cp-1"]["ready"] and not states["gpu-1"]["ready"]
    assert rke2.not_ready_message(states, 600, ["nodes"]) == (
        "nodes not ready after 600s (the API was unreachable at the end: nodes): gpu-1: Ready=False; "
        "gpu-2: not registered")


class _Stream(object):
    def __init__(self, events):
        self.events = events

    def __iter__(self):
        return iter(self.events)

    def close(self):
        pass


class _FakeNodesApi(object):
    """The k8s_wait adapter over a scripted cluster: one list, then one watch stream."""

    def __init__(self, listed, watched):
        from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_wait import Clock
        self.clock = Clock()
        self.listed, self.watched = listed, watched
        self.requests = []

    def list(self, res, read_timeout):
        self.requests.append(("list", res.field_selector))
        return self.listed, "10"

    def watch(self, res, resource_version, timeout_seconds, read_timeout):
        self.requests.append(("watch", resource_version))
        events, self.watched = self.watched, []
        # A later list (the one that confirms a success) answers as the events left it.
        listed = dict((o["metadata"]["name"], o) for o in self.listed)
        for event in events:
            listed[event["object"]["metadata"]["name"]] = event["object"]
        self.listed = list(listed.values())
        return _Stream(events)


def test_wait_returns_on_the_watch_event_that_makes_the_node_ready():
    from ansible_collections.gpuplatform.rke2.plugins.modules import node_ready_wait
    api = _FakeNodesApi([_node("gpu-1", "False")],
                        [{"type": "MODIFIED", "object": _node("gpu-1", version="v1.33.5+rke2r1")},
                         {"type": "MODIFIED", "object": _node("gpu-1")}])
    done, states, result = node_ready_wait.wait(api, ["gpu-1"], "v1.34.1+rke2r1", 30)
    assert done and states == {"gpu-1": {"ready": True, "state": "Ready (kubelet v1.34.1+rke2r1)"}}
    assert api.requests[:2] == [("list", "metadata.name=gpu-1"), ("watch", "10")]


def test_wait_at_its_deadline_reports_the_last_state():
    from ansible_collections.gpuplatform.rke2.plugins.modules import node_ready_wait
    api = _FakeNodesApi([_node("cp-1")], [])
    done, states = node_ready_wait.wait(api, ["cp-1", "gpu-1"], None, 0)[:2]
    assert not done and states["gpu-1"] == {"ready": False, "state": "not registered"}
    assert api.requests == [("list", None)]
