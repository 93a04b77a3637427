"""The file codecs of shardsim.golden: safetensors, npy and the manifest's JSON, each read as
hostile input the way shardsim's own readers read it (sim/io/safetensors.cpp,
sim/io/npy.cpp, sim/golden/manifest_reader.cpp; docs/goldens.md, "Golden file formats").
Every problem is a GoldenFormatError whose message starts with the file's path. numpy only.
"""
import json
import os
import stat

import numpy as np

MAX_HEADER_BYTES = 100_000_000      # safetensors_format.hpp kMaxHeaderBytes
MAX_HEADER_DEPTH = 16               # safetensors_format.hpp kMaxHeaderDepth
MAX_NPY_HEADER_BYTES = 10000        # safetensors_format.hpp kNpyMaxHeaderBytes
INT64_MAX = 2**63 - 1

# safetensors dtype -> numpy dtype (little-endian). BF16 has no numpy dtype: its bit patterns
# are read as <u2 (as shardsim writes bf16 npy files) and a golden's are widened to float32.
DTYPES = {
    "BF16": np.dtype("<u2"),
    "BOOL": np.dtype("|b1"), "U8": np.dtype("|u1"), "I8": np.dtype("|i1"),
    "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"), "U64": np.dtype("<u8"), "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"), "F32": np.dtype("<f4"), "F64": np.dtype("<f8"),
}
# npy descr (without its byte-order character) -> safetensors dtype (safetensors_format.hpp
# kDtypes); BF16 has none.
NPY_DTYPES = {"b1": "BOOL", "u1": "U8", "i1": "I8", "u2": "U16", "i2": "I16", "u4": "U32",
              "i4": "I32", "u8": "U64", "i8": "I64", "f2": "F16", "f4": "F32", "f8": "F64"}


class GoldenFormatError(ValueError):
    """A golden directory or tensor file that shardsim would refuse: missing or unreadable, not
    following its format, or a manifest that contradicts itself or its files. The message names
    the path and, for the manifest, the key (`DIR/manifest.json: tensors[7].offset: ...`)."""


def quote(value, limit=80):
    """repr() of a value, clipped: control characters escaped, one line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def read_bytes(path, limit=None, what=None):
    """The bytes of the regular file `path` (io.hpp read_file: no FIFO, device or directory).
    `what` prefixes the message ("DIR/manifest.json: tensors[3].file") when given."""
    where = f"{what}: {path}" if what else path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or e
        raise GoldenFormatError(f"{where}: cannot open: {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise GoldenFormatError(f"{where}: is {kind}; only regular files are read")
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise GoldenFormatError(f"{where}: is {size} bytes, over the limit of {limit} bytes")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    except OSError as e:
        raise GoldenFormatError(f"{where}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


class _JsonProblem(Exception):
    pass


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise _JsonProblem(f"duplicate key {quote(key)}")
        out[key] = value
    return out


def _no_constant(name):  # NaN, Infinity: Python extensions, not JSON
    raise _JsonProblem(f"{name} is not JSON")


def _depth(value):
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            items = item.values() if isinstance(item, dict) else item
            stack.extend((v, depth + 1) for v in items)
    return deepest


def parse_json(data, what, max_depth, label="invalid JSON"):
    """JSON text as shardsim parses it: UTF-8, no NUL byte (its parser would stop there), no key
    twice in an object, no NaN/Infinity, nested at most `max_depth` levels."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise GoldenFormatError(f"{what}: {label}: a NUL byte at offset {nul}")
    try:
        value = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates,
                           parse_constant=_no_constant)
    except UnicodeDecodeError as e:
        raise GoldenFormatError(f"{what}: {label}: not UTF-8 at byte {e.start}") from None
    except (json.JSONDecodeError, _JsonProblem) as e:
        raise GoldenFormatError(f"{what}: {label}: {e}") from None
    except RecursionError:
        raise GoldenFormatError(f"{what}: {label}: nested deeper than {max_depth} levels") from None
    if _depth(value) > max_depth:
        raise GoldenFormatError(f"{what}: {label}: nested deeper than {max_depth} levels")
    return value


