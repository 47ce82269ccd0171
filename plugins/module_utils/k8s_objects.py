# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place a Kubernetes object from a snapshot file or the API enters the checks,
the waits and the report: ``read(kind, obj)`` returns the object once every field they
read has a shape they can read, and raises ``MalformedObject`` naming the object and the
field otherwise::

    snapshot.json: items[12] Pod gpu-operator/nvidia-driver-daemonset-x: metadata.labels is a list, expected a mapping

Tolerant of what the API leaves out: an absent (or null) optional field passes, and the
code reading it takes the API's default for it (a node that just registered has no
``status.allocatable``, a pod just created no ``status.containerStatuses``, a DaemonSet
the controller has not seen yet no ``status``). Strict about a present field of another
type (a list where the API has a mapping, a boolean where it has a string: an unquoted
``true`` label value in a hand-written YAML snapshot), and about ``metadata.name``, which
the API always sets and every report is keyed by.

The object is checked in place, not copied: a 5,000-node snapshot's 100,000 pods are
read in well under a second (docs/benchmarks.md). Only the fields the collection reads
are checked; the rest of an object is not looked at.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import operand_model as om


class MalformedObject(ValueError):
    """A Kubernetes object the checks cannot read; the text names the object and the field.
    A ValueError, so that every module and the CLI refuse it as bad input."""


class _Bad(Exception):
    """Raised inside a check; each enclosing level adds its key on the way out, so a path
    is built only for the one field that is wrong."""

    def __init__(self, value, expected, missing=False):
        Exception.__init__(self)
        self.value = value
        self.expected = expected
        self.missing = missing
        self.path = []


_TYPE_NAMES = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
               (list, "a list"), (dict, "a mapping"))


