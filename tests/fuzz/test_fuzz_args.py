"""Fuzzing `model`, `plan` and `validate`: bad arguments, configs and CSVs, plus every crasher found.

The rule is the one of test_fuzz_trace.py (fuzz_inputs.check_cli): exit 0 with a result, or exit 1 with exactly
one `servescope: …` line; never a traceback. In `validate`, one bad row is skipped with its reason and the other
rows are still evaluated. CSV rows come from the real dev split (tests/data/validation, ai-dynamo/aiconfigurator).
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_inputs import check_cli
from servescope.cli import main

SCALE = int(os.environ.get("FUZZ_SCALE", "1"))
FUZZ = settings(deadline=None, derandomize=SCALE == 1, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DEV_CSV = Path(__file__).parents[1] / "data/validation/measured_serving_dev.csv"
MODELS = Path(__file__).parents[2] / "src/servescope/specs/data/models"
SCENARIO = ["--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8"]
WEIRD = ("", "0", "-1", "1", "2", "8", "1.5", "nan", "inf", "-inf", "1e400", "1e308", "99999999999999999999",
         "abc", "0x10", " ", "None", "1,2", "８", "100000", "[/]")


def _rows(n: int = 12) -> tuple[list[str], list[list[str]]]:
    with DEV_CSV.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        return header, [next(reader) for _ in range(n)]


def _csv_text(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def _validate_doc(path: Path) -> dict:
    result = CliRunner().invoke(main, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# --- Hypothesis over arguments, CSV cells and configs ----------------------------------------------------------

@settings(FUZZ, max_examples=30 * SCALE)  # 60 before the pair test below took half of its budget
@given(st.data())
def test_model_and_plan_arguments(data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(["model", "plan"]))
    options = {"model": ["--tp", "--dp", "--ep", "--pp", "--isl", "--osl", "--concurrency", "--quant", "--gpu"],
               "plan": ["--tp", "--dp", "--concurrency", "--target", "--tpot-limit", "--acceptance",
                        "--acceptance-rate", "--spec-k", "--spec-method", "--forbid", "--objective"]}[command]
    scenario = data.draw(st.sampled_from((SCENARIO, SCENARIO, SCENARIO, SCENARIO[2:], SCENARIO[:2] + SCENARIO[4:],
                                          SCENARIO[4:])))  # mostly whole; sometimes without --model / --gpu
    args = [command, *scenario]
    for option in data.draw(st.lists(st.sampled_from(options), min_size=1, max_size=3, unique=True)):
        value = data.draw(st.sampled_from((*WEIRD, "8ms", "1e400ms", "0.9,,0.8", "0.9,0.8", "draft:nope",
                                           "draft:qwen3-8b", "eagle3", "mtp", "1000tok/s", "quantization")))
        args += [option, value]
    args += data.draw(st.sampled_from(([], ["--overlap-scheduler"], ["--no-overlap-scheduler"])))
    problem = check_cli([*args, "--json"])
    assert problem is None, f"{args}: {problem}"


# Values an option can really take (the crash of issue 31 needed two valid values together: a PCIe GPU and
# `--interconnect as_measured`). Choices come from click; the rest from this table; options not named are skipped.
VALID = {"--gpu": ("l40s", "h100_pcie", "h100_sxm", "b200_sxm", "rtx_pro_6000_server", "rtx_4090", "mi300x"),
         "--tp": ("1", "2", "4", "8"), "--dp": ("1", "2"), "--ep": ("1", "8"), "--pp": ("1", "2"),
         "--interconnect": ("nvlink", "pcie", "pcie_p2p", "pcie_no_p2p", "as_measured"),
         "--quant": ("bf16", "fp8", "nvfp4", "int4"), "--moe-quant": ("fp8", "mxfp4"),
         "--kv-quant": ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16"), "--engine-version": ("0.10.0", "0.16.0"),
         "--routing": ("uniform", "skewed"), "--isl": ("1", "1024", "32768"), "--osl": ("1", "512"),
         "--concurrency": ("1", "64"), "--target": ("1000tok/s", "20ms"), "--tpot-limit": ("50ms",),
         "--forbid": ("quantization", "speculative"), "--spec-method": ("eagle3", "mtp", "draft:qwen3-0.6b"),
         "--spec-k": ("1", "3"), "--acceptance": ("0.7", "0.9,0.8"), "--acceptance-rate": ("0.6",),
         "--gpu-memory-utilization": ("0.5", "0.93"), "--measured": ("tpot=20ms@c1", "output=1000tok/s@c64"),
         "--applied": ("custom_allreduce", "speculative_decoding", "quantization,nccl_tuning", "expert_parallel")}
SHAPE = ("--interconnect", "--backend", "--quant", "--kv-quant", "--ep", "--dp", "--pp", "--engine-version")
PAIR_MODELS = ("llama-3.1-8b", "gpt-oss-120b", "qwen3-30b-a3b")


def _pair_choices(command: str) -> dict[str, tuple[str | None, ...]]:
    """Each option of `command` that the pair test varies, with the values it tries (None: a flag, given bare)."""
    import click as _click

    out: dict[str, tuple[str | None, ...]] = {}
    for param in main.commands[command].params:
        if not isinstance(param, _click.Option) or param.name in ("model", "gpu", "tp", "output_path", "json",
                                                                    "format", "output"):
            continue
        opt = max(param.opts, key=len)
        if param.is_flag:
            out[opt] = (None,) if not param.secondary_opts else ("@" + param.opts[0], "@" + param.secondary_opts[0])
        elif isinstance(param.type, _click.Choice):
            out[opt] = tuple(str(c) for c in param.type.choices)
        elif opt in VALID:
            out[opt] = VALID[opt]
    return out


@settings(FUZZ, max_examples=30 * SCALE)
@given(st.data())
def test_pairs_of_valid_options(data: st.DataObject) -> None:
    """Option combinations: a drawn scenario (model, GPU, TP) and two more options, each with a value it accepts."""
    command = data.draw(st.sampled_from(["model", "plan"]))
    args = [command, "--model", data.draw(st.sampled_from(PAIR_MODELS)),
            "--gpu", data.draw(st.sampled_from(VALID["--gpu"])), "--tp", data.draw(st.sampled_from(VALID["--tp"]))]
    choices = _pair_choices(command)
    pool = sorted(choices) + [o for o in SHAPE if o in choices] * 3  # the options that change the system, oftener
    for option in data.draw(st.lists(st.sampled_from(pool), min_size=2, max_size=2, unique=True)):
        value = data.draw(st.sampled_from(choices[option]))
        args += [value[1:]] if value is not None and value.startswith("@") else [option, *([] if value is None
                                                                                            else [value])]
    problem = check_cli([*args, "--json"])
    assert problem is None, f"{args}: {problem}"


@settings(FUZZ, max_examples=60 * SCALE)
@given(st.data())
def test_validate_csv_cells(data: st.DataObject) -> None:
    """Damaged cells and rows: never a crash; the untouched rows are still evaluated."""
    header, rows = _rows()
    damaged: set[int] = set()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(rows) - 1))
        if data.draw(st.booleans()):
            rows[i] = rows[i][: data.draw(st.integers(0, len(header) - 1))]  # short row
        else:
            col = data.draw(st.sampled_from(["tp_size", "isl", "osl", "batch_size", "silicon_tpot_ms",
                                             "silicon_ttft_ms", "attention_dp_size", "moe_ep_size", "mode",
                                             "system", "model_path", "silicon_data_source", "id"]))
            if header.index(col) < len(rows[i]):  # the row may have been cut short already
                rows[i][header.index(col)] = data.draw(st.sampled_from(WEIRD))
        damaged.add(i)
    bom = "\ufeff" if data.draw(st.booleans()) else ""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.csv"
        path.write_text(bom + _csv_text(header, rows), encoding="utf-8")
        problem = check_cli(["validate", str(path), "--json"])
        assert problem is None, problem
        doc = _validate_doc(path)
    assert doc["agg_rows"] <= len(rows)
    assert len(doc["rows"]) + len(doc["skipped"]) >= len(rows) - len(damaged) - 1  # a short row may be its id


@settings(FUZZ, max_examples=40 * SCALE)
@given(st.sampled_from(["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size",
                        "intermediate_size", "num_key_value_heads", "head_dim", "max_position_embeddings"]),
       st.sampled_from(["Infinity", "-Infinity", "NaN", "1e400", "1e308", "-1", "0", "null", '"x"', "[]", "{}",
                        "123456789012345678901234567890", "true", "0.5"]))
def test_model_config_values(key: str, token: str) -> None:
    source = (MODELS / "MiniMaxAI--MiniMax-M2.5_config.json").read_text()
    cfg = json.loads(source)
    cfg[key] = "@@"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(cfg).replace('"@@"', token))
        problem = check_cli(["model", "--model", str(path), "--gpu", "b200_sxm", "--tp", "8", "--json"])
    assert problem is None, f"{key}={token}: {problem}"


# --- crashers found, kept as regression tests ------------------------------------------------------------------

@pytest.mark.parametrize("content", [bytes(range(256)) * 4, "id,system\ncafé,x\n".encode("latin-1"), b"\x00\x01"])
def test_validate_binary_or_latin1_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    assert check_cli(["validate", str(path)]) is None


def test_validate_a_directory(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 1 and "is a folder" in result.stderr
    assert check_cli(["validate", str(tmp_path)]) is None


@pytest.mark.parametrize(("column", "value", "reason"), [
    ("tp_size", "1e400", "not a finite number"),
    ("isl", "nan", "not a finite number"),
    ("tp_size", "abc", "not a number: 'abc'"),  # was silently read as TP 1
])
def test_validate_bad_cell_skips_only_its_row(tmp_path: Path, column: str, value: str, reason: str) -> None:
    header, rows = _rows(4)
    rows[0][header.index(column)] = value
    path = tmp_path / "m.csv"
    path.write_text(_csv_text(header, rows))
    doc = _validate_doc(path)
    skipped = {s["id"]: s["reason"] for s in doc["skipped"]}
    assert reason in skipped[rows[0][0]]
    good = _validate_doc(_write(tmp_path / "good.csv", _csv_text(header, rows[1:])))
    assert [r["id"] for r in doc["rows"]] == [r["id"] for r in good["rows"]]  # the other rows are untouched


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_validate_short_row(tmp_path: Path) -> None:
    header, rows = _rows(3)
    rows[1] = rows[1][:5]
    doc = _validate_doc(_write(tmp_path / "m.csv", _csv_text(header, rows)))
    skipped = {s["id"]: s["reason"] for s in doc["skipped"]}
    assert "short row" in skipped[rows[1][0]]
    assert len(doc["rows"]) + len(doc["skipped"]) == 3


def test_validate_byte_order_mark(tmp_path: Path) -> None:
    header, rows = _rows(3)
    plain = _validate_doc(_write(tmp_path / "plain.csv", _csv_text(header, rows)))
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + _csv_text(header, rows).encode())
    assert _validate_doc(path) == plain  # the BOM is not part of the `id` column's name


def test_model_config_with_infinity(tmp_path: Path) -> None:
    cfg = (MODELS / "MiniMaxAI--MiniMax-M2.5_config.json").read_text()
    path = tmp_path / "config.json"
    path.write_text(cfg.replace('"num_hidden_layers": 62', '"num_hidden_layers": Infinity'))
    assert "Infinity" in path.read_text()
    result = CliRunner().invoke(main, ["model", "--model", str(path), "--gpu", "b200_sxm", "--tp", "8"])
    assert result.exit_code == 1 and "num_hidden_layers" in result.stderr
    assert check_cli(["model", "--model", str(path), "--gpu", "b200_sxm", "--tp", "8"]) is None


@pytest.mark.parametrize(("args", "needle"), [
    (["model", *SCENARIO, "--dp", "100000"], "GPUs"),
    (["plan", *SCENARIO, "--acceptance", "0.9,,0.8"], "empty value"),
    (["plan", *SCENARIO, "--target", "1e400ms"], "finite"),
    (["plan", *SCENARIO, "--spec-method", "draft:no-such-model"], "unknown model"),
])
def test_bad_arguments_are_rejected_in_one_line(args: list[str], needle: str) -> None:
    """Each of these used to be accepted without a word (exit 0)."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.stdout[-300:]
    assert needle in result.stderr
    assert check_cli(args) is None


