# GPU node labels (workload config, operand switches, isolation, vGPU profile) and KubeVirt's
# permitted GPU devices for one site. Included by the root Makefile (BIN, ROOT, KUBECONFIG_LAB).
#
# make rke2/gpu/labels [SITE=tirosh-home] [LABELS_ARGS="--check --diff"]
# SITE=lab talks to the lab's API server (.lab/kubeconfig) unless K8S_AUTH_KUBECONFIG says otherwise.
LABELS_ARGS ?=

.PHONY: rke2/gpu/labels
rke2/gpu/labels: venv ## GPU node labels + KubeVirt GPU devices for SITE (LABELS_ARGS="--check --diff")
	$(PLAYBOOK) playbooks/gpu_node_labels.yml $(LABELS_ARGS)