def describe(value):
    """A value's JSON type in words, scalars with their value: ``a boolean (true)``."""
    if value is None:
        return "null"
    for type_, words in _TYPE_NAMES:
        if isinstance(value, type_):
            if type_ in (list, dict):
                return words
            text = json.dumps(value) if type_ is not str else repr(value)
            return "%s (%s)" % (words, text if len(text) <= 40 else text[:37] + "...")
    return "a %s" % type(value).__name__


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def field_path(parts):
    """``status.containerStatuses[0].state`` from its parts, outermost first; a key that
    is no plain name (a label) in brackets: ``metadata.labels["nvidia.com/gpu.present"]``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += "[%d]" % part
        elif _PLAIN_KEY.match(part):
            text += ("." if text else "") + part
        else:
            text += "[%s]" % json.dumps(part)
    return text


# ---------------------------------------------------------------- shapes
# Each shape is a function of a present, non-null value that raises _Bad when the value
# has another shape. Mappings skip absent and null fields: the API omits empty optional
# fields, and a snapshot may spell one as null.

class _Leaf(object):
    """A scalar shape: an instance of ``types`` and not of ``unless`` (a boolean is an int
    to isinstance, not an integer to the API). Mappings test leaves inline (no call per
    field), which keeps a pod's read to a few microseconds. isinstance, not type(): inside
    Ansible a str or dict arrives as its tagged subclass."""

    def __init__(self, types, expected, unless=()):
        self.types = types
        self.unless = unless
        self.expected = expected

    def __call__(self, value):
        if not isinstance(value, self.types) or isinstance(value, self.unless):
            raise _Bad(value, self.expected)


_string = _Leaf(str, "a string")
_boolean = _Leaf(bool, "a boolean")
_integer = _Leaf(int, "an integer", unless=bool)
# The API writes quantities as strings; a hand-written YAML snapshot may have a bare 2.
_quantity = _Leaf((str, int), "a quantity (a string like \"2\")", unless=bool)


def _any(value):
    """Any present value: the code only tests whether the field is there."""


def _any_mapping(value):
    if not isinstance(value, dict):
        raise _Bad(value, "a mapping")


def _string_map(value):
    """labels and annotations: string keys, string values."""
    if not isinstance(value, dict):
        raise _Bad(value, "a mapping")
    for key, item in value.items():
        if not isinstance(item, str) or not isinstance(key, str):
            bad = _Bad(item, "a string") if isinstance(key, str) else _Bad(key, "a string key")
            bad.path.append(str(key))
            raise bad


def _quantity_map(value):
    if not isinstance(value, dict):
        raise _Bad(value, "a mapping")
    for key, item in value.items():
        if not isinstance(key, str):
            bad = _Bad(key, "a resource name (a string)")
            bad.path.append(str(key))
            raise bad
        if not isinstance(item, _quantity.types) or isinstance(item, bool):
            bad = _Bad(item, _quantity.expected)
            bad.path.append(key)
            raise bad


def mapping(fields, required=()):
    """A mapping whose ``fields`` ({key: shape}) have those shapes when present;
    ``required`` keys must be present and not null."""
    # Scalars are tested inline: a call per field would double the cost of a read.
    leaves = tuple((key, shape.types, shape.unless, shape.expected) for key, shape in fields.items()
                   if isinstance(shape, _Leaf))
    nested = tuple((key, shape) for key, shape in fields.items() if not isinstance(shape, _Leaf))

    def check(value):
        if not isinstance(value, dict):
            raise _Bad(value, "a mapping")
        get = value.get
        for key in required:
            if get(key) is None:
                bad = _Bad(None, None, missing=True)
                bad.path.append(key)
                raise bad
        for key, types, unless, expected in leaves:
            item = get(key)
            if item is not None and (not isinstance(item, types) or isinstance(item, unless)):
                bad = _Bad(item, expected)
                bad.path.append(key)
                raise bad
        for key, shape in nested:
            item = get(key)
            if item is not None:
                try:
                    shape(item)
                except _Bad as bad:
                    bad.path.append(key)
                    raise
    return check


def _each(pairs, shape, what):
    """Every (key or index, item) of ``pairs`` has ``shape``; a null item is refused as
    ``what`` is expected: the code reads each."""
    for key, item in pairs:
        try:
            if item is None:
                raise _Bad(None, what)
            shape(item)
        except _Bad as bad:
            bad.path.append(key)
            raise


def list_of(shape):
    """A list whose every item has ``shape``."""

    def check(value):
        if not isinstance(value, list):
            raise _Bad(value, "a list")
        _each(enumerate(value), shape, "an item")
    return check


def map_of(shape):
    """A mapping of any string keys (node names) to values of ``shape``."""

    def check(value):
        if not isinstance(value, dict):
            raise _Bad(value, "a mapping")
        for key in value:
            if not isinstance(key, str):
                bad = _Bad(key, "a string key")
                bad.path.append(str(key))
                raise bad
        _each(value.items(), shape, "a value")
    return check


def one_of(values, expected):
    """A string that is one of ``values`` (``expected`` says what they are)."""
    allowed = frozenset(values)

    def check(value):
        if not isinstance(value, str) or value not in allowed:
            raise _Bad(value, expected)
    return check


# Shapes for the readers of other structured input (a module's registered result).
STRING, BOOLEAN, INTEGER, QUANTITY = _string, _boolean, _integer, _quantity
ANY_MAPPING, STRING_MAP = _any_mapping, _string_map
NUMBER = _Leaf((int, float), "a number", unless=bool)


def check_shape(shape, value, where):
    """``value`` when it has ``shape``; else MalformedObject ``<where>.<field> is ...,
    expected ...`` (``where``: the option or key that holds it)."""
    try:
        shape(value)
    except _Bad as bad:
        path = field_path([where] + list(reversed(bad.path)))
        if bad.missing:
            raise MalformedObject("%s is missing" % path)
        raise MalformedObject("%s is %s, expected %s" % (path, describe(bad.value), bad.expected))
    return value


# ---------------------------------------------------------------- the kinds

_OWNER_REFERENCES = list_of(mapping({"uid": _string, "kind": _string, "name": _string, "controller": _boolean}))
_MANAGED_FIELDS = list_of(mapping({"subresource": _string, "time": _string, "manager": _string,
                                   "fieldsV1": _any_mapping}))


def _metadata(required=("name",), **extra):
    """metadata: what every kind's readers use, and ``extra`` fields for some kinds."""
    fields = {"name": _string, "namespace": _string, "labels": _string_map, "creationTimestamp": _string,
              "deletionTimestamp": _string}
    fields.update(extra)
    return mapping(fields, required)


_CONDITIONS = list_of(mapping({"type": _string, "status": _string, "reason": _string, "message": _string}))
_TOLERATIONS = list_of(mapping({"key": _string, "operator": _string, "value": _string, "effect": _string,
                                "tolerationSeconds": _integer}))
