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
- a watch that brings no byte for ``WATCH_IDLE_TIMEOUT`` is dead (a half-open connection:
  the API server's host lost, a load balancer or NAT that dropped the flow): the server
  sends a bookmark on every watch about once a minute, so silence past that marks the kind
  stale and it is re-listed. Each watch is renewed after 5 to 10 minutes, as client-go's
  reflector does;
- a success seen on watched data is confirmed by one fresh, consistent list of every kind
  before it is returned: a watch can be silently behind, a list cannot;
- one deadline: every request's timeouts (watch ``timeoutSeconds``, connect and read)
  derive from the time left, urllib3 retries nothing, the calls a module makes after the
  wait share the deadline (plus ``AFTER_DEADLINE_GRACE``), and ``elapsed`` is measured;
- TLS verification and authentication failures end the wait at once with their own
  message: retrying does not mend a wrong CA or an expired certificate.

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
import random
import socket
import ssl
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
# kube-apiserver sends a BOOKMARK on every watch that asked for them roughly every minute
# and 2 s before the watch's timeoutSeconds (k8s.io/apiserver pkg/storage/cacher,
# cacheWatcher.nextBookmarkTime; measured in the lab: 60.7 s on a quiet kind). A watch
# silent for longer than this is not quiet but dead: the read times out, the kind turns
# stale and is re-listed. TCP keep-alive alone cannot tell: whatever stalls the flow in
# between (a proxy, a load balancer) still answers the probes.
WATCH_IDLE_TIMEOUT = 70.0
# Watches are renewed after a random 5 to 10 minutes, client-go's reflector's
# [minWatchTimeout, 2 * minWatchTimeout]: no single watch lives on for the whole wait.
WATCH_RENEW_MIN = 300.0
# Calls a module makes after its wait (diagnosis, logs, deleting its pods) share the wait's
# deadline and may overrun it by this much in all, no more.
AFTER_DEADLINE_GRACE = 1.5
# Stopping the feeders: their streams are shut down, so they end at once; one blocked in
# a list is a daemon thread and is not waited for longer than this, all together.
STOP_GRACE = 0.2
# A watch that ends at once without a single event (the server closed it on arrival) is
# treated like an error and backed off, so a misbehaving server is not hammered.
EARLY_END = 1.0

GONE = "gone"
NOT_FOUND = "not-found"
TRANSIENT = "transient"
FATAL = "fatal"
_TRANSIENT_STATUSES = (0, 408, 429, 500, 502, 503, 504)

Resource = namedtuple("Resource", ["key", "api_version", "plural", "namespace", "label_selector",
                                   "field_selector", "optional", "read_spec"])


def resource(key, api_version, plural, namespace=None, label_selector=None, field_selector=None, optional=False,
             read_spec=False):
    """One kind to cache under ``key``: ``api_version`` as in manifests (``v1``,
    ``apps/v1``, ``nvidia.com/v1``), the lower-case ``plural``, an optional namespace and
    selectors. ``optional``: the kind may not be served yet (a CRD the operator installs
    later): a 404 counts as "none of them" and is retried with backoff. ``read_spec``
    (pods): keep of each pod's spec only what the operand checks read (POD_SPEC_READ)."""
    return Resource(key, api_version, plural, namespace, label_selector, field_selector, optional, read_spec)


def operand_pods(namespace):
    """The GPU Operator's pods in ``namespace`` (cached under ``pods``), as the waits and the
    check read them: a thousand GPU nodes run some 8,000 of them, and their specs are most
    of their size."""
    return resource("pods", "v1", "pods", namespace=namespace, read_spec=True)


def by_name(key, api_version, plural, name, namespace=None, optional=False):
    """A Resource for one named object (a field selector on ``metadata.name``)."""
    return resource(key, api_version, plural, namespace, field_selector="metadata.name=" + name, optional=optional)


class ApiError(Exception):
    """An API request failed: ``status`` is the HTTP status, 0 when no response came
    (connection refused or reset, timeout, truncated stream). ``fatal``: retrying cannot
    mend it although no status came (TLS verification or a refused client certificate)."""

    def __init__(self, status, message, fatal=False):
        super(ApiError, self).__init__("%s%s" % ("HTTP %s: " % status if status else "", message))
        self.status = status
        self.message = message
        self.fatal = fatal


class WaitFailed(Exception):
    """The wait cannot go on: a request failed in a way retrying cannot mend (forbidden,
    a kind the server does not serve, an invalid selector)."""


def classify(error):
    if getattr(error, "fatal", False):
        return FATAL
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


def _versions(entries):
    """{namespace/name: resourceVersion} of one kind's cache entries: equal exactly when
    the cache holds the same objects at the same versions (compared, never ordered:
    resourceVersions are opaque)."""
    return dict((k, _resource_version(o)) for k, o in entries.items())


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
        # A kind the evaluating thread re-listed itself (confirming a success) restarts its
        # watch from that list: key -> (epoch, resourceVersion). Messages carry the epoch
        # they were made in; older ones describe a past the list has replaced.
        self._resync = {}
        self._epochs = dict((r.key, 0) for r in self.resources)
        # Kinds listed at least once in this wait: an optional kind that answered before
        # and answers 404 now is not gone but not loaded yet (a restarted API server
        # serves a CRD's kind only once it has read the CRD again): stale, not "none".
        self._served = set()

    # ------------------------------------------------------------ requests

    def _count(self, name):
        with self._lock:
            self._counts[name] += 1

    def _remaining(self):
        return self._deadline - self.clock.now()

    def _list(self, res, relist=True, first=False):
        remaining = self._remaining()
        if remaining <= 0 and not first:
            raise ApiError(0, "the deadline passed")
        self._count("list")
        # The first lists are made whatever the time left, so a zero timeout still checks
        # once; the module's deadline still bounds them (KubeApi).
        result = self.api.list(res, min(LIST_READ_TIMEOUT, max(remaining, 1.0) if first else remaining))
        with self._lock:
            self._served.add(res.key)
        if relist:
            with self._lock:
                if res.key in self._listed:
                    self._counts["relists"] += 1
                self._listed.add(res.key)
        return result

    def _watch(self, res, resource_version):
        remaining = self._remaining()
        self._count("watch")
        renew = WATCH_RENEW_MIN * (1.0 + random.random())
        timeout_seconds = max(1, int(math.ceil(min(remaining, renew))))
        return self.api.watch(res, resource_version, timeout_seconds, WATCH_IDLE_TIMEOUT)

    # ------------------------------------------------------------ feeders

    def _put(self, kind, key, epoch, *rest):
        self._messages.put((kind, key, epoch) + rest)

    def _epoch_of(self, key):
        with self._lock:
            return self._epochs[key]

    def _never_served(self, res):
        with self._lock:
            return res.optional and res.key not in self._served

    def _take_resync(self, key):
        """(epoch, resourceVersion or None to list again) of a restart the evaluating
        thread asked for, or None."""
        with self._lock:
            if key not in self._resync:
                return None
            return self._epochs[key], self._resync.pop(key)

    def _pause(self, failures):
        self.clock.sleep(min(_backoff(failures, self.backoff_initial, self.backoff_max), max(self._remaining(), 0.0)),
                         self._stopping)

    def _feed_or_fail(self, res, resource_version):
        """``_feed``, failing the wait on an error nobody foresaw: a feeder that died
        silently would freeze its kind's cache and leave the wait to run out its deadline."""
        try:
            self._feed(res, resource_version)
        except Exception as exc:  # pylint: disable=broad-except
            self._put(_FATAL, res.key, None, "%s: %s" % (type(exc).__name__, exc))

    def _feed(self, res, resource_version):
        """List-and-watch one kind until the deadline or until stopped."""
        need_list = resource_version is None
        failures = 0  # consecutive failed or unhealthy requests: the backoff exponent
        epoch = self._epoch_of(res.key)
        while not self._stopping.is_set() and self._remaining() > 0:
            resync = self._take_resync(res.key)
            if resync is not None:
                # The evaluating thread listed this kind afresh: watch on from that list
                # (or list again, when its list failed).
                epoch, resource_version = resync
                need_list, failures = resource_version is None, 0
            if need_list:
                try:
                    items, resource_version = self._list(res)
                except ApiError as exc:
                    kind = classify(exc)
                    if kind == NOT_FOUND and self._never_served(res):
                        # Not served (yet): none of them. Poll for it with backoff.
                        self._put(_SYNCED, res.key, epoch, [])
                    elif kind == NOT_FOUND and res.optional:
                        self._count("reconnects")
                    elif kind in (FATAL, NOT_FOUND):
                        self._put(_FATAL, res.key, epoch, exc)
                        return
                    else:
                        self._count("reconnects")
                    failures += 1
                    self._pause(failures)
                    continue
                self._put(_SYNCED, res.key, epoch, items)
                need_list = False
            resource_version, healthy, error = self._watch_once(res, resource_version, epoch)
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
                self._put(_FATAL, res.key, epoch, error)
                return
            # What happened since the last event is unknown: no success on this kind's
            # cache until a fresh list.
            self._put(_STALE, res.key, epoch, str(error))
            need_list = True
            if kind == TRANSIENT:
                self._count("reconnects")
            # A first 410 is routine (the watch window moved on): re-list at once.
            # Failures in a row back off, whatever their kind.
            failures += 1
            if kind != GONE or failures > 1:
                self._pause(failures)

    def _watch_once(self, res, resource_version, epoch):
        """One watch request: (resource_version, healthy, error or None). Healthy: it
        brought events or lasted; a watch the server closed on arrival did neither."""
        started = self.clock.now()
        events = 0
        error = None
        with self._lock:
            if self._stopping.is_set() or res.key in self._resync:
                return resource_version, True, None
        try:
            stream = self._watch(res, resource_version)
        except ApiError as exc:
            return resource_version, False, exc
        with self._lock:
            # Registered and checked together: a stop or a resync that came while the
            # watch was being opened closes it here, as _stop or _confirm would have.
            abandoned = self._stopping.is_set() or res.key in self._resync
            if not abandoned:
                self._streams[res.key] = stream
        if abandoned:
            stream.close()
            return resource_version, True, None
        try:
            for event in stream:
                if self._stopping.is_set() or res.key in self._resync:
                    break
                etype = event.get("type")
                obj = event.get("object") or {}
                if etype == "ERROR":
                    raise ApiError(obj.get("code") or 0, obj.get("message") or obj.get("reason") or "watch error")
                resource_version = _resource_version(obj) or resource_version
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    events += 1
                    self._put(_EVENT, res.key, epoch, etype, obj)
        except ApiError as exc:
            error = exc
        finally:
            with self._lock:
                if self._streams.get(res.key) is stream:
                    del self._streams[res.key]
            stream.close()
        with self._lock:
            if res.key in self._resync:
                # Closed by _confirm: not an outage.
                return resource_version, True, None
        return resource_version, events > 0 or self.clock.now() - started >= EARLY_END, error

    # ------------------------------------------------------------ evaluation

    def _apply(self, message, cache, synced):
        """Apply one feeder message; True when the cache changed."""
        kind, key, epoch = message[0], message[1], message[2]
        message = (kind, key) + message[3:]
        if kind != _FATAL and epoch != self._epoch_of(key):
            # Sent before the evaluating thread re-listed the kind: the list is newer.
            return False
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

    def _result(self, done, detail, cache, synced):
        with self._lock:
            counts = dict(self._counts)
        return WaitResult(
            done=done,
            detail=detail,
            # Measured, whatever the deadline said: an overrun shows.
            elapsed=round(self.clock.now() - self._start, 3),
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
        module_deadline = getattr(self.api, "deadline", None)
        if module_deadline is not None:
            # The module's one deadline: time already spent before the wait counts.
            self._deadline = min(self._deadline, module_deadline)
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
                items, versions[res.key] = self._list(res, first=True)
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
            self._apply((_SYNCED, res.key, 0, items), cache, synced)
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
        try:
            while not done:
                remaining = self._remaining()
                if remaining <= 0:
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
                    if done:
                        done, detail = self._confirm(evaluate, cache, synced, detail)
        finally:
            self._stop()
        if not done:
            # The detail of a timeout: the last state known, stale kinds named in the result.
            detail = condition(cache)[1]
        return self._result(done, detail, cache, synced)

    def _confirm(self, evaluate, cache, synced, detail):
        """A success seen on watched data, checked on one fresh list of every kind: a
        watch that is silently behind (its connection stalled, nothing raised yet) cannot
        fake it. A kind whose list differs takes the list and its feeder watches on from
        there; the condition is evaluated on the lists. (done, detail)."""
        behind = False
        for res in self.resources:
            try:
                items, resource_version = self._list(res, relist=False)
            except ApiError as exc:
                kind = classify(exc)
                if kind == FATAL or (kind == NOT_FOUND and not res.optional):
                    raise WaitFailed("listing %s failed: %s" % (res.key, exc)) from exc
                if kind == NOT_FOUND and self._never_served(res):
                    items, resource_version = [], None
                else:
                    # Not confirmed: the kind's feeder lists again, with its backoff.
                    self._restart(res.key, None)
                    synced[res.key] = False
                    return False, detail
            listed = dict((object_key(o), o) for o in items)
            if _versions(listed) != _versions(cache[res.key]):
                cache[res.key] = listed
                self._restart(res.key, resource_version)
                behind = True
        # Every list as cached: the success stands as evaluated.
        return evaluate() if behind else (True, detail)

    def _restart(self, key, resource_version):
        """Make ``key``'s feeder drop what it has not sent yet and watch from
        ``resource_version`` (None: list again)."""
        with self._lock:
            self._epochs[key] += 1
            self._resync[key] = resource_version
            stream = self._streams.get(key)
        if stream is not None:
            stream.close()

    def _stop(self):
        with self._lock:
            # Under the lock: a feeder registering a new watch sees the flag, or its
            # stream is in the list closed here.
            self._stopping.set()
            streams = list(self._streams.values())
        for stream in streams:
            stream.close()
        until = time.monotonic() + STOP_GRACE
        for thread in self._threads:
            # Daemon threads: one stuck in a list past this does not hold the module's
            # exit, nor its deadline. (Real time: this waits for real threads.)
            thread.join(max(until - time.monotonic(), 0.0))


def wait_for(api, resources, condition, timeout, progress=None):
    """Shorthand: ``Waiter(api, resources, timeout).wait(condition, progress)``."""
    return Waiter(api, resources, timeout).wait(condition, progress)


# ---------------------------------------------------------------- the real client

# OpenSSL's names for the alerts a server sends when it refuses the client's certificate
# (expired, signed by a CA it does not trust, missing).
_CLIENT_CERTIFICATE_ALERTS = ("ALERT_BAD_CERTIFICATE", "ALERT_CERTIFICATE_EXPIRED", "ALERT_CERTIFICATE_REQUIRED",
                              "ALERT_CERTIFICATE_UNKNOWN", "ALERT_UNKNOWN_CA", "ALERT_CERTIFICATE_REVOKED",
                              "ALERT_UNSUPPORTED_CERTIFICATE", "ALERT_ACCESS_DENIED")


def _causes(exc):
    """``exc`` and what it wraps: urllib3 keeps the cause in ``reason`` and ``args``."""
    seen, todo = [], [exc]
    while todo:
        current = todo.pop(0)
        if not isinstance(current, BaseException) or any(current is s for s in seen) or len(seen) > 10:
            continue
        seen.append(current)
        todo.extend([getattr(current, "reason", None), current.__cause__, current.__context__])
        todo.extend(a for a in getattr(current, "args", ()) if isinstance(a, BaseException))
    return seen


def _tls_refusal(exc):
    """What a TLS failure that retrying cannot mend says, or None (a connection cut in
    the middle of a TLS record is an SSLError too, and transient)."""
    for cause in _causes(exc):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return ("TLS: the API server's certificate is not trusted (%s): check the kubeconfig's "
                    "certificate-authority or ca_cert" % (getattr(cause, "verify_message", None) or cause))
        text = str(cause)
        if isinstance(cause, ssl.SSLError) and any(a in text for a in _CLIENT_CERTIFICATE_ALERTS):
            return "TLS: the API server refused the client certificate (%s): renew it or fix the kubeconfig" % text
    return None


def _api_error(exc):
    """An ApiError from what the kubernetes client or urllib3 raised."""
    status = getattr(exc, "status", None)
    if not status:
        # The kubernetes client turns urllib3's SSLError into an ApiException of status 0
        # whose reason is the text: the cause is in the chain.
        refusal = _tls_refusal(exc)
        if refusal:
            return ApiError(0, refusal, fatal=True)
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


# The kinds whose managedFields a wait reads (helmchart_wait: when the chart's spec last
# changed). Every other kind's are dropped while the JSON is decoded: they are half of what a
# pod's object takes in memory, and a thousand GPU nodes' operand pods would otherwise keep a
# wait module near 500 MB.
KEEP_MANAGED_FIELDS = ("helmcharts",)


def without_managed_fields(obj):
    """json object_hook: an object's metadata without its managedFields."""
    if "managedFields" in obj and "name" in obj:
        del obj["managedFields"]
    return obj


# What the waits, the check and the report read of an operand pod's spec (k8s_objects.POD
# declares it): its node, how it was placed there, its containers' names and images (and
# resources, for GPU_WORKLOAD_POD's readers). Volumes, env, mounts, probes and security
# contexts are most of a pod: the driver's pod decodes to about 51 KB, 16 KB without them.
POD_SPEC_READ = ("nodeName", "affinity", "tolerations", "nodeSelector", "containers", "initContainers")
CONTAINER_READ = ("name", "image", "resources")


def with_pod_spec_read(obj):
    """json object_hook for pods: a pod's spec (the one mapping in a pod with a list of
    ``containers``) with only the POD_SPEC_READ fields, its containers with CONTAINER_READ;
    managedFields dropped as by without_managed_fields. Anything of another shape is left
    as it is, for k8s_objects.read to refuse."""
    if isinstance(obj.get("containers"), list):
        spec = dict((key, obj[key]) for key in POD_SPEC_READ if key in obj)
        for key in ("containers", "initContainers"):
            items = spec.get(key)
            if isinstance(items, list):
                spec[key] = [dict((field, item[field]) for field in CONTAINER_READ if field in item)
                             if isinstance(item, dict) else item for item in items]
        return spec
    return without_managed_fields(obj)


def _decode_hook(res):
    if res.plural in KEEP_MANAGED_FIELDS:
        return None
    return with_pod_spec_read if res.read_spec else without_managed_fields


class _WatchStream(object):
    """The events of one watch response, JSON-decoded from its lines (camelCase keys, no
    model objects); ``object_hook`` as json.loads takes it."""

    def __init__(self, response, errors, object_hook=None):
        self._response = response
        self._errors = errors
        self._closed = False
        self._object_hook = object_hook

    def _chunks(self):
        """The body as it arrives. A chunked body (what kube-apiserver sends) comes chunk
        by chunk; one a proxy passed on unchunked, as it can read it: read(None) would
        wait for the end of the watch before giving a single event."""
        if getattr(self._response, "chunked", True):
            yield from self._response.stream(amt=None, decode_content=False)
            return
        while True:
            chunk = self._response.read1(65536, decode_content=False)
            if not chunk:
                return
            yield chunk

    def __iter__(self):
        buffer = b""
        try:
            for chunk in self._chunks():
                buffer += chunk if isinstance(chunk, bytes) else chunk.encode("utf-8")
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line.decode("utf-8"), object_hook=self._object_hook)
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
        # The module's one deadline (clock time), set by run_checked: every request ends
        # by it plus AFTER_DEADLINE_GRACE. None: no deadline beyond each call's own.
        self.deadline = None
        self.started = self.clock.now()

    def _timeouts(self, read_timeout):
        """(connect, read) timeouts: the call's own, cut to the time left."""
        if self.deadline is not None:
            left = self.deadline + AFTER_DEADLINE_GRACE - self.clock.now()
            if left <= 0:
                raise ApiError(0, "not sent: the deadline passed")
            read_timeout = min(read_timeout, left)
        return (min(CONNECT_TIMEOUT, read_timeout), read_timeout)

    def _call(self, function, *args, **kwargs):
        """The call's response, its body read (JSON-decoded unless ``_raw``) inside the
        error translation: a body that breaks in the middle is an ApiError like any
        other broken connection, never a raw urllib3 error."""
        raw = kwargs.pop("_raw", False)
        object_hook = kwargs.pop("_object_hook", None)
        read_timeout = kwargs.pop("_read_timeout", LIST_READ_TIMEOUT)
        kwargs["_request_timeout"] = self._timeouts(read_timeout)
        kwargs["_preload_content"] = False
        try:
            response = function(*args, **kwargs)
            data = self._read(response)
            response.release_conn()
        except self._errors as exc:
            raise _api_error(exc) from exc
        if raw:
            return data
        try:
            return json.loads(data, object_hook=object_hook)
        except (ValueError, TypeError) as exc:
            raise ApiError(0, "undecodable response: %s" % exc) from exc

    def _read(self, response):
        """The whole body, by the deadline: the read timeout bounds each wait for bytes,
        not a body that an overloaded API server sends slowly."""
        chunks = []
        while True:
            if self.deadline is not None and self.clock.now() > self.deadline + AFTER_DEADLINE_GRACE:
                response.close()
                raise ApiError(0, "the deadline passed while the response was read")
            chunk = response.read(65536, decode_content=False)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    def _open(self, function, *args, **kwargs):
        """A streaming call's response, headers read, body not."""
        read_timeout = kwargs.pop("_read_timeout")
        kwargs["_request_timeout"] = self._timeouts(read_timeout)
        try:
            return function(*args, _preload_content=False, **kwargs)
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
        body = self._call(function, *args, _read_timeout=read_timeout, _object_hook=_decode_hook(res),
                          **self._selectors(res))
        if not isinstance(body, dict):
            raise ApiError(0, "undecodable list of %s: not an object" % res.plural)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion")

    def watch(self, res, resource_version, timeout_seconds, read_timeout):
        """``read_timeout``: the longest silence between two bytes of the stream."""
        function, args = self._list_function(res)
        kwargs = self._selectors(res)
        if resource_version:
            kwargs["resource_version"] = resource_version
        response = self._open(function, *args, watch=True, allow_watch_bookmarks=True,
                              timeout_seconds=int(timeout_seconds), _read_timeout=read_timeout, **kwargs)
        return _WatchStream(response, self._errors, _decode_hook(res))

    # Single requests the modules make around a wait (a CUDA sample's pods, a Job's log).

    def get_pod(self, namespace, name):
        """The pod as a dict, or None when there is none."""
        try:
            return self._call(self.core.read_namespaced_pod, name, namespace)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create_pod(self, namespace, body):
        return self._call(self.core.create_namespaced_pod, namespace, body)

    def delete_pod(self, namespace, name):
        """Delete a pod now; True when it was there."""
        try:
            self._call(self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0,
                       propagation_policy="Background", _raw=True)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def delete_pods(self, namespace, label_selector):
        """Delete every pod ``label_selector`` selects in ``namespace`` now, in one request
        (deletecollection); returns the names of the pods it deleted."""
        body = self._call(self.core.delete_collection_namespaced_pod, namespace, label_selector=label_selector,
                          grace_period_seconds=0, propagation_policy="Background")
        return sorted(((item.get("metadata") or {}).get("name") or "") for item in (body or {}).get("items") or ())

    def pod_log(self, namespace, name, container=None, previous=False, limit_bytes=65536):
        kwargs = {"limit_bytes": limit_bytes}
        if container:
            kwargs["container"] = container
        if previous:
            kwargs["previous"] = True
        return self._call(self.core.read_namespaced_pod_log, name, namespace, _raw=True,
                          **kwargs).decode("utf-8", "replace")


def run_checked(module, check_params, action, describe):
    """The frame of every wait module: reject bad options before connecting, connect,
    ``action(api)``; fail with a message naming the option, or ``describe`` and the
    error retrying could not mend. Returns (api, what ``action`` returned)."""
    problem = check_params(module.params)
    if problem:
        module.fail_json(msg=problem)
    started = time.monotonic()
    api = None
    try:
        api = connect(module.params)
        if module.params.get("timeout") is not None:
            # One deadline from the module's start: loading the kubeconfig, the wait and
            # every call after it.
            api.started = api.clock.now() - (time.monotonic() - started)
            api.deadline = api.started + module.params["timeout"]
        result = action(api)
        # What is left is reporting and the interpreter's exit, whose garbage collections
        # walk the kubernetes client's ~100,000 objects: 0.1 to 0.5 s each on a busy host,
        # more than the wait took to notice the change. Frozen objects are left out of them.
        gc.freeze()
        return api, result
    except ValueError as exc:
        module.fail_json(msg=str(exc), elapsed=round(time.monotonic() - started, 3))
    except (WaitFailed, ApiError) as exc:
        module.fail_json(msg="%s: %s" % (describe, exc),
                         elapsed=elapsed(api) if api is not None else round(time.monotonic() - started, 3))
    return None, None  # not reached: fail_json exits


def elapsed(api):
    """Seconds since the module started (run_checked), measured."""
    return round(api.clock.now() - getattr(api, "started", api.clock.now()), 3)


def connect(params):
    """The adapter for a module's connection options (``k8s_connection``). Modules call
    it through this module so that unit tests can substitute a fake cluster."""
    from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import api_client

    return KubeApi(api_client(params))
