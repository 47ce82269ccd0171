"""ansible-playbook as `make` runs it, on this machine (ansible_connection local), for the unit tests
of the rke2 role's tasks: an inventory and a playbook in a temporary folder, the checkout's
collection, the test's own ANSIBLE_HOME."""
import os
import subprocess

import yaml

from tests.conftest import ROOT

PYTHON = os.path.join(ROOT, ".venv", "bin", "python")

_ENTRY_POINT = """    - name: The rke2 role's %s tasks
      ansible.builtin.include_role:
        name: gpuplatform.rke2.rke2
        tasks_from: %s
"""


def role_playbook(hosts, entry_points, extra_tasks=""):
    """A play on ``hosts`` that runs the rke2 role's ``entry_points`` (task files) in turn, then
    ``extra_tasks`` (YAML text, indented as tasks of the play)."""
    tasks = "".join(_ENTRY_POINT % (entry, entry) for entry in entry_points)
    return ("- name: The rke2 role's %s\n  hosts: %s\n  gather_facts: false\n  tasks:\n%s%s"
            % (", ".join(entry_points), hosts, tasks, extra_tasks))


def run_playbook(tmp_path, playbook, inventory, *args):
    """(rc, stdout + stderr) of ansible-playbook on ``playbook`` (a path, or the text of one) with
    ``inventory`` (a mapping, written as hosts.yml)."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    if "\n" in playbook:
        (tmp_path / "play.yml").write_text(playbook)
        playbook = str(tmp_path / "play.yml")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_HOME=str(tmp_path / "ansible-home"))
    proc = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           playbook] + list(args), cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout + proc.stderr
