"""The rke2 role's cluster logic (module_utils/rke2.py): which server a node joins through and
which token it writes, the refusals that keep a second cluster from starting, the service's
restart and start failure, and the host's architecture against the air-gap folder."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2

SERVERS = ["cp-1", "cp-2", "cp-3"]
CA_HASH = "c0ffee" * 10 + "4242"
SERVER_TOKEN = "K10%s::server:cluster-secret" % CA_HASH
AGENT_TOKEN = "K10%s::node:agent-secret" % CA_HASH


# ---------------------------------------------------------------- who starts the cluster, who joins through whom

def test_first_server_starts_a_cluster_only_when_no_server_holds_one():
    plan = rke2.join_plan("cp-1", SERVERS, {"cp-1": False, "cp-2": False, "cp-3": False})
    assert plan == {"starts_cluster": True, "join_server": "", "token_source": "", "error": ""}


def test_first_server_that_runs_the_cluster_keeps_starting_it_and_is_the_token_source():
    plan = rke2.join_plan("cp-1", SERVERS, {"cp-1": True, "cp-2": True, "cp-3": False})
    assert plan == {"starts_cluster": True, "join_server": "", "token_source": "cp-1", "error": ""}


def test_rebuilt_first_server_is_refused_naming_the_servers_that_run_the_cluster():
    plan = rke2.join_plan("cp-1", SERVERS, {"cp-1": False, "cp-2": True, "cp-3": True})
    assert plan["error"].startswith("cp-1 is the first server of rke2_servers but holds no cluster "
                                    "(/var/lib/rancher/rke2/server/db is empty), while cp-2, cp-3 already run one: "
                                    "starting it would initialise a second cluster")
    assert "List one of those first in rke2_servers" in plan["error"]


def test_first_server_does_not_start_a_cluster_while_a_server_cannot_be_asked():
    plan = rke2.join_plan("cp-1", SERVERS, {"cp-1": False, "cp-2": None, "cp-3": False})
    assert "cp-2 could not be asked whether they run one" in plan["error"]


def test_nodes_join_through_the_first_server_that_runs_the_cluster():
    holds = {"cp-1": True, "cp-2": True, "cp-3": False}
    assert rke2.join_plan("cp-3", SERVERS, holds)["join_server"] == "cp-1"
    assert rke2.join_plan("gpu-1", SERVERS, holds) == {
        "starts_cluster": False, "join_server": "cp-1", "token_source": "cp-1", "error": ""}
    # cp-2 is a member itself: it joins through the other member, not through itself.
    assert rke2.join_plan("cp-2", SERVERS, holds)["join_server"] == "cp-1"


def test_with_the_first_server_gone_nodes_join_through_a_server_that_still_runs_it():
    holds = {"cp-1": None, "cp-2": False, "cp-3": True}
    plan = rke2.join_plan("gpu-1", SERVERS, holds)
    assert (plan["join_server"], plan["token_source"], plan["error"]) == ("cp-3", "cp-3", "")
    # The only member keeps its join address (the first server's) and reads its own token.
    plan = rke2.join_plan("cp-3", SERVERS, holds)
    assert (plan["join_server"], plan["token_source"]) == ("cp-1", "cp-3")


def test_a_node_cannot_join_before_any_server_runs_the_cluster():
    plan = rke2.join_plan("gpu-1", SERVERS, {"cp-1": False, "cp-2": False, "cp-3": False})
    assert plan["error"].startswith("gpu-1 cannot join: no server of rke2_servers runs a cluster yet")
    assert "Install the first server, cp-1, first (make rke2/server/install), or give rke2_token" in plan["error"]
    assert rke2.join_plan("gpu-1", SERVERS, {}, token_given=True)["error"] == ""
    assert rke2.join_plan("gpu-1", SERVERS, {}, check_mode=True)["error"] == ""


def test_join_address_follows_the_join_server_unless_it_is_a_vip():
    addresses = {"cp-1": ["192.0.2.11", "cp-1"], "cp-2": ["192.0.2.12", "cp-2"]}
    assert rke2.join_address("192.0.2.11", addresses, "cp-2") == "192.0.2.12"
    assert rke2.join_address("192.0.2.11", addresses, "cp-1") == "192.0.2.11"
    assert rke2.join_address("api.site.example", addresses, "cp-2") == "api.site.example"


def test_server_addresses_from_the_inventory():
    addresses = rke2.server_addresses({"cp-1": {"host_network_address": "192.0.2.11/24", "ansible_host": "cp-1.lan"},
                                       "cp-2": {"ansible_host": "192.0.2.12"}, "cp-3": {}})
    assert addresses == {"cp-1": ["192.0.2.11", "cp-1.lan", "cp-1"], "cp-2": ["192.0.2.12", "cp-2"],
                         "cp-3": ["cp-3", "cp-3"]}


def test_join_plan_filter_adds_the_join_address_and_names_errors():
    plan = rke2_filters.rke2_join_plan("gpu-1", SERVERS, {"cp-1": False, "cp-2": True}, "192.0.2.11",
                                       {"cp-1": {"host_network_address": "192.0.2.11/24"},
                                        "cp-2": {"host_network_address": "192.0.2.12/24"}})
    assert (plan["join_server"], plan["join_address"]) == ("cp-2", "192.0.2.12")
    assert rke2_filters.rke2_join_plan("cp-1", SERVERS, {})["join_address"] == ""
    with pytest.raises(AnsibleFilterError, match="no hosts in rke2_servers"):
        rke2_filters.rke2_join_plan("cp-1", [], {})


# ---------------------------------------------------------------- tokens

def test_parse_token_full_and_short():
    assert rke2.parse_token(SERVER_TOKEN) == (CA_HASH, "server", "cluster-secret")
    assert rke2.parse_token("K10::node:pw") == ("", "node", "pw")
    assert rke2.parse_token("cluster-secret\n") == ("", "", "cluster-secret")


@pytest.mark.parametrize("token,needle", [
    ("", "is empty"),
    ("K10abc", "has no '::'"),
    ("K10abc::server:pw", "not 64 hex digits"),
    ("K10%s::server" % CA_HASH, "not <user>:<password>"),
])
def test_bad_tokens_are_named_without_their_value(token, needle):
    with pytest.raises(ValueError, match=needle) as caught:
        rke2.parse_token(token, "rke2_token")
    assert "rke2_token" in str(caught.value) and (not token or token not in str(caught.value))


def test_joiners_get_the_full_token_that_pins_the_cluster_ca():
    assert rke2.join_token("server", server_token=SERVER_TOKEN + "\n") == SERVER_TOKEN
    assert rke2.join_token("agent", server_token=SERVER_TOKEN, given_token="cluster-secret") == SERVER_TOKEN
    assert rke2.join_token("agent", given_token="cluster-secret") == "cluster-secret"


def test_agents_get_the_agent_token_when_the_site_sets_one():
    assert rke2.join_token("agent", SERVER_TOKEN, AGENT_TOKEN, "cluster-secret", "agent-secret") == AGENT_TOKEN
    assert rke2.join_token("agent", given_agent_token="agent-secret") == "agent-secret"
    # Servers always join with the server token.
    assert rke2.join_token("server", SERVER_TOKEN, AGENT_TOKEN, "", "agent-secret") == SERVER_TOKEN


def test_a_changed_token_on_a_running_cluster_is_refused_without_showing_either():
    with pytest.raises(ValueError, match="rke2_token is not the token of the cluster that already runs "
                                         r"\(/var/lib/rancher/rke2/server/token\)") as caught:
        rke2.join_token("agent", server_token=SERVER_TOKEN, given_token="new-secret")
    assert "rke2 token rotate" in str(caught.value)
    assert "secret" not in str(caught.value).replace("rke2 token rotate", "")
    with pytest.raises(ValueError, match="rke2_agent_token is not the token"):
        rke2.join_token("agent", SERVER_TOKEN, AGENT_TOKEN, "", "new-agent-secret")
    with pytest.raises(ValueError, match="rke2_token is not the token"):
        rke2.join_token("server", server_token=SERVER_TOKEN, given_token="K10%s::server:cluster-secret" % ("0" * 64))
    assert rke2.token_mismatch(SERVER_TOKEN, SERVER_TOKEN, "rke2_token", "x") == ""


def test_join_token_filter_returns_the_refusal_apart_from_the_token():
    refused = rke2_filters.rke2_join_token("server", SERVER_TOKEN, "", "other")
    assert refused["token"] == "" and refused["error"].startswith("rke2_token is not the token")
    assert rke2_filters.rke2_join_token("agent", SERVER_TOKEN) == {"token": SERVER_TOKEN, "error": ""}


def test_servers_point_at_the_agent_token_file_agents_do_not():
    server = rke2.build_config("server", "cp-1", agent_token_file="/etc/rancher/rke2/agent-token")
    assert server["agent-token-file"] == "/etc/rancher/rke2/agent-token"
    agent = rke2.build_config("agent", "gpu-1", join_address="192.0.2.11", agent_token_file="/x")
    assert "agent-token-file" not in agent
    with pytest.raises(ValueError, match="rke2_config_extra sets 'agent-token-file'"):
        rke2.build_config("server", "cp-1", extra={"agent-token-file": "/x"})


# ---------------------------------------------------------------- the service

def test_restart_reason():
    assert rke2.restart_reason(False, None, "v1.34.2+rke2r1", changed=True) == ""
    assert "this run changed" in rke2.restart_reason(True, None, None, changed=True)
    assert rke2.restart_reason(True, "v1.34.1+rke2r1", "v1.34.1+rke2r1") == ""
    assert rke2.restart_reason(True, "v1.34.1+rke2r1", "v1.34.2+rke2r1") == (
        "the running rke2 is v1.34.1+rke2r1 but v1.34.2+rke2r1 is installed: an earlier run was interrupted before "
        "its restart")
    assert rke2_filters.rke2_restart_reason(True, "rke2 version v1.34.1+rke2r1 (abc)\n",
                                            "rke2 version v1.34.2+rke2r1 (def)\n").startswith("the running rke2 is")


def test_start_failure_names_the_deadline_and_shows_the_journal():
    journal = "level=info msg=\"Starting rke2\"\nlevel=fatal msg=\"failed to contact server on :9345\"\n"
    message = rke2_filters.rke2_start_failure(journal, "rke2-agent", "start", 124, 600)
    assert message == ("start rke2-agent did not report ready within rke2_start_timeout (600s); its last journal "
                       "lines:\nlevel=info msg=\"Starting rke2\"\n"
                       "level=fatal msg=\"failed to contact server on :9345\"")
    assert "failed (systemctl restart exited 1)" in rke2.start_failure("rke2-server", "restart", 1, 600, "")
    assert "(the journal has no lines of rke2-server)" in rke2.start_failure("rke2-server", "restart", 1, 600, "")


# ---------------------------------------------------------------- architecture and the air-gap folder

@pytest.mark.parametrize("machine,arch", [("x86_64", "amd64"), ("aarch64", "arm64")])
def test_release_arch_comes_from_the_host(machine, arch):
    assert rke2.release_arch(machine) == arch
    assert rke2.release_arch(machine, declared=arch) == arch


def test_release_arch_refuses_a_declaration_the_host_contradicts_and_unknown_machines():
    with pytest.raises(ValueError, match="spark-1: the inventory declares rke2_arch amd64, but the host is arm64 "
                                         r"\(ansible_architecture aarch64\)"):
        rke2.release_arch("aarch64", "amd64", "spark-1")
    with pytest.raises(AnsibleFilterError, match="spark-1: ansible_architecture 'ppc64le' has no RKE2 release"):
        rke2_filters.rke2_release_arch("ppc64le", "", "spark-1")


def test_each_host_gets_the_archives_of_its_own_architecture():
    site = ["rke2-images-core.linux-amd64.tar.zst", "rke2-images-canal.linux-amd64.tar.gz", "images.tar"]
    assert rke2_filters.rke2_archives_for_arch(site, "arm64") == [
        "rke2-images-core.linux-arm64.tar.zst", "rke2-images-canal.linux-arm64.tar.gz", "images.tar"]
    assert rke2.archives_for_arch(site, "amd64") == site


@pytest.mark.parametrize("images,cni,missing", [
    (["rke2-images.linux-amd64.tar.zst"], "canal", []),
    (["rke2-images-core.linux-amd64.tar.zst", "rke2-images-canal.linux-amd64.tar.zst"], "canal", []),
    (["rke2-images-core.linux-amd64.tar.zst"], "canal", ["canal"]),
    (["rke2-images.linux-amd64.tar.zst"], "cilium", ["cilium"]),
    (["rke2-images-core.linux-amd64.tar.gz", "rke2-images-cilium.linux-amd64.tar.gz"], "cilium", []),
    (["rke2-images-core.linux-amd64.tar.zst", "rke2-images-calico.linux-amd64.tar.zst"], ["multus", "calico"],
     ["multus"]),
    (["rke2-images-core.linux-amd64.tar.zst"], "none", []),
])
def test_image_archives_against_the_cni(images, cni, missing):
    problems = rke2.image_archive_problems(images, "amd64", cni, "cp-1")
    assert problems == ["cp-1: rke2_cni %s needs its images, but rke2_images has no rke2-images-%s.linux-amd64.tar.zst"
                        % (name, name) for name in missing]
    # A registry serves what the archives lack.
    assert rke2.image_archive_problems(images, "amd64", cni, "cp-1", registry=True) == []


def test_image_archives_need_the_core_images_and_real_names():
    assert rke2.image_archive_problems(["rke2-images-canal.linux-amd64.tar.zst"], "amd64", "canal", "cp-1") == [
        "cp-1: rke2_images has no core images: add rke2-images-core.linux-amd64.tar.zst (or the full "
        "rke2-images.linux-amd64.tar.zst)"]
    assert "is not an RKE2 image archive name" in rke2.image_archive_problems(["images.tar"], "amd64", "canal")[0]


def test_a_bundle_without_the_hosts_architecture_is_refused_naming_host_and_files():
    listing = ["rke2.linux-amd64.tar.gz", "sha256sum-amd64.txt", "rke2-images.linux-amd64.tar.zst"]
    problems = rke2_filters.rke2_airgap_problems(
        ["rke2-images.linux-arm64.tar.zst"], "arm64", "canal", "spark-1", listing=listing,
        wanted=["sha256sum-arm64.txt", "rke2.linux-arm64.tar.gz", "rke2-images.linux-arm64.tar.zst"])
    assert problems == ["spark-1 is arm64, but rke2_artifact_dir lacks sha256sum-arm64.txt, rke2.linux-arm64.tar.gz, "
                        "rke2-images.linux-arm64.tar.zst (it has rke2.linux-amd64.tar.gz, sha256sum-amd64.txt)"]
    assert rke2.bundle_missing(listing, ["sha256sum-amd64.txt"], "amd64") == ""
