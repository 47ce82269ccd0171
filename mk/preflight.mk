# GPU host preflight (before the GPU Operator step): host facts, decisions, refusals.
# Included by the root Makefile (BIN, ROOT, SITE and the ANSIBLE_* exports come from there).

PREFLIGHT_ARGS ?=

.PHONY: rke2/gpu/preflight
rke2/gpu/preflight: venv ## GPU host preflight on SITE's GPU nodes and servers: refuses before any change (PREFLIGHT_ARGS=-e ...)
	$(PLAYBOOK) playbooks/gpu_preflight.yml -e gpu_preflight_report_dir=$(ROOT)/artifacts/$(SITE)/preflight $(PREFLIGHT_ARGS)
