"""Step 2: site file -> inventories/<site>/. The pure renderer, the module's file
handling, and the committed tirosh-home inventory being what its site file renders."""
import copy
import os

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_inventory as si
from tests.conftest import ROOT
from tests.unit.module_harness import run_module

SITE = {
    "schema": 1,
    "site": "lab-site",
    "network": {"cidr": "192.0.2.0/24", "gateway": "192.0.2.1", "dns_servers": ["192.0.2.53"], "interface": "eno1"},
    "rke2": {"version": "v1.34.1+rke2r1", "artifacts": {"source": "local", "dir": "/srv/rke2"}},
    "gpu_models": {"A10": {"pci_vendor_selector": "10DE:2236", "pci_device_name": "GA102GL [A10]", "memory_gb": 24}},
    "gpu_operator": {"sandbox_workloads": {"enabled": True, "default_workload": "container", "mode": "kubevirt"}},
    "nodes": [
        {"name": "cp-1", "role": "server", "address": "192.0.2.11"},
        {"name": "gpu-1", "role": "agent", "address": "192.0.2.21", "interface": "ens3",
         "gpu": {"workload_config": "container", "model": "A10", "count": 2}},
        {"name": "gpu-2", "role": "agent", "address": "192.0.2.22", "node_name": "gpu-2.lab",
         "gpu": {"workload_config": "vm-passthrough", "model": "A10", "count": 2, "operands_disabled": ["dcgm-exporter"],
                 "isolated": True}},
        {"name": "gpu-3", "role": "agent", "address": "192.0.2.23",
         "gpu": {"workload_config": "vm-vgpu", "pci_device_name": "GA102GL [A10]", "vgpu_config": "A10-12Q"},
         "taints": [{"key": "dedicated", "value": "vdi", "effect": "NoSchedule"}]},
    ],
}


def _site(**changes):
    site = copy.deepcopy(SITE)
    for path, value in changes.items():
        target = site
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        last = keys[-1]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return site


def _problems(site):
    with pytest.raises(si.SiteError) as info:
        si.validate(site)
    return info.value.problems


def test_inventory_groups_follow_roles_and_gpus_in_site_order():
    hosts = si.inventory(SITE)[0]
    children = hosts["all"]["children"]
    assert list(children) == ["rke2_servers", "rke2_agents", "gpu_nodes"]
    assert list(children["rke2_servers"]["hosts"]) == ["cp-1"]
    assert list(children["rke2_agents"]["hosts"]) == ["gpu-1", "gpu-2", "gpu-3"]
    assert list(children["gpu_nodes"]["hosts"]) == ["gpu-1", "gpu-2", "gpu-3"]


def test_host_vars_carry_network_node_name_and_gpu_contract():
    hosts = si.inventory(SITE)[0]
    children = hosts["all"]["children"]
    assert children["rke2_servers"]["hosts"]["cp-1"] == {
        "ansible_host": "192.0.2.11", "host_network_interface": "eno1", "host_network_address": "192.0.2.11/24"}
    agents = children["rke2_agents"]["hosts"]
    assert agents["gpu-1"]["host_network_interface"] == "ens3"
    assert agents["gpu-2"]["k8s_node_name"] == "gpu-2.lab"
    assert "k8s_node_name" not in agents["gpu-1"]
    assert agents["gpu-3"]["rke2_node_taints"] == [{"key": "dedicated", "value": "vdi", "effect": "NoSchedule"}]
    gpus = children["gpu_nodes"]["hosts"]
    assert gpus["gpu-1"] == {"gpu_workload_config": "container", "gpu_model": "A10", "gpu_count": 2}
    assert gpus["gpu-2"] == {"gpu_workload_config": "vm-passthrough", "gpu_model": "A10", "gpu_count": 2,
                             "gpu_operands_disabled": ["dcgm-exporter"], "gpu_node_isolated": True}
    assert gpus["gpu-3"]["gpu_vgpu_config"] == "A10-12Q"


