"""Restoring the cluster from an etcd snapshot (module_utils/rke2_day2.py restore_plan and reset_failure,
module_utils/rke2_membership.py stale_nodes, the rke2 role's filters over them, playbooks/rke2_restore.yml): the
steps in RKE2's documented order (docs.rke2.io/datastore/backup_restore), every refusal naming its setting before
anything changes, the S3 credentials kept off the command line, the reset's outcome read from what k3s's
pkg/etcd Reset logs, and the Nodes a snapshot holds for hosts the inventory no longer has. The playbook runs here
as far as its refusals go; stopping, resetting and rejoining servers needs RKE2 hosts (molecule was not run)."""
import json
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_day2 as day2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_membership as membership
from tests.conftest import ROOT
from tests.unit.role_runner import PYTHON, role_playbook, run_playbook

SERVERS = ["cp-1", "cp-2", "cp-3"]
SNAPSHOTS = "/var/lib/rancher/rke2/server/db/snapshots"
SNAPSHOT = "etcd-snapshot-cp-1-1765000000"
TASKS = os.path.join(ROOT, "roles", "rke2", "tasks")


def _index(steps, host, action):
    return [(step["host"], step["action"]) for step in steps].index((host, action))


# ---------------------------------------------------------------- the plan's order

def test_every_server_stops_before_the_reset_and_the_others_rejoin_one_at_a_time_after_the_first():
    plan = day2.restore_plan(SERVERS, SNAPSHOT, binary="/opt/rke2/bin/rke2")
    steps = plan["steps"]
    assert (plan["first"], plan["others"]) == ("cp-1", ["cp-2", "cp-3"])
    reset = _index(steps, "cp-1", "reset")
    # All servers stopped before the reset, and nothing else before it.
    assert [(s["host"], s["action"]) for s in steps[:reset]] == [(h, "stop") for h in SERVERS]
    # The first server reset, started and Ready before any other server's datastore is moved.
    assert reset < _index(steps, "cp-1", "start") < _index(steps, "cp-1", "wait_ready") < min(
        _index(steps, other, "move_db_aside") for other in ["cp-2", "cp-3"])
    # One at a time: cp-2 moved, started and Ready before cp-3 is touched.
    assert [(s["host"], s["action"]) for s in steps[reset + 3:-1]] == [
        ("cp-2", "move_db_aside"), ("cp-2", "start"), ("cp-2", "wait_ready"),
        ("cp-3", "move_db_aside"), ("cp-3", "start"), ("cp-3", "wait_ready")]
    # Last, the Nodes listed on the first server.
    assert steps[-1] == {"host": "cp-1", "action": "stale_nodes", "argv": [
        "/var/lib/rancher/rke2/bin/kubectl", "--kubeconfig", "/etc/rancher/rke2/rke2.yaml", "get", "nodes",
        "--output", "name"]}
    assert plan["summary"][3] == ("cp-1: rke2 server --cluster-reset --cluster-reset-restore-path=%s/%s "
                                  "(restores the snapshot)" % (SNAPSHOTS, SNAPSHOT))
    assert len(plan["summary"]) == len(steps)


def test_the_reset_is_bounded_and_a_local_snapshot_is_never_read_from_the_bucket():
    plan = rke2_filters.rke2_restore_plan(SNAPSHOT, SERVERS, binary="/usr/local/bin/rke2", timeout="900")
    assert plan["reset_argv"] == [
        "timeout", "--kill-after=10", "900", "/usr/local/bin/rke2", "server", "--cluster-reset",
        "--cluster-reset-restore-path=%s/%s" % (SNAPSHOTS, SNAPSHOT), "--etcd-s3=false"]
    assert plan["reset_environment"] == {} and plan["s3"] is False
    # server/db moved aside, not deleted (it keeps that server's own snapshots), with the time in its name.
    assert plan["move_db_argv"][:3] == ["sh", "-c", 'mv --no-target-directory "$1" "$1-old-$(date -u +%Y%m%dT%H%M%SZ)"']
    assert plan["move_db_argv"][3:] == ["sh", "/var/lib/rancher/rke2/server/db"]


