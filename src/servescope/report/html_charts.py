"""Plotly figure specifications (plain dicts: `data` traces and a `layout`) for the HTML report. Presentation
only: every number is read from a document; times are shown in ms or µs as the axis titles say.

The figures are drawn in the page by the inlined plotly.min.js; nothing here imports plotly's Python API (its
validation costs more than the whole trace analysis)."""

from __future__ import annotations

from typing import Any

from servescope.units import us_to_ms

Figure = dict[str, Any]

CLASS_COLORS = {
    "communication": "#d62728", "gemm": "#1f77b4", "attention": "#ff7f0e", "moe": "#9467bd", "norm": "#8c564b",
    "activation": "#e377c2", "rotary": "#bcbd22", "cast": "#17becf", "sampling": "#7f7f7f", "memory": "#2ca02c",
    "other": "#c7c7c7", "idle": "#eeeeee",
}
# The legend sits right of the plot area, top-aligned (plotly widens the right margin for it): never over an axis
# title, as a horizontal legend under the plot is.
LEGEND: dict[str, Any] = {"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1.0, "yanchor": "top"}
_BASE_LAYOUT: dict[str, Any] = {"margin": {"l": 60, "r": 20, "t": 40, "b": 50}, "legend": LEGEND,
                                "font": {"family": "system-ui, sans-serif", "size": 12}, "height": 380}


def _layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
    return {**_BASE_LAYOUT, "title": {"text": title}, "xaxis": {"title": {"text": x}},
            "yaxis": {"title": {"text": y}}, **extra}


def class_bars(kinds: list[tuple[str, dict[str, Any]]]) -> Figure:
    """Stacked bar per step kind (`kinds`: (label, by_kind entry of the trace document)) of union ms per step
    by class, plus idle ms per step (span − busy). Class unions overlap when kernels run concurrently."""
    classes = sorted({c for _, k in kinds for c in k["classes"]})
    labels = [label for label, _ in kinds]
    data = [{"type": "bar", "name": c, "x": labels, "marker": {"color": CLASS_COLORS.get(c, "#999")},
             "y": [us_to_ms(k["classes"].get(c, 0.0) or 0.0) / max(k["steps"], 1) for _, k in kinds]}
            for c in classes]
    data.append({"type": "bar", "name": "idle", "x": labels, "marker": {"color": CLASS_COLORS["idle"]},
                 "y": [us_to_ms(k["idle_us"] or 0.0) / max(k["steps"], 1) for _, k in kinds]})
    return {"data": data, "layout": _layout("time per step by class", "step kind", "ms per step", barmode="stack")}


def timeline(t: dict[str, Any]) -> Figure:
    """Kernels of one step per stream (bars from start to end, coloured by class); collectives marked with a
    triangle at their start, labelled with the collective."""
    k = t["kernels"]
    streams = sorted(set(k["stream"]))
    rows = {s: f"stream {s}" for s in streams}
    data: list[dict[str, Any]] = []
    for c in sorted(set(k["class"])):
        idx = [i for i, x in enumerate(k["class"]) if x == c]
        data.append({"type": "bar", "orientation": "h", "name": c, "marker": {"color": CLASS_COLORS.get(c, "#999")},
                     "base": [k["start_us"][i] for i in idx], "x": [k["dur_us"][i] for i in idx],
                     "y": [rows[k["stream"][i]] for i in idx], "hovertext": [k["name"][i] for i in idx],
                     "hoverinfo": "text+x", "width": 0.8})
    coll = [i for i, x in enumerate(k["collective"]) if x]
    if coll:
        data.append({"type": "scatter", "mode": "markers", "name": "collective",
                     "x": [k["start_us"][i] for i in coll], "y": [rows[k["stream"][i]] for i in coll],
                     "text": [k["collective"][i] for i in coll], "hoverinfo": "text+x",
                     "marker": {"symbol": "triangle-down", "size": 9, "color": "#000"}})
    height = max(220, 90 + 45 * len(streams))
    return {"data": data, "layout": _layout(f"{t['kind']} step {t['step']}: kernels per stream", "µs from the "
                                            "step's first kernel", "", barmode="overlay", height=height,
                                            margin={"l": 90, "r": 20, "t": 40, "b": 50})}


def collective_latency(kind: str, collectives: dict[str, Any]) -> Figure:
    """Median per-call latency per collective, with the p90 as the upper error bar."""
    names = list(collectives)
    med = [collectives[n]["median_us"] for n in names]
    p90 = [max(0.0, (collectives[n]["p90_us"] or 0.0) - (collectives[n]["median_us"] or 0.0)) for n in names]
    data = [{"type": "bar", "name": "median µs per call", "x": names, "y": med,
             "marker": {"color": CLASS_COLORS["communication"]},
             "error_y": {"type": "data", "symmetric": False, "array": p90, "arrayminus": [0.0] * len(names)}}]
    return {"data": data, "layout": _layout(f"{kind}: per-call latency (bar: median, whisker: p90)",
                                            "collective", "µs per call", height=320)}


def measured_vs_model(rows: list[dict[str, Any]]) -> Figure:
    """Grouped bars: measured and modelled µs per class of the calibrated step."""
    rows = [r for r in rows if r["class"] != "step"]
    names = [r["class"] for r in rows]
    data = [{"type": "bar", "name": "measured", "x": names, "y": [r["measured_us"] for r in rows],
             "marker": {"color": "#333"}},
            {"type": "bar", "name": "model", "x": names, "y": [r["model_us"] for r in rows],
             "marker": {"color": "#1f77b4"}}]
    return {"data": data, "layout": _layout("measured vs modelled, per class", "class", "µs", barmode="group")}


def plan_gains(tracks: list[dict[str, Any]], objective: str) -> Figure:
    """Horizontal bars of each applicable track's gain, whiskers from gain_low to gain_high."""
    ts = [t for t in tracks if t["gain"] is not None][::-1]
    data = [{"type": "bar", "orientation": "h", "name": "gain", "y": [t["kind"] for t in ts],
             "x": [t["gain"] for t in ts], "marker": {"color": ["#2ca02c" if t["gain"] > 1 else "#aaa" for t in ts]},
             "error_x": {"type": "data", "symmetric": False, "array": [t["gain_high"] - t["gain"] for t in ts],
                         "arrayminus": [t["gain"] - t["gain_low"] for t in ts]}}]
    return {"data": data, "layout": _layout(f"predicted gain on {objective} (whiskers: range)", "gain (×)", "",
                                            height=max(240, 60 + 34 * len(ts)), margin={"l": 170, "r": 20,
                                                                                        "t": 40, "b": 50})}


def latency_throughput(curves: list[dict[str, Any]], measured: list[dict[str, Any]] | None = None) -> Figure:
    """tok/s per GPU against tok/s per user, one line per curve, points labelled with the concurrency; the
    user's measured points (measured_doc.curve_points) as markers the baseline passes through."""
    data = [{"type": "scatter", "mode": "lines+markers", "name": c["name"],
             "x": [p["tok_s_per_user"] for p in c["points"]], "y": [p["tok_s_per_gpu"] for p in c["points"]],
             "text": [f"concurrency {p['concurrency']}" for p in c["points"]], "hoverinfo": "text+x+y",
             "line": {"dash": "solid" if c["name"] in ("baseline", "combined") else "dot"}}
            for c in curves]
    data += measured_markers(measured)
    return {"data": data, "layout": _layout("latency–throughput (model, calibrated when a trace or measured figures "
                                            "are given)", "output tok/s per user (1 / TPOT)",
                                            "output tok/s per GPU", height=420)}


def measured_markers(points: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The measured points as one marker series (none without points)."""
    if not points:
        return []
    return [{"type": "scatter", "mode": "markers", "name": "measured",
             "x": [p["tok_s_per_user"] for p in points], "y": [p["tok_s_per_gpu"] for p in points],
             "text": [f"measured at concurrency {p['concurrency']}: {', '.join(p['figures'])}" for p in points],
             "hoverinfo": "text+x+y", "marker": {"symbol": "x", "size": 13, "color": "#d62728",
                                                 "line": {"width": 2}}}]


def pareto(points: list[dict[str, Any]], measured: list[dict[str, Any]] | None = None) -> Figure:
    """tok/s per GPU against tok/s per user for every (layout, concurrency) point of a sweep, one marker series
    per layout, and the Pareto front drawn through its points."""
    layouts = list(dict.fromkeys(p["layout"] for p in points))
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "markers", "name": lay, "marker": {"size": 7, "opacity": 0.6},
         "x": [p["tok_s_per_user"] for p in points if p["layout"] == lay],
         "y": [p["tok_s_per_gpu"] for p in points if p["layout"] == lay],
         "text": [f"{lay}, concurrency {p['concurrency']}" for p in points if p["layout"] == lay],
         "hoverinfo": "text+x+y"} for lay in layouts]
    front = sorted((p for p in points if p["on_front"]), key=lambda p: p["tok_s_per_user"])
    data += measured_markers(measured)
    if front:
        data.append({"type": "scatter", "mode": "lines+markers", "name": "Pareto front",
                     "x": [p["tok_s_per_user"] for p in front], "y": [p["tok_s_per_gpu"] for p in front],
                     "text": [f"{p['layout']}, concurrency {p['concurrency']}" for p in front],
                     "hoverinfo": "text+x+y", "line": {"color": "#000", "width": 2},
                     "marker": {"color": "#000", "size": 8, "symbol": "diamond"}})
    return {"data": data, "layout": _layout("Pareto front: throughput per GPU vs speed per user",
                                            "output tok/s per user (1 / TPOT)", "output tok/s per GPU",
                                            height=460)}


def sim_timeline(tl: dict[str, Any]) -> Figure:
    """A simulated run over time: sequences in the decode batch (running) and waiting, and the KV cache used
    (% of capacity, right axis)."""
    t = tl["t_s"]
    data = [{"type": "scatter", "mode": "lines", "name": "running (batch)", "x": t, "y": tl["running"],
             "line": {"color": "#1f77b4"}},
            {"type": "scatter", "mode": "lines", "name": "waiting", "x": t, "y": tl["waiting"],
             "line": {"color": "#ff7f0e"}}]
    if tl.get("kv_used_frac"):
        data.append({"type": "scatter", "mode": "lines", "name": "KV used %", "x": t, "yaxis": "y2",
                     "y": [100.0 * f for f in tl["kv_used_frac"]], "line": {"color": "#2ca02c", "dash": "dot"}})
    layout = _layout("batch and KV cache over time", "s from the first arrival", "sequences", height=400)
    layout["yaxis2"] = {"title": {"text": "KV used %"}, "overlaying": "y", "side": "right", "range": [0, 105]}
    layout["legend"] = {**LEGEND, "x": 1.1}  # clear of the right axis title
    return {"data": data, "layout": layout}


def model_terms(points: list[dict[str, Any]]) -> Figure:
    """Stacked bars of the TPOT terms (ms per output token) per concurrency."""
    terms = list(points[0]["terms_ms"]) if points else []
    x = [str(p["concurrency"]) for p in points]
    data = [{"type": "bar", "name": t, "x": x, "y": [p["terms_ms"][t] for p in points]} for t in terms]
    return {"data": data, "layout": _layout("TPOT by term", "concurrency", "ms per output token", barmode="stack")}


def before_after(kind: str, classes: dict[str, Any]) -> Figure:
    """Grouped bars: µs per step before and after, per class (diff documents)."""
    names = list(classes)
    data = [{"type": "bar", "name": side, "x": names, "y": [classes[n][f"{side}_us"] for n in names]}
            for side in ("before", "after")]
    return {"data": data, "layout": _layout(f"{kind}: µs per step by class", "class", "µs per step",
                                            barmode="group")}


def roofline(label: str, kernels: list[dict[str, Any]], peaks: dict[str, Any] | None) -> Figure:
    """Kernels (top-kernel rows of a trace document with FLOPs) on the GPU's roofline: x = arithmetic intensity
    (FLOP/byte), y = achieved TFLOP/s, both log; marker area ∝ the kernel's shaped µs (diameter ∝ √µs), colour =
    class; one roofline
    per dtype the kernels use, min(peak, intensity × HBM bandwidth), from the document's datasheet peaks."""
    pts = [k for k in kernels if k.get("flop_per_byte") and k.get("achieved_tflops")]
    longest = max((k["shaped_us"] or 0.0 for k in pts), default=0.0) or 1.0
    data: list[dict[str, Any]] = []
    for c in sorted({k["class"] for k in pts}):
        mine = [k for k in pts if k["class"] == c]
        data.append({"type": "scatter", "mode": "markers", "name": c, "x": [k["flop_per_byte"] for k in mine],
                     "y": [k["achieved_tflops"] for k in mine], "hoverinfo": "text+x+y",
                     "text": [f"{k['name'][:80]}<br>{k['shaped_us'] / 1e3:,.3f} ms, {k['pct_of_peak'] or '–'}% of peak"
                              for k in mine],
                     "marker": {"color": CLASS_COLORS.get(c, "#999"), "opacity": 0.75,
                                "size": [6 + 34 * ((k["shaped_us"] or 0.0) / longest) ** 0.5 for k in mine],
                                "line": {"width": 1, "color": "#333"}}})
    if peaks and pts and peaks.get("hbm_bw_bytes_per_s"):
        bw = peaks["hbm_bw_bytes_per_s"]
        lo = min(k["flop_per_byte"] for k in pts) / 4
        hi = max(k["flop_per_byte"] for k in pts) * 4
        for dtype in sorted({d for k in pts for d in (k.get("dtypes") or [])}):
            peak = (peaks.get("flops_per_s") or {}).get(dtype)
            if not peak:
                continue
            ridge = peak / bw
            xs = [lo, min(max(ridge, lo), hi), hi]
            data.append({"type": "scatter", "mode": "lines", "name": f"{dtype} roofline",
                         "x": xs, "y": [min(peak, x * bw) / 1e12 for x in xs], "hoverinfo": "name+x+y",
                         "line": {"color": "#000", "dash": "dash" if dtype != "bf16" else "solid", "width": 1.5}})
    layout = _layout(f"{label}: kernels on the roofline (marker area ∝ GPU time)", "arithmetic intensity (FLOP/byte)",
                     "achieved TFLOP/s", height=440)
    layout["xaxis"]["type"] = "log"
    layout["yaxis"]["type"] = "log"
    return {"data": data, "layout": layout}
