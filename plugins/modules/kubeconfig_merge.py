#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kubeconfig_merge
short_description: Merge an RKE2 server's kubeconfig into the operator's kubeconfig under the site's name
version_added: 0.1.0
description:
  - Reads the kubeconfig an RKE2 server writes to C(/etc/rancher/rke2/rke2.yaml) (one cluster, user and context, all
    named C(default), server C(https://127.0.0.1:6443)).
  - Renames its cluster, user and context to O(name), rewrites the server to the API address and merges the three
    entries into O(dest). Entries of other names are kept as they are, in their order.
  - Fails, changing nothing, when another context of O(dest) uses a cluster or user named O(name).
  - Writes O(dest) with mode C(0600) and only when its content or mode differs. Supports check and diff mode; the diff
    shows credentials as C(REDACTED).
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  name:
    description:
      - The name the cluster, user and context get in O(dest), normally the site's name.
    type: str
    required: true
  src:
    description:
      - Path, on the host the module runs on, of the fetched C(rke2.yaml).
    type: path
  content:
    description:
      - The fetched C(rke2.yaml) as text, for example the decoded result of M(ansible.builtin.slurp).
    type: str
  dest:
    description:
      - The operator's kubeconfig. Created, with its directory, when missing.
    type: path
    default: ~/.kube/config
  api_address:
    description:
      - Host name or IP address of the Kubernetes API (a server's address or a VIP). Replaces the host of the source
        server URL, keeping its scheme and port.
    type: str
  api_server:
    description:
      - The full C(https://) URL of the Kubernetes API, used as it is.
    type: str
  set_current_context:
    description:
      - Make O(name) the current context. The current context is also set when O(dest) has none.
    type: bool
    default: false
notes:
  - The module never returns the kubeconfig's credentials.
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
- name: Read the first server's kubeconfig
  ansible.builtin.slurp:
    src: /etc/rancher/rke2/rke2.yaml
  register: rke2_yaml
  no_log: true

- name: Merge it into the operator's kubeconfig as context tirosh-home
  gpuplatform.rke2.kubeconfig_merge:
    name: tirosh-home
    content: "{{ rke2_yaml.content | b64decode }}"
    api_address: 192.0.2.10
    dest: ~/.kube/config
  delegate_to: localhost
"""

RETURN = r"""
dest:
  description: The kubeconfig written (or that would be written in check mode).
  returned: always
  type: str
  sample: /home/operator/.kube/config
context:
  description: The context merged.
  returned: always
  type: str
  sample: tirosh-home
server:
  description: The API server URL the context points at.
  returned: always
  type: str
  sample: https://192.0.2.10:6443
current_context:
  description: The current context of O(dest) after the merge.
  returned: always
  type: str
  sample: tirosh-home
"""

import os
import stat
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

from ansible_collections.gpuplatform.rke2.plugins.module_utils.file_write import write_atomically
from ansible_collections.gpuplatform.rke2.plugins.module_utils.kubeconfig import (
    KubeconfigError, check_document, merge, redact, site_entries,
)

MODE = 0o600


def _load(text, what):
    try:
        return check_document(yaml.safe_load(text), what)
    except yaml.YAMLError as exc:
        raise KubeconfigError("%s is not valid YAML: %s" % (what, exc))


def _dump(doc):
    return yaml.safe_dump(doc, default_flow_style=False, sort_keys=False)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            src=dict(type="path"),
            content=dict(type="str", no_log=True),
            dest=dict(type="path", default="~/.kube/config"),
            api_address=dict(type="str"),
            api_server=dict(type="str"),
            set_current_context=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("src", "content"), ("api_address", "api_server")],
        required_one_of=[("src", "content"), ("api_address", "api_server")],
        supports_check_mode=True,
    )
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    params = module.params
    dest = params["dest"]
    name = params["name"]
    if not name.strip():
        module.fail_json(msg="name must not be empty")

    try:
        if params["src"]:
            with open(params["src"]) as handle:
                source_text = handle.read()
            what = params["src"]
        else:
            source_text, what = params["content"], "content"
        source = _load(source_text, what)
        entries = site_entries(source, name, params["api_address"], params["api_server"], what=what)
        exists = os.path.exists(dest)
        before = None
        if exists:
            with open(dest) as handle:
                before = _load(handle.read(), dest)
        after = merge(before, entries, params["set_current_context"], what=dest)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read %s: %s" % (getattr(exc, "filename", None) or dest, to_native(exc)))
    except KubeconfigError as exc:
        module.fail_json(msg=to_native(exc))

    content_changed = after != before
    mode_changed = exists and stat.S_IMODE(os.stat(dest).st_mode) != MODE
    changed = content_changed or mode_changed or not exists
    result = dict(
        changed=changed,
        dest=dest,
        context=name,
        server=entries[0]["cluster"]["server"],
        current_context=after["current-context"],
    )
    if module._diff:
        result["diff"] = dict(
            before_header=dest,
            after_header=dest,
            before=_dump(redact(before)) if before is not None else "",
            after=_dump(redact(after)),
        )
    if changed and not module.check_mode:
        try:
            if content_changed or not exists:
                write_atomically(module, dest, _dump(after), MODE, directory_mode=0o700)
            else:
                os.chmod(dest, MODE)
        except (IOError, OSError) as exc:
            module.fail_json(msg="cannot write %s: %s" % (dest, to_native(exc)))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