def test_a_single_server_restores_and_nothing_rejoins():
    plan = day2.restore_plan(["cp-1"], SNAPSHOT)
    assert plan["others"] == []
    assert [s["action"] for s in plan["steps"]] == ["stop", "reset", "start", "wait_ready", "stale_nodes"]


# ---------------------------------------------------------------- refusals, naming the setting

@pytest.mark.parametrize("snapshot, message", [
    ("", "rke2_restore_snapshot is empty"),
    ("../../etc/shadow", "rke2_restore_snapshot=../../etc/shadow: '.' and '..' are refused"),
    (SNAPSHOTS + "/../db/x", "rke2_restore_snapshot=%s/../db/x: '.' and '..' are refused" % SNAPSHOTS),
    ("/etc/shadow", "rke2_restore_snapshot=/etc/shadow: a local snapshot is a file name in %s" % SNAPSHOTS),
    ("snapshots/x", "rke2_restore_snapshot=snapshots/x: a local snapshot is a file name in"),
    (SNAPSHOTS + "//x", "rke2_restore_snapshot=%s//x: a local snapshot is a file name in" % SNAPSHOTS),
    (" x", "rke2_restore_snapshot=' x': a snapshot name has no surrounding blanks"),
    (None, "rke2_restore_snapshot is empty"),
])
def test_a_local_snapshot_outside_the_snapshot_folder_is_refused_naming_the_setting(snapshot, message):
    with pytest.raises(ValueError) as exc:
        day2.restore_plan(SERVERS, snapshot)
    assert message in str(exc.value)


def test_a_local_snapshot_is_a_name_or_an_absolute_path_in_the_snapshot_folder():
    assert day2.restore_plan(SERVERS, SNAPSHOT + ".zip")["restore_path"] == SNAPSHOTS + "/" + SNAPSHOT + ".zip"
    assert day2.restore_plan(SERVERS, SNAPSHOTS + "/pre-upgrade-x")["restore_path"] == SNAPSHOTS + "/pre-upgrade-x"


def test_servers_and_timeout_are_refused_naming_the_setting():
    with pytest.raises(AnsibleFilterError, match="rke2_servers is empty"):
        rke2_filters.rke2_restore_plan(SNAPSHOT, [])
    with pytest.raises(ValueError, match="rke2_servers lists a host twice"):
        day2.restore_plan(["cp-1", "cp-1"], SNAPSHOT)
    with pytest.raises(ValueError, match=r"rke2_servers lists None"):
        day2.restore_plan(["cp-1", None], SNAPSHOT)
    with pytest.raises(AnsibleFilterError, match="rke2_restore_timeout='soon'"):
        rke2_filters.rke2_restore_plan(SNAPSHOT, SERVERS, timeout="soon")
    with pytest.raises(ValueError, match="rke2_restore_timeout=0"):
        day2.restore_plan(SERVERS, SNAPSHOT, timeout=0)


# ---------------------------------------------------------------- S3

