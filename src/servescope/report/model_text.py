"""Terminal tables for `servescope model`, `servescope specs list` and `servescope validate` (`specs show`:
report/specs_text.py). Presentation only."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from servescope.perfmodel import TERMS, ServingPoint


def render_points(title: str, points: list[ServingPoint], console: Console) -> None:
    t = Table(title=title, title_justify="left")
    t.caption = ("terms in ms per output token add up to TPOT; floor = the decode step at 100% of every peak; "
                 "* = more requests than fit in KV: the rest queue (their wait is in TTFT)")
    short = {"communication": "comm", "overhead": "overh."}
    for col in ("conc.", "TPOT ms", "80% range", "TTFT ms", "80% range", "tok/s", "bound",
                *[short.get(k, k) for k in TERMS], "floor", "GB/GPU", "max conc."):
        t.add_column(col, justify="left" if col == "bound" else "right")
    for p in points:
        queued = "*" if p.concurrency > p.batch else ""
        t.add_row(f"{p.concurrency}{queued}", f"{p.tpot_s * 1e3:.2f}",
                  f"{p.tpot_low_s * 1e3:.2f}–{p.tpot_high_s * 1e3:.2f}", f"{p.ttft_s * 1e3:,.0f}",
                  f"{p.ttft_low_s * 1e3:,.0f}–{p.ttft_high_s * 1e3:,.0f}",
                  f"{p.output_tok_s:,.0f}", short.get(p.dominant, p.dominant), *[f"{p.terms_s[k] * 1e3:.3f}" for k in TERMS],
                  f"{p.floor_s * 1e3:.2f}", f"{p.memory_bytes_per_gpu / 1e9:.1f}", str(p.max_concurrency))
    console.print(t)
    if points and points[0].provenance:
        prov = points[0].provenance
        console.print(Text(f"ranges: 80% from cross-validated error, case {prov.get('case', '?')}: "
                           f"{prov.get('serving_rows', '')}",
                           style="yellow" if prov.get("case") != "system_seen" else ""))
        console.print(Text(_kernel_sources(prov)))
    if points:
        c = Table(title=f"collectives per decode step at concurrency {points[0].concurrency}", title_justify="left")
        for col in ("collective", "calls/step", "bytes/call", "ms/step"):
            c.add_column(col, justify="left" if col == "collective" else "right")
        for name, cost in points[0].collectives.items():
            c.add_row(name, f"{cost.calls_per_step:.0f}", f"{cost.bytes_per_call:,.0f}", f"{cost.time_s * 1e3:.3f}")
        console.print(c)


def render_percentiles(doc: dict[str, Any], console: Console) -> None:
    """Each point's p50/p90/p99 TTFT, TPOT and ITL (the document's `percentiles`), its source, and the precision
    tier of every number; ≥ marks a TTFT that is a lower bound (utilisation ≥ 0.9 or above the KV cap)."""
    rows = [p for p in doc["points"] if "percentiles" in p]
    if not rows:
        return
    t = Table(title="percentiles per point (ms)", title_justify="left")
    for col in ("conc.", "TTFT p50", "p90", "p99", "TPOT p50", "p90", "p99", "ITL p50", "p90", "p99", "util.",
                "from"):
        t.add_column(col, justify="left" if col == "from" else "right")
    for p in rows:
        q = p["percentiles"]
        ge = "≥" if q["ttft_lower_bound"] else ""
        src = f"sim. {q['requests']}" if q["precision"] == "simulation" else "approx."
        t.add_row(str(p["concurrency"]), *(f"{ge}{q['ttft_ms'][k]:,.0f}" for k in ("p50", "p90", "p99")),
                  *(f"{q[m][k]:.2f}" for m in ("tpot_ms", "itl_ms") for k in ("p50", "p90", "p99")),
                  f"{q['utilisation']:.2f}", src)
    console.print(t)
    tiers = rows[0]["precision"]
    console.print(Text(f"precision: TPOT {tiers['tpot_ms']}, TTFT {tiers['ttft_ms']} (the table above); "
                       f"percentiles: {_sources(rows)}"))
    if any(p["percentiles"]["ttft_lower_bound"] for p in rows):
        console.print(Text("≥ TTFT is a lower bound: utilisation (concurrency / running cap) ≥ 0.9 or concurrency "
                           "above the KV cap; the queue grows with the run", style="yellow"))


def _sources(rows: list[dict[str, Any]]) -> str:
    """Where the percentiles came from, in one phrase: the simulated points' request counts, the approximated
    points' reasons."""
    sim = [p["percentiles"]["requests"] for p in rows if p["percentiles"]["precision"] == "simulation"]
    approx = sorted({p["percentiles"]["source"] for p in rows if p["percentiles"]["precision"] != "simulation"})
    parts = []
    if sim:
        many = f"{min(sim)}" if min(sim) == max(sim) else f"{min(sim)}–{max(sim)}"
        parts.append(f"simulation ({len(sim)} points, closed loop, {many} requests each, seed 0)")
    if approx:
        parts.append(f"{len(rows) - len(sim)} points from the " + "; ".join(approx))
    return "; ".join(parts)


