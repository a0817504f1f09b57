"""Side-by-side timing shared by the bench scripts: each command in a fresh process under GNU time, the commands
alternated so drift on a noisy machine hits all alike, and a Markdown table of medians against a baseline."""

from __future__ import annotations

import statistics
import subprocess

Runs = dict[str, list[tuple[float, float]]]


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one command, from GNU time; stdout discarded."""
    done = subprocess.run(["/usr/bin/time", "-f", "%e %M", *cmd], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=True)
    wall_s, rss_kib = done.stderr.strip().splitlines()[-1].split()
    return float(wall_s), float(rss_kib) * 1024 / 1e6


def alternate(cmds: dict[str, list[str]], repeat: int) -> Runs:
    """Run every command `repeat` times, one round of all commands after another."""
    runs: Runs = {k: [] for k in cmds}
    for _ in range(repeat):
        for name, cmd in cmds.items():
            runs[name].append(timed(cmd))
    return runs


def print_table(runs: Runs, baseline: str, repeat: int) -> None:
    """Markdown table: median wall s, ratio to the baseline's median, median peak RSS."""
    base = statistics.median(x[0] for x in runs[baseline])
    print(f"| command | wall s (median of {repeat}) | × trace --json | peak RSS MB |")
    print("|---|---|---|---|")
    for name, rs in runs.items():
        wall = statistics.median(x[0] for x in rs)
        print(f"| {name} | {wall:.2f} | {wall / base:.2f} | {statistics.median(x[1] for x in rs):.0f} |")
