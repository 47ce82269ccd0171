# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the rke2 role: the content of config.yaml from typed variables, the release
version in ``rke2 --version`` output, the upgrade rule, how a node takes part in the cluster
and which token it joins with, which cluster a node belongs to (a new cluster over an old
one's nodes, or a node of another cluster, refused), the host's release architecture and the
air-gap folder's checks, the service's restart (refused while a server is unknown) and start
failure, kube-vip's static pod for a fixed API address, the agents' version skew, an RPM
install the tarball must not be unpacked over, the HelmChartConfigs of the charts RKE2
deploys, the config.yaml.d drop-ins that would override the role, the staged releases to prune, firewalld's
trusted pod and service ranges, and day 2: the servers' etcd snapshot schedule, retention and S3 settings in
config.yaml, the etcd snapshot before a server upgrade, the certificates' state, and the restore from a snapshot
(its steps, the reset's outcome, the Nodes the inventory no longer has). Documentation in the sidecar files of the
same names (rke2_config.yml, ...)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_api_vip
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_charts
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_day2
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_host
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_install
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_membership as membership


def rke2_config(role, etcd_snapshots=None, **kwargs):
    # etcd_snapshots: {schedule_cron, retention, compress, s3}, the role's rke2_etcd_snapshot_* and rke2_etcd_s3.
    try:
        if etcd_snapshots is not None:
            kwargs["etcd_snapshots"] = rke2_day2.etcd_snapshot_config(role, etcd_snapshots)
        return rke2.build_config(role, **kwargs)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("rke2 config.yaml: %s" % exc)


def rke2_installed_version(output):
    return rke2.version_in_output(output) or ""


def rke2_upgrade_error(target, installed):
    try:
        return rke2.upgrade_error(installed or None, target)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def _failing(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc))


def rke2_join_plan(host, servers, holds_data, api_address="", servers_hostvars=None, token_given=False,
                   check_mode=False, running=None, joined_with="", member=False):
    # running: {server: what `systemctl is-active rke2-server` printed there, '' or None where it was not asked}.
    if running is not None:
        running = dict((server, str(answer).strip() == "active" if answer else None)
                       for server, answer in dict(running).items())
    plan = _failing(rke2.join_plan, host, list(servers), dict(holds_data), token_given=bool(token_given),
                    check_mode=bool(check_mode), running=running)
    addresses = rke2.server_addresses(dict(servers_hostvars or {}))
    address = rke2.join_address(api_address, addresses, plan["join_server"]) if plan["join_server"] else ""
    plan["join_address"] = membership.kept_join_address(address, joined_with or "", bool(member) and bool(address),
                                                        api_address, addresses)
    plan["unknown_servers"] = [server for server in servers if holds_data.get(server) is None]
    # The node names of the other servers that hold the datastore: before a server restarts, each must be Ready and
    # a voting etcd member (the quorum gate); k8s_node_name as the rke2 role's rke2_node_name defaults to it.
    plan["quorum_nodes"] = _node_names([server for server in servers if holds_data.get(server) is True
                                        and server != host], servers_hostvars)
    return plan


def _node_names(hosts, servers_hostvars):
    # Each host's Kubernetes node name: k8s_node_name, as the rke2 role's rke2_node_name defaults to it.
    hostvars = dict(servers_hostvars or {})
    return [str((hostvars.get(host) or {}).get("k8s_node_name") or host) for host in hosts]


def rke2_membership_error(host, plan, bundles=None, server_token="", confirmed=False):
    # bundles: {node: base64 of its agent/server-ca.crt, '' where it holds none}, as the role slurped them.
    members = _failing(membership.members_of, dict(bundles or {}))
    confirmed = bool(confirmed)
    if plan.get("starts_cluster") and not plan.get("token_source"):
        return membership.new_cluster_error(host, members, confirmed)
    cluster_ca = _failing(membership.token_ca_hash, server_token or "")
    return membership.foreign_cluster_error(host, members.get(host, []), cluster_ca,
                                            plan.get("token_source") or "", confirmed)


def rke2_removal_plan(host, servers=None, agents=None, servers_hostvars=None, node_name=""):
    # quorum_nodes as node names, as the quorum gate of a restart names them (rke2_join_plan).
    plan = membership.removal_plan(host, list(servers or []), list(agents or []), node_name or "")
    plan["quorum_nodes"] = _node_names(plan["quorum_nodes"], servers_hostvars)
    return plan


def rke2_node_names(hosts, servers_hostvars=None):
    return _node_names(list(hosts or []), servers_hostvars)


def rke2_network_change(new, current=None, member=False, host="this host", role="server"):
    return membership.network_change_error(dict(new or {}), current if isinstance(current, dict) else {},
                                           bool(member), host, role)


def rke2_trusted_sources(config):
    return membership.trusted_sources(dict(config or {}))


def _parsed_dropin(text):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        # Not the parser's message: it quotes the line, which may hold a secret.
        return rke2_host.NOT_YAML


def rke2_dropin_conflicts(dropins, config=None, host="this host"):
    # {file name: its text} as slurp read it; the parsing is the controller's.
    if isinstance(dropins, dict):
        dropins = dict((name, _parsed_dropin(text) if isinstance(text, (str, bytes)) else text)
                       for name, text in dropins.items())
    return _failing(rke2_host.dropin_conflicts, dropins, dict(config or {}), host)


def rke2_stale_stages(names, current, keep=1):
    return _failing(rke2_host.stale_stages, list(names or []), current, keep)


def rke2_snapshot_name(version):
    return _failing(rke2_day2.snapshot_name, version)


def rke2_saved_snapshots(output):
    return _failing(rke2_day2.saved_snapshots, output or "")


def rke2_certificate_report(check_json, host="this host"):
    return _failing(rke2_day2.certificate_report, check_json or "", host)


def rke2_restore_plan(snapshot, servers=None, s3=None, binary="", timeout=1800):
    # timeout from -e comes as a string of digits; anything else goes on for restore_plan to name.
    if isinstance(timeout, str) and timeout.strip().isdigit():
        timeout = int(timeout)
    return _failing(rke2_day2.restore_plan, servers if servers is not None else [], snapshot,
                    s3=s3 or None, binary=binary or "rke2", timeout=timeout)


def rke2_reset_failure(output, rc, host="the first server", timeout=None):
    return _failing(rke2_day2.reset_failure, output or "", rc, host, timeout)


def rke2_stale_nodes(nodes, inventory_names=None):
    # nodes: the lines of kubectl get nodes --output name (node/<name>).
    return _failing(membership.stale_nodes, nodes if nodes is not None else [],
                    inventory_names if inventory_names is not None else [])


def rke2_restart_refusal(host, reason, unknown_servers=None):
    return membership.restart_refusal(host, reason or "", list(unknown_servers or []))


def rke2_join_token(role, server_token="", agent_token="", given_token="", given_agent_token=""):
    # {token, error}: the task that reads the token hides its output, the refusal must show.
    try:
        return {"token": rke2.join_token(role, server_token=server_token or "", agent_token=agent_token or "",
                                         given_token=given_token or "", given_agent_token=given_agent_token or ""),
                "error": ""}
    except ValueError as exc:
        return {"token": "", "error": str(exc)}


def rke2_release_arch(machine, declared="", host="this host"):
    return _failing(rke2.release_arch, machine, declared or "", host)


def rke2_airgap_problems(images, arch, cni, host="this host", registry=False, listing=None, wanted=None):
    problems = _failing(rke2.image_archive_problems, list(images or []), arch, cni, host, bool(registry))
    if listing is not None:
        missing = rke2.bundle_missing(list(listing), list(wanted or []), arch, host)
        if missing:
            problems.append(missing)
    return problems


def rke2_archives_for_arch(images, arch):
    return rke2.archives_for_arch(list(images or []), arch)


def rke2_restart_reason(active, running_output="", installed_output="", changed=False, files=None, pid_stat="",
                        proc_stat=""):
    # files: {path: mtime or None}; pid_stat, proc_stat: /proc/<MainPID>/stat and /proc/stat ('' when unread).
    written = []
    if files and pid_stat and proc_stat:
        # A file that is not there has no mtime ('' from the role's stat).
        times = dict((path, float(mtime) if mtime not in (None, "") else None) for path, mtime in dict(files).items())
        written = rke2.written_after(times, _failing(rke2.process_start, pid_stat, proc_stat))
    return rke2.restart_reason(bool(active), rke2.version_in_output(running_output),
                               rke2.version_in_output(installed_output), bool(changed), written)


def rke2_start_failure(journal, unit, action, rc, timeout):
    return rke2.start_failure(unit, action, int(rc), int(timeout), journal)


def rke2_kube_vip_manifest(vip, interface="", image="", node_address="", api_address="", taken=None,
                           host="this host", airgapped=False, system_default_registry="", mirrors=None):
    image = image or rke2_api_vip.default_image(system_default_registry or "")
    found = _failing(rke2_api_vip.problems, vip, interface or "", node_address or "", api_address or "",
                     list(taken or []), host, bool(airgapped), system_default_registry or "", dict(mirrors or {}), image)
    if found:
        raise AnsibleFilterError("; ".join(found))
    return rke2_api_vip.manifest(vip, interface, image)


def rke2_agent_skew_error(host, target, server_outputs):
    return _failing(rke2_install.agent_skew_error, host, target, dict(server_outputs or {}))


def rke2_package_install_error(host, rpm_rc=None, rpm_output="", rpm_binary_exists=False):
    return rke2_install.package_install_error(host, None if rpm_rc is None else int(rpm_rc), rpm_output or "",
                                              bool(rpm_binary_exists))


def rke2_helm_chart_config_files(values, cni, canal_interface="", canal_mtu=0, header="", written=None):
    # Through JSON: plain dicts, lists and strings for the YAML dumper, not Ansible's tagged values.
    values = json.loads(json.dumps(values or {}))
    return _failing(rke2_charts.helm_chart_config_files, values, cni, canal_interface or "",
                    int(canal_mtu or 0), header or "", list(written or []))


def rke2_install_prefix(probe, installed=None, wanted="", host="this host"):
    # probe: "mountpoint=<rc of mountpoint -q /usr/local>" and "writable=<rc of test -w /usr/local>" lines.
    rcs = dict(line.split("=", 1) for line in (probe or "").splitlines() if "=" in line)
    return _failing(rke2_install.install_prefix, list(installed or []), rcs.get("mountpoint") == "0",
                    rcs.get("writable", "0") == "0", wanted or "", host)


def rke2_unit_for_prefix(unit_text, prefix):
    return rke2_install.unit_for_prefix(unit_text or "", prefix)


class FilterModule(object):
    def filters(self):
        return {
            "rke2_config": rke2_config,
            "rke2_installed_version": rke2_installed_version,
            "rke2_upgrade_error": rke2_upgrade_error,
            "rke2_join_plan": rke2_join_plan,
            "rke2_join_token": rke2_join_token,
            "rke2_membership_error": rke2_membership_error,
            "rke2_restart_refusal": rke2_restart_refusal,
            "rke2_removal_plan": rke2_removal_plan,
            "rke2_trusted_sources": rke2_trusted_sources,
            "rke2_dropin_conflicts": rke2_dropin_conflicts,
            "rke2_stale_stages": rke2_stale_stages,
            "rke2_snapshot_name": rke2_snapshot_name,
            "rke2_network_change": rke2_network_change,
            "rke2_node_names": rke2_node_names,
            "rke2_saved_snapshots": rke2_saved_snapshots,
            "rke2_certificate_report": rke2_certificate_report,
            "rke2_restore_plan": rke2_restore_plan,
            "rke2_reset_failure": rke2_reset_failure,
            "rke2_stale_nodes": rke2_stale_nodes,
            "rke2_release_arch": rke2_release_arch,
            "rke2_airgap_problems": rke2_airgap_problems,
            "rke2_archives_for_arch": rke2_archives_for_arch,
            "rke2_restart_reason": rke2_restart_reason,
            "rke2_start_failure": rke2_start_failure,
            "rke2_kube_vip_manifest": rke2_kube_vip_manifest,
            "rke2_agent_skew_error": rke2_agent_skew_error,
            "rke2_package_install_error": rke2_package_install_error,
            "rke2_helm_chart_config_files": rke2_helm_chart_config_files,
            "rke2_install_prefix": rke2_install_prefix,
            "rke2_unit_for_prefix": rke2_unit_for_prefix,
        }
