# Cluster checks (gpuplatform.rke2.gpu_node_check without a playbook), its benchmark and
# the generated operand table. Included by the root Makefile (PY, ROOT, KUBECONFIG_LAB).

# make check SNAPSHOT="nodes-pods-daemonsets.json clusterpolicy.json"   a snapshot
# make check [KUBECONFIG=path] [CHECK_ARGS="--json --node gpu-1"]       the live cluster (default: the lab)
SNAPSHOT ?=
CHECK_ARGS ?=
CHECK_KUBECONFIG = $(or $(KUBECONFIG),$(KUBECONFIG_LAB))

.PHONY: check bench-node-check operand-docs
check: venv ## per-node operand check: SNAPSHOT=file... or live (KUBECONFIG, default the lab); CHECK_ARGS=--json
	$(PY) $(ROOT)/scripts/gpu-node-check \
	  $(if $(strip $(SNAPSHOT)),--snapshot $(SNAPSHOT),--kubeconfig $(CHECK_KUBECONFIG)) $(CHECK_ARGS)

bench-node-check: venv ## time gpu_node_check on generated fleets of 100, 1,000 and 5,000 nodes
	cd $(ROOT) && $(PY) -m bench.bench_node_check

operand-docs: venv ## regenerate docs/operand-model.md from the operand model
	$(PY) $(ROOT)/scripts/gen-operand-docs.py
