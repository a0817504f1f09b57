"""Each measured per-op curve family's default by domain, decided by cross-validated error (issue 27).

Usage: .venv/bin/python bench/curve_domains.py [CSV] [--domains]

A domain is (GPU system, engine, curve family); the families are curve_bounds.FAMILIES: dense GEMMs, decode
attention, prefill attention (no cached prefix), routed experts. A dev row is IN a domain where, with every curve
on, that family's curve answers for the row's deployment (opcurve domains: engine, version window, dtype, shape;
not refused by the 3× bound). For each domain with rows, one leave-one-model-out run (every fold refitted from the
built-in defaults, as `validate --cv` and bench/ablate_issue18.py do) with that family switched the other way from
the shipped table (curve_bounds.DOMAIN_OFF) in that domain only, against the shipped run; reported: the domain's rows' out-of-fold TPOT and TTFT MAPE with the family on and off, and whole-CSV
LOMO. Rule: the family stays on in a domain only if it lowers the mean of the domain rows' TPOT and TTFT MAPE.
Domains with no rows are listed with "no measured rows in this domain" (the domain and bound rules decide there).
Each variant runs in its own process (the switch is a module table read once per process). Prints markdown.
What it does not: write any file or change the shipped table (curve_bounds.DOMAIN_OFF is edited by hand from this).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from servescope.perfmodel import curve_bounds
from servescope.perfmodel.curve_bounds import FAMILIES
from servescope.perfmodel.efficiency import unfitted_start
from servescope.specs.opcurves import load_opcurves, opcurve_systems
from servescope.validation.crossval import cross_validate
from servescope.validation.fit import FITTED, fit_data
from servescope.validation.validate import read_rows

DEV = Path(__file__).resolve().parents[1] / "tests/data/validation/measured_serving_dev.csv"
ENGINES = ("vllm", "sglang", "trtllm")


def _uses(sc: object, family: str) -> bool:
    """Whether `family`'s curve prices this deployment with every curve on (in domain, not refused)."""
    from servescope.perfmodel import attention_curve, measured_ops
    from servescope.perfmodel.step import model_for, moe_curve_over_roofline

    if family == "gemm":
        return bool(measured_ops._plan(sc, model_for(sc).gemms))  # type: ignore[arg-type]
    if family == "decode_attention":
        return attention_curve.decode_verdict(sc)[0] is not None  # type: ignore[arg-type]
    if family == "prefill_attention":
        return attention_curve.prefill_attention_curve(sc, np.array([1.0]), np.array([float(sc.isl)])) is not None  # type: ignore[attr-defined,arg-type]
    on = sc.with_(efficiency=sc.efficiency.scaled(moe_curve=1.0))  # type: ignore[attr-defined]
    r = moe_curve_over_roofline(on)
    return bool(np.isfinite(r) and r <= curve_bounds.MAX_OVER_ROOFLINE)


def domains(csv: str) -> dict[str, list[str]]:
    """'system/engine/family' → ids of the dev rows in that domain (module docstring), every domain switched on."""
    out: dict[str, list[str]] = {}
    curve_bounds.DOMAIN_OFF.clear()  # this process only: which rows a curve would price with every domain on
    for r in read_rows(csv):
        if r.scenario is None:
            continue
        for fam in FAMILIES:
            if _uses(r.scenario, fam):
                out.setdefault(f"{r.system}/{r.backend}/{fam}", []).append(r.id)
    return out


def _toggle(switch: str) -> None:
    """Switch one domain the other way from the shipped table (curve_bounds.DOMAIN_OFF), in this process."""
    key = tuple(switch.split("/"))
    if key in curve_bounds.DOMAIN_OFF:
        del curve_bounds.DOMAIN_OFF[key]  # type: ignore[arg-type]
    else:
        curve_bounds.DOMAIN_OFF[key] = "bench"  # type: ignore[index]


