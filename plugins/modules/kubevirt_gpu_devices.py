#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: kubevirt_gpu_devices
short_description: Permit the GPU Operator's VM GPU resources in KubeVirt
version_added: 0.1.0
description:
  - Computes KubeVirt's C(spec.configuration.permittedHostDevices) for the site's VM GPU nodes,
    C(pciHostDevices) (C(pciVendorSelector), C(resourceName)) for PCI passthrough and C(mediatedDevices)
    (C(mdevNameSelector), C(resourceName)) for vGPU, both with C(externalResourceProvider=true) because the
    GPU Operator's sandbox device plugin advertises them.
  - The resource names follow the GPU Operator's naming from the declared GPU models (O(gpu_models)) and the
    vGPU profiles of the vm-vgpu nodes (O(nodes)), so they are spelled in one place, the inventory.
  - When a KubeVirt CR (C(kubevirt.io/v1) C(kubevirts)) exists, merges the entries into it and changes
    nothing else. Entries it adds are recorded in the CR's annotation C(gpuplatform.rke2/owned-host-devices),
    so entries the inventory no longer declares are removed and entries someone else added stay.
  - Always returns the rendering (a merge patch and one example C(VirtualMachineInstance) per resource) for
    the role to write to the site folder.
author:
  - gpuplatform.rke2 maintainers (@gpuplatform)
extends_documentation_fragment:
  - gpuplatform.rke2.k8s_connection
options:
  gpu_models:
    description:
      - The site's GPU models by name (the part of a vGPU profile before the dash, for example C(A10)), each
        with C(pci_vendor_selector) (vendor:device in hex, for example C(10DE:2236)), C(pci_device_name) (the
        pci.ids name, for example C(GA102GL [A10])) and C(memory_gb).
    type: dict
    required: true
  nodes:
    description:
      - The GPU nodes; only their workload config and vGPU profile matter here.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - The Kubernetes node name.
        type: str
        required: true
      host:
        description:
          - The inventory host, for messages. Defaults to O(nodes[].name).
        type: str
      workload_config:
        description:
          - The node's workload config.
        type: str
      vgpu_config:
        description:
          - The node's vGPU profile, for example C(A10-12Q).
        type: str
      gpu_model:
        description:
          - The node's GPU model, a key of O(gpu_models). When every vm-passthrough node names one, only those
            models are permitted for passthrough; otherwise every declared model is.
        type: str
  apply:
    description:
      - V(auto) merges into the KubeVirt CR when one exists and only renders otherwise.
      - V(never) only renders and does not contact the cluster.
      - V(required) fails when no KubeVirt CR exists.
    type: str
    choices: [auto, never, required]
    default: auto
  kubevirt_name:
    description:
      - The KubeVirt CR to merge into, when the cluster has more than one.
    type: str
  kubevirt_namespace:
    description:
      - The namespace of O(kubevirt_name).
    type: str
  adopt_existing:
    description:
      - Replace an entry someone else added for a resource name the inventory declares, instead of refusing.
    type: bool
    default: false
  example_vmi_image:
    description:
      - The container disk image of the example VirtualMachineInstances (mirror it for air-gapped sites).
    type: str
    default: quay.io/containerdisks/ubuntu:24.04
notes:
  - Supports check mode and diff mode.
  - Needs list on C(kubevirts.kubevirt.io) and patch on the CR it merges into.
"""

EXAMPLES = r"""
- name: Permit the A10 passthrough and A10-12Q vGPU resources in KubeVirt
  gpuplatform.rke2.kubevirt_gpu_devices:
    gpu_models:
      A10: {pci_vendor_selector: "10DE:2236", pci_device_name: "GA102GL [A10]", memory_gb: 24}
    nodes:
      - {name: gpu-passthrough-1, workload_config: vm-passthrough}
      - {name: gpu-vgpu-1, workload_config: vm-vgpu, vgpu_config: A10-12Q}
  register: kubevirt_devices

- name: Write the rendering to the site folder
  ansible.builtin.copy:
    content: "{{ kubevirt_devices.rendered.permitted_host_devices | to_nice_yaml(indent=2) }}"
    dest: sites/example/kubevirt/permitted-host-devices.yaml
    mode: "0644"
"""

RETURN = r"""
permitted_host_devices:
  description: The entries the inventory calls for.
  returned: always
  type: dict
  sample:
    pciHostDevices:
      - {pciVendorSelector: "10DE:2236", resourceName: nvidia.com/GA102GL_A10, externalResourceProvider: true}
    mediatedDevices:
      - {mdevNameSelector: NVIDIA A10-12Q, resourceName: nvidia.com/NVIDIA_A10-12Q, externalResourceProvider: true}
rendered:
  description: What to write to the site folder, C(permitted_host_devices) (a merge patch for the KubeVirt
    CR) and C(example_vmis) (one VirtualMachineInstance per resource).
  returned: always
  type: dict
kubevirt:
  description: The KubeVirt CR merged into (C(name), C(namespace)), or null when none exists or O(apply=never).
  returned: always
  type: dict
