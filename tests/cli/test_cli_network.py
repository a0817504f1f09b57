"""servescope never uses the network (issue 21 part 0): every command, run in a network namespace with no interface
up, opens no socket beyond loopback and Unix ones — checked on the system calls of every process (strace -f:
connect, bind, sendto and sendmsg with their addresses), so Ray's own binaries are seen too, not only Python.

The commands run in one interpreter (tests/netns_runner.py) under `unshare -rn` (a user and network namespace;
root not needed where user namespaces are allowed): ~4.5 s, so under `make fuzz` only (FUZZ_SCALE > 1), as is
`trace RANKS --ray local`, run in a namespace whose loopback is up (a Ray needs one to start; ~10-20 s to start
and stop). The default run checks the address parser. Skipped, with the reason, where unshare, strace or a
namespace is not available."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from independent import DATA

ROOT = Path(__file__).resolve().parents[2]
TRACES = DATA / "traces"
B200 = TRACES / "tracelens" / "b200" / "eager_trace.json.gz"
CONTROL = TRACES / "hta" / "trace_diff" / "control" / "control.json.gz"
TEST = TRACES / "hta" / "trace_diff" / "test" / "test.json.gz"
RANKS = TRACES / "hta" / "trace_filter"  # two sampled rank files
CSV = DATA / "validation" / "measured_serving_dev.csv"
KIMI = ["--model", "kimi-k2.5", "--gpu", "rtx_pro_6000_server", "--tp", "8", "--moe-quant", "int4-w4a16"]
SMALL = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm"]
FUZZ = int(os.environ.get("FUZZ_SCALE", "1")) > 1

# What a syscall's address may be: Unix sockets, netlink (the kernel), and loopback.
_FAMILY = re.compile(r"sa_family=(AF_\w+)")
_INET = re.compile(r'inet_addr\("([^"]+)"\)')
_INET6 = re.compile(r'inet_pton\(AF_INET6, "([^"]+)"')
_LOCAL_FAMILIES = {"AF_UNIX", "AF_LOCAL", "AF_NETLINK", "AF_UNSPEC"}


def commands(tmp: Path) -> list[list[str]]:
    """Every command of the CLI on small real inputs (each writes what it would write for a user)."""
    plan, bench = tmp / "plan.json", tmp / "vllm.json"  # a small `vllm bench serve --save-result` file
    bench.write_text(json.dumps({
        "date": "20250101-120000", "num_prompts": 100, "request_rate": "inf", "max_concurrency": 16,
        "duration": 50.0, "completed": 100, "total_input_tokens": 102400, "total_output_tokens": 12800,
        "request_throughput": 2.0, "output_throughput": 256.0, "mean_ttft_ms": 120.0, "median_ttft_ms": 100.0,
        "p99_ttft_ms": 400.0, "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0, "p99_tpot_ms": 30.0,
        "mean_itl_ms": 20.0, "median_itl_ms": 18.0, "p99_itl_ms": 60.0, "mean_e2el_ms": 2700.0,
        "p99_e2el_ms": 3100.0}))
    return [
        ["trace", str(B200), "--json"], ["trace", str(RANKS), "--workers", "2"], ["trace"],
        ["export", str(CONTROL), "-o", str(tmp / "e.json.gz")],
        ["diff", str(CONTROL), str(TEST), "--json"],
        ["report", str(CONTROL), "-o", str(tmp / "r.html")],
        ["model", *SMALL, "--concurrency", "1,64"], ["model", *SMALL, "--concurrency", "8", "--simulate"],
        ["plan", *KIMI, "--json", "-o", str(plan)], ["verify", str(plan), "--before", "tpot=12.1ms@c1", "--after",
                                                        "tpot=9.17ms@c1", "--applied", "speculative_decoding"],
        ["simulate", *SMALL, "--concurrency", "16", "--num-prompts", "100"],
        ["simulate", *SMALL, "--compare", str(bench)],
        ["sweep", *SMALL, "--gpus", "8"], ["validate", str(CSV)], ["specs", "list"], ["specs", "show", "h100_sxm"],
    ]


def _violations(log: str) -> list[str]:
    """Syscall lines with an address beyond loopback and Unix sockets."""
    bad = []
    for line in log.splitlines():
        family = _FAMILY.search(line)
        if family is None or family.group(1) in _LOCAL_FAMILIES:
            continue
        v4, v6 = _INET.search(line), _INET6.search(line)
        if family.group(1) == "AF_INET" and v4 and v4.group(1).startswith("127."):
            continue
        if family.group(1) == "AF_INET6" and v6 and v6.group(1) in ("::1", "::ffff:127.0.0.1"):
            continue
        bad.append(line.strip())
    return bad


def _run_traced(tmp: Path, args: list[list[str]], loopback_up: bool, timeout: float) -> tuple[list[dict], str]:
    if shutil.which("unshare") is None or shutil.which("strace") is None:
        pytest.skip("needs unshare and strace")
    (tmp / "commands.json").write_text(json.dumps(args))
    log, results = tmp / "strace.log", tmp / "results.json"
    traced = (f"strace -f -qq --seccomp-bpf -e trace=connect,bind,sendto,sendmsg -o {log} "
              f"{sys.executable} {ROOT / 'tests' / 'netns_runner.py'} {tmp / 'commands.json'} {results}")
    script = ("ip link set lo up && " if loopback_up else "") + traced
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    done = subprocess.run(["unshare", "-rn", "sh", "-c", script], capture_output=True, text=True, timeout=timeout,
                          env=env)
    if not results.exists():
        pytest.skip(f"no network namespace with strace here: {done.stderr.strip()[-300:]}")
    return json.loads(results.read_text()), log.read_text()


@pytest.mark.skipif(not FUZZ, reason="~4.5 s (every command, traced): make fuzz only")
def test_no_command_opens_a_socket_beyond_loopback(tmp_path: Path) -> None:
    results, log = _run_traced(tmp_path, commands(tmp_path), loopback_up=False, timeout=300)
    assert [r for r in results if r["error"] is not None or r["exit_code"] != 0] == []
    assert _violations(log) == []
    assert "servescope-netns-canary" in log  # the runner's own Unix connect: the trace saw its syscalls


def test_the_violation_check_sees_what_it_must() -> None:
    """The parser itself: a metadata probe, a resolver and a wildcard bind are caught, loopback and Unix pass."""
    log = "\n".join([
        '7 connect(5, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("169.254.169.254")}, 16) = -1',
        '7 sendto(6, "x", 1, 0, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("8.8.8.8")}, 16) = 1',
        '7 bind(4, {sa_family=AF_INET6, sin6_port=htons(0), inet_pton(AF_INET6, "::", &sin6_addr)}, 28) = 0',
        '7 connect(3, {sa_family=AF_UNIX, sun_path="/tmp/ray/session/sockets/raylet"}, 110) = 0',
        '7 connect(8, {sa_family=AF_INET, sin_port=htons(6379), sin_addr=inet_addr("127.0.0.1")}, 16) = 0',
        '7 sendto(3, "...", 20, 0, {sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}, 12) = 20',
        '7 sendto(9, "x", 1, MSG_NOSIGNAL, NULL, 0) = 1',
    ])
    assert [line.split()[1].split("(")[0] for line in _violations(log)] == ["connect", "sendto", "bind"]


@pytest.mark.skipif(not FUZZ, reason="starts a local Ray (~10-20 s): make fuzz only")
def test_a_local_ray_uses_loopback_only(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray not installed (pip install 'servescope[ray]')")
    results, log = _run_traced(tmp_path, [["trace", str(RANKS), "--ray", "--json"]], loopback_up=True, timeout=240)
    assert results[0]["exit_code"] == 0, results[0]["stderr"]
    assert _violations(log) == []
    assert "127.0.0.1" in log  # Ray did talk, on loopback