def run(csv: str, switch: str) -> dict[str, object]:
    """One LOMO run; `switch` '' (shipped) or 'system/engine/family' toggled from the shipped table."""
    start = unfitted_start()
    if switch:
        _toggle(switch)
    data = fit_data(read_rows(csv))
    cv = cross_validate(data, start, params=dict(FITTED), groupings={"leave_one_model_out": "model"}, workers=2,
                        fold_start=start)
    s = cv.summaries["leave_one_model_out"]
    return {"ids": list(data.ids), "tpot": (cv.pred_tpot_s["leave_one_model_out"] / data.tpot_s - 1).tolist(),
            "ttft": (cv.pred_ttft_s["leave_one_model_out"] / data.ttft_s - 1).tolist(),
            "lomo": [s.tpot_mape, s.tpot_bias, s.ttft_mape, s.ttft_bias]}


def _sub(args: list[str]) -> dict[str, object]:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _mape(res: dict[str, object], ids: set[str], key: str) -> float:
    err = [abs(e) for i, e in zip(res["ids"], res[key], strict=True) if i in ids]  # type: ignore[call-overload]
    return float(np.mean(err)) if err else float("nan")


def _no_rows(have: dict[str, list[str]]) -> list[str]:
    """Every (system, engine, family) some bundled table covers, without dev rows."""
    ops = {"gemm": ("gemm",), "decode_attention": ("generation_attention", "generation_mla"),
           "prefill_attention": ("context_attention", "context_mla"), "moe": ("moe",)}
    out = []
    for s in opcurve_systems():
        tables = load_opcurves(s)
        for e in ENGINES:
            for fam, names in ops.items():
                if any(t.engine == e and t.op in names for t in tables) and f"{s}/{e}/{fam}" not in have:
                    out.append(f"{s}/{e}/{fam}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV))
    ap.add_argument("--switch", help=argparse.SUPPRESS)
    ap.add_argument("--domains", action="store_true", help="print the domains with dev rows (json) and stop")
    args = ap.parse_args()
    if args.switch is not None:
        print(json.dumps(run(args.csv, args.switch)))
        return
    shipped = dict(curve_bounds.DOMAIN_OFF)
    have = domains(args.csv)
    curve_bounds.DOMAIN_OFF.update(shipped)
    if args.domains:
        print(json.dumps({k: len(v) for k, v in sorted(have.items())}))
        return
    base = _sub([args.csv, "--switch", ""])
    t, tb, f, fb = base["lomo"]  # type: ignore[misc]
    print(f"shipped: LOMO TPOT {t:.1%} (bias {tb:+.1%}), TTFT {f:.1%} (bias {fb:+.1%}), {len(base['ids'])} rows\n")  # type: ignore[arg-type]
    print("| domain (GPU / engine / family) | rows | LOMO TPOT on | off | LOMO TTFT on | off | whole-CSV LOMO TPOT "
          "/ TTFT with the switch | rule says | shipped |")
    print("|---|---|---|---|---|---|---|---|---|")
    shipped_off = set(curve_bounds.DOMAIN_OFF)
    for dom, ids in sorted(have.items()):
        alt = _sub([args.csv, "--switch", dom])
        on, off = (alt, base) if tuple(dom.split("/")) in shipped_off else (base, alt)
        m = {k: (_mape(on, set(ids), k), _mape(off, set(ids), k)) for k in ("tpot", "ttft")}
        keep = (m["tpot"][0] + m["ttft"][0]) < (m["tpot"][1] + m["ttft"][1])
        lt, _, lf, _ = alt["lomo"]  # type: ignore[misc]
        print(f"| {dom} | {len(ids)} | {m['tpot'][0]:.1%} | {m['tpot'][1]:.1%} | {m['ttft'][0]:.1%} | "
              f"{m['ttft'][1]:.1%} | {lt:.1%} / {lf:.1%} | {'on' if keep else 'off'} | "
              f"{'off' if tuple(dom.split('/')) in shipped_off else 'on'} |")
    print("\nNo measured rows in this domain (the domain, version and 3× bound rules decide): "
          + ", ".join(_no_rows(have)))


if __name__ == "__main__":
    main()
