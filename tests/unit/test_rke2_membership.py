"""Which RKE2 cluster a node belongs to (module_utils/rke2_membership.py, the rke2 role's filters over it): a
single server that lost its datastore does not quietly start a new cluster over the nodes of the old one, a node
of one cluster is not moved into another, a member keeps the server it joined through, a server does not restart
while another cannot be asked; and the drain's mark that lets a later run uncordon exactly the nodes it cordoned.
Certificates are made here with cryptography, as RKE2 makes its CA (self-signed, one PEM), so the CA hash is the
one k3s puts in a full token (pkg/clientaccess/token.go hashCA)."""
import base64
import datetime
import hashlib

import pytest
from ansible.errors import AnsibleFilterError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import node_drain as nd
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_membership as membership

SERVERS = ["cp-1", "cp-2", "cp-3"]


def certificate(name, issuer=None):
    """(PEM bytes, key) of a CA certificate named ``name``, self-signed or signed by ``issuer`` ((PEM, key))."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, signer = subject, key
    if issuer:
        issuer_name, signer = x509.load_pem_x509_certificate(issuer[0]).subject, issuer[1]
    now = datetime.datetime(2026, 12, 1)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(signer, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), key


@pytest.fixture(scope="module")
def old_ca():
    return certificate("rke2-server-ca@1764000000")


@pytest.fixture(scope="module")
def new_ca():
    return certificate("rke2-server-ca@1765000000")


def token_of(ca_pem, password="cluster-secret"):
    """The full server token a server of the cluster with this CA holds (k3s FormatTokenBytes)."""
    return "K10%s::server:%s" % (hashlib.sha256(ca_pem).hexdigest(), password)


def slurped(ca_pem):
    return base64.b64encode(ca_pem).decode("ascii")


# ---------------------------------------------------------------- the CA a node holds, the CA a token names

def test_a_one_certificate_bundle_hashes_as_k3s_hashes_it(old_ca):
    assert hashlib.sha256(old_ca[0]).hexdigest() in membership.ca_hashes(old_ca[0])
    assert membership.token_ca_hash(token_of(old_ca[0])) == hashlib.sha256(old_ca[0]).hexdigest()
    assert membership.token_ca_hash("cluster-secret") == ""


def test_a_bundle_of_several_names_its_root_too(old_ca):
    # k3s hashes the root's DER for a bundle of several (a renewed or intermediate CA): the root's must be known.
    intermediate = certificate("rke2-intermediate", issuer=old_ca)
    root_der = x509.load_pem_x509_certificate(old_ca[0]).public_bytes(serialization.Encoding.DER)
    assert hashlib.sha256(root_der).hexdigest() in membership.ca_hashes(intermediate[0] + old_ca[0])


def test_a_bundle_that_is_not_pem_is_named():
    broken = b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"
    with pytest.raises(ValueError, match="agent/server-ca.crt is not a PEM certificate bundle"):
        membership.ca_hashes(broken)
    with pytest.raises(ValueError, match="gpu-1: /var/lib/rancher/rke2/agent/server-ca.crt as read"):
        membership.members_of({"gpu-1": "not base64!"})


def test_members_are_the_nodes_that_hold_a_bundle(old_ca):
    members = membership.members_of({"cp-1": "", "gpu-1": slurped(old_ca[0]), "gpu-2": None})
    assert list(members) == ["gpu-1"]


# ---------------------------------------------------------------- a new cluster over an old one's nodes

def test_a_single_server_that_lost_its_datastore_does_not_start_a_cluster_over_its_agents(old_ca):
    plan = rke2.join_plan("cp-1", ["cp-1"], {"cp-1": False})
    assert plan["starts_cluster"] and plan["token_source"] == ""
    bundles = {"cp-1": "", "gpu-1": slurped(old_ca[0]), "gpu-2": slurped(old_ca[0]), "gpu-3": ""}
    error = rke2_filters.rke2_membership_error("cp-1", plan, bundles)
    assert error.startswith("cp-1 would initialise a new, empty cluster (no server of rke2_servers holds "
                            "/var/lib/rancher/rke2/server/db), but gpu-1, gpu-2 belonged to a cluster")
    assert "--cluster-reset-restore-path" in error and "rke2_confirm_new_cluster=true" in error
    # Confirmed for this run, or no node ever belonged to a cluster (a first install): it starts.
    assert rke2_filters.rke2_membership_error("cp-1", plan, bundles, confirmed=True) == ""
    assert rke2_filters.rke2_membership_error("cp-1", plan, {"cp-1": "", "gpu-1": ""}) == ""


def test_the_first_server_that_holds_the_cluster_is_not_asked_about_members(old_ca):
    plan = rke2.join_plan("cp-1", SERVERS, {"cp-1": True, "cp-2": True, "cp-3": True})
    own = {"cp-1": slurped(old_ca[0])}
    assert rke2_filters.rke2_membership_error("cp-1", plan, own, token_of(old_ca[0])) == ""


# ---------------------------------------------------------------- a node of another cluster

def test_a_node_of_another_cluster_is_not_moved_into_this_one(old_ca, new_ca):
    plan = rke2.join_plan("gpu-1", SERVERS, {"cp-1": True, "cp-2": False, "cp-3": False})
    error = rke2_filters.rke2_membership_error("gpu-1", plan, {"gpu-1": slurped(old_ca[0])}, token_of(new_ca[0]))
    assert error.startswith("gpu-1 belongs to another cluster: its /var/lib/rancher/rke2/agent/server-ca.crt is not "
                            "the CA of the cluster cp-1 runs (that cluster's token names CA %s..."
                            % hashlib.sha256(new_ca[0]).hexdigest()[:16])
    assert "cluster-secret" not in error
    assert rke2_filters.rke2_membership_error("gpu-1", plan, {"gpu-1": slurped(old_ca[0])}, token_of(new_ca[0]),
                                              confirmed=True) == ""


def test_a_member_of_this_cluster_a_new_node_and_a_short_token_join(old_ca):
    plan = rke2.join_plan("gpu-1", SERVERS, {"cp-1": True})
    assert rke2_filters.rke2_membership_error("gpu-1", plan, {"gpu-1": slurped(old_ca[0])}, token_of(old_ca[0])) == ""
    assert rke2_filters.rke2_membership_error("gpu-1", plan, {"gpu-1": ""}, token_of(old_ca[0])) == ""
    # A short token names no CA: nothing to compare (the site's rke2_token before the cluster's was read).
    assert rke2_filters.rke2_membership_error("gpu-1", plan, {"gpu-1": slurped(old_ca[0])}, "cluster-secret") == ""


def test_a_bad_server_token_is_named_without_its_value():
    plan = rke2.join_plan("gpu-1", SERVERS, {"cp-1": True})
    with pytest.raises(AnsibleFilterError, match="the cluster's server token: the CA hash after K10") as caught:
        rke2_filters.rke2_membership_error("gpu-1", plan, {}, "K10abc::server:pw")
    assert "pw" not in str(caught.value).replace("password", "")


# ---------------------------------------------------------------- the server a member joined through

ADDRESSES = {"cp-1": {"host_network_address": "192.0.2.11/24"}, "cp-2": {"host_network_address": "192.0.2.12/24"},
             "cp-3": {"host_network_address": "192.0.2.13/24"}}


def test_with_the_first_server_unknown_a_member_keeps_the_server_it_joined_through():
    holds = {"cp-1": None, "cp-2": True, "cp-3": True}
    kept = rke2_filters.rke2_join_plan("gpu-1", SERVERS, holds, "192.0.2.11", ADDRESSES,
                                       joined_with="https://192.0.2.11:9345", member=True)
    assert kept["join_address"] == "192.0.2.11" and kept["unknown_servers"] == ["cp-1"]
    # A new node (no cluster CA yet) joins through a server that runs the cluster.
    new = rke2_filters.rke2_join_plan("gpu-9", SERVERS, holds, "192.0.2.11", ADDRESSES)
    assert new["join_address"] == "192.0.2.12"


def test_an_address_in_front_of_the_servers_wins_over_the_one_a_member_joined_with():
    plan = rke2_filters.rke2_join_plan("gpu-1", SERVERS, {"cp-1": True}, "api.site.example", ADDRESSES,
                                       joined_with="https://192.0.2.11:9345", member=True)
    assert plan["join_address"] == "api.site.example"


@pytest.mark.parametrize("url,address", [("https://192.0.2.11:9345", "192.0.2.11"), ("https://[2001:db8::11]:9345",
                                                                                     "2001:db8::11"),
                                         ("cp-1.lan:9345", "cp-1.lan"), ("", "")])
def test_the_address_of_a_server_url(url, address):
    assert membership._address_of(url) == address  # pylint: disable=protected-access


def test_a_server_that_holds_a_datastore_but_does_not_run_serves_no_join():
    holds = {"cp-1": True, "cp-2": True, "cp-3": False}
    plan = rke2_filters.rke2_join_plan("gpu-1", SERVERS, holds, "192.0.2.11", ADDRESSES,
                                       running={"cp-1": "inactive", "cp-2": "active", "cp-3": None})
    assert (plan["join_server"], plan["token_source"], plan["join_address"]) == ("cp-2", "cp-2", "192.0.2.12")
    # The datastore alone still says a cluster exists: a rebuilt first server is refused all the same.
    refused = rke2.join_plan("cp-1", SERVERS, {"cp-1": False, "cp-2": True}, running={"cp-2": False})
    assert "would initialise a second cluster" in refused["error"]


# ---------------------------------------------------------------- no server restart while a server is unknown

def test_a_server_does_not_restart_while_another_cannot_be_asked():
    refusal = rke2_filters.rke2_restart_refusal("cp-2", "this run changed config.yaml", ["cp-1"])
    assert refusal.startswith("cp-2 would restart (this run changed config.yaml) while cp-1 could not be asked")
    assert "Bring cp-1 back" in refusal
    assert rke2_filters.rke2_restart_refusal("cp-2", "", ["cp-1"]) == ""
    assert rke2_filters.rke2_restart_refusal("cp-2", "an upgrade", []) == ""
    assert rke2_filters.rke2_restart_refusal("cp-1", "an upgrade", ["cp-1"]) == ""


# ---------------------------------------------------------------- the drain's mark

def _node(name, unschedulable=False, mark=None):
    meta = {"name": name}
    if mark:
        meta["annotations"] = {nd.CORDON_MARK: mark}
    return {"metadata": meta, "spec": {"unschedulable": unschedulable}, "status": {}}


def test_only_a_node_a_drain_of_ours_cordoned_is_uncordoned_by_mark():
    nodes = [_node("gpu-1", True, "rke2-upgrade"), _node("gpu-2", True), _node("gpu-3", False, "rke2-upgrade")]
    assert nd.uncordon_plan(nodes, "gpu-1", "rke2-upgrade") == (True, True)
    # Someone else cordoned gpu-2: it stays so. gpu-3 was uncordoned by hand: only the mark goes.
    assert nd.uncordon_plan(nodes, "gpu-2", "rke2-upgrade") == (False, False)
    assert nd.uncordon_plan(nodes, "gpu-3", "rke2-upgrade") == (False, True)
    # Without a mark, any cordoned node.
    assert nd.uncordon_plan(nodes, "gpu-2") == (True, False)
    assert nd.cordon_mark(nodes, "gpu-2") == ""


class _Core(object):
    def __init__(self):
        self.bodies = []

    def patch_node(self, name, body):
        self.bodies.append((name, body))


class _Api(object):
    def __init__(self):
        self.core = _Core()

    @staticmethod
    def _call(function, *args):
        return function(*args)


def test_the_mark_goes_on_with_the_cordon_and_off_with_the_uncordon():
    api = _Api()
    nd.Requests(api).set_unschedulable("gpu-1", True, "rke2-upgrade")
    nd.Requests(api).set_unschedulable("gpu-1", False, "")
    nd.Requests(api).set_unschedulable("gpu-1", False)
    assert api.core.bodies == [
        ("gpu-1", {"spec": {"unschedulable": True}, "metadata": {"annotations": {nd.CORDON_MARK: "rke2-upgrade"}}}),
        ("gpu-1", {"spec": {"unschedulable": False}, "metadata": {"annotations": {nd.CORDON_MARK: None}}}),
        ("gpu-1", {"spec": {"unschedulable": False}})]


# ---------------------------------------------------------------- the quorum gate of a server restart

def _server(name, ready="True", voter=None):
    conditions = [{"type": "Ready", "status": ready}]
    if voter:
        conditions.append(dict({"type": "EtcdIsVoter"}, **voter))
    return {"metadata": {"name": name}, "status": {"conditions": conditions,
                                                   "nodeInfo": {"kubeletVersion": "v1.34.1+rke2r1"}}}


VOTER = {"status": "True", "reason": "MemberNotLearner", "message": "Node is a voting member of the etcd cluster"}
LEARNER = {"status": "False", "reason": "MemberIsLearner",
           "message": "Node has not been promoted to voting member of the etcd cluster"}


def test_the_quorum_gate_wants_every_other_datastore_server_ready_and_voting():
    nodes = [_server("cp-1", voter=VOTER), _server("cp-2", voter=LEARNER), _server("cp-3"),
             _server("cp-4", ready="False", voter=VOTER)]
    done, states = rke2.nodes_ready(nodes, ["cp-1", "cp-2", "cp-3", "cp-4"], etcd_voter=True)
    assert not done
    assert states["cp-1"] == {"ready": True, "state": "Ready (kubelet v1.34.1+rke2r1) and a voting etcd member"}
    assert states["cp-2"]["state"] == ("Ready (kubelet v1.34.1+rke2r1), but EtcdIsVoter=False (MemberIsLearner: "
                                       "Node has not been promoted to voting member of the etcd cluster)")
    assert "no EtcdIsVoter condition yet" in states["cp-3"]["state"]
    assert states["cp-4"] == {"ready": False, "state": "Ready=False"}
    # Without the gate, Ready alone counts (agents, and every wait before this one).
    assert rke2.nodes_ready(nodes[:3], ["cp-1", "cp-2", "cp-3"])[0]


def test_the_plan_names_the_other_datastore_servers_by_node_name():
    plan = rke2_filters.rke2_join_plan("cp-2", SERVERS, {"cp-1": True, "cp-2": True, "cp-3": False}, "192.0.2.11",
                                       {"cp-1": {"k8s_node_name": "tirosh-cp-1"}, "cp-2": {}, "cp-3": {}})
    assert plan["quorum_nodes"] == ["tirosh-cp-1"]
    first = rke2_filters.rke2_join_plan("cp-1", SERVERS, {"cp-1": True, "cp-2": True, "cp-3": None})
    assert first["quorum_nodes"] == ["cp-2"] and first["unknown_servers"] == ["cp-3"]


# ---------------------------------------------------------------- taking a node out for good

def test_removing_a_server_gates_on_the_servers_that_stay():
    plan = rke2_filters.rke2_removal_plan("cp-2", SERVERS, ["gpu-1"], {"cp-1": {"k8s_node_name": "tirosh-cp-1"}},
                                          node_name="Tirosh-CP-2")
    assert plan == {"role": "server", "node_name": "Tirosh-CP-2", "secret": "tirosh-cp-2.node-password.rke2",
                    "quorum_nodes": ["tirosh-cp-1", "cp-3"], "error": ""}
    agent = rke2_filters.rke2_removal_plan("gpu-1", SERVERS, ["gpu-1"])
    assert (agent["role"], agent["quorum_nodes"], agent["secret"]) == ("agent", [], "gpu-1.node-password.rke2")


def test_the_last_server_and_an_unknown_host_are_refused():
    assert rke2_filters.rke2_removal_plan("cp-1", ["cp-1"], ["gpu-1"])["error"].startswith(
        "cp-1 is the cluster's only server: removing it ends the cluster")
    assert rke2_filters.rke2_removal_plan("gpu-9", SERVERS, ["gpu-1"])["error"] == (
        "rke2_remove_node=gpu-9: no such host in rke2_servers or rke2_agents (cp-1, cp-2, cp-3, gpu-1)")
    assert "the inventory has none" in rke2_filters.rke2_removal_plan("", [], [])["error"]
