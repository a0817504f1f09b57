"""Terminal rendering of `servescope simulate` (Rich): latency percentiles, throughput, queueing, KV and batch
over time, and the comparison with a measured benchmark file. Draws from the simulate/1 document only."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _latency_table(doc: dict[str, Any]) -> Table:
    t = Table(box=None, pad_edge=False)
    for col in ("latency (ms)", "mean", "p50", "p90", "p99"):
        t.add_column(col, justify="left" if col.startswith("latency") else "right")
    for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms")):
        st = doc[key]
        t.add_row(name, *(f"{st[k]:,.1f}" for k in ("mean", "p50", "p90", "p99")))
    return t


PART_LABELS = {"front_end": "front end", "queue": "queue", "prefill": "prefill", "delivery": "first-token delivery",
               "gpu": "GPU step", "host": "host gap", "rank_wait": "rank-arrival wait", "overlap": "overlap (hidden)",
               "stall": "stall (KV copies, idle)"}


def _parts_table(doc: dict[str, Any]) -> Table:
    """TTFT and TPOT by boundary (ms; boundaries_document), each part with its sign and source."""
    t = Table(box=None, pad_edge=False)
    for col in ("by boundary (ms)", "mean", "p50", "p90", "p99", "source"):
        t.add_column(col, justify="right" if col in ("mean", "p50", "p90", "p99") else "left")
    for side, head in (("ttft", "TTFT ="), ("tpot", "TPOT = mean ITL =")):
        t.add_row(head, "", "", "", "", "")
        for r in doc["boundaries"][side]:
            sign = "−" if r["sign"] < 0 else "+"
            t.add_row(f"  {sign} {PART_LABELS.get(r['part'], r['part'])}",
                      *(f"{r['ms'][k] + 0.0 if abs(r['ms'][k]) >= 5e-4 else 0.0:,.3f}"
                        for k in ("mean", "p50", "p90", "p99")), r["source"])
    return t


def _over_time(doc: dict[str, Any]) -> str:
    tl = doc["timeline"]
    if not tl["t_s"]:
        return "no steps"
    return (f"batch: peak {max(tl['running']):.0f} running, peak {max(tl['waiting']):.0f} waiting; KV cache: peak "
            f"{max(tl['kv_used_frac']):.0%} of {doc['kv_capacity_tokens']:,} tokens; step time "
            f"{min(tl['step_ms']):,.1f}–{max(tl['step_ms']):,.1f} ms")


def render_run(title: str, doc: dict[str, Any], console: Console) -> None:
    """One simulated run."""
    s = doc["settings"]
    eng = s.get("engine", {})
    console.print(f"[bold]{title}[/bold]")
    console.print(f"simulated {doc['requests']} requests ({s.get('arrival')}, concurrency {s.get('concurrency')}, "
                  f"mean ISL {s.get('mean_isl', 0):.0f} / OSL {s.get('mean_osl', 0):.0f}) on "
                  f"{eng.get('backend')} (max_num_seqs {eng.get('max_num_seqs')}, max_num_batched_tokens "
                  f"{eng.get('max_num_batched_tokens')}, {eng.get('priority')}, {eng.get('admission')} KV)")
    console.print(f"duration {doc['duration_s']:,.1f} s: {doc['output_tok_s']:,.1f} output tok/s, "
                  f"{doc['request_throughput_per_s']:.3f} req/s, {doc['mean_in_flight']:.1f} requests in flight "
                  "on average")
    console.print(_latency_table(doc))
    if doc.get("boundaries"):
        console.print(_parts_table(doc))
    console.print(_over_time(doc))
    if doc.get("prefix_cache"):
        pc = doc["prefix_cache"]
        how = (f"a shared prefix of {pc['shared_prefix_tokens']:,} tokens" if pc["shared_prefix_tokens"]
               else f"hit rate {pc['prefix_hit_rate']:.2f}")
        console.print(f"prefix cache ({how}): {pc['cached_frac']:.1%} of prompt tokens found cached; prefill "
                      f"{pc['mean_prefill_tokens']:,.0f} of {pc['mean_prompt_tokens']:,.0f} tokens per request")
    for w in doc["warnings"]:
        console.print(f"[yellow]note[/yellow] {w}")


def render_replay(title: str, doc: dict[str, Any], console: Console) -> None:
    """A replayed run, then the measured latencies of the file beside the simulated ones."""
    render_run(title, doc, console)
    rep = doc["replay"]
    console.print(f"replayed {rep['requests']} requests of {rep['file']} ({rep['format']}): measured vs simulated")
    t = Table(box=None, pad_edge=False)
    for col in ("latency (ms)", "measured mean", "p50", "p90", "p99", "simulated mean", "error"):
        t.add_column(col, justify="left" if col.startswith("latency") else "right")
    for name in ("ttft", "tpot", "e2e"):
        m, s, err = rep["measured"][f"{name}_ms"], doc[f"{name}_ms"], rep["error"][f"{name}_mean"]
        if m is None:
            t.add_row(name.upper(), "–", "–", "–", "–", f"{s['mean']:,.1f}", "not in the file")
            continue
        t.add_row(name.upper(), *(f"{m[k]:,.1f}" for k in ("mean", "p50", "p90", "p99")), f"{s['mean']:,.1f}",
                  "–" if err is None else f"{100 * err:+.1f}%")
    console.print(t)


def render_compare(title: str, doc: dict[str, Any], console: Console) -> None:
    """Each measured run next to its simulation."""
    for run in doc["runs"]:
        console.print(f"[bold]{title}[/bold] vs {run['measured']['label']}")
        t = Table(box=None, pad_edge=False)
        for col in ("metric", "measured", "simulated", "error"):
            t.add_column(col, justify="left" if col == "metric" else "right")
        for r in run["comparison"]:
            t.add_row(r["metric"], f"{r['measured']:,.1f}", f"{r['simulated']:,.1f}", f"{r['error_pct']:+.1f}%")
        console.print(t)
        if run.get("boundaries"):
            console.print(_parts_table(run))
        for w in run["warnings"]:
            console.print(f"[yellow]note[/yellow] {w}")
        console.print()


def _cell(st: dict[str, float] | None, key: str) -> str:
    return "–" if st is None or st.get(key) is None else f"{st[key]:,.1f}"


def render_engine_metrics(em: dict[str, Any], console: Console) -> None:
    """`--metrics FILE`: the engine's measured boundaries beside the simulated ones (ms)."""
    from rich.text import Text

    pooled = f", the simulated runs pooled ({em['runs_pooled']})" if em["runs_pooled"] > 1 else ""
    console.print(Text(f"engine metrics of {em['file']} ({em['engine']} /metrics) vs simulated{pooled}"))
    t = Table(box=None, pad_edge=False)
    for col in ("boundary (ms)", "measured mean", "p50", "p90", "p99", "simulated mean", "p50", "p90", "p99",
                "error"):
        t.add_column(col, justify="left" if col.startswith("boundary") else "right")
    for r in em["boundaries"]:
        m, s = r["measured_ms"], r["simulated_ms"]
        err = "not in the scrape" if m is None else ("–" if r["error_pct"] is None else f"{r['error_pct']:+.1f}%")
        t.add_row(r["boundary"].replace("_", " ").upper(), *(_cell(m, k) for k in ("mean", "p50", "p90", "p99")),
                  *(_cell(s, k) for k in ("mean", "p50", "p90", "p99")), err)
    console.print(t)
    g = em["gauges"]
    parts = [f"{k.replace('_', ' ')} {g[k]:.3g} ({g['series'][k]})" for k in ("running", "kv_usage", "prefix_hit_rate")
             if g[k] is not None]
    if g["simulated_mean_in_flight"] is not None:
        parts.append(f"simulated mean in flight {g['simulated_mean_in_flight']:.3g}")
    if parts:
        console.print(Text("at the scrape: " + "; ".join(parts) + " (gauges: the instant of the scrape)"))


