"""A scripted stand-in for the Kubernetes API and for time, behind the adapter interface
of ``module_utils/k8s_wait.py`` (``KubeApi``): lists answer from a world of plain dicts,
watches play scripted streams, time is simulated.

Time only moves when a script says so, when the engine backs off, or when every watch
the engine holds open is idle and the engine waits for a message: then the clock jumps
to the end of that wait, as a quiet cluster would let it pass.

Stream steps (``FakeCluster.script(key, *streams)``, one list of steps per watch call):

- ``("ADDED"|"MODIFIED"|"DELETED", obj)``: change the world and send the event;
- ``("BOOKMARK",)``: a bookmark at the current resourceVersion;
- ``("ERROR", code)``: an ERROR event carrying a Status with that code;
- ``("drop", status)``: the connection breaks (ApiError ``status``, 0 = no response);
- ``("advance", seconds)``: time passes;
- ``("silent", [key,] "MODIFIED"|"ADDED"|"DELETED", obj)``: the world changes unseen (during
  an outage), in this stream's kind or in ``key``;
- ``("wait", gate)`` / ``("open", gate)``: order steps across threads;
- ``("end",)``: the server closes the watch cleanly.

After its last step a stream idles until its timeoutSeconds pass or the engine closes it.
"""
import copy
import queue
import threading
import time

from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_wait import ApiError, object_key


