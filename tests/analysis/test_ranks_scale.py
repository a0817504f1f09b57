"""Rank folders at population scale: a rank that fails is one line and the rest are analysed; many ranks on worker
processes give the in-process answer and report their progress; the strings every rank shares are kept once; a
real two-node Ray cluster on loopback (`ray start --head` plus a worker node) gives the worker processes' document;
a Ray address that refuses or does not answer is one line.

Real traces: HTA's two sampled ranks (tests/data/traces/hta/trace_filter, MIT). Timeouts here are liveness bounds
(a hang fails the test), never speed assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from servescope.analysis import ranks
from servescope.analysis.analyze import analyze_trace
from servescope.analysis.ranks import FILES_DONE, SharedStrings, analyze_rank_files
from servescope.progress import reporting

SAMPLED = Path(__file__).parents[1] / "data" / "traces" / "hta" / "trace_filter"
RANK0, RANK1 = SAMPLED / "sampled_rank-0.json.gz", SAMPLED / "sampled_rank-1.json.gz"


def _folder(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / "ranks"
    folder.mkdir()
    for r in range(n):
        shutil.copyfile((RANK0, RANK1)[r % 2], folder / f"rank{r}.json.gz")
    return folder


def test_a_rank_whose_analysis_fails_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only unreadable files: a surprise inside one rank's analysis (here a RuntimeError) skips that rank."""
    folder = _folder(tmp_path, 3)
    real = ranks.breakdown_taking

    def breaks_on_rank1(traces, top_n, capture=None):  # type: ignore[no-untyped-def]
        if traces[0].path.name == "rank1.json.gz":
            raise RuntimeError("boom\nsecond line")
        return real(traces, top_n, capture)

    monkeypatch.setattr(ranks, "breakdown_taking", breaks_on_rank1)
    a = analyze_trace(folder, workers=1)
    assert [b.rank for b in a.ranks] == [0, 2]
    assert "rank1.json.gz: skipped (analysis failed (RuntimeError: boom))" in a.warnings, a.warnings


def test_many_ranks_some_damaged(tmp_path: Path) -> None:
    """24 ranks, 4 damaged in different ways: the 20 others analysed, on 2 processes as in-process, every damaged
    file named in the warnings, progress counted to the last file."""
    folder = _folder(tmp_path, 24)
    (folder / "rank20.json.gz").write_bytes(b"")
    (folder / "rank21.json.gz").write_bytes(RANK0.read_bytes()[:3000])
    (folder / "rank22.json.gz").write_bytes(os.urandom(2048))
    (folder / "rank23.json.gz").unlink()
    (folder / "rank23.json").write_text("[" * 5000)
    progress: list[tuple[int, int]] = []
    with reporting(lambda what, done, total: progress.append((done, total)) if what == FILES_DONE else None):
        parallel = analyze_trace(folder, workers=2)
    assert progress[-1] == (24, 24)
    local = analyze_trace(folder, workers=1)
    assert parallel == local
    assert [b.rank for b in local.ranks] == list(range(20))
    text = "\n".join(local.warnings)
    for name in ("rank20.json.gz", "rank21.json.gz", "rank22.json.gz", "rank23.json"):
        assert name in text, local.warnings


def test_strings_shared_across_ranks(tmp_path: Path) -> None:
    folder = _folder(tmp_path, 4)
    files = sorted(folder.iterdir())
    outcomes = analyze_rank_files(files, workers=2)
    plain = [o for f in files for o in ranks.analyze_rank_file(str(f))]
    assert outcomes == plain  # equal values
    names = [o.breakdown.timelines[0].name for o in outcomes if o.breakdown is not None]
    assert names[0] == names[2] and all(a is b for a, b in zip(names[0], names[2], strict=True))  # one copy
    again = SharedStrings()(plain)
    assert again == plain


# --- Ray: a real two-node cluster on loopback ------------------------------------------------------------------

_QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "http_proxy": "http://127.0.0.1:1",
          "https_proxy": "http://127.0.0.1:1", "HTTP_PROXY": "http://127.0.0.1:1", "HTTPS_PROXY": "http://127.0.0.1:1",
          "no_proxy": "127.0.0.1,127.0.0.2,127.0.0.3,localhost", "NO_PROXY": "127.0.0.1,127.0.0.2,127.0.0.3,localhost"}


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _own_ports(host: str, *options: str) -> list[str]:
    """Free ports for the options whose defaults are fixed (52365): another Ray on this machine may hold them."""
    return [arg for option in options for arg in (option, str(_free_port(host)))]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End one `ray start --block` and the Ray processes it started (its own process group), nothing else."""
    for sig, wait_s in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            if sig == signal.SIGTERM:
                time.sleep(1)  # its children get the same signal; give them a moment, then make sure
        except subprocess.TimeoutExpired:
            continue


def _wait_listening(head: subprocess.Popen[bytes], host: str, port: int, log: Path, deadline_s: float = 120) -> None:
    """Until the head's GCS takes connections; a head that exits first fails the test with its last words."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if head.poll() is not None:
            pytest.fail(f"ray start --head exited ({head.returncode}): {log.read_text(errors='replace')[-1500:]}")
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the Ray head took no connection within {deadline_s:.0f} s")


def _wait_nodes(address: str, n: int, env: dict[str, str], deadline_s: float = 120) -> None:
    script = textwrap.dedent("""
        import sys, time, ray
        ray.init(address=sys.argv[1], log_to_driver=False, include_dashboard=False)
        end = time.monotonic() + float(sys.argv[3])
        while sum(1 for n in ray.nodes() if n["Alive"]) < int(sys.argv[2]) and time.monotonic() < end:
            time.sleep(0.5)
        print(sum(1 for n in ray.nodes() if n["Alive"]))
    """)
    out = subprocess.run([sys.executable, "-c", script, address, str(n), str(deadline_s)], env=env,
                         capture_output=True, text=True, timeout=deadline_s + 60)
    assert out.stdout.strip() == str(n), out.stderr[-2000:]


