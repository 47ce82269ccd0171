# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Day 2 of an RKE2 cluster as pure functions over what RKE2's own commands print: the etcd snapshot a server takes
before its upgrade (``rke2 etcd-snapshot save``), the state of a node's certificates (``rke2 certificate check
--output json``), the restore of the cluster from a snapshot (``rke2 server --cluster-reset
--cluster-reset-restore-path``): its steps in order, and whether the reset succeeded, and the servers' own snapshot
schedule, retention and S3 settings, checked and turned into config.yaml keys. The commands are k3s's
(pkg/cli/etcdsnapshot, pkg/cli/cert, pkg/cluster, pkg/etcd) at the commit RKE2 v1.34.1 pins."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import posixpath
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_api_vip

# rke2 etcd-snapshot save logs one line per snapshot the server wrote (pkg/cli/etcdsnapshot save: logrus.Infof
# "Snapshot %s saved." for each name of the result's Created); the file is <data-dir>/server/db/snapshots/<that
# name>, which ends in .zip with etcd-snapshot-compress. With etcd-s3 the upload is listed too, under the same name
# (pkg/etcd/snapshot.go Snapshot): one file.
_SAVED_RE = re.compile(r"Snapshot (\S+) saved\.")
SNAPSHOT_DIR = rke2.DATA_DIR + "/server/db/snapshots"
# k3s pkg/daemons/config: a certificate that expires within CertificateRenewDays (120) is WARNING, and RKE2 renews
# it at the next start of the service; EXPIRED and NOT YET VALID stop the node's components.
CERTIFICATE_RENEW_DAYS = 120
CERTIFICATE_ERRORS = ("EXPIRED", "NOT YET VALID")


def snapshot_name(version):
    """The name of the snapshot a server takes before it restarts on ``version``; k3s appends the node and the
    time (<name>-<node>-<unix time>)."""
    rke2.parse_version(version, "rke2_version")
    return "pre-upgrade-%s" % version.replace("+", "-")


def saved_snapshots(output):
    """The snapshot names ``rke2 etcd-snapshot save`` reports saved, in order, each once (the S3 upload of a
    snapshot carries its name); a ValueError when it saved none (the server refused or the datastore is not etcd),
    quoting its last lines."""
    names = []
    for name in _SAVED_RE.findall(output or ""):
        if name not in names:
            names.append(name)
    if not names:
        tail = "\n".join(line for line in (output or "").splitlines()[-5:] if line.strip())
        raise ValueError("rke2 etcd-snapshot save reported no snapshot saved%s"
                         % (": " + tail if tail else " (no output)"))
    return names


def certificate_report(check_json, host="this host"):
    """{"errors": [...], "warnings": [...], "count": n} of ``rke2 certificate check --output json``: each
    certificate EXPIRED or NOT YET VALID is an error, each WARNING (it expires within CERTIFICATE_RENEW_DAYS; RKE2
    renews it at its next start) a warning, naming the file, the subject and the date."""
    try:
        data = json.loads(check_json or "")
    except ValueError:
        raise ValueError("%s: rke2 certificate check --output json printed no JSON: %r"
                         % (host, (check_json or "")[:200]))
    if not isinstance(data, dict):
        raise ValueError("%s: rke2 certificate check printed %s, expected an object" % (host, type(data).__name__))
    certificates = data.get("Certificates") or []
    report = {"errors": [], "warnings": [], "count": len(certificates)}
    for cert in certificates:
        if not isinstance(cert, dict):
            raise ValueError("%s: rke2 certificate check listed %r, expected an object" % (host, cert))
        status = str(cert.get("Status") or "")
        what = "%s: %s (%s) %s %s" % (host, cert.get("Filename"), cert.get("Subject"),
                                      "valid from" if status == "NOT YET VALID" else "expires", cert.get("ExpiryTime"))
        if status in CERTIFICATE_ERRORS:
            report["errors"].append("%s: %s" % (what, status))
        elif status == "WARNING":
            report["warnings"].append("%s, within %d days: RKE2 renews it at the next start of its service "
                                      "(make rke2/certificates/rotate renews every node now)"
                                      % (what, CERTIFICATE_RENEW_DAYS))
    return report


