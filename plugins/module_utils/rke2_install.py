# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where and over what the rke2 role installs RKE2, and in which order, as pure functions: the
version skew between agents and servers, an RKE2 installed from RPMs that a tarball must not
be unpacked over, and the install prefix RKE2's install.sh chooses (/usr/local, or /opt/rke2
when /usr/local is read-only or a mount point). Each refusal names the host and what to do;
callers fail the task with it before anything on a host changes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2

DEFAULT_PREFIX = "/usr/local"
# install.sh: "install tarball to /usr/local by default, except if /usr/local is on a separate partition or is
# read-only in which case we go into /opt/rke2".
READ_ONLY_PREFIX = "/opt/rke2"
PREFIXES = (DEFAULT_PREFIX, READ_ONLY_PREFIX)
# Where an RPM install puts the binary (rke2-common), and the package rke2-uninstall.sh asks rpm for.
RPM_BINARY = "/usr/bin/rke2"
RPM_PACKAGE = "rke2-common"


def agent_skew_error(host, target, server_outputs):
    """Why agent ``host`` may not install ``target`` yet, or ''. ``server_outputs`` is
    {server: its ``rke2 --version`` output, or '' when it could not be asked or has none}.

    Kubernetes' version skew policy: the kubelet must not be newer than kube-apiserver (in minor
    versions, as the policy counts them). RKE2 upgrades servers first for it; an agent whose
    rke2_version is a newer minor release than a server runs would break it."""
    target_v = rke2.parse_version(target, "rke2_version")
    behind = []
    for server in sorted(server_outputs):
        version = rke2.version_in_output(server_outputs[server] or "")
        if version and rke2.parse_version(version, "%s's rke2" % server)[:2] < target_v[:2]:
            behind.append("%s runs %s" % (server, version))
    if not behind:
        return ""
    return ("%s: rke2_version %s is a newer minor release than the servers run (%s): upgrade the servers first "
            "(make rke2/server/install), since a kubelet may not be newer than the API server (Kubernetes' version "
            "skew policy)" % (host, target, ", ".join(behind)))


def package_install_error(host, rpm_rc=None, rpm_output="", rpm_binary_exists=False):
    """Why the tarball may not be unpacked on ``host``, or ''. ``rpm_rc``/``rpm_output``: what
    ``rpm -q rke2-common`` said (None where there is no rpm); ``rpm_binary_exists``: whether
    /usr/bin/rke2 exists. RKE2's RPMs install under /usr, the tarball under /usr/local: both at
    once leave two binaries and two units, and rke2-uninstall.sh then removes only the RPM's."""
    if rpm_rc == 0:
        found = "the RPM %s" % (rpm_output.strip().splitlines() or [RPM_PACKAGE])[0]
    elif rpm_binary_exists:
        found = "%s (a package's, not the tarball's)" % RPM_BINARY
    else:
        return ""
    return ("%s: RKE2 is installed from packages here (%s): the role installs the release tarball and will not "
            "unpack it over them. Remove the package install (rke2-uninstall.sh, or dnf remove 'rke2-*') first, "
            "or keep this host out of the role" % (host, found))


def install_prefix(installed_prefixes=(), default_is_mountpoint=False, default_is_writable=True, wanted="",
                   host="this host"):
    """The prefix the release tarball is unpacked into. ``wanted`` (rke2_install_prefix) when
    the site names one; else as install.sh chooses: /usr/local, unless /usr/local is a mount
    point or read-only, then /opt/rke2. A prefix that already holds a tarball install
    (``installed_prefixes``) is kept, so a later change of the mount does not install a second
    copy; a site that names another prefix, or a host with both, is refused."""
    installed = [p for p in PREFIXES if p in (installed_prefixes or ())]
    if len(installed) > 1:
        raise ValueError("%s: RKE2 is installed in both %s: remove one copy (its rke2-uninstall.sh) first"
                         % (host, " and ".join(installed)))
    if wanted:
        if wanted not in PREFIXES:
            raise ValueError("%s: rke2_install_prefix %r is not one of %s (or empty: as RKE2's install.sh chooses)"
                             % (host, wanted, ", ".join(PREFIXES)))
        if installed and installed[0] != wanted:
            raise ValueError("%s: rke2_install_prefix is %s, but RKE2 is installed in %s: moving it means "
                             "uninstalling it first (make rke2/uninstall), or leave rke2_install_prefix empty"
                             % (host, wanted, installed[0]))
        return wanted
    if installed:
        return installed[0]
    if default_is_mountpoint or not default_is_writable:
        return READ_ONLY_PREFIX
    return DEFAULT_PREFIX


def unit_for_prefix(unit_text, prefix):
    """The release's unit file for a tarball unpacked into ``prefix``: install.sh's
    ``sed -i "s|/usr/local|<prefix>|"`` (the first /usr/local of each line: ExecStart and the
    EnvironmentFile of the unit's .env file)."""
    if prefix == DEFAULT_PREFIX:
        return unit_text
    return "".join(line.replace(DEFAULT_PREFIX, prefix, 1) for line in unit_text.splitlines(True))
