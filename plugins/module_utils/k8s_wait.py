# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Waiting on the Kubernetes watch API: list, then watch from the list's resourceVersion,
keep a local cache of plain dicts, and re-evaluate a pure ``condition(cache)`` after every
change until it holds or one overall deadline passes.

The model is kubernetes.core's ``module_utils/k8s/waiter.py``, with its polling loop
replaced by client-go's reflector pattern, so a wait costs the same few requests however
long it lasts and returns as soon as the condition holds:

- re-list on ``410 Gone`` (an HTTP 410 or an ``ERROR`` event with code 410);
- on a connection error, a 5xx/429 or an API server restart (RKE2 restarts while the GPU
  Operator's toolkit reconfigures containerd): mark the kind stale, back off (capped
  exponential), re-list. A stale kind never lets the condition succeed: only a fresh
  list does;
- every request's timeouts (watch ``timeoutSeconds``, the client's ``_request_timeout``)
  derive from the time left, so the wait ends at its deadline, not later.

I/O goes through a small adapter (``KubeApi`` for the real client, a fake in the unit
tests) that also carries the clock, so the tests drive the engine with scripted streams
(events, 410s, dropped connections) and simulated time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gc
import json
import math
import queue
import socket
import threading
import time
from collections import namedtuple

# Reconnect backoff: an RKE2 restart keeps the API away for 10 to 30 seconds; a 5 s cap
# notices its return within 5 s without hammering it meanwhile.
BACKOFF_INITIAL = 0.5
BACKOFF_MAX = 5.0
# A list answers in milliseconds when the API server is healthy; waiting longer only
# delays the reconnect.
LIST_READ_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
# The client's read timeout on a watch lies past the watch's own timeoutSeconds, so the
# server ends a quiet watch cleanly before the client would give up on it.
WATCH_READ_GRACE = 10.0
# A watch that ends at once without a single event (the server closed it on arrival) is
# treated like an error and backed off, so a misbehaving server is not hammered.
EARLY_END = 1.0

GONE = "gone"
NOT_FOUND = "not-found"
TRANSIENT = "transient"
FATAL = "fatal"
_TRANSIENT_STATUSES = (0, 408, 429, 500, 502, 503, 504)

Resource = namedtuple("Resource", ["key", "api_version", "plural", "namespace", "label_selector",
                                   "field_selector", "optional"])


def resource(key, api_version, plural, namespace=None, label_selector=None, field_selector=None, optional=False):
    """One kind to cache under ``key``: ``api_version`` as in manifests (``v1``,
    ``apps/v1``, ``nvidia.com/v1``), the lower-case ``plural``, an optional namespace and
    selectors. ``optional``: the kind may not be served yet (a CRD the operator installs
    later): a 404 counts as "none of them" and is retried with backoff."""
    return Resource(key, api_version, plural, namespace, label_selector, field_selector, optional)


def by_name(key, api_version, plural, name, namespace=None, optional=False):
    """A Resource for one named object (a field selector on ``metadata.name``)."""
    return resource(key, api_version, plural, namespace, field_selector="metadata.name=" + name, optional=optional)


class ApiError(Exception):
    """An API request failed: ``status`` is the HTTP status, 0 when no response came
    (connection refused or reset, timeout, truncated stream)."""

    def __init__(self, status, message):
        super(ApiError, self).__init__("%s%s" % ("HTTP %s: " % status if status else "", message))
        self.status = status
        self.message = message


class WaitFailed(Exception):
    """The wait cannot go on: a request failed in a way retrying cannot mend (forbidden,
    a kind the server does not serve, an invalid selector)."""


def classify(error):
    status = error.status
    if status == 410:
        return GONE
    if status == 404:
        return NOT_FOUND
    if status in _TRANSIENT_STATUSES:
        return TRANSIENT
    return FATAL


def object_key(obj):
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return "%s/%s" % (namespace, meta.get("name")) if namespace else meta.get("name")


def objects(cache, key):
    """The cached objects of one kind, in name order (cache values are keyed by
    ``namespace/name``)."""
    entries = cache.get(key) or {}
    return [entries[k] for k in sorted(entries)]


def _resource_version(obj):
    return (obj.get("metadata") or {}).get("resourceVersion")


def _backoff(failures, initial, cap):
    if failures <= 0:
        return 0.0
    return min(cap, initial * (2 ** (failures - 1)))


