"""The verification report's HTML page in a real headless browser: Debian's chromium (`make browser`
installs it; `make unit` depends on that), driven by playwright through ``executable_path`` (playwright's
own browser download is never used). At 6 and 1,000 GPU nodes the page renders, its summary is on the
first screen of a 1280x800 window, and the failing nodes, their diagnosis written out, come before the
full table. The screenshots are kept in .build/report-screenshots/."""
import os
import shutil

import pytest
from playwright.sync_api import sync_playwright

from ansible_collections.gpuplatform.rke2.plugins.module_utils import verify_report as vr
from tests.unit import report_fleet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCREENSHOTS = os.path.join(ROOT, ".build", "report-screenshots")
VIEWPORT = {"width": 1280, "height": 800}
# 6 nodes: one container toolkit in CrashLoopBackOff; 1,000: report_fleet's mix.
FLEETS = {6: (("toolkit-crash", 1),), 1000: report_fleet.FAULTS_PER_1000}


def chromium_path():
    path = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail("no chromium on PATH (nor $CHROMIUM): `make browser` installs Debian's package")
    return path


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path())
        yield instance
        instance.close()


def box(page, selector):
    found = page.locator(selector).bounding_box()
    assert found is not None, "%s is not rendered" % selector
    return found


@pytest.mark.parametrize("size", sorted(FLEETS))
def test_the_report_page_shows_the_summary_first_then_the_failing_nodes_then_the_table(browser, tmp_path, size):
    report = vr.build_report("site-%d" % size, generated_at="2026-12-01T16:00:00Z",
                             **report_fleet.inputs(size, FLEETS[size]))
    html = tmp_path / "gpu-verify.html"
    html.write_text(vr.to_html(report))
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(html.as_uri())
        assert page.title() == "GPU verification: site-%d" % size

        # The verdict and the summary by status and layer fit the first screen.
        summary, verdict = box(page, "#summary"), box(page, ".verdict")
        assert verdict["y"] < summary["y"]
        assert summary["y"] + summary["height"] <= VIEWPORT["height"], summary
        assert summary["x"] + summary["width"] <= VIEWPORT["width"], summary
        layer_rows = page.locator("#summary table.layers tr > :first-child").all_inner_texts()
        assert layer_rows[1:] == list(vr.REPORT_LAYERS) + [vr.WORKLOAD_LABEL]
        assert page.locator("#summary td.failed").count() > 0

        # Then the failing nodes, in the report's order, each diagnosis on the page (not in a tooltip),
        # then the full table with every GPU node.
        failing, table = box(page, "#failing"), box(page, "#nodes")
        assert summary["y"] + summary["height"] <= failing["y"] < table["y"]
        shown = [block.get_attribute("id") for block in page.locator("#failing .node").all()]
        assert shown == ["node-%s" % name for name in report["failing_nodes"]]
        first = report["failing_nodes"][0]
        layer = report["nodes"][first]["first_failed_layer"]
        assert page.locator("#node-%s li" % first).first.inner_text() == "%s: %s" % (
            layer, report["nodes"][first]["layers"][layer]["detail"])
        assert page.locator("#nodes tr").count() == len(report["nodes"]) + 1
        # Nothing is wider than the window: no horizontal scrolling to read a row's status.
        assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]

        os.makedirs(SCREENSHOTS, exist_ok=True)
        shot = os.path.join(SCREENSHOTS, "gpu-verify-%d-nodes.png" % size)
        page.screenshot(path=shot)
        assert os.path.getsize(shot) > 0
    finally:
        page.close()
