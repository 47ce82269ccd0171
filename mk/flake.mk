# Hunting flakes: lab tests run many times in a row, with a CPU hog beside them (scripts/flake-hunt.py;
# docs/lab.md "Hunting flakes"). Included by the root Makefile (PY, ROOT).
#
# make flake-hunt                                   the timing-sensitive selection below, 10 runs, hog of 2
# make flake-hunt FLAKE_TESTS=tests/integration FLAKE_RUNS=3 FLAKE_HOG=0    the whole lab suite three times
FLAKE_RUNS ?= 10
FLAKE_HOG ?= 2
# The lab tests that have failed on timing before, or that wait on the real operator, an API server restart or a
# stalled connection: each a fresh lab per run.
FLAKE_TESTS ?= \
  "tests/integration/test_operator_conformance_lab.py::test_model_and_simulator_agree_with_the_real_operator[precompiled-driver]" \
  "tests/integration/test_operator_conformance_lab.py::test_model_and_simulator_agree_with_the_real_operator[late-node]" \
  tests/integration/test_waits_lab.py::test_a_wait_rides_through_an_api_server_restart \
  tests/integration/test_waits_lab.py::test_gpu_allocatable_wait_sees_a_node_that_joins_while_it_waits \
  tests/integration/test_lab.py::test_the_arm64_dgx_spark_runs_the_same_daemonsets_without_a_driver_pod \
  tests/integration/test_lab.py::test_api_server_restart_keeps_the_cluster \
  tests/integration/test_lab.py::test_a_pod_marked_not_ready_by_the_node_lifecycle_controller_is_ready_again \
  tests/integration/test_waits_faults_lab.py::test_a_silently_stalled_wait_notices_and_sees_the_change \
  tests/integration/test_waits_faults_lab.py::test_a_wait_whose_watches_stall_ends_at_its_deadline \
  tests/integration/test_waits_faults_lab.py::test_a_signal_deletes_the_sample_pods

.PHONY: flake-hunt
flake-hunt: venv lab-binaries ## lab tests FLAKE_RUNS times in a row beside FLAKE_HOG CPU hogs; FLAKE_TESTS=ids or paths
	$(call say,flake hunt: $(FLAKE_RUNS) runs beside $(FLAKE_HOG) CPU hogs)
	$(PY) $(ROOT)/scripts/flake-hunt.py --runs $(FLAKE_RUNS) --hog $(FLAKE_HOG) $(FLAKE_TESTS)