@pytest.mark.parametrize("command", ["model", "plan", "simulate", "sweep"])
@pytest.mark.parametrize("drop", ["--model", "--gpu", "both"])
def test_missing_model_or_gpu_is_one_line(command: str, drop: str) -> None:
    """Click >= 8.3 stopped enforcing `required` on options declared with default=None; this caught it."""
    keep = {"--model": SCENARIO[2:], "--gpu": SCENARIO[:2] + SCENARIO[4:], "both": SCENARIO[4:]}[drop]
    result = CliRunner().invoke(main, [command, *keep])
    assert result.exit_code == 1
    missing = "--gpu" if drop == "--gpu" else "--model"
    assert result.stderr == f"servescope: Missing option '{missing}'.\n"


@pytest.mark.parametrize("gpus", ["0", "-3", "99999999999999999999", "4097"])
def test_sweep_gpu_count_out_of_range_is_one_line(gpus: str) -> None:
    """A GPU count is bounded before its divisors are enumerated (1e20 GPUs used to spin for ever)."""
    result = CliRunner().invoke(main, ["sweep", *SCENARIO[:4], "--concurrency", "1", "--gpus", gpus])
    assert result.exit_code == 1
    assert result.stderr == f"servescope: cannot lay out {gpus} GPUs: a sweep takes 1 to 4096\n"


