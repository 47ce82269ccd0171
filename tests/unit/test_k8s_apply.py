"""k8s_apply and module_utils/server_side_apply against a fake dynamic client that keeps
objects the way the API server does for server-side apply: a write bumps the
resourceVersion, a no-op apply does not, a dry run stores nothing."""
import copy
import json

import pytest
from ansible.module_utils.testing import patch_module_args
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError, ResourceNotFoundError

from ansible_collections.gpuplatform.rke2.plugins.module_utils import k8s_wait
from ansible_collections.gpuplatform.rke2.plugins.module_utils import server_side_apply as ssa
from ansible_collections.gpuplatform.rke2.plugins.modules import k8s_apply

HELMCHART = {
    "apiVersion": "helm.cattle.io/v1",
    "kind": "HelmChart",
    "metadata": {"name": "gpu-operator", "namespace": "kube-system"},
    "spec": {"chart": "gpu-operator", "version": "v26.3.2", "valuesContent": "driver:\n  enabled: true\n"},
}


class FakeResource(object):
    def __init__(self, kind, name, namespaced):
        self.kind, self.name, self.namespaced = kind, name, namespaced


class FakeInstance(object):
    def __init__(self, obj):
        self._obj = obj

    def to_dict(self):
        return copy.deepcopy(self._obj)


class FakeResources(object):
    def __init__(self, kinds):
        self.kinds = kinds

    def get(self, api_version, kind):
        try:
            return self.kinds[(api_version, kind)]
        except KeyError:
            raise ResourceNotFoundError("No matches found for {'api_version': %r, 'kind': %r}" % (api_version, kind))


def _error(cls, status, message):
    exc = ApiException(status=status, reason=message)
    exc.body = json.dumps({"message": message})
    exc.headers = {"Content-Type": "application/json"}
    return cls(exc)


