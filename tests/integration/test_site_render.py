"""make site/render on copies of the example site (issue 16), run as a user runs it: a
second run changes nothing and keeps every file's mtime, a missing fact is refused naming
its key in the site file and the command to rerun with nothing written, and a changed
value in the site file changes exactly the files that value reaches. Needs no lab."""

import os
import shutil
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SITE = "tirosh-home"
SITE_FILE = os.path.join(ROOT, "sites", SITE, "site.yml")


def render(root, *args):
    """``make site/render SITE=tirosh-home`` with sites/ and inventories/ under ``root``."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    return subprocess.run(["make", "-s", "site/render", "SITE=%s" % SITE, "SITE_ROOT=%s" % root] + list(args),
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)


def site_copy(root, edit=None):
    """A folder holding only the example's site file (after ``edit(site)`` on its data)."""
    os.makedirs(os.path.join(root, "sites", SITE))
    target = os.path.join(root, "sites", SITE, "site.yml")
    if edit is None:
        shutil.copy(SITE_FILE, target)
    else:
        with open(SITE_FILE) as handle:
            site = yaml.safe_load(handle)
        edit(site)
        with open(target, "w") as handle:
            yaml.safe_dump(site, handle, sort_keys=False)
    return root


def files_of(root):
    """{path relative to root: (text, mtime_ns)} of everything rendered (the site file aside)."""
    found = {}
    for top in ("sites", "inventories"):
        for base, _dirs, names in os.walk(os.path.join(root, top)):
            for name in names:
                path = os.path.join(base, name)
                relative = os.path.relpath(path, root)
                if relative == os.path.join("sites", SITE, "site.yml"):
                    continue
                with open(path) as handle:
                    found[relative] = (handle.read(), os.stat(path).st_mtime_ns)
    return found


