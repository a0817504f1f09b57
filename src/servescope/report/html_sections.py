"""The sections of an HTML page, per document schema: blocks of findings, tables (cells preformatted as text)
and figures (report/html_charts.py). Presentation only: numbers are read from the document and formatted; a
percentage names its denominator in its column title.

Order of a `servescope.report/1` page: findings first; time per step by class; the timeline of one
representative step per kind; collectives; low-occupancy kernels; measured vs modelled; the plan; the
latency–throughput curve. Other schemas: `trace/1` (the same without timeline and plan), `model/1`, `plan/1`,
`diff/1`; anything else is shown as generic tables. This module builds the trace, report and plan sections and
the page header and sends each document to its page; the other schemas' pages are report/html_pages.py, the
table and chart blocks report/html_cells.py (`Section`, `fmt`, `eng_seconds`, `table`, `chart` re-exported here).
"""

from __future__ import annotations

from typing import Any

from servescope.report import html_charts as charts
from servescope.report.html_cells import Section, chart, eng_seconds, fmt, table
from servescope.report.html_pages import (
    diff_page,
    generic_page,
    model_page,
    simulate_page,
    sweep_page,
    verify_page,
)
from servescope.report.measured_doc import measured_lines, points_lines
from servescope.report.plan_text import on_baseline_text
from servescope.report.trace_text import short_names, trace_gpu
from servescope.units import GIGA, us_to_ms

# the blocks are report.html_cells', re-exported
__all__ = ["LOW_OCCUPANCY_BLOCKS_PER_SM", "SLOWER", "Section", "caveats", "chart", "eng_seconds", "fmt", "for_document",
           "page_header", "plan_section", "scenario_text", "table"]

SLOWER = 0.995  # a gain below this is a slowdown, said so
LOW_OCCUPANCY_BLOCKS_PER_SM = 1.0  # fewer blocks than SMs: part of the GPU idles while the kernel runs


def scenario_text(sc: dict[str, Any] | None) -> str:
    """What was modelled, in one line: model, GPUs, layout, quantization, lengths and engine."""
    if not sc:
        return ""
    gpu = f"{sc['gpu']} ({sc['gpu_display_name']})" if sc.get("gpu_display_name") else sc["gpu"]
    q = sc.get("quant") or {}
    parts = dict(q)
    quant = ", ".join(f"{k} {v}" for k, v in parts.items()) if parts else "not recorded"
    graphs = "" if sc.get("cuda_graphs") is None else (", CUDA graphs" if sc["cuda_graphs"] else ", eager")
    return (f"{sc['model']} on {sc['gpus']}× {gpu} · layout TP={sc['tp']} EP={sc['ep']} PP={sc['pp']} "
            f"DP={sc['dp']} · quantization: {quant} · ISL {sc['isl']} / OSL {sc['osl']} · engine "
            f"{sc['backend']}{graphs}")


def caveats(doc: dict[str, Any]) -> list[str]:
    """Every warning and caveat the command's text output prints, for the page's warnings block (in order, once)."""
    schema = doc.get("schema")
    out: list[str] = []
    if schema == "servescope.report/1":
        trace, plan = doc["trace"], doc.get("plan") or {}
        out += list(trace.get("warnings", []))
        out += [w for w in plan.get("warnings", []) if w.removeprefix("trace: ") not in out]
    elif schema == "servescope.model/1":
        pts = doc.get("points", [])
        prov = pts[0].get("provenance", {}) if pts else {}
        if prov:
            out.append(f"ranges: 80% from cross-validated error, case {prov.get('case', '?')}: "
                       f"{prov.get('serving_rows', '')}")
        if any(p.get("queued") for p in pts):
            out.append("* = more requests than fit in KV: the rest queue (their wait is in TTFT)")
        out += list((doc.get("calibration") or {}).get("notes", []))
    elif schema == "servescope.sweep/1":
        out += [f"skipped {x}" for x in doc.get("skipped", [])]
    elif schema == "servescope.simulate/1" and "runs" in doc:
        out += [w for r in doc["runs"] for w in r.get("warnings", [])]
    out += [w for w in doc.get("warnings", []) if schema != "servescope.report/1"]
    return list(dict.fromkeys(out))


def _findings(trace: dict[str, Any]) -> Section:
    items = [{"severity": f["severity"], "code": f["code"], "message": f["message"],
              "where": " · ".join(x for x in (f"rank {f['rank']}" if f.get("rank") is not None else "",
                                              f.get("kind") or "") if x)} for f in trace["findings"]]
    blocks: list[dict[str, Any]] = [{"type": "findings", "items": items}] if items else [
        {"type": "text", "text": "no findings"}]
    return {"id": "findings", "title": "Findings", "intro": "", "blocks": blocks}


