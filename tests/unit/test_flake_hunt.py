"""scripts/flake-hunt.py: every run is counted from pytest's own closing line, and the hunt
fails when any run failed, errored or skipped (a skipped lab test is a missing test)."""
import importlib.util
import multiprocessing
import os
import threading

from tests.conftest import ROOT

_SPEC = importlib.util.spec_from_file_location("flake_hunt", os.path.join(ROOT, "scripts", "flake-hunt.py"))
flake_hunt = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(flake_hunt)


def test_the_closing_line_is_read_in_any_order():
    output = "....F\nFAILED tests/x.py::test_b - AssertionError\n2 failed, 3 passed, 1 skipped, 1 error in 9.1s\n"
    assert flake_hunt.closing_counts(output) == {"passed": 3, "failed": 2, "error": 1, "skipped": 1}
    assert flake_hunt.closing_counts("no summary at all") == {"passed": 0, "failed": 0, "error": 0, "skipped": 0}


def _suite(tmp_path, body):
    path = tmp_path / "test_probe.py"
    path.write_text(body)
    return str(path)


def test_a_hunt_passes_only_when_every_run_passed(tmp_path, capsys):
    log = str(tmp_path / "hunt.log")
    passing = _suite(tmp_path, "def test_ok():\n    assert True\n")
    assert flake_hunt.main(["--runs", "2", "--hog", "1", "--log", log, passing]) == 0
    out = capsys.readouterr().out
    assert "run 2/2: rc 0, 1 passed" in out and "0 failed runs" in out
    # Fails every other run, as a flake does: the counter file outlives each pytest process.
    flaky = _suite(tmp_path, "import os\nCOUNT = %r\n\ndef test_flaky():\n"
                             "    n = int(open(COUNT).read()) + 1 if os.path.exists(COUNT) else 1\n"
                             "    open(COUNT, 'w').write(str(n))\n    assert n %% 2\n" % str(tmp_path / "count"))
    assert flake_hunt.main(["--runs", "2", "--log", log, flaky]) == 1
    out = capsys.readouterr().out
    assert "run 1/2: rc 0, 1 passed" in out and "run 2/2: rc 1, 0 passed, 1 failed" in out
    assert "1 failed runs" in out
    skipping = _suite(tmp_path, "import pytest\n\ndef test_skip():\n    pytest.skip('no lab')\n")
    assert flake_hunt.main(["--runs", "1", "--log", log, skipping]) == 1
    assert open(log).read().count("==== run") == 5


def test_each_hog_spins_in_a_session_of_its_own():
    # As another job on the machine: a scheduling group of its own where the kernel groups by session.
    hog = multiprocessing.Process(target=flake_hunt.spin, args=(30,), daemon=True)
    hog.start()
    try:
        deadline = 200
        while os.getsid(hog.pid) != hog.pid and deadline:
            deadline -= 1
            threading.Event().wait(0.01)
        assert os.getsid(hog.pid) == hog.pid != os.getsid(0)
    finally:
        hog.terminate()
        hog.join()
