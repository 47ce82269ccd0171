# The ADR's step 6 without a playbook: the GPU Operator's operands up in order, the GPUs allocatable, the CUDA
# sample passing on every GPU node; and the wait engine's unit tests. Included by the root Makefile (BIN, PY, ROOT,
# KUBECONFIG_LAB and the ANSIBLE_* exports come from there).
#
# make rke2/gpu/wait [KUBECONFIG=path] [WAIT_TIMEOUT=600] [SAMPLE_ARGS="image=mirror.lan/nvidia/k8s/cuda-sample:..."]
# Without KUBECONFIG it talks to the lab's API server (.lab/kubeconfig).
WAIT_KUBECONFIG = $(or $(KUBECONFIG),$(KUBECONFIG_LAB))
WAIT_TIMEOUT ?= 600
SAMPLE_ARGS ?=
wait_module = $(BIN)/ansible localhost -i localhost, -c local -e ansible_python_interpreter=$(PY) -m gpuplatform.rke2.$(1) \
  -a 'kubeconfig=$(WAIT_KUBECONFIG) timeout=$(WAIT_TIMEOUT) $(2)'

.PHONY: rke2/gpu/wait test-waits bench-waits
rke2/gpu/wait: venv ## step 6's waits without a playbook: operands, allocatable GPUs, CUDA sample (KUBECONFIG, default the lab)
	$(call wait_module,operand_readiness,require_reconciled=true)
	$(call wait_module,gpu_allocatable_wait,)
	$(call wait_module,cuda_sample,per_node=true $(SAMPLE_ARGS))

test-waits: venv ## unit tests of the watch-based wait engine and the wait modules
	cd $(ROOT) && $(PY) -m pytest tests/unit/test_k8s_wait.py tests/unit/test_readiness.py tests/unit/test_wait_modules.py \
	  tests/unit/test_driver_upgrade.py -q

bench-waits: venv lab-build ## benchmark: wait modules vs a 5 s kubectl polling loop on a lab of its own (~20 min)
	cd $(ROOT) && $(PY) -m bench.bench_waits
