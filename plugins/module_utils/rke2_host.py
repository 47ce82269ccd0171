# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the rke2 role keeps in order on a host from one run to the next, as pure functions over what it read there:
the config.yaml.d drop-ins RKE2 merges over the role's config.yaml, and the staged releases upgrades leave behind."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2

DROPIN_DIR = rke2.CONFIG_DIR + "/config.yaml.d"
# k3s pkg/configfilearg dotDFiles (the commit RKE2 v1.34.1 pins): every file of config.yaml.d whose name ends in
# .yaml or .yml, any case, in name order, each over the one before; "key+" appends to key instead.
DROPIN_NAME_RE = re.compile(r"(?i)^.*\.ya?ml$")
# A drop-in whose text is no YAML: the filter, which parses the files on the controller, marks it so (PyYAML is
# not a module_utils dependency).
NOT_YAML = "<not YAML>"
# Keys no drop-in may set in any form, appended or not: they decide which cluster the node belongs to, under which
# name, and where the files the role reads and writes are (module_utils/rke2_membership.py keeps them stable).
MEMBERSHIP_KEYS = ("server", "token", "token-file", "agent-token", "agent-token-file", "node-name",
                   "cni") + rke2.FIXED_PATH_KEYS


def dropin_conflicts(dropins, config, host="this host"):
    """The refusals for the config.yaml.d drop-ins of ``host``, one per file and key, in RKE2's merge order: a
    drop-in that sets a key config.yaml sets (the role's value would silently lose, the later file wins), or any
    of MEMBERSHIP_KEYS. ``dropins``: {file name: its parsed content, or NOT_YAML}; ``config``: the config.yaml
    this run writes.
    A list value appended with "key+" adds to the role's and is left alone; only names and keys are quoted, never a
    value (a drop-in may hold a secret)."""
    if not isinstance(dropins, dict):
        raise TypeError("the config.yaml.d drop-ins must be a mapping of file name to content, not %s"
                        % type(dropins).__name__)
    role_keys = set(str(key).rstrip("+") for key in (config or {}))
    refusals = []
    for name in sorted(name for name in dropins if DROPIN_NAME_RE.match(str(name))):
        content = dropins[name]
        path = "%s/%s" % (DROPIN_DIR, name)
        if content == NOT_YAML:
            refusals.append("%s: %s is not YAML (RKE2 stops on it at start)" % (host, path))
            continue
        if content is None:
            continue
        if not isinstance(content, dict):
            refusals.append("%s: %s is not a mapping of config keys (RKE2 stops on it at start)" % (host, path))
            continue
        for key in sorted(str(key) for key in content):
            base, appended = key.rstrip("+"), key.endswith("+")
            if base in MEMBERSHIP_KEYS:
                refusals.append("%s: %s sets %s, which decides the node's cluster, name or paths: the role sets it "
                                "in config.yaml alone" % (host, path, key))
            elif base in role_keys and not appended:
                refusals.append("%s: %s sets %s over config.yaml's (the later file wins): give the value through "
                                "the role's variables, or append to it with %s+" % (host, path, key, base))
    return refusals


def stale_stages(names, current, keep=1):
    """The staged release folders of ``names`` (the folder names in rke2_stage_dir) to remove once ``current`` is
    unpacked: every folder named for another RKE2 release but the ``keep`` newest of those before ``current``, the
    way back for a rollback (a later release's folder is no way back: the role refuses downgrades). A folder whose
    name is no RKE2 release is not the role's and stays."""
    now = rke2.parse_version(current, "rke2_version")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValueError("rke2_staged_releases_keep: %r is not a whole number of 0 or more" % (keep,))
    releases = []
    for name in names or ():
        try:
            releases.append((rke2.parse_version(str(name)), str(name)))
        except ValueError:
            continue
    kept = [name for version, name in sorted((r for r in releases if r[0] < now), reverse=True)[:keep]]
    return sorted(name for version, name in releases if name != current and name not in kept)
