# gpuplatform.rke2: one Makefile for set-up, the lab, the site's steps and the tests.
# `make help` lists the targets. Everything runs from the project virtualenv (.venv),
# which the first target that needs it creates from the pinned requirements.txt.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

ROOT      := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
VENV      := $(ROOT)/.venv
PY        := $(VENV)/bin/python
BIN       := $(VENV)/bin
COLL_ROOT := $(ROOT)/.build/collections
COLL_LINK := $(COLL_ROOT)/ansible_collections/gpuplatform/rke2
# The example site; SITE=lab is the lab.
SITE      ?= tirosh-home
LAB_DIR   := $(ROOT)/.lab
KUBECONFIG_LAB := $(LAB_DIR)/kubeconfig
SANITY_DIR := $(or $(TMPDIR),/tmp)/gpuplatform-rke2-sanity-$(shell printf '%s' "$(ROOT)" | sha256sum | cut -c1-8)
SANITY_COLL := $(SANITY_DIR)/ansible_collections/gpuplatform/rke2

export ANSIBLE_CONFIG := $(ROOT)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(COLL_ROOT)
export ANSIBLE_HOME := $(ROOT)/.build/ansible-home
export ANSIBLE_LOCAL_TEMP := $(ROOT)/.build/ansible-tmp
export ANSIBLE_REMOTE_TEMP := $(ROOT)/.build/ansible-tmp
export PYTHONDONTWRITEBYTECODE := 1
export PYTHONPATH := $(COLL_ROOT)

# Every site step runs ansible-playbook on inventories/$(SITE)/hosts.yml; SITE=lab talks to the
# lab's API server unless K8S_AUTH_KUBECONFIG says otherwise.
# The lab site's HelmChart points at the lab's chart repository (LAB_CHART_REPO, from labctl env), and names
# the version the lab runs (GPU_OPERATOR_VERSION, from labctl env: the lab's, whatever make was given; a lab
# other than .lab, whose K8S_AUTH_KUBECONFIG and LAB_CHART_REPO are in the environment, says LAB_GPU_OPERATOR_VERSION).
SITE_ENV = $(if $(filter lab,$(SITE)),K8S_AUTH_KUBECONFIG=$${K8S_AUTH_KUBECONFIG:-$(KUBECONFIG_LAB)} \
  LAB_CHART_REPO=$${LAB_CHART_REPO:-$$($(PY) -m tests.lab.labctl env 2>/dev/null | sed -n 's/^LAB_CHART_REPO=//p')} \
  GPU_OPERATOR_VERSION=$${LAB_GPU_OPERATOR_VERSION:-$$($(PY) -m tests.lab.labctl env 2>/dev/null | \
  sed -n 's/^GPU_OPERATOR_VERSION=//p')})
# SITE=lab: the inventory of the fleet the lab runs (a generated one after `make lab-up LAB_NODES=n`).
SITE_INVENTORY = $(if $(filter lab,$(SITE)),$${LAB_INVENTORY:-$$($(PY) -m tests.lab.labctl env 2>/dev/null | \
  sed -n 's/^LAB_INVENTORY=//p')},inventories/$(SITE)/hosts.yml)
PLAYBOOK = cd $(ROOT) && $(SITE_ENV) PATH=$(BIN):$$PATH $(BIN)/ansible-playbook -i $(SITE_INVENTORY)

say = @printf '\n\033[1m==> %s\033[0m\n' "$(1)"

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_/.-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 32

# ---------------------------------------------------------------- environment
$(VENV)/.installed: requirements.txt scripts/find-python.sh
	$(call say,creating .venv from requirements.txt (pinned))
	@python=$$(scripts/find-python.sh); echo "using $$python ($$($$python --version))"; \
	  [ -x $(PY) ] || $$python -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip==25.3
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

.PHONY: venv
venv: $(VENV)/.installed $(COLL_LINK) ## create the project virtualenv and the collection path

$(COLL_LINK):
	@mkdir -p $(dir $@) $(ROOT)/.build/ansible-tmp
	@ln -sfn ../../../.. $@

.PHONY: lock
lock: ## re-freeze requirements.txt from requirements.in
	@python=$$(scripts/find-python.sh); rm -rf .build/lockvenv; $$python -m venv .build/lockvenv; \
	  .build/lockvenv/bin/pip install --quiet -r requirements.in; \
	  { echo "# Frozen from requirements.in by 'make lock'; install with pip -r."; .build/lockvenv/bin/pip freeze; } > requirements.txt

