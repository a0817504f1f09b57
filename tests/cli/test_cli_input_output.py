"""-o never overwrites an input (cli/_app.py `refuse_input_as_output`, for every command from its declared
click.Path parameters and `--model`); -o onto a read-only file is refused; SIGTERM during a write leaves no
temporary file; stdout closed at start is exit 1 with one line; a file that cannot be read says "read"."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from servescope.analysis.analyze import example_trace
from servescope.cli import main
from servescope.cli._app import GuardedCommand, input_collision
from servescope.errors import OutputError
from servescope.report.atomic import atomic_binary, write_text_atomically

ROOT = Path(__file__).parents[2]
EXAMPLE = example_trace()
BENCH = ROOT / "tests/data/bench_serve/datacrunch_h200_sglang_llama_3_3_70b_online_output.jsonl"
CSV = ROOT / "tests/data/validation/measured_serving_dev.csv"
CONFIG = ROOT / "src/servescope/specs/data/models/MiniMaxAI--MiniMax-M2.5_config.json"
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX links, signals and modes")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _refused(args: list[str], victim: Path) -> str:
    """Run the CLI; assert exit 1, one line naming -o, the victim unchanged, and no new file beside it."""
    before, names = _digest(victim), sorted(p.name for p in victim.parent.iterdir())
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("servescope: -o ") and "is an input of this command" in result.stderr
    assert result.stderr.rstrip().endswith("; servescope never modifies its inputs); choose another output")
    assert _digest(victim) == before
    assert sorted(p.name for p in victim.parent.iterdir()) == names  # no temporary file, nothing written
    return result.stderr


def _copy(src: Path, folder: Path, name: str | None = None) -> Path:
    dst = folder / (name or src.name)
    shutil.copyfile(src, dst)
    return dst


def test_trace(tmp_path: Path) -> None:
    t = _copy(EXAMPLE, tmp_path)
    assert "the same file as PATH" in _refused(["trace", str(t), "-o", str(t)], t)
    assert "the same file as PATH" in _refused(["trace", str(t), "--json", "-o", str(t)], t)


def test_report(tmp_path: Path) -> None:
    t = _copy(EXAMPLE, tmp_path)
    _refused(["report", str(t), "-o", str(t)], t)


def test_diff_either_side(tmp_path: Path) -> None:
    a, b = _copy(EXAMPLE, tmp_path, "a.json.gz"), _copy(EXAMPLE, tmp_path, "b.json.gz")
    assert "BEFORE" in _refused(["diff", str(a), str(b), "-o", str(a)], a)
    assert "AFTER" in _refused(["diff", str(a), str(b), "-o", str(b)], b)


def test_validate(tmp_path: Path) -> None:
    c = _copy(CSV, tmp_path, "m.csv")
    assert "CSV" in _refused(["validate", str(c), "-o", str(c)], c)


def test_simulate_compare_and_lengths(tmp_path: Path) -> None:
    bench = _copy(BENCH, tmp_path)
    scenario = ["--model", "llama-3.1-8b", "--gpu", "h100_sxm"]
    assert "--compare" in _refused(["simulate", *scenario, "--compare", str(bench), "-o", str(bench)], bench)
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("128,64\n")
    assert "--lengths" in _refused(["simulate", *scenario, "--concurrency", "4", "--lengths", str(lengths),
                                    "-o", str(lengths)], lengths)


def test_model_config_path_and_folder(tmp_path: Path) -> None:
    cfg = _copy(CONFIG, tmp_path, "config.json")
    args = ["model", "--gpu", "b200_sxm", "--tp", "8", "--concurrency", "1"]
    assert "--model" in _refused([*args, "--model", str(cfg), "-o", str(cfg)], cfg)
    assert "inside the folder --model" in _refused([*args, "--model", str(tmp_path), "-o", str(cfg)], cfg)


def test_plan_trace(tmp_path: Path) -> None:
    t = _copy(EXAMPLE, tmp_path)
    _refused(["plan", str(t), "--model", "gpt-oss-120b", "--gpu", "b200_sxm", "--tp", "8", "-o", str(t)], t)


def test_export_keeps_its_refusal_in_the_same_words(tmp_path: Path) -> None:
    t = _copy(EXAMPLE, tmp_path)
    _refused(["export", str(t), "-o", str(t)], t)


def test_rank_folder_any_file_inside(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    r0, _ = _copy(EXAMPLE, ranks, "rank0.json.gz"), _copy(EXAMPLE, ranks, "rank1.json.gz")
    assert "inside the folder PATH" in _refused(["trace", str(ranks), "-o", str(r0)], r0)
    before = sorted(p.name for p in ranks.iterdir())
    result = CliRunner().invoke(main, ["trace", str(ranks), "-o", str(ranks / "new.json")])  # a new file too
    assert result.exit_code == 1 and "inside the folder PATH" in result.stderr
    assert sorted(p.name for p in ranks.iterdir()) == before
    assert "--ray" in _refused(["trace", "--ray", str(ranks), "-o", str(r0)], r0)  # `--ray FOLDER`: the folder


@posix_only
def test_symlinks_hard_links_and_relative_spellings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _copy(EXAMPLE, tmp_path)
    link, hard = tmp_path / "link.json.gz", tmp_path / "hard.json.gz"
    link.symlink_to(t)
    os.link(t, hard)
    assert "PATH" in _refused(["trace", str(t), "-o", str(link)], t)
    assert "PATH" in _refused(["trace", str(link), "-o", str(t)], t)
    assert "PATH" in _refused(["trace", str(t), "-o", str(hard)], t)
    monkeypatch.chdir(tmp_path)
    assert "PATH" in _refused(["trace", t.name, "-o", f"./{t.name}"], t)
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    os.link(t, ranks / "rank0.json.gz")  # -o outside the folder, but a hard link of a rank inside it
    assert "inside the folder" in _refused(["trace", str(ranks), "-o", str(hard)], t)


def test_other_outputs_are_written(tmp_path: Path) -> None:
    t = _copy(EXAMPLE, tmp_path)
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, ["trace", str(t), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("{")
    assert input_collision(Path(os.devnull), [("PATH", Path(os.devnull))]) is None  # devices are written in place


def test_a_command_added_later_is_guarded_without_code_of_its_own(tmp_path: Path) -> None:
    from servescope.cli._app import Output, one_line_errors, output_options

    @main.command("probe-input-guard")
    @click.argument("src", type=click.Path(path_type=Path))
    @click.option("--measured", type=click.Path(path_type=Path), multiple=True)
    @output_options
    @one_line_errors
    def probe(src: Path, measured: tuple[Path, ...], out: Output) -> None:
        out.emit({"schema": "probe/1", "src": str(src)})

    try:
        assert isinstance(main.commands["probe-input-guard"], GuardedCommand)
        a, b = tmp_path / "a.txt", tmp_path / "b.txt"
        a.write_text("a")
        b.write_text("b")
        assert "SRC" in _refused(["probe-input-guard", str(a), "-o", str(a)], a)
        assert "--measured" in _refused(["probe-input-guard", str(a), "--measured", str(a), "--measured", str(b),
                                         "-o", str(b)], b)
    finally:
        main.commands.pop("probe-input-guard")


# --- -o onto a read-only file ------------------------------------------------------------------------------------

@posix_only
def test_read_only_target_is_refused_and_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o444)  # as root os.access says writable: the mode bits decide
    with pytest.raises(OutputError, match=r"out.json: is read-only; servescope does not replace it"):
        write_text_atomically(target, "new")
    assert target.read_text(encoding="utf-8") == "old" and (target.stat().st_mode & 0o777) == 0o444
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    result = CliRunner().invoke(main, ["trace", str(EXAMPLE), "-o", str(target)])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "read-only" in result.stderr


@posix_only
def test_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o600)
    write_text_atomically(target, "new")
    assert target.read_text(encoding="utf-8") == "new" and (target.stat().st_mode & 0o777) == 0o600


# --- SIGTERM and SIGINT during a write ----------------------------------------------------------------------------

_WRITER = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from servescope.report.atomic import atomic_binary
    with atomic_binary(Path(sys.argv[1])) as f:
        f.write(b"partial")
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
        time.sleep(30)
""")


