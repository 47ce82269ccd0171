"""LAB-ONLY: helm's release record as helm's storage writes it (pkg/storage/driver/secrets.go,
util.go), shared by the two players of helm-controller's install Job: the helm job runner
(real helm in the pod; it only rewrites a record's status, the way the helm-set-status plugin
does) and the offline stand-in (tests/lab/gpu_operator_sim.py), which runs no helm and so
writes the records a successful install or upgrade leaves, for the collection to read back
(plugins/module_utils/k8s/helm_release.py) as it reads a real cluster's.
"""

import base64
import datetime
import gzip
import json
import time

SECRET_TYPE = "helm.sh/release.v1"
DEPLOYED = "deployed"
SUPERSEDED = "superseded"


def decode_release(text):
    """A release record as helm stores it (base64 of gzipped JSON) -> dict."""
    raw = base64.b64decode(text)
    if raw[:3] == b"\x1f\x8b\x08":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def encode_release(record):
    return base64.b64encode(gzip.compress(json.dumps(record, separators=(",", ":")).encode())).decode()


def version_of(obj):
    try:
        return int((obj["metadata"].get("labels") or {}).get("version", ""))
    except ValueError:
        return -1


def latest_record(objects):
    """The release object (Secret or ConfigMap, as a dict) with the highest version label."""
    return max(objects, key=version_of) if objects else None


def selector(release):
    return "owner=helm,name=%s" % release


def record_name(release, revision):
    return "sh.helm.release.v1.%s.v%d" % (release, revision)


def secret_payload(record):
    """``data.release`` of a record Secret: helm's own base64 under the Secret's."""
    return base64.b64encode(encode_release(record).encode()).decode()


def record_of_secret(secret):
    return decode_release(base64.b64decode(secret["data"]["release"]).decode())


def status_labels(status):
    return {"status": status, "modifiedAt": str(int(time.time()))}


def status_patch(secret, status):
    """The patch that gives a record Secret another status, in its labels and its payload
    (helm reads the payload's), as helm's storage update does."""
    record = record_of_secret(secret)
    record.setdefault("info", {})["status"] = status
    return {"metadata": {"labels": status_labels(status)}, "data": {"release": secret_payload(record)}}


def release_secret(release, namespace, revision, chart, values, status=DEPLOYED, description=None):
    """The Secret of a revision helm has just deployed: ``chart`` is the chart's metadata
    (name, version, appVersion), ``values`` the values given to helm (helm's ``config``)."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    record = {
        "name": release, "namespace": namespace, "version": revision,
        "info": {"first_deployed": now, "last_deployed": now, "status": status,
                 "description": description or ("Install complete" if revision == 1 else "Upgrade complete")},
        "chart": {"metadata": dict(chart)},
        "config": values or {},
    }
    labels = {"owner": "helm", "name": release, "version": str(revision)}
    labels.update(status_labels(status))
    return {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
            "metadata": {"name": record_name(release, revision), "namespace": namespace, "labels": labels},
            "data": {"release": secret_payload(record)}}