_STATE = mapping({
    "waiting": mapping({"reason": _string, "message": _string}),
    "running": _any_mapping,
    "terminated": mapping({"reason": _string, "message": _string, "exitCode": _integer}),
})
_CONTAINER_STATUSES = list_of(mapping({"name": _string, "image": _string, "ready": _boolean,
                                       "restartCount": _integer, "state": _STATE, "lastState": _STATE}))
_CONTAINERS = list_of(mapping({"name": _string, "image": _string}))
_SELECTOR_REQUIREMENTS = list_of(mapping({"key": _string, "operator": _string, "values": list_of(_string)}))

NODE = mapping({
    "metadata": _metadata(),
    "spec": mapping({"taints": list_of(mapping({"key": _string, "value": _string, "effect": _string})),
                     "unschedulable": _boolean}),
    "status": mapping({"allocatable": _quantity_map, "capacity": _quantity_map, "conditions": _CONDITIONS,
                       "nodeInfo": mapping({"kubeletVersion": _string})}),
}, required=("metadata",))

POD = mapping({
    "metadata": _metadata(ownerReferences=_OWNER_REFERENCES),
    "spec": mapping({
        "nodeName": _string, "containers": _CONTAINERS,
        "affinity": mapping({"nodeAffinity": mapping({"requiredDuringSchedulingIgnoredDuringExecution": mapping({
            "nodeSelectorTerms": list_of(mapping({"matchFields": _SELECTOR_REQUIREMENTS,
                                                  "matchExpressions": _SELECTOR_REQUIREMENTS}))})})}),
    }),
    "status": mapping({"phase": _string, "reason": _string, "conditions": _CONDITIONS,
                       "containerStatuses": _CONTAINER_STATUSES, "initContainerStatuses": _CONTAINER_STATUSES}),
}, required=("metadata",))

DAEMONSET = mapping({
    "metadata": _metadata(),
    "spec": mapping({"template": mapping({"metadata": _metadata(required=()),
                                          "spec": mapping({"tolerations": _TOLERATIONS})})}),
}, required=("metadata",))

DEPLOYMENT = mapping({
    "metadata": _metadata(generation=_integer),
    "status": mapping({"observedGeneration": _integer, "replicas": _integer, "availableReplicas": _integer,
                       "conditions": _CONDITIONS}),
}, required=("metadata",))

JOB = mapping({
    "metadata": _metadata(uid=_string),
    "status": mapping({"succeeded": _integer, "failed": _integer, "conditions": _CONDITIONS}),
}, required=("metadata",))

HELMCHART = mapping({
    "metadata": _metadata(managedFields=_MANAGED_FIELDS),
    "spec": _any_mapping,
    "status": mapping({"jobName": _string, "conditions": _CONDITIONS}),
}, required=("metadata",))

# What operand_model.policy() reads of a ClusterPolicy spec: each operand's <key>.enabled
# (a boolean in the CRD: a string "false" would read as true), the sandbox settings and the
# MIG and vGPU device manager configs.
_SWITCH = mapping({"enabled": _boolean})
_CONFIG = mapping({"name": _string, "default": _string})
_CLUSTERPOLICY_SPEC = dict((o.values_key, _SWITCH) for o in om.OPERANDS)
_CLUSTERPOLICY_SPEC.update({
    "sandboxWorkloads": mapping({"enabled": _boolean, "defaultWorkload": _string, "mode": _string}),
    "migManager": mapping({"enabled": _boolean, "config": _CONFIG}),
    "vgpuDeviceManager": mapping({"enabled": _boolean, "config": _CONFIG}),
})
# Chart values share these keys (the chart renders its ClusterPolicy from them).
CLUSTERPOLICY_SPEC = mapping(_CLUSTERPOLICY_SPEC)
CLUSTERPOLICY = mapping({
    "metadata": _metadata(),
    "spec": CLUSTERPOLICY_SPEC,
    "status": mapping({"state": _string, "namespace": _string, "conditions": _CONDITIONS}),
}, required=("metadata",))

# What gpu_node_labels reads: of a Node its labels, the annotations this collection writes
# there (the label keys it owns, its drain cordon) and whether it is cordoned; of the pods
# on a node whose workload config switches, the GPU resources they ask for (the keys of
# requests and limits), whether they still run, and how a KubeVirt VM names its pod.
LABELLED_NODE = mapping({
    "metadata": _metadata(annotations=_string_map),
    "spec": mapping({"unschedulable": _boolean}),
}, required=("metadata",))
_RESOURCE_CONTAINERS = list_of(mapping({"name": _string, "resources": mapping({
    "requests": _quantity_map, "limits": _quantity_map})}))