def test_group_vars_hold_the_site_settings():
    group_vars = si.inventory(SITE)[1]
    assert group_vars["site_name"] == "lab-site"
    assert group_vars["rke2_version"] == "v1.34.1+rke2r1"
    assert group_vars["rke2_api_address"] == "192.0.2.11"  # the first server when not given
    assert group_vars["rke2_artifact_source"] == "local" and group_vars["rke2_artifact_dir"] == "/srv/rke2"
    assert group_vars["host_network_gateway"] == "192.0.2.1"
    assert group_vars["host_network_dns_servers"] == ["192.0.2.53"]
    assert "rke2_cni" not in group_vars  # the role's default stands
    assert group_vars["gpu_models"]["A10"]["pci_vendor_selector"] == "10DE:2236"
    assert group_vars["gpu_operator_sandbox_workloads"]["enabled"] is True


def test_an_explicit_api_address_wins():
    group_vars = si.inventory(_site(rke2__api_address="192.0.2.10"))[1]
    assert group_vars["rke2_api_address"] == "192.0.2.10"


def test_an_api_vip_becomes_the_api_address_and_must_lie_in_the_network():
    group_vars = si.inventory(_site(rke2__api_vip="192.0.2.10"))[1]
    assert group_vars["rke2_api_vip"] == "192.0.2.10" and group_vars["rke2_api_address"] == "192.0.2.10"
    assert "rke2_api_vip" not in si.inventory(SITE)[1]
    assert ("rke2.api_vip: 198.51.100.10 is outside network.cidr 192.0.2.0/24: kube-vip announces it on the nodes' "
            "own subnet") in _problems(_site(rke2__api_vip="198.51.100.10"))
    assert "rke2.api_vip: 'vip' is not an IP address" in _problems(_site(rke2__api_vip="vip"))


def test_valid_site_with_one_server_has_no_warning():
    assert si.validate(SITE) == []


def test_two_servers_warn_about_etcd_quorum():
    site = _site()
    site["nodes"].insert(1, {"name": "cp-2", "role": "server", "address": "192.0.2.12"})
    warnings = si.validate(site)
    assert len(warnings) == 1 and "etcd" in warnings[0]
    hosts = si.inventory(site)[0]
    assert list(hosts["all"]["children"]["rke2_servers"]["hosts"]) == ["cp-1", "cp-2"]


