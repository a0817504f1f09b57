"""Every input surface holds (issue 32): benchmark result files, replays, request lengths, engine logs, routing
histograms, plan files and campaign logs, read through the guarded reader in servescope._paths, fuzzed like traces; plus one regression
test per class of failure found by hand (2026-12-03).

Each reproducer drives the CLI in-process and asserts: exit 1, exactly one `servescope: …` line naming the file,
no traceback, the input unchanged. The fuzz targets call each reader on mutated seeds (tests/fuzz_inputs.py): a
result or a ServescopeError whose message starts with the file's path, no RuntimeWarning. CI runs FUZZ_SCALE=1
(~330 reader cases and 24 CLI cases, seconds); `make fuzz` runs FUZZ_SCALE=28.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_inputs import (
    ENGINE_LOGS,
    SGLANG_RESULTS,
    VLLM_RESULT,
    check_cli,
    mutate_json,
    mutate_log,
    replay_seed,
    routing_seed,
)
from servescope.cli import main
from servescope.errors import ServescopeError

SCALE = int(os.environ.get("FUZZ_SCALE", "1"))
FUZZ = settings(deadline=None, derandomize=SCALE == 1, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LLAMA = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm"]
QWEN_MOE = ["--model", "qwen3-30b-a3b", "--gpu", "h100_sxm"]  # 128 routed experts
RATE_NAN = json.dumps(VLLM_RESULT).replace('"request_rate": "inf"', '"request_rate": NaN')


def _refused(args: list[str], *inputs: Path, name: str | None = None) -> str:
    """Run servescope ARGS: exit 1, one `servescope: ` line naming the file (`name`, default the first input's
    name), no exception, every input byte for byte as before. Returns the line."""
    before = {p: p.read_bytes() for p in inputs if p.is_file()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], caught[0].message
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("servescope: "), (result.exit_code, lines)
    assert (name or inputs[0].name) in lines[0], lines[0]
    assert "Traceback" not in result.output
    for p, data in before.items():
        assert p.read_bytes() == data, f"{p} changed"
    return lines[0]


def _file(tmp_path: Path, name: str, data: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


# --- one regression test per reproducer class ------------------------------------------------------------------

RESULT_CASES = {
    "int_over_4300_digits": json.dumps(VLLM_RESULT).replace('"completed": 100', '"completed": 1' + "0" * 5000),
    "deep_nesting": "[" * 100_000 + "]" * 100_000,
    "nan_completed": json.dumps(VLLM_RESULT).replace('"completed": 100', '"completed": NaN'),
    "inf_completed": json.dumps(VLLM_RESULT).replace('"completed": 100', '"completed": Infinity'),
    "e400_completed": json.dumps(VLLM_RESULT).replace('"completed": 100', '"completed": 1e400'),
    "huge_tokens": json.dumps(VLLM_RESULT).replace('"total_input_tokens": 102400', '"total_input_tokens": 1e300'),
    "huge_int_concurrency": json.dumps(VLLM_RESULT).replace('"max_concurrency": 16', '"max_concurrency": ' + "9" * 40),
    "request_rate_nan": RATE_NAN,  # was: simulate --compare never ended
    "truncated": json.dumps(VLLM_RESULT)[:-40],
    "invalid_utf8": json.dumps(VLLM_RESULT).replace("openai", "open\udcffai", 1).encode("utf-8", "surrogateescape"),
}


@pytest.mark.parametrize("case", sorted(RESULT_CASES))
def test_result_file_for_compare(tmp_path: Path, case: str) -> None:
    path = _file(tmp_path, f"{case}.json", RESULT_CASES[case])
    _refused(["simulate", *LLAMA, "--compare", str(path)], path)


@pytest.mark.parametrize("case", ["int_over_4300_digits", "deep_nesting", "e400_completed", "request_rate_nan"])
def test_result_file_for_measured(tmp_path: Path, case: str) -> None:
    path = _file(tmp_path, f"{case}.json", RESULT_CASES[case])
    _refused(["model", *LLAMA, "--measured", str(path)], path)


def test_request_rate_nan_names_the_field(tmp_path: Path) -> None:
    path = _file(tmp_path, "nan_rate.json", RATE_NAN)
    line = _refused(["simulate", *LLAMA, "--compare", str(path)], path)
    assert "nan_rate.json:1: field request_rate" in line


REPLAY_CASES = {
    "nan_send": lambda d: d.update(start_times=[float("nan")] * len(d["start_times"])),
    "inf_len": lambda d: d.update(input_lens=[1e400] * len(d["input_lens"])),
    "huge_len": lambda d: d.update(output_lens=[10**30] * len(d["output_lens"])),
    "string_len": lambda d: d.update(input_lens=["x"] * len(d["input_lens"])),
}


@pytest.mark.parametrize("case", sorted(REPLAY_CASES))
def test_replay_file(tmp_path: Path, case: str) -> None:
    doc = replay_seed()
    REPLAY_CASES[case](doc)
    path = _file(tmp_path, f"{case}.json", json.dumps(doc))
    _refused(["simulate", *LLAMA, "--replay", str(path)], path)


def test_replay_csv_with_huge_and_nan_cells(tmp_path: Path) -> None:
    path = _file(tmp_path, "r.csv", "arrival_s,input_len,output_len\n0,100,10\nnan,100,10\n")
    _refused(["simulate", *LLAMA, "--replay", str(path)], path)
    path = _file(tmp_path, "r2.csv", "arrival_s,input_len,output_len\n0,1" + "0" * 400 + ",10\n")
    _refused(["simulate", *LLAMA, "--replay", str(path)], path)


@pytest.mark.parametrize("line", [
    "Maximum concurrency for 262,144 tokens per request: 1.2.3x",
    "max_total_num_tokens=1000\n[TP0] Decode batch. accept len: 1.2.3, gen throughput",
    "GPU KV cache size: 1,000 tokens\nSpecDecoding metrics: Mean acceptance length: 2.1, Drafted: 10 tokens, "
    "Per-position acceptance rate: 0.5, 1.2.3, Avg Draft acceptance rate: 5%",
])
def test_engine_log_number_like_1_2_3(tmp_path: Path, line: str) -> None:
    path = _file(tmp_path, "engine.log", "INFO start\n" + line + "\n")
    msg = _refused(["simulate", *LLAMA, "--concurrency", "4", "--engine-log", str(path)], path)
    assert "engine.log:" in msg and "1.2.3" in msg


def test_engine_log_one_huge_line_is_linear(tmp_path: Path) -> None:
    """400 KB of SpecDecoding keys on one line (was 105 s: a lazy `.*?` retried from every key) reads as nothing
    recognised; the same 1.6 MB. No time is asserted: the test's timeout is the bound."""
    from servescope.validation.enginelog import read_engine_log

    for repeat in (8_000, 32_000):
        path = _file(tmp_path, "huge.log", "SpecDecoding metrics: Mean acceptance length: 2, " * repeat)
        log = read_engine_log(path)
        assert not log.found and log.warnings


