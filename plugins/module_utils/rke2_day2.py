# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Day 2 of an RKE2 cluster as pure functions over what RKE2's own commands print: the etcd snapshot a server takes
before its upgrade (``rke2 etcd-snapshot save``), and the state of a node's certificates (``rke2 certificate check
--output json``). Both commands are k3s's (pkg/cli/etcdsnapshot, pkg/cli/cert) at the commit RKE2 v1.34.1 pins."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2

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