@pytest.mark.parametrize("changes,needle", [
    (dict(nodes__1__gpu__workload_config="vm-vgpuu"), "nodes[1].gpu.workload_config: 'vm-vgpuu' is not one of"),
    (dict(nodes__2__gpu={"workload_config": "vm-passthrough"}), "nodes[2].gpu.pci_device_name: is required"),
    (dict(gpu_models=None, nodes__2__gpu={"workload_config": "vm-passthrough", "model": "A10"}),
     "nodes[2].gpu.pci_device_name: is required"),
    (dict(nodes__3__gpu={"workload_config": "vm-vgpu"}), "nodes[3].gpu.vgpu_config: is required"),
    (dict(nodes__3__gpu={"workload_config": "vm-vgpu", "vgpu_config": "A10"}), "is not a vGPU profile"),
    (dict(nodes__1__gpu={"workload_config": "container", "vgpu_config": "A10-12Q"}), "only used with workload_config"),
    (dict(nodes__1__gpu={"workload_config": "container", "count": 0}), "nodes[1].gpu.count: must be a whole number"),
    (dict(nodes__1__address="198.51.100.7"), "nodes[1].address: 198.51.100.7 is outside network.cidr"),
    (dict(nodes__1__address="192.0.2.1"), "nodes[1].address: 192.0.2.1 is the gateway"),
    (dict(nodes__1__address="192.0.2.255"), "network or broadcast address"),
    (dict(nodes__1__address="192.0.2.11"), "nodes[1].address: 192.0.2.11 is also nodes[0]'s"),
    (dict(nodes__1__name="cp-1"), "nodes[1].name: cp-1 is also nodes[0]'s"),
    (dict(nodes__1__name="GPU_1"), "nodes[1].name: host name 'GPU_1' is not a valid Kubernetes node name"),
    (dict(nodes__1__role="worker"), "nodes[1].role: 'worker' is not one of server, agent"),
    (dict(nodes__1__gpus={}), "nodes[1].gpus: unknown key"),
    (dict(nodes__0__role="agent"), "nodes: no node has role server"),
    (dict(nodes__1__taints=[{"key": "a", "effect": "Never"}]), "nodes[1].taints[0]: effect 'Never' is not one of"),
    (dict(nodes__1__labels={"bad key!": "x"}), "nodes[1].labels: 'bad key!' is not a valid label"),
    (dict(network__gateway="198.51.100.1"), "network.gateway: 198.51.100.1 is outside 192.0.2.0/24"),
    (dict(network__cidr="192.0.2.1/24"), "network.cidr: 192.0.2.1/24 has host bits set"),
    (dict(network__dns_servers=["dns.example"]), "network.dns_servers[0]: 'dns.example' is not an IP address"),
    (dict(rke2__version="1.34"), "rke2.version '1.34' is not an RKE2 release version"),
    (dict(rke2__cni="weave"), "rke2.cni 'weave': expected one of"),
    (dict(rke2__artifacts={"source": "local"}), "rke2.artifacts.dir: is required when source is local"),
    (dict(rke2__artifacts={"source": "usb"}), "rke2.artifacts.source: 'usb' is not one of online, local"),
    (dict(site="Tirosh Home"), "site: 'Tirosh Home' must be a lower-case DNS label"),
    (dict(nodes__1__gpu={"workload_config": "container", "model": "A100"}), "nodes[1].gpu.model: 'A100' is not one of"),
    (dict(nodes__2__gpu={"workload_config": "vm-passthrough", "model": "A10", "operands_disabled": ["dcgm-exportr"]}),
     "nodes[2].gpu.operands_disabled[0]: 'dcgm-exportr' is not an operand"),
    (dict(nodes__2__gpu={"workload_config": "container", "isolated": "yes"}), "nodes[2].gpu.isolated: must be true"),
    (dict(gpu_models={"A10": {"pci_vendor_selector": "10de-2236", "pci_device_name": "x", "memory_gb": 24}}),
     "gpu_models.A10.pci_vendor_selector: '10de-2236' is not VVVV:DDDD"),
    (dict(gpu_models={"A10": {"pci_device_name": "x"}}), "gpu_models.A10.pci_vendor_selector: is required"),
    (dict(gpu_operator={"Sandbox-Workloads": {}}), "gpu_operator.Sandbox-Workloads: is not a variable name"),
    (dict(rke2__config_extra={"etcd-s3-secret-key": "s3cr3t"}),
     "rke2.config_extra.etcd-s3-secret-key: a secret in the site file would be committed with it and shown by "
     "--diff: give a reference to a vaulted variable instead, for example '{{ vault_etcd_s3_secret_key }}'"),
    (dict(rke2__config_extra={"datastore-endpoint": "postgres://rke2:pw@db:5432/rke2"}),
     "rke2.config_extra.datastore-endpoint: a secret in the site file"),
    (dict(rke2__config_extra={"agent-token+": "K10abc::node:pw"}), "rke2.config_extra.agent-token+: a secret"),
    (dict(gpu_operator={"version": "v26.3.9"}),
     "gpu_operator.version: v26.3.9 is not a version this collection knows (v26.3.2, v26.3.3, v26.7.0)"),
    (dict(gpu_operator={"version": "v27.1.0"}), "gpu_operator.version: v27.1.0 is not on a supported chart line"),
    (dict(gpu_operator={"version": "latest"}), "gpu_operator.version: 'latest' is not a chart version"),
    (dict(gpu_operator={"version": 26.7}), "gpu_operator.version: must be a chart version string"),
    (dict(gpu_operator={"chart_version": "v26.7.1"}), "gpu_operator.chart_version: v26.7.1 is not a version"),
    (dict(gpu_operator={"version": "v26.7.0", "chart_version": "v26.3.3"}),
     "gpu_operator.version: 'v26.7.0' and gpu_operator.chart_version 'v26.3.3' disagree"),
    (dict(hosts=[]), "hosts: unknown key"),
    (dict(nodes__1__arch="aarch64"), "nodes[1].arch: 'aarch64' is not one of amd64, arm64 (as kubernetes.io/arch"),
    (dict(schema=2), "schema: version 2 is not supported"),
])
def test_each_problem_names_its_key(changes, needle):
    problems = _problems(_site(**changes))
    assert any(needle in p for p in problems), problems


