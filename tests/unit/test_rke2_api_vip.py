"""A fixed API address for an HA cluster (rke2_api_vip): the checks before anything changes and
kube-vip's static pod (module_utils/rke2_api_vip.py, filter rke2_kube_vip_manifest), then the rke2
role's tasks as ansible-playbook runs them on this machine: the rendered static pod and tls-san,
refusals naming the variable, and the interface check against the host's /sys/class/net."""
import json
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_api_vip as vip
from tests.unit.role_runner import PYTHON, role_playbook, run_playbook

NODE = "192.0.2.11/24"
TAKEN = ["192.0.2.11/24", "192.0.2.12/24", "192.0.2.21/24"]


def _problems(address="192.0.2.10", **kwargs):
    args = dict(interface="enp1s0", node_address=NODE, api_address=address, taken=TAKEN, host="cp-1")
    args.update(kwargs)
    return vip.problems(address, **args)


# ---------------------------------------------------------------- the checks

def test_a_free_address_of_the_nodes_subnet_is_accepted():
    assert _problems() == []
    # A DNS name for the VIP is what the nodes may join through instead.
    assert _problems(api_address="api.example") == []


@pytest.mark.parametrize("changes, needle", [
    (dict(address="198.51.100.10"), "cp-1: rke2_api_vip 198.51.100.10 is not in the node's subnet 192.0.2.0/24 "
                                    "(host_network_address 192.0.2.11/24)"),
    (dict(address="192.0.2.0"), "rke2_api_vip 192.0.2.0 is the network address of 192.0.2.0/24"),
    (dict(address="192.0.2.255"), "rke2_api_vip 192.0.2.255 is the broadcast address of 192.0.2.0/24"),
    (dict(address="192.0.2.12"), "rke2_api_vip 192.0.2.12 is a node's own address"),
    (dict(address="2001:db8::10"), "rke2_api_vip 2001:db8::10 is not in the node's subnet"),
    (dict(address="api.example"), "cp-1: rke2_api_vip 'api.example' is not an IP address"),
    (dict(interface=""), "rke2_api_vip 192.0.2.10 needs rke2_api_vip_interface"),
    (dict(interface="../.."), "rke2_api_vip_interface '../..' is not a Linux interface name"),
    (dict(interface=".."), "rke2_api_vip_interface '..' is not a Linux interface name"),
    (dict(interface="a-very-long-name0"), "is not a Linux interface name"),
    (dict(node_address=""), "needs the node's address with its prefix (host_network_address"),
    (dict(node_address="192.0.2.11"), "needs the node's address with its prefix"),
    (dict(api_address="192.0.2.11"), "rke2_api_address 192.0.2.11 is not rke2_api_vip 192.0.2.10"),
])
def test_bad_input_is_named(changes, needle):
    address = changes.pop("address", "192.0.2.10")
    found = _problems(address, **changes)
    assert any(needle in problem for problem in found), found


def test_air_gapped_the_image_comes_from_the_sites_registry():
    upstream = vip.default_image("")
    assert upstream == "ghcr.io/kube-vip/kube-vip:" + vip.KUBE_VIP_VERSION
    found = _problems(airgapped=True, image=upstream)
    assert len(found) == 1 and "air-gapped, kube-vip's image %s must come from the site's registry" % upstream in found[0]
    assert "mirror ghcr.io/kube-vip/kube-vip:%s there" % vip.KUBE_VIP_VERSION in found[0]
    mirrored = vip.default_image("registry.example:5000")
    assert mirrored == "registry.example:5000/kube-vip/kube-vip:" + vip.KUBE_VIP_VERSION
    assert _problems(airgapped=True, image=mirrored, system_default_registry="registry.example:5000") == []
    # A registries.yaml mirror for ghcr.io (or "*") serves the upstream name.
    assert _problems(airgapped=True, image=upstream, mirrors={"ghcr.io": {}}) == []
    assert _problems(airgapped=True, image=upstream, mirrors={"*": {}}) == []
    # Online, the upstream registry is fine.
    assert _problems(image=upstream) == []


def test_image_registry_is_what_containerd_resolves():
    assert vip.image_registry("ghcr.io/kube-vip/kube-vip:v1") == "ghcr.io"
    assert vip.image_registry("registry.example:5000/kube-vip/kube-vip:v1") == "registry.example:5000"
    assert vip.image_registry("localhost/kube-vip:v1") == "localhost"
    assert vip.image_registry("plndr/kube-vip:v1") == "docker.io"


# ---------------------------------------------------------------- the static pod

def test_manifest_holds_the_address_in_arp_mode_with_leader_election_through_rke2s_kubeconfig():
    pod = vip.manifest("192.0.2.10", "enp1s0", "registry.example:5000/kube-vip/kube-vip:v1.2.2")
    assert (pod["kind"], pod["metadata"]["name"], pod["metadata"]["namespace"]) == ("Pod", "kube-vip", "kube-system")
    spec = pod["spec"]
    assert spec["hostNetwork"] is True
    container = spec["containers"][0]
    assert container["image"] == "registry.example:5000/kube-vip/kube-vip:v1.2.2"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["args"] == ["manager"]
    env = dict((e["name"], e["value"]) for e in container["env"])
    assert env == {"vip_arp": "true", "port": "6443", "vip_interface": "enp1s0", "vip_subnet": "32",
                   "cp_enable": "true", "cp_namespace": "kube-system", "vip_leaderelection": "true",
                   "vip_leasename": "plndr-cp-lock", "vip_leaseduration": "5", "vip_renewdeadline": "3",
                   "vip_retryperiod": "1", "address": "192.0.2.10"}
    assert container["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_RAW"]
    assert container["volumeMounts"] == [{"name": "kubeconfig", "mountPath": "/etc/kubernetes/admin.conf",
                                          "readOnly": True}]
    assert spec["volumes"] == [{"name": "kubeconfig",
                                "hostPath": {"path": "/etc/rancher/rke2/rke2.yaml", "type": "File"}}]
    assert vip.MANIFEST == "/var/lib/rancher/rke2/agent/pod-manifests/kube-vip.yaml"


