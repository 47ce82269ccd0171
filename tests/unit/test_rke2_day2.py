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
