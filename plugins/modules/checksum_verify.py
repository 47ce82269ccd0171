#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: checksum_verify
short_description: Verify files against a sha256sum checksum file before anything uses them
version_added: 0.1.0
description:
  - Reads a checksum file in the format of C(sha256sum) (for an RKE2 release, C(sha256sum-amd64.txt)) and checks
    the SHA-256 of each of O(files) against it.
  - Fails when a file is missing, is not listed, or does not match, with one line per file naming it; reads only,
    so a role can run it between staging artifacts and unpacking them.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  path:
    description:
      - Directory holding O(files) and, unless O(checksum_file) is absolute, the checksum file.
    type: path
    required: true
  checksum_file:
    description:
      - The checksum file, relative to O(path) or absolute.
    type: path
    required: true
  files:
    description:
      - Names of the files in O(path) to verify. Each must be listed in the checksum file.
    type: list
    elements: str
    required: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
"""

EXAMPLES = r"""
- name: Verify the staged RKE2 release before unpacking it
  gpuplatform.rke2.checksum_verify:
    path: /var/lib/rancher/rke2-artifacts/v1.34.1+rke2r1
    checksum_file: sha256sum-amd64.txt
    files:
      - rke2.linux-amd64.tar.gz
      - rke2-images.linux-amd64.tar.zst
"""

RETURN = r"""
sha256:
  description: The SHA-256 of each verified file.
  returned: success
  type: dict
  sample: {"rke2.linux-amd64.tar.gz": "3f9c...e1"}
problems:
  description: One message per file that failed, naming it.
  returned: failure
  type: list
  elements: str
  sample: ["rke2.linux-amd64.tar.gz: sha256 0a1b... does not match 3f9c... in sha256sum-amd64.txt (corrupted or wrong file)"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuplatform.rke2.plugins.module_utils.rke2 import checksum_problems, parse_checksums


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            checksum_file=dict(type="path", required=True),
            files=dict(type="list", elements="str", required=True),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    checksum_path = os.path.join(path, module.params["checksum_file"])
    checksum_name = os.path.basename(checksum_path)
    for name in module.params["files"]:
        if not name or "/" in name:
            module.fail_json(msg="files: %r must be a file name inside %s" % (name, path))
    try:
        with open(checksum_path) as handle:
            expected = parse_checksums(handle.read(), checksum_path)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read the checksum file %s: %s" % (checksum_path, to_native(exc)))
    except ValueError as exc:
        module.fail_json(msg=to_native(exc))

    actual = {}
    for name in module.params["files"]:
        file_path = os.path.join(path, name)
        actual[name] = module.sha256(file_path) if os.path.isfile(file_path) else None
    problems = checksum_problems(expected, actual, checksum_name)
    if problems:
        module.fail_json(msg="checksum verification failed in %s: %s" % (path, "; ".join(problems)), problems=problems)
    module.exit_json(changed=False, sha256=actual)


if __name__ == "__main__":
    main()
