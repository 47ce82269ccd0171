"""kubeconfig_merge: the pure merge (module_utils/kubeconfig.py) and the module's file
handling, against kubeconfigs shaped as RKE2 and kubectl write them."""
import base64
import os
import stat

import pytest
import yaml

from ansible_collections.gpuplatform.rke2.plugins.module_utils import kubeconfig as kc
from tests.unit.module_harness import run_module


def _pem(kind, seed):
    body = base64.b64encode((seed * 48).encode()).decode()
    return base64.b64encode(("-----BEGIN %s-----\n%s\n-----END %s-----\n" % (kind, body, kind)).encode()).decode()


CA = _pem("CERTIFICATE", "ca")
CLIENT_CERT = _pem("CERTIFICATE", "client")
CLIENT_KEY = _pem("EC PRIVATE KEY", "secret-key")

# What an RKE2 server writes to /etc/rancher/rke2/rke2.yaml.
RKE2_YAML = """apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: %s
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
kind: Config
preferences: {}
users:
- name: default
  user:
    client-certificate-data: %s
    client-key-data: %s
""" % (CA, CLIENT_CERT, CLIENT_KEY)

# An operator's kubeconfig with two other clusters, one of them current.
OPERATOR = {
    "apiVersion": "v1",
    "kind": "Config",
    "preferences": {},
    "current-context": "prod",
    "clusters": [
        {"name": "prod", "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority-data": CA}},
        {"name": "staging", "cluster": {"server": "https://10.0.1.1:6443", "insecure-skip-tls-verify": True}},
    ],
    "users": [
        {"name": "prod-admin", "user": {"token": "prod-bearer-token"}},
        {"name": "staging-admin", "user": {"username": "admin", "password": "staging-password"}},
    ],
    "contexts": [
        {"name": "prod", "context": {"cluster": "prod", "user": "prod-admin", "namespace": "apps"}},
        {"name": "staging", "context": {"cluster": "staging", "user": "staging-admin"}},
    ],
}


def _entries(name="tirosh-home", **kw):
    kw.setdefault("api_address", "192.0.2.10")
    return kc.site_entries(yaml.safe_load(RKE2_YAML), name, **kw)


def test_site_entries_rename_and_point_at_the_api_address():
    cluster, user, context = _entries()
    assert cluster == {"name": "tirosh-home",
                       "cluster": {"certificate-authority-data": CA, "server": "https://192.0.2.10:6443"}}
    assert user == {"name": "tirosh-home", "user": {"client-certificate-data": CLIENT_CERT, "client-key-data": CLIENT_KEY}}
    assert context == {"name": "tirosh-home", "context": {"cluster": "tirosh-home", "user": "tirosh-home"}}


@pytest.mark.parametrize("server,api_address,expected", [
    ("https://127.0.0.1:6443", "api.tirosh-home.example", "https://api.tirosh-home.example:6443"),
    ("https://localhost:6443", "192.0.2.10", "https://192.0.2.10:6443"),
    ("https://[::1]:6443", "2001:db8::10", "https://[2001:db8::10]:6443"),
    ("https://127.0.0.1", "192.0.2.10", "https://192.0.2.10"),
])
def test_rewrite_server_keeps_scheme_and_port(server, api_address, expected):
    assert kc.rewrite_server(server, api_address=api_address) == expected


def test_api_server_replaces_the_whole_url():
    cluster = _entries(api_address=None, api_server="https://vip.tirosh-home.example:443")[0]
    assert cluster["cluster"]["server"] == "https://vip.tirosh-home.example:443"


@pytest.mark.parametrize("kw,needle", [
    (dict(api_address=None, api_server="http://192.0.2.10:6443"), "https://"),
    (dict(api_address="https://192.0.2.10"), "bare host"),
    (dict(api_address=None), "one of api_address or api_server"),
])
def test_bad_api_target_is_named(kw, needle):
    with pytest.raises(kc.KubeconfigError, match=needle):
        _entries(**kw)


def test_merge_keeps_every_other_entry_and_the_current_context():
    merged = kc.merge(OPERATOR, _entries())
    for section in (name for name, _inner in kc.SECTIONS):
        assert merged[section][:2] == OPERATOR[section], section
        assert [e["name"] for e in merged[section]] == [e["name"] for e in OPERATOR[section]] + ["tirosh-home"]
    assert merged["current-context"] == "prod"
    assert OPERATOR["clusters"][0]["name"] == "prod" and len(OPERATOR["clusters"]) == 2  # input not mutated


def test_merge_replaces_the_site_entries_in_place():
    first = kc.merge(OPERATOR, _entries(api_address="192.0.2.10"))
    first["clusters"].append(first["clusters"].pop(0))  # site entry in the middle now
    again = kc.merge(first, _entries(api_address="192.0.2.99"))
    assert [c["name"] for c in again["clusters"]] == ["staging", "tirosh-home", "prod"]
    assert again["clusters"][1]["cluster"]["server"] == "https://192.0.2.99:6443"
    assert len(again["users"]) == 3 and len(again["contexts"]) == 3


def test_merge_is_a_fixed_point():
    once = kc.merge(OPERATOR, _entries())
    assert kc.merge(once, _entries()) == once


def test_current_context_is_set_when_asked_or_missing():
    assert kc.merge(OPERATOR, _entries(), set_current_context=True)["current-context"] == "tirosh-home"
    assert kc.merge(None, _entries())["current-context"] == "tirosh-home"


def test_a_context_using_the_site_user_is_an_error_naming_it():
    target = yaml.safe_load(yaml.safe_dump(OPERATOR))
    target["contexts"].append({"name": "ops", "context": {"cluster": "prod", "user": "tirosh-home"}})
    with pytest.raises(kc.KubeconfigError, match="context 'ops' uses the user named 'tirosh-home'"):
        kc.merge(target, _entries())