@pytest.mark.parametrize("cell", ['"x"', "null", "[1]", "1" + "0" * 400, "NaN", "-5"])
def test_routing_histogram_bad_cell(tmp_path: Path, cell: str) -> None:
    layers = routing_seed()
    text = json.dumps(layers).replace(str(layers[0][3]), cell, 1)
    path = _file(tmp_path, "hist.json", text)
    line = _refused(["model", *QWEN_MOE, "--routing", str(path)], path)
    assert "hist.json" in line


def test_routing_from_a_device_is_refused_before_reading() -> None:
    """`--routing /dev/zero` read until memory ran out (7.6 GB)."""
    line = _refused(["model", *QWEN_MOE, "--routing", "/dev/zero"], Path("/dev/zero"), name="/dev/zero")
    assert "device" in line


def test_budget_from_max_memory_refuses_a_large_input(tmp_path: Path) -> None:
    path = _file(tmp_path, "big.json", json.dumps([1] * 128) + " " * 200_000)
    line = _refused(["model", *QWEN_MOE, "--routing", str(path), "--max-memory", "1MB"], path)
    assert "--max-memory" in line


@pytest.mark.parametrize("size", ["1e400GB", "9" * 400 + "TB"])
def test_max_memory_beyond_any_size(size: str) -> None:
    result = CliRunner().invoke(main, ["model", *LLAMA, "--max-memory", size])
    assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit)
    assert len(result.stderr.strip().splitlines()) == 1 and "--max-memory" in result.stderr


