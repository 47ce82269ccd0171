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
  stale and it is re-listed. So is one that brings bytes but no complete event other than
  a bookmark for as long (frozen: alive and saying nothing). Each watch is renewed after
  5 to 10 minutes, as client-go's reflector does;
- a success seen on watched data is confirmed by one fresh, consistent list of every kind
  before it is returned: a watch can be silently behind, a list cannot;
- one deadline: every request's timeouts (watch ``timeoutSeconds``, connect and read)
  derive from the time left, urllib3 retries nothing, the calls a module makes after the
  wait share the deadline (plus ``AFTER_DEADLINE_GRACE``), and ``elapsed`` is measured.
  Every response, its body and an error body included, is cut at its end however slowly it
  comes (``READ_GRACE`` past the wait's deadline). A failing wait lists every kind once more
  before it reports, so its message never describes what a frozen watch left;
- a 429 or 5xx with ``Retry-After`` holds the next request that long, within the deadline; a
  list answered in pages (``metadata.continue``) is followed to its last page;
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
# Every read of a wait (a list with all its pages, a watch, an error body) ends by the wait's
# deadline plus this: the connection is shut down there, wherever the read is. It is also what
# a failing wait's last look takes (one fresh list of every kind, made at the deadline), so
# it stays under AFTER_DEADLINE_GRACE, which the module's calls after the wait share.
READ_GRACE = 1.0
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
    mend it although no status came (TLS verification or a refused client certificate).
    ``retry_after``: seconds the server asked the client to wait before the next request
    (``Retry-After`` on a 429 or 5xx), or None."""

    def __init__(self, status, message, fatal=False, retry_after=None):
        super(ApiError, self).__init__("%s%s" % ("HTTP %s: " % status if status else "", message))
        self.status = status
        self.message = message
        self.fatal = fatal
        self.retry_after = retry_after


def retry_after_seconds(status, header, details=None):
    """The seconds a ``status`` answer asks the client to wait, or None: the
    ``Retry-After`` header, else the Status body's ``details.retryAfterSeconds``. As
    client-go reads it (rest/request.go ``checkWait``): only on a 429 or a 5xx, and only
    as whole seconds; anything else (an HTTP date, a negative or garbled value) is no
    request to wait."""
    if not isinstance(status, int) or not (status == 429 or 500 <= status <= 599):
        return None
    for value in (header, (details or {}).get("retryAfterSeconds") if isinstance(details, dict) else None):
        if isinstance(value, bool) or value is None:
            continue
        text = str(value).strip()
        if text.isdigit():
            return float(int(text))
    return None


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
    "done",  # the condition held (on fresh data) before the deadline, or on the last look's lists
    "detail",  # the condition's last detail; at a timeout, evaluated on the last look's lists
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
        # No request before this clock time: the server answered a 429 or 5xx with
        # Retry-After (its API Priority and Fairness shedding load, a restarting server).
        self._not_before = float("-inf")

    # ------------------------------------------------------------ requests

    def _count(self, name):
        with self._lock:
            self._counts[name] += 1

    def _remaining(self):
        return self._deadline - self.clock.now()

    def _note(self, error):
        """Remember a Retry-After the server sent with ``error``."""
        if getattr(error, "retry_after", None) is not None:
            with self._lock:
                self._not_before = max(self._not_before, self.clock.now() + error.retry_after)

    def _held(self):
        """Seconds the server asked to be left alone from now (0 when it did not)."""
        with self._lock:
            return max(self._not_before - self.clock.now(), 0.0)

    def _hold(self):
        """Wait out a Retry-After before the next request, within the deadline: a
        request sent sooner is one the server said it would refuse."""
        held = min(self._held(), max(self._remaining(), 0.0))
        if held > 0:
            self.clock.sleep(held, self._stopping)

    def _list(self, res, relist=True, first=False, last=False):
        """One list of ``res``. ``first``: made whatever the time left, so a zero
        timeout still checks once; ``last``: a failing wait's last look, made after the
        deadline inside READ_GRACE and only if the server did not ask to be left alone
        past that. Every other list ends by the deadline plus READ_GRACE."""
        if last:
            budget = self._remaining() + READ_GRACE
            if self._held() >= budget:
                raise ApiError(0, "not listed again: the server asked to wait %.0f s more (Retry-After)"
                               % self._held())
        else:
            self._hold()
            remaining = self._remaining()
            if remaining <= 0 and not first:
                raise ApiError(0, "the deadline passed")
            budget = max(remaining, 1.0) if first else remaining + READ_GRACE
        if budget <= 0:
            raise ApiError(0, "the deadline passed")
        self._count("list")
        # The module's deadline bounds every request as well (KubeApi).
        try:
            result = self.api.list(res, min(LIST_READ_TIMEOUT, budget))
        except ApiError as exc:
            self._note(exc)
            raise
        with self._lock:
            self._served.add(res.key)
        if relist:
            with self._lock:
                if res.key in self._listed:
                    self._counts["relists"] += 1
                self._listed.add(res.key)
        return result

    def _watch(self, res, resource_version):
        self._hold()
        remaining = self._remaining()
        self._count("watch")
        renew = WATCH_RENEW_MIN * (1.0 + random.random())
        timeout_seconds = max(1, int(math.ceil(min(remaining, renew))))
        try:
            return self.api.watch(res, resource_version, timeout_seconds, WATCH_IDLE_TIMEOUT)
        except ApiError as exc:
            self._note(exc)
            raise

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
                    code = obj.get("code") or 0
                    raise ApiError(code, obj.get("message") or obj.get("reason") or "watch error",
                                   retry_after=retry_after_seconds(code, None, obj.get("details")))
                resource_version = _resource_version(obj) or resource_version
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    events += 1
                    self._put(_EVENT, res.key, epoch, etype, obj)
        except ApiError as exc:
            self._note(exc)
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
            thread = threading.Thread(target=self._feed_or_fail, args=(res, versions[res.key]),
                                      name="k8s-wait:" + res.key)
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
        if not done and self._threads:
            done, detail = self._last_look(evaluate, cache, synced)
        if not done:
            # The detail of a timeout: the last state known, stale kinds named in the result.
            detail = condition(cache)[1]
        return self._result(done, detail, cache, synced)

    def _last_look(self, evaluate, cache, synced):
        """A wait that is failing lists every kind once more before it reports: a watch
        that stayed open and brought nothing (bookmarks only, bytes that never made an
        event) leaves a cache that looks current and is not. Each list ends by the deadline
        plus READ_GRACE; a kind whose list fails, or is not sent because the server asked
        to wait past that (Retry-After), is reported stale. The condition holding on every
        fresh list is a success, found that late. (done, detail)."""
        for res in self.resources:
            try:
                items, _version = self._list(res, relist=False, last=True)
            except ApiError as exc:
                if classify(exc) == NOT_FOUND and self._never_served(res):
                    items = []
                else:
                    synced[res.key] = False
                    continue
            cache[res.key] = dict((object_key(o), o) for o in items)
            synced[res.key] = True
        if all(synced.values()):
            return evaluate()
        return False, None

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
        details = None
        if body:
            try:
                decoded = json.loads(body)
                message = decoded.get("message") or message
                details = decoded.get("details")
            except (ValueError, TypeError, AttributeError):
                pass
        headers = getattr(exc, "headers", None)
        header = headers.get("Retry-After") if hasattr(headers, "get") else None
        return ApiError(status, message, retry_after=retry_after_seconds(status, header, details))
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


# The request the current thread is making: its connection hands it its socket (_guard_pools).
_ACTIVE = threading.local()
_IDLE = "idle"
_LATE = "late"


def _shut(sock):
    """Shut a connection's socket down: a read blocked on it returns at once. Below TLS
    (socket.socket.shutdown): ssl.SSLSocket.shutdown would drop its SSL object under the
    reading thread."""
    if sock is None:
        return
    try:
        if isinstance(sock, socket.socket):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        else:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError, AttributeError):
        pass


class _Cutoff(object):
    """Ends one request at a moment of the clock wherever its reading is: the response's
    headers, its body, or an error body, which the kubernetes client reads on its own, with
    no deadline, before it raises. Socket timeouts bound each wait for a byte, not a body
    trickled a byte at a time (a list took 27.6 s so for a 4 s timeout); shutting the
    connection down ends any read. A timer thread, not a poll.

    ``until``: the clock time the request ends by. ``idle`` (a watch): the longest time
    without a complete event other than a bookmark; ``touch`` restarts it."""

    def __init__(self, clock, until, idle=None):
        self._clock = clock
        self.until = until
        self.idle = idle
        self.started = clock.now()
        self.at = until if idle is None else min(until, self.started + idle)
        self.reason = None  # _LATE or _IDLE once it ended the request
        self._lock = threading.Lock()
        self._sockets = []
        self._done = False
        self._timer = None
        with self._lock:
            self._arm()

    def _arm(self):
        # Called with the lock held.
        self._timer = threading.Timer(max(self.at - self._clock.now(), 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def touch(self):
        """A complete event came: a watch's idle time counts from now."""
        if self.idle is not None:
            self.at = min(self.until, self._clock.now() + self.idle)

    def attach(self, connection):
        """The connection the request reads from, its socket taken now (it exists once the
        request is sent): an answer with ``Connection: close`` makes http.client drop the
        connection's socket while the response goes on reading from it."""
        sock = getattr(connection, "sock", None)
        with self._lock:
            if self._done:
                return
            self._sockets.append(sock)
            if self.reason is not None:
                _shut(sock)

    def _fire(self):
        with self._lock:
            if self._done:
                return
            if self.at > self._clock.now():
                self._arm()  # touched since armed
                return
            self.reason = _LATE if self.at >= self.until else _IDLE
            for sock in self._sockets:
                _shut(sock)

    def finish(self):
        """The request is over: nothing is shut down after this (its connection may be
        back in the pool, serving another request)."""
        with self._lock:
            self._done = True
            self._sockets = []
            timer = self._timer
        timer.cancel()

    def error(self):
        """The ApiError of a request this cutoff ended."""
        if self.reason == _IDLE:
            return ApiError(0, "the watch brought no event for %.0f s (bookmarks or incomplete data only): taken "
                               "as stalled" % self.idle)
        return ApiError(0, "the response was not read by its deadline, %.1f s after it was sent: the connection "
                           "was shut" % (self.until - self.started))


def _guarded_connection_class(connection_class):
    """``connection_class`` handing its socket to the cutoff of the request its thread makes."""

    class Guarded(connection_class):
        def getresponse(self, *args, **kwargs):
            cutoff = getattr(_ACTIVE, "cutoff", None)
            if cutoff is not None:
                cutoff.attach(self)
            return super(Guarded, self).getresponse(*args, **kwargs)

    Guarded.__name__ = "Guarded" + connection_class.__name__
    return Guarded


def _guard_pools(pool_manager):
    """Make every connection ``pool_manager`` opens attach to its request's cutoff, through
    ``_new_pool``, which urllib3 documents as the hook for customizing pools (any manager:
    direct, proxy, SOCKS)."""
    if getattr(pool_manager, "_cutoff_guarded", False):
        return
    new_pool = pool_manager._new_pool  # pylint: disable=protected-access

    def guarded_new_pool(*args, **kwargs):
        pool = new_pool(*args, **kwargs)
        pool.ConnectionCls = _guarded_connection_class(pool.ConnectionCls)
        return pool

    pool_manager._new_pool = guarded_new_pool  # pylint: disable=protected-access
    pool_manager._cutoff_guarded = True  # pylint: disable=protected-access
    pool_manager.clear()


def list_page(body, plural, tokens):
    """(items, resourceVersion, continue token or None) of one page of a list answer.
    ``tokens``: the continue tokens this list followed already; one answered again would
    page forever and is refused."""
    if not isinstance(body, dict):
        raise ApiError(0, "undecodable list of %s: not an object" % plural)
    meta = body.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    items = body.get("items") or []
    if not isinstance(items, list):
        raise ApiError(0, "undecodable list of %s: items is not a list" % plural)
    token = meta.get("continue") or None
    if token is not None and token in tokens:
        raise ApiError(0, "the list of %s does not end: the server answered metadata.continue %r twice"
                       % (plural, token), fatal=True)
    return items, meta.get("resourceVersion"), token


class _WatchStream(object):
    """The events of one watch response, JSON-decoded from its lines (camelCase keys, no
    model objects); ``object_hook`` as json.loads takes it. ``cutoff`` ends the watch at
    its end (quietly, as the server would have) or when no complete event but bookmarks
    came for its idle time (an ApiError: the watch is alive and frozen)."""

    def __init__(self, response, errors, object_hook=None, cutoff=None):
        self._response = response
        self._errors = errors
        self._closed = False
        self._object_hook = object_hook
        self._cutoff = cutoff

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

    def _cut(self):
        return self._cutoff is not None and self._cutoff.reason is not None

    def __iter__(self):
        buffer = b""
        try:
            for chunk in self._chunks():
                buffer += chunk if isinstance(chunk, bytes) else chunk.encode("utf-8")
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line.decode("utf-8"), object_hook=self._object_hook)
                        if self._cutoff is not None and (event or {}).get("type") != "BOOKMARK":
                            self._cutoff.touch()
                        yield event
        except self._errors as exc:
            if not self._closed and not self._cut():
                raise _api_error(exc) from exc
        except ValueError as exc:
            if not self._closed and not self._cut():
                raise ApiError(0, "undecodable watch event: %s" % exc) from exc
        if not self._closed and self._cut() and self._cutoff.reason == _IDLE:
            raise self._cutoff.error()

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._cutoff is not None:
            self._cutoff.finish()
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
        _guard_pools(api_client.rest_client.pool_manager)

    def _until(self, seconds):
        """The clock time a request of at most ``seconds`` ends by: within the module's
        deadline plus AFTER_DEADLINE_GRACE. Refuses to send once no time is left."""
        now = self.clock.now()
        until = now + seconds
        if self.deadline is not None:
            until = min(until, self.deadline + AFTER_DEADLINE_GRACE)
        if until <= now:
            raise ApiError(0, "not sent: the deadline passed")
        return until

    def _timeouts(self, until, read_timeout=None):
        """(connect, read) timeouts of a request that ends by ``until``: urllib3's, for
        each wait for a byte; the cutoff bounds the whole."""
        left = max(until - self.clock.now(), 0.001)
        return (min(CONNECT_TIMEOUT, left), min(read_timeout or left, left))

    def _request(self, cutoff, function, *args, **kwargs):
        """``function(*args, **kwargs)`` under ``cutoff``: its connection attaches to it, so
        the headers and any error body the client reads end by it too."""
        kwargs["_request_timeout"] = self._timeouts(cutoff.until, kwargs.pop("_read_timeout", None))
        kwargs["_preload_content"] = False
        _ACTIVE.cutoff = cutoff
        try:
            return function(*args, **kwargs)
        except self._errors as exc:
            raise (cutoff.error() if cutoff.reason else _api_error(exc)) from exc
        finally:
            _ACTIVE.cutoff = None

    def _call(self, function, *args, **kwargs):
        """The call's response, its body read (JSON-decoded unless ``_raw``) inside the
        error translation: a body that breaks in the middle is an ApiError like any
        other broken connection, never a raw urllib3 error. The whole call, error bodies
        included, ends by ``_until`` (clock time), or ``_read_timeout`` seconds from now."""
        raw = kwargs.pop("_raw", False)
        object_hook = kwargs.pop("_object_hook", None)
        until = kwargs.pop("_until", None)
        if until is None:
            until = self._until(kwargs.pop("_read_timeout", LIST_READ_TIMEOUT))
        cutoff = _Cutoff(self.clock, until)
        try:
            response = self._request(cutoff, function, *args, **kwargs)
            try:
                data = response.read(decode_content=False)
            except self._errors as exc:
                raise (cutoff.error() if cutoff.reason else _api_error(exc)) from exc
        finally:
            cutoff.finish()
        response.release_conn()
        if raw:
            return data
        try:
            return json.loads(data, object_hook=object_hook)
        except (ValueError, TypeError) as exc:
            raise ApiError(0, "undecodable response: %s" % exc) from exc

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
        """Every item of ``res`` and the list's resourceVersion, all within ``read_timeout``
        seconds. A server (or a proxy) that pages its answer (``metadata.continue``) is
        followed to the last page, as client-go's pager does: the pages are one snapshot,
        the first page's resourceVersion is the list's, and an expired token is a 410 that
        lists again from the start."""
        until = self._until(read_timeout)
        function, args = self._list_function(res)
        items, version, tokens = [], None, []
        while True:
            kwargs = self._selectors(res)
            if tokens:
                kwargs["_continue"] = tokens[-1]
            body = self._call(function, *args, _until=until, _object_hook=_decode_hook(res), **kwargs)
            page, page_version, token = list_page(body, res.plural, tokens)
            items.extend(page)
            version = page_version if not tokens else version
            if token is None:
                return items, version
            tokens.append(token)

    def watch(self, res, resource_version, timeout_seconds, read_timeout):
        """``read_timeout``: the longest time without a complete event other than a
        bookmark (and so without a byte). The watch ends by its ``timeout_seconds`` plus
        READ_GRACE even if the server keeps it open."""
        function, args = self._list_function(res)
        kwargs = self._selectors(res)
        if resource_version:
            kwargs["resource_version"] = resource_version
        cutoff = _Cutoff(self.clock, self._until(int(timeout_seconds) + READ_GRACE), idle=read_timeout)
        try:
            response = self._request(cutoff, function, *args, watch=True, allow_watch_bookmarks=True,
                                     timeout_seconds=int(timeout_seconds), _read_timeout=read_timeout, **kwargs)
        except ApiError:
            cutoff.finish()
            raise
        return _WatchStream(response, self._errors, _decode_hook(res), cutoff)

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

    def delete_secret(self, namespace, name, uid, resource_version):
        """Delete that Secret only as it was read (preconditions: its uid and resourceVersion);
        True when it was there, a 409 when it changed since."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": uid, "resourceVersion": resource_version}}
        try:
            self._call(self.core.delete_namespaced_secret, name, namespace, body=body, _raw=True)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def get_object(self, group, version, plural, name, namespace):
        """One namespaced object of a named API group (apps, batch, CRDs) as a dict, or None."""
        try:
            return self._call(self.custom.get_namespaced_custom_object, group, version, namespace, plural, name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def suspend_job(self, namespace, name, uid):
        """Suspend that Job (the job controller stops its pods and starts none). The uid in the
        patch is a precondition: another Job of the same name is refused (409)."""
        return self._call(self.custom.patch_namespaced_custom_object, "batch", "v1", namespace, "jobs", name,
                          {"metadata": {"uid": uid}, "spec": {"suspend": True}})

    def delete_job(self, namespace, name, uid):
        """Delete that Job (precondition: its uid) and its pods; True when it was there."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background",
                "preconditions": {"uid": uid}}
        try:
            self._call(self.custom.delete_namespaced_custom_object, "batch", "v1", namespace, "jobs", name,
                       body=body, _raw=True)
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
        return self._call(self.core.read_namespaced_pod_log, name, namespace, _raw=True,
                          **kwargs).decode("utf-8", "replace")


