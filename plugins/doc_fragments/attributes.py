# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The attributes of a module that changes nothing (with ansible.builtin.action_common_attributes, which
    # describes them); a module adds its own check_mode details where it has something to say.
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

    # The wait modules: they read the cluster only, so check mode waits as a real run does.
    WAIT = r"""
attributes:
  check_mode:
    support: full
    details: Reads only; waits in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""
