# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Day 2 of an RKE2 cluster as pure functions over what RKE2's own commands print: the etcd snapshot a server takes
before its upgrade (``rke2 etcd-snapshot save``), the state of a node's certificates (``rke2 certificate check
--output json``), and the restore of the cluster from a snapshot (``rke2 server --cluster-reset
--cluster-reset-restore-path``): its steps in order, and whether the reset succeeded. The commands are k3s's
(pkg/cli/etcdsnapshot, pkg/cli/cert, pkg/cluster, pkg/etcd) at the commit RKE2 v1.34.1 pins."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import posixpath
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_api_vip

# rke2 etcd-snapshot save logs one line per snapshot the server wrote (pkg/cli/etcdsnapshot save: logrus.Infof
# "Snapshot %s saved."); the file is <data-dir>/server/db/snapshots/<that name> (no --snapshot-compress).
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
    """The snapshot names ``rke2 etcd-snapshot save`` reports saved, in order; a ValueError when it saved none
    (the server refused or the datastore is not etcd), quoting its last lines."""
    names = _SAVED_RE.findall(output or "")
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
# rke2 server's etcd-s3-* flags (k3s pkg/cli/cmds/server.go, copied by RKE2's pkg/cli/cmds/server.go), named in
# rke2_restore_s3 without the prefix. The credentials go in the flags' environment variables, never on the command
# line, where ps and the task's logged command would show them.
S3_VALUE_FLAGS = ("bucket", "folder", "endpoint", "endpoint-ca", "region", "bucket-lookup-type", "proxy", "timeout")
S3_BOOL_FLAGS = ("skip-ssl-verify", "insecure")
S3_CREDENTIALS = (("access-key", "AWS_ACCESS_KEY_ID"), ("secret-key", "AWS_SECRET_ACCESS_KEY"),
                  ("session-token", "AWS_SESSION_TOKEN"))
_S3_KEYS = S3_VALUE_FLAGS + S3_BOOL_FLAGS + tuple(key for key, _env in S3_CREDENTIALS)
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
    for key in sorted(s3):
        if key not in _S3_KEYS:
            raise ValueError("rke2_restore_s3.%s: no such setting (%s)" % (key, ", ".join(_S3_KEYS)))
    if not isinstance(s3.get("bucket"), str) or not s3["bucket"].strip():
        raise ValueError("rke2_restore_s3.bucket is %s: a restore from S3 needs the bucket"
                         % ("empty" if not s3.get("bucket") else "%r, not a name" % (s3["bucket"],)))
    flags = ["--etcd-s3"]
    for key in S3_VALUE_FLAGS:
        value = s3.get(key)
        if value is None or value == "":
            continue
        if key == "timeout" and isinstance(value, int) and not isinstance(value, bool):
            value = "%ds" % value
        if not isinstance(value, str) or any(char in value for char in "\n\r\0"):
            raise ValueError("rke2_restore_s3.%s=%r: expected a string on one line" % (key, value))
        flags.append("--etcd-s3-%s=%s" % (key, value))
    for key in S3_BOOL_FLAGS:
        if key in s3:
            if not isinstance(s3[key], bool):
                raise ValueError("rke2_restore_s3.%s=%r: expected true or false" % (key, s3[key]))
            flags.append("--etcd-s3-%s=%s" % (key, "true" if s3[key] else "false"))
    environment = {}
    for key, variable in S3_CREDENTIALS:
        value = s3.get(key)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            # The value is a secret: the message names the setting, never the value.
            raise ValueError("rke2_restore_s3.%s: expected a string" % key)
        environment[variable] = value
    return flags, environment


def restore_plan(servers, snapshot, s3=None, binary="rke2", timeout=1800):
    """The restore of the cluster's etcd from ``snapshot``, in order, as RKE2 documents it: rke2-server stopped on
    every server of ``servers`` (rke2_servers; agents keep running), the snapshot restored on the first one in the
    foreground (``rke2 server --cluster-reset --cluster-reset-restore-path``, within ``timeout`` seconds),
    rke2-server started there and Ready; then each other server, one at a time: its server/db moved aside, so that
    it joins the restored cluster as a new etcd member, rke2-server started, Ready and voting before the next. Last,
    the Nodes the snapshot holds for hosts the inventory no longer has (stale_nodes).

    ``s3``: rke2_restore_s3, the etcd-s3-* settings without the prefix (bucket required); empty, the snapshot is a
    file on the first server, and --etcd-s3=false keeps an etcd-s3 of config.yaml from reading it from the bucket.
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