def test_an_s3_restore_names_the_snapshot_in_the_bucket_and_keeps_the_credentials_off_the_command_line():
    # rke2_etcd_s3's settings, as a site restoring from its own bucket gives them; enabled and retention are the
    # schedule's.
    s3 = {"enabled": True, "retention": 10, "bucket": "etcd-backups", "folder": "tirosh",
          "endpoint": "minio.lab:9000", "region": "eu-west-1", "skip_ssl_verify": True, "timeout": "10m",
          "access_key": "AKIAEXAMPLE", "secret_key": "s3cr3t/key", "session_token": ""}
    plan = rke2_filters.rke2_restore_plan(SNAPSHOT, SERVERS, s3=s3, binary="/usr/local/bin/rke2")
    assert plan["s3"] is True and plan["restore_path"] == SNAPSHOT
    assert plan["reset_argv"][4:] == [
        "server", "--cluster-reset", "--cluster-reset-restore-path=" + SNAPSHOT, "--etcd-s3",
        "--etcd-s3-endpoint=minio.lab:9000", "--etcd-s3-skip-ssl-verify=true", "--etcd-s3-bucket=etcd-backups",
        "--etcd-s3-region=eu-west-1", "--etcd-s3-folder=tirosh", "--etcd-s3-timeout=10m"]
    # The flags' own environment variables (k3s pkg/cli/cmds/server.go EnvVar); an empty one is left out.
    assert plan["reset_environment"] == {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t/key"}
    shown = repr([plan[key] for key in plan if key != "reset_environment"])
    assert "AKIAEXAMPLE" not in shown and "s3cr3t" not in shown
    assert "(bucket etcd-backups)" in plan["summary"][3]


@pytest.mark.parametrize("s3, message", [
    ({"folder": "tirosh"}, "rke2_restore_s3.bucket is empty: a restore from S3 needs the bucket"),
    ({"bucket": ["a"]}, "rke2_restore_s3.bucket must be a string, got ['a']"),
    ({"bucket": "b", "acess_key": "x"}, "rke2_restore_s3.acess_key: unknown setting (allowed: enabled, endpoint"),
    ({"bucket": "bkt", "insecure": "yes"}, "rke2_restore_s3.insecure 'yes' must be true or false"),
    ({"bucket": "bkt", "endpoint": "https://minio:9000"}, "rke2_restore_s3.endpoint 'https://minio:9000' must be"),
    ({"bucket": "bkt", "access_key": "a"}, "rke2_restore_s3: access_key and secret_key go together"),
])
def test_s3_settings_are_refused_naming_the_key(s3, message):
    with pytest.raises(ValueError) as exc:
        day2.restore_plan(SERVERS, SNAPSHOT, s3=s3)
    assert message in str(exc.value)


def test_a_bad_credential_is_named_but_never_shown():
    with pytest.raises(ValueError) as exc:
        day2.restore_plan(SERVERS, SNAPSHOT, s3={"bucket": "bkt", "access_key": "a", "secret_key": 123456789})
    assert str(exc.value) == "rke2_restore_s3.secret_key must be a string, not int"


def test_an_s3_snapshot_is_a_name_not_a_path():
    with pytest.raises(ValueError, match="rke2_restore_snapshot=tirosh/x: an S3 snapshot is named as the bucket"):
        day2.restore_plan(SERVERS, "tirosh/x", s3={"bucket": "bkt"})


# ---------------------------------------------------------------- the reset's outcome

# What k3s logs at the end of a reset (pkg/etcd Reset), at the commit RKE2 v1.34.1 pins, and in older releases.
RESET_DONE_V134 = ('time="2026-12-06T06:00:41Z" level=info msg="Managed etcd cluster membership has been reset, '
                   'restart without --cluster-reset flag now. Backup and delete ${datadir}/server/db on each peer '
                   'etcd server and rejoin the nodes"\n')
RESET_DONE_OLD = ('INFO[0070] Etcd is running, restart without --cluster-reset flag now. Backup and delete '
                  '${datadir}/server/db on each peer etcd server and rejoin the nodes\n')


def test_the_reset_succeeded_only_when_it_exited_0_saying_so():
    assert rke2_filters.rke2_reset_failure(RESET_DONE_V134, 0, "cp-1") == ""
    assert rke2_filters.rke2_reset_failure(RESET_DONE_OLD, "0", "cp-1") == ""
    interrupted = 'time="..." level=info msg="Starting rke2 v1.34.1+rke2r1"\n'
    assert rke2_filters.rke2_reset_failure(interrupted, 0, "cp-1").startswith(
        "cp-1: rke2 server --cluster-reset exited without saying that the cluster membership was reset")


def test_a_failed_reset_quotes_its_last_lines_and_says_where_the_cluster_stands():
    missing = ('time="..." level=info msg="Starting rke2 v1.34.1+rke2r1"\n'
               'time="..." level=fatal msg="starting kubernetes: preparing server: start managed database: etcd: '
               'snapshot path does not exist: %s/%s"\n' % (SNAPSHOTS, SNAPSHOT))
    message = rke2_filters.rke2_reset_failure(missing, 1, "cp-1", 1800)
    assert message.startswith("cp-1: rke2 server --cluster-reset failed (rc 1); its last lines: ")
    assert "snapshot path does not exist: %s/%s" % (SNAPSHOTS, SNAPSHOT) in message
    assert "rke2-server is stopped on every server" in message
    assert rke2_filters.rke2_reset_failure("", 124, "cp-1", 1800).startswith(
        "cp-1: rke2 server --cluster-reset did not finish within rke2_restore_timeout (1800 s); its last lines: "
        "(no output)")


# ---------------------------------------------------------------- stale Nodes

def test_stale_nodes_are_those_no_inventory_host_has_with_their_password_secrets():
    listed = ["node/cp-1", "node/cp-2", "node/gpu-1", "node/gpu-retired", "node/cp-old"]
    assert rke2_filters.rke2_stale_nodes(listed, ["cp-1", "CP-2", "gpu-1"]) == [
        {"node": "cp-old", "secret": "cp-old.node-password.rke2"},
        {"node": "gpu-retired", "secret": "gpu-retired.node-password.rke2"}]
    assert membership.stale_nodes(["cp-1"], ["cp-1"]) == []
    # kubectl prints nothing in check mode's place: no Node, none stale.
    assert rke2_filters.rke2_stale_nodes(None, ["cp-1"]) == []


def test_stale_node_input_that_is_not_a_list_of_names_is_refused():
    with pytest.raises(AnsibleFilterError, match="the cluster's Node list is str, expected a list of names"):
        rke2_filters.rke2_stale_nodes("node/cp-1", ["cp-1"])
    with pytest.raises(ValueError, match="the inventory's node names lists None"):
        membership.stale_nodes(["node/cp-1"], [None])


# ---------------------------------------------------------------- the playbook and task files follow the plan

def _yaml(*path):
    with open(os.path.join(ROOT, *path)) as handle:
        return yaml.safe_load(handle)


def _names(tasks):
    return [task["name"] for task in tasks]


def test_the_playbook_checks_first_then_restores_on_the_first_server_then_rejoins_the_others_one_at_a_time():
    plays = _yaml("playbooks", "rke2_restore.yml")
    assert [play["hosts"] for play in plays] == ["localhost", "rke2_servers", "rke2_servers[1:]", "rke2_servers[0]"]
    assert [play["tasks"][0].get("ansible.builtin.import_role", {}).get("tasks_from") for play in plays] == [
        None, "restore", "restore_rejoin", "restore_stale_nodes"]
    # One failure stops every server's play; the others rejoin one at a time, in the plan's order (inventory).
    assert plays[1]["any_errors_fatal"] is True and "serial" not in plays[1]
    assert plays[2]["any_errors_fatal"] is True and plays[2]["serial"] == 1
    # The controller's play changes nothing: it only asserts and says.
    assert [list(set(task) - {"name"})[0] for task in plays[0]["tasks"]] == [
        "ansible.builtin.assert", "ansible.builtin.assert", "ansible.builtin.debug"]


def test_the_task_files_refuse_first_stop_before_the_reset_and_hide_the_credentials():
    restore = _names(_yaml("roles", "rke2", "tasks", "restore.yml"))
    assert restore == ["Refuse a bad snapshot, or a restore nobody confirmed", "Reach every server before any stops",
                       "Check the snapshot on the first server, or copy the controller's copy there",
                       "Stop every server, {{ _rke2_service }}",
                       "Restore the snapshot on the first server and start it there"]
    reset = _yaml("roles", "rke2", "tasks", "restore_reset.yml")
    command = reset[1]
    assert command["ansible.builtin.command"] == {"argv": "{{ _rke2_restore.reset_argv }}"}
    assert command["environment"] == "{{ _rke2_restore.reset_environment }}"
    assert command["no_log"] == "{{ _rke2_restore.reset_environment | length > 0 }}"
    assert command["when"] == "not ansible_check_mode"
    assert "rke2_reset_failure" in reset[2]["vars"]["_rke2_reset_failure"]
    assert reset[3]["ansible.builtin.import_tasks"] == "restore_start.yml"
    rejoin = _yaml("roles", "rke2", "tasks", "restore_rejoin.yml")
    assert rejoin[0]["ansible.builtin.import_tasks"] == "restore_confirm.yml"
    assert rejoin[2]["ansible.builtin.command"]["removes"] == "{{ _rke2_restore.db_dir }}"
    stale = _yaml("roles", "rke2", "tasks", "restore_stale_nodes.yml")
    assert stale[-1]["when"] == "rke2_restore_delete_stale_nodes | bool"
    assert stale[-1]["ansible.builtin.include_tasks"] == "node_delete.yml"


# ---------------------------------------------------------------- the playbook's refusals, as ansible-playbook runs it

def _run(tmp_path, *args, servers_vars=None):
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "site_name": "lab-site", "ansible_python_interpreter": PYTHON,
                 "rke2_etcd_snapshot_fetch_dir": str(tmp_path / "etcd-snapshots")},
        "children": {"rke2_servers": {"hosts": {"cp-1": {}}, "vars": servers_vars or {}},
                     "rke2_agents": {"hosts": {"gpu-1": {}}}}}}
    return run_playbook(tmp_path, os.path.join(ROOT, "playbooks", "rke2_restore.yml"), inventory, "--check", *args)