class FakeClock(object):
    """Simulated time. A feeder thread that moves time (a scripted pause, a backoff)
    first waits until the engine has taken in everything sent so far, so each event is
    evaluated at the time it was sent."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.t = 0.0
        self.sleeps = []
        self.consumer_idle = False
        self.messages = queue.Queue()

    def now(self):
        with self.cluster.cond:
            return self.t

    def advance(self, seconds, stopped=lambda: False):
        cond = self.cluster.cond
        with cond:
            if threading.current_thread().name.startswith("k8s-wait:"):
                while not (self.consumer_idle and self.messages.empty()):
                    if stopped():
                        return
                    cond.wait(0.01)
            self.t += seconds
            cond.notify_all()

    def sleep(self, seconds, interrupt):
        self.sleeps.append(seconds)
        if seconds > 0:
            self.advance(seconds, interrupt.is_set)

    def next_message(self, messages, timeout):
        cond = self.cluster.cond
        until = self.now() + timeout
        while True:
            with cond:
                # Taking a message and saying whether one was taken happen together, so
                # a feeder never moves time between the two.
                self.messages = messages
                try:
                    message = messages.get_nowait()
                except queue.Empty:
                    self.consumer_idle = True
                    cond.notify_all()
                else:
                    self.consumer_idle = False
                    return message
                if self.t >= until:
                    raise queue.Empty
            if self.cluster.quiescent() and messages.empty():
                with cond:
                    self.t = max(self.t, until)
                    cond.notify_all()
                raise queue.Empty
            time.sleep(0.0005)


class _Stream(object):
    def __init__(self, cluster, key, steps, ends_at):
        self.cluster = cluster
        self.key = key
        self.steps = list(steps)
        self.ends_at = ends_at
        self.closed = False

    def close(self):
        with self.cluster.cond:
            self.closed = True
            self.cluster.cond.notify_all()

    def __iter__(self):
        cluster = self.cluster
        for step in self.steps:
            if self.closed:
                return
            kind = step[0]
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                yield {"type": kind, "object": cluster.apply(self.key, kind, step[1])}
            elif kind == "BOOKMARK":
                yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(cluster.rv)}}}
            elif kind == "ERROR":
                yield {"type": "ERROR", "object": {"kind": "Status", "code": step[1], "reason": "Expired",
                                                   "message": "too old resource version"}}
            elif kind == "drop":
                raise ApiError(step[1], "connection reset by peer")
            elif kind == "advance":
                cluster.clock.advance(step[1], lambda: self.closed)
            elif kind == "silent":
                cluster.apply(step[1] if len(step) == 4 else self.key, step[-2], step[-1])
            elif kind == "wait":
                cluster.wait_gate(step[1], self)
            elif kind == "open":
                cluster.open_gate(step[1])
            elif kind == "end":
                return
            else:
                raise AssertionError("unknown step %r" % (step,))
        with cluster.cond:
            cluster.idle.add(self.key)
            cluster.cond.notify_all()
            try:
                while not self.closed and cluster.clock.t < self.ends_at:
                    cluster.cond.wait()
            finally:
                cluster.idle.discard(self.key)


class FakeCluster(object):
    """The adapter the engine and the modules talk to, with a simulated clock."""

    def __init__(self, **world):
        self.cond = threading.Condition()
        self.clock = FakeClock(self)
        self.rv = 100
        self.world = {}
        for key, items in world.items():
            self.world[key] = dict((object_key(o), copy.deepcopy(o)) for o in items)
        self.streams = {}
        self.list_failures = {}
        self.watch_failures = {}
        self.list_gates = {}
        self.calls = []
        self.idle = set()
        self.gates = set()
        self.created = []
        self.deleted = []
        self.logs = {}
        self.on_create = None

    # ------------------------------------------------------------ scripting

    def script(self, key, *streams):
        self.streams.setdefault(key, []).extend(list(s) for s in streams)

    def append_steps(self, key, steps):
        """Add steps to the last stream scripted for ``key`` (a new one if none is
        waiting): what several creations cause shows in one watch."""
        streams = self.streams.setdefault(key, [])
        if not streams:
            streams.append([])
        streams[-1].extend(steps)

    def fail_list(self, key, *errors):
        """The next lists of ``key`` fail with these ApiErrors (None: answer normally)."""
        self.list_failures.setdefault(key, []).extend(errors)

    def fail_watch(self, key, *errors):
        self.watch_failures.setdefault(key, []).extend(errors)

    def gate_list(self, key, number, gate):
        """List call ``number`` (1-based) of ``key`` waits for ``gate``; opening
        ``"%s-list-%d" % (key, number)`` tells others that it has begun."""
        self.list_gates[(key, number)] = gate

    def apply(self, key, kind, obj):
        obj = copy.deepcopy(obj)
        with self.cond:
            self.rv += 1
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            items = self.world.setdefault(key, {})
            if kind == "DELETED":
                items.pop(object_key(obj), None)
            else:
                items[object_key(obj)] = obj
            return copy.deepcopy(obj)

    def open_gate(self, gate):
        with self.cond:
            self.gates.add(gate)
            self.cond.notify_all()

    def wait_gate(self, gate, stream=None):
        with self.cond:
            while gate not in self.gates and not (stream is not None and stream.closed):
                self.cond.wait()

    def quiescent(self):
        """Every feeder thread of the engine idles in a watch: nothing will happen
        until time passes."""
        feeders = [t.name.split(":", 1)[1] for t in threading.enumerate()
                   if t.name.startswith("k8s-wait:") and t.is_alive()]
        with self.cond:
            return all(key in self.idle for key in feeders)

    def count(self, verb, key=None):
        return sum(1 for c in self.calls if c[0] == verb and (key is None or c[1] == key))

    # ------------------------------------------------------------ the adapter

    def list(self, res, read_timeout):
        number = self.count("list", res.key) + 1
        self.calls.append(("list", res.key, read_timeout))
        self.open_gate("%s-list-%d" % (res.key, number))
        gate = self.list_gates.get((res.key, number))
        if gate:
            self.wait_gate(gate)
        failures = self.list_failures.get(res.key)
        if failures:
            error = failures.pop(0)
            if error is not None:
                raise error
        with self.cond:
            items = [copy.deepcopy(o) for _k, o in sorted(self.world.get(res.key, {}).items())]
            return items, str(self.rv)

    def watch(self, res, resource_version, timeout_seconds, read_timeout):
        self.calls.append(("watch", res.key, resource_version, timeout_seconds, read_timeout))
        failures = self.watch_failures.get(res.key)
        if failures:
            raise failures.pop(0)
        scripts = self.streams.get(res.key) or []
        steps = scripts.pop(0) if scripts else []
        return _Stream(self, res.key, steps, self.clock.now() + timeout_seconds)

    def get_pod(self, namespace, name):
        obj = self.world.get("pods", {}).get("%s/%s" % (namespace, name))
        return copy.deepcopy(obj) if obj else None

    def create_pod(self, namespace, body):
        # The real client validates a body against its model before sending it.
        from kubernetes import client
        client.V1Pod.from_dict(body)
        self.calls.append(("create", "pods", body["metadata"]["name"]))
        body = copy.deepcopy(body)
        body["metadata"]["namespace"] = namespace
        body.setdefault("metadata", {}).setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        body.setdefault("status", {"phase": "Pending"})
        created = self.apply("pods", "ADDED", body)
        self.created.append(created)
        if self.on_create:
            self.on_create(created)
        return created

    def delete_pod(self, namespace, name):
        self.calls.append(("delete", "pods", name))
        key = "%s/%s" % (namespace, name)
        obj = self.world.get("pods", {}).get(key)
        if obj is None:
            return False
        self.apply("pods", "DELETED", obj)
        self.deleted.append(name)
        return True

    def delete_pods(self, namespace, label_selector):
        """deletecollection of the pods ``label_selector`` (one key=value) selects in ``namespace``."""
        self.calls.append(("deletecollection", "pods", label_selector))
        key, _sep, value = label_selector.partition("=")
        names = []
        for obj in [o for _k, o in sorted(self.world.get("pods", {}).items())]:
            meta = obj.get("metadata") or {}
            if meta.get("namespace") == namespace and (meta.get("labels") or {}).get(key) == value:
                self.apply("pods", "DELETED", obj)
                self.deleted.append(meta["name"])
                names.append(meta["name"])
        return names

    def pod_log(self, namespace, name, container=None, previous=False, limit_bytes=65536):
        self.calls.append(("log", "pods", name, container, previous))
        # A log given for (name, previous) answers that request alone; one given by name, both.
        log = self.logs.get((name, previous), self.logs.get(name))
        if isinstance(log, ApiError):
            raise log
        if log is None:
            raise ApiError(400, "container %s in pod %s is waiting to start" % (container, name))
        return log
