"""Small watch-based helpers the integration tests use to wait for the cluster (the
product's own waits are the collection's modules; these only set up and observe)."""

import time

from kubernetes import client, watch


def wait_for(list_fn, predicate, timeout=120, **kwargs):
    """Lists, then watches, until ``predicate(items)`` holds for the current set of
    objects (dicts by name); returns that set. Raises AssertionError on the deadline
    with the last state seen."""
    deadline = time.monotonic() + timeout
    objects = {}
    while True:
        listed = list_fn(**kwargs)
        objects = dict((o.metadata.name, o) for o in listed.items)
        if predicate(objects):
            return objects
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("condition not met in %ss; last state: %s" % (
                timeout, sorted(objects)))
        try:
            for event in watch.Watch().stream(list_fn, resource_version=listed.metadata.resource_version,
                                              timeout_seconds=max(1, int(left)), **kwargs):
                obj = event["object"]
                if event["type"] == "DELETED":
                    objects.pop(obj.metadata.name, None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    objects[obj.metadata.name] = obj
                if predicate(objects):
                    return objects
        except client.ApiException as exc:
            if exc.status != 410:
                raise


def pods_on(objects, node, app=None):
    return [p for p in objects.values() if p.spec.node_name == node
            and (app is None or (p.metadata.labels or {}).get("app") == app)]
