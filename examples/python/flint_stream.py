"""Read and write the records of a Flint `process` vertex (stdlib only).

A `process` vertex runs this program once per subtask and talks to it over stdin/stdout
(docs/process-operator.md). Records are (key, value) with key a str and value None, an int or a
str; each input record also says which input (incoming edge) it came from.

    import flint_stream

    for input_index, key, value in flint_stream.records():
        flint_stream.emit(key, value)

The framing is the vertex's `framing` setting, which Flint passes as FLINT_FRAMING (`json` or
`bincode`). The job's artifacts sit under their names in the program's working directory, so a
shipped script imports a shipped module (this one) from there.
"""

import json
import os
import struct
import sys

_FRAMING = os.environ.get("FLINT_FRAMING", "json")
_stdin = sys.stdin.buffer
_stdout = sys.stdout.buffer


# --- bincode 2 (standard configuration): varint integers, as Flint's codec writes them ---

def _varint(n):
    if n < 251:
        return bytes((n,))
    if n < 1 << 16:
        return b"\xfb" + struct.pack("<H", n)
    if n < 1 << 32:
        return b"\xfc" + struct.pack("<I", n)
    return b"\xfd" + struct.pack("<Q", n)


def _read_varint(buf, pos):
    first = buf[pos]
    if first < 251:
        return first, pos + 1
    size = {251: 2, 252: 4, 253: 8}.get(first)
    if size is None:
        raise ValueError("unsupported varint marker %d" % first)
    fmt = {2: "<H", 4: "<I", 8: "<Q"}[size]
    return struct.unpack_from(fmt, buf, pos + 1)[0], pos + 1 + size


def _zigzag(n):
    return (n << 1) ^ (n >> 63)


def _unzigzag(n):
    return (n >> 1) ^ -(n & 1)


def _encode_str(s):
    data = s.encode("utf-8")
    return _varint(len(data)) + data


def _decode_str(buf, pos):
    length, pos = _read_varint(buf, pos)
    return buf[pos:pos + length].decode("utf-8"), pos + length


def _encode_value(value):
    if value is None:
        return b"\x00"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError("a Flint value is None, an int or a str, not %r" % (value,))
    if isinstance(value, int):
        return b"\x01" + _varint(_zigzag(value) & 0xFFFFFFFFFFFFFFFF)
    return b"\x02" + _encode_str(value)


def _decode_value(buf, pos):
    variant, pos = _read_varint(buf, pos)
    if variant == 0:
        return None, pos
    if variant == 1:
        n, pos = _read_varint(buf, pos)
        return _unzigzag(n), pos
    if variant == 2:
        return _decode_str(buf, pos)
    raise ValueError("unknown value variant %d" % variant)


# --- the two framings ---

def records(framing=None):
    """Yields (input_index, key, value) for every record Flint sends, until its input ends."""
    framing = framing or _FRAMING
    if framing == "json":
        for line in _stdin:
            if line.strip():
                frame = json.loads(line)
                yield frame.get("input", 0), frame.get("key", ""), frame.get("value")
        return
    while True:
        header = _stdin.read(4)
        if not header:
            return
        (length,) = struct.unpack("<I", header)
        body = _stdin.read(length)
        input_index, pos = _read_varint(body, 0)
        key, pos = _decode_str(body, pos)
        value, pos = _decode_value(body, pos)
        yield input_index, key, value


# Encoded JSON lines of recent records: a step that emits the same record often (a word and
# its 1) encodes it once. Cleared when full, so memory stays bounded.
_LINES = {}
_LINES_MAX = 1 << 16


def emit(key, value, framing=None):
    """Sends one record downstream. Buffered: Flint sees it at the latest when the program
    ends or `flush()` is called."""
    framing = framing or _FRAMING
    if framing == "json":
        # type(value) in the key: True == 1 for a dict, but not for Flint.
        cached = (key, type(value), value)
        line = _LINES.get(cached)
        if line is None:
            if isinstance(value, bool) or not (value is None or isinstance(value, (int, str))):
                raise TypeError("a Flint value is None, an int or a str, not %r" % (value,))
            record = {"key": key, "value": value}
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
            line = line.encode("utf-8")
            if len(_LINES) >= _LINES_MAX:
                _LINES.clear()
            _LINES[cached] = line
        _stdout.write(line)
    else:
        body = _encode_str(key) + _encode_value(value)
        _stdout.write(struct.pack("<I", len(body)))
        _stdout.write(body)


def flush():
    """Hands what was emitted so far to Flint."""
    _stdout.flush()
