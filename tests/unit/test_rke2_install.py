"""Where and over what the rke2 role installs RKE2, and in which order (module_utils/rke2_install.py
and its filters): agents never newer than the servers, no tarball over an RPM install, and the
install prefix and unit file as RKE2's install.sh makes them."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuplatform.rke2.plugins.filter import rke2 as rke2_filters
from ansible_collections.gpuplatform.rke2.plugins.module_utils import rke2_install as ri

V134 = "rke2 version v1.34.1+rke2r1 (98b87c78)\ngo version go1.24.6 X:boringcrypto\n"
V135 = "rke2 version v1.35.0+rke2r1 (0123abcd)\n"


# ---------------------------------------------------------------- agents after servers

def test_an_agent_may_match_or_trail_the_servers_and_take_a_newer_patch():
    assert ri.agent_skew_error("gpu-1", "v1.34.1+rke2r1", {"cp-1": V134, "cp-2": V134}) == ""
    assert ri.agent_skew_error("gpu-1", "v1.33.5+rke2r1", {"cp-1": V134}) == ""
    # The skew policy counts minor versions: a newer patch of the same minor is within it.
    assert ri.agent_skew_error("gpu-1", "v1.34.2+rke2r1", {"cp-1": V134}) == ""


def test_an_agent_newer_than_a_server_is_refused_naming_each_server_behind():
    error = ri.agent_skew_error("gpu-1", "v1.35.0+rke2r1", {"cp-2": V134, "cp-1": V135, "cp-3": V134})
    assert error == ("gpu-1: rke2_version v1.35.0+rke2r1 is a newer minor release than the servers run (cp-2 runs "
                     "v1.34.1+rke2r1, cp-3 runs v1.34.1+rke2r1): upgrade the servers first (make "
                     "rke2/server/install), since a kubelet may not be newer than the API server (Kubernetes' "
                     "version skew policy)")


def test_a_server_without_an_answer_is_not_counted():
    assert ri.agent_skew_error("gpu-1", "v1.35.0+rke2r1", {"cp-1": V135, "cp-2": "", "cp-3": "No such file"}) == ""


def test_skew_filter_names_a_bad_version():
    with pytest.raises(AnsibleFilterError, match="rke2_version 'latest' is not an RKE2 release version"):
        rke2_filters.rke2_agent_skew_error("gpu-1", "latest", {"cp-1": V134})


# ---------------------------------------------------------------- RPM installs

def test_an_rpm_install_is_refused_naming_the_package():
    error = rke2_filters.rke2_package_install_error("el-1", 0, "rke2-common-1.34.1~rke2r1-0.el9.x86_64\n", True)
    assert error.startswith("el-1: RKE2 is installed from packages here (the RPM rke2-common-1.34.1~rke2r1-0.el9"
                            ".x86_64): the role installs the release tarball and will not unpack it over them")
    assert "rke2-uninstall.sh" in error


def test_a_packaged_binary_without_rpm_is_refused_too():
    error = rke2_filters.rke2_package_install_error("deb-1", None, "", True)
    assert "(/usr/bin/rke2 (a package's, not the tarball's))" in error


def test_a_host_without_packages_passes():
    assert rke2_filters.rke2_package_install_error("el-1", 1, "package rke2-common is not installed", False) == ""
    assert rke2_filters.rke2_package_install_error("deb-1", None, "", False) == ""


# ---------------------------------------------------------------- the install prefix (install.sh)

@pytest.mark.parametrize("installed, mountpoint, writable, prefix", [
    ((), False, True, "/usr/local"),
    ((), True, True, "/opt/rke2"),
    ((), False, False, "/opt/rke2"),
    # An existing install stays where it is, whatever the mount says now.
    (("/usr/local",), True, False, "/usr/local"),
    (("/opt/rke2",), False, True, "/opt/rke2"),
])
def test_install_prefix_is_install_shs(installed, mountpoint, writable, prefix):
    assert ri.install_prefix(installed, mountpoint, writable) == prefix


def test_a_named_prefix_is_taken_unless_rke2_is_installed_elsewhere():
    assert ri.install_prefix((), True, False, wanted="/usr/local") == "/usr/local"
    assert ri.install_prefix(("/opt/rke2",), wanted="/opt/rke2") == "/opt/rke2"
    with pytest.raises(ValueError, match="cp-1: rke2_install_prefix is /opt/rke2, but RKE2 is installed in /usr/local: "
                                         "moving it means uninstalling it first"):
        ri.install_prefix(("/usr/local",), wanted="/opt/rke2", host="cp-1")
    with pytest.raises(ValueError, match="rke2_install_prefix '/usr' is not one of /usr/local, /opt/rke2"):
        ri.install_prefix((), wanted="/usr", host="cp-1")
    with pytest.raises(ValueError, match="cp-1: RKE2 is installed in both /usr/local and /opt/rke2"):
        ri.install_prefix(("/opt/rke2", "/usr/local"), host="cp-1")


def test_prefix_filter_reads_the_probe():
    probe = "mountpoint=1\nwritable=1\n"
    assert rke2_filters.rke2_install_prefix(probe, [], "", "cp-1") == "/opt/rke2"
    assert rke2_filters.rke2_install_prefix("mountpoint=0\nwritable=0\n", [], "", "cp-1") == "/opt/rke2"
    assert rke2_filters.rke2_install_prefix("mountpoint=127\nwritable=0\n", [], "", "cp-1") == "/usr/local"
    assert rke2_filters.rke2_install_prefix("", ["/opt/rke2"], "", "cp-1") == "/opt/rke2"
    with pytest.raises(AnsibleFilterError, match="but RKE2 is installed in /opt/rke2"):
        rke2_filters.rke2_install_prefix(probe, ["/opt/rke2"], "/usr/local", "cp-1")


def test_unit_for_opt_rke2_rewrites_the_first_usr_local_of_each_line_as_install_sh_does():
    unit = ("EnvironmentFile=-/usr/local/lib/systemd/system/%N.env\n"
            "ExecStart=/usr/local/bin/rke2 server\n"
            "ExecStopPost=-/bin/sh -c \"echo /usr/local /usr/local\"\n")
    assert ri.unit_for_prefix(unit, "/opt/rke2") == (
        "EnvironmentFile=-/opt/rke2/lib/systemd/system/%N.env\n"
        "ExecStart=/opt/rke2/bin/rke2 server\n"
        "ExecStopPost=-/bin/sh -c \"echo /opt/rke2 /usr/local\"\n")
    assert ri.unit_for_prefix(unit, "/usr/local") == unit