# The restore (docs.rke2.io/datastore/backup_restore). k3s pkg/etcd Reset restores the snapshot into a new etcd of
# one member, logs "Managed etcd cluster membership has been reset, restart without --cluster-reset flag now" (older
# releases: "Etcd is running, restart without ...") and exits 0; the common part is what tells success.
RESTORE_CONFIRM_VAR = "rke2_confirm_restore"
RESET_DONE = "restart without --cluster-reset flag now"
# Where RKE2 puts kubectl for the server's own admin kubeconfig.
KUBECTL = rke2.DATA_DIR + "/bin/kubectl"
# rke2_restore_s3 takes the settings of rke2_etcd_s3 (the same names and checks, _check_s3): a restore from the
# cluster's own bucket is rke2_restore_s3: "{{ rke2_etcd_s3 }}". The credentials go in the etcd-s3-* flags' own
# environment variables (k3s pkg/cli/cmds/server.go EnvVar), never on the command line, where ps and the task's
# logged command would show them. enabled and retention are the schedule's, not the restore's.
S3_CREDENTIAL_VARIABLES = {"access_key": "AWS_ACCESS_KEY_ID", "secret_key": "AWS_SECRET_ACCESS_KEY",
                           "session_token": "AWS_SESSION_TOKEN"}
_S3_NOT_RESTORE = ("enabled", "retention")
# Moving server/db aside (not deleting it) keeps the server's local snapshots; the name says when, as k3s names the
# etcd-old-<time> folder it leaves on the first server.
_MOVE_ASIDE = 'mv --no-target-directory "$1" "$1-old-$(date -u +%Y%m%dT%H%M%SZ)"'


def _restore_path(snapshot, s3):
    """Where ``rke2 server --cluster-reset-restore-path`` finds ``snapshot``: its name in the bucket with S3, else a
    file of SNAPSHOT_DIR (a plain name, or an absolute path in it)."""
    key = "rke2_restore_snapshot"
    if not isinstance(snapshot, str) or not snapshot.strip():
        raise ValueError("%s is empty: name the snapshot to restore (a file in %s on the first server, or its name "
                         "in the S3 bucket)" % (key, SNAPSHOT_DIR))
    if snapshot != snapshot.strip() or any(char in snapshot for char in "\n\r\t\0"):
        raise ValueError("%s=%r: a snapshot name has no surrounding blanks or control characters" % (key, snapshot))
    parts = snapshot.split("/")
    if ".." in parts or "." in parts:
        raise ValueError("%s=%s: '.' and '..' are refused; name a file in %s" % (key, snapshot, SNAPSHOT_DIR))
    if s3:
        if "/" in snapshot:
            raise ValueError("%s=%s: an S3 snapshot is named as the bucket lists it, without a path "
                             "(rke2_restore_s3.folder names the folder)" % (key, snapshot))
        return snapshot
    if "/" not in snapshot:
        return SNAPSHOT_DIR + "/" + snapshot
    if not snapshot.startswith(SNAPSHOT_DIR + "/") or posixpath.normpath(snapshot) != snapshot:
        raise ValueError("%s=%s: a local snapshot is a file name in %s, or an absolute path in that folder"
                         % (key, snapshot, SNAPSHOT_DIR))
    return snapshot


def _s3_flags(s3):
    """(flags, environment) of rke2_restore_s3: the etcd-s3-* flags, and the credentials' variables."""
    if s3.get("bucket") in (None, ""):
        raise ValueError("rke2_restore_s3.bucket is empty: a restore from S3 needs the bucket")
    given = _check_s3(dict(s3, enabled=True), "rke2_restore_s3")
    flags, environment = ["--etcd-s3"], {}
    for key, config_key in rke2.ETCD_S3_KEYS:
        if key not in given or key in _S3_NOT_RESTORE:
            continue
        if key in S3_CREDENTIAL_VARIABLES:
            environment[S3_CREDENTIAL_VARIABLES[key]] = given[key]
        elif isinstance(given[key], bool):
            flags.append("--%s=%s" % (config_key, "true" if given[key] else "false"))
        else:
            flags.append("--%s=%s" % (config_key, given[key]))
    return flags, environment