owned:
  description: The resource names this module owns in the KubeVirt CR afterwards.
  returned: when a KubeVirt CR was found
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuplatform.rke2.plugins.module_utils import kubevirt as kv
from ansible_collections.gpuplatform.rke2.plugins.module_utils.k8s_connection import (
    api_client,
    connection_arg_spec,
)

try:
    from kubernetes import client as k8s_client
    from kubernetes.client.rest import ApiException
    from urllib3.exceptions import HTTPError
except ImportError:  # pragma: no cover - api_client() reports the missing client
    k8s_client = None
    ApiException = HTTPError = Exception

MERGE_PATCH = "application/merge-patch+json"


def argument_spec():
    spec = connection_arg_spec()
    spec.update(
        gpu_models=dict(type="dict", required=True),
        nodes=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            host=dict(type="str"),
            workload_config=dict(type="str"),
            vgpu_config=dict(type="str"),
            gpu_model=dict(type="str"),
        )),
        apply=dict(type="str", default="auto", choices=["auto", "never", "required"]),
        kubevirt_name=dict(type="str"),
        kubevirt_namespace=dict(type="str"),
        adopt_existing=dict(type="bool", default=False),
        example_vmi_image=dict(type="str", default="quay.io/containerdisks/ubuntu:24.04"),
    )
    return spec


class Failure(Exception):
    pass


def find_kubevirt(custom, name=None, namespace=None):
    """The KubeVirt CR to merge into, or None when KubeVirt is not installed."""
    group, version, plural = kv.KUBEVIRT_API
    try:
        found = custom.list_cluster_custom_object(group, version, plural)
    except ApiException as exc:
        if exc.status == 404:  # the CRD is not installed
            return None
        raise

    def wanted(item):
        meta = item["metadata"]
        return (not name or meta["name"] == name) and (not namespace or meta.get("namespace") == namespace)

    items = [i for i in (found or {}).get("items") or () if wanted(i)]
    if len(items) > 1:
        raise Failure("%d KubeVirt CRs match (%s); choose one with kubevirt_name and kubevirt_namespace"
                      % (len(items), ", ".join("%s/%s" % (i["metadata"].get("namespace"), i["metadata"]["name"])
                                               for i in items)))
    if not items and name:
        raise Failure("KubeVirt CR %s/%s not found" % (namespace or "*", name))
    return items[0] if items else None


def run(params, check_mode, custom_factory, warn):
    nodes = [dict(n, host=n.get("host") or n["name"]) for n in params["nodes"]]
    errors = kv.validate(params["gpu_models"], nodes)
    if errors:
        raise Failure("\n".join(errors))
    permitted = kv.permitted_host_devices(params["gpu_models"], nodes)
    result = {
        "changed": False,
        "permitted_host_devices": permitted,
        "rendered": {"permitted_host_devices": kv.rendered_patch(permitted),
                     "example_vmis": kv.example_vmis(permitted, params["example_vmi_image"])},
        "kubevirt": None,
    }
    if params["apply"] == "never":
        return result
    custom = custom_factory()
    obj = find_kubevirt(custom, params["kubevirt_name"], params["kubevirt_namespace"])
    if obj is None:
        if params["apply"] == "required":
            raise Failure("no KubeVirt CR (kubevirt.io/v1 kubevirts) in the cluster, and apply is required")
        return result
    meta = obj["metadata"]
    result["kubevirt"] = {"name": meta["name"], "namespace": meta.get("namespace")}
    try:
        plan = kv.plan_devices(obj, permitted, params["adopt_existing"])
    except ValueError as exc:
        raise Failure(str(exc))
    if plan["refusals"]:
        raise Failure("\n".join(plan["refusals"]))
    message = kv.gpu_gate_warning(obj)
    if message:
        warn(message)
    result["owned"] = plan["owned"]
    patch = kv.devices_patch(obj, plan)
    if patch:
        result["changed"] = True
        current = kv.current_devices(obj)
        result["diff"] = {
            "before_header": "kubevirt %s/%s permittedHostDevices" % (meta.get("namespace"), meta["name"]),
            "after_header": "kubevirt %s/%s permittedHostDevices" % (meta.get("namespace"), meta["name"]),
            "before": dict((k, current.get(k) or []) for k in kv.DEVICE_LISTS),
            "after": plan["devices"],
        }
        if not check_mode:
            group, version, plural = kv.KUBEVIRT_API
            custom.patch_namespaced_custom_object(group, version, meta.get("namespace"), plural, meta["name"],
                                                  patch, _content_type=MERGE_PATCH)
    return result


def _custom_factory(params):
    def factory():
        try:
            client = api_client(params)
        except ValueError as exc:
            raise Failure(str(exc))
        return k8s_client.CustomObjectsApi(client)
    return factory


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = run(module.params, module.check_mode, _custom_factory(module.params), module.warn)
    except Failure as exc:
        module.fail_json(msg=str(exc))
    except (ApiException, HTTPError) as exc:
        module.fail_json(msg="Kubernetes API error: %s" % exc)
    diff = result.pop("diff", None)
    if module._diff and diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
