# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server-side apply and delete of manifests through the kubernetes dynamic client;
waiting for a deletion goes through the collection's watch engine (``k8s_wait``).

Whether an apply changed anything is the API server's answer, not a local guess: a
real apply changed the object when its resourceVersion moved (a no-op apply writes
nothing); a dry run (check mode) changed it when the object the server would store
differs from the live one in anything but bookkeeping (resourceVersion, timestamps,
status). The functions take the dynamic client (or a fake of it) and plain dicts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait

FIELD_MANAGER = "gpuplatform.rke2"
# Written by the server on every write; never a change the caller made.
BOOKKEEPING_METADATA = ("resourceVersion", "generation", "creationTimestamp", "uid", "selfLink")

try:
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError, DynamicApiError
    HAS_DYNAMIC = True
except ImportError:  # pragma: no cover - reported by the module
    HAS_DYNAMIC = False

    class DynamicApiError(Exception):
        pass

    class NotFoundError(DynamicApiError):
        pass

    class ResourceNotFoundError(Exception):
        pass


class ApplyError(Exception):
    """An object that could not be applied or deleted; the message names it."""


def describe(obj):
    """``HelmChart kube-system/gpu-operator`` for messages."""
    meta = obj.get("metadata") or {}
    where = "%s/%s" % (meta["namespace"], meta.get("name")) if meta.get("namespace") else meta.get("name")
    return "%s %s" % (obj.get("kind"), where)


def definition_problems(objects):
    """Problems that make objects unappliable, each naming the object and key."""
    problems = []
    for index, obj in enumerate(objects):
        if not isinstance(obj, dict):
            problems.append("definition[%d]: not a map" % index)
            continue
        for key in ("apiVersion", "kind"):
            if not obj.get(key):
                problems.append("definition[%d].%s: missing" % (index, key))
        if not (obj.get("metadata") or {}).get("name"):
            problems.append("definition[%d].metadata.name: missing (%s)" % (index, obj.get("kind")))
    return problems


def comparable(obj):
    """The object without what the server rewrites on every write, for comparing a dry
    run's answer with the live object."""
    if obj is None:
        return None
    result = copy.deepcopy(obj)
    result.pop("status", None)
    meta = result.get("metadata") or {}
    for key in BOOKKEEPING_METADATA:
        meta.pop(key, None)
    meta["managedFields"] = sorted(
        (dict((k, v) for k, v in entry.items() if k != "time") for entry in meta.get("managedFields") or ()),
        key=lambda e: (e.get("manager", ""), e.get("operation", ""), e.get("subresource", "")))
    return result


def for_diff(obj):
    """The object as a reviewer wants to see it in ``--diff``: no managedFields, no
    bookkeeping, no status."""
    if obj is None:
        return {}
    result = comparable(obj)
    result["metadata"].pop("managedFields", None)
    return result


def apply_changed(before, after, dry_run):
    if before is None:
        return True
    if not dry_run:
        return (before.get("metadata") or {}).get("resourceVersion") != \
            (after.get("metadata") or {}).get("resourceVersion")
    return comparable(before) != comparable(after)


def _to_dict(instance):
    return instance.to_dict() if hasattr(instance, "to_dict") else instance


def _resource(client, obj):
    try:
        return client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    except ResourceNotFoundError:
        raise ApplyError("%s: the API server does not serve %s %s (is its CRD installed?)"
                         % (describe(obj), obj["apiVersion"], obj["kind"]))


def _namespace(resource, obj):
    namespace = (obj.get("metadata") or {}).get("namespace")
    if resource.namespaced and not namespace:
        raise ApplyError("%s: metadata.namespace is required for a namespaced %s" % (describe(obj), obj["kind"]))
    return namespace if resource.namespaced else None


def read(client, resource, name, namespace):
    try:
        return _to_dict(client.get(resource, name=name, namespace=namespace))
    except NotFoundError:
        return None


def apply_object(client, obj, field_manager=FIELD_MANAGER, force_conflicts=False, dry_run=False):
    """Server-side apply one object. Returns {object, before, after, changed, action}."""
    resource = _resource(client, obj)
    namespace = _namespace(resource, obj)
    name = obj["metadata"]["name"]
    before = read(client, resource, name, namespace)
    try:
        after = _to_dict(client.server_side_apply(
            resource, body=obj, name=name, namespace=namespace, field_manager=field_manager,
            force_conflicts=force_conflicts or None, dry_run="All" if dry_run else None))
    except DynamicApiError as exc:
        raise ApplyError("%s: apply refused: %s" % (describe(obj), _reason(exc)))
    changed = apply_changed(before, after, dry_run)
    action = "created" if before is None else ("updated" if changed else "unchanged")
    return {"object": describe(obj), "before": before, "after": after, "changed": changed, "action": action}


def delete_object(client, obj, dry_run=False):
    """Delete one object (absent already: unchanged). Returns {object, before, after,
    changed, action, target}; ``target`` is what ``wait_deleted`` watches."""
    resource = _resource(client, obj)
    namespace = _namespace(resource, obj)
    name = obj["metadata"]["name"]
    outcome = {"object": describe(obj), "before": None, "after": None, "changed": False, "action": "absent",
               "target": {"api_version": obj["apiVersion"], "plural": resource.name, "name": name,
                          "namespace": namespace}}
    before = read(client, resource, name, namespace)
    if before is None:
        return outcome
    try:
        client.delete(resource, name=name, namespace=namespace, dry_run="All" if dry_run else None)
    except NotFoundError:
        return outcome
    except DynamicApiError as exc:
        raise ApplyError("%s: delete refused: %s" % (describe(obj), _reason(exc)))
    outcome.update(before=before, changed=True, action="deleted")
    return outcome


def wait_deleted(api, targets, timeout):
    """Wait (watch, through the collection's wait engine) until the API server no
    longer has any of ``targets``: their finalizers ran (for a HelmChart: the uninstall
    Job). ApplyError on timeout naming what is left and its finalizers."""
    resources = [k8s_wait.by_name("%d" % index, t["api_version"], t["plural"], t["name"], t["namespace"])
                 for index, t in enumerate(targets)]

    def gone(cache):
        left = [obj for res in resources for obj in k8s_wait.objects(cache, res.key)]
        return not left, left

    try:
        result = k8s_wait.wait_for(api, resources, gone, timeout)
    except k8s_wait.WaitFailed as exc:
        raise ApplyError("waiting for the deletion failed: %s" % exc)
    if not result.done:
        raise ApplyError("still present after %ss: %s" % (timeout, "; ".join(
            "%s/%s (finalizers: %s)" % (o["metadata"].get("namespace") or "-", o["metadata"]["name"],
                                        ", ".join(o["metadata"].get("finalizers") or ()) or "none")
            for o in result.detail)))
    return result


def _reason(exc):
    status = getattr(exc, "status", None)
    summary = getattr(exc, "summary", None)
    text = summary() if callable(summary) else str(exc)
    return "%s (HTTP %s)" % (text, status) if status else text