def restore_plan(servers, snapshot, s3=None, binary="rke2", timeout=1800):
    """The restore of the cluster's etcd from ``snapshot``, in order, as RKE2 documents it: rke2-server stopped on
    every server of ``servers`` (rke2_servers; agents keep running), the snapshot restored on the first one in the
    foreground (``rke2 server --cluster-reset --cluster-reset-restore-path``, within ``timeout`` seconds),
    rke2-server started there and Ready; then each other server, one at a time: its server/db moved aside, so that
    it joins the restored cluster as a new etcd member, rke2-server started, Ready and voting before the next. Last,
    the Nodes the snapshot holds for hosts the inventory no longer has (stale_nodes).

    ``s3``: rke2_restore_s3, rke2_etcd_s3's settings (bucket required; enabled and retention unused); empty, the
    snapshot is a file on the first server, and --etcd-s3=false keeps an etcd-s3 of config.yaml from reading it from the bucket.
    Returns {"first", "others", "restore_path", "s3", "reset_argv", "reset_environment" (the S3 credentials: a
    task that uses it logs nothing), "db_dir", "move_db_argv", "nodes_argv", "steps", "summary"}; each step
    {"host", "action"}, with "argv" where the role runs that command; "summary" says each step in a line. A
    ValueError names the setting at fault before anything changes."""
    if not isinstance(servers, (list, tuple)):
        raise ValueError("rke2_servers is %s, expected a list of hosts" % type(servers).__name__)
    if not servers:
        raise ValueError("rke2_servers is empty: a restore needs the servers of the cluster, the first of which "
                         "restores the snapshot")
    for server in servers:
        if not isinstance(server, str) or not server:
            raise ValueError("rke2_servers lists %r, expected host names" % (server,))
    if len(set(servers)) != len(servers):
        raise ValueError("rke2_servers lists a host twice: %s" % ", ".join(servers))
    if s3 is not None and not isinstance(s3, dict):
        raise ValueError("rke2_restore_s3 is %s, expected a mapping of etcd-s3 settings" % type(s3).__name__)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
        raise ValueError("rke2_restore_timeout=%r: expected a number of seconds above 0" % (timeout,))
    path = _restore_path(snapshot, bool(s3))
    flags, environment = _s3_flags(s3) if s3 else (["--etcd-s3=false"], {})
    first, others = servers[0], list(servers[1:])
    reset_argv = (["timeout", "--kill-after=10", str(timeout), binary or "rke2", "server", "--cluster-reset",
                   "--cluster-reset-restore-path=" + path] + flags)
    move_db_argv = ["sh", "-c", _MOVE_ASIDE, "sh", rke2.DB_DIR]
    steps = [{"host": server, "action": "stop"} for server in servers]
    steps += [{"host": first, "action": "reset", "argv": reset_argv},
              {"host": first, "action": "start"}, {"host": first, "action": "wait_ready"}]
    for server in others:
        steps += [{"host": server, "action": "move_db_aside", "argv": move_db_argv},
                  {"host": server, "action": "start"}, {"host": server, "action": "wait_ready"}]
    nodes_argv = [KUBECTL, "--kubeconfig", rke2_api_vip.RKE2_KUBECONFIG, "get", "nodes", "--output", "name"]
    steps.append({"host": first, "action": "stale_nodes", "argv": nodes_argv})
    says = {"stop": "stop rke2-server",
            "reset": "rke2 server --cluster-reset --cluster-reset-restore-path=%s%s (restores the snapshot)"
                     % (path, " --etcd-s3 (bucket %s)" % s3["bucket"] if s3 else ""),
            "start": "start rke2-server", "wait_ready": "wait until Ready and voting in etcd",
            "move_db_aside": "move %s aside (%s-old-<time>)" % (rke2.DB_DIR, rke2.DB_DIR),
            "stale_nodes": "list the Nodes; those no inventory host has are stale"}
    summary = ["%s: %s" % (step["host"], says[step["action"]]) for step in steps]
    return {"first": first, "others": others, "restore_path": path, "s3": bool(s3), "reset_argv": reset_argv,
            "reset_environment": environment, "db_dir": rke2.DB_DIR, "move_db_argv": move_db_argv,
            "nodes_argv": nodes_argv, "steps": steps, "summary": summary}