def test_a_hosts_architecture_becomes_rke2_arch_and_its_image_archives():
    site = _site(nodes__1__arch="arm64", nodes__0__arch="amd64",
                 rke2__artifacts={"source": "local", "dir": "/srv/airgap",
                                  "images": ["rke2-images-core.linux-amd64.tar.zst", "rke2-images-canal.linux-amd64.tar.zst"]})
    hosts, group_vars = si.inventory(site)
    agents, servers = hosts["all"]["children"]["rke2_agents"]["hosts"], hosts["all"]["children"]["rke2_servers"]["hosts"]
    assert agents["gpu-1"]["rke2_arch"] == "arm64"
    assert agents["gpu-1"]["rke2_images"] == ["rke2-images-core.linux-arm64.tar.zst",
                                              "rke2-images-canal.linux-arm64.tar.zst"]
    # A host of the list's own architecture keeps the site-wide list; one that does not say gets nothing.
    assert servers["cp-1"]["rke2_arch"] == "amd64" and "rke2_images" not in servers["cp-1"]
    assert "rke2_arch" not in agents["gpu-2"]
    assert group_vars["rke2_images"] == ["rke2-images-core.linux-amd64.tar.zst", "rke2-images-canal.linux-amd64.tar.zst"]


def test_a_site_with_arm64_hosts_gives_every_hosts_architecture():
    site = _site(nodes__1__arch="arm64")
    assert si.validate(site) == []
    problems = si.render_problems(site)
    assert "nodes[0].arch: cp-1 does not give its architecture, and the site has arm64 hosts: give every host's " \
           "(amd64, arm64)" in problems
    assert [p for p in problems if p.startswith("nodes[1].arch")] == []
    # amd64 alone needs no declaration from the others.
    assert not [p for p in si.render_problems(_site(nodes__1__arch="amd64")) if ".arch:" in p]


def test_every_problem_is_reported_at_once():
    problems = _problems(_site(nodes__1__role="worker", nodes__2__address="10.0.0.1", rke2__version="latest"))
    assert len(problems) == 3, problems


@pytest.mark.parametrize("operator", [{"version": "v26.7.0"}, {"version": "26.3.3"}, {"chart_version": "v26.3.3"},
                                      {"version": "v26.7.0", "chart_version": "26.7.0"}])
def test_a_known_operator_version_passes_to_the_role(operator):
    site = _site(gpu_operator=operator)
    si.validate(site)
    group_vars = si.inventory(site)[1]
    assert all(group_vars["gpu_operator_" + key] == "v" + value.lstrip("v") for key, value in operator.items())


def test_a_secret_config_key_given_as_a_vault_reference_passes():
    site = _site(rke2__config_extra={"datastore-endpoint": "{{ vault_datastore_endpoint }}"})
    assert not [p for p in si.validate(site) if "config_extra" in p]


# rke2.etcd_snapshots: the servers' snapshot schedule, retention and S3 settings, as the rke2 role's variables.
ETCD_SNAPSHOTS = {"schedule_cron": "0 */6 * * *", "retention": 10, "compress": True,
                  "s3": {"enabled": True, "endpoint": "minio.lab-site.example:9000", "bucket": "etcd-snapshots",
                         "bucket_lookup_type": "path", "access_key": "{{ vault_etcd_s3_access_key }}",
                         "secret_key": "{{ vault_etcd_s3_secret_key }}", "retention": 14}}


