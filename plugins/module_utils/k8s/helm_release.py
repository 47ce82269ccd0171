# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helm's release records, read from the cluster the way helm reads them, as plain data.

RKE2's helm-controller installs a HelmChart with helm inside a Job; what helm did is only in
its release records: one Secret per revision, ``sh.helm.release.v1.<release>.v<revision>`` in
the release namespace, labelled ``owner=helm``, ``name``, ``status`` and ``version`` (helm's
pkg/storage/driver/secrets.go). The payload (``data.release``) is base64 of gzipped JSON
(pkg/storage/driver/util.go: encodeRelease), on top of the Secret's own base64.

What matters for an upgrade: helm's *current* release is the highest revision, whatever its
status (``helm ls --all`` is what klipper-helm's entry script asks). When ``helm upgrade``
fails half-way, helm records the new revision ``failed`` and leaves the one before it
``deployed`` (pkg/action/upgrade.go: failRelease), so the cluster still runs the deployed
revision's objects, except those the failed upgrade had already changed. With the
HelmChart's ``failurePolicy: abort`` the entry script then refuses every later run ("waiting
for operator intervention") until the failed revision is no longer the current one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import gzip
import json
import re

SECRET_TYPE = "helm.sh/release.v1"
OWNER_LABEL = ("owner", "helm")
RECORD_NAME = re.compile(r"^sh\.helm\.release\.v1\.(?P<release>.+)\.v(?P<revision>[0-9]+)$")
DEPLOYED = "deployed"
FAILED = "failed"
# Statuses of a revision that is being worked on (helm's release.Status*): an interrupted helm leaves them.
CONFIG_HASH_LABEL = "helmcharts.helm.cattle.io/configHash"
PENDING = ("pending-install", "pending-upgrade", "pending-rollback", "uninstalling")


class RecordError(ValueError):
    """A release record that helm did not write (or that was altered)."""


def selector(release):
    """The label selector of one release's records."""
    return "owner=helm,name=%s" % release


def decode(payload):
    """``data.release`` of a record Secret (as the API returns it, base64) -> helm's release dict."""
    try:
        raw = base64.b64decode(base64.b64decode(payload))
        if raw[:3] == b"\x1f\x8b\x08":
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, OSError, TypeError, UnicodeDecodeError) as exc:
        raise RecordError("not a helm release record: %s" % exc)


def revision(secret):
    """One record Secret (a dict) -> a plain summary of that revision."""
    meta = secret.get("metadata") or {}
    match = RECORD_NAME.match(meta.get("name") or "")
    if not match:
        raise RecordError("%s is not named like a helm release record" % meta.get("name"))
    labels = meta.get("labels") or {}
    body = decode((secret.get("data") or {}).get("release") or "")
    chart = ((body.get("chart") or {}).get("metadata") or {})
    info = body.get("info") or {}
    return {
        "record": meta["name"],
        "release": match.group("release"),
        "revision": int(match.group("revision")),
        # helm writes the status into both; the payload is the one helm reads back.
        "status": info.get("status") or labels.get("status"),
        "chart_version": chart.get("version"),
        "app_version": chart.get("appVersion"),
        "description": info.get("description") or "",
        "namespace": body.get("namespace") or meta.get("namespace"),
        # The values given to helm for this revision (helm's "config"; the chart's defaults are not in it).
        "values": body.get("config") or {},
        # helm-controller's hash of the HelmChart (and HelmChartConfig) this revision was made from,
        # a label its Job's entry script passes to helm; None when another client made the revision.
        "config_hash": labels.get(CONFIG_HASH_LABEL),
    }


def history(secrets, release):
    """The release's revisions, oldest first, from its record Secrets (others are ignored)."""
    revisions = []
    for secret in secrets:
        if secret.get("type") not in (None, SECRET_TYPE):
            continue
        match = RECORD_NAME.match(((secret.get("metadata") or {}).get("name")) or "")
        if match and match.group("release") == release:
            revisions.append(revision(secret))
    return sorted(revisions, key=lambda rev: rev["revision"])


def current(revisions):
    """helm's current revision (the highest), or None for a release never installed."""
    return revisions[-1] if revisions else None


def last_deployed(revisions):
    """The highest revision with status deployed: what the cluster runs."""
    for rev in reversed(revisions):
        if rev["status"] == DEPLOYED:
            return rev
    return None


def failed_upgrade(revisions):
    """``(failed, deployed)`` when the current revision is a failed upgrade of a deployed one
    (the state a failed ``helm upgrade`` leaves), else None."""
    latest = current(revisions)
    if not latest or latest["status"] != FAILED:
        return None
    deployed = last_deployed(revisions)
    if not deployed or deployed["revision"] >= latest["revision"]:
        return None
    return latest, deployed


