# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writing a text file the way the collection's file-writing modules do: a temporary
file in the target's directory, the final mode set before the content lands, and an
atomic rename, so a reader never sees half a file nor a secret with the wrong mode."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile


def write_atomically(module, path, text, mode, directory_mode=0o755):
    """Replace ``path`` with ``text`` (mode ``mode``), creating its directory
    (``directory_mode``) when missing. ``module`` is the AnsibleModule: its
    ``atomic_move`` keeps SELinux contexts right."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, directory_mode)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    # atomic_move gives the new file the old one's mode when there was one.
    os.chmod(path, mode)