# --- plans and campaign logs -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan_and_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A plan file and one campaign-log line, made by servescope itself."""
    folder = tmp_path_factory.mktemp("campaign")
    plan, log = folder / "plan.json", folder / "log.jsonl"
    assert CliRunner().invoke(main, ["plan", *LLAMA, "--json", "-o", str(plan)]).exit_code == 0
    r = CliRunner().invoke(main, ["verify", str(plan), "--before", "tpot=12ms@c1", "--after", "tpot=10ms@c1",
                                  "--applied", "quantization", "--log", str(log)])
    assert r.exit_code == 0, r.output
    return plan, log.read_text().splitlines()[0]


def _verify(plan: Path, log: Path, *more: str) -> Any:
    return CliRunner().invoke(main, ["verify", str(plan), "--before", "tpot=12ms@c1", "--after", "tpot=10ms@c1",
                                     "--applied", "quantization", "--log", str(log), *more])


def test_campaign_log_damaged_tail_gets_a_new_line(tmp_path: Path, plan_and_log: tuple[Path, str]) -> None:
    """A last line without its newline: the next entry starts a line of its own; both whole entries are kept."""
    plan, line = plan_and_log
    log = _file(tmp_path, "log.jsonl", line + "\n" + line)  # the second entry lost its newline
    assert _verify(plan, log).exit_code == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["schema"] == "servescope.verify/1" for x in lines)
    shown = CliRunner().invoke(main, ["verify", "--log", str(log), "--json"])
    assert len(json.loads(shown.stdout)["entries"]) == 3