def flatten(values, prefix=""):
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and scalars are leaves."""
    flat = {}
    for key, value in (values or {}).items():
        path = prefix + str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def values_changes(before_values, after_values):
    """The dotted keys whose value differs: {"key": [before, after]} (None: unset)."""
    before, after = flatten(before_values), flatten(after_values)
    return dict((key, [before.get(key), after.get(key)]) for key in sorted(set(before) | set(after))
                if before.get(key) != after.get(key))


def failure_report(revisions):
    """A failed upgrade as a person needs it: the failed and the deployed revision (without their
    values) and the values the failed one changed, which hold the value helm could not apply."""
    found = failed_upgrade(revisions)
    if not found:
        return None
    failed, deployed = found
    report = dict((k, v) for k, v in failed.items() if k != "values")
    report["deployed_revision"] = deployed["revision"]
    report["deployed_chart_version"] = deployed["chart_version"]
    report["values_changed"] = values_changes(deployed["values"], failed["values"])
    report["message"] = (
        "release %s: the upgrade to revision %d (chart %s) failed and revision %d (chart %s) still runs; helm said: "
        "%s; the values that upgrade changed: %s" % (
            failed["release"], failed["revision"], failed["chart_version"], deployed["revision"],
            deployed["chart_version"], failed["description"] or "(nothing)",
            ", ".join("%s %s -> %s" % (key, json.dumps(before), json.dumps(after))
                      for key, (before, after) in sorted(report["values_changed"].items())) or "none"))
    return report


def user_values(config, wanted):
    """helm's record of the values without what the host's helm-controller adds on its own: RKE2's
    sets ``global.*`` values (systemDefaultRegistry, clusterCIDR, ...) with --set-string."""
    config = dict(config or {})
    added = config.get("global")
    if isinstance(added, dict):
        kept = dict((k, v) for k, v in added.items() if k in ((wanted or {}).get("global") or {}))
        if kept:
            config["global"] = kept
        else:
            config.pop("global")
    return config


def deployed_as(revisions, chart_version, values):
    """Whether helm's current revision is deployed with ``chart_version`` and ``values`` (a
    HelmChart's spec.version and parsed valuesContent): then helm-controller has nothing to
    run for that chart (it skips a chart whose deployed release carries its config)."""
    latest = current(revisions)
    if not latest or latest["status"] != DEPLOYED:
        return False
    if str(latest["chart_version"] or "").lstrip("v") != str(chart_version or "").lstrip("v"):
        return False
    return user_values(latest.get("values"), values) == (values or {})


def summary(rev):
    if not rev:
        return "not installed"
    return "revision %d (chart %s, %s)" % (rev["revision"], rev["chart_version"], rev["status"])


# What the resume does to the HelmChart's install Job (helm-controller's, owned by the chart).
# With failurePolicy abort that Job retries with backoff; each retry reads helm's record again.
# Once the failed record is gone, a retry of a Job made for the chart's OLD spec would run
# `helm upgrade` with the values that failed, and record a new failed revision before the
# fixed chart's Job exists. So the Job is suspended first (the job controller stops its pod),
# and only then is the record removed:
#  - "hold": the chart about to be delivered differs from the one in the cluster; helm-controller
#    replaces the suspended Job when it lands (a new Job whose first run finds the deployed
#    revision current).
#  - "restart": the chart stays as it is (already fixed); the suspended Job is deleted after the
#    removal and helm-controller, which watches the Jobs its charts own, creates it again, so
#    the run starts now and not after the Job's backoff, without the aborted attempts counted.
JOB_HOLD = "hold"
JOB_RESTART = "restart"


def _spec_of(chart):
    return dict((k, v) for k, v in ((chart or {}).get("spec") or {}).items() if v is not None)


def job_finished(job):
    """Whether the Job ran to an end (Complete, or Failed after its backoff limit)."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return True
    return False


def install_job_action(cluster_chart, job, next_chart=None):
    """What the resume does to ``job`` (the Job ``cluster_chart.status.jobName`` names), as
    above: JOB_HOLD, JOB_RESTART, or None when there is no Job that could run again.
    ``next_chart``: the HelmChart about to be delivered (None: the cluster's stays)."""
    if not job or job_finished(job):
        return None
    if next_chart is not None and _spec_of(next_chart) != _spec_of(cluster_chart):
        return JOB_HOLD
    return JOB_RESTART


def job_pods_stopped(pods):
    """Whether no pod of a suspended Job runs any more: each is gone or ended. A pod that is
    only being deleted may still run a container started before the suspension, whose entry
    script reads helm's record after it has fetched the chart, so possibly after the removal."""
    return all((pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") for pod in pods)


def job_config_hash(job):
    """The CONFIG_HASH helm-controller gave its install Job (the hash its run labels the release
    with), or None."""
    for container in (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or ():
        for env in container.get("env") or ():
            if env.get("name") == "CONFIG_HASH" and env.get("value"):
                return env["value"]
    return None


def deployed_from(revisions, config_hash):
    """Whether helm's current revision is deployed and was made from the HelmChart config whose
    hash is ``config_hash`` (helm-controller's own test before it skips a chart)."""
    latest = current(revisions)
    return bool(latest and latest["status"] == DEPLOYED and latest.get("config_hash") == config_hash)
