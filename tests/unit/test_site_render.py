"""make site/render's pure parts: the facts a site file must give before anything is
rendered (named by their key in the site file), the node label plan, which files a
rendering writes or prunes, and the site_files module writing only what changed."""
import copy
import json
import os

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_inventory as si
from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_render as sr
from tests.conftest import ROOT
from tests.unit.module_harness import run_module
from tests.unit.role_runner import PYTHON, run_playbook

SITE_FILE = os.path.join(ROOT, "sites", "tirosh-home", "site.yml")


def _example():
    with open(SITE_FILE) as handle:
        return yaml.safe_load(handle)


def _host(site, name):
    return [h for h in site["nodes"] if h["name"] == name][0]


# ---------------------------------------------------------------- facts the rendering needs

def test_the_example_site_is_complete():
    site = _example()
    assert si.validate(site, "sites/tirosh-home/site.yml") == []
    assert si.render_problems(site) == []


def test_a_gpu_host_without_its_os_is_named_by_its_key_in_the_site_file():
    site = _example()
    del _host(site, "tirosh-gpu-1")["os"]
    del _host(site, "tirosh-gpu-3")["os"]
    problems = si.render_problems(site)
    assert [p.split(":")[0] for p in problems] == ["nodes[1].os", "nodes[3].os"]
    assert "tirosh-gpu-1 runs the GPU Operator's driver container" in problems[0]
    assert "tirosh-gpu-3 runs the vGPU manager" in problems[1]


def test_a_passthrough_host_and_a_host_driver_need_no_os():
    site = _example()
    del _host(site, "tirosh-gpu-2")["os"]
    assert si.render_problems(site) == []
    site = _example()
    site["gpu_operator"]["driver_enabled"] = False
    del _host(site, "tirosh-gpu-1")["os"]
    assert si.render_problems(site) == []


def test_site_wide_os_tags_stand_in_for_hosts_that_do_not_say():
    site = _example()
    for host in site["nodes"]:
        host.pop("os", None)
    site["gpu_operator"]["driver_os_tags"] = ["ubuntu24.04"]
    assert si.render_problems(site) == []


def test_precompiled_drivers_need_the_kernel_and_vgpu_hosts_the_manager():
    site = _example()
    site["gpu_operator"]["driver_use_precompiled"] = True
    del site["gpu_operator"]["vgpu_manager"]
    problems = si.render_problems(site)
    assert any(p.startswith("nodes[1].kernel: tirosh-gpu-1 runs a precompiled driver") for p in problems), problems
    assert any(p.startswith("gpu_operator.vgpu_manager: is required for the vm-vgpu hosts nodes[3] (tirosh-gpu-3)")
               for p in problems), problems


def test_vm_hosts_need_sandbox_workloads():
    site = _example()
    site["gpu_operator"]["sandbox_workloads"]["enabled"] = False
    problems = si.render_problems(site)
    assert [p.split(":")[0] for p in problems] == ["nodes[2].gpu.workload_config", "nodes[3].gpu.workload_config"]


@pytest.mark.parametrize("key,value,needle", [
    ("os", "Ubuntu 24.04", "nodes[1].os: 'Ubuntu 24.04' is not an OS as the driver images tag it"),
    ("kernel", "latest", "nodes[1].kernel: 'latest' is not a kernel release"),
])
def test_os_and_kernel_are_checked(key, value, needle):
    site = _example()
    _host(site, "tirosh-gpu-1")[key] = value
    with pytest.raises(si.SiteError) as info:
        si.validate(site)
    assert any(needle in p for p in info.value.problems), info.value.problems


def test_the_os_and_kernel_reach_the_gpu_node_contract():
    site = _example()
    _host(site, "tirosh-gpu-1")["kernel"] = "6.8.0-60-generic"
    gpus = si.inventory(site)[0]["all"]["children"]["gpu_nodes"]["hosts"]
    assert gpus["tirosh-gpu-1"]["gpu_os_tag"] == "ubuntu24.04"
    assert gpus["tirosh-gpu-1"]["gpu_kernel_version"] == "6.8.0-60-generic"
    assert "gpu_kernel_version" not in gpus["tirosh-gpu-2"]


