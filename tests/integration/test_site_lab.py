"""site.yml's order on the lab: the gates between steps, and step 6 failing with the
broken node and layer named in the output and in the report (issue 9)."""

import json
import os
import time

from kubernetes import client

from tests.integration.gpu_operator import run_playbook
from tests.integration.kube import pods_on, wait_for

NS = "gpu-operator"


def test_verification_refuses_to_start_before_the_gpu_operator_step(lab, tmp_path):
    lab.reset()
    lab.uninstall_operator()
    lab.wait_settled(installed=False)
    run = run_playbook("gpu_verify.yml", lab.kubeconfig, str(tmp_path), "-e", "gpu_verify_dest=%s" % tmp_path)
    assert run.returncode != 0, run
    assert "step 6 (nvidia.com/gpu verification and CUDA sample) cannot start" in run.stdout
    assert "Run step 5 first: make rke2/gpu/operator/apply SITE=lab" in run.stdout
    assert not os.path.exists(os.path.join(str(tmp_path), "gpu-verify.json"))


def _argocd_served(lab):
    """Whether the API server serves Argo CD's Applications (the lab installs Argo CD's real CRDs)."""
    try:
        client.CustomObjectsApi(lab.api).list_namespaced_custom_object("argoproj.io", "v1alpha1", "default",
                                                                       "applications")
        return True
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        return False


def _wait(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_argocd_step_refuses_without_a_passed_verification(gpu_lab, tmp_path):
    report = tmp_path / "gpu-verify.json"
    report.write_text(json.dumps({"passed": False, "summary": "1 of 5 GPU nodes failing: gpu-container-2"}))
    manifests = tmp_path / "argocd"
    manifests.mkdir()
    args = ("-e", "argocd_apps_verify_report=%s" % report, "-e", "argocd_apps_manifest_dir=%s" % manifests)
    run = run_playbook("argocd_apps.yml", gpu_lab.kubeconfig, str(tmp_path), *args)
    assert run.returncode != 0, run
    assert "step 7 (Argo CD workloads) cannot start" in run.stdout
    assert "1 of 5 GPU nodes failing: gpu-container-2" in run.stdout

    report.write_text(json.dumps({"passed": True, "summary": "5 GPU nodes verified"}))
    if gpu_lab.state().get("argocd_crds"):
        # A passed report and Argo CD's API served: the gate lets step 7 start, and the role
        # refuses a site without an Application to apply, naming the folder.
        assert _argocd_served(gpu_lab)
        run = run_playbook("argocd_apps.yml", gpu_lab.kubeconfig, str(tmp_path), *args)
        assert run.returncode != 0, run
        assert "step 7 (Argo CD workloads) cannot start" not in run.stdout, run
        assert "argocd_apps_manifest_dir %s holds no *.yaml Application manifest" % manifests in run.stdout, run

    # A passed report, but no Argo CD in the cluster: the refusal names what to install.
    ext = client.ApiextensionsV1Api(gpu_lab.api)
    crds = [c.metadata.name for c in ext.list_custom_resource_definition().items if c.spec.group == "argoproj.io"]
    for name in crds:
        ext.delete_custom_resource_definition(name)
    try:
        _wait(lambda: not _argocd_served(gpu_lab), "Argo CD's Applications still served")
        run = run_playbook("argocd_apps.yml", gpu_lab.kubeconfig, str(tmp_path), *args)
        assert run.returncode != 0, run
        assert "does not serve argoproj.io/v1alpha1 applications; install Argo CD first" in run.stdout, run
    finally:
        if crds:
            _wait(lambda: not any(c.spec.group == "argoproj.io" for c in ext.list_custom_resource_definition().items),
                  "Argo CD's CRDs still being deleted")
            gpu_lab._install_argocd_crds()
            _wait(lambda: _argocd_served(gpu_lab), "Argo CD's Applications not served again")


def test_verification_names_the_broken_node_and_layer(gpu_lab, tmp_path):
    gpu_lab.hold_down("gpu-container-2", "container-toolkit")
    wait_for(gpu_lab.core().list_namespaced_pod, lambda o: any(
        not p.status.container_statuses[0].ready
        for p in pods_on(o, "gpu-container-2", "nvidia-container-toolkit-daemonset")), namespace=NS)
    run = run_playbook("gpu_verify.yml", gpu_lab.kubeconfig, str(tmp_path), "-e", "gpu_verify_dest=%s" % tmp_path,
                       "-e", "gpu_verify_timeout=10")
    assert run.returncode != 0, run
    assert "gpu-container-2: layer container-runtime: container-toolkit: CrashLoopBackOff" in run.stdout
    with open(os.path.join(str(tmp_path), "gpu-verify.json")) as handle:
        report = json.load(handle)
    assert report["passed"] is False
    node = report["nodes"]["gpu-container-2"]
    assert node["status"] == "failing" and node["first_failed_layer"] == "container-runtime"
    assert node["layers"]["cuda-sample"]["state"] == "failed"
    assert report["nodes"]["gpu-container-1"]["status"] == "ok"
    with open(os.path.join(str(tmp_path), "gpu-verify.md")) as handle:
        markdown = handle.read()
    assert "**gpu-container-2** / container-runtime: container-toolkit: CrashLoopBackOff" in markdown