def reset_failure(output, rc, host="the first server", timeout=None):
    """Why ``rke2 server --cluster-reset`` did not restore the cluster on ``host``, or '': it succeeded only when it
    exited 0 having logged RESET_DONE. The message quotes its last lines and says where the cluster stands: every
    server is stopped, and the datastore is the one before the restore unless the reset got as far as restoring."""
    rc = int(rc)
    if rc == 0 and RESET_DONE in (output or ""):
        return ""
    if rc in (124, 137) and timeout:
        cause = "did not finish within rke2_restore_timeout (%s s)" % timeout
    elif rc == 0:
        cause = "exited without saying that the cluster membership was reset (%r)" % RESET_DONE
    else:
        cause = "failed (rc %d)" % rc
    tail = "\n".join(line for line in (output or "").splitlines()[-15:] if line.strip())
    return ("%s: rke2 server --cluster-reset %s; its last lines: %s. rke2-server is stopped on every server. Fix the "
            "cause and run the restore again, or start rke2-server on each server to go back to the datastore as it "
            "was, if the reset stopped before restoring (a folder server/db/etcd-old-<time> on %s says it got that "
            "far)" % (host, cause, tail or "(no output)", host))


# ---------------------------------------------------------------- the servers' own snapshots

# RKE2's defaults for the snapshot settings (k3s pkg/cli/cmds/server.go), which are the role's defaults too: a
# setting equal to its default writes no key, so a site that sets none keeps config.yaml as it was.
SNAPSHOT_DEFAULTS = {"schedule_cron": "0 */12 * * *", "retention": 5, "compress": False}
S3_SETTINGS = tuple(name for name, _key in rke2.ETCD_S3_KEYS)
# The S3 settings whose value is a secret (rke2.SECRET_CONFIG_KEYS): from a vault, never in a log or a diff.
S3_SECRETS = tuple(name for name, key in rke2.ETCD_S3_KEYS if key in rke2.SECRET_CONFIG_KEYS)
S3_BOOLEANS = ("enabled", "skip_ssl_verify", "insecure")
# etcd-s3-bucket-lookup-type: how the S3 client addresses the bucket (minio-go's BucketLookupType; auto when unset).
S3_BUCKET_LOOKUP_TYPES = ("auto", "dns", "path")

# robfig/cron's standard parser, which k3s's etcd schedule uses (pkg/etcd NewETCD: cron.New without a parser): five
# fields or a descriptor, after an optional time zone. A spec it refuses leaves the server without scheduled
# snapshots (AddFunc's error is not fatal there), so it is refused here.
_CRON_FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
                ("month", 1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
                ("day of week", 0, 6, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")))
_CRON_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_CRON_TZ_RE = re.compile(r"^(CRON_TZ|TZ)=\S+\s+")
# A Go duration (time.ParseDuration), as etcd-s3-timeout and @every take it: 30s, 5m, 1h30m.
_DURATION_RE = re.compile(r"^((\d+(\.\d*)?|\.\d+)(ns|us|ms|s|m|h))+$")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
# minio-go, RKE2's S3 client, takes the endpoint as host[:port] and adds the scheme itself (etcd-s3-insecure: http).
_HOST_PORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?)(:\d{1,5})?$")
# minio-go's bucket name check (s3utils.CheckValidBucketName).
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{1,61}[A-Za-z0-9]$")
# k3s pkg/etcd/s3: etcd-s3-proxy is a URL with scheme and host, or none for no proxy at all.
_PROXY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/\s]+")