def _kinds(trace: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(label, rank entry, kind entry) for every rank and kind; the label names the rank when several."""
    many = len(trace["ranks"]) > 1
    return [(f"rank {r['rank']} {k['kind']}" if many else k["kind"], r, k)
            for r in trace["ranks"] for k in r["by_kind"]]


def _classes(trace: dict[str, Any]) -> Section:
    kinds = _kinds(trace)
    blocks: list[dict[str, Any]] = [chart(charts.class_bars([(label, k) for label, _, k in kinds]))] if kinds else []
    for label, _, k in kinds:
        busy = k["gpu_busy_us"] or 0.0
        rows = [[c, us_to_ms(v) / max(k["steps"], 1), 100 * v / busy if busy else None]
                for c, v in sorted(k["classes"].items(), key=lambda kv: -(kv[1] or 0))]
        blocks.append(table(["class", "union ms per step", "% of GPU busy"], rows,
                            title=f"{label}: {k['steps']} step(s), GPU busy {us_to_ms(busy):,.2f} ms of span "
                                  f"{us_to_ms(k['gpu_span_us'] or 0):,.2f} ms"))
    return {"id": "classes", "title": "Where each step's time goes", "blocks": blocks,
            "intro": "Union time per kernel class per step (classes overlap when kernels run concurrently, so the "
                     "bar can exceed GPU busy time); idle = span − busy."}


def _timelines(doc: dict[str, Any]) -> Section:
    blocks: list[dict[str, Any]] = []
    for t in doc.get("timelines", []):
        blocks.append({"type": "heading", "text": f"{t['kind']}: step {t['step']} ({t['label']}), the median-busy "
                                                  f"of {t['steps_of_kind']} {t['kind']} step(s)"})
        blocks.append(chart(charts.timeline(t)))
        if t["left_out"]:
            blocks.append({"type": "text", "text": f"first {len(t['kernels']['name']):,} kernels shown; "
                                                   f"{t['left_out']:,} later ones left out"})
    return {"id": "timeline", "title": "Timeline of one step", "blocks": blocks,
            "intro": "Kernels per stream, coloured by class; ▼ marks a collective."}


def _bandwidth(c: dict[str, Any]) -> Any:
    bw = c.get("busbw_bytes_per_s")
    return None if bw is None else bw / GIGA


def _collectives(trace: dict[str, Any]) -> Section:
    blocks: list[dict[str, Any]] = []
    for label, _, k in _kinds(trace):
        colls = k["collectives"]
        if not colls:
            continue
        blocks.append(chart(charts.collective_latency(label, colls)))
        rows = [[n, c.get("calls_per_step"), c["median_us"], c["p90_us"], us_to_ms(c["total_us"]) / max(k["steps"], 1),
                 c.get("message_bytes_median"), _bandwidth(c)] for n, c in colls.items()]
        blocks.append(table(["collective", "calls/step", "median µs/call", "p90 µs/call", "ms per step",
                             "median message bytes", "bus GB/s"], rows, title=f"{label}: collectives",
                            note="bus bandwidth as nccl-tests defines it; – where the trace has no message sizes"))
    if not blocks:
        blocks.append({"type": "text", "text": "no collectives in the trace"})
    return {"id": "collectives", "title": "Collectives", "intro": "", "blocks": blocks}


def _low_occupancy(trace: dict[str, Any]) -> Section:
    rows = []
    for label, _rank, k in _kinds(trace):
        busy = k["gpu_busy_us"] or 0.0
        for t in k["top_kernels"]:
            bps = t.get("blocks_per_sm")
            if bps is not None and bps < LOW_OCCUPANCY_BLOCKS_PER_SM:
                rows.append([label, t["name"], t["class"], t["calls"], bps, t.get("grid_blocks"),
                             us_to_ms(t["total_us"]), 100 * t["total_us"] / busy if busy else None])
    names = short_names((r[1] for r in rows), 80)
    rows = [[r[0], names[r[1]], *r[2:]] for r in rows]
    blocks = [table(["kind", "kernel", "class", "calls", "blocks/SM", "grid blocks", "total ms",
                     "% of GPU busy"], rows)] if rows else [
        {"type": "text", "text": "no top kernel runs fewer blocks than SMs (or the trace has no grid sizes)"}]
    return {"id": "occupancy", "title": "Low-occupancy kernels", "blocks": blocks,
            "intro": f"Top kernels with fewer than {LOW_OCCUPANCY_BLOCKS_PER_SM:g} block per SM (duration-weighted)."}


def _top_kernels(trace: dict[str, Any]) -> Section:
    """The kernels that take most of each step kind's GPU time (the trace command's top-kernels table)."""
    blocks: list[dict[str, Any]] = []
    for label, _rank, k in _kinds(trace):
        top = k.get("top_kernels") or []
        if not top:
            continue
        busy = k["gpu_busy_us"] or 0.0
        names = short_names((t["name"] for t in top), 80)
        steps = max(k["steps"], 1)
        rows = [[names[t["name"]], t["class"], t.get("collective") or "–", t["calls"] / steps, t.get("median_us"),
                 us_to_ms(t["total_us"]) / steps, 100 * t["total_us"] / busy if busy else None] for t in top]
        blocks.append(table(["kernel", "class", "collective", "calls/step", "median µs/call", "ms per step",
                             "% of GPU busy"], rows, title=f"{label}: top kernels", nd=3))
    if not blocks:
        blocks.append({"type": "text", "text": "no kernels in the trace"})
    return {"id": "kernels", "title": "Top kernels", "blocks": blocks,
            "intro": "The kernels with the most GPU time per step kind (summed duration; % of the kind's GPU busy "
                     "time)."}


def _calibration(plan: dict[str, Any]) -> Section | None:
    cal = plan.get("calibration")
    if not cal:
        return None
    rows = [[r["class"], r["measured_us"], r["model_us"], None if r["residual"] is None else f"{100 * r['residual']:+.1f}",
             r["knob"] or "–", _knob_value(r["knob"], r["value"])] for r in cal["classes"]]
    return {"id": "calibration", "title": "Measured vs modelled", "intro": "The model calibrated on the trace's "
            "step: µs per class, residual = (model − measured) / measured.",
            "blocks": [chart(charts.measured_vs_model(cal["classes"])),
                       table(["class", "measured µs", "model µs", "residual %", "fitted knob", "value"], rows)]}


def _knob_value(knob: str | None, value: Any) -> Any:
    """A fitted knob's value: a time (knob `*_s`) in µs/ms, an efficiency to 3 significant digits."""
    if not isinstance(value, int | float):
        return value
    return eng_seconds(float(value)) if knob and knob.endswith("_s") else f"{value:.3g}"


