"""Inflate gzip data member by member in bounded pieces (multi-member files, zero padding, trailing junk).

Input is fed in small slices rather than using `decompress(max_length)`: past a member's end, zlib's
`unconsumed_tail` and `unused_data` overlap under max_length, which made a padded file loop forever.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

FEED_BYTES = 256 << 10  # compressed bytes per call: output per call stays in the low MB


class GzipCutOff(Exception):
    """The last member ends before its end-of-stream marker (a file cut off while written)."""


class GzipTrailingJunk(Exception):
    """Bytes after the last complete member that are not a gzip member (the data before them is whole)."""


def inflate_members(raw: bytes | memoryview) -> Iterator[bytes]:
    """Yield inflated pieces of every member. Raises zlib.error (corrupt member), GzipCutOff, GzipTrailingJunk."""
    view = memoryview(raw)
    pos, members = 0, 0
    while pos < len(view):
        if members and view[pos : pos + 2] != b"\x1f\x8b":
            raise GzipTrailingJunk(len(view) - pos)
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while pos < len(view) and not inflater.eof:
            piece = view[pos : pos + FEED_BYTES]
            pos += len(piece)
            yield inflater.decompress(piece)
        yield inflater.flush()
        if not inflater.eof:
            raise GzipCutOff
        pos -= len(inflater.unused_data)
        members += 1
        while pos < len(view) and view[pos] == 0:  # zero padding after a member
            pos += 1