class Clock(object):
    """Real time. The engine reads time, sleeps and waits for messages only through a
    clock, so tests can substitute simulated time."""

    def now(self):
        return time.monotonic()

    def sleep(self, seconds, interrupt):
        """Sleep, returning early when ``interrupt`` (a threading.Event) is set."""
        if seconds > 0:
            interrupt.wait(seconds)

    def next_message(self, messages, timeout):
        """The next message from ``messages``; raises queue.Empty after ``timeout``."""
        return messages.get(timeout=max(0.0, timeout))


WaitResult = namedtuple("WaitResult", [
    "done",  # the condition held (on fresh data) before the deadline
    "detail",  # the condition's last detail; at a timeout, evaluated on the last cache
    "elapsed",  # seconds from the start of the wait to its end
    "api_requests",  # {"list": n, "watch": n, "total": n}
    "reconnects",  # connection errors and server errors ridden through
    "relists",  # successful lists after the first one of each kind (410 Gone, reconnects)
    "stale",  # kinds whose cache was not fresh at the end (a timeout during an outage)
    "cache",  # {key: {namespace/name: object}}
])

# Messages from the per-kind feeders to the evaluating thread.
_SYNCED = "synced"
_EVENT = "event"
_STALE = "stale"
_FATAL = "fatal"


