"""Runs the collection's modules against the lab the way Ansible does: a separate Python
process given its arguments as JSON, returning the module's JSON result."""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")


def start_module(name, args, kubeconfig=None):
    """Starts module ``name`` with ``args``; returns the Popen (stdout: the result)."""
    args = dict(args)
    if kubeconfig:
        args.setdefault("kubeconfig", kubeconfig)
    handle = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    handle.close()
    path = os.path.join(ROOT, "plugins", "modules", name + ".py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([COLLECTIONS, ROOT]))
    proc = subprocess.Popen([sys.executable, path, handle.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, universal_newlines=True)
    proc.args_file = handle.name
    return proc


def finish_module(proc):
    out, err = proc.communicate()
    os.unlink(proc.args_file)
    try:
        return json.loads(out)
    except ValueError:
        raise AssertionError("module printed no JSON (rc %s): %s %s" % (proc.returncode, out[-2000:], err[-2000:]))


def run_module(name, args, kubeconfig=None):
    return finish_module(start_module(name, args, kubeconfig))