# ---------------------------------------------------------------- lab
.PHONY: lab-build lab-up lab-down lab-status
lab-build: venv ## build the lab binaries: control plane, helm, helm-controller, the GPU Operator, rke2 (cached outside the repo; minutes when cold)
	$(PY) -m tests.lab.labctl build

# What the lab runs, without rke2: only molecule/rke2 asks the real rke2, and its cold build is a quarter hour.
.PHONY: lab-binaries
lab-binaries: venv ## the lab binaries without rke2: what make demo and the lab suites run
	$(PY) -m tests.lab.labctl build --part lab

.PHONY: rke2-flags
rke2-flags: venv ## regenerate plugins/module_utils/rke2_flags.py from the real rke2's --help (make lab-build first)
	$(PY) -m tests.lab.rke2_flags

# LAB_NODES=<n>: a generated fleet of n nodes in the lab fleet's proportions (inventory: .lab/hosts.yml, which
# SITE=lab targets then use); empty: inventories/lab/hosts.yml.
LAB_NODES ?=
lab-up: venv ## start the lab (control plane, GPU Operator, simulated GPU fleet) and roll the operator out; LAB_NODES=n: n generated nodes
	$(PY) -m tests.lab.labctl up $(if $(strip $(LAB_NODES)),--nodes $(LAB_NODES))

lab-down: venv ## stop the lab; no process is left behind
	$(PY) -m tests.lab.labctl down

lab-status: venv ## show the lab's processes, kubeconfig and nodes
	$(PY) -m tests.lab.labctl status