@pytest.fixture
def ray_cluster() -> Iterator[tuple[str, dict[str, str]]]:
    """A head (127.0.0.2) and a worker node (127.0.0.3), one CPU each, in a temporary dir; stopped afterwards.
    The head runs with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, so its own address is taken as given and never looked up
    towards a public resolver; the worker node needs it unset (Ray refuses a second node otherwise), and since Ray
    maps 127.0.0.1 itself to the machine's network address, the nodes use 127.0.0.2 and .3 (loopback on Linux)."""
    pytest.importorskip("ray", reason="ray not installed (pip install 'servescope[ray]')")
    ray_cli = Path(sys.executable).parent / "ray"
    if sys.platform != "linux" or not ray_cli.exists():
        pytest.skip("needs Linux (127.0.0.0/8 all loopback) and the `ray` command beside this Python")
    port = _free_port("127.0.0.2")
    with tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp") as tmp:  # short: Ray's socket paths have a limit
        # RAY_TMPDIR: the cluster's address file (ray_current_cluster) goes there, not to /tmp/ray, where a local
        # `--ray` elsewhere would find it and try to join this cluster, gone by then
        env = {**os.environ, **_QUIET, "RAY_TMPDIR": tmp}
        env.pop("RAY_ADDRESS", None)
        head = subprocess.Popen(
            [str(ray_cli), "start", "--head", "--port", str(port), "--num-cpus", "1", "--node-ip-address",
             "127.0.0.2", "--temp-dir", tmp, "--include-dashboard", "false", "--disable-usage-stats", "--block",
             *_own_ports("127.0.0.2", "--dashboard-agent-listen-port")],
            env={**env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}, stdout=subprocess.DEVNULL,
            stderr=(log := open(Path(tmp) / "head.log", "wb")), start_new_session=True)  # noqa: SIM115
        worker = None
        try:
            address = f"127.0.0.2:{port}"
            _wait_listening(head, "127.0.0.2", port, Path(tmp) / "head.log")
            _wait_nodes(address, 1, env)
            worker = subprocess.Popen(
                [str(ray_cli), "start", "--address", address, "--num-cpus", "1", "--node-ip-address", "127.0.0.3",
                 "--block", *_own_ports("127.0.0.3", "--dashboard-agent-listen-port")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            _wait_nodes(address, 2, env)
            yield address, env
        finally:
            for proc in (worker, head):
                if proc is not None:
                    _stop(proc)
            log.close()


def test_two_node_ray_cluster_equals_worker_processes(tmp_path: Path, ray_cluster: tuple[str, dict[str, str]]) -> None:
    address, env = ray_cluster
    folder = _folder(tmp_path, 6)
    docs = {}
    for name, args in (("ray", ["--ray", address]), ("processes", ["--workers", "2"])):
        done = subprocess.run([sys.executable, "-m", "servescope", "trace", "--json", str(folder), *args], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        docs[name] = json.loads(done.stdout)
    assert docs["ray"] == docs["processes"]
    assert [r["rank"] for r in docs["ray"]["ranks"]] == [0, 1, 2, 3, 4, 5]


def _refused(folder: Path, address: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_QUIET}
    return subprocess.run([sys.executable, "-m", "servescope", "trace", str(folder), "--ray", address], env=env,
                          capture_output=True, text=True, timeout=180)


def test_ray_address_that_refuses_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray not installed (pip install 'servescope[ray]')")
    folder = _folder(tmp_path, 2)
    port = _free_port("127.0.0.1")  # bound, then closed: nothing listens there
    out = _refused(folder, f"127.0.0.1:{port}")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == (f"servescope: cannot start or join Ray at '127.0.0.1:{port}': 127.0.0.1:{port}: Connection "
                          "refused; run without --ray (worker processes on this machine)\n")


def test_ray_address_that_does_not_answer_is_one_line(tmp_path: Path) -> None:
    """A port that takes connections and says nothing (Ray's own client would wait there for minutes, in native
    code no alarm interrupts), and one that answers but not as gRPC: each refused in one line."""
    pytest.importorskip("ray", reason="ray not installed (pip install 'servescope[ray]')")
    from servescope.analysis.ray_tasks import _address_problem

    folder = _folder(tmp_path, 2)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshakes; nobody reads
        port = silent.getsockname()[1]
        out = _refused(folder, f"127.0.0.1:{port}")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == (f"servescope: cannot start or join Ray at '127.0.0.1:{port}': no answer from "
                          f"127.0.0.1:{port} within 10 s; run without --ray (worker processes on this machine)\n")
    with socket.socket() as http1:
        http1.bind(("127.0.0.1", 0))
        http1.listen(1)
        address = f"127.0.0.1:{http1.getsockname()[1]}"
        with ThreadPoolExecutor(1) as pool:
            answered = pool.submit(_answer_http1, http1)
            assert _address_problem(address, 5.0) == f"{address} answers, but not as a Ray cluster does (no gRPC)"
            answered.result(timeout=30)


def _answer_http1(server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn:
        conn.recv(64)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")


def test_text_report_of_many_ranks_shows_the_slowest() -> None:
    """40 ranks: the table keeps 32 rows, the ranks slowest on the most steps among them, and says so."""
    from rich.console import Console

    from servescope.analysis.ranks import CrossRankView, RankRow, StepSpread
    from servescope.report.ranks_text import ranks_table

    rows = tuple(RankRow(r, f"rank{r}.json", "H100", 5, 1000.0, 2000.0 + r, 100.0) for r in range(40))
    slowest = [7, 7, 7, 33, 33]  # rank 7 slowest on 3 steps, rank 33 on 2; the others never
    steps = tuple(StepSpread(i, "decode", 1.0, 2.0, 1.5, s, 0) for i, s in enumerate(slowest))
    console = Console(record=True, width=200)
    console.print(ranks_table(CrossRankView(rows, 5, steps, ())))
    text = console.export_text()
    shown = [int(line.split("│")[1]) for line in text.splitlines() if line.startswith("│")]
    assert len(shown) == 32 and shown == sorted(shown)
    assert 7 in shown and 33 in shown
    # the other 30 by GPU span, which grows with the rank here: 39 down to 9, skipping 33 (already in)
    assert set(shown) - {7, 33} == set(range(9, 40)) - {33}
    assert "32 of 40 ranks shown: the slowest on the most common steps (all: --json)" in text
