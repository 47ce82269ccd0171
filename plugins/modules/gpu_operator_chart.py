#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_operator_chart
short_description: Render and validate the NVIDIA GPU Operator HelmChart for RKE2
version_added: 0.1.0
description:
  - Turns a site's GPU Operator decisions into the chart values RKE2 needs for the chosen chart line, and
    those values into a C(helm.cattle.io/v1) C(HelmChart) manifest (and the equivalent Argo CD C(Application)).
  - Refuses bad combinations before anything changes, each with a message naming the key, for example the
    NRI plugin without CDI or on a chart older than v26.3.0 or an RKE2 whose containerd is older than 2.1,
    vm-vgpu nodes without a vGPU manager image, vm-* nodes while sandbox workloads are off, the obsolete
    containerd-config toolkit recipe, and any values key the chart's C(values.yaml) does not have.
  - Computes the air-gap image plan (every image the operator will run for these values and nodes) and, with
    O(image_registry), points every image reference in the values at the mirror and fails when one escapes it.
  - Runs on the controller; reads only local files (O(chart_values_reference), O(chart_archive),
    O(rke2_image_lists)) and never contacts a cluster. Always reports unchanged.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
options:
  name:
    description:
      - Name of the HelmChart (and Helm release, and Argo CD Application). Must be an RFC 1123 subdomain; RKE2's
        manifest file is named after it.
    type: str
    default: gpu-operator
  chart_version:
    description:
      - The gpu-operator chart version. The collection knows v26.3.2, v26.3.3 and v26.7.0 (the role ships each
        one's C(values.yaml), and their image defaults, values keys and known issues are part of the module); any
        other v26.3 or v26.7 version is refused, naming these. Chart lines v25.3.x and v25.10.x render with the
        C(values.yaml) given in O(chart_values_reference).
      - A values key of one known version used with another is refused naming the key and the versions that have
        it (for example C(draDriver), C(gpuCluster), C(clusterPolicy), C(operator.env), C(operator.nodeSelector) are
        v26.7.0's), and so are keys a version's templates ignore (on v26.7.0 C(operator.initContainer),
        C(cdi.default), C(driver.nvidiaDriverCRD.nodeSelector)).
      - On v26.7.0 the values set C(dcgmExporter.serviceMonitor.enabled=false) (the chart's default is true; a
        ServiceMonitor needs the Prometheus Operator's CRD) and C(gpuCluster.deployCR=false); O(extra_values) turns
        either on. A GPUCluster beside a ClusterPolicy, and the NRI plugin without the toolkit, are refused.
      - The module warns, once per run, about the known issues of the chosen version (v26.3.2's device plugin
        injects every InfiniBand device into GPU containers; v26.3.3 fixes it).
    type: str
    default: v26.3.2
  chart_repo:
    description:
      - Helm repository of the chart; for air-gapped sites without O(chart_archive), the site's chart mirror.
    type: str
    default: https://helm.ngc.nvidia.com/nvidia
  chart_archive:
    description:
      - A local gpu-operator chart archive (C(.tgz), from C(helm pull)). Its content is embedded as the
        HelmChart's C(chartContent), so the cluster needs no chart repository. Its C(Chart.yaml) must name
        O(chart_version).
    type: path
  failure_policy:
    description:
      - The HelmChart's C(failurePolicy), what helm-controller's install Job does when it finds the release
        failed (a C(helm upgrade) that failed half-way).
      - V(abort) leaves the failed release, the operator and every operand pod running and fails the Job until a
        person acts (a fixed value, or the role's rollback).
      - V(reinstall) (helm-controller's own default) runs C(helm uninstall) and installs again, which deletes every
        operand, driver and device plugin pod on every GPU node, and the GPU workloads lose their devices.
    type: str
    choices: [abort, reinstall]
    default: abort
  chart_values_reference:
    description:
      - The chart's C(values.yaml) for O(chart_version). Every rendered values key must exist in it (maps that
        are empty there, such as labels and config data, are free-form), and the image plan and the mirror
        rewrite read the chart's image defaults from it.
    type: path
    required: true
  namespace:
    description:
      - Namespace the operator and its operands run in (the HelmChart's C(targetNamespace)).
    type: str
    default: gpu-operator
  driver_enabled:
    description:
      - C(driver.enabled). False when the hosts' image already ships the NVIDIA driver.
    type: bool
    default: true
  driver_use_precompiled:
    description:
      - C(driver.usePrecompiled). The driver version must then be the driver branch (set C(driver.version) in
        O(extra_values)), and the image plan needs the nodes' kernels.
      - The module warns when a GPU node that runs no driver container (its own driver, C(driver) in
        O(gpu_nodes[].operands_disabled), a C(vm-*) workload) has a kernel that no driver-container node has, or
        gives no kernel. The operator makes a precompiled driver DaemonSet for every GPU node's kernel, deletes the
        one that wants no pod on its next pass and creates it again, so it never stops reconciling
        (docs/operand-model.md).
    type: bool
    default: false
  toolkit_enabled:
    description:
      - C(toolkit.enabled). False when the hosts' container runtime is already set up for NVIDIA.
    type: bool
    default: true
  cdi_enabled:
    description:
      - C(cdi.enabled). Unset means the chart line's default (false on v25.3, true from v25.10).
    type: bool
  nri_plugin_enabled:
    description:
      - C(cdi.nriPluginEnabled) (chart v26.3.0 and later, needs CDI and an RKE2 with containerd 2.1). With it the
        toolkit gets no environment at all and the operator creates no C(nvidia) RuntimeClass.
    type: bool
    default: false
  sandbox_workloads:
    description:
      - C(sandboxWorkloads) for VM workloads (KubeVirt or Kata).
    type: dict
    default: {}
    suboptions:
      enabled:
        description:
          - Whether the operator reads each node's C(nvidia.com/gpu.workload.config).
        type: bool
        default: false
      default_workload:
        description:
          - Workload config of a node without the label.
        type: str
        choices: [container, vm-passthrough, vm-vgpu]
        default: container
      mode:
        description:
          - C(sandboxWorkloads.mode) (chart v26.3 and later).
        type: str
        choices: [kubevirt, kata]
        default: kubevirt
  vgpu_manager:
    description:
      - The vGPU manager image (NVIDIA does not publish it; build it and push it to your registry). Setting
        O(vgpu_manager.repository) enables C(vgpuManager).
    type: dict
    suboptions:
      repository:
        description:
          - Registry path of the image, without the image name.
        type: str
      image:
        description:
          - Image name.
        type: str
        default: vgpu-manager
      version:
        description:
          - Version the image was built with; the operator appends the node's OS (C(-ubuntu22.04)).
        type: str
  time_slicing:
    description:
      - Time-slicing of each GPU, as the device plugin's default config (C(devicePlugin.config)).
    type: dict
    suboptions:
      replicas:
        description:
          - How many ways each GPU is shared (at least 2).
        type: int
        required: true
      rename_by_default:
        description:
          - Advertise shared GPUs as C(nvidia.com/gpu.shared) instead of C(nvidia.com/gpu).
        type: bool
        default: false
      fail_requests_greater_than_one:
        description:
          - Reject pods asking for more than one shared GPU.
        type: bool
        default: false
      resource:
        description:
          - The resource to share.
        type: str
        default: nvidia.com/gpu
  mig_strategy:
    description:
      - C(mig.strategy). Unset means the chart default (C(single)).
    type: str
    choices: [none, single, mixed]
  image_registry:
    description:
      - The site's image mirror (C(host[:port][/path])). Every image reference in the values is rewritten to it
        (the source path kept under it), and rendering fails when any reference still points outside it.
    type: str
  extra_values:
    description:
      - Chart values deep-merged last (maps merge, lists replace, a null removes a chart default). Checked like
        everything else.
    type: dict
    default: {}
  rke2_version:
    description:
      - The cluster's RKE2 version (for example C(v1.33.5+rke2r1)); when given, the NRI plugin is refused on a
        release whose containerd is older than 2.1.
    type: str
  gpu_nodes:
    description:
      - The inventory's GPU nodes.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description:
          - Node name.
        type: str
        required: true
      workload_config:
        description:
          - The host's C(gpu_workload_config) (C(container), C(vm-passthrough), C(vm-vgpu)); unset means the
            default workload.
        type: str
      os_tag:
        description:
          - The node's OS as the driver image tags it (C(ubuntu22.04), C(rhel9.4)).
        type: str
      kernel:
        description:
          - The node's kernel release (C(uname -r)), for precompiled driver images.
        type: str
      arch:
        description:
          - The node's CPU architecture (the inventory's C(rke2_arch)); the plan lists, per image, the architectures
            its mirrored index must hold (C(amd64), C(arm64)). Unset counts as C(amd64).
        type: str
      operands_disabled:
        description:
          - The operands the node switches off (C(gpu_operands_disabled)); their images need neither its OS tag
            nor its architecture.
        type: list
        elements: str
        default: []
  cluster_architectures:
    description:
      - The architectures of every node of the cluster (servers and CPU nodes too), which the operator's and NFD's
        images must hold.
    type: list
    elements: str
    default: []
  driver_os_tags:
    description:
      - OS tags of GPU nodes that do not give O(gpu_nodes[].os_tag), for the driver and vGPU manager images.
    type: list
    elements: str
    default: []
  driver_kernels:
    description:
      - Kernel releases for precompiled driver images, combined with O(driver_os_tags).
    type: list
    elements: str
    default: []
  rke2_image_lists:
    description:
      - RKE2 image lists of the pinned release (C(rke2-images*.txt) from its artifact bundle), appended to the plan.
    type: list
    elements: path
    default: []
  argocd_namespace:
    description:
      - Namespace of the Argo CD Application rendering.
    type: str
    default: argocd
  argocd_project:
    description:
      - Argo CD project of the Application rendering.
    type: str
    default: default
  running_release:
    description:
      - The release the cluster runs (module M(gpuplatform.rke2.helmchart_release), its deployed revision's chart
        version and values). The change to what this run renders must be one upgrade, else it is refused before
        anything changes; RV(upgrade) says what it is.
      - One chart line at a time (v26.3 to v26.7, not v25.10 to v26.7); a lower version is the role's rollback, not
        an upgrade; C(driver.nvidiaDriverCRD.enabled) and C(gpuCluster.deployCR) are not turned on in the upgrade
        that changes the line (a second upgrade does it). docs/upgrades.md gives the sources.
    type: dict
    suboptions:
      chart_version:
        description: The running chart version; unset when nothing is installed.
        type: str
      values:
        description: The values helm was given for it.
        type: dict
        default: {}
  running_values_reference:
    description:
      - The running chart's C(values.yaml), so that RV(upgrade) knows whether a chart change moves the driver (a new
        chart's own driver default). Without it a version change counts as moving it.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuplatform.rke2.attributes
attributes:
  check_mode:
    details: Renders the same in check mode; it never changes anything.
seealso:
  - module: gpuplatform.rke2.k8s_apply
"""

EXAMPLES = r"""
- name: Render and validate the GPU Operator chart
  gpuplatform.rke2.gpu_operator_chart:
    chart_version: v26.3.2
    chart_values_reference: "{{ role_path }}/files/gpu-operator-v26.3.2-values.yaml"
    driver_enabled: false
    nri_plugin_enabled: true
    rke2_version: v1.33.5+rke2r1
    sandbox_workloads:
      enabled: true
    vgpu_manager:
      repository: registry.site.example:5000/nvidia
      version: 580.126.20
    gpu_nodes:
      - {name: gpu-1, workload_config: container}
      - {name: gpu-2, workload_config: vm-vgpu, os_tag: ubuntu22.04}
    image_registry: registry.site.example:5000
  delegate_to: localhost
  run_once: true
  register: chart

- name: Show the image plan
  ansible.builtin.debug:
    msg: "{{ chart.images_txt }}"
"""

RETURN = r"""
upgrade:
  description:
    - The change from O(running_release) to what this run renders (C(kind) install, values, patch, line or
      downgrade; C(values_changed), dotted keys with their value before and after; C(driver_changed), the driver
      settings whose effective value moves; C(driver_restart), whether the operator's upgrade controller will
      restart the driver on every driver node; C(problems), why it is not one upgrade, which are refused).
  returned: success
  type: dict
manifest:
  description: The HelmChart object.
  returned: success
  type: dict
manifest_yaml:
  description: The HelmChart as a YAML document with an explanatory header, ready to write to a file.
  returned: success
  type: str
values:
  description: The chart values (the HelmChart's C(valuesContent) as data).
  returned: success
  type: dict
application:
  description: The same chart and values as an Argo CD Application.
  returned: success
  type: dict
application_yaml:
  description: The Application as a YAML document.
  returned: success
  type: str
images:
  description: The images the operator will run, in controller order, with their mirror reference.
  returned: success
  type: list
  elements: dict
  sample:
    - source: nvcr.io/nvidia/gpu-operator:v26.3.2
      mirror: registry.site.example:5000/nvidia/gpu-operator:v26.3.2
      components: [operator, operator-validator]
      values_keys: [operator, validator]
      platforms: [linux/amd64, linux/arm64]
images_txt:
  description:
    - The plan as C(source -> mirror) lines, GPU Operator images then RKE2's; each GPU Operator line ends with the
      operands that run it and the platforms its index must hold (C([linux/amd64, linux/arm64])).
  returned: success
  type: str
plan_problems:
  description: What keeps the image plan from being complete (for example the nodes' OS is not known).
    Fatal when O(image_registry) is set.
  returned: success
  type: list
  elements: str
workload_runtime_class:
  description: The runtimeClassName GPU pods must set on this chart line (C(nvidia) on v25.3), or null.
  returned: success
  type: str
problems:
  description: Every problem found, each naming its key.
  returned: failure
  type: list
  elements: str
"""

import io
import os
import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible_collections.gpuplatform.rke2.plugins.module_utils import image_plan as ip
from ansible_collections.gpuplatform.rke2.plugins.module_utils import manifest_yaml
from ansible_collections.gpuplatform.rke2.plugins.module_utils import operator_values as ov
from ansible_collections.gpuplatform.rke2.plugins.module_utils.gpu import upgrade_path

DECISION_KEYS = ("chart_version", "namespace", "driver_enabled", "driver_use_precompiled", "toolkit_enabled",
                 "cdi_enabled", "nri_plugin_enabled", "sandbox_workloads", "vgpu_manager", "time_slicing",
                 "mig_strategy", "extra_values")


def chart_archive_metadata(archive_bytes):
    """(Chart.yaml, NFD subchart version or None) of a chart archive."""
    with tarfile.open(fileobj=io.BytesIO(archive_bytes), mode="r:gz") as tar:
        members = dict((m.name, m) for m in tar.getmembers() if m.isfile())
        chart_files = [n for n in members if n.count("/") == 1 and n.endswith("/Chart.yaml")]
        if not chart_files:
            raise ValueError("no <chart>/Chart.yaml in it")
        chart = manifest_yaml.load_mapping(tar.extractfile(members[chart_files[0]]).read())
        nfd_chart = [n for n in members if n.endswith("/charts/node-feature-discovery/Chart.yaml")]
        if nfd_chart:
            return chart, manifest_yaml.load_mapping(tar.extractfile(members[nfd_chart[0]]).read()).get("appVersion")
    for dependency in chart.get("dependencies") or ():
        if dependency.get("name") == "node-feature-discovery":
            return chart, dependency.get("version")
    return chart, None


def render(params, reference, archive_bytes=None, rke2_image_lists=(), running_reference=None):
    """Everything the module returns, from its parameters and the files' contents.
    Raises ov.ValuesError listing every problem. ``running_reference``: the values.yaml of
    the running release's chart (O(running_release)), when the collection has it."""
    decisions = ov.default_decisions()
    decisions.update(dict((k, params[k]) for k in DECISION_KEYS if params.get(k) is not None))
    nodes = params.get("gpu_nodes") or []
    mirror = params.get("image_registry")
    version = decisions["chart_version"]

    problems = ov.decision_problems(decisions, nodes)
    if not ov.is_rfc1123_name(params["name"]):
        problems.append("name: %r is not an RFC 1123 name (RKE2 skips manifest files and Kubernetes refuses objects "
                        "named otherwise)" % params["name"])
    problems.extend(ip.mirror_problems(mirror))
    if ov.chart_line(version) is None or ov.version_problems(version):
        raise ov.ValuesError(problems)

    content, nfd_version = None, ip.NFD_CHART_VERSIONS.get(version)
    if archive_bytes is not None:
        try:
            chart, archive_nfd = chart_archive_metadata(archive_bytes)
        except (tarfile.TarError, ValueError, EOFError, OSError) as exc:
            problems.append("chart_archive: not a chart archive (%s)" % to_native(exc))
        else:
            if chart.get("name") != ov.CHART_NAME or ov.parse_chart_version(chart.get("version")) != \
                    ov.parse_chart_version(version):
                problems.append("chart_archive: holds chart %s %s, not %s %s"
                                % (chart.get("name"), chart.get("version"), ov.CHART_NAME, version))
            nfd_version = archive_nfd or nfd_version
            content = ov.chart_content(archive_bytes)

    values = ov.render_values(decisions)
    # The plan's sources are the upstream references: computed before the mirror rewrite.
    try:
        images, plan_problems = ip.plan_images(ov.effective_values(reference, values), version, nodes,
                                               params.get("driver_os_tags"), params.get("driver_kernels"),
                                               nfd_version, params.get("cluster_architectures"))
        if mirror and not ip.mirror_problems(mirror):
            values = ov.deep_merge(values, ip.mirror_overrides(ov.effective_values(reference, values), mirror))
            problems.extend(ip.escaping_references(ov.effective_values(reference, values), mirror))
            problems.extend(plan_problems)
    except ip.MalformedBlock as exc:
        # An image field of the chart's values (or the overrides) that is not text.
        raise ov.ValuesError(problems + ["values %s" % exc]) from exc
    problems.extend(ov.values_problems(values, decisions, reference, params.get("rke2_version")))
    running = params.get("running_release") or {}
    upgrade = upgrade_path.plan(running.get("chart_version"), version, running.get("values") or {},
                                ov.canonical(values), running_reference, reference)
    problems.extend("running_release: %s" % problem for problem in upgrade["problems"])
    problems = ov.unique(problems)
    if problems:
        raise ov.ValuesError(problems)

    values = ov.canonical(values)
    values_content = manifest_yaml.dump(values)
    manifest = ov.helmchart(values_content, version, decisions["namespace"], params["name"], params["chart_repo"],
                            content, params.get("failure_policy") or ov.DEFAULT_FAILURE_POLICY)
    application = ov.argocd_application(values, version, decisions["namespace"], params["name"],
                                        params["chart_repo"], params["argocd_namespace"], params["argocd_project"])
    runtime_class = ov.workload_runtime_class(version)
    header = ("GPU Operator %s for RKE2 (chart line %s), rendered by gpuplatform.rke2.gpu_operator_chart.\n"
              "Do not edit: change the site's gpu_operator_* variables and run the gpu_operator role."
              % (version, ov.chart_line(version)["name"]))
    if runtime_class:
        header += "\nOn this chart line GPU pods must set runtimeClassName: %s." % runtime_class

    images = ip.with_mirror(images, mirror)
    sections = [("GPU Operator %s: images the values enable" % version, images)]
    for name, text in rke2_image_lists:
        sections.append(("RKE2 images (%s)" % name, [{"source": ref} for ref in ip.parse_image_list(text)]))
    plan_header = "Image plan: source -> mirror%s. Rendered by gpuplatform.rke2.gpu_operator_chart." % (
        " (%s)" % mirror if mirror else " (no image_registry set: sources only)")
    if content:
        plan_header += "\nChart: embedded in the HelmChart as chartContent (%s %s)." % (ov.CHART_NAME, version)
    else:
        plan_header += "\nChart: %s %s from %s." % (ov.CHART_NAME, version, params["chart_repo"])
    return {
        "manifest": manifest,
        "manifest_yaml": manifest_yaml.dump_all([manifest], header=header),
        "values": values,
        "application": application,
        "application_yaml": manifest_yaml.dump_all([application], header=header.replace(
            "gpu_operator role.", "gpu_operator role; Argo CD syncs this Application instead of RKE2's HelmChart.")),
        "images": images,
        "images_txt": ip.images_txt(sections, mirror, header=plan_header),
        "plan_problems": plan_problems,
        "upgrade": upgrade,
        "workload_runtime_class": runtime_class,
        "warnings": ov.precompiled_churn_warnings(decisions, nodes, params.get("driver_kernels")),
    }


def _read(module, option, path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        module.fail_json(msg="%s: cannot read %s: %s" % (option, path, to_native(exc)))


def _refuse(module, problems):
    module.fail_json(msg="GPU Operator values refused: %s" % "; ".join(problems), problems=problems)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", default=ov.CHART_NAME),
            chart_version=dict(type="str", default=ov.DEFAULT_CHART_VERSION),
            chart_repo=dict(type="str", default=ov.CHART_REPO),
            chart_archive=dict(type="path"),
            failure_policy=dict(type="str", choices=list(ov.FAILURE_POLICIES), default=ov.DEFAULT_FAILURE_POLICY),
            chart_values_reference=dict(type="path", required=True),
            namespace=dict(type="str", default="gpu-operator"),
            driver_enabled=dict(type="bool", default=True),
            driver_use_precompiled=dict(type="bool", default=False),
            toolkit_enabled=dict(type="bool", default=True),
            cdi_enabled=dict(type="bool"),
            nri_plugin_enabled=dict(type="bool", default=False),
            sandbox_workloads=dict(type="dict", default={}, options=dict(
                enabled=dict(type="bool", default=False),
                default_workload=dict(type="str", choices=["container", "vm-passthrough", "vm-vgpu"],
                                      default="container"),
                mode=dict(type="str", choices=["kubevirt", "kata"], default="kubevirt"),
            )),
            vgpu_manager=dict(type="dict", options=dict(
                repository=dict(type="str"),
                image=dict(type="str", default="vgpu-manager"),
                version=dict(type="str"),
            )),
            time_slicing=dict(type="dict", options=dict(
                replicas=dict(type="int", required=True),
                rename_by_default=dict(type="bool", default=False),
                fail_requests_greater_than_one=dict(type="bool", default=False),
                resource=dict(type="str", default="nvidia.com/gpu"),
            )),
            mig_strategy=dict(type="str", choices=["none", "single", "mixed"]),
            image_registry=dict(type="str"),
            extra_values=dict(type="dict", default={}),
            rke2_version=dict(type="str"),
            gpu_nodes=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                workload_config=dict(type="str"),
                os_tag=dict(type="str"),
                kernel=dict(type="str"),
                arch=dict(type="str"),
                operands_disabled=dict(type="list", elements="str", default=[]),
            )),
            cluster_architectures=dict(type="list", elements="str", default=[]),
            driver_os_tags=dict(type="list", elements="str", default=[]),
            driver_kernels=dict(type="list", elements="str", default=[]),
            rke2_image_lists=dict(type="list", elements="path", default=[]),
            argocd_namespace=dict(type="str", default="argocd"),
            argocd_project=dict(type="str", default="default"),
            running_release=dict(type="dict", options=dict(
                chart_version=dict(type="str"),
                values=dict(type="dict", default={}),
            )),
            running_values_reference=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    if not manifest_yaml.HAS_YAML:
        module.fail_json(msg="PyYAML is required on the controller: %s" % manifest_yaml.YAML_IMPORT_ERROR)
    # A version the collection does not know is named as such, not as a values file that is missing.
    wrong_version = ov.version_problems(module.params["chart_version"])
    if wrong_version:
        _refuse(module, wrong_version)
    reference_path = module.params["chart_values_reference"]
    try:
        reference = manifest_yaml.load_mapping(_read(module, "chart_values_reference", reference_path))
    except ValueError as exc:
        module.fail_json(msg="chart_values_reference: %s is not a chart values.yaml: %s"
                         % (reference_path, to_native(exc)))
    archive = None
    if module.params["chart_archive"]:
        archive = _read(module, "chart_archive", module.params["chart_archive"], binary=True)
    lists = [(os.path.basename(path), _read(module, "rke2_image_lists", path))
             for path in module.params["rke2_image_lists"]]
    running_reference = None
    if module.params["running_values_reference"]:
        try:
            running_reference = manifest_yaml.load_mapping(_read(module, "running_values_reference",
                                                                 module.params["running_values_reference"]))
        except ValueError as exc:
            module.fail_json(msg="running_values_reference: %s is not a chart values.yaml: %s"
                             % (module.params["running_values_reference"], to_native(exc)))
    try:
        result = render(module.params, reference, archive, lists, running_reference)
    except ov.ValuesError as exc:
        _refuse(module, exc.problems)
    # Known issues of the chosen version (ov.KNOWN_ISSUES), once per run: the role renders on the controller once.
    for warning in ov.known_issue_warnings(module.params["chart_version"]) + result.pop("warnings"):
        module.warn(warning)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