# ---------------------------------------------------------------- tests
.PHONY: test lint sanity unit integration conformance-versions integration-helm3 rke2-binary-tests molecule build-collection docs-check
# The run's longest stretch is the lab's: its binaries' build (cold: about a quarter hour on 2 cores) and then the
# integration suite, which waits on the API much of the time. That line runs at normal priority and everything
# else runs beside it at nice 10, in background chains that take the CPU it leaves (docs/lab.md, "make test"):
#   checks: lint, sanity, unit, site-check, build-collection (no lab), then molecule/default and the
#           conformance suite on the operator's other line (conformance-versions: v26.7.0), each in a lab of its own;
#   side:   the real rke2's build, then the suites that need only that binary (tests/rke2, molecule/rke2: no lab,
#           no Kubernetes API), then the lab suites on helm v3 (integration-helm3), in a lab of its own.
# With the integration suite a third starts: the real operators of the other lines (labctl build --part
# operators), which its driver and chart upgrade suites would otherwise build in their own time; a suite that asks
# one while it builds waits for that build (tests/lab/build.sh's lock).
# Niced, a chain waiting on the CPU does not make the integration suite's deadlines tighter. Each chain's output is
# kept in a log and printed whole when the integration suite has ended; a chain's failure fails make test. A
# failure of the checks before the lab's build is done stops the run there; a failure of the integration suite
# stops every chain (each is one process group, setsid).
LAB_BUILD_LOG := $(ROOT)/.build/lab-build.log
CHECKS_LOG := $(ROOT)/.build/checks.log
OPERATORS_BUILD_LOG := $(ROOT)/.build/operators-build.log
RKE2_BUILD_LOG := $(ROOT)/.build/rke2-build.log
RKE2_SUITES_LOG := $(ROOT)/.build/rke2-suites.log
SUBMAKE := $(MAKE) --no-print-directory
# NICED CMD...: CMD in a session of its own (one process group, stopped together) at nice 10. A new session is a
# new scheduling group where the kernel groups by session (sched_autogroup_enabled=1, Debian's default), and groups
# share the CPU equally whatever their processes' nice values: the group's own nice is set as well
# (/proc/self/autogroup), or the chains would take a core from the integration suite (docs/lab.md, "make test").
NICED := setsid sh -c 'if [ -w /proc/self/autogroup ]; then echo 10 > /proc/self/autogroup; fi; exec nice -n 10 "$$@"' niced
test: venv ## every test: lint, sanity, unit, lab integration, molecule
	@mkdir -p $(ROOT)/.build
	@echo "checks: lint, sanity, unit, site-check, build-collection, then molecule/default and conformance-versions, niced beside the lab (log: $(CHECKS_LOG))"
	@$(NICED) sh -c '$(SUBMAKE) lint && $(SUBMAKE) sanity && $(SUBMAKE) unit site-check && \
	    $(SUBMAKE) build-collection && $(SUBMAKE) molecule MOLECULE_SCENARIOS=default && \
	    $(SUBMAKE) conformance-versions' > $(CHECKS_LOG) 2>&1 & checks=$$!; \
	  trap 'kill -- -$$checks 2>/dev/null' EXIT; \
	  echo "lab binaries: building (log: $(LAB_BUILD_LOG))"; \
	  if ! $(PY) -m tests.lab.labctl build --part lab > $(LAB_BUILD_LOG) 2>&1; then \
	    cat $(LAB_BUILD_LOG); echo "lab binaries: the build failed (above)"; exit 1; fi; \
	  tail -n 3 $(LAB_BUILD_LOG); \
	  checks_rc=; if ! kill -0 $$checks 2>/dev/null; then wait $$checks; checks_rc=$$?; fi; \
	  if [ -n "$$checks_rc" ] && [ $$checks_rc -ne 0 ]; then \
	    cat $(CHECKS_LOG); echo "checks failed (exit $$checks_rc; output above)"; exit 1; fi; \
	  echo "side: the real rke2's build, then tests/rke2, molecule/rke2 and integration-helm3, niced beside the lab suites (logs: $(RKE2_BUILD_LOG), $(RKE2_SUITES_LOG))"; \
	  $(NICED) sh -c '$(PY) -m tests.lab.labctl build --part rke2 > $(RKE2_BUILD_LOG) 2>&1 || \
	    { cat $(RKE2_BUILD_LOG); echo "rke2: the build failed (above)"; exit 1; }; \
	    tail -n 2 $(RKE2_BUILD_LOG); $(SUBMAKE) rke2-binary-tests && \
	    $(SUBMAKE) molecule MOLECULE_SCENARIOS=rke2 && $(SUBMAKE) integration-helm3' > $(RKE2_SUITES_LOG) 2>&1 & side=$$!; \
	  echo "operators: the other lines' real operators, niced, ahead of the suites that ask them (log: $(OPERATORS_BUILD_LOG))"; \
	  $(NICED) $(PY) -m tests.lab.labctl build --part operators > $(OPERATORS_BUILD_LOG) 2>&1 & operators=$$!; \
	  trap 'kill -- -$$checks -$$side -$$operators 2>/dev/null' EXIT; \
	  $(MAKE) integration || exit 1; \
	  echo "waiting for the checks and the side (logs: $(CHECKS_LOG), $(RKE2_SUITES_LOG))"; \
	  wait $$operators; operators_rc=$$?; if [ -z "$$checks_rc" ]; then wait $$checks; checks_rc=$$?; fi; \
	  wait $$side; side_rc=$$?; trap - EXIT; \
	  echo "---------------- operators (the other lines' real operators, built ahead): the build's output"; \
	  cat $(OPERATORS_BUILD_LOG); \
	  echo "---------------- checks (lint, sanity, unit, site-check, build-collection, molecule/default, conformance-versions): their output"; \
	  cat $(CHECKS_LOG); \
	  echo "---------------- side (the real rke2's build, tests/rke2, molecule/rke2, integration-helm3): its output"; \
	  cat $(RKE2_SUITES_LOG); \
	  if [ $$operators_rc -ne 0 ]; then echo "operators: the build failed (exit $$operators_rc; output above)"; fi; \
	  if [ $$checks_rc -ne 0 ]; then echo "checks failed (exit $$checks_rc; output above)"; fi; \
	  if [ $$side_rc -ne 0 ]; then echo "side failed (exit $$side_rc; output above)"; fi; \
	  [ $$operators_rc -eq 0 ] && [ $$checks_rc -eq 0 ] && [ $$side_rc -eq 0 ]
	$(call say,make test: all suites passed)

lint: venv ## ansible-lint with the production profile
	$(call say,ansible-lint --profile production)
	$(BIN)/ansible-lint --profile production