def test_etcd_snapshots_become_the_rke2_roles_variables():
    site = _site(rke2__etcd_snapshots=ETCD_SNAPSHOTS)
    assert si.validate(site) == []
    group_vars = si.inventory(site)[1]
    assert group_vars["rke2_etcd_snapshot_schedule_cron"] == "0 */6 * * *"
    assert group_vars["rke2_etcd_snapshot_retention"] == 10 and group_vars["rke2_etcd_snapshot_compress"] is True
    assert group_vars["rke2_etcd_s3"] == ETCD_SNAPSHOTS["s3"]
    # What a site leaves out keeps the role's defaults (RKE2's): no variable.
    group_vars = si.inventory(_site(rke2__etcd_snapshots={"retention": 3}))[1]
    assert group_vars["rke2_etcd_snapshot_retention"] == 3
    assert not [key for key in group_vars if key.startswith("rke2_etcd_") and key != "rke2_etcd_snapshot_retention"]
    assert not [key for key in si.inventory(SITE)[1] if key.startswith("rke2_etcd_")]


@pytest.mark.parametrize("snapshots, needle", [
    ("daily", "rke2.etcd_snapshots must be a mapping of compress, retention, schedule_cron, s3, got 'daily'"),
    ({"schedule": "0 3 * * *"}, "rke2.etcd_snapshots.schedule: unknown setting"),
    ({"schedule_cron": "0 3 * *"}, "rke2.etcd_snapshots.schedule_cron '0 3 * *' must be a cron schedule of five "
                                   "fields"),
    ({"schedule_cron": 3}, "rke2.etcd_snapshots.schedule_cron 3 must be a cron schedule"),
    ({"retention": 0}, "rke2.etcd_snapshots.retention 0 must be a whole number of snapshots to keep, at least 1"),
    ({"retention": "5"}, "rke2.etcd_snapshots.retention '5' must be a whole number"),
    ({"compress": "yes"}, "rke2.etcd_snapshots.compress 'yes' must be true or false"),
    ({"s3": True}, "rke2.etcd_snapshots.s3 must be a mapping of S3 settings"),
    ({"s3": {"enabled": True}}, "rke2.etcd_snapshots.s3.bucket is required with enabled: true"),
    ({"s3": {"bucket": "etcd-snapshots"}}, "rke2.etcd_snapshots.s3.enabled is required"),
    ({"s3": {"enabled": True, "bucket": "etcd-snapshots", "endpoint": "http://minio.example:9000"}},
     "rke2.etcd_snapshots.s3.endpoint 'http://minio.example:9000' must be the S3 endpoint's host[:port]"),
    ({"s3": {"enabled": True, "bucket": "etcd-snapshots", "timeout": 300}},
     "rke2.etcd_snapshots.s3.timeout must be a string, got 300"),
    ({"s3": {"enabled": "yes", "bucket": "etcd-snapshots"}}, "rke2.etcd_snapshots.s3.enabled 'yes' must be true"),
    ({"s3": {"enabled": True, "bucket": "etcd-snapshots", "regoin": "eu-west-1"}},
     "rke2.etcd_snapshots.s3.regoin: unknown setting"),
])
def test_each_bad_etcd_snapshot_setting_names_its_key(snapshots, needle):
    problems = _problems(_site(rke2__etcd_snapshots=snapshots))
    assert [p for p in problems if p.startswith(needle)], problems


@pytest.mark.parametrize("key", ["access_key", "secret_key", "session_token"])
def test_an_s3_credential_must_be_a_vault_reference(key):
    s3 = dict(ETCD_SNAPSHOTS["s3"], **{key: "AKIAPLAINVALUE"})
    problems = _problems(_site(rke2__etcd_snapshots={"s3": s3}))
    assert problems == [
        "rke2.etcd_snapshots.s3.%s: a secret in the site file would be committed with it and shown by --diff: give a "
        "reference to a vaulted variable instead, for example '{{ vault_etcd_s3_%s }}'" % (key, key)]
    assert "AKIAPLAINVALUE" not in " ".join(problems)
    # A value of another type is refused without showing it either.
    problems = _problems(_site(rke2__etcd_snapshots={"s3": dict(s3, **{key: 31337})}))
    assert problems == ["rke2.etcd_snapshots.s3.%s must be a string, not int" % key]