def test_a_registry_secret_must_be_a_reference():
    site = _example()
    site["rke2"]["registries"]["configs"] = {"registry.tirosh-home.example:5000": {
        "auth": {"username": "mirror", "password": "hunter2"}}}
    with pytest.raises(si.SiteError) as info:
        si.validate(site)
    assert info.value.problems == [
        'rke2.registries.configs."registry.tirosh-home.example:5000".auth.password: a secret in the site file would '
        "be committed with it: give a reference to a vaulted variable instead, for example "
        "'{{ vault_registry_password }}'"]
    site["rke2"]["registries"]["configs"]["registry.tirosh-home.example:5000"]["auth"]["password"] = \
        "{{ vault_registry_password }}"
    assert si.validate(site) == []


def test_node_keys_point_into_the_site_file():
    assert si.node_keys(_example()) == {"tirosh-cp-1": "nodes[0]", "tirosh-gpu-1": "nodes[1]",
                                        "tirosh-gpu-2": "nodes[2]", "tirosh-gpu-3": "nodes[3]",
                                        "tirosh-spark-1": "nodes[4]", "tirosh-cpu-1": "nodes[5]"}


def test_module_refuses_an_incomplete_site_before_writing_naming_the_key_and_the_command(tmp_path):
    site = _example()
    del _host(site, "tirosh-gpu-1")["os"]
    src = tmp_path / "site.yml"
    src.write_text(yaml.safe_dump(site))
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(tmp_path / "inv"), complete=True,
                                                   source_name="sites/tirosh-home/site.yml",
                                                   rerun="make site/render SITE=tirosh-home"), tmp_path)
    assert rc != 0 and not (tmp_path / "inv").exists()
    assert result["msg"].startswith("sites/tirosh-home/site.yml: nodes[1].os: tirosh-gpu-1 runs")
    assert result["msg"].endswith("Fix the site file, then rerun: make site/render SITE=tirosh-home")
    # Without complete (make inventory/render) the inventory renders: only the site's files need the OS.
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(tmp_path / "inv")), tmp_path)
    assert rc == 0 and result["site_keys"]["tirosh-gpu-1"] == "nodes[1]"


def test_module_returns_the_registries_as_the_site_file_writes_them(tmp_path):
    site = _example()
    site["rke2"]["registries"]["configs"] = {"r.example:5000": {"auth": {"password": "{{ vault_pw }}"}}}
    src = tmp_path / "site.yml"
    src.write_text(yaml.safe_dump(site))
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(tmp_path / "inv")), tmp_path,
                            check_mode=True)
    assert rc == 0 and result["registries"]["configs"]["r.example:5000"]["auth"]["password"] == "{{ vault_pw }}"


def test_module_returns_the_etcd_s3_settings_as_the_site_file_writes_them(tmp_path):
    # playbooks/site_render.yml hands them to the rke2 role: the rendered config.yaml keeps the references.
    site = _example()
    s3 = {"enabled": True, "bucket": "etcd-snapshots", "access_key": "{{ vault_etcd_s3_access_key }}",
          "secret_key": "{{ vault_etcd_s3_secret_key }}"}
    site["rke2"]["etcd_snapshots"] = {"retention": 10, "s3": s3}
    src = tmp_path / "site.yml"
    src.write_text(yaml.safe_dump(site))
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(tmp_path / "inv")), tmp_path,
                            check_mode=True)
    assert rc == 0 and result["etcd_s3"] == s3
    del site["rke2"]["etcd_snapshots"]
    src.write_text(yaml.safe_dump(site))
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(tmp_path / "inv")), tmp_path,
                            check_mode=True)
    assert rc == 0 and result["etcd_s3"] == {}


