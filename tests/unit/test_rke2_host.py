"""What the rke2 role keeps in order on a host between runs (module_utils/rke2_host.py and rke2_membership.py's
trusted_sources, through the role's filters): config.yaml.d drop-ins that would override config.yaml, staged
releases an upgrade leaves behind, and the address ranges firewalld's trusted zone must take."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_host

AGENT_CONFIG = rke2.build_config("agent", node_name="gpu-1", join_address="10.0.0.10", token_file="/t",
                                 node_labels={"site": "a"})


def test_a_dropin_that_overrides_the_roles_config_is_refused_by_file_and_key_in_merge_order():
    refusals = rke2_filters.rke2_dropin_conflicts({
        "90-old.yaml": "server: https://10.9.9.9:9345\ntoken: K10secret::server:abc\n",
        "50-labels.yml": "node-label:\n  - site=b\n",
        "60-extra.YAML": "kubelet-arg+:\n  - max-pods=250\nnode-label+:\n  - rack=r1\n",
        "notes.txt": "server: https://10.9.9.9:9345\n",
    }, AGENT_CONFIG, host="gpu-1")
    assert refusals == [
        "gpu-1: /etc/rancher/rke2/config.yaml.d/50-labels.yml sets node-label over config.yaml's (the later file "
        "wins): give the value through the role's variables, or append to it with node-label+",
        "gpu-1: /etc/rancher/rke2/config.yaml.d/90-old.yaml sets server, which decides the node's cluster, name or "
        "paths: the role sets it in config.yaml alone",
        "gpu-1: /etc/rancher/rke2/config.yaml.d/90-old.yaml sets token, which decides the node's cluster, name or "
        "paths: the role sets it in config.yaml alone",
    ]
    # Never a value: a drop-in may hold a token.
    assert not any("K10secret" in refusal or "10.9.9.9" in refusal for refusal in refusals)


@pytest.mark.parametrize("key", ["data-dir", "node-name+", "cni", "agent-token-file", "d"])
def test_membership_and_path_keys_are_refused_appended_or_not(key):
    refusals = rke2_host.dropin_conflicts({"10-a.yaml": {key: "x"}}, {"node-name": "n"})
    assert len(refusals) == 1 and (" sets %s, which decides" % key) in refusals[0]


def test_a_dropin_setting_only_what_the_role_leaves_alone_passes():
    dropins = {"50-gpu-operator-pss.yaml": "pod-security-admission-config-file: /etc/rancher/rke2/gpu-pss.yaml\n",
               "00-empty.yaml": ""}
    assert rke2_filters.rke2_dropin_conflicts(dropins, AGENT_CONFIG) == []


def test_a_dropin_rke2_cannot_read_is_refused_without_quoting_it():
    refusals = rke2_filters.rke2_dropin_conflicts({"a.yaml": "token: [K10secret\n", "b.yaml": "- a list\n"}, {})
    assert refusals == ["this host: /etc/rancher/rke2/config.yaml.d/a.yaml is not YAML (RKE2 stops on it at start)",
                        "this host: /etc/rancher/rke2/config.yaml.d/b.yaml is not a mapping of config keys "
                        "(RKE2 stops on it at start)"]
    with pytest.raises(AnsibleFilterError, match="mapping of file name"):
        rke2_filters.rke2_dropin_conflicts(["a.yaml"])


def test_staged_releases_but_the_current_and_the_newest_before_it_are_removed():
    names = ["v1.33.5+rke2r1", "v1.34.1+rke2r1", "v1.34.2+rke2r1", "v1.32.9+rke2r2", "site-notes", "v1.34.10+rke2r1"]
    # By number, not by text: v1.34.10 is later than v1.34.2, so no way back from it (the role refuses downgrades).
    assert rke2_filters.rke2_stale_stages(names, "v1.34.2+rke2r1") == [
        "v1.32.9+rke2r2", "v1.33.5+rke2r1", "v1.34.10+rke2r1"]
    assert rke2_filters.rke2_stale_stages(names, "v1.34.10+rke2r1", keep=2) == ["v1.32.9+rke2r2", "v1.33.5+rke2r1"]
    assert rke2_filters.rke2_stale_stages(names, "v1.34.10+rke2r1", keep=0) == [
        "v1.32.9+rke2r2", "v1.33.5+rke2r1", "v1.34.1+rke2r1", "v1.34.2+rke2r1"]
    assert rke2_filters.rke2_stale_stages(names, "v1.34.10+rke2r1", keep=9) == []
    assert rke2_filters.rke2_stale_stages([], "v1.34.1+rke2r1") == []


@pytest.mark.parametrize("keep", [-1, True, "1", 1.5])
def test_a_keep_count_that_is_no_whole_number_is_refused_by_name(keep):
    with pytest.raises(AnsibleFilterError, match="rke2_staged_releases_keep"):
        rke2_filters.rke2_stale_stages(["v1.34.1+rke2r1"], "v1.34.2+rke2r1", keep=keep)


def test_firewalld_trusts_the_pod_and_service_ranges_with_rkes_defaults():
    assert rke2_filters.rke2_trusted_sources({}) == ["10.42.0.0/16", "10.43.0.0/16"]
    assert rke2_filters.rke2_trusted_sources({"cluster-cidr": "10.100.0.0/16,fd00:42::/56",
                                              "service-cidr": "10.101.0.0/16, fd00:43::/112"}) == [
        "10.100.0.0/16", "fd00:42::/56", "10.101.0.0/16", "fd00:43::/112"]
    assert rke2_filters.rke2_trusted_sources(None) == ["10.42.0.0/16", "10.43.0.0/16"]
