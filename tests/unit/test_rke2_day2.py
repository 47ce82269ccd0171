"""Day 2 of an RKE2 cluster (module_utils/rke2_day2.py, the rke2 role's filters over it): the snapshot a server takes
before its upgrade, named and read back from what rke2 etcd-snapshot save logs, and the certificates' state from
rke2 certificate check --output json, in the shapes k3s's pkg/cli/etcdsnapshot and pkg/cli/cert print them."""
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_day2 as day2

# logrus's text format on a terminal-less stderr, as the role's command task captures it.
SAVE_OUTPUT = ('time="2026-12-06T05:10:02Z" level=info msg="Snapshot pre-upgrade-v1.34.2-rke2r1-cp-1-1765000202 '
               'saved."\n')


def test_the_snapshot_is_named_for_the_release_it_precedes():
    assert day2.snapshot_name("v1.34.2+rke2r1") == "pre-upgrade-v1.34.2-rke2r1"
    with pytest.raises(AnsibleFilterError, match="rke2_version"):
        rke2_filters.rke2_snapshot_name("1.34.2")


def test_the_saved_snapshots_are_read_from_the_log():
    assert rke2_filters.rke2_saved_snapshots(SAVE_OUTPUT + "\n") == ["pre-upgrade-v1.34.2-rke2r1-cp-1-1765000202"]
    refused = 'time="..." level=fatal msg="see server log for details: etcd datastore disabled"'
    with pytest.raises(AnsibleFilterError, match="reported no snapshot saved: .*etcd datastore disabled"):
        rke2_filters.rke2_saved_snapshots(refused)
    with pytest.raises(ValueError, match=r"\(no output\)"):
        day2.saved_snapshots("")


def _cert(name, status, expiry="2027-03-01T00:00:00Z"):
    return {"Filename": name, "Subject": name.split(".")[0], "Issuer": "rke2-server-ca@1764000000",
            "Usages": ["ClientAuth"], "ExpiryTime": expiry, "ResidualTime": 7776000000000000, "Status": status}


def test_expired_and_not_yet_valid_certificates_are_errors_and_soon_expiring_ones_warnings():
    check = json.dumps({"Certificates": [_cert("client-admin.crt", "OK"), _cert("serving-kubelet.crt", "WARNING"),
                                         _cert("client-kubelet.crt", "EXPIRED", "2026-11-30T00:00:00Z"),
                                         _cert("server-ca.crt", "NOT YET VALID", "2027-01-01T00:00:00Z")]})
    report = rke2_filters.rke2_certificate_report(check, "cp-1")
    assert report["count"] == 4
    assert report["errors"] == [
        "cp-1: client-kubelet.crt (client-kubelet) expires 2026-11-30T00:00:00Z: EXPIRED",
        "cp-1: server-ca.crt (server-ca) valid from 2027-01-01T00:00:00Z: NOT YET VALID"]
    assert report["warnings"] == [
        "cp-1: serving-kubelet.crt (serving-kubelet) expires 2027-03-01T00:00:00Z, within 120 days: RKE2 renews it "
        "at the next start of its service (make rke2/certificates/rotate renews every node now)"]


def test_a_node_without_certificates_and_output_that_is_not_the_check_s():
    assert rke2_filters.rke2_certificate_report('{"Certificates":null}\n') == {"errors": [], "warnings": [],
                                                                               "count": 0}
    with pytest.raises(AnsibleFilterError, match="gpu-1: rke2 certificate check --output json printed no JSON"):
        rke2_filters.rke2_certificate_report("level=fatal msg=boom", "gpu-1")
    with pytest.raises(AnsibleFilterError, match="printed list, expected an object"):
        rke2_filters.rke2_certificate_report("[]", "gpu-1")


def test_node_names_of_hosts():
    assert rke2_filters.rke2_node_names(["cp-2", "cp-3"], {"cp-2": {"k8s_node_name": "tirosh-cp-2"}}) == [
        "tirosh-cp-2", "cp-3"]


# ---------------------------------------------------------------- the network a running cluster keeps

def test_a_running_server_keeps_its_cni_and_address_ranges():
    current = {"cni": "canal", "node-name": "cp-1"}
    error = rke2_filters.rke2_network_change({"cni": ["cilium"], "cluster-cidr": "10.244.0.0/16"}, current,
                                             member=True, host="cp-1")
    assert error.startswith("cp-1 runs the cluster with another network than this run would write (cni canal -> "
                            "cilium; cluster-cidr 10.42.0.0/16 -> 10.244.0.0/16)")
    # RKE2's defaults spelled out, multus as a list or a comma list, the same network.
    assert rke2_filters.rke2_network_change({"cni": ["multus", "canal"], "cluster-cidr": "10.42.0.0/16"},
                                            {"cni": "multus,canal"}, member=True) == ""


def test_a_node_that_is_not_a_member_yet_or_an_agent_takes_any_network():
    assert rke2_filters.rke2_network_change({"cni": ["cilium"]}, {"cni": "canal"}, member=False) == ""
    assert rke2_filters.rke2_network_change({"cni": ["cilium"]}, {}, member=True) == ""
    assert rke2_filters.rke2_network_change({"cluster-dns": "10.96.0.10"}, {}, member=True, role="agent") == ""


# ---------------------------------------------------------------- a config change an interrupted run never applied

# /proc/<pid>/stat of a process whose name holds a space and a parenthesis; starttime (field 22) 123456 ticks.
PID_STAT = ("4242 (rke2 (server)) S 1 4242 4242 0 -1 4194560 100 0 0 0 50 20 0 0 20 0 12 0 123456 2000000 3000 "
            "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0")
PROC_STAT = "cpu  1 2 3 4\nbtime 1765000000\nprocesses 9000\n"
STARTED = 1765000000 + 1234.56


def test_the_process_start_comes_from_proc():
    from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
    assert rke2.process_start(PID_STAT, PROC_STAT) == STARTED
    with pytest.raises(ValueError, match="cannot read a process start"):
        rke2.process_start("4242 (rke2) S 1", PROC_STAT)


def test_a_file_written_after_the_running_process_started_restarts_it():
    files = {"/etc/rancher/rke2/config.yaml": STARTED + 60, "/etc/rancher/rke2/registries.yaml": STARTED - 3600,
             "/etc/rancher/rke2/cluster-token": "", "/etc/rancher/rke2/agent-token": None}
    reason = rke2_filters.rke2_restart_reason(True, "rke2 version v1.34.1+rke2r1", "rke2 version v1.34.1+rke2r1",
                                              False, files=files, pid_stat=PID_STAT, proc_stat=PROC_STAT)
    assert reason == ("/etc/rancher/rke2/config.yaml changed after the running rke2 started: an earlier run was "
                      "interrupted before its restart")
    # Written before the start (the restart that applied it happened), or not readable: no reason.
    files["/etc/rancher/rke2/config.yaml"] = STARTED + 0.5
    assert rke2_filters.rke2_restart_reason(True, "", "", False, files=files, pid_stat=PID_STAT,
                                            proc_stat=PROC_STAT) == ""
    assert rke2_filters.rke2_restart_reason(True, "", "", False, files={"/x": STARTED + 60}) == ""