sanity: venv ## ansible-test sanity on a copy of the collection in an ansible_collections tree
	$(call say,ansible-test sanity)
	@# The copy lives outside this checkout: inside it, git would report the copy as ignored
	@# files and ansible-test would skip every target.
	@rm -rf $(SANITY_DIR) && mkdir -p $(SANITY_COLL)
	@git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} $(SANITY_COLL)/ 2>/dev/null || true
	@pip_version=$$($(PY) -c 'import inspect, re, ansible_test._internal.python_requirements as m; print(re.search(r"pip=.([0-9.]+)", inspect.getsource(m)).group(1))'); \
	  mkdir -p $(ROOT)/.build/sanity-home/.ansible/test/cache; \
	  cp scripts/ansible-test-get-pip.py $(ROOT)/.build/sanity-home/.ansible/test/cache/get_pip_$${pip_version//./_}.py
	cd $(SANITY_COLL) && \
	  HOME=$(ROOT)/.build/sanity-home PATH=$(BIN):$$PATH $(BIN)/ansible-test sanity --color no \
	    --python $$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')

unit: venv browser ## unit tests (pure logic, no cluster; the report's page in Debian's chromium, see mk/report.mk)
	$(call say,unit tests)
	$(PY) -m pytest tests/unit -q

integration: venv lab-binaries ## lab integration tests (brings the lab up for the session)
	$(call say,lab integration tests)
	$(PY) -m pytest tests/integration -q -rs --durations=25

# The GPU Operator lines beside the ADR's v26.3.2 that the conformance suite also judges, each by its own real
# operator and chart (built on first use: about 3 minutes on 2 cores; docs/gpu-operator.md, chart versions).
CONFORMANCE_VERSIONS ?= v26.7.0
conformance-versions: venv lab-binaries ## the operand model against the real operator of each CONFORMANCE_VERSIONS line
	@for version in $(CONFORMANCE_VERSIONS); do \
	  echo "==> conformance: the operand model against the real GPU Operator $$version"; \
	  GPU_OPERATOR_VERSION=$$version $(PY) -m pytest tests/integration/test_operator_conformance_lab.py -q -rs \
	    --durations=5 || exit 1; done

# The lab's install Jobs run helm v4, as current RKE2 lines do; the pinned RKE2 v1.34.1 still runs helm v3 (v3.18.4,
# docs/lab.md "Helm as RKE2 runs it"). The suites where helm's own behaviour decides the outcome run again on it.
HELM3_SUITES ?= tests/integration/test_real_chart_lab.py tests/integration/test_upgrade_failure_lab.py \
  tests/integration/test_operator_upgrade_lab.py
integration-helm3: venv lab-binaries ## the lab suites where helm decides, with helm v3 in the install Jobs (RKE2 v1.34.1's)
	$(call say,lab suites on helm v3 (the pinned RKE2 line's))
	LAB_HELM=v3 $(PY) -m pytest $(HELM3_SUITES) -q -rs --durations=5

rke2-binary-tests: venv lab-build ## the checks against the real rke2 binary (tests/rke2: the server-only key list)
	$(call say,checks against the real rke2 binary)
	$(PY) -m pytest tests/rke2 -q -rs

# Every scenario by default; make molecule MOLECULE_SCENARIOS=rke2 runs one.
MOLECULE_SCENARIOS ?= $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml)))
# Only molecule/rke2 asks the real rke2 (lab-build builds it); molecule/default needs the lab binaries alone.
molecule: venv $(if $(filter-out default,$(MOLECULE_SCENARIOS)),lab-build,lab-binaries) ## molecule scenarios
	$(call say,molecule scenarios)
	@# Each scenario's output is kept in .build/molecule-<scenario>.log; on a failure the failed tasks are printed
	@# again at the end, where a CI log's tail shows them (molecule's own summary names only the playbook).
	@if ls molecule/*/molecule.yml >/dev/null 2>&1; then \
	  for s in $(MOLECULE_SCENARIOS); do \
	    log=$(ROOT)/.build/molecule-$$s.log; \
	    if ! PATH=$(BIN):$$PATH $(BIN)/molecule test -s $$s 2>&1 | tee $$log; then \
	      echo "molecule $$s failed; its failed tasks (full log: $$log):"; \
	      sed 's/\x1b\[[0-9;]*m//g' $$log | grep -E -A12 '(fatal|failed): \[' | cut -c1-400 | tail -n 60; \
	      exit 1; \
	    fi; \
	  done; \
	else echo "no molecule scenarios yet"; fi

build-collection: venv ## build the collection tarball, install it, render every module's docs
	$(call say,ansible-galaxy collection build + install + ansible-doc)
	@rm -rf .build/dist .build/installed && mkdir -p .build/dist .build/installed
	$(BIN)/ansible-galaxy collection build --output-path .build/dist --force .
	$(BIN)/ansible-galaxy collection install --force -p .build/installed .build/dist/gpuplatform-rke2-*.tar.gz
	$(PY) scripts/check-collection.py .build/dist .build/installed

# ---------------------------------------------------------------- demo
.PHONY: demo
demo: venv lab-binaries ## the main job on the lab: labels, GPU Operator, verification, report, the seeds' stories
	$(PY) scripts/demo.py

# Per-area targets (checks, waits, roles, RKE2 steps, air-gap) live in mk/*.mk.
-include $(sort $(wildcard mk/*.mk))
