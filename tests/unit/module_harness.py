"""Runs a module of this collection the way Ansible does: a separate Python process
reading its arguments from a JSON file, answering one JSON object."""
import json
import os
import subprocess
import sys

from tests.conftest import COLLECTIONS


def run_module(name, args, tmp_path, check_mode=False, diff=False):
    """(rc, result dict) of ``gpuplatform.rke2.<name>`` called with ``args``."""
    payload = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff,
                   _ansible_remote_tmp=str(tmp_path), _ansible_keep_remote_files=False)
    args_file = tmp_path / ("%s-args.json" % name)
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": payload}))
    env = dict(os.environ, PYTHONPATH=COLLECTIONS)
    proc = subprocess.run(
        [sys.executable, "-m", "ansible_collections.gpuplatform.rke2.plugins.modules." + name, str(args_file)],
        capture_output=True, text=True, env=env, cwd=str(tmp_path), check=False,
    )
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("module %s printed no JSON (rc %d): %s %s" % (name, proc.returncode, proc.stdout, proc.stderr))
    return proc.returncode, result
