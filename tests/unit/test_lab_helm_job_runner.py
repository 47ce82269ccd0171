"""The lab's helm job runner (tests/lab/helm_job_runner.py): the pod read as a run plan,
the kubelet's volume rules, the entry script's decisions, the status it reports; and one
pod's attempts end to end against a stand-in helm (a shell script), no cluster."""
import base64
import json
import os
import stat
import threading

import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s import helm_release
from tests.lab import helm_job_runner as hjr
from tests.lab import helm_record

CONFIG_HASH = "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDE"  # hex, cut to 63 (a label value)


def env_list(**overrides):
    """The env helm-controller v0.16.27 gives the helm container (chart.go job())."""
    env = {"NAME": "gpu-operator", "VERSION": "v26.3.2", "REPO": "http://127.0.0.1:8879", "HELM_DRIVER": "secret",
           "CHART_NAMESPACE": "kube-system", "CHART": "gpu-operator/gpu-operator", "HELM_VERSION": "",
           "TARGET_NAMESPACE": "gpu-operator", "AUTH_PASS_CREDENTIALS": "false", "INSECURE_SKIP_TLS_VERIFY": "false",
           "PLAIN_HTTP": "false", "FAILURE_POLICY": "reinstall", "SERVER_SIDE": "auto", "FORCE_CONFLICTS": "false",
           "EXPECTED_RELEASE_REVISION": "0", "CONFIG_HASH": CONFIG_HASH}
    env.update(overrides)
    return [{"name": k, "value": v} for k, v in env.items() if v is not None]


def job_pod(args=None, env=None, sources=None, content=True, node="cp-1", **extra_volumes):
    values = {"name": "values", "projected": {"defaultMode": 420, "sources": sources if sources is not None else [
        {"secret": {"name": "chart-values-gpu-operator", "items": [
            {"key": "HelmChartValuesContent", "path": "values-0-000-HelmChart-ValuesContent.yaml"}]}}]}}
    volumes = [{"name": "klipper-helm", "emptyDir": {"medium": "Memory"}}, {"name": "tmp", "emptyDir": {"medium": "Memory"}},
               values]
    if content:
        volumes.append({"name": "content", "configMap": {"name": "chart-content-gpu-operator", "defaultMode": 420}})
    volumes += [dict(v, name=k.replace("_", "-")) for k, v in extra_volumes.items()]
    return {"metadata": {"name": "helm-install-gpu-operator-x7k2p", "namespace": "kube-system", "uid": "uid-1",
                         "labels": {hjr.CHART_LABEL: "gpu-operator"}},
            "spec": {"nodeName": node, "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "helm", "image": "rancher/klipper-helm:v0.13.3-build20260727",
                                     "args": args or ["install", "--namespace", "gpu-operator", "--create-namespace",
                                                      "--version", "v26.3.2", "--set", "driver.enabled=false"],
                                     "env": env if env is not None else env_list()}],
                     "volumes": volumes},
            "status": {"phase": "Pending"}}


def env_of(**overrides):
    return dict((e["name"], e["value"]) for e in env_list(**overrides))


def kinds(steps):
    return [s.kind for s in steps]


def helm_calls(steps):
    return [list(s.argv) for s in steps if s.kind == "helm"]


INSTALL_ARGS = ["install", "--namespace", "gpu-operator", "--create-namespace", "--version", "v26.3.2"]
VALUES = ["/config/values-0-000-HelmChart-ValuesContent.yaml", "/config/values-1-000-HelmChartConfig-ValuesContent.yaml"]
VALUES_ARGS = ["--values", VALUES[0], "--values", VALUES[1]]
FLAGS = ["--labels", hjr.CONFIG_HASH_LABEL + "=" + CONFIG_HASH]


def decide(release, args=None, ssa=False, **env):
    return hjr.release_steps(INSTALL_ARGS if args is None else args, env_of(**env), release,
                             "gpu-operator/gpu-operator", FLAGS, VALUES, ssa)


# ---------------------------------------------------------------- the pod as a run plan

def test_plan_reads_args_env_and_volumes_of_the_helm_controller_pod():
    pod = job_pod(auth={"secret": {"secretName": "repo-auth"}}, ca_files={"configMap": {"name": "repo-ca"}})
    pod["spec"]["containers"][0]["env"].append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    plan = hjr.plan_from_pod(pod)
    assert (plan.namespace, plan.pod, plan.uid) == ("kube-system", "helm-install-gpu-operator-x7k2p", "uid-1")
    assert plan.args[:2] == ["install", "--namespace"]
    assert plan.env["CHART"] == "gpu-operator/gpu-operator" and plan.env["HELM_VERSION"] == ""
    assert "POD_IP" not in plan.env
    assert plan.values == [hjr.SecretProjection("chart-values-gpu-operator", False,
                                                [("HelmChartValuesContent", "values-0-000-HelmChart-ValuesContent.yaml")])]
    assert (plan.content, plan.auth, plan.ca_files, plan.grace_s) == (
        "chart-content-gpu-operator", "repo-auth", "repo-ca", 30)


