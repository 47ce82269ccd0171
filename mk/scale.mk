# The scale benchmark (issue 18): the GPU steps, the waits and the checks on labs of generated fleets,
# against the per-node loop of the usual GPU playbooks. Included by the root Makefile (PY, ROOT).
# make bench-scale BENCH_SCALE_ARGS="--gpu-nodes 10,100 --json scale.json"
BENCH_SCALE_ARGS ?=

.PHONY: bench-scale
bench-scale: venv lab-build ## benchmark: GPU steps, waits, checks on 10/100/1,000 GPU nodes vs a per-node loop (BENCH_SCALE_ARGS)
	cd $(ROOT) && $(PY) -m bench.bench_scale $(BENCH_SCALE_ARGS)