_WHY = (("no measured per-op curves for GPU", "no curves for this GPU"), ("turned off", "--no-op-curves"),
        ("off by default", "off by default: --moe-curve"), ("reference path", "a reference path, refused"),
        ("off in this domain", "off in this domain by its dev rows"), ("is outside the measured", "outside the "
         "curve's engine versions"), ("not the serving kernel, refused", "above 3× its roofline, refused"),
        ("slower than bf16", "a fallback path, refused"), ("histogram", "measured routing"))


def _kernel_sources(prov: dict[str, str]) -> str:
    """One line: which kernel classes a measured per-op curve prices and which the datasheet roofline, with a short
    why (the full texts are the JSON's `provenance`)."""
    measured, datasheet = [], []
    for key, name in (("dense_gemms", "dense GEMMs"), ("attention", "decode attention"), ("experts", "routed experts")):
        text = prov.get(key, "")
        if not text:
            continue
        head = text.split(": ", 1)[1] if ": " in text else text
        if head.startswith("datasheet"):
            why = next((w for k, w in _WHY if k in head), "no curve for this case")
            datasheet.append(f"{name} ({why})")
        elif "datasheet roofline × fitted efficiency for" in head:
            measured.append(f"{name} (part)")
        else:
            measured.append(name)
    out = "kernels: " + (f"measured curves for {', '.join(measured)}" if measured else "no measured curve")
    return out + (f"; datasheet for {', '.join(datasheet)}" if datasheet else "")


def render_calibration(cal: dict[str, Any], console: Console) -> None:
    """`model --measured`: which knob each input set, the status, and where the TPOT ranges come from."""
    from servescope.report.measured_doc import measured_lines

    for line in measured_lines(cal):
        console.print(Text(line))
    console.print(Text(f"TPOT ranges are the held-out error of calibrating so ({cal['case']}, "
                       "data-build/calibrated_ranges.py); TTFT as modelled"))


def _render_calibrated(cal: dict[str, Any] | None, console: Console) -> None:
    """`validate --calibrate-on`: each series calibrated on some of its points, the rest predicted."""
    if not cal:
        return
    t = Table(title="calibrated on a series' own points, predicted on the rest of the series (held out)",
              title_justify="left")
    for col in ("calibrated on", "series", "rows", "TPOT MAPE %", "uncalibrated %", "TPOT bias %", "TPOT 80% range",
                "coverage", "TTFT MAPE %", "TTFT level %"):
        t.add_column(col, justify="left" if col == "calibrated on" else "right")
    for mode, g in cal.items():
        t.add_row(mode, str(g["series"]), str(g["rows"]), f"{100 * g['tpot_mape']:.1f}",
                  f"{100 * g['uncalibrated_tpot_mape']:.1f}", f"{100 * g['tpot_bias']:+.1f}",
                  f"×{g['tpot_q10']:.2f}–{g['tpot_q90']:.2f}", f"{g['tpot_coverage']:.2f}",
                  f"{100 * g['ttft_mape']:.1f}", f"{100 * g['ttft_level_mape']:.1f}")
    console.print(t)
    console.print(Text("TTFT stays the model's: a TTFT level fitted at other concurrencies raised the held-out TTFT "
                       "error (TTFT level %); coverage: each model's rows against the other models' q10–q90",
                       style="dim"))


