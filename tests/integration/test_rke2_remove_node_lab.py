"""Issue 38, item 3, the cluster side on the lab's real API server: playbooks/rke2_remove_node.yml takes a node out
for good. Its Node is drained and deleted (the run waits until the API server no longer has it) and its node-password
secret goes too, so that a host reinstalled under the same name is not refused "Node password rejected"; a host that
cannot be reached (the one being replaced) still leaves the cluster, and the run says what is left on it. A second run
finds nothing to do. No kubelet runs for the node (no pods to evict): the eviction path is the node_drain module's,
proven on the lab by the driver upgrade suite."""
import os
import subprocess
import uuid

import yaml
from kubernetes.client.rest import ApiException

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
ANSIBLE_PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")
PLAYBOOK = os.path.join(ROOT, "playbooks", "rke2_remove_node.yml")
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


def _gone(read):
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _run(lab, tmp_path, node):
    inventory = {"all": {
        "vars": {"site_name": "lab-removal", "ansible_python_interpreter": PYTHON},
        "children": {
            "rke2_servers": {"hosts": {"cp-1": {"ansible_connection": "local"},
                                       "cp-2": {"ansible_connection": "local"}}},
            # The host being replaced: nothing answers (ssh to a closed port on this machine).
            "rke2_agents": {"hosts": {node: {"ansible_connection": "ssh", "ansible_host": "127.0.0.1",
                                             "ansible_port": 1, "ansible_ssh_common_args": "-o ConnectTimeout=5"}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
               ANSIBLE_NOCOLOR="1", ANSIBLE_HOME=str(tmp_path / "ansible-home"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    env.pop("KUBECONFIG", None)
    proc = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts.yml"), PLAYBOOK, "-e", "rke2_remove_node=" + node,
         "-e", "rke2_uninstall_confirm=lab-removal", "-e", "rke2_api_kubeconfig=" + lab.kubeconfig,
         "-e", "rke2_api_context=lab", "-e", "rke2_ready_timeout=60"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    return proc.returncode, proc.stdout


def test_a_node_leaves_the_cluster_with_its_password_secret_and_a_second_run_finds_nothing(lab, tmp_path):
    core = lab.core()
    node = "retired-%s" % uuid.uuid4().hex[:6]
    secret = node + ".node-password.rke2"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    core.create_namespaced_secret("kube-system", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret},
                                                  "stringData": {"hash": "$1:stub"}})
    try:
        rc, output = _run(lab, tmp_path, node)
        assert rc == 0, output[-6000:]
        assert _gone(lambda: core.read_node(node)), output[-6000:]
        assert _gone(lambda: core.read_namespaced_secret(secret, "kube-system")), output[-6000:]
        assert "could not be reached: it is out of the cluster" in " ".join(output.split()), output[-6000:]
        assert "changed: [%s -> localhost]" % node in output, output[-6000:]
        rc, output = _run(lab, tmp_path, node)
        assert rc == 0, output[-6000:]
        assert "changed: [%s" % node not in output, output[-6000:]
    finally:
        for read, delete in ((lambda: core.read_node(node), lambda: core.delete_node(node)),
                             (lambda: core.read_namespaced_secret(secret, "kube-system"),
                              lambda: core.delete_namespaced_secret(secret, "kube-system"))):
            if not _gone(read):
                delete()
