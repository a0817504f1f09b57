"""The reference box on its owner's figures, calibrated by physical term (issue 26): one run, a markdown table.

Usage: .venv/bin/python bench/reference_issue26.py
Kimi-K2.5 (INT4 W4A16 routed experts, the checkpoint's scheme) on 8× rtx_pro_6000_server, vLLM 0.16.0, TP=8, KV
cache FP8 (`--kv-cache-dtype fp8`, the box's own; BF16 beside it), ISL/OSL 1024/1024. Figures (reference/
hardware-and-models.md, the R6K-K25 write-up): TPOT 12.1 ms at c1, all-reduce 51.5 % of a profiled decode step at c1,
~1,536 output tok/s at c128 (the peak; its concurrency between c128 and c256), EAGLE-3 +32 % at c1 and ≈ +1 % at
c128. Prints: each figure reproduced when all are given; the peak output over c64–c256 uncalibrated and from the c1
figures only; FP8 against BF16 KV; the EAGLE-3 gain over concurrency after the c1 gain; the time a calibration takes.
Nothing here is fitted to these numbers: they are the inputs and the outside check.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from servescope.calibrate.figure_fit import fit_figures  # noqa: E402
from servescope.calibrate.figures import parse_figures  # noqa: E402
from servescope.errors import MeasurementError  # noqa: E402
from servescope.perfmodel import Scenario, decode_step, predict  # noqa: E402
from servescope.planner import plan  # noqa: E402

ALL = ["tpot=12.1ms@c1", "allreduce_share=0.515@c1", "output=1536tok/s@c128", "spec_gain=1.32@c1"]
PEAK_GRID = (64, 96, 128, 160, 192, 224, 256)
REFERENCE_PEAK = 1536.0


def scenario(kv: str = "fp8") -> Scenario:
    return Scenario.build("kimi-k2.5", "rtx_pro_6000_server", tp=8, isl=1024, osl=1024, kv_quant=kv,
                          engine_version="0.16.0")


def peak(sc: Scenario) -> tuple[float, int]:
    pts = predict(sc, list(PEAK_GRID))
    best = max(pts, key=lambda p: p.output_tok_s)
    return best.output_tok_s, best.concurrency


def reproduced(sc: Scenario) -> list[str]:
    out = ["| figure | measured | calibrated | error |", "|---|---|---|---|"]
    try:
        fit = fit_figures(sc, parse_figures(ALL))
    except MeasurementError as exc:
        return [f"all four figures together: **refused** — {exc}"]
    cal = fit.apply(sc)
    p1, p128 = predict(cal, [1, 128])
    d1 = decode_step(cal, 1, cal.decode_context)
    share = d1.collectives["all_reduce"].time_s / d1.step_time_s
    gain = plan(sc, concurrency=1, measured=fit).track("speculative_decoding").gain or float("nan")
    for name, meas, got in (("TPOT c1 (ms)", 12.1, p1.tpot_s * 1e3), ("all-reduce share c1", 0.515, share),
                            ("output c128 (tok/s)", 1536.0, p128.output_tok_s), ("EAGLE-3 gain c1", 1.32, gain)):
        out.append(f"| {name} | {meas:g} | {got:.4g} | {got / meas - 1:+.1%} |")
    out.append("")
    out.append("knobs: " + "; ".join(f"{k.knob.name} ×{k.theta:.3g} ({k.status})" for k in fit.terms.knobs)
               if fit.terms else "knobs: none")
    return out


def main() -> None:
    sc = scenario()
    print("## Each figure reproduced with all four given (FP8 KV)\n")
    print("\n".join(reproduced(sc)))
    print("\n## Peak output over c64–c256 (reference ≈1,536 tok/s)\n")
    print("| calibration | KV | peak tok/s | at | vs 1,536 |\n|---|---|---|---|---|")
    for kv in ("fp8", "bf16"):
        s = scenario(kv)
        for label, figs in (("uncalibrated", []), ("tpot c1 + share c1", ALL[:2])):
            try:
                cal = fit_figures(s, parse_figures(figs)).apply(s) if figs else s
            except MeasurementError as exc:
                print(f"| {label} | {kv} | refused: {exc} | | |")
                continue
            tok, c = peak(cal)
            print(f"| {label} | {kv} | {tok:,.0f} | c{c} | {tok / REFERENCE_PEAK - 1:+.1%} |")
    print("\n## FP8 against BF16 KV, decode step (ms)\n")
    print("| batch | context | FP8 | BF16 |\n|---|---|---|---|")
    f8, b16 = scenario("fp8"), scenario("bf16")
    for b in (1, 32, 128):
        for ctx in (1536, 32768, 131072):
            print(f"| {b} | {ctx:,} | {decode_step(f8, b, ctx).step_time_s * 1e3:.2f} | "
                  f"{decode_step(b16, b, ctx).step_time_s * 1e3:.2f} |")
    print("\n## EAGLE-3 gain after `spec_gain=1.32@c1` (with tpot c1 + share c1)\n")
    try:
        fit = fit_figures(sc, parse_figures([*ALL[:2], ALL[3]]))
        gains = [f"c{c}: {plan(sc, concurrency=c, measured=fit).track('speculative_decoding').gain:.2f}"
                 for c in (1, 2, 4, 8, 16, 32, 64, 128)]
        print(", ".join(gains) + " (measured: 1.32 at c1, ≈1.01 at c128)")
    except MeasurementError as exc:
        print(f"refused: {exc}")
    t0 = time.perf_counter()
    for _ in range(5):
        with contextlib.suppress(MeasurementError):
            fit_figures(sc, parse_figures(ALL[:3]))
    print(f"\ncalibration from three typed figures: {(time.perf_counter() - t0) / 5:.2f} s each (mean of 5)")


if __name__ == "__main__":
    main()