def _duration_seconds(text):
    """The seconds of a Go duration, or None when ``text`` is none."""
    if not isinstance(text, str) or not _DURATION_RE.match(text):
        return None
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART_RE.findall(text))


def _cron_value(text, names, low, high):
    value = names.index(text.lower()) + low if text.lower() in names else (int(text) if text.isdigit() else None)
    return value if value is not None and low <= value <= high else None


def _check_cron(spec, name):
    what = ("%s %r must be a cron schedule of five fields, minute hour day-of-month month day-of-week (RKE2's "
            "default is '%s'), or @hourly, @daily, @weekly, @monthly, @yearly or '@every <duration>'"
            % (name, spec, SNAPSHOT_DEFAULTS["schedule_cron"]))
    if not isinstance(spec, str):
        raise ValueError(what)
    text = _CRON_TZ_RE.sub("", spec.strip(), 1)
    if text in _CRON_DESCRIPTORS:
        return
    if text.startswith("@every "):
        if not _duration_seconds(text[len("@every "):].strip()):
            raise ValueError("%s %r: @every takes a Go duration above 0, such as 6h or 90m" % (name, spec))
        return
    fields = text.split()
    if len(fields) != len(_CRON_FIELDS):
        raise ValueError(what)
    for field, (field_name, low, high, names) in zip(fields, _CRON_FIELDS):
        for part in field.split(","):
            span, slash, step = part.partition("/")
            bounds = [] if span in ("*", "?") else span.split("-")
            values = [_cron_value(bound, names, low, high) for bound in bounds]
            if (slash and not (step.isdigit() and int(step) > 0)) or len(bounds) > 2 or None in values \
                    or values != sorted(values):
                raise ValueError("%s %r: the %s field %r is not *, a value from %d to %d, a range a-b or a list of "
                                 "them, each with an optional /step" % (name, spec, field_name, field, low, high))


def _check_count(value, name):
    # bool is an int to Python, not to a site file. RKE2 prunes nothing below 1 (pkg/etcd/s3 SnapshotRetention):
    # the snapshots would fill the disk or the bucket.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("%s %r must be a whole number of snapshots to keep, at least 1" % (name, value))


def _check_s3(s3, name):
    """The S3 settings given (None and '' are not given), checked."""
    if not isinstance(s3, dict):
        raise ValueError("%s must be a mapping of S3 settings (%s), got %r" % (name, ", ".join(S3_SETTINGS), s3))
    # key=str: YAML reads an unquoted 1 as a number, and sorting a number with strings fails.
    unknown = sorted(set(s3) - set(S3_SETTINGS), key=str)
    if unknown:
        raise ValueError("%s.%s: unknown setting (allowed: %s)" % (name, unknown[0], ", ".join(S3_SETTINGS)))
    given = dict((key, value) for key, value in s3.items() if value is not None and value != "")
    for key, value in sorted(given.items()):
        where = "%s.%s" % (name, key)
        if key in S3_BOOLEANS:
            if not isinstance(value, bool):
                raise ValueError("%s %r must be true or false" % (where, value))
        elif key == "retention":
            _check_count(value, where)
        elif key in S3_SECRETS:
            # Never the value: it is a secret.
            if not isinstance(value, str):
                raise ValueError("%s must be a string, not %s" % (where, type(value).__name__))
        elif not isinstance(value, str):
            raise ValueError("%s must be a string, got %r" % (where, value))
        elif key == "endpoint" and not _HOST_PORT_RE.match(value):
            raise ValueError("%s %r must be the S3 endpoint's host[:port], without scheme or path: RKE2's S3 client "
                             "adds https:// (http:// with insecure: true)" % (where, value))
        elif key == "endpoint_ca" and not value.startswith("/"):
            raise ValueError("%s %r must be the absolute path of a CA bundle on the server" % (where, value))
        elif key == "bucket" and not _BUCKET_RE.match(value):
            raise ValueError("%s %r is not an S3 bucket name (3 to 63 letters, digits, dots, hyphens)" % (where, value))
        elif key == "bucket_lookup_type" and value not in S3_BUCKET_LOOKUP_TYPES:
            raise ValueError("%s %r is not one of %s" % (where, value, ", ".join(S3_BUCKET_LOOKUP_TYPES)))
        elif key == "region" and len(value.split()) != 1:
            raise ValueError("%s %r must be a region name, such as us-east-1" % (where, value))
        elif key == "timeout" and not _duration_seconds(value):
            raise ValueError("%s %r must be a Go duration above 0, such as 5m or 30s" % (where, value))
        elif key == "proxy" and value != "none" and not _PROXY_RE.match(value):
            raise ValueError("%s %r must be a proxy URL with scheme and host (http://proxy.example:3128), or none "
                             "for no proxy" % (where, value))
    if given and "enabled" not in given:
        raise ValueError("%s.enabled is required with the other S3 settings: true takes the snapshots to S3 too, "
                         "false keeps the settings unused" % name)
    if given.get("enabled") and not given.get("bucket"):
        raise ValueError("%s.bucket is required with enabled: true" % name)
    if ("access_key" in given) != ("secret_key" in given):
        raise ValueError("%s: access_key and secret_key go together (without both, RKE2 takes the credentials from "
                         "the server's AWS credentials file or its instance role)" % name)
    if "session_token" in given and "access_key" not in given:
        raise ValueError("%s.session_token needs access_key and secret_key" % name)
    if given.get("skip_ssl_verify") and "endpoint_ca" in given:
        raise ValueError("%s: skip_ssl_verify and endpoint_ca exclude each other: RKE2 checks no certificate "
                         "with skip_ssl_verify, so the CA would be ignored" % name)
    if given.get("insecure") and (given.get("skip_ssl_verify") or "endpoint_ca" in given):
        raise ValueError("%s: insecure (plain http) has no TLS for skip_ssl_verify or endpoint_ca to apply to" % name)
    return given


