"""The gpu_preflight role end to end: ansible-playbook against localhost hosts whose facts
come from fake host trees (gpu_host_facts_root)."""
import json
import os
import re
import subprocess
import sys

import yaml

from tests.unit.fixtures.hosts.fake_host import (RKE2_CIS_PSS, a10_host, cis_host, h100_preinstalled_host)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = os.path.join(ROOT, "playbooks", "gpu_preflight.yml")
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def inventory(tmp_path, gpu_nodes, servers=None, **group_vars):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "gpu_preflight_become": False}
    local.update(group_vars)
    data = {"all": {"vars": local, "children": {
        "gpu_nodes": {"hosts": gpu_nodes},
        "rke2_servers": {"hosts": servers or {}},
    }}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def playbook(inventory_path, *args, playbook_path=PLAYBOOK):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=os.path.join(os.path.dirname(inventory_path), "ansible-tmp"),
               ANSIBLE_HOME=os.path.join(os.path.dirname(inventory_path), "ansible-home"))
    proc = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", inventory_path,
                           playbook_path] + list(args), cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    recap = dict((host, (int(changed), int(unreachable), int(failed)))
                 for host, changed, unreachable, failed in RECAP.findall(proc.stdout))
    return proc.returncode, proc.stdout + proc.stderr, recap


def test_refusals_name_host_and_fact_and_render_the_psa_fix(tmp_path):
    hosts = {
        "gpu-vm": {"gpu_host_facts_root": a10_host(tmp_path / "vm", iommu=False).root,
                   "gpu_workload_config": "vm-passthrough"},
        "gpu-cis": {"gpu_host_facts_root": cis_host(tmp_path / "cis", psa_file=None).root},
    }
    rc, out, recap = playbook(inventory(tmp_path, hosts, gpu_operator_sandbox_workloads={"enabled": True}))
    assert rc == 2, out
    assert "GPU preflight refused gpu-vm:\n- iommu.enabled: vm-passthrough needs the IOMMU" in out
    assert "GPU preflight refused gpu-cis:\n- rke2.profile: RKE2 profile cis enforces Pod Security" in out
    assert "/etc/rancher/rke2/gpu-operator-pss.yaml" in out
    assert "namespaces:\n" in out and "  - gpu-operator\n" in out
    assert recap["gpu-vm"] == (0, 0, 1) and recap["gpu-cis"] == (0, 0, 1)


def test_the_chart_decisions_are_the_gpu_operator_roles_variables(tmp_path):
    old = a10_host(tmp_path / "old")
    old.file("/var/lib/rancher/rke2/agent/containerd/containerd.log",
             'level=info msg="starting containerd" revision=x version=v1.7.27-k3s1\n')
    hosts = {"gpu-old": {"gpu_host_facts_root": old.root},
             "gpu-cis": {"gpu_host_facts_root": cis_host(tmp_path / "cis", psa_file=None).root}}
    rc, out, recap = playbook(inventory(tmp_path, hosts, gpu_operator_nri_plugin_enabled=True,
                                        gpu_operator_extra_values={"psa": {"enabled": True}}))
    assert rc == 2, out
    assert "GPU preflight refused gpu-old:\n- containerd.version:" in out
    # psa.enabled through the extra values: the operator labels its namespace, so the cis profile passes.
    assert "refused gpu-cis" not in out and "rke2.profile" not in out
    assert recap["gpu-old"] == (0, 0, 1) and recap["gpu-cis"] == (0, 0, 0)


def test_clean_hosts_pass_with_no_change_twice(tmp_path):
    exempting = RKE2_CIS_PSS.replace("tigera-operator]", "tigera-operator, gpu-operator]")
    hosts = {"gpu-a10": {"gpu_host_facts_root": a10_host(tmp_path / "a10").root,
                         "gpu_workload_config": "container", "gpu_model": "A10", "gpu_count": 2,
                         "gpu_pci_device_name": "GA102GL [A10]"}}
    servers = {"server-1": {"gpu_host_facts_root": cis_host(tmp_path / "server", psa_file=exempting).root}}
    path = inventory(tmp_path, hosts, servers)
    for _run in range(2):
        rc, out, recap = playbook(path)
        assert rc == 0, out
        assert recap == {"gpu-a10": (0, 0, 0), "server-1": (0, 0, 0)}, out
        assert '"ok": true' in out


def test_follow_hosts_sets_the_driver_decisions_and_writes_the_report(tmp_path):
    hosts = {"gpu-h100": {"gpu_host_facts_root": h100_preinstalled_host(tmp_path / "h100").root},
             "gpu-a10": {"gpu_host_facts_root": a10_host(tmp_path / "a10").root}}
    path = inventory(tmp_path, hosts, gpu_preflight_follow_hosts=True,
                     gpu_preflight_report_dir=str(tmp_path / "report"))
    check = tmp_path / "follow.yml"
    check.write_text(yaml.safe_dump([{
        "name": "Preflight, then show what it set", "hosts": "gpu_nodes", "gather_facts": False,
        "roles": [{"role": "gpuplatform.rke2.gpu_preflight"}],
        "post_tasks": [{"name": "Show", "ansible.builtin.debug": {
            "msg": "FOLLOW {{ inventory_hostname }} driver_enabled={{ gpu_operator_driver_enabled }} "
                   "disabled={{ gpu_operands_disabled | join(',') }} model={{ gpu_model }}"}}],
    }]))
    rc, out, recap = playbook(path, playbook_path=str(check))
    assert rc == 0, out
    assert "FOLLOW gpu-h100 driver_enabled=True disabled=driver model=H100" in out
    assert "FOLLOW gpu-a10 driver_enabled=True disabled= model=A10" in out
    assert recap["gpu-a10"][0] + recap["gpu-h100"][0] >= 1  # the report folder and file are new
    report = json.loads((tmp_path / "report" / "preflight.json").read_text())
    assert sorted(report["host_facts"]) == ["gpu-a10", "gpu-h100"]
    assert report["host_facts"]["gpu-h100"]["host_driver"]["version"] == "550.90.07"
    assert report["result"]["nodes"]["gpu-h100"]["deploy_driver_false"] is True
    rc, out, recap = playbook(path, playbook_path=str(check))
    assert rc == 0, out
    assert recap == {"gpu-a10": (0, 0, 0), "gpu-h100": (0, 0, 0)}, out
