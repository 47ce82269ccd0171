"""Values for the charts RKE2 deploys (module_utils/rke2_charts.py, filter
rke2_helm_chart_config_files): HelmChartConfigs for a server's manifests folder, the typed canal
interface and MTU, refusals naming the key, and a chart the site dropped returned to its defaults;
then the rke2 role rendering them (make site/render's path) on this machine."""
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_charts as charts
from tests.unit.role_runner import PYTHON, role_playbook, run_playbook

HEADER = "# Written by Ansible (role gpuplatform.rke2.rke2): values for a chart RKE2 deploys\n"
MANIFESTS = "/var/lib/rancher/rke2/server/manifests/"
INGRESS = {"controller": {"config": {"use-forwarded-headers": "true"}}}


def _objects(files):
    return dict((path, yaml.safe_load(text)) for path, text in files.items())


def test_one_helm_chart_config_per_chart_in_kube_system_with_the_values_as_text():
    files = charts.helm_chart_config_files({"rke2-ingress-nginx": INGRESS}, "canal", header=HEADER)
    assert list(files) == [MANIFESTS + "rke2-ingress-nginx-config.yaml"]
    text = files[MANIFESTS + "rke2-ingress-nginx-config.yaml"]
    assert text.startswith(HEADER)
    config = yaml.safe_load(text)
    assert (config["apiVersion"], config["kind"]) == ("helm.cattle.io/v1", "HelmChartConfig")
    assert config["metadata"] == {"name": "rke2-ingress-nginx", "namespace": "kube-system"}
    assert yaml.safe_load(config["spec"]["valuesContent"]) == INGRESS
    # A literal block: a values change shows in --diff as the changed lines.
    assert "valuesContent: |" in text


def test_canal_interface_and_mtu_become_flannel_iface_and_calico_veth_mtu():
    files = charts.helm_chart_config_files({"rke2-canal": {"flannel": {"backend": "wireguard"}}}, "canal",
                                           canal_interface="enp1s0", canal_mtu=1450)
    values = yaml.safe_load(_objects(files)[MANIFESTS + "rke2-canal-config.yaml"]["spec"]["valuesContent"])
    assert values == {"flannel": {"backend": "wireguard", "iface": "enp1s0"}, "calico": {"vethuMTU": 1450}}


@pytest.mark.parametrize("values, cni, kwargs, needle", [
    ({"rke2-ingres-nginx": {}}, "canal", {}, "rke2_chart_values.rke2-ingres-nginx: RKE2 deploys no chart"),
    ({"rke2-coredns": ["a"]}, "canal", {}, "rke2_chart_values.rke2-coredns must be a mapping of chart values"),
    ({"rke2-cilium": {}}, "canal", {}, "rke2_chart_values.rke2-cilium: rke2_cni canal does not deploy rke2-cilium"),
    ({}, "cilium", {"canal_mtu": 1450}, "rke2_canal_interface and rke2_canal_mtu configure canal, but rke2_cni is cilium"),
    ({}, "canal", {"canal_mtu": 100000}, "rke2_canal_mtu 100000 must be an MTU between 576 and 9216"),
    ({"rke2-canal": {"flannel": {"iface": "eth1"}}}, "canal", {"canal_interface": "enp1s0"},
     "rke2_chart_values.rke2-canal.flannel.iface contradicts the typed canal setting ('enp1s0')"),
    (["rke2-canal"], "canal", {}, "rke2_chart_values must be a mapping of chart name to its values"),
])
def test_bad_input_is_named(values, cni, kwargs, needle):
    with pytest.raises(ValueError) as failure:
        charts.helm_chart_config_files(values, cni, **kwargs)
    assert needle in str(failure.value)


def test_multus_selects_its_own_chart_and_the_cni_after_it():
    files = charts.helm_chart_config_files({"rke2-multus": {}, "rke2-cilium": {}}, ["multus", "cilium"])
    assert sorted(files) == [MANIFESTS + "rke2-cilium-config.yaml", MANIFESTS + "rke2-multus-config.yaml"]


def test_a_chart_the_site_dropped_gets_a_config_without_values():
    written = [MANIFESTS + "rke2-coredns-config.yaml", MANIFESTS + "rke2-ingress-nginx-config.yaml",
               MANIFESTS + "site-own-config.yaml"]
    files = rke2_filters.rke2_helm_chart_config_files({"rke2-ingress-nginx": INGRESS}, "canal", header=HEADER,
                                                      written=written)
    assert sorted(files) == written[:2]
    assert yaml.safe_load(yaml.safe_load(files[written[0]])["spec"]["valuesContent"]) == {}


def test_filter_turns_errors_into_filter_errors():
    with pytest.raises(AnsibleFilterError, match="RKE2 deploys no chart 'traefik'"):
        rke2_filters.rke2_helm_chart_config_files({"traefik": {}}, "canal")


PLAYBOOK = role_playbook("rke2_servers:rke2_agents", ["render"], """\
    - name: Show the file names
      ansible.builtin.debug:
        msg: "FILES {{ inventory_hostname }} {{ rke2_rendered_files | list | sort | join(',') }}"
""")


def _inventory(**extra):
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": PYTHON,
                 "rke2_chart_values": {"rke2-ingress-nginx": INGRESS}, "rke2_canal_mtu": 1450},
        "children": {"rke2_servers": {"hosts": {"cp-1": {}}}, "rke2_agents": {"hosts": {"gpu-1": {}}}}}}
    inventory["all"]["vars"].update(extra)
    return inventory


def test_role_renders_the_configs_on_servers_only(tmp_path):
    rc, output = run_playbook(tmp_path, PLAYBOOK, _inventory())
    assert rc == 0, output
    assert "FILES cp-1 config.yaml,rke2-canal-config.yaml,rke2-ingress-nginx-config.yaml" in output, output
    assert "FILES gpu-1 config.yaml\"" in output, output


def test_role_refuses_a_chart_rke2_does_not_deploy_naming_it(tmp_path):
    rc, output = run_playbook(tmp_path, PLAYBOOK, _inventory(rke2_chart_values={"ingress-nginx": {}}))
    assert rc != 0
    assert "rke2_chart_values.ingress-nginx: RKE2 deploys no chart 'ingress-nginx'" in output, output