def etcd_snapshot_config(role, settings, where=None):
    """The config.yaml keys of a node's etcd snapshot settings, ``settings`` {schedule_cron, retention, compress,
    s3} in the site file's words (rke2.etcd_snapshots). RKE2 takes scheduled snapshots on servers only: an agent
    gets no key (its settings are checked all the same). A setting equal to RKE2's default (SNAPSHOT_DEFAULTS)
    writes no key; ``s3`` writes the settings it is given, once enabled. ``where``: the site file's key of the
    settings, for messages; None names the rke2 role's variables (rke2_etcd_snapshot_<name>, rke2_etcd_s3)."""
    def name(key):
        return "%s.%s" % (where, key) if where else rke2.ETCD_SNAPSHOT_VARIABLES.get(key, "rke2_etcd_snapshot_%s" % key)

    allowed = ", ".join(sorted(SNAPSHOT_DEFAULTS))
    if not isinstance(settings, dict):
        raise ValueError("%s must be a mapping of %s, s3, got %r"
                         % (where or "etcd snapshot settings", allowed, settings))
    unknown = sorted(set(settings) - set(SNAPSHOT_DEFAULTS) - set(("s3",)), key=str)
    if unknown:
        raise ValueError("%s: unknown setting (allowed: %s, s3)" % (name(unknown[0]), allowed))
    settings = dict(SNAPSHOT_DEFAULTS, **dict((key, value) for key, value in settings.items() if value is not None))
    _check_cron(settings["schedule_cron"], name("schedule_cron"))
    _check_count(settings["retention"], name("retention"))
    if not isinstance(settings["compress"], bool):
        raise ValueError("%s %r must be true or false" % (name("compress"), settings["compress"]))
    s3 = _check_s3(settings.get("s3", {}), name("s3"))
    if role != rke2.SERVER:
        return {}
    config = {}
    for key, config_key in rke2.ETCD_SNAPSHOT_KEYS:
        if settings[key] != SNAPSHOT_DEFAULTS[key]:
            config[config_key] = settings[key]
    if s3.get("enabled"):
        for key, config_key in rke2.ETCD_S3_KEYS:
            # A false switch is RKE2's default.
            if key in s3 and s3[key] is not False:
                config[config_key] = s3[key]
    return config
