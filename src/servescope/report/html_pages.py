"""The HTML pages of the documents other than a trace, a report or a plan: `model/1` (the terms chart, the
latency–throughput curve and the points), `diff/1` (classes, collectives and kernels before and after, per step
kind), `verify/1` and `campaign/1` (prediction against measurement), `sweep/1` (the Pareto chart and front),
`simulate/1` (percentiles, queueing, the run's timeline, a replay or a comparison) and any other document as
generic tables. Presentation only: numbers are read from the document and formatted.
Does not: dispatch a document to its page, build the trace and plan sections or the page header
(report.html_sections).
"""

from __future__ import annotations

from typing import Any

from servescope.report import html_charts as charts
from servescope.report.html_cells import Section, chart, table
from servescope.report.kernel_names import short_names
from servescope.report.measured_doc import measured_lines, points_lines
from servescope.units import MS_PER_S


def model_page(doc: dict[str, Any]) -> tuple[str, str, list[Section]]:
    pts = doc["points"]
    rows = [[p["concurrency"], p["tpot_ms"], p["ttft_ms"], p["output_tok_s"], p["dominant"], p["floor_ms"],
             p["memory_gb_per_gpu"], p["max_concurrency"]] for p in pts]
    curve = [{"name": "model", "points": [{"tok_s_per_user": MS_PER_S / p["tpot_ms"], "tok_s_per_gpu": p["output_tok_s"],
                                           "concurrency": p["concurrency"]} for p in pts]}]
    fig = charts.latency_throughput(curve)
    fig["layout"]["yaxis"]["title"]["text"] = "output tok/s (whole instance)"
    blocks = [chart(charts.model_terms(pts)), chart(fig),
              table(["concurrency", "TPOT ms", "TTFT ms", "tok/s", "bound", "floor ms", "GB/GPU", "max conc."], rows,
                    nd=2)]
    return "servescope model", "", [{"id": "model", "title": "Model", "intro": "", "blocks": blocks}]


def diff_page(doc: dict[str, Any]) -> tuple[str, str, list[Section]]:
    secs = []
    for k in doc["kinds"]:
        cls = k["classes"]
        blocks: list[dict[str, Any]] = [chart(charts.before_after(k["kind"], cls))] if cls else []
        blocks.append(table(["class", "before µs/step", "after µs/step", "after / before", "significant"],
                            [[n, c["before_us"], c["after_us"], c["ratio"], c["significant"]] for n, c in cls.items()]))
        co = k["collectives"]
        if co:
            blocks.append(table(["collective", "calls before", "calls after", "median µs before", "median µs after",
                                 "after / before", "significant"],
                                [[n, c["before_calls"], c["after_calls"], c["before_median_us"], c["after_median_us"],
                                  c["ratio"], c["significant"]] for n, c in co.items()], title="collectives"))
        kern = k.get("kernels", [])
        if kern:
            names = short_names((x["name"] for x in kern), 80)
            blocks.append(table(["kernel", "class", "before µs/step", "after µs/step", "after / before", "significant"],
                                [[names[x["name"]], x["class"], x["before_us"], x["after_us"], x["ratio"],
                                  x["significant"]] for x in kern], title="kernels"))
        secs.append({"id": f"diff-{k['kind']}", "title": f"{k['kind']}: {k['steps_before']} → {k['steps_after']} "
                     "steps", "intro": "", "blocks": blocks})
    return "servescope diff", "", secs


