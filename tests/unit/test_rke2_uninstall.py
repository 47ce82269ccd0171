"""playbooks/rke2_uninstall.yml as ansible-playbook runs it on this machine: it refuses, before
anything runs, unless rke2_uninstall_confirm is the site's name; confirmed, it runs the release's
rke2-uninstall.sh once, with its prefix (a recording script in a temporary folder here and in
molecule verify)."""
import json
import os

from tests.conftest import ROOT
from tests.unit.role_runner import PYTHON, run_playbook


def _run(tmp_path, *args):
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "site_name": "lab-site", "ansible_python_interpreter": PYTHON},
        "children": {"rke2_servers": {"hosts": {"cp-1": {}}}, "rke2_agents": {"hosts": {"gpu-1": {}}}}}}
    return run_playbook(tmp_path, os.path.join(ROOT, "playbooks", "rke2_uninstall.yml"), inventory, *args)


def test_without_confirmation_it_refuses_before_anything_runs(tmp_path):
    rc, output = _run(tmp_path)
    assert rc != 0
    assert "missing required arguments: rke2_uninstall_confirm" in output, output
    assert "Run rke2-uninstall.sh" not in output


def test_a_wrong_site_name_is_refused_naming_the_one_to_give(tmp_path):
    rc, output = _run(tmp_path, "-e", "rke2_uninstall_confirm=other-site")
    assert rc != 0
    assert ("gpu-1: uninstalling RKE2 destroys this node's cluster data (etcd, certificates, images); confirm with "
            "rke2_uninstall_confirm=lab-site") in output, output
    # any_errors_fatal: the servers' play never starts.
    assert "[cp-1]" not in output


def test_confirmed_it_runs_the_script_once_with_its_prefix_agents_first(tmp_path):
    # The role's candidate paths pointed into the test folder (extra vars win over role vars): a recording
    # script that removes itself, as the release's does.
    prefix = tmp_path / "opt" / "rke2"
    (prefix / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    script = prefix / "bin" / "rke2-uninstall.sh"
    candidates = json.dumps({"_rke2_uninstall_candidates": [str(tmp_path / "usr" / "bin" / "none.sh"), str(script)]})

    def install():
        script.write_text('#!/bin/sh\necho "$INSTALL_RKE2_ROOT" >> %s\nrm -f -- "$0"\n' % calls)
        script.chmod(0o755)

    install()
    rc, output = _run(tmp_path, "-e", "rke2_uninstall_confirm=lab-site", "-e", candidates)
    assert rc == 0, output
    # Both hosts are this machine: the agent ran the script, the server then found none.
    assert calls.read_text().splitlines() == [str(prefix)]
    assert output.index("[gpu-1]") < output.index("[cp-1]")
    install()
    rc, output = _run(tmp_path, "-e", "rke2_uninstall_confirm=lab-site", "-e", candidates, "--check")
    assert rc == 0 and "changed: [gpu-1]" in output, output
    assert calls.read_text().splitlines() == [str(prefix)]