def test_campaign_log_cut_mid_line_keeps_every_whole_entry(tmp_path: Path, plan_and_log: tuple[Path, str]) -> None:
    plan, line = plan_and_log
    log = _file(tmp_path, "log.jsonl", line + "\n" + line[: len(line) // 2])
    assert _verify(plan, log).exit_code == 0
    lines = log.read_text().splitlines()
    assert lines[0] == line and lines[1] == line[: len(line) // 2] and json.loads(lines[2])["schema"]


def test_campaign_log_damaged_line_is_said_and_the_rest_read(tmp_path: Path, plan_and_log: tuple[Path, str]) -> None:
    _, line = plan_and_log
    log = _file(tmp_path, "log.jsonl", line + "\n" + line[:40] + "\n\x00\xff\n" + line + "\n")
    shown = CliRunner().invoke(main, ["verify", "--log", str(log), "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert len(doc["entries"]) == 2
    assert [w.split(":")[1] for w in doc["warnings"] if w.startswith(str(log))] == ["2", "3"]


def _append_many(log: str, document: dict[str, Any], n: int) -> None:
    from servescope.report.verify_doc import append_log

    for _ in range(n):
        append_log(log, document)


def test_concurrent_appends_keep_every_entry_whole(tmp_path: Path, plan_and_log: tuple[Path, str]) -> None:
    """Two writers × 100 appends (report.verify_doc.append_log: one O_APPEND write per line): 200 whole entries."""
    import multiprocessing

    _, line = plan_and_log
    document = {k: v for k, v in json.loads(line).items() if k != "logged_at"}
    log = tmp_path / "log.jsonl"
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_append_many, args=(str(log), document, 100)) for _ in range(2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
    lines = log.read_text().splitlines()
    assert len(lines) == 200 and all(json.loads(x)["check"] == document["check"] for x in lines)


def test_log_inside_a_before_folder_is_refused(tmp_path: Path, plan_and_log: tuple[Path, str]) -> None:
    plan, _ = plan_and_log
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    trace = _file(ranks, "rank0.json", '{"traceEvents": []}')
    r = CliRunner().invoke(main, ["verify", str(plan), "--before", str(ranks), "--after", "tpot=10ms@c1",
                                  "--applied", "quantization", "--log", str(ranks / "rank0.json")])
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1 and "rank0.json" in r.stderr
    assert trace.read_text() == '{"traceEvents": []}' and not r.stdout.strip()
    r = CliRunner().invoke(main, ["verify", str(plan), "--before", str(ranks), "--after", "tpot=10ms@c1",
                                  "--applied", "quantization", "--log", str(ranks / "new.jsonl")])
    assert r.exit_code == 1 and not (ranks / "new.jsonl").exists() and not r.stdout.strip()


def test_log_that_is_not_a_campaign_log_is_refused(tmp_path: Path, plan_and_log: tuple[Path, str]) -> None:
    plan, _ = plan_and_log
    other = _file(tmp_path, "notes.txt", "my notes\n")
    _refused(["verify", str(plan), "--before", "tpot=12ms@c1", "--after", "tpot=10ms@c1", "--applied",
              "quantization", "--log", str(other)], other)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"schema": "servescope.plan/1", "concurrency": 1' + "0" * 5000 + "}",
                                  '{"schema": "servescope.plan/1", "objective": NaN}'])
def test_plan_file(tmp_path: Path, text: str) -> None:
    path = _file(tmp_path, "plan.json", text)
    _refused(["verify", str(path), "--before", "tpot=12ms@c1", "--after", "tpot=10ms@c1"], path)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"schema": "servescope.verify/1", "x": 1' + "0" * 5000 + "}"])
def test_campaign_log_unreadable_line(tmp_path: Path, text: str) -> None:
    path = _file(tmp_path, "log.jsonl", text + "\n")
    assert "log.jsonl:1" in _refused(["verify", "--log", str(path)], path)


# --- -o never replaces an input, whatever option named it -----------------------------------------------------

def test_output_onto_a_routing_file(tmp_path: Path) -> None:
    hist = _file(tmp_path, "hist.json", json.dumps([1] * 128))
    link = tmp_path / "link.json"
    link.symlink_to(hist)
    hard = tmp_path / "hard.json"
    os.link(hist, hard)
    for out in (hist, link, hard, Path(f"{tmp_path}/./hist.json")):
        _refused(["model", *QWEN_MOE, "--routing", str(hist), "-o", str(out)], hist, name=str(out))


def test_output_onto_a_before_trace_the_sidecar_or_a_drafter_head(tmp_path: Path,
                                                                   plan_and_log: tuple[Path, str]) -> None:
    plan, _ = plan_and_log
    trace = _file(tmp_path, "before.json", '{"traceEvents": []}')
    _refused(["verify", str(plan), "--before", str(trace), "--after", "tpot=10ms@c1", "--format", "json",
              "-o", str(trace)], trace, name="before.json")
    bench = _file(tmp_path, "b.json", json.dumps(VLLM_RESULT))
    side = _file(tmp_path, "b.json.server.toml", "max_num_seqs = 4\n")
    _refused(["simulate", *LLAMA, "--compare", str(bench), "--format", "json", "-o", str(side)], side)
    head = _file(tmp_path, "HEAD.json", (Path(__file__).parents[1] / "data/planner/openai--gpt-oss-20b_config.json")
                 .read_text())
    _refused(["plan", *LLAMA, "--spec-method", f"eagle3:{head}", "--format", "json", "-o", str(head)], head)


# --- inert outputs ----------------------------------------------------------------------------------------------

HOSTILE_NAME = "gemm\x1b]0;PWNED\x07\x1b[2J\x9b31m\x00end"


def test_terminal_text_shows_control_characters_escaped() -> None:
    from servescope.report.inert import terminal_safe

    assert terminal_safe(HOSTILE_NAME) == "gemm\\x1b]0;PWNED\\x07\\x1b[2J\\x9b31m\\x00end"
    assert terminal_safe("a\tb\nc") == "a\tb\nc" and terminal_safe("a\nb", one_line=True) == "a\\x0ab"


def test_kernel_and_rank_file_names_reach_no_terminal_raw(tmp_path: Path) -> None:
    """A kernel named with escape bytes, in a rank file whose name holds them too: text output (piped and as a
    terminal) and the error line hold no raw control byte."""
    from fuzz_inputs import seed_doc

    doc = json.loads(json.dumps(seed_doc(6)))
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "kernel":
            ev["name"] = HOSTILE_NAME
    path = _file(tmp_path, "rank\x1b]0;T\x07.json", json.dumps(doc))
    for extra in ([], ["--format", "text"]):
        result = CliRunner().invoke(main, ["trace", str(path), *extra], color=True)
        assert result.exit_code == 0, result.output
        raw = result.stdout.replace("\x1b[", "")  # Rich's own styles (SGR) are the only ESC allowed
        assert not any(c in raw for c in "\x1b\x07\x9b\x00"), [c for c in raw if ord(c) < 32 and c not in "\n\t"][:5]
        assert "PWNED" in result.stdout or "gemm" in result.stdout
    missing = tmp_path / "gone\x1b[2J.json"
    result = CliRunner().invoke(main, ["simulate", *LLAMA, "--compare", str(missing)])
    assert result.exit_code == 1 and "\x1b" not in result.stderr


@pytest.mark.parametrize("cell", ["=1+1", "+SUM(A1)", "-2+3", "@cmd", "\tx", "\rx"])
def test_csv_cells_never_start_a_formula(cell: str) -> None:
    from servescope.report.csv_tables import document_csv

    text = document_csv({"schema": "servescope.plan/1", "tracks": [{"kind": cell, "gain": -1.5, cell: "x"}]})
    rows = list(csv.reader(io.StringIO(text, newline="")))
    shown = "'" + cell.replace("\r", "\\r")  # a CR is written as the two characters \r (one row stays one row)
    assert rows[1][0] == shown and rows[0][2] == shown  # the cell and a header made of input text
    assert rows[1][1] == "-1.5"  # a number stays a number


# --- fuzz targets: each reader on mutated seeds ----------------------------------------------------------------

def _read_bench(p: Path) -> Any:
    from servescope.validation.benchio import read_bench

    return read_bench(p)


def _read_requests(p: Path) -> Any:
    from servescope.validation.benchio import read_requests

    return read_requests(p)


def _read_log(p: Path) -> Any:
    from servescope.validation.enginelog import read_engine_log

    return read_engine_log(p)


def _read_routing(p: Path) -> Any:
    from servescope.specs.routing_file import read_expert_histogram

    return read_expert_histogram(p, 128)


def _read_campaign(p: Path) -> Any:
    from rich.console import Console

    from servescope.report.verify_doc import campaign_document, read_log
    from servescope.report.verify_text import render_campaign

    doc = campaign_document(p, read_log(p))
    render_campaign(doc, Console(file=io.StringIO(), width=100))
    return doc


def _read_plan(p: Path) -> Any:
    from servescope.report.verify_doc import read_plan

    return read_plan(p)


def _holds(reader: Callable[[Path], Any], path: Path) -> None:
    """A result, or a ServescopeError whose one-line message starts with the file's path; no RuntimeWarning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            reader(path)
        except ServescopeError as exc:
            assert str(exc).startswith(str(path)) and "\n" not in str(exc), str(exc)[:300]
    bad = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not bad, bad[0].message


@settings(FUZZ, max_examples=80 * SCALE)
@given(st.integers(0, len(SGLANG_RESULTS)), st.integers(0, 2**32), st.booleans())
def test_result_files_hold(seed: int, rng_seed: int, whole: bool) -> None:
    rng = random.Random(rng_seed)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if seed == len(SGLANG_RESULTS):
            data = mutate_json(VLLM_RESULT, rng)
        else:
            lines = SGLANG_RESULTS[seed].read_text().splitlines()
            at = rng.randrange(len(lines))
            lines[at] = mutate_json(json.loads(lines[at]), rng).decode("utf-8", "surrogateescape")
            data = "\n".join(lines).encode("utf-8", "surrogateescape")
        path = Path(tmp) / ("r.json" if whole else "r.jsonl")
        path.write_bytes(data)
        _holds(_read_bench, path)


@settings(FUZZ, max_examples=60 * SCALE)
@given(st.integers(0, 2**32), st.booleans())
def test_replays_hold(rng_seed: int, as_csv: bool) -> None:
    import tempfile

    rng = random.Random(rng_seed)
    doc = replay_seed()
    if as_csv:
        rows = [{"arrival_s": s - 1.7e9, "input_len": i, "output_len": o}
                for s, i, o in zip(doc["start_times"], doc["input_lens"], doc["output_lens"], strict=True)]
        data = b"".join(mutate_json(r, rng).replace(b"\n", b"") + b"\n" for r in rows) if rng.random() < 0.5 else \
            mutate_log("arrival_s,input_len,output_len\n" + "".join(
                f"{r['arrival_s']},{r['input_len']},{r['output_len']}\n" for r in rows), rng)
    else:
        data = mutate_json(doc, rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("r.csv" if as_csv else "r.json")
        path.write_bytes(data)
        _holds(_read_requests, path)


@settings(FUZZ, max_examples=60 * SCALE)
@given(st.integers(0, len(ENGINE_LOGS) - 1), st.integers(0, 2**32))
def test_engine_logs_hold(seed: int, rng_seed: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "engine.log"
        path.write_bytes(mutate_log(ENGINE_LOGS[seed].read_text(), random.Random(rng_seed)))
        _holds(_read_log, path)


@settings(FUZZ, max_examples=60 * SCALE)
@given(st.integers(0, 2**32), st.sampled_from(["json", "flat", "csv"]))
def test_routing_files_hold(rng_seed: int, form: str) -> None:
    import tempfile

    rng = random.Random(rng_seed)
    layers = routing_seed()
    if form == "csv":
        data = mutate_log("expert,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(layers[0])), rng)
    else:
        data = mutate_json(layers if form == "json" else {"counts": layers[0]}, rng)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("h.csv" if form == "csv" else "h.json")
        path.write_bytes(data)
        _holds(_read_routing, path)


@settings(FUZZ, max_examples=40 * SCALE)
@given(st.integers(0, 2**32), st.booleans())
def test_plan_files_and_campaign_logs_hold(plan_and_log: tuple[Path, str], rng_seed: int, is_plan: bool) -> None:
    import tempfile

    rng = random.Random(rng_seed)
    plan, line = plan_and_log
    with tempfile.TemporaryDirectory() as tmp:
        if is_plan:
            path = Path(tmp) / "plan.json"
            path.write_bytes(mutate_json(json.loads(plan.read_text()), rng))
            _holds(_read_plan, path)
        else:
            path = Path(tmp) / "log.jsonl"
            entries = [line] * rng.randint(1, 4)
            at = rng.randrange(len(entries))
            entries[at] = mutate_json(json.loads(line), rng).decode("utf-8", "surrogateescape")
            path.write_bytes("\n".join(entries).encode("utf-8", "surrogateescape"))
            _holds(_read_campaign, path)


CLI_SURFACES = ("compare", "measured", "routing", "engine-log")


@settings(FUZZ, max_examples=24 * SCALE)
@given(st.sampled_from(CLI_SURFACES), st.integers(0, 2**32))
def test_cli_surfaces_hold(surface: str, rng_seed: int) -> None:
    """The same mutations through the CLI: a result or one line, never a traceback, the input unchanged."""
    import tempfile

    rng = random.Random(rng_seed)
    with tempfile.TemporaryDirectory() as tmp:
        if surface in ("compare", "measured"):
            path, data = Path(tmp) / "r.json", mutate_json(VLLM_RESULT, rng)
            args = ["simulate", *LLAMA, "--compare", str(path)] if surface == "compare" else \
                ["model", *LLAMA, "--measured", str(path)]
        elif surface == "routing":
            path, data = Path(tmp) / "h.json", mutate_json(routing_seed(), rng)
            args = ["model", *QWEN_MOE, "--routing", str(path)]
        else:
            path, data = Path(tmp) / "e.log", mutate_log(ENGINE_LOGS[0].read_text(), rng)
            args = ["simulate", *LLAMA, "--concurrency", "4", "--num-prompts", "8", "--engine-log", str(path)]
        path.write_bytes(data)
        problem = check_cli(args)
        assert problem is None, f"{surface}, rng {rng_seed}: {problem}"
        assert path.read_bytes() == data


# --- crashers found by the harness, kept as regression tests ---------------------------------------------------

def test_replay_csv_field_over_the_csv_limit(tmp_path: Path) -> None:
    """FUZZ_SCALE=15, rng 731768: one line of 400 KB made csv raise `field larger than field limit`."""
    path = _file(tmp_path, "r.csv", "arrival_s,input_len,output_len\n0,10,\"" + "x" * 200_000 + "\n")
    assert "r.csv:" in _refused(["simulate", *LLAMA, "--replay", str(path)], path)


def test_engine_log_warning_then_an_error_is_one_line(tmp_path: Path) -> None:
    """FUZZ_SCALE=15, rng 26578: KV lines that disagree (a warning) and a capacity too small to run (an error)
    printed two lines; the warning is a note now, said only after a result."""
    path = _file(tmp_path, "e.log", "GPU KV cache size: 4 tokens\nGPU KV cache size: 449,600 tokens\n")
    assert "no KV room" in _refused(["simulate", *LLAMA, "--concurrency", "4", "--num-prompts", "8",
                                     "--engine-log", str(path)], path, name="KV")


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"run_name": "a", "batch_size": 1' + "0" * 5000 + ', "input_len": 8, "output_len": 8, '
    '"median_decode_latency": 0.01}',
    '{"run_name": "a", "batch_size": 1' + "0" * 100 + ', "input_len": 8, "output_len": 8, '
    '"median_decode_latency": 0.01}',
    '{"run_name": "a", "batch_size": 8, "input_len": 8, "output_len": 8, "median_decode_latency": Infinity}',
])
def test_decode_bench_file(tmp_path: Path, text: str) -> None:
    """`validate --decode-bench`: the same reader guards (RecursionError, 4,300 digits, a bignum in math.isfinite)."""
    path = _file(tmp_path, "one_batch.jsonl", text + "\n")
    _refused(["validate", "--decode-bench", str(path), "--model", "llama-3.1-8b", "--gpu", "h100_sxm"], path)


@pytest.mark.parametrize(("key", "value"), [("objective", ["tpot"]), ("concurrency", {"a": 1}), ("plan", [1])])
def test_campaign_entry_with_a_list_where_a_name_is_expected(tmp_path: Path, plan_and_log: tuple[Path, str],
                                                             key: str, value: object) -> None:
    """FUZZ_SCALE=15, rng 779756837: `objective: [...]` reached a dict lookup in the text view (TypeError)."""
    _, line = plan_and_log
    doc = json.loads(line)
    doc[key] = value
    path = _file(tmp_path, "log.jsonl", json.dumps(doc) + "\n")
    assert f"log.jsonl:1: {key}" in _refused(["verify", "--log", str(path)], path)


@pytest.mark.parametrize("figure", ["tpot=12ms@c" + "9" * 5000, "output=100tok/s@c4,isl=" + "9" * 5000,
                                    "tpot=1e300s@c1", "tpot=1e400s@c1", "tpot=nanms@c1"])
def test_typed_figure_beyond_reach_is_one_line(figure: str) -> None:
    """A concurrency of 5,000 digits reached int() (ValueError); 1e300 s was accepted after ~50 s (2026-12-03)."""
    assert check_cli(["model", *LLAMA, "--measured", figure]) is None
    assert CliRunner().invoke(main, ["model", *LLAMA, "--measured", figure]).exit_code == 1


@pytest.mark.parametrize("value", [1.5, "quantization", {"a": 1}])
def test_plan_file_applied_not_a_list(tmp_path: Path, plan_and_log: tuple[Path, str], value: object) -> None:
    """FUZZ_SCALE=15, rng 33268: `applied: 1.5` in a plan file was iterated (TypeError)."""
    from servescope.report.verify_doc import read_plan

    doc = json.loads(plan_and_log[0].read_text())
    doc["applied"] = value
    path = _file(tmp_path, "plan.json", json.dumps(doc))
    assert read_plan(path).applied == ()


def test_model_config_with_an_integer_over_4300_digits(tmp_path: Path) -> None:
    """`--model config.json` caught JSONDecodeError and RecursionError, not the ValueError of a 5,000-digit int."""
    doc = json.loads((Path(__file__).parents[1] / "data/planner/openai--gpt-oss-20b_config.json").read_text())
    text = json.dumps(doc).replace(f'"num_hidden_layers": {doc["num_hidden_layers"]}',
                                   '"num_hidden_layers": 1' + "0" * 5000)
    path = _file(tmp_path, "config.json", text)
    _refused(["model", "--model", str(path), "--gpu", "h100_sxm"], path)


@pytest.mark.parametrize("name", ["SERVESCOPE_MAX_MEMORY", "COLUMNS"])
def test_environment_numbers_of_5000_digits(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """An environment variable of 5,000 digits reached int() (ValueError): now read as unset."""
    monkeypatch.setenv(name, "9" * 5000)
    assert check_cli(["model", *LLAMA]) is None


def test_usage_text_keeps_its_lines() -> None:
    """Errors are escaped to one line; Click's usage text (a group without a command) keeps its line breaks."""
    result = CliRunner().invoke(main, ["specs"])
    assert "\\x0a" not in result.output and result.output.count("\n") > 1
