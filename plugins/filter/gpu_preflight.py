# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU preflight's decisions as a filter, so the role decides once on the controller
from every host's facts (the logic is module_utils/preflight.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuplatform.rke2.plugins.module_utils.preflight import PreflightInputError, decide


def gpu_preflight(hosts, chart=None, follow_hosts=False):
    try:
        return decide(hosts, chart, follow_hosts=bool(follow_hosts))
    except PreflightInputError as exc:
        raise AnsibleFilterError("gpu_preflight: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"gpu_preflight": gpu_preflight}