GPU_WORKLOAD_POD = mapping({
    "metadata": _metadata(uid=_string, annotations=_string_map),
    "spec": mapping({"containers": _RESOURCE_CONTAINERS, "initContainers": _RESOURCE_CONTAINERS}),
    "status": mapping({"phase": _string}),
}, required=("metadata",))

SHAPES = {"Node": NODE, "Pod": POD, "DaemonSet": DAEMONSET, "Deployment": DEPLOYMENT, "Job": JOB,
          "HelmChart": HELMCHART, "ClusterPolicy": CLUSTERPOLICY}
# The wait engine's cache keys and the snapshot's lists, by kind.
KIND_OF = {"nodes": "Node", "pods": "Pod", "daemonsets": "DaemonSet", "deployments": "Deployment", "jobs": "Job",
           "helmcharts": "HelmChart", "clusterpolicies": "ClusterPolicy"}


# ---------------------------------------------------------------- reading

def identity(kind, obj):
    """``gpu-operator/nvidia-driver-daemonset-x`` (or just the name), as far as the object
    says it; None when it names nothing."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str):
        return None
    text = "%s/%s" % (namespace, name) if isinstance(namespace, str) and namespace else name
    # A refusal stays one line, whatever a hand-written snapshot has in a name.
    return text if text.isprintable() and " " not in text else json.dumps(text)


def problem(kind, obj, shape=None):
    """What is wrong with ``obj`` as a ``kind`` (read as ``shape``, by default the kind's),
    as ``<field> is ..., expected ...``; None when nothing is."""
    try:
        (shape or SHAPES[kind])(obj)
    except _Bad as bad:
        path = field_path(reversed(bad.path))
        if bad.missing:
            return "%s is missing" % path
        return "%s is %s, expected %s" % (path or "the object", describe(bad.value), bad.expected)
    return None


def refusal(kind, obj, where=None, shape=None):
    """The MalformedObject for ``obj``: ``<where> <namespace/name>: <problem>``, where
    ``where`` is its place in a list (``pods[12]``), else the kind."""
    name = identity(kind, obj)
    return MalformedObject("%s%s: %s" % (where or kind, " " + name if name else "", problem(kind, obj, shape)))


def read(kind, obj, where=None, shape=None):
    """``obj`` (a ``kind`` as the API returns it: camelCase keys) when the collection can
    read it; else MalformedObject naming ``where`` (its place in a list) or the kind, the
    object and the field. ``shape``: what one reader reads of the kind (LABELLED_NODE),
    instead of what the checks and the waits read."""
    try:
        (shape or SHAPES[kind])(obj)
    except _Bad:
        raise refusal(kind, obj, where, shape)
    return obj


def _check_list(kind, objs, where):
    if objs is None:
        return ()
    if not isinstance(objs, (list, tuple)):
        raise MalformedObject("%s is %s, expected a list of %s objects" % (where, describe(objs), kind))
    return objs


def read_all(kind, objs, where, shape=None):
    """``objs``, a list of ``kind`` objects (None: none), each read (as ``shape``, see
    read); ``where`` names the list in a refusal: ``nodes`` -> ``nodes[3] gpu-1: ...``."""
    shape = shape or SHAPES[kind]
    for index, obj in enumerate(_check_list(kind, objs, where)):
        try:
            shape(obj)
        except _Bad:
            raise refusal(kind, obj, "%s[%d]" % (where, index), shape)
    return list(objs or ())


def read_namespaced(kind, objs, namespace, where):
    """The objects of ``objs`` in ``namespace``, each read, in their order. Objects whose
    ``metadata.namespace`` is another are left out unread: the checks never look at
    them, and a snapshot of ``kubectl get pods -A`` holds many more of those than of the
    operands' (reading them all would double the check's time)."""
    shape = SHAPES[kind]
    result = []
    for index, obj in enumerate(_check_list(kind, objs, where)):
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("namespace"), str) and meta["namespace"] != namespace:
            continue
        try:
            shape(obj)
        except _Bad:
            raise refusal(kind, obj, "%s[%d]" % (where, index))
        if meta.get("namespace") == namespace:
            result.append(obj)
    return result
