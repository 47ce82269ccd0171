"""Small watch-based helpers the integration tests use to wait for the cluster (the
product's own waits are the collection's modules; these only set up and observe)."""

import threading
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


class Recorder(object):
    """Every event of one watch, in order, from a background thread, until stopped. A watch
    connection that ends or breaks is resumed from the last resourceVersion seen, as
    client-go's reflector does, so no event is lost; one the server can no longer resume
    from (410 Gone) leaves a gap in the record, and ``stop`` raises then."""

    def __init__(self, list_fn, **kwargs):
        self.events = []
        self.stopped = False
        self.gap = None
        self.resumed = 0
        self._watch = watch.Watch()
        listed = list_fn(**kwargs)
        self.initial = list(listed.items)
        self._thread = threading.Thread(target=self._run, args=(list_fn, listed.metadata.resource_version, kwargs),
                                        daemon=True)
        self._thread.start()

    def _run(self, list_fn, version, kwargs):
        while not self.stopped:
            try:
                for event in self._watch.stream(list_fn, resource_version=version, **kwargs):
                    if event["type"] == "ERROR":
                        self.gap = "ERROR event: %s" % (event.get("raw_object") or event.get("object"))
                        return
                    version = event["object"].metadata.resource_version
                    self.events.append((event["type"], event["object"]))
            except client.ApiException as exc:
                self.gap = "watch refused: %s %s" % (exc.status, exc.reason)
                return
            except Exception:  # pylint: disable=broad-except  # a broken connection: resume it
                time.sleep(0.2)
            self.resumed += 1

    def stop(self):
        """Stops recording (the thread ends at its next event or when the lab goes down)."""
        self.stopped = True
        self._watch.stop()
        if self.gap:
            raise AssertionError("the record has a gap: %s" % self.gap)