def test_plan_of_a_delete_pod_has_no_values_or_content():
    plan = hjr.plan_from_pod(job_pod(args=["delete"], sources=[], content=False))
    assert plan.args == ["delete"] and plan.values == [] and plan.content is None


# ---------------------------------------------------------------- the kubelet's volume rules

SECRETS = {"chart-values-gpu-operator": {"HelmChartValuesContent": b"driver: {enabled: false}\n", "RepoCA": b"PEM"},
           "site-values": {"extra": b"a: 1\n"}}


def test_projection_maps_keys_to_paths_and_skips_a_missing_optional_secret():
    projections = [
        hjr.SecretProjection("chart-values-gpu-operator", False, [
            ("HelmChartValuesContent", "values-0-000-HelmChart-ValuesContent.yaml"), ("RepoCA", "ca-file.pem")]),
        hjr.SecretProjection("gone", True, [("x", "values-0-002-HelmChart-ValuesSecret.yaml")]),
        hjr.SecretProjection("site-values", True, [("extra", "values-0-003-HelmChart-ValuesSecret.yaml"),
                                                   ("absent-key", "values-0-004-HelmChart-ValuesSecret.yaml")]),
    ]
    assert hjr.project(projections, SECRETS.get) == {
        "values-0-000-HelmChart-ValuesContent.yaml": b"driver: {enabled: false}\n", "ca-file.pem": b"PEM",
        "values-0-003-HelmChart-ValuesSecret.yaml": b"a: 1\n"}


def test_projection_without_items_takes_every_key():
    assert hjr.project([hjr.SecretProjection("site-values", False, [])], SECRETS.get) == {"extra": b"a: 1\n"}


@pytest.mark.parametrize("projection, message", [
    (hjr.SecretProjection("gone", False, [("x", "v.yaml")]), 'secret "gone" not found'),
    (hjr.SecretProjection("site-values", False, [("absent-key", "v.yaml")]), "couldn't find key absent-key"),
])
def test_projection_of_a_missing_required_secret_or_key_fails_the_mount(projection, message):
    with pytest.raises(hjr.MountError, match=message):
        hjr.project([projection], SECRETS.get)


def test_values_files_are_the_scripts_glob_in_bytewise_order():
    paths = ["values-1-000-HelmChartConfig-ValuesContent.yaml", "ca-file.pem", "values-0-001-HelmChart-Values.yaml",
             "values-0-000-HelmChart-ValuesContent.yaml", "values-0-010-HelmChart-ValuesSecret.yaml", ".hidden.yaml",
             "sub/values.yaml", "values-0-002-HelmChart-ValuesSecret.yaml"]
    assert hjr.values_files(paths) == [
        "values-0-000-HelmChart-ValuesContent.yaml", "values-0-001-HelmChart-Values.yaml",
        "values-0-002-HelmChart-ValuesSecret.yaml", "values-0-010-HelmChart-ValuesSecret.yaml",
        "values-1-000-HelmChartConfig-ValuesContent.yaml"]


# ---------------------------------------------------------------- small parsers

@pytest.mark.parametrize("text, seconds", [("5m0s", 300), ("1h0m0s", 3600), ("1.5s", 1.5), ("300ms", 0.3), ("2m30s", 150)])
def test_go_durations(text, seconds):
    assert hjr.go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5 m", "m5", "5m0"])
def test_not_go_durations(text):
    with pytest.raises(ValueError):
        hjr.go_duration_seconds(text)


def test_helm_guard_is_the_helm_timeout_plus_a_margin():
    assert hjr.helm_guard_seconds({}) == hjr.HELM_TIMEOUT_S + hjr.GUARD_MARGIN_S
    assert hjr.helm_guard_seconds({"TIMEOUT": "10m0s"}) == 600 + hjr.GUARD_MARGIN_S
    assert hjr.helm_guard_seconds({"TIMEOUT": "soon"}) == hjr.HELM_TIMEOUT_S + hjr.GUARD_MARGIN_S