@pytest.mark.parametrize("doc,needle", [
    ([], "expected a mapping"),
    ({"kind": "Pod"}, "kind is 'Pod'"),
    ({"clusters": {"a": 1}}, "clusters must be a list"),
    ({"users": [{"name": "x"}]}, r"users\[0\] needs a name and a user mapping"),
    ({"contexts": [{"name": "a", "context": {}}, {"name": "a", "context": {}}]}, "two entries named 'a'"),
])
def test_malformed_documents_are_named(doc, needle):
    with pytest.raises(kc.KubeconfigError, match=needle):
        kc.check_document(doc, "x.yaml")


def test_source_with_several_clusters_is_refused():
    source = yaml.safe_load(RKE2_YAML)
    source["clusters"].append(dict(source["clusters"][0], name="other"))
    with pytest.raises(kc.KubeconfigError, match="exactly one entry in clusters"):
        kc.site_entries(source, "tirosh-home", api_address="192.0.2.10")


def test_redact_hides_every_credential_and_nothing_else():
    redacted = kc.redact(kc.merge(OPERATOR, _entries()))
    users = dict((u["name"], u["user"]) for u in redacted["users"])
    assert users["prod-admin"]["token"] == kc.REDACTED
    assert users["staging-admin"] == {"username": "admin", "password": kc.REDACTED}
    assert users["tirosh-home"]["client-key-data"] == kc.REDACTED
    assert users["tirosh-home"]["client-certificate-data"] == CLIENT_CERT
    assert redacted["clusters"][0]["cluster"]["certificate-authority-data"] == CA


# The module, run as Ansible runs it.

def _args(tmp_path, **kw):
    src = tmp_path / "rke2.yaml"
    src.write_text(RKE2_YAML)
    args = dict(name="tirosh-home", src=str(src), api_address="192.0.2.10", dest=str(tmp_path / "kube" / "config"))
    args.update(kw)
    return args


def _mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def test_module_creates_the_kubeconfig_0600_then_changes_nothing(tmp_path):
    args = _args(tmp_path)
    rc, result = run_module("kubeconfig_merge", args, tmp_path)
    assert rc == 0 and result["changed"] is True, result
    dest = tmp_path / "kube" / "config"
    assert _mode(dest) == 0o600
    written = yaml.safe_load(dest.read_text())
    assert written["current-context"] == "tirosh-home"
    assert written["clusters"][0]["cluster"]["server"] == "https://192.0.2.10:6443"
    assert result["server"] == "https://192.0.2.10:6443"
    before = dest.read_text()
    rc, result = run_module("kubeconfig_merge", args, tmp_path)
    assert rc == 0 and result["changed"] is False, result
    assert dest.read_text() == before


def test_module_merges_into_an_existing_kubeconfig_and_fixes_its_mode(tmp_path):
    dest = tmp_path / "config"
    dest.write_text(yaml.safe_dump(OPERATOR))
    os.chmod(str(dest), 0o644)
    rc, result = run_module("kubeconfig_merge", _args(tmp_path, dest=str(dest)), tmp_path)
    assert rc == 0 and result["changed"] is True
    written = yaml.safe_load(dest.read_text())
    assert [c["name"] for c in written["contexts"]] == ["prod", "staging", "tirosh-home"]
    assert written["contexts"][:2] == OPERATOR["contexts"] and written["users"][:2] == OPERATOR["users"]
    assert written["current-context"] == "prod"
    assert _mode(dest) == 0o600


def test_module_repairs_the_mode_alone(tmp_path):
    args = _args(tmp_path)
    run_module("kubeconfig_merge", args, tmp_path)
    dest = tmp_path / "kube" / "config"
    os.chmod(str(dest), 0o644)
    before = dest.read_text()
    rc, result = run_module("kubeconfig_merge", args, tmp_path)
    assert rc == 0 and result["changed"] is True
    assert _mode(dest) == 0o600 and dest.read_text() == before


def test_module_check_mode_writes_nothing_and_diff_shows_no_credentials(tmp_path):
    dest = tmp_path / "config"
    dest.write_text(yaml.safe_dump(OPERATOR))
    before = dest.read_text()
    rc, result = run_module("kubeconfig_merge", _args(tmp_path, dest=str(dest)), tmp_path, check_mode=True, diff=True)
    assert rc == 0 and result["changed"] is True
    assert dest.read_text() == before
    diff = result["diff"]["before"] + result["diff"]["after"]
    for secret in (CLIENT_KEY, "prod-bearer-token", "staging-password"):
        assert secret not in diff
    assert "tirosh-home" in result["diff"]["after"] and "tirosh-home" not in result["diff"]["before"]
    assert CLIENT_KEY not in str(result)


def test_module_fails_naming_a_broken_source_and_writes_nothing(tmp_path):
    src = tmp_path / "rke2.yaml"
    src.write_text("clusters: [\n")
    dest = tmp_path / "config"
    args = dict(name="tirosh-home", src=str(src), api_address="192.0.2.10", dest=str(dest))
    rc, result = run_module("kubeconfig_merge", args, tmp_path)
    assert rc != 0 and result["failed"]
    assert str(src) in result["msg"] and "not valid YAML" in result["msg"]
    assert not dest.exists()


def test_module_content_parameter_is_not_logged(tmp_path):
    args = dict(name="tirosh-home", content=RKE2_YAML, api_address="192.0.2.10", dest=str(tmp_path / "config"))
    rc, result = run_module("kubeconfig_merge", args, tmp_path)
    assert rc == 0 and result["changed"] is True
    assert CLIENT_KEY not in str(result)
    assert result["invocation"]["module_args"]["content"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