@pytest.mark.parametrize("args", [
    ["simulate", *SCENARIO[:4], "--num-prompts", "99999999999999999999"],  # was ValueError from NumPy
    ["simulate", *SCENARIO[:4], "--compare", ""],  # was ValueError: an empty path has no name
    ["trace", "{example}", "--top", "99999999999999999999"],  # was OverflowError
    ["diff", "{example}", "{example}", "--top", "99999999999999999999"],
])
def test_option_sweep_crashers(args: list[str]) -> None:
    """Found by giving every option of every command each WEIRD value (2026-11-30); kept as regressions."""
    from servescope.analysis.analyze import example_trace

    full = [a.replace("{example}", str(example_trace())) for a in args]
    assert check_cli([*full, "--json"]) is None


def _small_csv() -> Path:
    """The dev CSV's first 12 rows in a temporary file (validate --simulate on every row takes many minutes)."""
    header, rows = _rows()
    path = Path(tempfile.mkdtemp(prefix="servescope-fuzz-")) / "small.csv"
    path.write_text(_csv_text(header, rows), encoding="utf-8")
    return path


def _every_option_cases() -> list[object]:
    """Each option of each command with each WEIRD value (all of them under `make fuzz`; at scale 1 the values
    that found crashers: empty, huge, not a number)."""
    import click as _click

    from servescope.analysis.analyze import example_trace

    example = str(example_trace())
    bases = {"model": SCENARIO, "plan": SCENARIO, "sweep": [*SCENARIO[:4], "--concurrency", "1,4"],
             "simulate": [*SCENARIO[:4], "--num-prompts", "20"], "trace": [example], "diff": [example, example],
             "validate": [str(_small_csv())]}
    values = WEIRD if SCALE > 1 else ("", "99999999999999999999", "abc")
    cases = []
    for name, base in bases.items():
        command = main.commands[name]
        for param in command.params:
            if not isinstance(param, _click.Option) or param.name in ("help", "output_path"):
                continue
            opt = max(param.opts, key=len)
            more = HUGE if _numeric(param) else ()  # sizes that fit int64: they reach the allocations
            for v in ([None] if param.is_flag else (*values, *more)):
                args = [name, *base, opt, *([] if v is None else [v]), "--json"]
                cases.append(pytest.param(args, id=f"{name} {opt} {v!r}"))  # ids without temporary paths (xdist)
    return cases