def test_the_rendered_config_yaml_keeps_the_s3_credentials_references(tmp_path):
    """playbooks/site_render.yml's site check and its rke2 play, as written there, on this machine: the servers'
    config.yaml carries the etcd settings and the site file's references, never a value; the vaulted variables
    need not exist to render."""
    site = _example()
    site["rke2"]["etcd_snapshots"] = {"retention": 10, "s3": {
        "enabled": True, "bucket": "etcd-snapshots", "endpoint": "minio.tirosh-home.example:9000",
        "access_key": "{{ vault_etcd_s3_access_key }}", "secret_key": "{{ vault_etcd_s3_secret_key }}"}}
    os.makedirs(str(tmp_path / "sites" / "tirosh-home"))
    (tmp_path / "sites" / "tirosh-home" / "site.yml").write_text(yaml.safe_dump(site))
    hosts, group_vars = si.inventory(site)
    hosts["all"]["vars"] = dict(group_vars, ansible_python_interpreter=PYTHON)
    with open(os.path.join(ROOT, "playbooks", "site_render.yml")) as handle:
        plays = yaml.safe_load(handle)
    check = dict(plays[0], tasks=plays[0]["tasks"][:1], vars=dict(plays[0]["vars"], site_root=str(tmp_path)))
    keep = {"name": "Keep the rendered files", "ansible.builtin.copy": {
        "content": "{{ rke2_rendered_files | to_json }}", "dest": str(tmp_path) + "/{{ inventory_hostname }}.json",
        "mode": "0600"}}
    rke2_play = dict(plays[1], tasks=plays[1]["tasks"] + [keep])
    rc, output = run_playbook(tmp_path, yaml.safe_dump([check, rke2_play]), hosts)
    assert rc == 0, output

    def config(host):
        with open(str(tmp_path / ("%s.json" % host))) as handle:
            return yaml.safe_load(json.load(handle)["config.yaml"])

    server = config("tirosh-cp-1")
    assert server["etcd-snapshot-retention"] == 10 and server["etcd-s3-bucket"] == "etcd-snapshots"
    assert server["etcd-s3-access-key"] == "{{ vault_etcd_s3_access_key }}"
    assert server["etcd-s3-secret-key"] == "{{ vault_etcd_s3_secret_key }}"
    assert not [key for key in config("tirosh-gpu-1") if key.startswith("etcd-")]


# ---------------------------------------------------------------- the label plan

NODES = [
    {"host": "gpu-1", "name": "gpu-1", "desired": {"nvidia.com/gpu.workload.config": "container",
                                                   "nvidia.com/gpu.deploy.dcgm-exporter": "false"}},
    {"host": "gpu-2", "name": "gpu-2.lab", "desired": {"nvidia.com/gpu.workload.config": "vm-vgpu",
                                                       "nvidia.com/vgpu.config": "A10-12Q"}},
    {"host": "gpu-3", "name": "gpu-3", "desired": {"nvidia.com/gpu.workload.config": "vm-passthrough",
                                                   "nvidia.com/gpu.deploy.operands": "false"}},
]
SETTINGS = [{"host": "gpu-1", "operands_disabled": ["dcgm-exporter"]},
            {"host": "gpu-3", "isolated": True, "operands_disabled": ["vfio-manager"]}]
VALUES = {"sandboxWorkloads": {"enabled": True, "defaultWorkload": "container"}, "vgpuManager": {"enabled": True}}
KEYS = {"gpu-1": "nodes[1]", "gpu-2": "nodes[2]", "gpu-3": "nodes[3]"}


def _plan(**kwargs):
    args = dict(settings=SETTINGS, values=VALUES, site_keys=KEYS, source="sites/x/site.yml", site="x")
    args.update(kwargs)
    text = sr.label_plan(NODES, **args)
    assert text.startswith("# GPU node labels of site x: which node gets which nvidia.com/* labels, and why.\n")
    return text, yaml.safe_load(text)["nodes"]


def test_label_plan_says_which_node_gets_which_label_and_from_which_key():
    plan = _plan()[1]
    assert sorted(plan) == ["gpu-1", "gpu-2.lab", "gpu-3"]
    assert plan["gpu-1"]["set"] == {
        "nvidia.com/gpu.workload.config": {"value": "container", "from": "nodes[1].gpu.workload_config"},
        "nvidia.com/gpu.deploy.dcgm-exporter": {"value": "false", "from": "nodes[1].gpu.operands_disabled"}}
    assert plan["gpu-2.lab"]["host"] == "gpu-2"
    assert plan["gpu-2.lab"]["set"]["nvidia.com/vgpu.config"] == {"value": "A10-12Q", "from": "nodes[2].gpu.vgpu_config"}
    assert plan["gpu-3"]["set"]["nvidia.com/gpu.deploy.operands"]["from"] == "nodes[3].gpu.isolated"