def test_filter_builds_the_pod_with_the_pinned_image_or_fails_naming_every_problem():
    pod = rke2_filters.rke2_kube_vip_manifest("192.0.2.10", interface="enp1s0", node_address=NODE,
                                              api_address="192.0.2.10", taken=TAKEN, host="cp-1", airgapped=True,
                                              system_default_registry="registry.example:5000")
    assert pod["spec"]["containers"][0]["image"] == "registry.example:5000/kube-vip/kube-vip:" + vip.KUBE_VIP_VERSION
    with pytest.raises(AnsibleFilterError) as failure:
        rke2_filters.rke2_kube_vip_manifest("198.51.100.10", interface="", node_address=NODE,
                                            api_address="198.51.100.10", host="cp-1", airgapped=True)
    message = str(failure.value)
    assert "needs rke2_api_vip_interface" in message and "is not in the node's subnet" in message
    assert "must come from the site's registry" in message


# ---------------------------------------------------------------- the role's tasks, as ansible-playbook runs them

PLAYBOOK = role_playbook("rke2_servers", ["render", "api_vip_checks"], """\
    - name: Hand the result to the test
      ansible.builtin.copy:
        content: "{{ rke2_rendered_files | to_json }}"
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
""")


def _run(tmp_path, **extra):
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": PYTHON,
                 "rke2_api_vip": "192.0.2.10", "rke2_tls_san": ["api.example"],
                 "rke2_system_default_registry": "registry.example:5000", "rke2_artifact_source": "local",
                 "out": str(tmp_path)},
        "children": {
            "rke2_servers": {"hosts": {
                "cp-1": {"host_network_address": "192.0.2.11/24", "host_network_interface": "lo"},
                "cp-2": {"host_network_address": "192.0.2.12/24", "host_network_interface": "lo"}}},
            "rke2_agents": {"hosts": {"gpu-1": {"host_network_address": "192.0.2.21/24"}}}}}}
    inventory["all"]["vars"].update(extra)
    return run_playbook(tmp_path, PLAYBOOK, inventory)


def _rendered(tmp_path, host):
    with open(str(tmp_path / ("%s.json" % host)), encoding="utf-8") as handle:
        return json.load(handle)


def test_role_renders_kube_vip_on_every_server_and_the_address_in_tls_san(tmp_path):
    rc, output = _run(tmp_path)
    assert rc == 0, output
    for host in ("cp-1", "cp-2"):
        files = _rendered(tmp_path, host)
        config = yaml.safe_load(files["config.yaml"])
        # rke2_api_address follows the VIP: in tls-san, and what the other servers join through.
        assert config["tls-san"] == ["192.0.2.10", "api.example"]
        assert (host == "cp-1") == ("server" not in config)
        assert host == "cp-1" or config["server"] == "https://192.0.2.10:9345"
        assert files["kube-vip.yaml"].splitlines()[0].endswith("(role gpuplatform.rke2.rke2): kube-vip holds the API "
                                                               "address rke2_api_vip")
        pod = yaml.safe_load(files["kube-vip.yaml"])
        env = dict((e["name"], e["value"]) for e in pod["spec"]["containers"][0]["env"])
        assert env["address"] == "192.0.2.10" and env["vip_interface"] == "lo"
        assert pod["spec"]["containers"][0]["image"] == ("registry.example:5000/kube-vip/kube-vip:"
                                                         + vip.KUBE_VIP_VERSION)


def test_role_without_a_vip_renders_no_static_pod(tmp_path):
    rc, output = _run(tmp_path, rke2_api_vip="", rke2_api_address="192.0.2.11")
    assert rc == 0, output
    files = _rendered(tmp_path, "cp-2")
    assert "kube-vip.yaml" not in files
    assert yaml.safe_load(files["config.yaml"])["tls-san"] == ["192.0.2.11", "api.example"]


def test_role_refuses_an_address_outside_the_subnet_naming_it(tmp_path):
    rc, output = _run(tmp_path, rke2_api_vip="198.51.100.10")
    assert rc != 0
    assert "cp-1: rke2_api_vip 198.51.100.10 is not in the node's subnet 192.0.2.0/24" in output, output
    assert not os.path.exists(str(tmp_path / "cp-1.json"))


def test_role_refuses_an_interface_the_host_lacks(tmp_path):
    rc, output = _run(tmp_path, rke2_api_vip_interface="nosuch0")
    assert rc != 0
    assert "rke2_api_vip_interface nosuch0 is no interface of this host (/sys/class/net/nosuch0 is missing)" in output, \
        output