class FakeDynamicClient(object):
    """Objects keyed by (kind, namespace, name). Server-side apply: the applied fields
    replace the manager's previous ones (enough for top-level spec/metadata), other
    managers' fields (status) stay; the resourceVersion moves only on a real change."""

    def __init__(self, conflict_fields=()):
        self.resources = FakeResources({
            ("helm.cattle.io/v1", "HelmChart"): FakeResource("HelmChart", "helmcharts", True),
            ("v1", "Namespace"): FakeResource("Namespace", "namespaces", False),
        })
        self.store = {}
        self.version = 100
        self.calls = []
        self.conflict_fields = conflict_fields

    def _key(self, resource, name, namespace):
        return resource.kind, namespace, name

    def get(self, resource, name=None, namespace=None):
        self.calls.append(("get", name))
        try:
            return FakeInstance(self.store[self._key(resource, name, namespace)])
        except KeyError:
            raise _error(NotFoundError, 404, "%s %r not found" % (resource.name, name))

    def server_side_apply(self, resource, body=None, name=None, namespace=None, field_manager=None,
                          force_conflicts=None, dry_run=None):
        self.calls.append(("apply", name, field_manager, force_conflicts, dry_run))
        key = self._key(resource, name, namespace)
        live = self.store.get(key)
        if live is not None and self.conflict_fields and not force_conflicts:
            raise _error(ConflictError, 409, "Apply failed with 1 conflict: conflict with \"deploy@server\" using "
                                             "helm.cattle.io/v1: .spec.valuesContent")
        created = {"metadata": {"uid": "u-1", "creationTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "0"}}
        new = copy.deepcopy(live) if live else created
        for field, value in body.items():
            if field == "metadata":
                new["metadata"].update(copy.deepcopy(value))
            else:
                new[field] = copy.deepcopy(value)
        new["metadata"]["managedFields"] = [{"manager": field_manager, "operation": "Apply",
                                             "apiVersion": body["apiVersion"], "time": "T%d" % self.version,
                                             "fieldsV1": sorted(k for k in body if k not in ("apiVersion", "kind"))}]
        changed = live is None or ssa.comparable(live) != ssa.comparable(new)
        if changed:
            self.version += 1
            new["metadata"]["resourceVersion"] = str(self.version)
        else:
            new = live
        if dry_run != "All":
            self.store[key] = new
        return FakeInstance(new)

    def delete(self, resource, name=None, namespace=None, dry_run=None):
        self.calls.append(("delete", name, dry_run))
        key = self._key(resource, name, namespace)
        if key not in self.store:
            raise _error(NotFoundError, 404, "not found")
        if dry_run != "All":
            del self.store[key]
        return FakeInstance({"kind": "Status", "status": "Success"})


def apply(client, obj=None, check=False, force=False):
    return ssa.apply_object(client, obj or HELMCHART, "gpuplatform.rke2", force, check)


def with_values(values_content):
    obj = copy.deepcopy(HELMCHART)
    obj["spec"]["valuesContent"] = values_content
    return obj


def test_create_then_the_same_apply_is_unchanged():
    client = FakeDynamicClient()
    first = apply(client)
    assert (first["action"], first["changed"]) == ("created", True)
    assert client.calls[-1] == ("apply", "gpu-operator", "gpuplatform.rke2", None, None)
    second = apply(client)
    assert (second["action"], second["changed"]) == ("unchanged", False)
    assert second["after"]["metadata"]["resourceVersion"] == first["after"]["metadata"]["resourceVersion"]


def test_a_values_change_is_an_update_and_moves_the_resource_version():
    client = FakeDynamicClient()
    first = apply(client)
    second = apply(client, with_values("driver:\n  enabled: false\n"))
    assert (second["action"], second["changed"]) == ("updated", True)
    assert int(second["after"]["metadata"]["resourceVersion"]) > int(first["after"]["metadata"]["resourceVersion"])


def test_check_mode_is_a_server_dry_run_that_stores_nothing():
    client = FakeDynamicClient()
    created = apply(client, check=True)
    assert created["changed"] and created["action"] == "created"
    assert client.calls[-1][-1] == "All"
    assert client.store == {}
    apply(client)
    same = apply(client, check=True)
    assert not same["changed"]
    would = apply(client, with_values("driver:\n  enabled: false\n"), check=True)
    assert would["changed"] and would["action"] == "updated"
    assert client.store[("HelmChart", "kube-system", "gpu-operator")]["spec"]["valuesContent"] == \
        HELMCHART["spec"]["valuesContent"]


def test_bookkeeping_alone_is_no_change():
    live = copy.deepcopy(HELMCHART)
    live["metadata"].update(resourceVersion="7", generation=2, managedFields=[{"manager": "m", "time": "T1"}])
    live["status"] = {"jobName": "helm-install-gpu-operator"}
    dry = copy.deepcopy(live)
    dry["metadata"].update(resourceVersion="7", managedFields=[{"manager": "m", "time": "T2"}])
    dry["status"] = {}
    assert not ssa.apply_changed(live, dry, dry_run=True)
    dry["spec"]["version"] = "v26.3.3"
    assert ssa.apply_changed(live, dry, dry_run=True)
    # A real apply is judged by the server's resourceVersion alone.
    assert ssa.apply_changed(live, dict(live, metadata=dict(live["metadata"], resourceVersion="8")), dry_run=False)


def test_conflict_is_reported_naming_the_object_and_force_takes_over():
    client = FakeDynamicClient(conflict_fields=(".spec.valuesContent",))
    apply(client)
    with pytest.raises(ssa.ApplyError) as exc:
        apply(client, with_values("driver:\n  enabled: false\n"))
    assert "HelmChart kube-system/gpu-operator: apply refused" in str(exc.value)
    assert "conflict" in str(exc.value) and "409" in str(exc.value)
    taken = apply(client, with_values("driver:\n  enabled: false\n"), force=True)
    assert taken["changed"] and client.calls[-1][3] is True


def test_unserved_kind_and_missing_namespace_are_named():
    client = FakeDynamicClient()
    with pytest.raises(ssa.ApplyError) as exc:
        apply(client, {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                       "metadata": {"name": "gpu-operator", "namespace": "argocd"}})
    assert "Application argocd/gpu-operator: the API server does not serve argoproj.io/v1alpha1 Application" \
        in str(exc.value)
    no_namespace = copy.deepcopy(HELMCHART)
    del no_namespace["metadata"]["namespace"]
    with pytest.raises(ssa.ApplyError) as exc:
        apply(client, no_namespace)
    assert "metadata.namespace is required" in str(exc.value)
    assert client.store == {}


def test_definition_problems_name_the_key():
    assert ssa.definition_problems([{"kind": "HelmChart", "metadata": {}}, "x"]) == [
        "definition[0].apiVersion: missing",
        "definition[0].metadata.name: missing (HelmChart)",
        "definition[1]: not a map",
    ]


def test_delete_then_absent_and_check_mode_deletes_nothing():
    client = FakeDynamicClient()
    apply(client)
    would = ssa.delete_object(client, HELMCHART, dry_run=True)
    assert would["changed"] and ("HelmChart", "kube-system", "gpu-operator") in client.store
    gone = ssa.delete_object(client, HELMCHART)
    assert (gone["action"], gone["changed"]) == ("deleted", True)
    assert gone["target"] == {"api_version": "helm.cattle.io/v1", "plural": "helmcharts", "name": "gpu-operator",
                              "namespace": "kube-system"}
    again = ssa.delete_object(client, HELMCHART)
    assert (again["action"], again["changed"]) == ("absent", False)


def test_cluster_scoped_objects_take_no_namespace():
    client = FakeDynamicClient()
    result = apply(client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}})
    assert result["action"] == "created"
    assert ("Namespace", None, "gpu-operator") in client.store


class FakeStream(object):
    def __init__(self, events):
        self.events = events
        self.closed = False

    def __iter__(self):
        return iter(self.events)

    def close(self):
        self.closed = True


