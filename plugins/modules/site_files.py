#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: site_files
short_description: Write a site's rendered files into its folder, only those that changed
version_added: 0.1.0
description:
  - Writes the files C(make site/render) produces for a site (O(files), relative path to text) under O(dest), in
    one task after every check has passed, so that a refusal leaves the folder as it was.
  - A file is written only when its text differs; an unchanged file keeps its modification time and the task
    reports C(ok) when nothing differs.
  - Files under O(dest) matching one of O(managed) that O(files) no longer holds (a host or GPU resource the site
    no longer has) are removed, and so are folders that this leaves empty. Other files are never touched.
  - Supports check mode and diff mode.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  dest:
    description:
      - The site's folder, for example C(sites/tirosh-home). Created when missing.
    type: path
    required: true
  files:
    description:
      - The rendered files, relative path under O(dest) to text.
    type: dict
    required: true
  managed:
    description:
      - Glob patterns (relative to O(dest)) of the files the rendering owns; a matching file not in O(files) is
        removed.
    type: list
    elements: str
    default: []
  mode:
    description:
      - Mode of the written files. They hold no secret (secrets stay references), and are reviewed and committed.
    type: str
    default: "0644"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Write the site's rendered files
  gpuplatform.rke2.site_files:
    dest: sites/tirosh-home
    files:
      rke2/gpu-operator.helmchart.yaml: "{{ chart.manifest_yaml }}"
      airgap/images.txt: "{{ chart.images_txt }}"
    managed:
      - rke2/gpu-operator.helmchart.yaml
      - airgap/images.txt
  delegate_to: localhost
"""

RETURN = r"""
written:
  description: The files written (or, in check mode, that would be), relative to O(dest).
  returned: always
  type: list
  elements: str
  sample: ["rke2/gpu-operator.helmchart.yaml"]
removed:
  description: The managed files removed (or that would be), relative to O(dest).
  returned: always
  type: list
  elements: str
"""

import fnmatch
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_render as sr
from ansible_collections.gpuplatform.rke2.plugins.module_utils.file_write import write_atomically


def _read(path):
    with open(path) as handle:
        return handle.read()


def existing_files(dest, wanted, managed):
    """{relative path: text} of the files under ``dest`` that are wanted or managed."""
    found = {}
    for relative in wanted:
        path = os.path.join(dest, relative)
        if os.path.isfile(path):
            found[relative] = _read(path)
    if os.path.isdir(dest):
        for root, dirs, names in os.walk(dest):
            dirs.sort()
            for name in sorted(names):
                relative = os.path.relpath(os.path.join(root, name), dest).replace(os.sep, "/")
                if relative not in found and any(fnmatch.fnmatchcase(relative, m) for m in managed):
                    found[relative] = _read(os.path.join(root, name))
    return found


def _remove_empty_parents(dest, relative):
    parent = os.path.dirname(relative)
    while parent:
        path = os.path.join(dest, parent)
        if not os.path.isdir(path) or os.listdir(path):
            return
        os.rmdir(path)
        parent = os.path.dirname(parent)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type="path", required=True),
            files=dict(type="dict", required=True),
            managed=dict(type="list", elements="str", default=[]),
            mode=dict(type="str", default="0644"),
        ),
        supports_check_mode=True,
    )
    dest, managed = module.params["dest"], module.params["managed"]
    files = dict((str(k), "" if v is None else str(v)) for k, v in module.params["files"].items())
    try:
        mode = int(module.params["mode"], 8)
    except ValueError:
        module.fail_json(msg="mode: %r is not an octal mode" % module.params["mode"])
    try:
        existing = existing_files(dest, files, managed)
    except (IOError, OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (dest, to_native(exc)))
    write, remove, problems = sr.plan_files(files, existing, managed)
    if problems:
        module.fail_json(msg="; ".join(problems), written=[], removed=[])
    diffs = [dict(before_header=os.path.join(dest, p), after_header=os.path.join(dest, p),
                  before=existing.get(p, ""), after=files[p]) for p in write]
    diffs += [dict(before_header=os.path.join(dest, p), after_header="(removed)", before=existing[p], after="")
              for p in remove]
    if not module.check_mode:
        done = []
        try:
            for relative in write:
                write_atomically(module, os.path.join(dest, relative), files[relative], mode)
                done.append(relative)
            for relative in remove:
                os.unlink(os.path.join(dest, relative))
                _remove_empty_parents(dest, relative)
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write under %s: %s" % (dest, to_native(exc)), changed=bool(done),
                             written=done, removed=[])
    result = dict(changed=bool(write or remove), written=write, removed=remove)
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
