"""Day 2 of an RKE2 cluster (module_utils/rke2_day2.py, the rke2 role's filters over it): the snapshot a server takes
before its upgrade, named and read back from what rke2 etcd-snapshot save logs, and the certificates' state from
rke2 certificate check --output json, in the shapes k3s's pkg/cli/etcdsnapshot and pkg/cli/cert print them; the
servers' own snapshot schedule, retention and S3 settings in config.yaml."""
import json
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_day2 as day2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_flags
from tests.conftest import ROOT
from tests.unit.role_runner import PYTHON, run_playbook

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


def test_a_snapshot_uploaded_to_s3_too_is_fetched_once():
    # With etcd-s3 the result's Created lists the upload under the file's name as well: one file to fetch.
    name = "pre-upgrade-v1.34.2-rke2r1-cp-1-1765000202.zip"
    output = ('time="..." level=info msg="Snapshot %s saved."\ntime="..." level=info msg="Snapshot %s saved."\n'
              % (name, name))
    assert rke2_filters.rke2_saved_snapshots(output) == [name]


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


# ---------------------------------------------------------------- the servers' own snapshots (config.yaml)

S3 = {"enabled": True, "endpoint": "minio.tirosh-home.example:9000", "bucket": "etcd-snapshots", "folder": "cp",
      "access_key": "AKIAEXAMPLE", "secret_key": "wJalrEXAMPLEKEY", "bucket_lookup_type": "path", "retention": 14,
      "timeout": "2m", "skip_ssl_verify": False, "insecure": False}


def _settings(**changes):
    return dict(day2.SNAPSHOT_DEFAULTS, **changes)


