import pytest

from ansible_collections.gpuplatform.rke2.plugins.module_utils import site_steps

READY = {"server-1": "Ready", "gpu-1": "Ready"}
INSTALLED = {"installed": True, "reason": "install Job helm-install-gpu-operator succeeded"}


def test_steps_are_the_adr_order():
    assert [s.number for s in site_steps.STEPS] == list(range(1, 8))
    assert site_steps.step(5).make_target == "rke2/gpu/operator/apply"


def test_unknown_step_names_it():
    with pytest.raises(ValueError, match="unknown step 9"):
        site_steps.step(9)


def test_gpu_operator_needs_reachable_api():
    ok, message = site_steps.gate(5, {"api_error": "connection refused", "nodes": {}}, "lab")
    assert not ok
    assert "step 5 (GPU Operator rollout) cannot start" in message
    assert "step 4 (kubeconfig export and merge)" in message
    assert "make rke2/kubeconfig SITE=lab" in message


def test_gpu_operator_needs_every_node_ready():
    ok, message = site_steps.gate(5, {"nodes": {"server-1": "Ready", "gpu-1": "NotReady", "gpu-2": "missing"}}, "x")
    assert not ok
    assert "gpu-1 (NotReady), gpu-2 (missing)" in message
    assert "Run step 3 first" in message


def test_gpu_operator_starts_on_ready_cluster():
    assert site_steps.gate(5, {"nodes": READY}, "x")[0]


def test_verify_needs_installed_chart():
    ok, message = site_steps.gate(6, {"nodes": READY, "helmchart": {"installed": False, "reason": "Job failed"}}, "x")
    assert not ok and "Job failed" in message and "make rke2/gpu/operator/apply SITE=x" in message
    assert site_steps.gate(6, {"nodes": READY, "helmchart": INSTALLED}, "x")[0]


def test_argocd_needs_passed_verification():
    observed = {"nodes": READY, "helmchart": INSTALLED}
    ok, message = site_steps.gate(7, observed, "x")
    assert not ok and "no verification report" in message and "make rke2/gpu/verify" in message
    observed["verify_report"] = {"passed": False, "path": "artifacts/x/gpu-verify.json", "summary": "1 node failing"}
    ok, message = site_steps.gate(7, observed, "x")
    assert not ok and "1 node failing" in message
    observed["verify_report"]["passed"] = True
    assert site_steps.gate(7, observed, "x")[0]


def test_ungated_steps_pass():
    assert site_steps.gate(2, {}, "x")[0]


def test_missing_api_names_the_product_to_install():
    observed = {"nodes": READY, "helmchart": INSTALLED,
                "verify_report": {"passed": True, "path": "r.json"},
                "missing_resources": [{"resource": "argoproj.io/v1alpha1 applications", "provider": "Argo CD"}]}
    ok, message = site_steps.gate(7, observed, "x")
    assert not ok
    assert "does not serve argoproj.io/v1alpha1 applications" in message and "install Argo CD first" in message
