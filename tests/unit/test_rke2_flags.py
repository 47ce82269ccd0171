"""The server-only key list (plugins/module_utils/rke2_flags.py) is what the real rke2
says: generated from ``rke2 server --help`` and ``rke2 agent --help`` by
tests/lab/rke2_flags.py (make rke2-flags). tests/rke2/ checks it against the real binary."""
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_flags
from tests.lab import rke2_flags as generator

# urfave/cli's help, as rke2 v1.34.1 prints it (abridged).
HELP = """NAME:
   rke2 agent - Run node agent

USAGE:
   rke2 agent [OPTIONS]

OPTIONS:
   --config FILE, -c FILE                        (config) Load configuration from FILE (default: "/etc/rancher/rke2/config.yaml") [$RKE2_CONFIG_FILE]
   --debug                                       (logging) Turn on debug logs [$RKE2_DEBUG]
   --data-dir value, -d value                    (data) Folder to hold state (default: "/var/lib/rancher/rke2") [$RKE2_DATA_DIR]
   --node-label value [ --node-label value ]     (agent/node) Registering and starting kubelet with set of labels
   --help, -h                                    show help
"""


def test_flags_are_read_from_the_help_text():
    assert generator.flags_in_help(HELP) == ["c", "config", "d", "data-dir", "debug", "node-label"]


def test_the_generated_file_is_what_its_generator_renders():
    with open(generator.TARGET) as handle:
        committed = handle.read()
    assert committed == generator.render(rke2_flags.RKE2_VERSION, list(rke2_flags.SERVER_FLAGS),
                                         list(rke2_flags.AGENT_FLAGS))
    assert set(rke2_flags.SERVER_ONLY_FLAGS) == set(rke2_flags.SERVER_FLAGS) - set(rke2_flags.AGENT_FLAGS)


def test_server_only_keys_are_the_ones_agents_lack():
    # What the issue found missing from the hand-written list, and what agents do accept.
    for key in ("advertise-address", "agent-token", "datastore-endpoint", "etcd-expose-metrics", "cni", "tls-san",
                "system-default-registry", "disable", "cluster-cidr"):
        assert key in rke2_flags.SERVER_ONLY_FLAGS, key
    for key in ("node-name", "node-ip", "node-label", "kubelet-arg", "protect-kernel-defaults", "selinux", "server",
                "token-file", "profile"):
        assert key in rke2_flags.AGENT_FLAGS and key not in rke2_flags.SERVER_ONLY_FLAGS, key