HUGE = ("1000000000",)


def _numeric(param: object) -> bool:
    """An option whose value is a number (its type, or its default)."""
    import click as _click

    if not isinstance(param, _click.Option) or param.is_flag:
        return False
    if isinstance(param.type, _click.types.IntParamType | _click.types.FloatParamType):
        return True
    return isinstance(param.default, int | float) and not isinstance(param.default, bool)


# Numbers inside text options (issue 21: NumPy tracebacks at 7.45 GiB, 8 GB after 145 s); each ends in one line
# or a result within seconds.
SIZE_ARGS = [
    ["simulate", *SCENARIO, "--arrival", "burst:1000000000"],
    ["simulate", *SCENARIO, "--arrival", "poisson:1e-300", "--num-prompts", "20"],
    ["simulate", *SCENARIO, "--arrival", "poisson:1e300", "--num-prompts", "20"],
    ["simulate", *SCENARIO, "--concurrency", "64", "--num-prompts", "1000000"],
    ["simulate", *SCENARIO, "--concurrency", "8", "--num-prompts", "20", "--max-num-seqs", "1000000000"],
    ["simulate", *SCENARIO, "--concurrency", "8", "--num-prompts", "20", "--max-num-batched-tokens", "1000000000"],
    ["simulate", *SCENARIO, "--concurrency", "8", "--num-prompts", "100000", "--max-num-batched-tokens", "1"],
    ["simulate", *SCENARIO, "--concurrency", "2", "--num-prompts", "2", "--kv-cache-tokens", "1000000000000"],
    ["model", *SCENARIO, "--simulate", "--concurrency", "1000000"],
    ["model", *SCENARIO, "--concurrency", "1000000000"],
    ["sweep", *SCENARIO, "--concurrency", "1000000000"],
    ["plan", *SCENARIO, "--concurrency", "1000000000"],
]


