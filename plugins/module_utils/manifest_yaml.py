# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""YAML text for manifests people read in review and in ``--diff``: block style, keys
in a stable order, multi-line strings (a HelmChart's ``valuesContent``) as literal
blocks so a values change shows as the changed lines, not as one escaped string."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:
    import yaml
    HAS_YAML = True
    YAML_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - reported by the module
    HAS_YAML = False
    YAML_IMPORT_ERROR = exc


if HAS_YAML:
    class _BlockDumper(yaml.SafeDumper):
        """SafeDumper that writes multi-line strings as ``|`` blocks and indents lists
        under their key, the way Kubernetes manifests are usually written."""

        def increase_indent(self, flow=False, indentless=False):
            return super(_BlockDumper, self).increase_indent(flow, False)

    def _str_representer(dumper, data):
        if "\n" in data:
            return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
        return dumper.represent_scalar("tag:yaml.org,2002:str", data)

    _BlockDumper.add_representer(str, _str_representer)


def dump(data, sort_keys=False):
    """One YAML document as text (no ``---``)."""
    return yaml.dump(data, Dumper=_BlockDumper, default_flow_style=False, sort_keys=sort_keys,
                     allow_unicode=True, width=120)


def dump_all(documents, header=None):
    """Several documents, each after ``---``, with an optional comment header."""
    parts = []
    if header:
        parts.append("".join("# %s\n" % line if line else "#\n" for line in header.splitlines()))
    for doc in documents:
        parts.append("---\n" + dump(doc))
    return "".join(parts)


def load_all(text):
    """The non-empty documents of a YAML text; ValueError when it is not YAML."""
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ValueError("not YAML: %s" % exc)


def load_mapping(text):
    """The one map a YAML text holds (a values.yaml, a Chart.yaml); ValueError otherwise."""
    docs = load_all(text)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ValueError("expected one YAML map, found %d document(s)" % len(docs))
    return docs[0]