def _gain_cell(g: float | None) -> str:
    """A gain, always a speed-up: `1.60×`, a slowdown `0.88× (slower)`."""
    if g is None:
        return "–"
    return f"{g:.2f}×" + (" (slower)" if g < SLOWER else "")


def _range_cell(lo: float | None, hi: float | None, g: float | None) -> str:
    """A range that rounds to one number is not printed as one (`no change`)."""
    if lo is None or hi is None or g is None:
        return "–"
    if f"{lo:.2f}" == f"{hi:.2f}":
        return "no change" if f"{g:.2f}" == "1.00" else "no range"
    return f"{lo:.2f}–{hi:.2f}×"


def _basis_word(plan: dict[str, Any], point: dict[str, Any]) -> str:
    """` (measured)` | ` (calibrated)` | ` (extrapolated)` | ` (modelled)` after a calibrated plan's number (its
    `basis`, planner.basis); nothing on an uncalibrated plan or a document written before the key."""
    return f" ({point['basis']})" if plan.get("calibrated") and point.get("basis") else ""


def plan_section(plan: dict[str, Any], curves: list[dict[str, Any]] | None = None) -> Section:
    b = plan["baseline"]
    mem = plan.get("memory_limit")
    meas = plan.get("measured")
    cal_words = ("calibrated on measured figures" + (" and the trace" if plan.get("calibration") else "")
                 if meas else "calibrated on the trace" if plan["calibrated"] else "uncalibrated (model defaults)")
    head = (f"objective {plan['objective']} at concurrency {plan['concurrency']}; "
            f"{cal_words}; baseline{_basis_word(plan, b)} "
            f"TPOT {b['tpot_ms']:.2f} ms, {b['output_tok_s']:,.0f} tok/s at concurrency {b.get('concurrency', '?')}"
            + (f", {plan['baseline_source']}" if plan.get("baseline_source") else "") + f", dominant term {b['dominant']}"
            + (f"; memory limit: max conc. {mem['max_concurrency']:,} (KV for each request at ISL+OSL "
               f"{mem['context_tokens']:,} tokens)" if mem else ""))
    on_base = (meas or {}).get("tracks", {})
    rows = [[t["kind"], _gain_cell(t["gain"]), _range_cell(t["gain_low"], t["gain_high"], t["gain"]), t["effort"],
             "; ".join(t["preconditions"]) or "–", t["validate"] or "–",
             "; ".join(x for x in (on_baseline_text(on_base[t["kind"]]) if t["kind"] in on_base else "",
                                   t["why_not"] or "") if x)]
            for t in plan["tracks"]]
    c, ceil = plan["combined"], plan["ceiling"]
    unit = "TPOT" if plan["objective"] == "tpot" else "output tok/s"
    prod = plan.get("combined_product")
    together = (f" together; {' × '.join(f'{g:.2f}×' for g in prod['gains'])} = {prod['product']:.2f}× alone: they "
                f"{prod['interaction']}" if prod else "")
    lines = []
    if plan.get("target"):
        t = plan["target"]
        tunit = "ms" if plan["objective"] == "tpot" else "tok/s"
        gap = "" if t["reachable"] or t.get("gap") is None else f" ({t['gap']:.2f}× short)"
        lines.append(f"target {t['value']:g} {tunit}: {'reachable' if t['reachable'] else 'not reachable'}{gap}"
                     + (f" with {', '.join(t['tracks'])}" if t["reachable"] and t["tracks"] else "")
                     + (f" — {t['text']}" if t.get("text") else ""))
        if t.get("per_user"):
            lines.append(f"target {t['value']:g} {tunit}: {t['per_user']}")
    lines += [f"combined: {', '.join(c['tracks']) or 'nothing pays'} →{_basis_word(plan, c)} TPOT "
              f"{c['tpot_ms']:.2f} ms, "
              f"{c['output_tok_s']:,.0f} tok/s at concurrency {c.get('concurrency', '?')} ({c['gain']:.2f}× on "
              f"{unit}{together})",
              f"ceiling:{_basis_word(plan, ceil)} TPOT {ceil['tpot_ms']:.2f} ms, {ceil['output_tok_s']:,.0f} tok/s "
              "at concurrency "
              f"{ceil.get('concurrency', '?')}, bound by {ceil['binding']}"]
    if meas:
        lines += measured_lines(meas) + points_lines(meas)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": x} for x in lines if x]
    blocks += [chart(charts.plan_gains(plan["tracks"], plan["objective"])),
               table(["track", f"gain on {unit} (> 1 faster)", "80% range", "effort", "needs", "verify by", "note"],
                     rows, nd=2, note=(plan.get("range") or {}).get("text", ""))]
    if curves:
        blocks.append(chart(charts.latency_throughput(curves, (meas or {}).get("curve_points"))))
    return {"id": "plan", "title": "Plan", "intro": head, "blocks": blocks}


