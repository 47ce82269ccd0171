# Site as code (docs/site-render.md): everything a site produces that needs neither hosts nor a cluster, rendered
# into sites/SITE/ for review and commit, and the check that the committed files are what the site renders.
# Included by the root Makefile (BIN, ROOT, SITE, SITE_ENV and the ANSIBLE_* exports come from there).
#
# make site/render [SITE=tirosh-home] [RENDER_ARGS="--check --diff"]   inventory, then sites/SITE/ (only what changed)
# make site-check  [SITE=tirosh-home]      re-render into a temporary copy; fail on any difference, printing it
# SITE_ROOT is the folder holding sites/ and inventories/ (default this checkout; site-check sets a copy).
SITE_ROOT ?= $(ROOT)
RENDER_ARGS ?=
SITE_RENDER_PLAYBOOK = cd $(ROOT) && $(SITE_ENV) PATH=$(BIN):$$PATH $(BIN)/ansible-playbook -e site_root=$(SITE_ROOT)

.PHONY: site/render site-check
site/render: venv ## render SITE's inventory, HelmChart, Argo CD Application, KubeVirt patch, label plan, RKE2 host files, image plan
	$(SITE_RENDER_PLAYBOOK) playbooks/inventory.yml -e site=$(SITE) -e site_inventory_complete=true \
	  -e 'site_inventory_rerun="make site/render SITE=$(SITE)"' $(RENDER_ARGS)
	$(SITE_RENDER_PLAYBOOK) -i $(SITE_ROOT)/inventories/$(SITE)/hosts.yml playbooks/site_render.yml $(RENDER_ARGS)

site-check: venv ## re-render SITE from its site file into a temporary copy; fail on any difference with sites/SITE/ and inventories/SITE/
	$(call say,site-check: sites/$(SITE) and inventories/$(SITE) are what sites/$(SITE)/site.yml renders)
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/gpuplatform-site-check.XXXXXX"); trap 'rm -rf "$$tmp"' EXIT; \
	  mkdir -p "$$tmp/sites/$(SITE)" && cp $(ROOT)/sites/$(SITE)/site.yml "$$tmp/sites/$(SITE)/"; \
	  if ! $(MAKE) site/render SITE=$(SITE) SITE_ROOT="$$tmp" >"$$tmp/render.log" 2>&1; then \
	    cat "$$tmp/render.log"; echo "site-check: make site/render SITE=$(SITE) failed on a fresh copy"; exit 1; fi; \
	  rm "$$tmp/render.log"; cd $(ROOT); status=0; \
	  for dir in sites/$(SITE) inventories/$(SITE); do \
	    diff -ru "$$dir" "$$tmp/$$dir" || status=1; done; \
	  if [ $$status -ne 0 ]; then \
	    echo "site-check: the committed files differ from what sites/$(SITE)/site.yml renders (diff above:" \
	      "committed, then rendered): run make site/render SITE=$(SITE), review and commit the result"; exit 1; fi; \
	  echo "site-check: sites/$(SITE) and inventories/$(SITE) are what sites/$(SITE)/site.yml renders"
