"""Write specs/data/calibrated_ranges.json: the 80% range of a prediction calibrated on the user's own points.

Each measured series of the validation CSV (one deployment at one ISL/OSL, >= 3 concurrencies) is calibrated on
its lowest concurrency (case calibrated_1pt) or on its lowest and highest (calibrated_2pt), and its other rows
predicted (calibrate.held_out); the range is q10–q90 of measured/predicted TPOT over those held-out rows, with the
MAPE, bias and leave-one-model-out coverage beside it. TTFT is not calibrated (see calibrate.held_out), so its
range stays the cross-validated one of ranges.json.

    python data-build/calibrated_ranges.py [CSV] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

from servescope.calibrate.held_out import held_out
from servescope.validation.validate import read_rows

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "tests" / "data" / "validation" / "measured_serving_dev.csv"
OUT = ROOT / "src" / "servescope" / "specs" / "data" / "calibrated_ranges.json"
CASES = {"calibrated_1pt": "lowest", "calibrated_2pt": "ends"}


def build(csv: Path) -> dict[str, object]:
    rows = read_rows(csv)
    cases = {}
    for case, mode in CASES.items():
        s = held_out(rows, mode).summary()
        cases[case] = {"tpot": [round(float(s["tpot_q10"]), 4), round(float(s["tpot_q90"]), 4)],
                       "tpot_mape": round(float(s["tpot_mape"]), 4), "tpot_bias": round(float(s["tpot_bias"]), 4),
                       "tpot_coverage": round(float(s["tpot_coverage"]), 3), "series": s["series"], "rows": s["rows"],
                       "calibrated_on": mode}
    return {"source": f"data-build/calibrated_ranges.py {date.today().isoformat()}: {csv.name}, each series "
                      "calibrated on its lowest (1pt) or lowest and highest (2pt) concurrency, the rest held out",
            "cases": cases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="?", type=Path, default=DEV)
    ap.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = ap.parse_args()
    text = json.dumps(build(args.csv), indent=2) + "\n"
    if args.dry_run:
        print(text, end="")
        return
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