def _recap_changed(output):
    return sum(int(part.split("=")[1]) for line in output.splitlines() if "changed=" in line and " : " in line
               for part in line.split() if part.startswith("changed="))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The example site rendered from scratch into a folder of its own."""
    root = site_copy(str(tmp_path_factory.mktemp("base")))
    run = render(root)
    assert run.returncode == 0, run.stdout[-6000:]
    return root, files_of(root)


def test_a_fresh_render_is_the_committed_example(base):
    root, files = base
    committed = files_of(ROOT)
    mine = dict((p, t) for p, (t, _mtime) in files.items())
    theirs = dict((p, t) for p, (t, _mtime) in committed.items() if p.startswith(("sites/%s/" % SITE, "inventories/%s/" % SITE)))
    assert mine == theirs, "the committed example differs from a fresh render: run make site/render SITE=%s" % SITE


def test_the_site_renders_every_file_the_issue_names(base):
    files = base[1]
    names = set(os.path.relpath(p, os.path.join("sites", SITE)) for p in files if p.startswith("sites/"))
    assert {"rke2/gpu-operator.helmchart.yaml", "argocd/platform/gpu-operator.application.yaml",
            "kubevirt/permitted-host-devices.yaml", "labels/gpu-node-labels.yaml", "airgap/images.txt",
            "rke2/hosts/tirosh-cp-1/config.yaml", "rke2/hosts/tirosh-gpu-1/registries.yaml"} <= names
    # Secrets stay references: no host's config.yaml carries a token, joining hosts name their token file.
    config = yaml.safe_load(files["sites/%s/rke2/hosts/tirosh-gpu-1/config.yaml" % SITE][0])
    assert config["token-file"] == "/etc/rancher/rke2/cluster-token" and "token" not in config
    assert "token-file" not in yaml.safe_load(files["sites/%s/rke2/hosts/tirosh-cp-1/config.yaml" % SITE][0])


def test_a_second_render_changes_nothing_and_keeps_every_mtime(base):
    root, files = base
    run = render(root)
    assert run.returncode == 0, run.stdout[-6000:]
    assert _recap_changed(run.stdout) == 0, run.stdout[-6000:]
    assert files_of(root) == files


def test_a_missing_fact_is_refused_by_its_site_key_before_anything_is_written(tmp_path):
    def no_os(site):
        for host in site["nodes"]:
            if host["name"] == "tirosh-gpu-1":
                del host["os"]
    root = site_copy(str(tmp_path), no_os)
    run = render(root)
    assert run.returncode != 0
    assert "sites/tirosh-home/site.yml: nodes[1].os: tirosh-gpu-1 runs the GPU Operator's driver container" \
        in run.stdout, run.stdout[-4000:]
    assert "Fix the site file, then rerun: make site/render SITE=tirosh-home" in run.stdout
    assert files_of(root) == {}


def test_a_registry_secret_given_as_a_reference_stays_one(tmp_path):
    def with_credentials(site):
        site["rke2"]["registries"]["configs"] = {"registry.tirosh-home.example:5000": {
            "auth": {"username": "mirror", "password": "{{ vault_registry_password }}"}}}
    root = site_copy(str(tmp_path), with_credentials)
    run = render(root)
    assert run.returncode == 0, run.stdout[-6000:]
    files = files_of(root)
    for host in ("tirosh-cp-1", "tirosh-gpu-1"):
        registries = yaml.safe_load(files["sites/%s/rke2/hosts/%s/registries.yaml" % (SITE, host)][0])
        assert registries["configs"]["registry.tirosh-home.example:5000"]["auth"]["password"] == \
            "{{ vault_registry_password }}"


def _host(site, name):
    return [h for h in site["nodes"] if h["name"] == name][0]


def _set_os(site):
    _host(site, "tirosh-gpu-1")["os"] = "ubuntu22.04"


def _set_zone(site):
    _host(site, "tirosh-cpu-1")["labels"]["topology.kubernetes.io/zone"] = "shelf-3"


def _set_profile(site):
    _host(site, "tirosh-gpu-3")["gpu"]["vgpu_config"] = "A10-24Q"


def _set_vgpu_version(site):
    site["gpu_operator"]["vgpu_manager"]["version"] = "580.126.21"


SITE_DIR = "sites/%s/" % SITE
HOSTS = "inventories/%s/hosts.yml" % SITE
GROUP_VARS = "inventories/%s/group_vars/all.yml" % SITE
OPERATOR = [SITE_DIR + "rke2/gpu-operator.helmchart.yaml", SITE_DIR + "argocd/platform/gpu-operator.application.yaml"]


@pytest.mark.parametrize("edit,reached", [
    # A GPU host's OS: its inventory entry and the driver image of the air-gap plan, nothing else.
    (_set_os, [HOSTS, SITE_DIR + "airgap/images.txt"]),
    # A CPU host's label: its inventory entry and its RKE2 config.yaml only.
    (_set_zone, [HOSTS, SITE_DIR + "rke2/hosts/tirosh-cpu-1/config.yaml"]),
    # A vGPU profile: the inventory, the label plan, KubeVirt's devices and its example VM (renamed).
    (_set_profile, [HOSTS, SITE_DIR + "labels/gpu-node-labels.yaml", SITE_DIR + "kubevirt/permitted-host-devices.yaml",
                    SITE_DIR + "kubevirt/gpu-example-nvidia-a10-12q.yaml",
                    SITE_DIR + "kubevirt/gpu-example-nvidia-a10-24q.yaml"]),
    # The vGPU manager image: the site's settings, the chart values (HelmChart, Application) and the plan.
    (_set_vgpu_version, [GROUP_VARS] + OPERATOR + [SITE_DIR + "airgap/images.txt"]),
], ids=["gpu-host-os", "cpu-host-label", "vgpu-profile", "vgpu-manager-version"])
def test_a_changed_value_changes_exactly_the_files_it_reaches(base, tmp_path, edit, reached):
    before = base[1]
    root = site_copy(str(tmp_path), edit)
    run = render(root)
    assert run.returncode == 0, run.stdout[-6000:]
    after = files_of(root)
    texts_before = dict((p, t) for p, (t, _mtime) in before.items())
    texts_after = dict((p, t) for p, (t, _mtime) in after.items())
    changed = sorted(p for p in set(texts_before) | set(texts_after) if texts_before.get(p) != texts_after.get(p))
    assert changed == sorted(reached)
