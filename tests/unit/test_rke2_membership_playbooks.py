"""The membership playbooks as ansible-playbook runs them on this machine. playbooks/rke2_remove_node.yml: what it
refuses before anything changes (a host the inventory does not have, the cluster's only server, no confirmation or
another site's name); the cluster side (the quorum gate, the drain, the Node and its node-password secret deleted)
needs an API server: the plan it follows is tests/unit/test_rke2_membership.py's. playbooks/rke2_server.yml: an
unreachable first server does not end the run."""
import os

from tests.conftest import ROOT
from tests.unit.role_runner import PYTHON, run_playbook


def _run(tmp_path, servers, *args):
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "site_name": "lab-site", "ansible_python_interpreter": PYTHON},
        "children": {"rke2_servers": {"hosts": dict((s, {}) for s in servers)},
                     "rke2_agents": {"hosts": {"gpu-1": {}}}}}}
    return run_playbook(tmp_path, os.path.join(ROOT, "playbooks", "rke2_remove_node.yml"), inventory, *args)


def test_a_host_the_inventory_does_not_have_is_refused_naming_those_it_has(tmp_path):
    rc, output = _run(tmp_path, ["cp-1", "cp-2"], "-e", "rke2_remove_node=gpu-9", "-e", "rke2_uninstall_confirm=x")
    assert rc != 0
    assert "rke2_remove_node=gpu-9: no such host in rke2_servers or rke2_agents (cp-1, cp-2, gpu-1)" in output, output
    rc, output = _run(tmp_path, ["cp-1"])
    assert rc != 0 and "rke2_remove_node=: no such host" in output, output


def test_the_clusters_only_server_is_refused(tmp_path):
    rc, output = _run(tmp_path, ["cp-1"], "-e", "rke2_remove_node=cp-1", "-e", "rke2_uninstall_confirm=lab-site")
    assert rc != 0
    assert "cp-1 is the cluster's only server: removing it ends the cluster" in output, output
    assert "Drain the node" not in output


def test_without_the_sites_name_it_refuses_before_anything_runs(tmp_path):
    rc, output = _run(tmp_path, ["cp-1"], "-e", "rke2_remove_node=gpu-1")
    assert rc != 0 and "missing required arguments: rke2_uninstall_confirm" in output, output
    rc, output = _run(tmp_path, ["cp-1"], "-e", "rke2_remove_node=gpu-1", "-e", "rke2_uninstall_confirm=other")
    assert rc != 0
    assert ("gpu-1: removing a node deletes it from the cluster and uninstalls RKE2 on it; confirm with "
            "rke2_uninstall_confirm=lab-site") in output, output
    assert "Drain the node" not in output


def test_an_unreachable_first_server_sits_the_run_out_and_the_other_servers_go_on(tmp_path):
    # cp-1 answers nothing (ssh to a closed port on this machine); cp-2 is this machine.
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "site_name": "lab-site", "ansible_python_interpreter": PYTHON},
        "children": {"rke2_servers": {"hosts": {
            "cp-1": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
                     "ansible_ssh_common_args": "-o ConnectTimeout=5"},
            "cp-2": {}}}, "rke2_agents": {"hosts": {}}}}}
    rc, output = run_playbook(tmp_path, os.path.join(ROOT, "playbooks", "rke2_server.yml"), inventory, "--check")
    assert "PLAY [Install or upgrade the other RKE2 servers]" in output, output
    assert "[cp-2]" in output[output.index("PLAY [Install or upgrade the other RKE2 servers]"):], output
    assert "Leave the unreachable first server out of this run" in output
    # cp-2 cannot install here (no release, no root): what matters is that its play ran.
    del rc