def test_api_endpoint_is_host_and_port_of_the_kubeconfig_server():
    assert hjr.api_endpoint("https://127.0.0.1:36443") == "127.0.0.1:36443"
    assert hjr.api_endpoint("https://[::1]:6443") == "[::1]:6443"


def test_release_of_helm_status_json():
    answer = json.dumps({"name": "gpu-operator", "info": {"status": "deployed"}, "version": 3})
    assert hjr.release_of(answer) == hjr.Release("deployed", "3", "")
    assert hjr.release_of(json.dumps({"info": {"status": "failed"}, "version": 2, "apply_method": "ssa"})) == \
        hjr.Release("failed", "2", "ssa")
    assert hjr.release_of("") == hjr.Release()
    assert hjr.release_of("null") == hjr.Release()


# ---------------------------------------------------------------- the entry script's decisions

def test_no_release_installs_with_the_args_name_chart_flags_and_values():
    steps = decide(hjr.Release())
    assert kinds(steps) == ["term", "helm", "exit"]
    assert steps[0].text == "Installing helm chart"
    assert helm_calls(steps) == [INSTALL_ARGS + ["gpu-operator", "gpu-operator/gpu-operator"] + FLAGS + VALUES_ARGS]
    assert steps[-1].code is None  # the install's own status


def test_deployed_release_is_upgraded_without_the_install_verb():
    steps = decide(hjr.Release("deployed", "1"), EXPECTED_RELEASE_REVISION="1")
    assert kinds(steps) == ["echo", "mapkubeapis", "term", "echo", "helm", "exit"]
    assert [s.text for s in steps if s.kind in ("echo", "term")] == [
        "Already installed gpu-operator", "Upgrading helm chart", "Upgrading gpu-operator"]
    assert helm_calls(steps) == [["upgrade"] + INSTALL_ARGS[1:] + ["gpu-operator", "gpu-operator/gpu-operator"]
                                 + FLAGS + VALUES_ARGS]


def test_a_release_revision_other_than_expected_is_left_alone():
    steps = decide(hjr.Release("deployed", "2"), EXPECTED_RELEASE_REVISION="1")
    assert kinds(steps) == ["term", "echo", "exit"] and steps[-1].code == 0
    assert steps[0].text == "Current release revision 2 does not match expected revision 1"


def test_no_expected_revision_skips_the_check():
    assert helm_calls(decide(hjr.Release("deployed", "2"), EXPECTED_RELEASE_REVISION=None))[0][0] == "upgrade"


@pytest.mark.parametrize("status", ["pending-upgrade", "superseded"])
def test_an_interrupted_upgrade_is_reset_to_failed_and_retried(status):
    steps = decide(hjr.Release(status, "4"), EXPECTED_RELEASE_REVISION="4")
    assert kinds(steps) == ["echo", "term", "set-status", "term", "echo", "helm", "exit"]
    assert steps[2].text == "failed"
    assert steps[1].text == "Resetting helm release status from '%s' to 'failed'" % status
    assert helm_calls(steps)[0][0] == "upgrade" and steps[-1].code is None


@pytest.mark.parametrize("status", ["pending-install", "pending-rollback", "uninstalling"])
def test_an_interrupted_install_is_reset_and_then_handled_as_failed(status):
    steps = decide(hjr.Release(status, "1"), EXPECTED_RELEASE_REVISION="1")
    assert kinds(steps)[:3] == ["echo", "term", "set-status"]
    assert helm_calls(steps) == [["uninstall", "gpu-operator", "--namespace", "gpu-operator", "--wait"],
                                 INSTALL_ARGS + ["gpu-operator", "gpu-operator/gpu-operator"] + FLAGS + VALUES_ARGS]


def test_failed_release_with_the_default_policy_is_reinstalled():
    steps = decide(hjr.Release("failed", "2"), EXPECTED_RELEASE_REVISION="2", FAILURE_POLICY=None)
    assert [s.text for s in steps if s.kind == "term"] == ["Uninstalling failed helm chart", "Installing helm chart"]
    assert [c[0] for c in helm_calls(steps)] == ["uninstall", "install"]
    assert steps[-1] == hjr.exit_with()


def test_failed_release_with_abort_waits_for_the_operator():
    steps = decide(hjr.Release("failed", "2"), EXPECTED_RELEASE_REVISION="2", FAILURE_POLICY="abort")
    assert helm_calls(steps) == [] and steps[-1].code == 1
    assert steps[0].text == ("Release status is 'failed' and failure policy is 'abort'; "
                             "waiting for operator intervention")


