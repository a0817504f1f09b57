"""Rank files as Ray tasks, without the network: start (or join) Ray local-only and with deadlines.

Does: run one function per rank file as a Ray task (`run_on_ray`, used by analysis.ranks). Ray is started with its
usage statistics off, its node address taken on loopback (no lookup towards a public resolver), its cloud probes
sent to a loopback proxy that refuses at once, and `RAY_ADDRESS` ignored for a local Ray, all restored afterwards;
a local Ray first checks that loopback works, a cluster address that it answers; start-up and the first task each
have a deadline (RAY_DEADLINE_S), so a Ray that cannot start says so in one line instead of hanging.
Does not: analyse anything (the function is the caller's) or import Ray before it is asked to run.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from servescope.errors import ServescopeError
from servescope.progress import report

T = TypeVar("T")
LOCAL_RAY = "local"

RAY_DEADLINE_S = 30.0
_RAY_QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_PROMPT_ENABLED": "0"}
_REFUSING_PROXY = "http://127.0.0.1:1"
_RAY_LOCAL_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "http_proxy": _REFUSING_PROXY,
                   "HTTP_PROXY": _REFUSING_PROXY, "https_proxy": _REFUSING_PROXY, "HTTPS_PROXY": _REFUSING_PROXY,
                   "no_proxy": "127.0.0.1,localhost,::1", "NO_PROXY": "127.0.0.1,localhost,::1"}
_NO_RAY = "; run without --ray (worker processes on this machine)"


@contextmanager
def _environ(values: dict[str, str], drop: Sequence[str] = ()) -> Iterator[None]:
    """os.environ with `values` set and `drop` removed for the block (Ray's processes inherit it), then as before."""
    saved = {k: os.environ.get(k) for k in (*values, *drop)}
    os.environ.update(values)
    for k in drop:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _ray_init(ray: Any, address: str, deadline_s: float) -> None:
    """ray.init local-only (LOCAL_RAY) or at `address`, after checking in about a second that it can answer at all
    (loopback works; the address takes a TCP connection), and under an alarm of `deadline_s` in the main thread
    (Ray's own waits for a GCS that never answers run for many minutes). ray.init itself must run in the main
    thread: a Ray started from another thread hangs the main thread's first task."""
    local = address == LOCAL_RAY
    where = "a local Ray" if local else f"Ray at {address!r}"
    problem = _loopback_problem() if local else _address_problem(address, min(deadline_s, 10.0))
    if problem is not None:
        raise ServescopeError(f"cannot start or join {where}: {problem}{_NO_RAY}")
    # "local": a new local instance, never a cluster named in Ray's address file (ray_current_cluster), live or stale
    kwargs: dict[str, Any] = {"address": "local" if local else address, "include_dashboard": False,
                              "log_to_driver": False, "logging_level": logging.ERROR}
    if local:
        kwargs["_node_ip_address"] = "127.0.0.1"
    constants = sys.modules.get("ray._private.ray_constants")
    cluster = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    with _environ(_RAY_LOCAL_ONLY if local else {}, drop=("RAY_ADDRESS",) if local else ()), _alarm(deadline_s):
        if local and constants is not None:  # read when Ray was imported: the environment alone is too late
            constants.ENABLE_RAY_CLUSTER = False  # type: ignore[attr-defined]
        try:
            ray.init(**kwargs)
        except _Deadline:
            raise ServescopeError(f"cannot start or join {where}: no answer within {deadline_s:.0f} s{_NO_RAY}") from None
        except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
            raise ServescopeError(f"cannot start or join {where}: {_first_line(exc)}{_NO_RAY}") from None
        finally:
            if local and constants is not None:
                constants.ENABLE_RAY_CLUSTER = cluster  # type: ignore[attr-defined]


class _Deadline(Exception):
    """Raised in the main thread by _alarm's SIGALRM."""


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Raise _Deadline in the block after `seconds` (main thread with no SIGALRM handler of its own; else no-op)."""
    usable = (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
              and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None))
    if not usable:
        yield
        return

    def ring(signum: int, frame: object) -> None:
        raise _Deadline

    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def _loopback_problem() -> str | None:
    """Why a local Ray could not work here (its processes talk over 127.0.0.1), or None: a TCP connection from
    this process to itself on loopback, which a network namespace without a usable `lo` refuses at once."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=2.0):
                pass
    except OSError as exc:
        return f"loopback (127.0.0.1) does not work here ({exc.strerror or exc})"
    return None


# HTTP/2's client connection preface and an empty SETTINGS frame (RFC 9113 §3.4): a gRPC server — Ray's GCS is
# one — answers with a SETTINGS frame of its own (frame type 0x4, the fourth byte of a frame's 9-byte header).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _address_problem(address: str, timeout_s: float) -> str | None:
    """Why `address` (host:port, or ray://host:port) will not answer, or None; None too when it is not of that
    form ("auto": Ray finds the cluster itself). One TCP connection to that address only, which must answer an
    HTTP/2 preface as a gRPC server (Ray's GCS and its client server both are) does within `timeout_s`: Ray's own client waits minutes, in native code that no
    alarm interrupts, on a port that accepts connections and says nothing."""
    hostport = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as conn:
            conn.sendall(_H2_PREFACE)
            head = conn.recv(9)
    except TimeoutError:
        return f"no answer from {hostport} within {timeout_s:.0f} s"
    except OSError as exc:
        return f"{hostport}: {exc.strerror or exc}"
    if len(head) < 4 or head[3] != 0x04:
        return f"{hostport} answers, but not as a Ray cluster does (no gRPC)"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _ping() -> bool:
    return True


def run_on_ray(fn: Callable[[str, int], T], files: Sequence[str], top_n: int, address: str,
               deadline_s: float = RAY_DEADLINE_S, keep: Callable[[T], T] | None = None,
               progress: str | None = None) -> list[T]:
    """`fn(file, top_n)` for each file as a Ray task, in file order; Ray started local-only (or joined at
    `address`) with the deadlines and network guards of the module docstring. Results are fetched as tasks
    finish, each passed through `keep` (the caller's compaction) and counted as `progress` (servescope.progress)."""
    for key, value in _RAY_QUIET.items():  # before Ray is imported: its processes read them at start
        os.environ[key] = value
    try:
        import ray  # type: ignore[import-not-found]
    except ImportError:
        raise ServescopeError("--ray needs Ray: pip install 'servescope[ray]'") from None
    if not ray.is_initialized():
        _ray_init(ray, address, deadline_s)
        try:  # a Ray that started but cannot run a task (no worker can start or connect) is no Ray either
            ray.get(ray.remote(_ping).remote(), timeout=deadline_s)
        except ray.exceptions.GetTimeoutError:
            raise ServescopeError(f"Ray started but ran no task within {deadline_s:.0f} s{_NO_RAY}") from None
    task: Any = ray.remote(fn)
    try:
        return _collect(ray, [task.remote(f, top_n) for f in files], keep, progress)
    except ray.exceptions.RayTaskError as exc:  # a task's own error, without Ray's traceback text around it
        if isinstance(exc.cause, ServescopeError):
            raise exc.cause from None
        raise


def _collect(ray: Any, refs: list[Any], keep: Callable[[T], T] | None, progress: str | None) -> list[T]:
    """Each task's result as it finishes, in the order of `refs` (emptied: a fetched result's reference is dropped,
    so Ray's object store frees it; the caller's `keep` bounds what this process holds)."""
    index, total = {ref: i for i, ref in enumerate(refs)}, len(refs)
    results: dict[int, T] = {}
    pending, refs[:] = list(refs), []
    while pending:
        ready, pending = ray.wait(pending, num_returns=min(len(pending), 16), timeout=1.0)
        for ref in ready:
            value = ray.get(ref)
            results[index.pop(ref)] = keep(value) if keep is not None else value
        if ready and progress is not None and total > 1:
            report(progress, len(results), total)
    return [results[i] for i in range(total)]