def test_rke2s_defaults_write_no_key_so_config_yaml_stays_as_it_was():
    assert day2.etcd_snapshot_config("server", _settings()) == {}
    assert day2.etcd_snapshot_config("server", _settings(s3={})) == {}
    # The filter as config_content.yml calls it, with the role's defaults: the same config.yaml as without them.
    with open(os.path.join(ROOT, "roles", "rke2", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    snapshots = dict((name, defaults[variable]) for name, variable in [
        ("schedule_cron", "rke2_etcd_snapshot_schedule_cron"), ("retention", "rke2_etcd_snapshot_retention"),
        ("compress", "rke2_etcd_snapshot_compress"), ("s3", "rke2_etcd_s3")])
    assert snapshots == dict(day2.SNAPSHOT_DEFAULTS, s3={})
    assert rke2_filters.rke2_config("server", node_name="cp-1", etcd_snapshots=snapshots) == \
        rke2.build_config("server", "cp-1")


def test_a_server_gets_the_settings_that_differ_from_rke2s_and_the_s3_settings_given():
    config = day2.etcd_snapshot_config("server", _settings(schedule_cron="0 */6 * * *", retention=10,
                                                           compress=True, s3=S3))
    assert config == {
        "etcd-snapshot-schedule-cron": "0 */6 * * *", "etcd-snapshot-retention": 10, "etcd-snapshot-compress": True,
        "etcd-s3": True, "etcd-s3-endpoint": "minio.tirosh-home.example:9000", "etcd-s3-access-key": "AKIAEXAMPLE",
        "etcd-s3-secret-key": "wJalrEXAMPLEKEY", "etcd-s3-bucket": "etcd-snapshots",
        "etcd-s3-bucket-lookup-type": "path", "etcd-s3-folder": "cp", "etcd-s3-retention": 14,
        "etcd-s3-timeout": "2m"}
    # In the filter's config.yaml after the typed keys, before the extra ones.
    full = rke2_filters.rke2_config("server", node_name="cp-1", etcd_snapshots=_settings(retention=10),
                                    extra={"kubelet-arg": ["max-pods=250"]})
    assert list(full) == ["node-name", "cni", "etcd-snapshot-retention", "kubelet-arg"]
    # Switched off, the S3 settings are kept in the inventory and write nothing.
    assert day2.etcd_snapshot_config("server", _settings(s3=dict(S3, enabled=False))) == {}
    # The descriptors and time zone robfig/cron's standard parser takes, which RKE2's schedule uses.
    for spec in ("@daily", "@every 6h", "CRON_TZ=Europe/Berlin 30 2 * * mon-fri", "*/15 0-23/2 1,15 jan-jun ?"):
        assert day2.etcd_snapshot_config("server", _settings(schedule_cron=spec)) == {
            "etcd-snapshot-schedule-cron": spec}


def test_an_agent_gets_none_of_them_and_its_settings_are_checked_all_the_same():
    assert day2.etcd_snapshot_config("agent", _settings(retention=10, compress=True, s3=S3)) == {}
    config = rke2_filters.rke2_config("agent", node_name="gpu-1", join_address="192.0.2.11",
                                      etcd_snapshots=_settings(retention=10, s3=S3))
    assert not [key for key in config if key.startswith("etcd-")]
    with pytest.raises(ValueError, match="rke2_etcd_snapshot_retention 0 must be"):
        day2.etcd_snapshot_config("agent", _settings(retention=0))


@pytest.mark.parametrize("changes, needle", [
    (dict(schedule_cron="0 */12 * *"), "rke2_etcd_snapshot_schedule_cron '0 */12 * *' must be a cron schedule of five "
                                       "fields"),
    (dict(schedule_cron="60 * * * *"), "rke2_etcd_snapshot_schedule_cron '60 * * * *': the minute field '60' is not"),
    (dict(schedule_cron="0 0 * * 7"), "the day of week field '7' is not *, a value from 0 to 6"),
    (dict(schedule_cron="0 5-3 * * *"), "the hour field '5-3'"),
    (dict(schedule_cron="*/0 * * * *"), "the minute field '*/0'"),
    (dict(schedule_cron="@every 0s"), "@every takes a Go duration above 0"),
    (dict(schedule_cron=12), "rke2_etcd_snapshot_schedule_cron 12 must be a cron schedule"),
    (dict(retention=0), "rke2_etcd_snapshot_retention 0 must be a whole number of snapshots to keep, at least 1"),
    (dict(retention=True), "rke2_etcd_snapshot_retention True must be a whole number"),
    (dict(retention="10"), "rke2_etcd_snapshot_retention '10' must be a whole number"),
    (dict(compress="yes"), "rke2_etcd_snapshot_compress 'yes' must be true or false"),
    (dict(s3=["bucket"]), "rke2_etcd_s3 must be a mapping of S3 settings"),
    (dict(s3=dict(S3, bukcet="x")), "rke2_etcd_s3.bukcet: unknown setting (allowed: enabled, endpoint"),
    (dict(s3={"bucket": "etcd-snapshots"}), "rke2_etcd_s3.enabled is required with the other S3 settings"),
    (dict(s3=dict(S3, bucket="")), "rke2_etcd_s3.bucket is required with enabled: true"),
    (dict(s3=dict(S3, enabled="true")), "rke2_etcd_s3.enabled 'true' must be true or false"),
    (dict(s3=dict(S3, endpoint="https://minio.example:9000")),
     "rke2_etcd_s3.endpoint 'https://minio.example:9000' must be the S3 endpoint's host[:port], without scheme"),
    (dict(s3=dict(S3, endpoint="minio.example/snapshots")), "rke2_etcd_s3.endpoint 'minio.example/snapshots' must"),
    (dict(s3=dict(S3, bucket="Etcd Snapshots")), "rke2_etcd_s3.bucket 'Etcd Snapshots' is not an S3 bucket name"),
    (dict(s3=dict(S3, bucket_lookup_type="virtual")), "rke2_etcd_s3.bucket_lookup_type 'virtual' is not one of auto, "
                                                      "dns, path"),
    (dict(s3=dict(S3, region="us east")), "rke2_etcd_s3.region 'us east' must be a region name"),
    (dict(s3=dict(S3, retention=0)), "rke2_etcd_s3.retention 0 must be a whole number"),
    (dict(s3=dict(S3, timeout="5 minutes")), "rke2_etcd_s3.timeout '5 minutes' must be a Go duration above 0"),
    (dict(s3=dict(S3, timeout=300)), "rke2_etcd_s3.timeout must be a string, got 300"),
    (dict(s3=dict(S3, timeout="0s")), "rke2_etcd_s3.timeout '0s' must be a Go duration above 0"),
    (dict(s3=dict(S3, proxy="proxy.example:3128")), "rke2_etcd_s3.proxy 'proxy.example:3128' must be a proxy URL"),
    (dict(s3=dict(S3, endpoint_ca="ca.pem")), "rke2_etcd_s3.endpoint_ca 'ca.pem' must be the absolute path"),
    (dict(s3=dict(S3, secret_key=None)), "rke2_etcd_s3: access_key and secret_key go together"),
    (dict(s3=dict(S3, access_key="", secret_key="", session_token="FwoGZX")),
     "rke2_etcd_s3.session_token needs access_key and secret_key"),
    (dict(s3=dict(S3, skip_ssl_verify=True, endpoint_ca="/etc/ssl/minio-ca.pem")),
     "rke2_etcd_s3: skip_ssl_verify and endpoint_ca exclude each other"),
    (dict(s3=dict(S3, insecure=True, endpoint_ca="/etc/ssl/minio-ca.pem")), "rke2_etcd_s3: insecure (plain http)"),
    (dict(scheduled=False), "rke2_etcd_snapshot_scheduled: unknown setting (allowed: compress, retention, "
                            "schedule_cron, s3)"),
])
def test_each_bad_setting_is_refused_by_its_variable(changes, needle):
    with pytest.raises(ValueError) as info:
        day2.etcd_snapshot_config("server", _settings(**changes))
    assert needle in str(info.value), str(info.value)
    with pytest.raises(AnsibleFilterError, match="rke2 config.yaml: rke2_etcd_"):
        rke2_filters.rke2_config("server", node_name="cp-1", etcd_snapshots=_settings(**changes))


def test_a_credential_of_the_wrong_type_is_refused_without_showing_it():
    with pytest.raises(ValueError) as info:
        day2.etcd_snapshot_config("server", _settings(s3=dict(S3, secret_key=31337)))
    assert str(info.value) == "rke2_etcd_s3.secret_key must be a string, not int"


def test_the_site_files_keys_name_its_settings():
    with pytest.raises(ValueError, match=r"^rke2.etcd_snapshots.s3.bucket 'x' is not an S3 bucket name"):
        day2.etcd_snapshot_config("server", _settings(s3=dict(S3, bucket="x")), "rke2.etcd_snapshots")
    with pytest.raises(ValueError, match=r"^rke2.etcd_snapshots.retention -1 must be"):
        day2.etcd_snapshot_config("server", {"retention": -1}, "rke2.etcd_snapshots")


@pytest.mark.parametrize("key, variable", [("etcd-snapshot-retention", "rke2_etcd_snapshot_retention"),
                                           ("etcd-s3-bucket", "rke2_etcd_s3.bucket"),
                                           ("etcd-s3-secret-key", "rke2_etcd_s3.secret_key")])
def test_the_extra_map_cannot_set_them_a_second_way(key, variable):
    with pytest.raises(ValueError, match="rke2_config_extra sets '%s', which the role sets from its own variable: "
                                         "use %s" % (key, variable)):
        rke2.build_config("server", "cp-1", extra={key: "x"})


def test_the_typed_keys_are_rke2_server_flags_and_the_secrets_rke2s():
    keys = [key for _name, key in rke2.ETCD_SNAPSHOT_KEYS + rke2.ETCD_S3_KEYS]
    # rke2_flags.py is generated from the real binary's --help: each key is a flag rke2 server has, rke2 agent not.
    assert set(keys) <= set(rke2_flags.SERVER_ONLY_FLAGS)
    assert set(keys) <= set(rke2.TYPED_KEYS)
    assert day2.S3_SECRETS == ("access_key", "secret_key", "session_token")
    assert [key for key in rke2.SECRET_CONFIG_KEYS if key.startswith("etcd-")] == [
        dict(rke2.ETCD_S3_KEYS)[name] for name in day2.S3_SECRETS]


def test_the_roles_argument_spec_types_every_setting_and_hides_the_credentials():
    with open(os.path.join(ROOT, "roles", "rke2", "meta", "argument_specs.yml")) as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    for name, default in day2.SNAPSHOT_DEFAULTS.items():
        spec = options["rke2_etcd_snapshot_" + name]
        assert (spec["type"], spec["default"]) == (type(default).__name__, default)
    s3 = options["rke2_etcd_s3"]["options"]
    assert list(s3) == list(day2.S3_SETTINGS)
    assert [name for name, spec in s3.items() if spec.get("no_log")] == list(day2.S3_SECRETS)
    assert [name for name, spec in s3.items() if spec["type"] == "bool"] == list(day2.S3_BOOLEANS)
    assert s3["bucket_lookup_type"]["choices"] == list(day2.S3_BUCKET_LOOKUP_TYPES)


# The role's tasks (config_content.yml through render.yml, as make site/render runs them) on this machine: the keys
# reach a server's config.yaml, none an agent's, and S3 credentials switch the write's diff and log off.
# public: the role's vars (_rke2_config_secrets) for the task after it.
ROLE_PLAYBOOK = """\
- name: The rke2 role's render tasks
  hosts: rke2_servers:rke2_agents
  gather_facts: false
  tasks:
    - name: The rke2 role's render tasks
      ansible.builtin.include_role:
        name: gpuplatform.rke2.rke2
        tasks_from: render
        public: true
    - name: Keep what the role would write
      ansible.builtin.copy:
        content: "{{ {'config': _rke2_config, 'secrets': _rke2_config_secrets | bool} | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0600"
"""


def _run_role(tmp_path, **extra):
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": PYTHON, "out_dir": str(tmp_path),
                 "rke2_etcd_snapshot_schedule_cron": "0 */6 * * *", "rke2_etcd_snapshot_retention": 10},
        "children": {"rke2_servers": {"hosts": {"cp-1": {"rke2_etcd_s3": S3}, "cp-2": {}}},
                     "rke2_agents": {"hosts": {"gpu-1": {"rke2_etcd_s3": S3}}}}}}
    inventory["all"]["vars"].update(extra)
    return run_playbook(tmp_path, ROLE_PLAYBOOK, inventory)