class FakeKubeApi(object):
    """The watch engine's adapter: the HelmChart is listed with a finalizer, then the
    watch reports it DELETED (helm-controller's uninstall Job finished)."""

    def __init__(self, deleted=True):
        self.clock = k8s_wait.Clock()
        self.deleted = deleted
        self.requests = []
        self.obj = dict(HELMCHART, metadata=dict(HELMCHART["metadata"], resourceVersion="5",
                                                 finalizers=["wrangler.cattle.io/on-helm-chart-remove"]))

        self.gone = False

    def list(self, res, read_timeout):
        # After the watch's DELETED, a list (the engine's confirming one) agrees: it is gone.
        self.requests.append(("list", res.plural, res.field_selector, res.namespace))
        return ([] if self.gone else [self.obj]), ("6" if self.gone else "5")

    def watch(self, res, resource_version, timeout_seconds, read_timeout):
        self.requests.append(("watch", res.plural, resource_version))
        self.gone = self.gone or self.deleted
        return FakeStream([{"type": "DELETED", "object": self.obj}] if self.deleted else [])


def test_wait_deleted_watches_until_the_object_is_gone():
    api = FakeKubeApi()
    target = {"api_version": "helm.cattle.io/v1", "plural": "helmcharts", "name": "gpu-operator",
              "namespace": "kube-system"}
    result = ssa.wait_deleted(api, [target], timeout=60)
    assert result.done
    assert api.requests[0] == ("list", "helmcharts", "metadata.name=gpu-operator", "kube-system")
    assert ("watch", "helmcharts", "5") in api.requests


def test_wait_deleted_times_out_naming_the_finalizer():
    api = FakeKubeApi(deleted=False)
    target = {"api_version": "helm.cattle.io/v1", "plural": "helmcharts", "name": "gpu-operator",
              "namespace": "kube-system"}
    with pytest.raises(ssa.ApplyError) as exc:
        ssa.wait_deleted(api, [target], timeout=0)
    assert "kube-system/gpu-operator (finalizers: wrangler.cattle.io/on-helm-chart-remove)" in str(exc.value)


# ---------------------------------------------------------------- the module


def run_module(args, capsys, monkeypatch, client, check_mode=False, diff=False):
    monkeypatch.setattr(k8s_apply, "api_client", lambda params: object())
    monkeypatch.setattr(k8s_apply, "DynamicClient", lambda connection: client)
    with patch_module_args(dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)):
        with pytest.raises(SystemExit) as exc:
            k8s_apply.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_module_apply_twice_reports_changed_once_with_a_readable_diff(capsys, monkeypatch, tmp_path):
    client = FakeDynamicClient()
    src = tmp_path / "gpu-operator.helmchart.yaml"
    src.write_text("# header\n---\n" + json.dumps(HELMCHART))
    rc, first = run_module({"src": str(src)}, capsys, monkeypatch, client)
    assert rc == 0 and first["changed"]
    assert first["results"] == [{"object": "HelmChart kube-system/gpu-operator", "action": "created",
                                 "changed": True, "resource_version": "101"}]
    rc, second = run_module({"src": str(src)}, capsys, monkeypatch, client)
    assert rc == 0 and not second["changed"] and second["results"][0]["action"] == "unchanged"

    rc, third = run_module({"definition": with_values("driver:\n  enabled: false\n")}, capsys, monkeypatch, client,
                           check_mode=True, diff=True)
    assert rc == 0 and third["changed"]
    diff = third["diff"][0]
    assert "    enabled: true\n" in diff["before"] and "    enabled: false\n" in diff["after"]
    assert "managedFields" not in diff["before"] and "resourceVersion" not in diff["after"]
    assert client.store[("HelmChart", "kube-system", "gpu-operator")]["spec"]["valuesContent"].endswith("true\n")


def test_module_refuses_a_definition_without_a_name(capsys, monkeypatch):
    client = FakeDynamicClient()
    rc, result = run_module({"definition": {"apiVersion": "v1", "kind": "Namespace", "metadata": {}}},
                            capsys, monkeypatch, client)
    assert rc == 1 and result["failed"]
    assert result["msg"] == "definition[0].metadata.name: missing (Namespace)"
    assert client.calls == []


def test_module_absent_deletes_and_waits(capsys, monkeypatch):
    client = FakeDynamicClient()
    apply(client)
    api = FakeKubeApi()
    monkeypatch.setattr(k8s_wait, "KubeApi", lambda connection: api)
    rc, result = run_module({"definition": HELMCHART, "state": "absent", "wait": True}, capsys, monkeypatch, client)
    assert rc == 0 and result["changed"] and result["results"][0]["action"] == "deleted"
    assert api.requests[0][0] == "list"
    rc, again = run_module({"definition": HELMCHART, "state": "absent", "wait": True}, capsys, monkeypatch, client)
    assert rc == 0 and not again["changed"] and again["results"][0]["action"] == "absent"