def render_sweep(title: str, doc: dict[str, Any], console: Console, all_points: bool = False) -> None:
    """The Pareto front (or every point) of tok/s per GPU against tok/s per user."""
    console.print(f"[bold]{title}[/bold]: {doc['n_gpus']} GPUs, closed form")
    t = Table(box=None, pad_edge=False)
    for col in ("layout", "concurrency", "tok/s/GPU", "tok/s/user", "TPOT ms", "TTFT ms", "front"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    rows = [p for p in doc["points"] if all_points or p["on_front"]]
    for p in sorted(rows, key=lambda p: -p["tok_s_per_user"]):
        t.add_row(p["layout"], str(p["concurrency"]), f"{p['tok_s_per_gpu']:,.1f}", f"{p['tok_s_per_user']:,.1f}",
                  f"{p['tpot_ms']:,.1f}", f"{p['ttft_ms']:,.0f}", "*" if p["on_front"] else "")
    console.print(t)
    for s in doc["skipped"]:
        console.print(f"[yellow]skipped[/yellow] {s}")
    if doc.get("sla"):
        _render_sla(doc, console)
    if doc.get("measured"):
        from rich.text import Text

        from servescope.report.measured_doc import measured_lines, points_lines

        m = doc["measured"]
        lines = [*measured_lines(m), f"  measured on {m['layout']}; its levels are carried to the other layouts",
                 *points_lines(m)]
        for line in lines:
            console.print(Text(line))


def _render_sla(doc: dict[str, Any], console: Console) -> None:
    """The SLA screen's counts and the simulated points (sweep --ttft-max/--tpot-max)."""
    sla = doc["sla"]
    bounds = ", ".join(f"{name} <= {v:g} ms" for name, v in (("TTFT", sla["ttft_max_ms"]), ("TPOT", sla["tpot_max_ms"]))
                       if v is not None)
    console.print(f"SLA {bounds}: {sla['screened']} points screened (closed form), {sla['passed']} within it, "
                  f"{sla['simulated']} simulated (the front of those within it)")
    t = Table(box=None, pad_edge=False)
    for col in ("layout", "concurrency", "sim tok/s/GPU", "TTFT mean", "TTFT p99", "TPOT mean", "TPOT p99", "SLA"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for p in doc["points"]:
        m = p.get("simulated")
        if m is not None:
            t.add_row(p["layout"], str(p["concurrency"]), f"{m['output_tok_s'] / doc['n_gpus']:,.1f}",
                      f"{m['ttft_mean_ms']:,.0f}", f"{m['ttft_p99_ms']:,.0f}", f"{m['tpot_mean_ms']:,.1f}",
                      f"{m['tpot_p99_ms']:,.1f}", "met" if m["sla_met"] else "missed")
    if sla["simulated"]:
        console.print(t)
    for note in sla["notes"]:
        console.print(f"[yellow]{note}[/yellow]")


def render_model_sim(doc: dict[str, Any], console: Console) -> None:
    """The simulated columns `model --simulate` adds to each point."""
    t = Table(title="simulated (closed loop at each concurrency)", box=None, pad_edge=False)
    for col in ("concurrency", "tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p99"):
        t.add_column(col, justify="right")
    for p in doc["points"]:
        if "ttft_p50_ms" in p:
            t.add_row(str(p["concurrency"]), f"{p['simulated']['output_tok_s']:,.1f}",
                      *(f"{p[k]:,.1f}" for k in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                                                  "itl_p99_ms")))
    console.print(t)
