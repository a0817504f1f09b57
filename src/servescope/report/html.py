"""One self-contained HTML page per document: Jinja2 template, inlined CSS and plotly.min.js, figures as JSON.

Does: put the scenario the result is about (model, GPU, layout, quantization, engine) and every warning and
caveat of the command's text output at the top of the page (html_sections.page_header), then turn a document (`servescope.report/1`, `trace/1`, `model/1`, `plan/1`, `diff/1`, any other as generic
tables) into sections of blocks — findings, tables of preformatted cells, Plotly figures (report/html_charts.py),
the kernels on the roofline for trace and report pages (report/html_roofline.py) — and render report/templates/page.html.j2. The page fetches nothing: its Content-Security-Policy allows no
source but the page itself (inline script and style, data: images), so a request would fail and be reported.
Does not: compute (documents carry every number), or write files (the CLI does).
Uses jinja2 and plotly's bundled plotly.min.js (base dependencies); OutputError if an install lacks them.
"""

from __future__ import annotations

import html as html_lib
from functools import lru_cache
from importlib import resources
from typing import Any

import msgspec

from servescope.errors import OutputError
from servescope.report import html_sections as sections
from servescope.report.html_roofline import roofline_section

EXTRA = "HTML output needs jinja2 and plotly (base dependencies of servescope): reinstall it (pip install servescope)"


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The minified plotly.js shipped inside the plotly Python package (read once, never fetched)."""
    try:
        path = resources.files("plotly") / "package_data" / "plotly.min.js"
        return path.read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise OutputError(f"{EXTRA} ({exc})") from None


def _template() -> Any:
    try:
        import jinja2
    except ModuleNotFoundError:
        raise OutputError(EXTRA) from None
    env = jinja2.Environment(loader=jinja2.PackageLoader("servescope.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True,
                             lstrip_blocks=True)
    return env.get_template("page.html.j2")


def _json_for_script(value: Any) -> str:
    """JSON safe inside <script type="application/json">: `<`, `>` and `&` escaped as \\u sequences."""
    text = msgspec.json.encode(value).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def document_html(doc: dict[str, Any]) -> str:
    """The page of one document."""
    title, subtitle, secs = sections.for_document(doc)
    trace = doc if doc.get("schema") == "servescope.trace/1" else doc.get("trace")
    if doc.get("schema") in ("servescope.trace/1", "servescope.report/1") and isinstance(trace, dict):
        at = next((i + 1 for i, s in enumerate(secs) if s["id"] == "kernels"), len(secs))
        secs.insert(at, roofline_section(trace))  # right after the top kernels
    header = sections.page_header(doc)
    figures = [b for s in secs for b in s["blocks"] if b["type"] == "chart"]
    for i, f in enumerate(figures):
        f["id"] = f"fig{i}"
        f["json"] = _json_for_script(f.pop("figure"))
    return str(_template().render(title=title, subtitle=subtitle, sections=secs, plotly_js=plotly_js() if figures else "",
                                  scenario=header["scenario"], warnings=header["warnings"],
                                  schema=html_lib.escape(str(doc.get("schema", ""))), n_figures=len(figures)))