class Waiter(object):
    """Waits until ``condition(cache)`` returns ``(True, detail)`` on fresh data.

    One thread per kind keeps a watch open for the whole wait and feeds a queue; this
    thread applies what comes to the cache and evaluates the condition. Taking turns
    with short watches on each kind instead would add up to one turn of latency to every
    change and one request per turn, so the request count would grow with the wait's
    length; one long watch per kind keeps it at one list and one watch per kind while the
    API server stays up.
    """

    def __init__(self, api, resources, timeout, backoff_initial=BACKOFF_INITIAL, backoff_max=BACKOFF_MAX):
        keys = [r.key for r in resources]
        if len(set(keys)) != len(keys):
            raise ValueError("resource keys must be unique: %s" % ", ".join(keys))
        if timeout is None or timeout < 0:
            raise ValueError("timeout must be zero or more seconds, got %r" % (timeout,))
        self.api = api
        self.clock = api.clock
        self.resources = list(resources)
        self.timeout = float(timeout)
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._lock = threading.Lock()
        self._counts = {"list": 0, "watch": 0, "reconnects": 0, "relists": 0}
        self._listed = set()
        self._messages = queue.Queue()
        self._stopping = threading.Event()
        self._streams = {}
        self._threads = []
        self._start = None
        self._deadline = None

    # ------------------------------------------------------------ requests

    def _count(self, name):
        with self._lock:
            self._counts[name] += 1

    def _remaining(self):
        return self._deadline - self.clock.now()

    def _list(self, res):
        remaining = self._remaining()
        self._count("list")
        result = self.api.list(res, min(LIST_READ_TIMEOUT, max(remaining, 1.0)))
        with self._lock:
            if res.key in self._listed:
                self._counts["relists"] += 1
            self._listed.add(res.key)
        return result

    def _watch(self, res, resource_version):
        remaining = self._remaining()
        self._count("watch")
        timeout_seconds = max(1, int(math.ceil(remaining)))
        return self.api.watch(res, resource_version, timeout_seconds, timeout_seconds + WATCH_READ_GRACE)

    # ------------------------------------------------------------ feeders

    def _put(self, *message):
        self._messages.put(message)

    def _pause(self, failures):
        self.clock.sleep(min(_backoff(failures, self.backoff_initial, self.backoff_max), max(self._remaining(), 0.0)),
                         self._stopping)

    def _feed_or_fail(self, res, resource_version):
        """``_feed``, failing the wait on an error nobody foresaw: a feeder that died
        silently would freeze its kind's cache and leave the wait to run out its deadline."""
        try:
            self._feed(res, resource_version)
        except Exception as exc:  # pylint: disable=broad-except
            self._put(_FATAL, res.key, "%s: %s" % (type(exc).__name__, exc))

    def _feed(self, res, resource_version):
        """List-and-watch one kind until the deadline or until stopped."""
        need_list = resource_version is None
        failures = 0  # consecutive failed or unhealthy requests: the backoff exponent
        while not self._stopping.is_set() and self._remaining() > 0:
            if need_list:
                try:
                    items, resource_version = self._list(res)
                except ApiError as exc:
                    kind = classify(exc)
                    if kind == NOT_FOUND and res.optional:
                        # Not served (yet): none of them. Poll for it with backoff.
                        self._put(_SYNCED, res.key, [])
                    elif kind in (FATAL, NOT_FOUND):
                        self._put(_FATAL, res.key, exc)
                        return
                    else:
                        self._count("reconnects")
                    failures += 1
                    self._pause(failures)
                    continue
                self._put(_SYNCED, res.key, items)
                need_list = False
            resource_version, healthy, error = self._watch_once(res, resource_version)
            if self._stopping.is_set():
                return
            if healthy:
                failures = 0
            if error is None:
                if not healthy:
                    failures += 1
                    self._pause(failures)
                continue
            kind = classify(error)
            if kind == FATAL or (kind == NOT_FOUND and not res.optional):
                self._put(_FATAL, res.key, error)
                return
            # What happened since the last event is unknown: no success on this kind's
            # cache until a fresh list.
            self._put(_STALE, res.key, str(error))
            need_list = True
            if kind == TRANSIENT:
                self._count("reconnects")
            # A first 410 is routine (the watch window moved on): re-list at once.
            # Failures in a row back off, whatever their kind.
            failures += 1
            if kind != GONE or failures > 1:
                self._pause(failures)

    def _watch_once(self, res, resource_version):
        """One watch request: (resource_version, healthy, error or None). Healthy: it
        brought events or lasted; a watch the server closed on arrival did neither."""
        started = self.clock.now()
        events = 0
        error = None
        try:
            stream = self._watch(res, resource_version)
        except ApiError as exc:
            return resource_version, False, exc
        with self._lock:
            self._streams[res.key] = stream
        try:
            if not self._stopping.is_set():
                for event in stream:
                    if self._stopping.is_set():
                        break
                    etype = event.get("type")
                    obj = event.get("object") or {}
                    if etype == "ERROR":
                        raise ApiError(obj.get("code") or 0, obj.get("message") or obj.get("reason") or "watch error")
                    resource_version = _resource_version(obj) or resource_version
                    if etype in ("ADDED", "MODIFIED", "DELETED"):
                        events += 1
                        self._put(_EVENT, res.key, etype, obj)
        except ApiError as exc:
            error = exc
        finally:
            with self._lock:
                self._streams.pop(res.key, None)
            stream.close()
        return resource_version, events > 0 or self.clock.now() - started >= EARLY_END, error

    # ------------------------------------------------------------ evaluation

    @staticmethod
    def _apply(message, cache, synced):
        """Apply one feeder message; True when the cache changed."""
        kind, key = message[0], message[1]
        if kind == _SYNCED:
            cache[key] = dict((object_key(o), o) for o in message[2])
            synced[key] = True
            return True
        if kind == _EVENT:
            etype, obj = message[2], message[3]
            if etype == "DELETED":
                cache[key].pop(object_key(obj), None)
            else:
                cache[key][object_key(obj)] = obj
            return True
        if kind == _STALE:
            synced[key] = False
            return False
        raise WaitFailed("watching %s failed: %s" % (key, message[2]))

    def _result(self, done, detail, cache, synced, ended=None):
        with self._lock:
            counts = dict(self._counts)
        return WaitResult(
            done=done,
            detail=detail,
            elapsed=round((self.clock.now() if ended is None else ended) - self._start, 3),
            api_requests={"list": counts["list"], "watch": counts["watch"], "total": counts["list"] + counts["watch"]},
            reconnects=counts["reconnects"],
            relists=counts["relists"],
            stale=sorted(k for k, fresh in synced.items() if not fresh),
            cache=cache,
        )

    def wait(self, condition, progress=None):
        """Wait for ``condition(cache) -> (done, detail)``; ``progress(detail, elapsed)``
        is told every evaluation. Returns a WaitResult; raises WaitFailed on an error
        retrying cannot mend. A Waiter waits once."""
        if self._start is not None:
            raise RuntimeError("a Waiter waits once: make a new one")
        self._start = self.clock.now()
        self._deadline = self._start + self.timeout
        cache = dict((r.key, {}) for r in self.resources)
        synced = dict((r.key, False) for r in self.resources)

        def evaluate():
            done, detail = condition(cache)
            if progress is not None:
                progress(detail, self.clock.now() - self._start)
            return bool(done), detail

        # The first lists run here, one after the other: a condition that already holds
        # returns without a single watch or thread.
        versions = {}
        for res in self.resources:
            try:
                items, versions[res.key] = self._list(res)
            except ApiError as exc:
                kind = classify(exc)
                if kind == NOT_FOUND and res.optional:
                    items, versions[res.key] = [], None
                elif kind in (FATAL, NOT_FOUND):
                    raise WaitFailed("listing %s failed: %s" % (res.key, exc)) from exc
                else:
                    # The feeder lists again, with backoff.
                    self._count("reconnects")
                    versions[res.key] = None
                    continue
            self._apply((_SYNCED, res.key, items), cache, synced)
        detail = None
        if all(synced.values()):
            done, detail = evaluate()
            if done:
                return self._result(True, detail, cache, synced)

        for res in self.resources if self._remaining() > 0 else ():
            thread = threading.Thread(target=self._feed_or_fail, args=(res, versions[res.key]), name="k8s-wait:" + res.key)
            thread.daemon = True
            self._threads.append(thread)
            thread.start()
        done = False
        ended = None
        try:
            while not done:
                remaining = self._remaining()
                if remaining <= 0:
                    ended = self._deadline
                    break
                try:
                    message = self.clock.next_message(self._messages, remaining)
                except queue.Empty:
                    continue
                changed = self._apply(message, cache, synced)
                # Apply what else has arrived before evaluating: a burst of events costs
                # one evaluation.
                while True:
                    try:
                        message = self._messages.get_nowait()
                    except queue.Empty:
                        break
                    changed = self._apply(message, cache, synced) or changed
                if changed and all(synced.values()):
                    done, detail = evaluate()
                    ended = self.clock.now()
        finally:
            self._stop()
        if not done:
            # The detail of a timeout: the last state known, stale kinds named in the result.
            detail = condition(cache)[1]
        return self._result(done, detail, cache, synced, ended)

    def _stop(self):
        self._stopping.set()
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.close()
        for thread in self._threads:
            # Daemon threads: one stuck in a dead socket past this does not hold the
            # module's exit.
            thread.join(2.0)


