# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of ``make site/render`` (playbooks/site_render.yml): the site's node label plan.
Documentation in the sidecar file gpu_label_plan.yml; the logic is module_utils/site_render.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_render as sr


def _plain(value):
    """Plain dicts, lists and strings, as the YAML dumper wants them."""
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value
    return str(value)


def gpu_label_plan(nodes, settings=None, values=None, site_keys=None, source=None, site=None):
    try:
        return sr.label_plan(_plain(nodes), _plain(settings), _plain(values), _plain(site_keys),
                             _plain(source), _plain(site))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("gpu_label_plan: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"gpu_label_plan": gpu_label_plan}