def verify_page(doc: dict[str, Any]) -> tuple[str, str, list[Section]]:
    """`verify/1`: before/after, each applied track's prediction and the verdict; `campaign/1`: every change."""
    warn: list[dict[str, Any]] = []  # the warnings are in the page's warnings block (caveats)
    if "entries" in doc:  # campaign/1
        rows = [[r["n"], " + ".join(r["tracks"]), r["gain"], r["gain_low"], r["gain_high"], r["measured_gain"],
                 r["verdict"], r["before"], r["after"], r["since_start"]] for r in doc["entries"]]
        rate = "–" if doc["hit_rate"] is None else f"{doc['hit_rate']:.0%}"
        blocks = [{"type": "text", "text": f"ranges hit: {doc['inside']} of {doc['scored']} inside ({rate}); "
                   f"{doc['above']} above, {doc['below']} below"},
                  table(["#", "tracks", "predicted ×", "80% low", "80% high", "measured ×", "verdict",
                         f"before {doc['start']['unit']}", f"after {doc['now']['unit']}", "since start ×"], rows,
                        nd=2), *warn]
        return "servescope verify (campaign)", str(doc["log"]), [{"id": "campaign", "title": "Campaign",
                                                                    "intro": "", "blocks": blocks}]
    c, unit = doc["check"], doc["before"]["unit"]
    base = doc["baseline"]
    sides = table(["", f"{doc['objective']} ({unit})", "source", "how"],
                  [["plan baseline", base["value"], doc["plan"], base.get("basis", "modelled")],
                   *[[s, doc[s]["value"], doc[s]["source"], doc[s]["detail"]] for s in ("before", "after")]], nd=2)
    tracks = [[t["kind"], t["gain"], t["gain_low"], t["gain_high"], t["measured_gain"], t["verdict"]]
              for t in doc["tracks"]]
    if len(doc["tracks"]) > 1:
        tracks.append([f"together ({c['basis']})", c["gain"], c["gain_low"], c["gain_high"], c["measured_gain"],
                       c["verdict"]])
    found = ([table(["track found applied", "evidence (before → after)"],
                    [[f["kind"], f["evidence"]] for f in doc["found"]])] if doc.get("found") else [])
    blocks = [sides, *found,
              table(["track", "predicted ×", "80% low", "80% high", "measured ×", "verdict"], tracks, nd=2),
              {"type": "text", "text": f"verdict: {c['verdict']}: measured {c['measured_gain']:.2f}x vs predicted "
               f"{c['gain']:.2f}x ({c['gain_low']:.2f}–{c['gain_high']:.2f}x), scored against {c['basis_text']}"},
              *warn]
    return "servescope verify", f"{doc['plan']} · {doc['objective']} at concurrency {doc['concurrency']}", [
        {"id": "verify", "title": "Plan vs measured", "intro": "", "blocks": blocks}]


def generic_page(doc: dict[str, Any]) -> tuple[str, str, list[Section]]:
    blocks: list[dict[str, Any]] = []
    scalars = [[k, v] for k, v in doc.items() if not isinstance(v, dict | list)]
    if scalars:
        blocks.append(table(["field", "value"], scalars))
    for k, v in doc.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            cols = list(dict.fromkeys(c for x in v for c in x))
            blocks.append(table(cols, [[_cell(x.get(c)) for c in cols] for x in v], title=k))
        elif isinstance(v, dict):
            blocks.append(table(["key", "value"], [[a, _cell(b)] for a, b in v.items()], title=k))
        elif isinstance(v, list):
            blocks.append({"type": "text", "text": f"{k}: " + ", ".join(str(x) for x in v)})
    return f"servescope: {doc.get('schema', 'document')}", "", [{"id": "doc", "title": str(doc.get("schema", "")),
                                                                 "intro": "", "blocks": blocks}]


def _cell(v: Any) -> Any:
    return v if not isinstance(v, dict | list) else ", ".join(
        f"{a}={b}" for a, b in v.items()) if isinstance(v, dict) else "; ".join(str(x) for x in v)


def sweep_page(doc: dict[str, Any]) -> tuple[str, str, list[Section]]:
    """`sweep/1`: the Pareto chart (every layout's points, the front drawn through) and the front as a table."""
    pts = doc["points"]
    front = sorted((p for p in pts if p["on_front"]), key=lambda p: -p["tok_s_per_user"])
    rows = [[p["layout"], p["concurrency"], p["tok_s_per_user"], p["tok_s_per_gpu"], p["tpot_ms"], p["ttft_ms"],
             p["output_tok_s"]] for p in front]
    meas = doc.get("measured")
    blocks = [chart(charts.pareto(pts, (meas or {}).get("curve_points"))),
              table(["layout", "concurrency", "tok/s per user", "tok/s per GPU", "TPOT ms", "TTFT ms",
                     "output tok/s"], rows, nd=1, title="the Pareto front",
                    note=f"{len(front)} of {len(pts)} points are on the front: no other point gives more tok/s per "
                         "GPU at as many tok/s per user; the JSON (--format json) has every point")]
    if meas:
        blocks += [{"type": "text", "text": x} for x in (*measured_lines(meas), *points_lines(meas))]
    return "servescope sweep", f"{doc['n_gpus']} GPUs, closed form", [
        {"id": "sweep", "title": "Layouts: throughput per GPU against speed per user", "intro": "", "blocks": blocks}]


PERCENTILES = ("mean", "p50", "p90", "p99")


def _latency_rows(run: dict[str, Any]) -> list[list[Any]]:
    return [[m.upper(), *[run[f"{m}_ms"][q] for q in PERCENTILES]] for m in ("ttft", "tpot", "itl", "e2e")]


