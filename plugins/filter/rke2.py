# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the rke2 role: the content of config.yaml from typed variables, the
release version in ``rke2 --version`` output, and the upgrade rule. Documentation in
the sidecar files rke2_config.yml, rke2_installed_version.yml and rke2_upgrade_error.yml."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2


def rke2_config(role, **kwargs):
    try:
        return rke2.build_config(role, **kwargs)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("rke2 config.yaml: %s" % exc)


def rke2_installed_version(output):
    return rke2.version_in_output(output) or ""


def rke2_upgrade_error(target, installed):
    try:
        return rke2.upgrade_error(installed or None, target)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {
            "rke2_config": rke2_config,
            "rke2_installed_version": rke2_installed_version,
            "rke2_upgrade_error": rke2_upgrade_error,
        }