def test_without_confirmation_the_playbook_refuses_before_any_server_is_touched(tmp_path):
    rc, output = _run(tmp_path, "-e", "rke2_restore_snapshot=" + SNAPSHOT)
    assert rc != 0
    assert ("Restoring %s puts the whole cluster back to that snapshot (what changed since is lost) and stops "
            "rke2-server on every server meanwhile; confirm with rke2_confirm_restore=%s"
            % (SNAPSHOT, SNAPSHOT)) in output
    assert 'rke2_confirm_restore is ""' in output, output
    assert "PLAY [Stop every RKE2 server" not in output


def test_a_bad_snapshot_or_s3_without_a_bucket_is_refused_naming_the_setting(tmp_path):
    rc, output = _run(tmp_path, "-e", "rke2_restore_snapshot=../x", "-e", "rke2_confirm_restore=../x")
    assert rc != 0 and "rke2_restore_snapshot=../x: '.' and '..' are refused" in output, output
    assert "PLAY [Stop every RKE2 server" not in output
    # The servers' S3 settings (group_vars of rke2_servers) are the ones the controller's check reads.
    rc, output = _run(tmp_path, "-e", "rke2_restore_snapshot=x", "-e", "rke2_confirm_restore=x",
                      servers_vars={"rke2_restore_s3": {"folder": "tirosh"}})
    assert rc != 0 and "rke2_restore_s3.bucket is empty" in output, output
    assert "PLAY [Stop every RKE2 server" not in output


