"""Each HTML page in a real browser (Debian's chromium, headless, over the DevTools protocol): it loads with no
console error and no network request, every chart has marks drawn in its SVG, and a screenshot is not blank.

The test setup installs chromium with apt-get when it is missing and this runs as root (CI); elsewhere the test
is skipped, saying why."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from browser import Page, find_chromium, ink_fraction
from servescope.analysis.analyze import example_trace
from servescope.cli import main
from servescope.report.html_sections import caveats

DATA = Path(__file__).parents[1] / "data/traces"
DIFF = DATA / "hta/trace_diff"
PAGES = {
    "report": ["report", str(example_trace()), "--model", "gpt-oss-120b", "--gpu", "b200", "--tp", "8"],
    "trace": ["trace", str(DATA / "tracelens/inference/vllm_decode_full/graph_execution.json.gz"), "--format", "html"],
    "model": ["model", "--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant",
              "int4-w4a16", "--format", "html"],
    "plan": ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--format", "html"],
    "diff": ["diff", str(DIFF / "control/control.json.gz"), str(DIFF / "test/test.json.gz"), "--format", "html"],
    "simulate": ["simulate", "--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant",
                 "int4-w4a16", "--concurrency", "16", "--num-prompts", "50", "--format", "html"],
    "sweep": ["sweep", "--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant",
              "int4-w4a16", "--format", "html"],
}
# the warnings block: how many warnings it lists, and whether it is drawn (a box on screen, above the first section)
WARNINGS_JS = """(function () {
  var w = document.getElementById('warnings'); if (!w) { return [0, false, false]; }
  var r = w.getBoundingClientRect(), first = document.querySelector('section:not(#warnings)');
  return [w.querySelectorAll('li.warning').length, r.height > 0 && r.width > 0,
          !first || r.top < first.getBoundingClientRect().top];
})()"""
# marks Plotly draws for data: bar and marker points, and line paths
MARKS_JS = """Array.prototype.map.call(document.querySelectorAll('div.chart'), function (d) {
  return [d.id, d.querySelectorAll('g.trace g.point path, g.trace path.point, g.trace path.js-line').length];
})"""


@pytest.fixture(scope="module")
def page() -> Iterator[Page]:
    chromium, why = find_chromium(install=True)
    if chromium is None:
        pytest.skip(f"no headless browser: {why}")
    p = Page(chromium)
    yield p
    p.close()


@pytest.mark.parametrize("name", list(PAGES))
def test_page_in_a_browser(name: str, page: Page, tmp_path: Path) -> None:
    args = PAGES[name]
    if args[0] not in main.commands:
        pytest.skip(f"no `servescope {args[0]}` command in this build")
    out = tmp_path / f"{name}.html"
    result = CliRunner().invoke(main, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    url = out.resolve().as_uri()
    page.console_errors.clear()
    page.requests.clear()
    page.open(url)
    deadline = time.monotonic() + 120
    while page.evaluate("document.body.getAttribute('data-charts-drawn')") != "yes":
        assert time.monotonic() < deadline, "charts not drawn in time"
        time.sleep(0.1)
    assert page.console_errors == []
    assert page.requests == [url], "the page fetched something"
    marks = dict(page.evaluate(MARKS_JS))
    assert len(marks) == int(page.evaluate("document.body.getAttribute('data-charts')"))
    assert len(marks) >= (2 if name in ("report", "model", "plan") else 1)
    assert all(n > 0 for n in marks.values()), marks
    doc = json.loads(CliRunner().invoke(main, [*[a for a in args if a not in ("--format", "html")], "--format",
                                               "json"]).stdout)
    listed, drawn, on_top = page.evaluate(WARNINGS_JS)
    assert listed == len(caveats(doc))
    assert listed == 0 or (drawn and on_top)
    ink, colours = ink_fraction(page.screenshot_png())
    assert ink > 0.02 and colours > 8, (ink, colours)


def test_the_checks_see_a_fetch_and_an_error(page: Page, tmp_path: Path) -> None:
    """Control: a page that loads an image over the network and throws is caught by both records."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body data-charts="0" data-charts-drawn="yes">'
                   '<img src="http://127.0.0.1:9/x.png"><script>throw new Error("boom")</script></body></html>')
    page.console_errors.clear()
    page.requests.clear()
    page.open(bad.resolve().as_uri())
    page.evaluate("1")  # flush events that arrived after the load event
    assert "http://127.0.0.1:9/x.png" in page.requests
    assert any("boom" in e for e in page.console_errors)
