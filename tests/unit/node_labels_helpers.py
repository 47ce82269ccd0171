"""Helpers shared by the node label and KubeVirt tests: the API server's JSON merge patch,
and a module's main() run in-process with its cluster factory replaced by a fake."""
import json

import pytest
from ansible.module_utils.testing import patch_module_args


def merge_patch(target, patch):
    """RFC 7386, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def run_main(module, factory_name, fake, args, capsys, monkeypatch, check=False, diff=False):
    """The JSON result of ``module.main()`` called with ``args``; the module's
    ``factory_name(params)`` answers ``fake()``, or fails the test when ``fake`` is None
    (the module must not contact the cluster)."""
    def factory(params):
        def make():
            if fake is None:
                raise AssertionError("the module contacted the cluster")
            return fake()
        return make

    monkeypatch.setattr(module, factory_name, factory)
    with patch_module_args(dict(args, _ansible_check_mode=check, _ansible_diff=diff)):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def warnings_of(result):
    """Warning texts; ansible-core 2.19+ reports each as a structured summary."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in result.get("warnings", [])]