def _simulate_run(run: dict[str, Any], label: str = "") -> list[dict[str, Any]]:
    s = run.get("settings", {})
    blocks: list[dict[str, Any]] = [{"type": "text", "text": (
        f"{label}simulated {run['requests']:,} requests ({s.get('arrival')}, concurrency {s.get('concurrency')}): "
        f"{run['duration_s']:,.1f} s, {run['output_tok_s']:,.1f} output tok/s, {run['request_throughput_per_s']:.3g} "
        f"req/s, mean {run['mean_in_flight']:.3g} in flight, longest step {run['max_step_ms']:,.2f} ms, KV capacity "
        f"{run['kv_capacity_tokens']:,} tokens")},
        table(["metric", *[f"{q} ms" for q in PERCENTILES]], _latency_rows(run), nd=2, title="latency percentiles")]
    parts = run.get("boundaries")
    if parts:  # TTFT and TPOT by boundary (report/simulate_doc.boundaries_document)
        rows = [[f"{side.upper()} {'−' if r['sign'] < 0 else '+'} {r['part']}", *[r["ms"][x] for x in PERCENTILES],
                 r["source"], r["detail"]] for side in ("ttft", "tpot") for r in parts[side]]
        blocks.append(table(["part", *[f"{x} ms" for x in PERCENTILES], "source", "detail"], rows, nd=3,
                            title="TTFT and TPOT by boundary"))
    q = run.get("queueing")
    if q:
        blocks.append(table(["queued", "mean wait s", "longest wait s", "preemptions", "preempted requests"],
                            [[q["queued"], q["mean_wait_s"], q["max_wait_s"], q["preemptions"],
                              q["preempted_requests"]]], nd=2, title="queueing"))
    tl = run.get("timeline")
    if tl and tl.get("t_s"):
        blocks.append(chart(charts.sim_timeline(tl)))
    rep = run.get("replay")
    if rep:
        rows = [[m.upper(), *[(rep["measured"].get(f"{m}_ms") or {}).get(x) for x in PERCENTILES],
                 *[run[f"{m}_ms"][x] for x in PERCENTILES]] for m in ("ttft", "tpot", "e2e")]
        blocks.append(table(["metric", *[f"measured {x} ms" for x in PERCENTILES],
                             *[f"simulated {x} ms" for x in PERCENTILES]], rows, nd=2,
                            title=f"replayed {rep['requests']:,} requests of {rep['file']} ({rep['format']})"))
    comp = run.get("comparison")
    if comp:
        blocks.append(table(["metric", "measured", "simulated", "error %"],
                            [[c["metric"], c["measured"], c["simulated"], c["error_pct"]] for c in comp], nd=2,
                            title=f"vs {run.get('measured', {}).get('label', 'measured')}"))
    return blocks


def _engine_metrics(em: dict[str, Any]) -> Section:
    """`--metrics FILE`: the scrape's boundaries (engine metric) beside the simulated ones, boundary by boundary."""
    rows = [[r["boundary"], *[(r["measured_ms"] or {}).get(x) for x in PERCENTILES],
             *[(r["simulated_ms"] or {}).get(x) for x in PERCENTILES], r["error_pct"], r["series"] or "not in the scrape"]
            for r in em["boundaries"]]
    cols = ["boundary", *[f"measured {x} ms" for x in PERCENTILES], *[f"simulated {x} ms" for x in PERCENTILES],
            "error %", "engine metric"]
    return {"id": "engine-metrics", "title": f"Engine metrics of {em['file']} ({em['engine']} /metrics)",
            "intro": "", "blocks": [table(cols, rows, nd=2)]}


def simulate_page(doc: dict[str, Any]) -> tuple[str, str, list[Section]]:
    """`simulate/1`: the run's percentiles, queueing and the batch / KV-over-time chart (one section per run of
    a comparison), and the scrape's boundaries beside the simulated ones with `--metrics`."""
    extra = [_engine_metrics(doc["engine_metrics"])] if doc.get("engine_metrics") else []
    if "runs" in doc:
        secs = [{"id": f"run{i}", "title": r.get("measured", {}).get("label", f"run {i + 1}"), "intro": "",
                 "blocks": _simulate_run(r)} for i, r in enumerate(doc["runs"])]
        return "servescope simulate (vs measured)", "", secs + extra
    return "servescope simulate", "", [{"id": "simulate", "title": "Simulated run", "intro": "",
                                        "blocks": _simulate_run(doc)}, *extra]