def test_label_plan_shows_what_the_operator_then_runs():
    plan = _plan()[1]
    assert "driver" in plan["gpu-1"]["operands"] and "dcgm-exporter" not in plan["gpu-1"]["operands"]
    assert plan["gpu-1"]["operator_sets"]["nvidia.com/gpu.present"] == "true"
    assert "nvidia.com/gpu.deploy.dcgm-exporter" not in plan["gpu-1"]["operator_sets"]
    assert "vgpu-manager" in plan["gpu-2.lab"]["operands"] and plan["gpu-2.lab"]["workload_config"] == "vm-vgpu"
    assert plan["gpu-3"]["operands"] == []
    assert any("held back" in note for note in plan["gpu-3"]["notes"])


def test_label_plan_with_sandbox_workloads_off_runs_vm_nodes_as_container():
    plan = _plan(values={})[1]
    assert plan["gpu-2.lab"]["workload_config"] == "container"
    assert any("ignores nvidia.com/gpu.workload.config" in note for note in plan["gpu-2.lab"]["notes"])


def test_label_plan_without_a_site_file_names_the_inventory_variables():
    plan = _plan(site_keys={})[1]
    assert plan["gpu-1"]["set"]["nvidia.com/gpu.workload.config"]["from"] == "gpu_workload_config"
    assert "site_key" not in plan["gpu-1"]


def test_label_plan_is_the_same_text_for_the_same_inputs_in_any_order():
    text = _plan()[0]
    shuffled = list(reversed(copy.deepcopy(NODES)))
    assert sr.label_plan(shuffled, settings=SETTINGS, values=VALUES, site_keys=KEYS, source="sites/x/site.yml",
                         site="x") == text


# ---------------------------------------------------------------- which files a rendering writes

def test_plan_files_writes_what_differs_and_prunes_only_managed_leftovers():
    files = {"rke2/a.yaml": "a\n", "kubevirt/gpu-example-x.yaml": "x\n"}
    existing = {"rke2/a.yaml": "a\n", "kubevirt/gpu-example-old.yaml": "old\n", "kubevirt/notes.yaml": "mine\n"}
    write, remove, problems = sr.plan_files(files, existing, ["kubevirt/gpu-example-*.yaml"])
    assert (write, remove, problems) == (["kubevirt/gpu-example-x.yaml"], ["kubevirt/gpu-example-old.yaml"], [])


@pytest.mark.parametrize("path", ["/etc/x", "../x", "a/../../x", ""])
def test_plan_files_refuses_paths_outside_the_folder(path):
    assert sr.plan_files({path: "x"}, {})[2]


def test_site_files_module_writes_once_keeps_mtimes_and_prunes(tmp_path):
    dest = tmp_path / "site"
    args = dict(dest=str(dest), files={"a/one.yaml": "1\n", "b/two.txt": "2\n"}, managed=["a/*.yaml", "b/*.txt"])
    rc, result = run_module("site_files", args, tmp_path)
    assert rc == 0 and result["changed"] and result["written"] == ["a/one.yaml", "b/two.txt"]
    assert oct((dest / "a" / "one.yaml").stat().st_mode & 0o777) == "0o644"
    mtime = (dest / "a" / "one.yaml").stat().st_mtime_ns
    rc, result = run_module("site_files", args, tmp_path)
    assert rc == 0 and not result["changed"] and result["written"] == [] and result["removed"] == []
    assert (dest / "a" / "one.yaml").stat().st_mtime_ns == mtime

    (dest / "a" / "mine.txt").write_text("not rendered\n")
    rc, result = run_module("site_files", dict(args, files={"a/one.yaml": "1\n"}), tmp_path, check_mode=True,
                            diff=True)
    assert rc == 0 and result["changed"] and result["removed"] == ["b/two.txt"] and (dest / "b" / "two.txt").exists()
    assert result["diff"][0]["before"] == "2\n"
    rc, result = run_module("site_files", dict(args, files={"a/one.yaml": "1\n"}), tmp_path)
    assert rc == 0 and result["removed"] == ["b/two.txt"] and not (dest / "b").exists()
    assert (dest / "a" / "mine.txt").exists()
