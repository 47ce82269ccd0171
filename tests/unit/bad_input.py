"""What the property-based tests of bad input share (issue #19): one fixed-seed settings
profile, JSON-like values, and mutations of a good document (a key dropped, a value
nulled, a mapping replaced by a list or a string, any value replaced by any other or by a
huge one).

The property each surface states: every input ends in a result or in that surface's
documented refusal (a ValueError subclass whose text is one line naming the place),
never in another exception."""

import copy
import os
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

# Hypothesis keeps caches (the constants it found in the code under test) under its home
# directory, by default .hypothesis/ in the working directory: outside the tree instead.
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "gpuplatform-rke2-hypothesis"))

# Fixed seed, no example database written into the tree, no per-example deadline (the
# machine is shared): the same examples on every run, so a failure reproduces.
SETTINGS = dict(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def examples(count):
    """The settings of one property: ``count`` generated inputs."""
    return settings(max_examples=count, **SETTINGS)


SCALARS = (st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=6) | st.sampled_from(["", "true", "false", "2", "nvidia.com/gpu", "Running"]))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
# Huge values: numbers past any int64 or float, a 100,000-character or control-character
# string, a list of a thousand, a mapping of a thousand keys.
HUGE = st.sampled_from([10 ** 40, -(10 ** 40), 1e308, "x" * 100000, "\x00\x7f\u2028\ufffd", ["x"] * 1000,
                        dict(("k%d" % i, "v") for i in range(1000))])
# The replacements that break a reader most often, first: the shrinker prefers them.
REPLACEMENTS = st.sampled_from([None, [], {}, "x", ["x"], {"x": 1}, 0, True]) | JSON_VALUES | HUGE


def paths(value, prefix=()):
    """Every path (a tuple of keys and indexes) inside ``value``, outermost first."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return
    for key, item in items:
        yield prefix + (key,)
        yield from paths(item, prefix + (key,))


def _parent(value, path):
    for key in path[:-1]:
        value = value[key]
    return value


@st.composite
def mutated(draw, seed, most=3, drop_only=False, keep=None):
    """A deep copy of ``seed`` with 1 to ``most`` mutations, none at a path for which
    ``keep(path)`` is true; ``drop_only``: only keys dropped."""
    doc = copy.deepcopy(seed)
    for _mutation in range(draw(st.integers(1, most))):
        candidates = [p for p in paths(doc) if not (keep and keep(p))]
        if drop_only:
            candidates = [p for p in candidates if isinstance(_parent(doc, p), dict)]
        if not candidates:
            break
        path = candidates[draw(st.integers(0, len(candidates) - 1))]
        parent = _parent(doc, path)
        if drop_only or draw(st.integers(0, 4)) == 0:
            parent.pop(path[-1])
        else:
            # A copy: sampled_from hands out the same [] or {} each time.
            parent[path[-1]] = copy.deepcopy(draw(REPLACEMENTS))
    return doc


def assert_refusal(exc, *expected_types):
    """A documented refusal: one of ``expected_types`` (ValueError by default), one
    line of text that is not empty."""
    assert isinstance(exc, expected_types or (ValueError,)), repr(exc)
    text = str(exc)
    assert text and "\n" not in text, text
    return text
