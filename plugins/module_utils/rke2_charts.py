# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Values for the charts RKE2 itself deploys (its CNI, ingress-nginx, CoreDNS, ...), as the
HelmChartConfig objects a server's ``server/manifests`` folder carries, as pure functions.
RKE2's deploy controller applies every file there; helm-controller merges a HelmChartConfig's
``valuesContent`` into the HelmChart of the same name and namespace (kube-system). Errors are
ValueError naming the key; callers fail before anything changes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuplatform.rke2.plugins.module_utils import manifest_yaml

MANIFESTS_DIR = "/var/lib/rancher/rke2/server/manifests"
NAMESPACE = "kube-system"
# The charts RKE2 v1.34.1 packages (charts/chart_versions.yaml of the release's source): a HelmChartConfig for
# another name configures nothing, so a typo is refused rather than silently ignored.
PACKAGED_CHARTS = (
    "harvester-cloud-provider", "harvester-csi-driver", "rancher-vsphere-cpi", "rancher-vsphere-csi",
    "rke2-calico", "rke2-calico-crd", "rke2-canal", "rke2-cilium", "rke2-coredns", "rke2-flannel",
    "rke2-ingress-nginx", "rke2-metrics-server", "rke2-multus", "rke2-runtimeclasses", "rke2-snapshot-controller",
    "rke2-snapshot-controller-crd", "rke2-snapshot-validation-webhook", "rke2-traefik", "rke2-traefik-crd",
)
# A CNI's chart runs only when rke2_cni selects that CNI.
CNI_CHARTS = {"rke2-canal": "canal", "rke2-calico": "calico", "rke2-calico-crd": "calico", "rke2-cilium": "cilium",
              "rke2-flannel": "flannel", "rke2-multus": "multus"}
CANAL = "rke2-canal"


def file_name(chart):
    """The file a chart's HelmChartConfig is written to, as RKE2's docs name it."""
    return "%s/%s-config.yaml" % (MANIFESTS_DIR, chart)


def chart_values(values, cni, canal_interface="", canal_mtu=0, what="rke2_chart_values"):
    """{chart: its values} from ``rke2_chart_values`` and the typed canal settings: the
    interface flannel carries the overlay on (``flannel.iface``) and the MTU of the pods'
    veth interfaces (``calico.vethuMTU``), the keys RKE2's own RKE1 migration maps a
    cluster's interface and MTU to. ``what``: how messages name the values (the site file's
    check names its key, ``rke2.chart_values``)."""
    if not isinstance(values, dict):
        raise ValueError("%s must be a mapping of chart name to its values" % what)
    cnis = [cni] if isinstance(cni, str) else list(cni or [])
    result = {}
    # key=str: YAML reads an unquoted 7 as a number, and sorting a number with strings fails.
    for chart in sorted(values, key=str):
        where = "%s.%s" % (what, chart)
        if chart not in PACKAGED_CHARTS:
            raise ValueError("%s: RKE2 deploys no chart %r (its charts: %s)" % (where, chart, ", ".join(PACKAGED_CHARTS)))
        if not isinstance(values[chart], dict):
            raise ValueError("%s must be a mapping of chart values" % where)
        if chart in CNI_CHARTS and CNI_CHARTS[chart] not in cnis:
            raise ValueError("%s: rke2_cni %s does not deploy %s" % (where, cni, chart))
        result[chart] = dict(values[chart])
    canal = {}
    if canal_interface:
        canal["flannel"] = {"iface": str(canal_interface)}
    if canal_mtu:
        if isinstance(canal_mtu, bool) or not isinstance(canal_mtu, int) or not 576 <= canal_mtu <= 9216:
            raise ValueError("rke2_canal_mtu %r must be an MTU between 576 and 9216" % (canal_mtu,))
        canal["calico"] = {"vethuMTU": canal_mtu}
    if canal:
        if "canal" not in cnis:
            raise ValueError("rke2_canal_interface and rke2_canal_mtu configure canal, but rke2_cni is %s" % (cni,))
        merged = dict(result.get(CANAL, {}))
        for key, settings in canal.items():
            section = merged.get(key, {})
            if not isinstance(section, dict):
                raise ValueError("%s.%s.%s must be a mapping" % (what, CANAL, key))
            for name, value in settings.items():
                if name in section and section[name] != value:
                    raise ValueError("%s.%s.%s.%s contradicts the typed canal setting (%r)"
                                     % (what, CANAL, key, name, value))
            section = dict(section)
            section.update(settings)
            merged[key] = section
        result[CANAL] = merged
    return result


def helm_chart_config(chart, values):
    """The HelmChartConfig of ``chart``: ``values`` as the YAML text helm-controller merges."""
    return {
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChartConfig",
        "metadata": {"name": chart, "namespace": NAMESPACE},
        "spec": {"valuesContent": manifest_yaml.dump(values, sort_keys=True)},
    }


def chart_of(path):
    """The chart a HelmChartConfig file of ``file_name`` is for, or ''."""
    base = str(path).rsplit("/", 1)[-1]
    chart = base[:-len("-config.yaml")] if base.endswith("-config.yaml") else ""
    return chart if chart in PACKAGED_CHARTS else ""


def helm_chart_config_files(values, cni, canal_interface="", canal_mtu=0, header="", written=()):
    """{file path: its text} of every HelmChartConfig, each starting with ``header`` (the
    role's marker, by which a later run knows the file is its own). ``written``: the files an
    earlier run wrote; a chart the site has dropped since gets a HelmChartConfig without values,
    since RKE2 leaves the objects of a deleted manifest file in the cluster (its chart would
    keep the old values), while an empty one returns the chart to its defaults."""
    charts = chart_values(values, cni, canal_interface, canal_mtu)
    for path in written or ():
        chart = chart_of(path)
        if chart and chart not in charts:
            charts[chart] = {}
    files = {}
    for chart in sorted(charts):
        files[file_name(chart)] = "%s%s" % (header, manifest_yaml.dump(helm_chart_config(chart, charts[chart])))
    return files