def wait_for(api, resources, condition, timeout, progress=None):
    """Shorthand: ``Waiter(api, resources, timeout).wait(condition, progress)``."""
    return Waiter(api, resources, timeout).wait(condition, progress)


# ---------------------------------------------------------------- the real client

def _api_error(exc):
    """An ApiError from what the kubernetes client or urllib3 raised."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        message = getattr(exc, "reason", None) or str(exc)
        body = getattr(exc, "body", None)
        if body:
            try:
                message = json.loads(body).get("message") or message
            except (ValueError, TypeError, AttributeError):
                pass
        return ApiError(status, message)
    return ApiError(0, "%s: %s" % (type(exc).__name__, exc))


class _WatchStream(object):
    """The events of one watch response, JSON-decoded from its lines (camelCase keys, no
    model objects)."""

    def __init__(self, response, errors):
        self._response = response
        self._errors = errors
        self._closed = False

    def __iter__(self):
        buffer = b""
        try:
            for chunk in self._response.stream(amt=None, decode_content=False):
                buffer += chunk if isinstance(chunk, bytes) else chunk.encode("utf-8")
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line.decode("utf-8"))
        except self._errors as exc:
            if not self._closed:
                raise _api_error(exc) from exc
        except ValueError as exc:
            if not self._closed:
                raise ApiError(0, "undecodable watch event: %s" % exc) from exc

    def close(self):
        if self._closed:
            return
        self._closed = True
        # Unblock a thread reading this response: closing alone waits for the read.
        shutdown = getattr(self._response, "shutdown", None)
        try:
            if shutdown is not None:
                shutdown()
            else:
                sock = getattr(getattr(self._response, "connection", None), "sock", None)
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError, RuntimeError, ValueError):
            # urllib3 refuses once the response is read and its connection back in the pool
            # (RuntimeError), or once a broken connection closed it (ValueError: an API
            # server restart ends every watch that way).
            pass
        try:
            self._response.release_conn()
        except (OSError, AttributeError):
            pass


# The core (v1) kinds by plural: the singular in CoreV1Api's method names, namespaced.
_CORE_KINDS = {
    "nodes": ("node", False), "namespaces": ("namespace", False), "persistentvolumes": ("persistent_volume", False),
    "pods": ("pod", True), "configmaps": ("config_map", True), "secrets": ("secret", True),
    "services": ("service", True), "serviceaccounts": ("service_account", True), "endpoints": ("endpoints", True),
    "events": ("event", True), "persistentvolumeclaims": ("persistent_volume_claim", True),
    "limitranges": ("limit_range", True), "resourcequotas": ("resource_quota", True),
    "replicationcontrollers": ("replication_controller", True), "podtemplates": ("pod_template", True),
}


class KubeApi(object):
    """The engine's adapter over the official ``kubernetes`` client. Requests use
    ``_preload_content=False`` and decode the JSON themselves: plain dicts with the
    API's camelCase keys, and no model deserialization on every watch event."""

    def __init__(self, api_client, clock=None):
        from kubernetes import client
        from kubernetes.client.rest import ApiException
        import urllib3
        import http.client

        self.clock = clock or Clock()
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._errors = (ApiException, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)

    def _call(self, function, *args, **kwargs):
        try:
            return function(*args, **kwargs)
        except self._errors as exc:
            raise _api_error(exc) from exc

    def _list_function(self, res):
        group, _sep, version = res.api_version.rpartition("/")
        if not group:
            if res.plural not in _CORE_KINDS:
                raise ValueError("KubeApi does not know the core kind %r (known: %s)"
                                 % (res.plural, ", ".join(sorted(_CORE_KINDS))))
            singular, namespaced = _CORE_KINDS[res.plural]
            if not namespaced:
                return getattr(self.core, "list_" + singular), ()
            if res.namespace:
                return getattr(self.core, "list_namespaced_" + singular), (res.namespace,)
            return getattr(self.core, "list_%s_for_all_namespaces" % singular), ()
        # CustomObjectsApi serves any group's kinds as plain objects, apps and batch too.
        if res.namespace:
            return self.custom.list_namespaced_custom_object, (group, version, res.namespace, res.plural)
        return self.custom.list_cluster_custom_object, (group, version, res.plural)

    @staticmethod
    def _selectors(res):
        kwargs = {}
        if res.label_selector:
            kwargs["label_selector"] = res.label_selector
        if res.field_selector:
            kwargs["field_selector"] = res.field_selector
        return kwargs

    def list(self, res, read_timeout):
        function, args = self._list_function(res)
        response = self._call(function, *args, _preload_content=False,
                              _request_timeout=(min(CONNECT_TIMEOUT, read_timeout), read_timeout), **self._selectors(res))
        try:
            body = json.loads(response.data)
        except (ValueError, TypeError) as exc:
            raise ApiError(0, "undecodable list of %s: %s" % (res.plural, exc)) from exc
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion")

    def watch(self, res, resource_version, timeout_seconds, read_timeout):
        function, args = self._list_function(res)
        kwargs = self._selectors(res)
        if resource_version:
            kwargs["resource_version"] = resource_version
        response = self._call(function, *args, watch=True, allow_watch_bookmarks=True, timeout_seconds=int(timeout_seconds),
                              _preload_content=False, _request_timeout=(min(CONNECT_TIMEOUT, read_timeout), read_timeout),
                              **kwargs)
        return _WatchStream(response, self._errors)

    # Single requests the modules make around a wait (a CUDA sample's pods, a Job's log).

    def get_pod(self, namespace, name):
        """The pod as a dict, or None when there is none."""
        try:
            response = self._call(self.core.read_namespaced_pod, name, namespace, _preload_content=False,
                                  _request_timeout=(CONNECT_TIMEOUT, LIST_READ_TIMEOUT))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return json.loads(response.data)

    def create_pod(self, namespace, body):
        response = self._call(self.core.create_namespaced_pod, namespace, body, _preload_content=False,
                              _request_timeout=(CONNECT_TIMEOUT, LIST_READ_TIMEOUT))
        return json.loads(response.data)

    def delete_pod(self, namespace, name):
        """Delete a pod now; True when it was there."""
        try:
            self._call(self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0,
                       propagation_policy="Background", _preload_content=False,
                       _request_timeout=(CONNECT_TIMEOUT, LIST_READ_TIMEOUT))
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def pod_log(self, namespace, name, container=None, previous=False, limit_bytes=65536):
        kwargs = {"limit_bytes": limit_bytes}
        if container:
            kwargs["container"] = container
        if previous:
            kwargs["previous"] = True
        response = self._call(self.core.read_namespaced_pod_log, name, namespace, _preload_content=False,
                              _request_timeout=(CONNECT_TIMEOUT, LIST_READ_TIMEOUT), **kwargs)
        return response.data.decode("utf-8", "replace")


def run_checked(module, check_params, action, describe):
    """The frame of every wait module: reject bad options before connecting, connect,
    ``action(api)``; fail with a message naming the option, or ``describe`` and the
    error retrying could not mend. Returns (api, what ``action`` returned)."""
    problem = check_params(module.params)
    if problem:
        module.fail_json(msg=problem)
    try:
        api = connect(module.params)
        result = action(api)
        # What is left is reporting and the interpreter's exit, whose garbage collections
        # walk the kubernetes client's ~100,000 objects: 0.1 to 0.5 s each on a busy host,
        # more than the wait took to notice the change. Frozen objects are left out of them.
        gc.freeze()
        return api, result
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    except (WaitFailed, ApiError) as exc:
        module.fail_json(msg="%s: %s" % (describe, exc))
    return None, None  # not reached: fail_json exits


def connect(params):
    """The adapter for a module's connection options (``k8s_connection``). Modules call
    it through this module so that unit tests can substitute a fake cluster."""
    from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import api_client

    return KubeApi(api_client(params))
