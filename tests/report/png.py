"""A small PNG reader for the screenshot test (no imaging library is a dependency): 8-bit RGB/RGBA,
non-interlaced, which is what Chromium writes."""

from __future__ import annotations

import struct
import zlib

import numpy as np

_CHANNELS = {2: 3, 6: 4}  # colour type -> channels (RGB, RGBA)


def read_png(path) -> np.ndarray:
    """The image as a ``(height, width, channels)`` uint8 array."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    pos, idat, header = 8, bytearray(), None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert header is not None, "no IHDR chunk"
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in _CHANNELS or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}, interlace {interlace}")
    bpp = _CHANNELS[colour]
    raw = np.frombuffer(zlib.decompress(bytes(idat)), dtype=np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.uint8)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:]
        if kind == 0:
            row = line.copy()
        elif kind == 1:  # Sub: a running sum per channel (mod 256)
            row = np.cumsum(line.reshape(width, bpp).astype(np.int64), axis=0).astype(np.uint8).reshape(-1)
        elif kind == 2:  # Up
            row = (line.astype(np.int64) + prev).astype(np.uint8)
        else:  # Average, Paeth: each byte needs the one decoded just before it
            row = _sequential(kind, line.tolist(), prev.tolist(), bpp)
        out[y] = row
        prev = row
    return out.reshape(height, width, bpp)


def _sequential(kind: int, line: list[int], prev: list[int], bpp: int) -> np.ndarray:
    row = [0] * len(line)
    for i, f in enumerate(line):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i]
        if kind == 3:
            row[i] = (f + ((a + b) >> 1)) & 0xFF
            continue
        c = prev[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        row[i] = (f + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    return np.array(row, dtype=np.uint8)