def render_validation(doc: dict[str, Any], console: Console) -> None:
    # MAPEs in the document are fractions (0.15 = 15%).
    if "decode_only" in doc and not doc["agg_rows"]:  # decode-only rows alone: only their slice
        return _render_decode_only(doc, console)
    n_disagg = sum(1 for s in doc["skipped"] if "disaggregated" in s["reason"])
    head = (f"TPOT MAPE {100 * doc['tpot_mape']:.1f}% · TTFT MAPE {100 * doc['ttft_mape']:.1f}% over "
            f"{doc['n_rows']} of {doc['agg_rows']} aggregated rows ({doc['agg_rows'] - doc['n_rows']} skipped with a "
            f"reason; {n_disagg} disaggregated rows not modelled)")
    console.print(Text(head, style="bold"))
    if "tpot_coverage" in doc:
        console.print(Text(f"80% ranges hold the measured value on {100 * doc['tpot_coverage']:.0f}% of rows (TPOT), "
                           f"{100 * doc['ttft_coverage']:.0f}% (TTFT)"))
    cv = doc.get("cross_validation")
    if cv:
        t = Table(title="cross-validated (refit without the group, predict it)", title_justify="left")
        for col in ("held out", "folds", "rows", "TPOT MAPE %", "TTFT MAPE %", "TPOT bias %", "TTFT bias %"):
            t.add_column(col, justify="left" if col == "held out" else "right")
        for name, g in cv.items():
            t.add_row(name.replace("leave_one_", "one ").replace("_out", ""), str(g["folds"]), str(g["rows"]),
                      f"{100 * g['tpot_mape']:.1f}", f"{100 * g['ttft_mape']:.1f}", f"{100 * g['tpot_bias']:+.1f}",
                      f"{100 * g['ttft_bias']:+.1f}")
        console.print(t)
        for name, g in cv.items():
            if g.get("warning"):
                console.print(Text(f"warning: {name}: {g['warning']}", style="yellow"))
    _render_calibrated(doc.get("calibrated"), console)
    for group in ("by_system", "by_backend", "by_model"):
        t = Table(title=group.replace("_", " "), title_justify="left")
        for col in ("name", "rows", "TPOT MAPE %", "TTFT MAPE %"):
            t.add_column(col, justify="left" if col == "name" else "right")
        for name, g in sorted(doc.get(group, {}).items()):
            t.add_row(name, str(g.get("rows", "")), f"{100 * g['tpot_mape']:.1f}", f"{100 * g['ttft_mape']:.1f}")
        console.print(t)
    w = Table(title="worst rows (error = |predicted − measured| / measured)", title_justify="left")
    for col in ("id", "conc.", "TPOT ms", "predicted", "TTFT ms", "predicted", "bound"):
        w.add_column(col, justify="left" if col in ("id", "bound") else "right", overflow="fold",
                     max_width=48 if col == "id" else None)
    for r in doc.get("worst", []):
        w.add_row(r["id"], str(r["concurrency"]), f"{r['tpot_ms']:.2f}", f"{r['pred_tpot_ms']:.2f}",
                  f"{r['ttft_ms']:,.0f}", f"{r['pred_ttft_ms']:,.0f}", r["dominant"])
    console.print(w)
    _render_decode_only(doc, console)


def _render_decode_only(doc: dict[str, Any], console: Console) -> None:
    """The decode-only slice, its own tables (report/validate_text.py), when the document has one."""
    if "decode_only" in doc:
        from servescope.report.validate_text import render_decode_only

        render_decode_only(doc["decode_only"], console)


def render_names(doc: dict[str, Any], console: Console) -> None:
    """The bundled GPU and model names (a `servescope.specs/1` document), wrapped at the console width."""
    console.print(Text("GPUs:   " + ", ".join(doc["gpus"])), highlight=False)
    console.print(Text("models: " + ", ".join(doc["models"])), highlight=False)