def test_a_snapshot_neither_the_first_server_nor_the_controller_has_is_refused_before_any_server_stops(tmp_path):
    rc, output = _run(tmp_path, "-e", "rke2_restore_snapshot=" + SNAPSHOT, "-e", "rke2_confirm_restore=" + SNAPSHOT)
    assert rc != 0
    assert "cp-1: stop rke2-server" in output  # the plan, said first
    assert ("cp-1 has no snapshot %s/%s, and the controller has no copy in %s; nothing was stopped"
            % (SNAPSHOTS, SNAPSHOT, tmp_path / "etcd-snapshots")) in output, output
    assert "TASK [gpuplatform.rke2.rke2 : Stop every server" not in output


FAKE_RKE2 = """#!/bin/sh
# rke2 as the reset meets a bucket that refuses it: what it got, then k3s's fatal line.
here=$(dirname "$0")/..
printf '%s\\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > "$here/environment-seen"
printf '%s\\n' "$@" > "$here/argv-seen"
echo 'time="2026-12-06T06:00:02Z" level=info msg="Starting rke2 v1.34.1+rke2r1"' >&2
echo 'time="2026-12-06T06:00:03Z" level=fatal msg="starting kubernetes: preparing server: start managed database: \
failed to download snapshot from S3: Access Denied"' >&2
exit 1
"""