def test_failed_release_with_retry_upgrades_and_exits_zero_whatever_helm_says():
    steps = decide(hjr.Release("failed", "2"), EXPECTED_RELEASE_REVISION="2", FAILURE_POLICY="retry")
    assert [c[0] for c in helm_calls(steps)] == ["upgrade"] and steps[-1].code == 0
    assert steps[0].text == "Upgrading gpu-operator from failed state"


def test_an_unknown_failure_policy_fails():
    steps = decide(hjr.Release("failed", "2"), EXPECTED_RELEASE_REVISION="2", FAILURE_POLICY="pray")
    assert helm_calls(steps) == [] and steps[-1].code == 1 and steps[0].text == "Unknown failure policy 'pray'"


def test_another_status_installs():
    steps = decide(hjr.Release("uninstalled", "3"), EXPECTED_RELEASE_REVISION="3")
    assert [c[0] for c in helm_calls(steps)] == ["install"]


def test_delete_uninstalls_an_existing_release_and_always_exits_zero():
    steps = decide(hjr.Release("deployed", "5"), args=["delete"], EXPECTED_RELEASE_REVISION="5")
    assert helm_calls(steps) == [["uninstall", "gpu-operator", "--namespace", "gpu-operator", "--wait"]]
    assert steps[0].text == "Uninstalling helm chart" and steps[-1].code == 0


def test_delete_without_a_release_has_nothing_to_delete():
    steps = decide(hjr.Release(), args=["delete"])
    assert kinds(steps) == ["term", "exit"] and steps[0].text == "No helm chart installed; nothing to delete"
    assert steps[-1].code == 0


def test_delete_of_an_unexpected_revision_is_left_alone():
    steps = decide(hjr.Release("deployed", "6"), args=["delete"], EXPECTED_RELEASE_REVISION="5")
    assert helm_calls(steps) == [] and steps[-1].code == 0


def test_server_side_apply_flags_only_with_helm_v4():
    assert helm_calls(decide(hjr.Release(), ssa=True))[0][-6:-4] == ["--server-side=true", "--force-conflicts=false"]
    assert not any(a.startswith("--server-side") for a in helm_calls(decide(hjr.Release(), ssa=False))[0])
    upgrade = helm_calls(decide(hjr.Release("deployed", "1", "ssa"), ssa=True, EXPECTED_RELEASE_REVISION="1"))[0]
    assert "--server-side=auto" in upgrade


def test_reinstall_computes_server_side_apply_as_for_a_first_install():
    steps = decide(hjr.Release("failed", "2", "csa"), ssa=True, EXPECTED_RELEASE_REVISION="2")
    uninstall, install = helm_calls(steps)
    assert "--server-side=true" in install and not any(a.startswith("--server") for a in uninstall)


@pytest.mark.parametrize("revision, method, side, force, flags", [
    ("", "", "auto", "false", ["--server-side=true", "--force-conflicts=false"]),
    ("3", "csa", "auto", "true", ["--server-side=auto", "--force-conflicts=false"]),
    ("3", "ssa", "auto", "true", ["--server-side=auto", "--force-conflicts=true"]),
    ("3", "csa", "false", "true", ["--server-side=false", "--force-conflicts=true"]),  # the script's string test
    ("3", "", "", "", []),
])
def test_ssa_args(revision, method, side, force, flags):
    assert hjr.ssa_args(revision, method, side, force) == flags


def test_chart_flags_in_the_scripts_order():
    env = {"INSECURE_SKIP_TLS_VERIFY": "true", "PLAIN_HTTP": "true", "TIMEOUT": "10m0s", "CONFIG_HASH": "abc"}
    assert hjr.chart_flags(env, "/tmp/ca-file.pem") == [
        "--ca-file", "/tmp/ca-file.pem", "--insecure-skip-tls-verify", "--plain-http", "--timeout", "10m0s",
        "--labels", hjr.CONFIG_HASH_LABEL + "=abc"]
    assert hjr.chart_flags({"INSECURE_SKIP_TLS_VERIFY": "false", "PLAIN_HTTP": "false"}, None) == []


def test_repo_steps_add_the_repository_under_the_chart_name_and_update():
    steps = hjr.repo_steps(env_of(), "gpu-operator/gpu-operator", None, {}, "/auth", True)
    assert helm_calls(steps) == [["repo", "add", "gpu-operator", "http://127.0.0.1:8879"], ["repo", "update"]]
    assert all(s.fatal for s in steps)
    assert not any(s.fatal for s in hjr.repo_steps(env_of(), "x/y", None, {}, "/auth", False))


