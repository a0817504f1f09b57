"""Inflate gzip data member by member in bounded pieces (multi-member files, zero padding, trailing junk), under a
ceiling that stops a decompression bomb before it is held.

Input is fed in small slices rather than using `decompress(max_length)`: past a member's end, zlib's
`unconsumed_tail` and `unused_data` overlap under max_length, which made a padded file loop forever.

The ceiling (`Ceiling`): a stream may inflate to RATIO_LIMIT × its compressed size or SIZE_FLOOR_BYTES, whichever
is larger (real Kineto traces inflate 5–30×; a bomb of whitespace or of one repeated event 300–1,000×), and, when
the caller holds the whole inflated text, no further than the memory the machine has available. It is checked
on every piece, and once EARLY_BYTES have inflated the total is projected from the share of the input consumed:
a stream that has kept above the ratio and is on course to pass the ceiling stops there (a 4 GB bomb in a 4 MB
file stops after ~64 MB, well under a second), so no piece past the ceiling is ever yielded.
`SERVESCOPE_MAX_INFLATE_GB` (environment) replaces the ratio rule by a fixed ceiling in GB.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from servescope._paths import available_memory_bytes

FEED_BYTES = 256 << 10  # compressed bytes per call at most: output per call stays in the low MB for a trace
MIN_FEED_BYTES = 8 << 10  # ... at least; deflate inflates at most ~1,032x, so a first feed gives <= ~8 MB
PIECE_BYTES = 8 << 20  # inflated bytes aimed at per call: feeds shrink as the ratio so far grows (a bomb)
RATIO_LIMIT = 200  # inflated / compressed beyond which a large stream is a bomb, not a trace
SIZE_FLOOR_BYTES = 2 << 30  # ... and only past this many inflated bytes: small files may compress as they like
EARLY_BYTES = 64 << 20  # inflated bytes after which the total is projected from the share of input consumed
CEILING_ENV = "SERVESCOPE_MAX_INFLATE_GB"


class GzipCutOff(Exception):
    """The last member ends before its end-of-stream marker (a file cut off while written)."""


class GzipTrailingJunk(Exception):
    """Bytes after the last complete member that are not a gzip member (the data before them is whole)."""


class GzipBomb(Exception):
    """The stream inflates (or, projected, will inflate) past its `Ceiling`; args[0] is the one-line reason
    without the file name: 'decompresses beyond N GB (…)'."""


@dataclass(frozen=True)
class Ceiling:
    """The most bytes a stream of `compressed_bytes` may inflate to, and why (for the message)."""

    limit_bytes: int
    compressed_bytes: int
    why: str
    ratio: float | None = RATIO_LIMIT  # None: no projection (a fixed ceiling from the environment)

    @staticmethod
    def for_input(compressed_bytes: int, held_whole: bool) -> Ceiling:
        """The ceiling of a gzip input of `compressed_bytes`; `held_whole`: the caller keeps all inflated bytes
        at once (the exact path), so the machine's available memory bounds it too."""
        fixed = _env_ceiling()
        if fixed is not None:
            return Ceiling(fixed, compressed_bytes, f"{CEILING_ENV}={os.environ[CEILING_ENV]}", ratio=None)
        limit = max(RATIO_LIMIT * compressed_bytes, SIZE_FLOOR_BYTES)
        why = f"{RATIO_LIMIT}x its {_size(compressed_bytes)} of gzip; real traces inflate 5-30x"
        available = available_memory_bytes() if held_whole else None
        if available is not None and available < limit:
            return Ceiling(available, compressed_bytes, f"the {_size(available)} of memory available")
        return Ceiling(limit, compressed_bytes, why)

    def check(self, inflated: int, consumed: int) -> None:
        """Raise GzipBomb when `inflated` bytes (from `consumed` compressed bytes) pass the ceiling, or are on
        course to (projected over the whole input, above the ratio)."""
        if inflated > self.limit_bytes:
            raise GzipBomb(f"decompresses beyond {_gb(self.limit_bytes)} ({self.why})")
        if self.ratio is None or inflated < EARLY_BYTES or consumed <= 0:
            return
        projected = inflated * self.compressed_bytes / consumed
        if inflated > self.ratio * consumed and projected > self.limit_bytes:
            raise GzipBomb(f"decompresses beyond {_gb(self.limit_bytes)} ({inflated / consumed:,.0f}x so far: "
                           f"~{_gb(projected)} projected; ceiling {self.why})")


def _env_ceiling() -> int | None:
    text = os.environ.get(CEILING_ENV, "").strip()
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return int(value * 1e9) if value is not None and 0 < value < 1e12 else None


def _gb(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:,.1f} GB"
    return f"{n / 1e6:,.0f} MB" if n >= 1e7 else f"{n / 1e6:,.1f} MB"


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n:,} bytes"


def _feed(inflated: int, consumed: int) -> int:
    """Compressed bytes to feed next: about PIECE_BYTES of output at the ratio so far, within the bounds."""
    if consumed <= 0:
        return MIN_FEED_BYTES
    ratio = max(inflated / consumed, 1.0)
    return max(MIN_FEED_BYTES, min(FEED_BYTES, int(PIECE_BYTES / ratio)))


def inflate_members(raw: bytes | memoryview, ceiling: Ceiling | None = None,
                    consumed: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """Yield inflated pieces of every member. Raises zlib.error (corrupt member), GzipCutOff, GzipTrailingJunk,
    and GzipBomb before yielding a piece that takes the total past `ceiling`. `consumed(bytes)`: the compressed
    bytes fed so far, after each feed (progress)."""
    view = memoryview(raw)
    pos, members, inflated = 0, 0, 0
    while pos < len(view):
        if members and view[pos : pos + 2] != b"\x1f\x8b":
            raise GzipTrailingJunk(len(view) - pos)
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while pos < len(view) and not inflater.eof:
            piece = view[pos : pos + _feed(inflated, pos)]
            pos += len(piece)
            out = inflater.decompress(piece)
            inflated += len(out)
            if ceiling is not None:
                ceiling.check(inflated, pos)
            if consumed is not None:
                consumed(pos)
            yield out
        yield inflater.flush()
        if not inflater.eof:
            raise GzipCutOff
        pos -= len(inflater.unused_data)
        members += 1
        while pos < len(view) and view[pos] == 0:  # zero padding after a member
            pos += 1
