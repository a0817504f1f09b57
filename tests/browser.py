"""A headless Chromium driven over the Chrome DevTools Protocol, for the HTML report tests (stdlib only).

Does: find Debian's chromium (installing it with apt-get when missing and this process is root), start it
headless with a DevTools port, open one page, record console errors, uncaught exceptions, log errors and every
network request the page makes, evaluate JavaScript, and take a PNG screenshot; decode a PNG to pixels in pure
Python (zlib + PNG row filters) so a test can tell a blank screenshot from a drawn one.
Does not: need any Python package beyond the standard library (a minimal RFC 6455 client is below).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium(install: bool = True) -> tuple[str | None, str]:
    """(path of a chromium binary or None, why not). Installs Debian's chromium when missing and allowed."""
    for n in NAMES:
        if p := shutil.which(n):
            return p, ""
    if not install:
        return None, "no chromium on PATH"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None, "no chromium on PATH, and apt-get is not available as root to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, timeout=300, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, capture_output=True,
                       timeout=600, env=env)
    except (subprocess.SubprocessError, OSError) as exc:
        return None, f"apt-get install chromium failed: {str(exc)[:200]}"
    for n in NAMES:
        if p := shutil.which(n):
            return p, ""
    return None, "apt-get installed chromium but no binary is on PATH"


class WebSocket:
    """The client half of RFC 6455, enough for DevTools: masked text frames out, (fragmented) frames in."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        rest = url.removeprefix("ws://")
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the websocket: {head[:200]!r}")

    def send(self, text: str) -> None:
        data = text.encode()
        n = len(data)
        header = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
                                  if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            buf += chunk
        return bytes(buf)

    def recv(self) -> str:
        parts = []
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            if b0 & 0x0F == 0x8:
                raise ConnectionError("DevTools closed the websocket")
            if b0 & 0x0F in (0x9, 0xA):  # ping/pong: not sent by DevTools to clients in practice
                continue
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def close(self) -> None:
        self.sock.close()


class Page:
    """One headless Chromium with one page; events recorded in `console_errors` and `requests`."""

    def __init__(self, chromium: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="servescope-chromium-")
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "--window-size=1280,2000",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self.ws = WebSocket(url)
        self.next_id = 0
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        for method in ("Runtime.enable", "Log.enable", "Network.enable", "Page.enable"):
            self.call(method)

    def _record(self, msg: dict[str, Any]) -> None:
        m, p = msg.get("method"), msg.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
        elif m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.console_errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            self.console_errors.append(p["entry"]["text"])
        elif m == "Network.requestWillBeSent":
            self.requests.append(p["request"]["url"])

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        mine = self.next_id
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mine:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self._record(msg)

    def wait_for(self, method: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        self.ws.sock.settimeout(timeout_s)
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self._record(msg)
            if msg.get("method") == method:
                return
        raise TimeoutError(method)

    def open(self, url: str, timeout_s: float = 60.0) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired", timeout_s)

    def evaluate(self, expression: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluate failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot_png(self, width: int = 1280, height: int = 2000, scale: float = 0.25) -> bytes:
        """The top `width` × `height` CSS pixels of the page, scaled (a small PNG decodes fast in pure Python)."""
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": scale}
        return base64.b64decode(self.call("Page.captureScreenshot", format="png", clip=clip)["data"])

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def png_pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit, non-interlaced truecolour PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def ink_fraction(png: bytes, step: int = 4) -> tuple[float, int]:
    """(fraction of sampled pixels that differ from the most common colour, distinct colours sampled)."""
    width, height, rows = png_pixels(png)
    channels = len(rows[0]) // width if rows else 3
    colours: Counter[bytes] = Counter()
    for y in range(0, height, step):
        row = rows[y]
        for x in range(0, width, step):
            colours[row[x * channels:x * channels + 3]] += 1
    total = sum(colours.values())
    return (1.0 - colours.most_common(1)[0][1] / total if total else 0.0), len(colours)