# The real clock that times a module's start (its connect: the kubeconfig loaded, the client made), which the
# one deadline includes. Unit tests, whose cluster and clock are simulated, stop it: the real milliseconds a
# busy host spends in their fake connect are not part of the simulated time they assert.
start_clock = time.monotonic


def run_checked(module, check_params, action, describe):
    """The frame of every wait module: reject bad options before connecting, connect,
    ``action(api)``; fail with a message naming the option, or ``describe`` and the
    error retrying could not mend. Returns (api, what ``action`` returned)."""
    problem = check_params(module.params)
    if problem:
        module.fail_json(msg=problem)
    started = start_clock()
    api = None
    try:
        api = connect(module.params)
        if module.params.get("timeout") is not None:
            # One deadline from the module's start: loading the kubeconfig, the wait and
            # every call after it.
            api.started = api.clock.now() - (start_clock() - started)
            api.deadline = api.started + module.params["timeout"]
        result = action(api)
        # What is left is reporting and the interpreter's exit, whose garbage collections
        # walk the kubernetes client's ~100,000 objects: 0.1 to 0.5 s each on a busy host,
        # more than the wait took to notice the change. Frozen objects are left out of them.
        gc.freeze()
        return api, result
    except ValueError as exc:
        module.fail_json(msg=str(exc), elapsed=round(start_clock() - started, 3))
    except (WaitFailed, ApiError) as exc:
        module.fail_json(msg="%s: %s" % (describe, exc),
                         elapsed=elapsed(api) if api is not None else round(start_clock() - started, 3))
    return None, None  # not reached: fail_json exits


def elapsed(api):
    """Seconds since the module started (run_checked), measured."""
    return round(api.clock.now() - getattr(api, "started", api.clock.now()), 3)


def connect(params):
    """The adapter for a module's connection options (``k8s_connection``). Modules call
    it through this module so that unit tests can substitute a fake cluster."""
    from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import api_client

    return KubeApi(api_client(params))
