# The whole site (site.yml) and the steps that are not another area's: verification (6) and
# Argo CD (7). Included by the root Makefile (PLAYBOOK, SITE).
#
# make site [SITE=tirosh-home] [SITE_ARGS="--tags step5"]
# make rke2/gpu/verify [SITE=...]      step 6: report in artifacts/SITE/
# make argocd/apply [SITE=...]         step 7
SITE_ARGS ?=
VERIFY_ARGS ?=
ARGOCD_ARGS ?=

.PHONY: site rke2/gpu/verify argocd/apply
site: venv ## all seven steps of SITE in the ADR order (SITE_ARGS="--tags step5,step6")
	$(PLAYBOOK) site.yml $(SITE_ARGS)

rke2/gpu/verify: venv ## step 6: operands, allocatable GPUs, CUDA sample, checks; report in artifacts/SITE/
	$(PLAYBOOK) playbooks/gpu_verify.yml $(VERIFY_ARGS)

argocd/apply: venv ## step 7: SITE's Argo CD Applications, once step 6 passed
	$(PLAYBOOK) playbooks/argocd_apps.yml $(ARGOCD_ARGS)