def test_repo_steps_with_credentials_pass_the_password_on_stdin():
    auth = {"username": b"mirror\n", "password": b"s3cret\n"}
    steps = hjr.repo_steps(env_of(AUTH_PASS_CREDENTIALS="true"), "gpu-operator/gpu-operator", "/tmp/ca-file.pem",
                           auth, "/auth", True)
    assert helm_calls(steps)[0] == ["repo", "add", "--ca-file", "/tmp/ca-file.pem", "--pass-credentials", "--username",
                                    "mirror", "--password-stdin", "gpu-operator", "http://127.0.0.1:8879"]
    assert steps[0].stdin == b"s3cret\n"


def test_repo_steps_with_a_client_certificate():
    steps = hjr.repo_steps(env_of(), "gpu-operator/gpu-operator", None, {"tls.crt": b"C", "tls.key": b"K"}, "/auth", True)
    assert helm_calls(steps)[0] == ["repo", "add", "--cert-file", "/auth/tls.crt", "--key-file", "/auth/tls.key",
                                    "gpu-operator", "http://127.0.0.1:8879"]


def test_a_chart_url_needs_no_repository():
    steps = hjr.repo_steps(env_of(), "https://127.0.0.1:6443/static/charts/x.tgz", None, {}, "/auth", True)
    assert kinds(steps) == ["echo", "helm"] and helm_calls(steps) == [["repo", "remove", "stable"]]
    assert not steps[1].fatal


def test_a_stable_chart_gets_the_stable_repository():
    env = dict(hjr.IMAGE_ENV, **env_of(REPO=""))
    assert helm_calls(hjr.repo_steps(env, "stable/nginx", None, {}, "/auth", True)) == [
        ["repo", "add", "stable", "https://charts.helm.sh/stable/"], ["repo", "update"]]


def test_no_repo_and_a_plain_chart_name_do_nothing():
    assert hjr.repo_steps(env_of(REPO=""), "/tmp/gpu-operator.tgz", None, {}, "/auth", False) == []


def test_termination_message_is_the_script_lines_and_helms_error():
    # The entry script's own lines only: helm's error goes to the log, as on a node.
    assert hjr.termination_message(["Installing helm chart"]) == "Installing helm chart\n"
    assert hjr.termination_message(["Upgrading helm chart"]) == "Upgrading helm chart\n"
    assert len(hjr.termination_message(["x" * 5000])) == hjr.TERMINATION_MESSAGE_MAX


# ---------------------------------------------------------------- helm's release record

def test_release_record_round_trip_and_latest():
    record = {"name": "gpu-operator", "version": 2, "info": {"status": "pending-install"}}
    assert helm_record.decode_release(helm_record.encode_release(record)) == record
    assert helm_record.decode_release(base64.b64encode(json.dumps(record).encode()).decode()) == record  # not gzipped
    objects = [{"metadata": {"name": "sh.helm.release.v1.gpu-operator.v%s" % v, "labels": {"version": v}}}
               for v in ("2", "10", "9")]
    assert helm_record.latest_record(objects)["metadata"]["name"] == "sh.helm.release.v1.gpu-operator.v10"
    assert helm_record.latest_record([]) is None


def test_the_record_the_offline_lab_writes_is_read_back_by_the_collection_as_helms():
    # The offline stand-in writes what helm's storage would; the collection's reader of helm's
    # records must take it exactly as a real one, or the sim-mode upgrade path tests nothing.
    values = {"driver": {"enabled": False}}
    chart = {"name": "gpu-operator", "version": "v26.3.2", "appVersion": "v26.3.2"}
    first = helm_record.release_secret("gpu-operator", "gpu-operator", 1, chart, values)
    second = helm_record.release_secret("gpu-operator", "gpu-operator", 2, dict(chart, version="v26.3.3"), {})
    first["metadata"]["labels"]["status"] = helm_record.SUPERSEDED
    revisions = helm_release.history([second, first], "gpu-operator")
    assert [(r["revision"], r["chart_version"], r["status"]) for r in revisions] == [
        (1, "v26.3.2", "deployed"), (2, "v26.3.3", "deployed")]  # the payload's status is the one helm reads
    assert revisions[0]["values"] == values and revisions[0]["description"] == "Install complete"
    assert revisions[1]["description"] == "Upgrade complete"
    assert helm_release.deployed_as(revisions, "v26.3.3", {})
    assert not helm_release.deployed_as(revisions, "v26.3.2", values)
    assert helm_record.record_of_secret(second)["chart"]["metadata"]["version"] == "v26.3.3"


# ---------------------------------------------------------------- the status it reports

