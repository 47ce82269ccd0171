"""site.yml as `make site` runs it: step 2 renders the inventory before step 1 uses it, so an edit of
the site file applies in the same run, and the controller's own plays never inherit the hosts'
ansible_become. ansible-playbook on a copy of the example site in a temporary site_root; the hosts
are TEST-NET-1 addresses nothing answers, so step 1 reaches none of them."""
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = "tirosh-home"


def _site_root(tmp_path):
    os.makedirs(str(tmp_path / "sites" / SITE))
    shutil.copy(os.path.join(ROOT, "sites", SITE, "site.yml"), str(tmp_path / "sites" / SITE / "site.yml"))
    return tmp_path


def _playbook(site_root, *args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_TIMEOUT="2",
               ANSIBLE_LOCAL_TEMP=str(site_root / "ansible-tmp"), ANSIBLE_HOME=str(site_root / "ansible-home"))
    inventory = str(site_root / "inventories" / SITE / "hosts.yml")
    proc = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", inventory, "site.yml",
                           "-e", "site_root=%s" % site_root] + list(args),
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return proc.stdout + proc.stderr


def _play_output(output, play_name):
    """The lines of the play named ``play_name``, up to the next play."""
    start = output.index("PLAY [%s]" % play_name)
    end = output.find("PLAY [", start + 1)
    return output[start:end if end >= 0 else len(output)]


def test_step_1_uses_the_inventory_step_2_just_rendered(tmp_path):
    site_root = _site_root(tmp_path)
    output = _playbook(site_root, "--tags", "step1,step2")
    assert os.path.exists(str(site_root / "inventories" / SITE / "hosts.yml")), output
    assert output.index("PLAY [Render the site's inventory") < output.index("PLAY [Configure the hosts' static")
    step1 = _play_output(output, "Configure the hosts' static network settings")
    # The rendered first server, unreachable: step 1 tried it in this run instead of matching no host.
    assert "no hosts matched" not in step1 and "[tirosh-cp-1]" in step1, output


def test_the_inventory_renders_without_the_hosts_become(tmp_path):
    site_root = _site_root(tmp_path)
    _playbook(site_root, "--tags", "step2")
    with open(str(site_root / "inventories" / SITE / "group_vars" / "all.yml")) as handle:
        assert "ansible_become: true" in handle.read()
    # The site's hosts become another user; on localhost that user could not write the inventory.
    output = _playbook(site_root, "--tags", "step2", "-e", "ansible_become_user=nobody")
    render = _play_output(output, "Render the site's inventory from its site file")
    assert "ok: [localhost]" in render and "fatal" not in render, output