def _written(tmp_path, host):
    with open(str(tmp_path / ("%s.json" % host))) as handle:
        result = json.load(handle)
    return result["config"], result["secrets"]


def test_the_role_writes_them_on_servers_and_hides_config_yaml_with_s3_credentials(tmp_path):
    rc, output = _run_role(tmp_path)
    assert rc == 0, output
    config, secrets = _written(tmp_path, "cp-1")
    assert config["etcd-snapshot-schedule-cron"] == "0 */6 * * *" and config["etcd-snapshot-retention"] == 10
    assert config["etcd-s3-bucket"] == "etcd-snapshots" and config["etcd-s3-secret-key"] == "wJalrEXAMPLEKEY"
    assert secrets is True, "config.yaml with S3 credentials must be written without diff and log"
    config, secrets = _written(tmp_path, "cp-2")
    assert config["etcd-snapshot-retention"] == 10 and "etcd-s3" not in config and secrets is False
    config, secrets = _written(tmp_path, "gpu-1")
    assert not [key for key in config if key.startswith("etcd-")] and secrets is False
    # The write of config.yaml is the task that follows _rke2_config_secrets.
    with open(os.path.join(ROOT, "roles", "rke2", "tasks", "config.yml")) as handle:
        write = [task for task in yaml.safe_load(handle) if task["name"] == "Write config.yaml"][0]
    assert (write["no_log"], write["diff"]) == ("{{ _rke2_config_secrets }}", "{{ not _rke2_config_secrets }}")


def test_the_role_refuses_a_bad_setting_naming_its_variable(tmp_path):
    rc, output = _run_role(tmp_path, rke2_etcd_snapshot_schedule_cron="0 3 * *")
    assert rc != 0
    assert "rke2_etcd_snapshot_schedule_cron '0 3 * *' must be a cron schedule of five fields" in output, output