def test_crash_loop_status_keeps_the_pod_running_with_the_last_termination():
    plan = hjr.plan_from_pod(job_pod())
    last = hjr.terminated(1, "Installing helm chart\nError: x\n", "t0", "t1")
    status = hjr.crash_loop_status(plan, 2, last, 20, "t2")["status"]
    assert status["phase"] == "Running"
    container = status["containerStatuses"][0]
    assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert container["state"]["waiting"]["message"] == (
        "back-off 20s restarting failed container=helm pod=helm-install-gpu-operator-x7k2p_kube-system(uid-1)")
    assert container["lastState"]["terminated"] == {"exitCode": 1, "reason": "Error", "message": "Installing helm chart\nError: x\n",
                                                    "startedAt": "t0", "finishedAt": "t1"}
    assert (container["restartCount"], container["ready"], container["started"]) == (2, False, False)
    ready = [c for c in status["conditions"] if c["type"] == "Ready"][0]
    assert (ready["status"], ready["reason"]) == ("False", "ContainersNotReady")


def test_running_and_finished_status():
    plan = hjr.plan_from_pod(job_pod())
    running = hjr.running_status(plan, 0, None, "t0", True)["status"]
    assert running["phase"] == "Running" and running["startTime"] == "t0"
    assert running["containerStatuses"][0]["state"] == {"running": {"startedAt": "t0"}}
    assert all(c["status"] == "True" for c in running["conditions"])
    assert "startTime" not in hjr.running_status(plan, 1, None, "t3", False)["status"]
    done = hjr.finished_status(plan, 0, hjr.terminated(0, "", "t0", "t1"), None, "t1")["status"]
    assert done["phase"] == "Succeeded"
    assert done["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    last = hjr.terminated(1, "", "t0", "t1")
    killed = hjr.finished_status(plan, 3, hjr.terminated(137, "", "t2", "t3"), last, "t3")["status"]
    assert killed["phase"] == "Failed" and killed["containerStatuses"][0]["lastState"] == last


def test_mounts_show_the_pods_paths():
    mounts = hjr.Mounts(root="/w/helm-runs/r", values=[], auth={})
    assert mounts.display("helm install x /w/helm-runs/r/tmp/x.tgz --values /w/helm-runs/r/values/v.yaml") == \
        "helm install x /tmp/x.tgz --values /config/v.yaml"


# ---------------------------------------------------------------- one pod, against a stand-in helm

FAKE_HELM = """#!/bin/bash
# Stand-in helm: records each call; `status` answers from $STATE/release; install and
# upgrade exit with the next code of $STATE/codes (0 once they run out).
STATE=%(state)s
printf '%%s\\n' "$*" >> "$STATE/calls"
env > "$STATE/env"
case "$1" in
status)
    if [[ -s "$STATE/release" ]]; then cat "$STATE/release"; else echo "Error: release: not found" >&2; exit 1; fi ;;
install|upgrade)
    [[ -e "$STATE/hang" ]] && sleep 60
    for f in "$@"; do [[ "$f" == *.yaml || "$f" == *.tgz ]] && { echo "== $f"; cat "$f"; }; done
    code=$(head -n1 "$STATE/codes" 2>/dev/null); sed -i 1d "$STATE/codes" 2>/dev/null
    if [[ "${code:-0}" != 0 ]]; then echo "Error: INSTALLATION FAILED: lab says no" >&2; exit "$code"; fi
    echo "NAME: gpu-operator"; echo "STATUS: deployed" ;;
repo)
    echo "\\"$3\\" has been added to your repositories" ;;
esac
"""


class FakeCore(object):
    def __init__(self, secrets, config_maps):
        self.secrets, self.config_maps, self.patches = secrets, config_maps, []

    def read_namespaced_secret(self, name, namespace):
        data = self.secrets.get(name)
        return None if data is None else {"data": dict((k, base64.b64encode(v).decode()) for k, v in data.items())}

    def read_namespaced_config_map(self, name, namespace):
        data = self.config_maps.get(name)
        return None if data is None else {"data": data}

    def patch_namespaced_pod_status(self, name, namespace, body):
        self.patches.append(body["status"])


class FakeRunner(object):
    """What PodWorker uses of the Runner, without an API server."""

    def __init__(self, tmp_path, secrets, config_maps):
        self.workdir = str(tmp_path / "work")
        os.makedirs(os.path.join(self.workdir, "podlogs"))
        self.state = tmp_path / "state"
        self.state.mkdir()
        self.helm = str(tmp_path / "helm")
        with open(self.helm, "w") as handle:
            handle.write(FAKE_HELM % {"state": self.state})
        os.chmod(self.helm, os.stat(self.helm).st_mode | stat.S_IXUSR)
        self.kubeconfig = str(tmp_path / "kubeconfig")
        self.api_endpoint = "127.0.0.1:36443"
        self.helm_major = 3
        self.core = FakeCore(secrets, config_maps)
        self.published = []

    def read_or_none(self, read, *args):
        return read(*args)

    def retry(self, call, given_up):
        return call()

    def publish_logs(self, plan, log):
        self.published.append(log.path)

    def forget(self, uid):
        pass

    def calls(self):
        return (self.state / "calls").read_text().splitlines()


VALUES_SECRET = {"chart-values-gpu-operator": {"HelmChartValuesContent": b"driver:\n  enabled: false\n"}}


def run_pod(runner, pod, monkeypatch):
    monkeypatch.setattr(hjr, "BACKOFF_INITIAL_S", 0.01)
    worker = hjr.PodWorker(runner, pod)
    thread = threading.Thread(target=worker._run_until_success)  # pylint: disable=protected-access
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    return worker


def log_lines(worker):
    with open(worker.log.path) as handle:
        return [line.split(" ", 3)[1:] for line in handle.read().splitlines()]


def test_a_first_install_runs_repo_add_status_install_and_succeeds(tmp_path, monkeypatch):
    runner = FakeRunner(tmp_path, VALUES_SECRET, {"chart-content-gpu-operator": {}})
    worker = run_pod(runner, job_pod(), monkeypatch)
    assert runner.calls() == [
        "repo add gpu-operator http://127.0.0.1:8879", "repo update",
        "status --namespace gpu-operator gpu-operator --output json",
        "install --namespace gpu-operator --create-namespace --version v26.3.2 --set driver.enabled=false gpu-operator "
        "gpu-operator/gpu-operator --labels %s=%s --values %s" % (
            hjr.CONFIG_HASH_LABEL, CONFIG_HASH,
            os.path.join(runner.workdir, "helm-runs", "kube-system_helm-install-gpu-operator-x7k2p_0", "values",
                         "values-0-000-HelmChart-ValuesContent.yaml"))]
    phases = [(p["phase"], list(p["containerStatuses"][0]["state"])) for p in runner.core.patches]
    assert phases == [("Running", ["running"]), ("Succeeded", ["terminated"])]
    final = runner.core.patches[-1]["containerStatuses"][0]["state"]["terminated"]
    assert (final["exitCode"], final["reason"], final["message"]) == (0, "Completed", "Installing helm chart\n")
    lines = log_lines(worker)
    assert ["stderr", "F", "+ helm install --namespace gpu-operator --create-namespace --version v26.3.2 --set "
            "driver.enabled=false gpu-operator gpu-operator/gpu-operator --labels %s=%s --values "
            "/config/values-0-000-HelmChart-ValuesContent.yaml" % (hjr.CONFIG_HASH_LABEL, CONFIG_HASH)] in lines
    assert ["stderr", "F", "Error: release: not found"] in lines  # helm status's stderr, as in the real log
    assert ["stdout", "F", "  enabled: false"] in lines  # the values file reached helm
    assert runner.published == [worker.log.path]
    env = dict(line.split("=", 1) for line in (runner.state / "env").read_text().splitlines() if "=" in line)
    assert env["KUBECONFIG"] == runner.kubeconfig and env["HELM_NAMESPACE"] == "kube-system"
    assert env["HELM_DRIVER"] == "secret" and env["HOME"].startswith(runner.workdir)
    assert not os.path.exists(os.path.join(runner.workdir, "helm-runs", "kube-system_helm-install-gpu-operator-x7k2p_0"))


def test_a_failing_install_crash_loops_with_helms_error_then_succeeds(tmp_path, monkeypatch):
    runner = FakeRunner(tmp_path, VALUES_SECRET, {"chart-content-gpu-operator": {}})
    (runner.state / "codes").write_text("1\n1\n")
    worker = run_pod(runner, job_pod(), monkeypatch)
    states = [(p["phase"], list(p["containerStatuses"][0]["state"]), p["containerStatuses"][0]["restartCount"])
              for p in runner.core.patches]
    assert states == [("Running", ["running"], 0), ("Running", ["waiting"], 1), ("Running", ["running"], 1),
                      ("Running", ["waiting"], 2), ("Running", ["running"], 2), ("Succeeded", ["terminated"], 2)]
    waiting = runner.core.patches[3]["containerStatuses"][0]
    assert waiting["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert waiting["lastState"]["terminated"]["exitCode"] == 1
    # The termination message is the entry script's; helm's error is in the log alone.
    assert waiting["lastState"]["terminated"]["message"] == "Installing helm chart\n"
    with open(worker.log.previous) as handle:
        assert "Error: INSTALLATION FAILED: lab says no" in handle.read()  # kubectl logs --previous
    assert "Error: INSTALLATION FAILED" not in open(worker.log.path).read()


def test_chart_content_is_decoded_and_installed_from_tmp(tmp_path, monkeypatch):
    content = {"chart-content-gpu-operator": {"gpu-operator.tgz.base64": base64.b64encode(b"CHART-BYTES\n").decode()}}
    runner = FakeRunner(tmp_path, VALUES_SECRET, content)
    worker = run_pod(runner, job_pod(env=env_list(REPO="", CHART="")), monkeypatch)
    install = runner.calls()[-1].split()
    chart = install[install.index("gpu-operator", 8) + 1]
    assert chart.endswith("/tmp/gpu-operator.tgz")
    assert ["stdout", "F", "CHART-BYTES"] in log_lines(worker)
    assert not any(c.startswith("repo") for c in runner.calls())


def test_a_deployed_release_of_the_expected_revision_is_upgraded(tmp_path, monkeypatch):
    runner = FakeRunner(tmp_path, VALUES_SECRET, {"chart-content-gpu-operator": {}})
    (runner.state / "release").write_text(json.dumps({"info": {"status": "deployed"}, "version": 1}))
    worker = run_pod(runner, job_pod(env=env_list(EXPECTED_RELEASE_REVISION="1")), monkeypatch)
    assert runner.calls()[-1].startswith("upgrade --namespace gpu-operator --create-namespace --version v26.3.2")
    lines = log_lines(worker)
    assert ["stdout", "F", "Already installed gpu-operator"] in lines
    assert ["stdout", "F", "lab: the helm-mapkubeapis plugin is not installed; skipped"] in lines
    final = runner.core.patches[-1]["containerStatuses"][0]["state"]["terminated"]
    assert final["message"] == "Upgrading helm chart\n"


def test_a_missing_values_secret_holds_the_pod_in_container_creating(tmp_path, monkeypatch):
    runner = FakeRunner(tmp_path, {}, {"chart-content-gpu-operator": {}})
    monkeypatch.setattr(hjr, "MOUNT_RETRY_S", 0.01)
    worker = hjr.PodWorker(runner, job_pod())
    thread = threading.Thread(target=worker._run_until_success)  # pylint: disable=protected-access
    thread.start()
    while not runner.core.patches:
        thread.join(0.01)
    runner.core.secrets.update(VALUES_SECRET)  # helm-controller applies it
    thread.join(30)
    assert runner.core.patches[0]["phase"] == "Pending"
    assert runner.core.patches[0]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert runner.core.patches[-1]["phase"] == "Succeeded"


def test_a_pod_deleted_during_back_off_stops_retrying(tmp_path, monkeypatch):
    runner = FakeRunner(tmp_path, VALUES_SECRET, {"chart-content-gpu-operator": {}})
    (runner.state / "codes").write_text("1\n")
    monkeypatch.setattr(hjr, "BACKOFF_INITIAL_S", 60)
    worker = hjr.PodWorker(runner, job_pod())
    thread = threading.Thread(target=worker._run_until_success)  # pylint: disable=protected-access
    thread.start()
    while len(runner.core.patches) < 2:
        thread.join(0.01)
    worker.pod_deleting({"metadata": {"deletionGracePeriodSeconds": 30}})
    thread.join(5)
    assert not thread.is_alive()
    assert [c.split()[0] for c in runner.calls()].count("install") == 1


def test_a_pod_deleted_while_helm_runs_is_killed_after_its_grace_period(tmp_path, monkeypatch):
    runner = FakeRunner(tmp_path, VALUES_SECRET, {"chart-content-gpu-operator": {}})
    (runner.state / "hang").write_text("")
    worker = hjr.PodWorker(runner, job_pod())
    thread = threading.Thread(target=worker._run_until_success)  # pylint: disable=protected-access
    thread.start()
    while not any(c.startswith("install") for c in (runner.calls() if (runner.state / "calls").exists() else [])):
        thread.join(0.01)
    worker.pod_deleting({"metadata": {"deletionGracePeriodSeconds": 0}})
    thread.join(10)
    assert not thread.is_alive()
    final = runner.core.patches[-1]
    assert final["phase"] == "Failed"
    assert final["containerStatuses"][0]["state"]["terminated"]["exitCode"] == hjr.KILLED_EXIT_CODE