def test_a_failed_reset_stops_the_run_with_its_last_lines_and_never_shows_the_s3_credentials(tmp_path):
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "rke2").write_text(FAKE_RKE2)
    (prefix / "bin" / "rke2").chmod(0o755)
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "site_name": "lab-site", "ansible_python_interpreter": PYTHON},
        "children": {"rke2_servers": {"hosts": {"cp-1": {}}}, "rke2_agents": {"hosts": {}}}}}
    # Extra vars: the role's own vars (the binary's places) rank below them only.
    extra = {"_rke2_binary_candidates": [str(prefix / "bin" / "rke2")], "rke2_restore_snapshot": SNAPSHOT,
             "rke2_confirm_restore": SNAPSHOT, "rke2_restore_s3": {
                 "bucket": "etcd-backups", "access_key": "AKIAFAKEACCESS", "secret_key": "fake/s3cr3t+key"}}
    rc, output = run_playbook(tmp_path, role_playbook("cp-1", ["restore_reset"]), inventory, "-v",
                              "-e", json.dumps(extra))
    assert rc != 0
    assert ("cp-1: rke2 server --cluster-reset failed (rc 1); its last lines: " in output
            and "failed to download snapshot from S3: Access Denied" in output), output
    assert "rke2-server is stopped on every server" in output
    assert "AKIAFAKEACCESS" not in output and "s3cr3t" not in output
    assert "Start the unit within rke2_start_timeout" not in output
    # The credentials reached rke2 through its environment, and its command line did not carry them.
    assert (prefix / "environment-seen").read_text() == "AKIAFAKEACCESS\nfake/s3cr3t+key\n"
    argv = (prefix / "argv-seen").read_text().splitlines()
    assert argv == ["server", "--cluster-reset", "--cluster-reset-restore-path=" + SNAPSHOT, "--etcd-s3",
                    "--etcd-s3-bucket=etcd-backups"]


def test_stale_nodes_are_reported_by_their_node_names_and_kept_without_the_confirmation(tmp_path):
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "site_name": "lab-site", "ansible_python_interpreter": PYTHON},
        "children": {"rke2_servers": {"hosts": {"cp-1": {}}},
                     "rke2_agents": {"hosts": {"gpu-1": {"k8s_node_name": "tirosh-gpu-1"}}}}}}
    # What kubectl get nodes --output name prints on the first server, in place of the restored cluster's.
    listing = {"_rke2_restore": {"nodes_argv": ["printf", "node/cp-1\\nnode/tirosh-gpu-1\\nnode/gpu-retired\\n"]}}
    rc, output = run_playbook(tmp_path, role_playbook("cp-1", ["restore_stale_nodes"]), inventory,
                              "-e", json.dumps(listing))
    assert rc == 0, output
    assert ("The restored cluster lists Nodes no host of the inventory has: gpu-retired. They stay, with their "
            "node-password secrets in kube-system (gpu-retired.node-password.rke2)") in output, output
    assert "Delete the stale Nodes and their password secrets" in output
    assert "Delete the Node, gpu-retired" not in output