@posix_only
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_mid_write_leaves_no_temporary_file(tmp_path: Path, sig: str) -> None:
    target = tmp_path / "out.json"
    target.write_text("old", encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", _WRITER, str(target), sig], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no .out.json.XXXX.tmp
    assert target.read_text(encoding="utf-8") == "old"
    if sig == "SIGTERM":
        assert out.returncode == 1 and out.stderr.strip() == "servescope: terminated (SIGTERM); nothing written"


@posix_only
def test_sigterm_handler_is_restored_after_the_write(tmp_path: Path) -> None:
    original = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # an earlier test's ray.init may have set its own
    try:
        with atomic_binary(tmp_path / "x") as f:
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
            f.write(b"x")
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        def theirs(signum: int, frame: object) -> None:
            return None

        signal.signal(signal.SIGTERM, theirs)  # a handler of someone else's is left alone
        with atomic_binary(tmp_path / "y") as f:
            assert signal.getsignal(signal.SIGTERM) is theirs
            f.write(b"y")
        assert signal.getsignal(signal.SIGTERM) is theirs
    finally:
        signal.signal(signal.SIGTERM, original)


# --- stdout --------------------------------------------------------------------------------------------------------

@posix_only
@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_closed_stdout_is_one_line_and_status_one(fmt: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "servescope", "trace", *fmt, str(EXAMPLE)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, timeout=120,
                         preexec_fn=lambda: os.close(1))  # noqa: PLW1509  (`servescope ... >&-`)
    assert out.returncode == 1
    assert out.stderr == "servescope: cannot write the output: stdout is closed (use -o FILE)\n"


@posix_only
def test_read_only_stdout_is_one_line_and_status_one() -> None:
    with open(os.devnull) as read_only:  # `servescope ... 1</dev/null`: every write fails
        out = subprocess.run([sys.executable, "-m", "servescope", "trace", "--json", str(EXAMPLE)], stdout=read_only,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == "servescope: cannot write the output: Bad file descriptor\n"


# --- read errors say read ------------------------------------------------------------------------------------------

def _unreadable(name: str) -> Callable[..., object]:
    real = Path.open

    def fake(self: Path, *args: object, **kwargs: object) -> object:
        if self.name == name:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    return fake


def test_unreadable_trace_says_read_not_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _copy(EXAMPLE, tmp_path, "rank1.json.gz")
    monkeypatch.setattr(Path, "open", _unreadable("rank1.json.gz"))
    result = CliRunner().invoke(main, ["trace", str(t)])
    assert result.exit_code == 1
    assert result.stderr == f"servescope: {t}: cannot be read: Permission denied\n"


def test_unreadable_rank_is_skipped_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _copy(EXAMPLE, tmp_path, "rank0.json.gz")
    _copy(EXAMPLE, tmp_path, "rank1.json.gz")
    monkeypatch.setattr(Path, "open", _unreadable("rank1.json.gz"))
    result = CliRunner().invoke(main, ["trace", str(tmp_path), "--workers", "1", "--json"])
    assert result.exit_code == 0, result.stderr
    assert "cannot write" not in result.stderr
    assert "rank1.json.gz: skipped (cannot be read: Permission denied)" in result.stderr


def test_an_os_error_with_a_file_name_is_a_read_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last line of defence (OneLineGroup.main): an OSError naming a file that no reader turned into a
    ServescopeError is about reading it, never "cannot write the output"."""
    import servescope.analysis.analyze as analyze

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError(5, "Input/output error", "/some/trace.json")

    import servescope.advise.peaks as peaks

    monkeypatch.setattr(analyze, "analyze_trace", boom)
    monkeypatch.setattr(peaks, "analyze_trace", boom)  # `trace` analyses through advise.analyze (peaks resolved)
    result = CliRunner().invoke(main, ["trace", str(EXAMPLE)])
    assert result.exit_code == 1
    assert result.stderr == "servescope: cannot read /some/trace.json: Input/output error\n"
