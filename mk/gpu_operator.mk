# GPU Operator as an RKE2 HelmChart (ADR step 5) and the air-gap image plan (docs/gpu-operator.md,
# docs/airgap.md). Included by the root Makefile (BIN, ROOT and the ANSIBLE_* exports come from there).
#
# make rke2/gpu/operator/apply [SITE=tirosh-home] [OPERATOR_ARGS="--check --diff"]
# make rke2/gpu/operator/upgrade [SITE=...] [OPERATOR_ARGS=--check]   docs/upgrades.md
# make airgap/plan [SITE=...]      writes sites/SITE/airgap/images.txt and prints it
# make airgap/mirror [SITE=...]    on a connected host: copies every image of the plan into the mirror
# SITE=lab talks to the lab's API server (.lab/kubeconfig) unless K8S_AUTH_KUBECONFIG says otherwise.
OPERATOR_ARGS ?=
MIRROR_ARGS ?=

.PHONY: rke2/gpu/operator/apply rke2/gpu/operator/upgrade airgap/plan airgap/mirror
rke2/gpu/operator/apply: venv ## step 5: validate, render sites/SITE/rke2/gpu-operator.helmchart.yaml, deliver, wait (OPERATOR_ARGS=--check --diff)
	$(PLAYBOOK) playbooks/gpu_operator.yml $(OPERATOR_ARGS)

rke2/gpu/operator/upgrade: venv ## day 2: the site file's new version or values onto the running release, path checked, diff shown (docs/upgrades.md; OPERATOR_ARGS=--check stops after the diff)
	$(PLAYBOOK) playbooks/gpu_operator.yml --diff -e gpu_operator_expect_upgrade=true $(OPERATOR_ARGS)

airgap/plan: venv ## the images SITE must mirror (GPU Operator values + RKE2 list) into sites/SITE/airgap/images.txt
	$(PLAYBOOK) playbooks/airgap_plan.yml $(OPERATOR_ARGS)

airgap/mirror: ## on a connected host: copy sites/SITE/airgap/images.txt into the mirror (skopeo or crane; MIRROR_ARGS=--dry-run)
	$(ROOT)/scripts/airgap-mirror.sh $(MIRROR_ARGS) $(ROOT)/sites/$(SITE)/airgap/images.txt
