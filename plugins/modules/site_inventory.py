#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: site_inventory
short_description: Render a site's Ansible inventory from its site file
version_added: 0.1.0
description:
  - Reads a site file (C(sites/<site>/site.yml)) describing the site's network, RKE2 settings and hosts with their
    roles, addresses and GPUs, checks all of it, and writes C(hosts.yml) and C(group_vars/all.yml) into O(dest).
  - Every problem of the site file is reported at once, each naming its key (for example
    C(nodes[2].gpu.workload_config)); nothing is written then.
  - A file is written only when its rendered text differs. Supports check and diff mode.
  - The groups and variables written are the inventory contract the collection's roles read; see C(docs/rke2.md).
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  src:
    description:
      - The site file.
    type: path
    required: true
  dest:
    description:
      - The inventory directory, for example C(inventories/tirosh-home). Created when missing.
    type: path
    required: true
  source_name:
    description:
      - How the header of the rendered files and the messages name the site file. Defaults to O(src) as given.
    type: str
  complete:
    description:
      - Also refuse a site file that lacks a fact that rendering the site's files (C(make site/render)) needs, such
        as the OS of each GPU host whose driver or vGPU manager image is tagged per OS, the kernel for precompiled
        drivers, the vGPU manager image for vm-vgpu hosts. Each problem names its key in the site file.
    type: bool
    default: false
  rerun:
    description:
      - The command to rerun once the site file is fixed, appended to a refusal (for example
        C(make site/render SITE=tirosh-home)).
    type: str
requirements:
  - PyYAML
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
- name: Render inventories/tirosh-home from its site file
  gpuplatform.rke2.site_inventory:
    src: sites/tirosh-home/site.yml
    dest: inventories/tirosh-home
  delegate_to: localhost
"""

RETURN = r"""
files:
  description: The files of O(dest) this run wrote (or would write in check mode), relative to O(dest).
  returned: always
  type: list
  elements: str
  sample: ["hosts.yml"]
groups:
  description: The members of each group, in the order of the site file.
  returned: success
  type: dict
  sample: {"rke2_servers": ["tirosh-cp-1"], "rke2_agents": ["tirosh-gpu-1"], "gpu_nodes": ["tirosh-gpu-1"]}
site_keys:
  description: Each host's key in the site file, for messages that point into it.
  returned: success
  type: dict
  sample: {"tirosh-cp-1": "nodes[0]", "tirosh-gpu-1": "nodes[1]"}
registries:
  description: The site file's C(rke2.registries) as written, so secrets stay the references the site file gives.
  returned: success
  type: dict
etcd_s3:
  description: The site file's C(rke2.etcd_snapshots.s3) as written, so its credentials stay the references it gives.
  returned: success
  type: dict
problems:
  description: Every problem of the site file, each naming its key.
  returned: failure
  type: list
  elements: str
"""

import os
import traceback

try:
    import yaml
    HAS_YAML = True
    YAML_IMPORT_ERROR = None
except ImportError:
    HAS_YAML = False
    YAML_IMPORT_ERROR = traceback.format_exc()

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_inventory as si
from ansible_collections.gpuplatform.rke2.plugins.module_utils.file_write import write_atomically


class _Dumper(yaml.SafeDumper if HAS_YAML else object):
    """Block style with list items indented under their key, as yamllint's default wants."""

    def increase_indent(self, flow=False, indentless=False):
        return super(_Dumper, self).increase_indent(flow, False)


def _dump(data):
    return yaml.dump(data, Dumper=_Dumper, default_flow_style=False, sort_keys=False, allow_unicode=True, width=120)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type="path", required=True),
            dest=dict(type="path", required=True),
            source_name=dict(type="str"),
            complete=dict(type="bool", default=False),
            rerun=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    src, dest = module.params["src"], module.params["dest"]
    source_name = module.params["source_name"] or src
    try:
        with open(src) as handle:
            site = yaml.safe_load(handle)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read the site file %s: %s" % (src, to_native(exc)), files=[])
    except yaml.YAMLError as exc:
        module.fail_json(msg="the site file %s is not valid YAML: %s" % (src, exc), files=[])
    rerun = module.params["rerun"]
    try:
        warnings = si.validate(site, source_name)
        if module.params["complete"] and si.render_problems(site):
            raise si.SiteError(source_name, si.render_problems(site))
    except si.SiteError as exc:
        msg = to_native(exc)
        if rerun:
            msg += ". Fix the site file, then rerun: %s" % rerun
        module.fail_json(msg=msg, problems=exc.problems, files=[])
    for warning in warnings:
        module.warn(warning)

    rendered = si.render(site, source_name, _dump)
    changed_files, diffs = [], []
    for relative in sorted(rendered):
        path = os.path.join(dest, relative)
        before = None
        if os.path.exists(path):
            with open(path) as handle:
                before = handle.read()
        if before != rendered[relative]:
            changed_files.append(relative)
            diffs.append(dict(before_header=path, after_header=path, before=before or "", after=rendered[relative]))
    if changed_files and not module.check_mode:
        for relative in changed_files:
            try:
                write_atomically(module, os.path.join(dest, relative), rendered[relative], 0o644)
            except (IOError, OSError) as exc:
                module.fail_json(msg="cannot write %s: %s" % (os.path.join(dest, relative), to_native(exc)),
                                 files=changed_files)
    hosts = si.inventory(site)[0]
    groups = dict((name, list(group["hosts"])) for name, group in hosts["all"]["children"].items())
    result = dict(changed=bool(changed_files), files=changed_files, groups=groups, site_keys=si.node_keys(site),
                  registries=(site.get("rke2") or {}).get("registries") or {},
                  etcd_s3=((site.get("rke2") or {}).get("etcd_snapshots") or {}).get("s3") or {})
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