@pytest.mark.parametrize("args", [pytest.param(a, id=" ".join(a[len(SCENARIO) + 1:])) for a in SIZE_ARGS])
def test_huge_numbers_in_text_options(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded work, not seconds (the budget is in bench/bench_budgets.py): a run simulates at most one step per
    token of its 20 requests (1,024 + 512 each), and no command allocates more than 256 MB (tracemalloc)."""
    import servescope.simulate as sim_package
    from work_counters import traced_peak

    steps: list[int] = []
    real = sim_package.simulate_raw
    monkeypatch.setattr(sim_package, "simulate_raw",
                        lambda *a, **k: (run := real(*a, **k), steps.append(len(run.step_t_s)))[0])
    with traced_peak() as peak:
        assert check_cli([*args, "--json"]) is None
    assert all(n <= 20 * (1024 + 512) for n in steps), steps
    assert peak[0] < 256e6


@pytest.mark.parametrize("command", ["model", "simulate", "sweep", "plan"])
@pytest.mark.parametrize(("depth", "shape"), [(1001, "list"), (20000, "object")])
def test_deep_config_is_one_line(tmp_path: Path, command: str, depth: int, shape: str) -> None:
    """Deep JSON in a config.json (the issue: RecursionError from model, simulate and sweep)."""
    deep = "[" * depth + "]" * depth if shape == "list" else '{"a":' * depth + "1" + "}" * depth
    source = (MODELS / "MiniMaxAI--MiniMax-M2.5_config.json").read_text()
    path = tmp_path / "config.json"
    path.write_text(source.replace('"num_hidden_layers": 62', f'"num_hidden_layers": 62, "deep": {deep}'))
    extra = {"simulate": ["--concurrency", "2", "--num-prompts", "4"], "sweep": ["--concurrency", "1"]}.get(command, [])
    assert check_cli([command, "--model", str(path), "--gpu", "b200_sxm", "--tp", "8", *extra, "--json"]) is None


@pytest.mark.parametrize("args", _every_option_cases())
def test_every_option_with_weird_values(args: list[str]) -> None:
    assert check_cli(args) is None


@pytest.mark.parametrize("gpu", ["l40s", "h100_pcie"])
def test_as_measured_interconnect_on_a_pcie_gpu(gpu: str) -> None:
    """Issue 31: the planner read `--interconnect as_measured` as NVLink (zero bandwidth on L40S: ZeroDivisionError;
    "(NVLink)" on H100 PCIe); it now reads the fabric specs.collectives resolved."""
    args = ["plan", "--model", "llama-3.1-8b", "--gpu", gpu, "--tp", "2", "--interconnect", "as_measured"]
    assert check_cli([*args, "--json"]) is None
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0
    assert "NVLink)" not in result.stdout and "over NVLink" not in result.stdout
