# RKE2 bootstrap, ADR steps 1-4 (docs/rke2.md): host network, inventory rendering, servers and agents, kubeconfig.
# Included by the root Makefile (ROOT, BIN, SITE, PLAYBOOK and the ANSIBLE_* exports come from there). Each target runs its
# step alone against inventories/$(SITE)/hosts.yml; RKE2_ARGS passes more ansible-playbook arguments
# (for example RKE2_ARGS='--check --diff' or RKE2_ARGS='--limit tirosh-gpu-1').

RKE2_ARGS ?=

.PHONY: inventory/render host/network rke2/server/install rke2/agent/install rke2/kubeconfig

inventory/render: venv ## step 2: render inventories/SITE/ from sites/SITE/site.yml
	$(BIN)/ansible-playbook $(ROOT)/playbooks/inventory.yml -e site=$(SITE) $(RKE2_ARGS)

host/network: venv ## step 1: static IP, gateway and DNS of SITE's hosts (netplan or NetworkManager, with rollback)
	$(PLAYBOOK) playbooks/host_network.yml $(RKE2_ARGS)

rke2/server/install: venv ## step 3: install or upgrade SITE's RKE2 servers, first server first, one at a time
	$(PLAYBOOK) playbooks/rke2_server.yml $(RKE2_ARGS)

rke2/agent/install: venv ## step 3: install or upgrade SITE's RKE2 agents, one at a time
	$(PLAYBOOK) playbooks/rke2_agent.yml $(RKE2_ARGS)

rke2/kubeconfig: venv ## step 4: merge SITE's cluster into the operator's kubeconfig (context SITE)
	$(PLAYBOOK) playbooks/kubeconfig.yml $(RKE2_ARGS)

.PHONY: rke2/uninstall rke2/node/remove rke2/restore rke2/certificates/rotate
rke2/certificates/rotate: venv ## renew SITE's RKE2 certificates now: servers one at a time behind the quorum gate, then agents
	$(PLAYBOOK) playbooks/rke2_certificates_rotate.yml $(RKE2_ARGS)

rke2/node/remove: venv ## take one node out of SITE's cluster for good (quorum gate, drain, Node, etcd member, node-password secret, uninstall): NODE=host CONFIRM=SITE
	$(PLAYBOOK) playbooks/rke2_remove_node.yml -e rke2_remove_node='$(NODE)' -e rke2_uninstall_confirm='$(CONFIRM)' $(RKE2_ARGS)

rke2/restore: venv ## put SITE's cluster back to an etcd snapshot (every server stopped, cluster-reset on the first, the others' db moved aside and rejoined one at a time, stale Nodes reported): SNAPSHOT=name CONFIRM=name
	$(PLAYBOOK) playbooks/rke2_restore.yml -e rke2_restore_snapshot='$(SNAPSHOT)' -e rke2_confirm_restore='$(CONFIRM)' $(RKE2_ARGS)

rke2/uninstall: venv ## uninstall RKE2 from SITE's nodes (the release's rke2-uninstall.sh; destroys the cluster): CONFIRM=SITE
	$(PLAYBOOK) playbooks/rke2_uninstall.yml -e rke2_uninstall_confirm='$(CONFIRM)' $(RKE2_ARGS)
