"""The CLI group and what every command shares: one-line errors, the output options, the console, scenario options.

Commands live one module each next to this one (trace_cmd, model_cmd, plan_cmd, ...) and register on `main`.

Output, the same on every command: `--format text|json|csv|html`, `--json` (alias of `--format json`) and
`-o FILE` (written atomically: a temporary file in the same folder renamed over FILE, so an error leaves nothing
half-written; without --format, FILE's suffix .json/.csv/.html/.htm picks the format). A command opts in with
`@output_options` (below the `@main.command()` line, above `@one_line_errors`), takes an `out: Output` argument,
builds its document with a `servescope.report` function, and ends with one call:

    @main.command()
    @click.argument("path")
    @output_options
    @one_line_errors
    def mycmd(path: str, out: Output) -> None:
        result = library_call(path)
        out.emit(my_document(result), text=lambda console: render_my_text(result, console),
                 warnings=result.warnings)

`emit` renders JSON/CSV/HTML from the document (servescope.report.render; CSV and HTML dispatch on the
document's `schema`: add a table in report/csv_tables.py and a section in report/html.py for a new schema) and
text with the given Rich renderer; warnings go to stderr for the machine formats (text shows its own).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

import servescope.cli._memory  # noqa: F401  (sets the allocator for a big input before Polars loads)
from servescope.cli._commands import format_commands
from servescope.cli._memory import set_max_memory
from servescope.cli._process import fewer_gc_passes, one_blas_thread
from servescope.cli._progress import showing_progress
from servescope.errors import OutputError, ServescopeError

if TYPE_CHECKING:
    from rich.console import Console

# Commands import their library lazily: `servescope trace` on a big file should not pay for the model's imports.
# Their modules load lazily too (LazyCommands): `servescope trace` imports trace_cmd only, not the option tables of
# model, plan and simulate (specs.engines reads the engine TOML files to build them) or Rich (on first render).

F = TypeVar("F", bound=Callable[..., Any])


INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
INTERRUPTED = "servescope: interrupted; nothing written"


# Notes on how options were read (`--quant fp4` is nvfp4, `--gpu h100` is h100_sxm): printed on stderr after the
# result (Output.emit), dropped when the command fails (its error stays one line).
_NOTES: list[str] = []


def note(message: str) -> None:
    """A note for stderr, said once the command's result is written."""
    _NOTES.append(message)


