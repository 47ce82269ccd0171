# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Facts a test host of molecule/rke2 reports as a real host of another kind would (an arm64
DGX Spark in a chroot on an x86_64 controller). Not part of the collection."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: molecule_facts
short_description: Set facts of a molecule/rke2 test host as a real host of that kind reports them
description:
  - Returns the given facts as the host's facts (C(ansible_facts)), so roles that gather only what is missing
    see, for example, C(ansible_facts.architecture) C(aarch64) on a test host that runs on an x86_64 controller.
author: gpuplatform.rke2 contributors
options:
  facts:
    description: The facts, as C(ansible_facts) names them without the C(ansible_) prefix.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Report the facts of an arm64 host
  molecule_facts:
    facts: {architecture: aarch64}
"""

RETURN = r"""
ansible_facts:
  description: The facts.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={"facts": {"type": "dict", "required": True}}, supports_check_mode=True)
    module.exit_json(changed=False, ansible_facts=module.params["facts"])


if __name__ == "__main__":
    main()