def _report(doc: dict[str, Any]) -> tuple[str, str, list[Section]]:
    trace, plan, sc = doc["trace"], doc.get("plan"), doc.get("scenario")
    secs = [_findings(trace), _classes(trace), _timelines(doc), _top_kernels(trace), _collectives(trace),
            _low_occupancy(trace)]
    if plan:
        secs += [x for x in (_calibration(plan), plan_section(plan, doc.get("curves"))) if x]
    del sc  # the scenario is the page's scenario line (page_header)
    return "servescope report", _trace_subtitle(trace), secs


def _trace_subtitle(trace: dict[str, Any]) -> str:
    r0 = trace["ranks"][0] if trace["ranks"] else {}
    dev = trace_gpu(r0.get("device"))
    return f"{trace['path']} · {len(trace['ranks'])} rank(s) · {dev} · steps by {r0.get('step_method', '?')}"


def page_header(doc: dict[str, Any]) -> dict[str, Any]:
    """What every page shows above its sections: the scenario it modelled (when it has one) and every warning
    and caveat of the command's text output."""
    sc = doc.get("scenario")
    if sc is None and isinstance(doc.get("plan"), dict):
        sc = doc["plan"].get("scenario")
    return {"scenario": scenario_text(sc), "warnings": caveats(doc)}


def for_document(doc: dict[str, Any]) -> tuple[str, str, list[Section]]:
    """(title, subtitle, sections) of a document's page."""
    schema = doc.get("schema")
    if schema == "servescope.report/1":
        return _report(doc)
    if schema == "servescope.trace/1":
        trace = doc
        secs = [_findings(trace), _classes(trace), _top_kernels(trace), _collectives(trace), _low_occupancy(trace)]
        return "servescope trace", _trace_subtitle(trace), secs
    if schema == "servescope.model/1":
        return model_page(doc)
    if schema == "servescope.plan/1":
        secs = [x for x in (_calibration(doc), plan_section(doc, doc.get("curves"))) if x]
        return "servescope plan", "", secs
    if schema == "servescope.diff/1":
        return diff_page(doc)
    if schema in ("servescope.verify/1", "servescope.campaign/1"):
        return verify_page(doc)
    if schema == "servescope.sweep/1":
        return sweep_page(doc)
    if schema == "servescope.simulate/1":
        return simulate_page(doc)
    if schema == "servescope.validate/1":
        return generic_page({k: v for k, v in doc.items() if k != "rows"} | {
            "note": f"{doc['n_rows']:,} modelled rows; each row's prediction is in the JSON (--format json)"})
    return generic_page(doc)
