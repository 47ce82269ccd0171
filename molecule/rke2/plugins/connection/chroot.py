# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A chroot(8) connection for the molecule/rke2 test hosts. Not part of the collection:
ansible-core has no chroot connection and community.general is not a dependency, so
the scenario ships this one. Every command and file transfer runs through chroot(8)
inside the host's root, so symlinks in the root resolve inside it, as on a real host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: chroot
short_description: Run tasks inside a root directory with chroot(8) (molecule/rke2 only)
description:
  - Runs commands as root inside a directory tree that holds a root file system, for the molecule/rke2 scenario.
author: gpuplatform.rke2 contributors
options:
  remote_addr:
    description: Path of the root directory.
    default: inventory_hostname
    type: str
    vars:
      - name: inventory_hostname
      - name: ansible_host
  chroot_exe:
    description: The chroot binary on the controller.
    default: chroot
    type: str
    vars:
      - name: ansible_chroot_exe
"""

import os
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

display = Display()
BUFSIZE = 65536


class Connection(ConnectionBase):
    transport = "chroot"
    has_pipelining = True
    has_tty = False
    default_user = "root"

    def __init__(self, play_context, new_stdin, *args, **kwargs):
        super(Connection, self).__init__(play_context, new_stdin, *args, **kwargs)
        self.root = None
        self.exe = None

    def _connect(self):
        if self._connected:
            return self
        self.root = self.get_option("remote_addr")
        self.exe = shutil.which(self.get_option("chroot_exe"))
        if os.geteuid() != 0:
            raise AnsibleConnectionFailure("the chroot connection needs root on the controller")
        if not self.exe:
            raise AnsibleConnectionFailure("chroot(8) not found")
        if not os.path.isfile(os.path.join(self.root, "bin", "sh")):
            raise AnsibleConnectionFailure("%s is not a root file system (no /bin/sh)" % self.root)
        display.vvv("chroot into %s" % self.root, host=self.root)
        self._connected = True
        return self

    def _run(self, argv, in_data=None, stdin=None):
        local_cmd = [self.exe, self.root] + argv
        display.vvvv("EXEC %s" % local_cmd, host=self.root)
        proc = subprocess.Popen([to_bytes(a) for a in local_cmd], stdin=stdin if stdin is not None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.communicate(in_data)
        return proc.returncode, out, err

    def exec_command(self, cmd, in_data=None, sudoable=False):
        super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        executable = self._play_context.executable or "/bin/sh"
        return self._run([executable, "-c", cmd], in_data=in_data)

    def put_file(self, in_path, out_path):
        super(Connection, self).put_file(in_path, out_path)
        display.vvv("PUT %s TO %s" % (in_path, out_path), host=self.root)
        with open(to_bytes(in_path), "rb") as source:
            rc, _out, err = self._run(["dd", "of=%s" % out_path, "bs=%d" % BUFSIZE, "status=none"], stdin=source)
        if rc != 0:
            raise AnsibleError("failed to put %s to %s in %s: %s" % (in_path, out_path, self.root, to_text(err)))

    def fetch_file(self, in_path, out_path):
        super(Connection, self).fetch_file(in_path, out_path)
        display.vvv("FETCH %s TO %s" % (in_path, out_path), host=self.root)
        rc, out, err = self._run(["dd", "if=%s" % in_path, "bs=%d" % BUFSIZE, "status=none"], stdin=subprocess.DEVNULL)
        if rc != 0:
            raise AnsibleError("failed to fetch %s from %s: %s" % (in_path, self.root, to_text(err)))
        with open(to_bytes(out_path), "wb") as target:
            target.write(out)

    def close(self):
        self._connected = False