def _non_negative(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GoldenFormatError(f"{what}: expected a non-negative integer, got {quote(value)}")
    if value > INT64_MAX:
        raise GoldenFormatError(f"{what}: {value} is too large")
    return value


def _entry(path, name, entry, data_length):
    """One safetensors header entry (safetensors.cpp parse_entry): (begin, end, dtype, shape)."""
    where = f"{path}: tensor {quote(name)}"
    if not name:
        raise GoldenFormatError(f"{path}: a tensor has an empty name")
    if not isinstance(entry, dict):
        raise GoldenFormatError(f"{where}: expected an object with dtype, shape, data_offsets")
    for key in entry:
        if key not in ("dtype", "shape", "data_offsets"):
            raise GoldenFormatError(f"{where}: unknown key {quote(key)}")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in entry:
            raise GoldenFormatError(f"{where}: missing '{key}'")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise GoldenFormatError(f"{where}: unknown or unsupported dtype {quote(dtype)}")
    if not isinstance(shape, list) or len(shape) > 64:
        raise GoldenFormatError(f"{where}: shape must be an array of at most 64 integers")
    shape = [_non_negative(d, f"{where}: shape[{i}]") for i, d in enumerate(shape)]
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise GoldenFormatError(f"{where}: data_offsets must be [BEGIN, END]")
    begin, end = (_non_negative(o, f"{where}: data_offsets[{i}]") for i, o in enumerate(offsets))
    if begin > end:
        raise GoldenFormatError(f"{where}: data_offsets [{begin}, {end}] end before they begin")
    if end > data_length:
        raise GoldenFormatError(f"{where}: data_offsets end {end} is past the end of the "
                                f"{data_length}-byte data section (truncated file)")
    need = int(np.prod(shape, dtype=object)) * DTYPES[dtype].itemsize
    if need != end - begin:
        raise GoldenFormatError(f"{where}: shape/size mismatch: data_offsets span {end - begin} "
                                f"bytes, but shape {shape} of {dtype} needs {need}")
    return begin, end, dtype, shape


def decode_safetensors(data, path):
    """({name: (array, dtype)}, metadata) of a safetensors file's bytes, checked as
    sim/io/safetensors.cpp checks it: the header length within the file and 100 MB, a JSON
    object, no duplicate keys, known dtypes, shapes matching their byte ranges, and ranges that
    tile the data section with no overlap, hole or trailing byte. BF16 arrays hold bit patterns
    (<u2)."""
    if len(data) < 8:
        raise GoldenFormatError(f"{path}: truncated: {len(data)} bytes, shorter than the 8-byte "
                                f"header length")
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise GoldenFormatError(f"{path}: header length {n} runs past the end of the "
                                f"{len(data)}-byte file")
    if n > MAX_HEADER_BYTES:
        raise GoldenFormatError(f"{path}: header length {n} exceeds the limit of "
                                f"{MAX_HEADER_BYTES} bytes")
    text = data[8:8 + n]
    if not text.startswith(b"{"):
        raise GoldenFormatError(f"{path}: the header must be a JSON object starting with '{{'")
    header = parse_json(text, path, MAX_HEADER_DEPTH, "invalid JSON header")
    body = memoryview(data)[8 + n:]
    metadata, spans = {}, []
    for name, entry in header.items():
        if name != "__metadata__":
            spans.append(_entry(path, name, entry, len(body)) + (name,))
            continue
        if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
            raise GoldenFormatError(f"{path}: __metadata__ must be an object of strings")
        metadata = dict(entry)
    spans.sort(key=lambda s: (s[0], s[1], s[4]))
    expected, previous = 0, "the start of the data section"
    for begin, end, _, _, name in spans:
        if begin < expected:
            raise GoldenFormatError(f"{path}: tensor {quote(name)} overlaps {previous}")
        if begin > expected:
            raise GoldenFormatError(f"{path}: hole in the data section: bytes [{expected}, "
                                    f"{begin}) before tensor {quote(name)} belong to no tensor")
        expected = end
        previous = f"tensor {quote(name)}" if end > begin else previous
    if expected != len(body):
        raise GoldenFormatError(f"{path}: hole in the data section: {len(body) - expected} "
                                f"trailing bytes after {previous} belong to no tensor")
    arrays = {name: (np.frombuffer(body[b:e], dtype=DTYPES[dt]).reshape(shape).copy(), dt)
              for b, e, dt, shape, name in spans}
    return arrays, metadata


class _NpyHeader:
    """The npy header dict's strict grammar (npy.cpp HeaderParser): {'descr': STR,
    'fortran_order': BOOL, 'shape': TUPLE} in any order, each key once, an optional trailing
    comma, then only spaces and newlines. No Python evaluation."""

    def __init__(self, text, path):
        self.text, self.path, self.pos = text, path, 0

    def fail(self, message):
        raise GoldenFormatError(f"{self.path}: invalid npy header at byte {self.pos}: {message}")

    def peek(self):
        return self.text[self.pos:self.pos + 1]

    def skip(self):
        while self.peek() in (b" ", b"\n") and self.peek():
            self.pos += 1

    def expect(self, c):
        self.skip()
        if self.peek() != c:
            self.fail(f"expected '{c.decode()}'")
        self.pos += 1

    def string(self):
        self.skip()
        q = self.peek()
        if q not in (b"'", b'"') or not q:
            self.fail("expected a quoted string")
        end = self.text.find(q, self.pos + 1)
        if end < 0:
            self.fail("unterminated string")
        value = self.text[self.pos + 1:end]
        if any(c == 0x5c or c < 0x20 or c > 0x7e for c in value):
            self.fail("unsupported character in a string")
        self.pos = end + 1
        return value.decode("ascii")

    def boolean(self):
        self.skip()
        for word, value in ((b"True", True), (b"False", False)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return value
        self.fail("expected True or False")

    def shape(self):
        out = []
        self.expect(b"(")
        while True:
            self.skip()
            if self.peek() == b")":
                break
            if not self.peek().isdigit():
                self.fail("expected a non-negative integer")
            value = 0
            while self.peek().isdigit():
                if value > (INT64_MAX - 9) // 10:
                    self.fail("shape extent too large")
                value = value * 10 + int(self.peek())
                self.pos += 1
            out.append(value)
            if self.peek() == b"L":
                self.pos += 1
            if len(out) > 64:
                self.fail("more than 64 axes")
            self.skip()
            if self.peek() == b",":
                self.pos += 1
                continue
            if self.peek() != b")":
                self.fail("expected ',' or ')'")
        self.expect(b")")
        return out

    def parse(self):
        values = {}
        readers = {"descr": self.string, "fortran_order": self.boolean, "shape": self.shape}
        self.expect(b"{")
        while True:
            self.skip()
            if self.peek() == b"}":
                break
            key = self.string()
            self.expect(b":")
            if key not in readers:
                self.fail(f"unknown key {quote(key)}")
            if key in values:
                self.fail(f"duplicate key {quote(key)}")
            values[key] = readers[key]()
            self.skip()
            if self.peek() == b",":
                self.pos += 1
                continue
            if self.peek() != b"}":
                self.fail("expected ',' or '}'")
        self.expect(b"}")
        if self.text[self.pos:].strip(b" \n"):
            self.fail("unexpected text after the header dict")
        if len(values) != 3:
            self.fail("the header needs 'descr', 'fortran_order' and 'shape'")
        return values


def decode_npy(data, path):
    """(array, dtype) of an npy file's bytes (npy 1.0/2.0/3.0, C order, little- or big-endian;
    the array is little-endian), checked as sim/io/npy.cpp checks it: the header within the
    file and 10000 bytes, the strict header grammar, a known descr, and exactly the data the
    shape needs (no truncation, no trailing bytes)."""
    if len(data) < 10:
        raise GoldenFormatError(f"{path}: truncated: {len(data)} bytes, shorter than the npy "
                                f"preamble")
    if data[:6] != b"\x93NUMPY":
        raise GoldenFormatError(f"{path}: not an npy file (the magic \\x93NUMPY is missing)")
    major, minor = data[6], data[7]
    if not 1 <= major <= 3 or minor != 0:
        raise GoldenFormatError(f"{path}: unsupported npy version {major}.{minor}")
    preamble = 10 if major == 1 else 12
    if len(data) < preamble:
        raise GoldenFormatError(f"{path}: truncated npy preamble")
    length = int.from_bytes(data[8:preamble], "little")
    if length > len(data) - preamble:
        raise GoldenFormatError(f"{path}: header length {length} runs past the end of the "
                                f"{len(data)}-byte file")
    if length > MAX_NPY_HEADER_BYTES:
        raise GoldenFormatError(f"{path}: header length {length} exceeds the limit of "
                                f"{MAX_NPY_HEADER_BYTES} bytes")
    header = _NpyHeader(data[preamble:preamble + length], path).parse()
    if header["fortran_order"]:
        raise GoldenFormatError(f"{path}: fortran_order True is not supported; save with "
                                f"np.ascontiguousarray(a)")
    descr, shape = header["descr"], header["shape"]
    dtype = NPY_DTYPES.get(descr[1:]) if len(descr) >= 3 else None
    if dtype is None or not (descr[0] in "<>" or (descr[0] == "|" and DTYPES[dtype].itemsize == 1)):
        raise GoldenFormatError(f"{path}: unknown or unsupported dtype {quote(descr)} (supported: "
                                f"b1, u1, i1, u2, i2, u4, i4, u8, i8, f2, f4, f8)")
    need = int(np.prod(shape, dtype=object)) * DTYPES[dtype].itemsize
    held = len(data) - preamble - length
    if need > held:
        raise GoldenFormatError(f"{path}: truncated data: shape {tuple(shape)} of {quote(descr)} "
                                f"needs {need} bytes, the file holds {held}")
    if need < held:
        raise GoldenFormatError(f"{path}: shape/size mismatch: shape {tuple(shape)} of "
                                f"{quote(descr)} needs {need} bytes, the file holds {held} "
                                f"(trailing bytes)")
    raw = np.frombuffer(data, dtype=np.dtype(DTYPES[dtype]).newbyteorder(descr[0]),
                        offset=preamble + length, count=int(np.prod(shape, dtype=object)))
    array = raw.astype(DTYPES[dtype]).reshape(shape)
    if dtype == "BOOL":  # npy.cpp: any non-zero byte is true
        array = np.frombuffer(data, dtype=np.uint8, offset=preamble + length).astype(bool)
        array = array.reshape(shape)
    return array, dtype