def one_line_errors(fn: F) -> F:
    """Turn library errors into `servescope: <message>` on stderr and exit code 1, without a traceback.

    The last line of defence, in the same style: Ctrl-C (KeyboardInterrupt) is status 130 and one line (an -o
    file is written only at the end, through report.atomic, which removes its temporary file on any exception);
    a MemoryError (NumPy's _ArrayMemoryError included) or a panic inside Polars (pyo3_runtime.PanicException, a
    BaseException) is one line and status 1. The readers and the simulation refuse what will not fit before they
    allocate (issue 21); these catch what a budget did not foresee."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _NOTES.clear()  # notes belong to this command only (library callers may run several in one process)
        try:
            return fn(*args, **kwargs)
        except ServescopeError as exc:
            _NOTES.clear()  # an error is one line: notes about how the options were read would only add lines
            click.echo(f"servescope: {_inert(str(exc))}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            interrupted()
        except MemoryError as exc:
            click.echo(f"servescope: out of memory{_detail(exc)}; nothing written", err=True)
            sys.exit(1)
        except BaseException as exc:
            if not is_library_panic(exc):
                raise
            click.echo(f"servescope: internal error in Polars (a panic: {_first_line(exc)}), most often out of "
                       "memory; nothing written", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def _inert(text: str, one_line: bool = True) -> str:
    """An error or warning line with control characters from inputs shown as \\xNN (report.inert), never obeyed."""
    from servescope.report.inert import terminal_safe

    return terminal_safe(text, one_line=one_line)


def interrupted() -> NoReturn:
    """Ctrl-C: one line, status 130."""
    with contextlib.suppress(OSError, ValueError):
        click.echo(INTERRUPTED, err=True)
    sys.exit(INTERRUPTED_STATUS)


def is_library_panic(exc: BaseException) -> bool:
    """A Rust panic surfaced through pyo3 (Polars): `pyo3_runtime.PanicException`, which derives from
    BaseException so that `except Exception` does not swallow it."""
    return any(cls.__name__ == "PanicException" for cls in type(exc).__mro__)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _detail(exc: MemoryError) -> str:
    text = _first_line(exc) if str(exc).strip() else ""
    return f" ({text})" if text else ""


class OneLineGroup(click.Group):
    """A group whose usage errors (bad flag values, unknown options) are one line and exit code 1, like library
    errors, instead of Click's multi-line usage block and exit code 2."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.ClickException as exc:
            click.echo(f"servescope: {_inert(exc.format_message(), one_line=False)}", err=True)  # usage: lines
            sys.exit(1)
        except click.Abort as exc:  # Click turns a KeyboardInterrupt outside a command's body into Abort
            if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
                interrupted()
            click.echo("servescope: aborted", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            interrupted()
        except BrokenPipeError:  # the reader of stdout left early (`| head`): nothing to report
            _drop_stdout()
            sys.exit(1)
        except OSError as exc:
            # An OS error no reader turned into a ServescopeError. With a file name it came from opening or reading
            # a file (output files are written through report.atomic, whose errors are OutputErrors); without
            # one it came from writing the result to stdout (disk full, device error). One line, not a traceback.
            if exc.filename:
                click.echo(f"servescope: cannot read {exc.filename}: {exc.strerror or exc}", err=True)
                sys.exit(1)
            _drop_stdout()
            click.echo(f"servescope: cannot write the output: {exc.strerror or exc}", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _drop_stdout() -> None:
    """Point stdout at /dev/null so what is still buffered for a reader that is gone (or a full disk) cannot
    fail again when the process flushes at exit."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# --- never overwrite an input -----------------------------------------------------------------------------


from servescope.cli._guard import InputOption, input_collision, input_paths, refuse_input_as_output  # noqa: E402,F401


class GuardedCommand(click.Command):
    """Every command of `main`: before it runs, -o may not name one of its inputs (refuse_input_as_output); it
    takes `--max-memory`; long work it reports (servescope.progress) shows bars on a terminal (showing_progress)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(click.Option(
            ["--max-memory"], metavar="SIZE", expose_value=False, is_eager=True, callback=set_max_memory,
            help="Memory this run may use (e.g. 2GB, 512MiB) instead of what the machine has available: what a "
                 "trace reader may hold whole, what a simulation may allocate."))

    def invoke(self, ctx: click.Context) -> Any:
        refuse_input_as_output(ctx)
        with showing_progress():
            return super().invoke(ctx)


OneLineGroup.format_commands = format_commands  # type: ignore[method-assign]
OneLineGroup.command_class = GuardedCommand
OneLineGroup.group_class = type  # subgroups (`specs`) are OneLineGroups, so their commands are guarded too


@click.group(cls=OneLineGroup)
@click.version_option()
def main() -> None:
    """servescope: LLM-serving traces, performance model, and plans."""


def run() -> NoReturn:
    """The console entry point (`servescope`, `python -m servescope`): `main`, then `exit_now` with its status.

    Library and test callers use `main` (Click's runner): only a process that is about to end may skip teardown."""
    fewer_gc_passes()
    one_blas_thread()
    try:
        main()
    except SystemExit as exc:
        exit_now(exc.code)
    except KeyboardInterrupt:  # Ctrl-C before a command ran or after it ended
        with contextlib.suppress(OSError, ValueError):
            os.write(2, f"{INTERRUPTED}\n".encode())
        exit_now(INTERRUPTED_STATUS)
    exit_now(0)


def exit_now(code: object) -> NoReturn:
    """End the process without tearing the interpreter down: flush stdout/stderr, run the atexit handlers (Ray's
    shutdown of a local instance, coverage, multiprocessing), then os._exit. Module teardown after a trace is
    pure cost: ~0.12 s of the 68 MB trace's ~1.3 s (Polars' and NumPy's modules and heaps freed one by one;
    bench/RESULTS.md "interpreter exit"), and the OS frees it all at once. A stdout closed early (`| head`)
    ends with status 1 and no "Exception ignored" lines."""
    status = code if isinstance(code, int) else 0 if code is None else 1
    if code is not None and not isinstance(code, int) and sys.stderr is not None:
        print(code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # started with the descriptor closed (`>&-`): nothing was written to it
            continue
        try:
            stream.flush()
        except BrokenPipeError:  # the reader left early: nothing to say, and no one to say it to on stdout
            status = status or 1
        except (OSError, ValueError) as exc:  # disk full, stream closed: say so in one line if stderr still works
            status = status or 1
            with contextlib.suppress(OSError, ValueError):
                os.write(2, f"servescope: cannot write the output: {exc}\n".encode())
    atexit._run_exitfuncs()
    os._exit(status)


FORMATS = ("text", "json", "csv", "html")
TEXT_FILE_WIDTH = 120  # text written with -o: tables as wide as a piped terminal


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (report.atomic): a failure leaves nothing half-written."""
    from servescope.report.atomic import write_text_atomically

    write_text_atomically(path, text)


@dataclass(frozen=True)
class Output:
    """Where and how a command's result goes: `format` (text, json, csv, html) to `path` (None: stdout)."""

    format: str = "text"
    path: Path | None = None

    def emit(self, document: dict[str, Any], text: Callable[[Console], None] | None = None,
             warnings: Sequence[str] = (), pieces: Callable[[], Iterable[str]] | None = None) -> None:
        """Render the document (or, for text, call `text` with a console) and write it; warnings to stderr
        unless the text renderer shows them. All rendering happens before anything is written, except for JSON
        too big to hold twice (`report.render.streams`: a 1 M-row validation), written in pieces as it is made,
        and JSON the caller makes in `pieces` (the document's text; `document` is then not read)."""
        from servescope.report.render import json_pieces, render, streams

        if self.path is None and sys.stdout is None:  # started with stdout closed (`>&-`): say so, exit 1
            raise OutputError("cannot write the output: stdout is closed (use -o FILE)")
        as_json = self.format == "json" or (self.format == "text" and text is None)
        if as_json and pieces is not None:
            self._write_pieces(pieces())
        elif as_json and streams(document):
            self._write_pieces(json_pieces(document))
        else:
            body = self._text(text) if self.format == "text" and text is not None else render(
                document, "json" if self.format == "text" else self.format)
            if self.path is not None:
                write_atomically(self.path, body if body.endswith("\n") else body + "\n")
            elif body:
                click.echo(body.rstrip("\n"))
        if self.format != "text" or text is None:
            for w in warnings:
                click.echo(f"servescope: warning: {_inert(w)}", err=True)
        for n in dict.fromkeys(_NOTES):  # what the command read its options as: said once the result is out
            click.echo(f"servescope: {_inert(n)}" if n.startswith("warning: ") else f"servescope: note: {_inert(n)}",
                       err=True)
        _NOTES.clear()

    def _write_pieces(self, pieces: Iterable[str]) -> None:
        """Write text pieces and a final newline to `path` (atomically: report.atomic) or stdout."""
        if self.path is None:
            for piece in pieces:
                click.echo(piece, nl=False)
            click.echo("")
            return
        from servescope.report.atomic import atomic_binary

        with atomic_binary(self.path) as fh:
            for piece in pieces:
                fh.write(piece.encode())
            fh.write(b"\n")

    def _text(self, draw: Callable[[Console], None]) -> str:
        if self.path is None:
            draw(_console())
            return ""
        buf = io.StringIO()
        from servescope.report.fit import FittingConsole

        draw(FittingConsole(file=buf, width=TEXT_FILE_WIDTH, color_system=None, force_terminal=False, soft_wrap=False))
        return buf.getvalue()


def _pick_format(fmt: str | None, as_json: bool, path: Path | None) -> str:
    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json and --format {fmt} disagree; use one of them")
    if as_json:
        return "json"
    if fmt is not None:
        return fmt
    if path is None:
        return "text"
    from servescope.errors import OutputError
    from servescope.report.render import SUFFIXES, suffix_error  # noqa: I001  (the one suffix table)

    if (error := suffix_error(str(path), fmt)) is not None:  # -o plan.pdf must not silently write text
        raise OutputError(error)
    return SUFFIXES.get(path.suffix.lower(), "text")


def output_options(fn: F) -> F:
    """Add `--format`, `--json` and `-o/--output` to a command and pass it `out: Output` instead."""

    @wraps(fn)
    def wrapper(*args: Any, output_format: str | None, as_json: bool, output_path: Path | None,
                **kwargs: Any) -> Any:
        ctx = click.get_current_context(silent=True)
        if ctx is not None and not isinstance(ctx.command, GuardedCommand):  # registered some other way
            refuse_input_as_output(ctx)
        try:
            fmt = _pick_format(output_format, as_json, output_path)
        except ServescopeError as exc:  # a bad -o suffix: one line, as every library error (one_line_errors)
            click.echo(f"servescope: {exc}", err=True)
            sys.exit(1)
        return fn(*args, out=Output(fmt, output_path), **kwargs)

    options = [
        click.option("--format", "output_format", type=click.Choice(FORMATS), default=None,
                     help="Output format (default text; or from -o FILE's suffix)."),
        click.option("--json", "as_json", is_flag=True, help="Same as --format json: one JSON document only."),
        click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False, path_type=Path),
                     default=None, help="Write to FILE (atomically) instead of stdout."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


def _console() -> Console:
    """A terminal console; when output is piped, 120 columns so tables stay readable in files and CI logs, unless
    COLUMNS says otherwise (a positive integer)."""
    from servescope.report.fit import FittingConsole

    console = FittingConsole()
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    return FittingConsole(width=int(columns) if columns.isdigit() and 0 < len(columns) <= 6 and int(columns) > 0
                          else 120)