def test_config_extra_cannot_set_what_etcd_snapshots_types():
    problems = _problems(_site(rke2__config_extra={"etcd-snapshot-retention": 10, "etcd-s3-bucket": "b"}))
    assert problems == [
        "rke2.config_extra.etcd-s3-bucket: is set from rke2.etcd_snapshots (s3.bucket): give it there",
        "rke2.config_extra.etcd-snapshot-retention: is set from rke2.etcd_snapshots (retention): give it there"]


def test_the_rke2_role_hides_the_same_secret_keys_the_module_knows():
    with open(os.path.join(ROOT, "roles", "rke2", "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    assert tuple(role_vars["_rke2_secret_config_keys"]) == rke2.SECRET_CONFIG_KEYS


def test_render_is_yaml_with_a_do_not_edit_header():
    files = si.render(SITE, "sites/lab-site/site.yml", yaml.safe_dump)
    assert sorted(files) == ["group_vars/all.yml", "hosts.yml"]
    for text in files.values():
        assert text.startswith("# Rendered from sites/lab-site/site.yml")
    assert yaml.safe_load(files["hosts.yml"]) == si.inventory(SITE)[0]


# The module and the committed example.

def test_module_writes_once_and_fails_before_writing_on_a_bad_site(tmp_path):
    src = tmp_path / "site.yml"
    src.write_text(yaml.safe_dump(SITE))
    dest = tmp_path / "inventory"
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(dest)), tmp_path)
    assert rc == 0 and result["changed"] and result["files"] == ["group_vars/all.yml", "hosts.yml"]
    assert result["groups"]["gpu_nodes"] == ["gpu-1", "gpu-2", "gpu-3"]
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(dest)), tmp_path)
    assert rc == 0 and not result["changed"] and result["files"] == []

    bad = _site(nodes__1__gpu__workload_config="gpu")
    src.write_text(yaml.safe_dump(bad))
    before = (dest / "hosts.yml").read_text()
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(dest)), tmp_path)
    assert rc != 0 and "nodes[1].gpu.workload_config" in result["msg"]
    assert (dest / "hosts.yml").read_text() == before


def test_module_check_mode_reports_without_writing(tmp_path):
    src = tmp_path / "site.yml"
    src.write_text(yaml.safe_dump(SITE))
    rc, result = run_module("site_inventory", dict(src=str(src), dest=str(tmp_path / "inv")), tmp_path,
                            check_mode=True, diff=True)
    assert rc == 0 and result["changed"] and not (tmp_path / "inv").exists()
    assert "gpu_workload_config: vm-passthrough" in result["diff"][1]["after"]


def test_committed_tirosh_home_inventory_is_what_its_site_file_renders(tmp_path):
    src = os.path.join(ROOT, "sites", "tirosh-home", "site.yml")
    dest = os.path.join(ROOT, "inventories", "tirosh-home")
    rc, result = run_module("site_inventory", dict(src=src, dest=dest, source_name="sites/tirosh-home/site.yml"),
                            tmp_path, check_mode=True)
    assert rc == 0 and result["files"] == [], "inventories/tirosh-home is stale: run make inventory/render"
    assert result["groups"]["rke2_servers"] == ["tirosh-cp-1"]
    hosts = yaml.safe_load(open(os.path.join(dest, "hosts.yml")))
    gpus = hosts["all"]["children"]["gpu_nodes"]["hosts"]
    assert sorted(g["gpu_workload_config"] for g in gpus.values()) == [
        "container", "container", "vm-passthrough", "vm-vgpu"]
    # The DGX Spark: arm64, its own driver, RKE2's image archives for its architecture.
    spark = hosts["all"]["children"]["rke2_agents"]["hosts"]["tirosh-spark-1"]
    assert (spark["rke2_arch"], spark["rke2_images"]) == ("arm64", ["rke2-images-core.linux-arm64.tar.zst",
                                                                    "rke2-images-canal.linux-arm64.tar.zst"])
    assert gpus["tirosh-spark-1"] == {"gpu_workload_config": "container", "gpu_model": "GB10", "gpu_count": 1,
                                      "gpu_operands_disabled": ["driver"], "gpu_os_tag": "ubuntu24.04"}
