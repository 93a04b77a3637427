#!/usr/bin/python3
"""Load shardsim golden tensors into numpy, and compare a backend's tensors against them.

numpy only (Debian's /usr/bin/python3 with python3-numpy); no safetensors or torch needed.

    import shardsim_golden as sg
    g = sg.load("goldens/")                 # a directory written by `shardsim run --golden`
    y = g.get("s1/c1/y")                    # the oracle's y, f64 ("f64/s1/c1/y")
    y32 = g.get("s1/c1/y", dtype="f32")     # the same value rounded once to f32
    t = g.tensor("f64/s1/c1/y@rank3[seq=12:13]")
    t.rank, t.placement, t.offset           # 3, 'Shard(seq)', {'seq': 12}
    sg.assert_close(my_y, y32, max_ulp=4)   # raises AssertionError naming the worst element

Names (README.md, "Golden tensors"): DTYPE/inputs/TENSOR for a scenario tensor's global
initial value, DTYPE/sSTEP/cCHUNK/TENSOR[#K] for every boundary's global value (a streamed
chunk's slice of an input included), NAME@rankR[SLICE] for rank R's local tensor; DTYPE is f64,
f32, bf16, f16 (with run --golden --dtype), or u8 for dropout masks. A bf16 golden loads as a
float32 array holding the bf16 values exactly. Each tensor's boundary carries its op's parameters
(GoldenTensor.params: eps, p, seed, window, rope_theta, learning_rate, ...).
"""

import hashlib
import json
import os
import struct
import sys

import numpy as np

MANIFEST = "manifest.json"
SAFETENSORS = "goldens.safetensors"
FORMAT_VERSION = 2
DIGEST_KEY = "manifest_sha256"
MAX_HEADER_BYTES = 100_000_000

# safetensors dtype -> numpy dtype (little-endian). BF16 has no numpy dtype: its bit patterns
# are read as <u2 (as shardsim writes bf16 npy files) and a golden's are widened to float32.
DTYPES = {
    "BF16": np.dtype("<u2"),
    "BOOL": np.dtype("|b1"), "U8": np.dtype("|u1"), "I8": np.dtype("|i1"),
    "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"), "U64": np.dtype("<u8"), "I64": np.dtype("<i8"),
    "F16": np.dtype("<f2"), "F32": np.dtype("<f4"), "F64": np.dtype("<f8"),
}


class GoldenFormatError(ValueError):
    """A golden or candidate file that does not follow its format."""


def _reject_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise GoldenFormatError(f"duplicate key {key!r} in a JSON object")
        out[key] = value
    return out


def read_safetensors(path):
    """Returns ({name: ndarray}, metadata) from a safetensors file, checked like shardsim's reader:
    header length within the file, JSON object without duplicate keys, known dtypes, shapes that
    match their byte ranges, and ranges that tile the data section with no overlap or hole."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise GoldenFormatError(f"{path}: truncated: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8 or n > MAX_HEADER_BYTES:
        raise GoldenFormatError(f"{path}: header length {n} runs past the end of the file")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GoldenFormatError(f"{path}: invalid JSON header: {e}") from None
    if not isinstance(header, dict):
        raise GoldenFormatError(f"{path}: the header must be a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise GoldenFormatError(f"{path}: __metadata__ must map strings to strings")
    body = memoryview(data)[8 + n:]
    spans = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise GoldenFormatError(f"{path}: tensor {name!r}: needs exactly dtype, shape, data_offsets")
        dtype = DTYPES.get(entry["dtype"])
        if dtype is None:
            raise GoldenFormatError(f"{path}: tensor {name!r}: unknown or unsupported dtype {entry['dtype']!r}")
        shape, offsets = entry["shape"], entry["data_offsets"]
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise GoldenFormatError(f"{path}: tensor {name!r}: bad shape {shape!r}")
        if (not isinstance(offsets, list) or len(offsets) != 2 or
                not all(isinstance(o, int) and o >= 0 for o in offsets) or offsets[0] > offsets[1]):
            raise GoldenFormatError(f"{path}: tensor {name!r}: bad data_offsets {offsets!r}")
        if offsets[1] > len(body):
            raise GoldenFormatError(f"{path}: tensor {name!r}: data past the end (truncated file)")
        if int(np.prod(shape, dtype=object)) * dtype.itemsize != offsets[1] - offsets[0]:
            raise GoldenFormatError(f"{path}: tensor {name!r}: shape/size mismatch")
        spans.append((offsets[0], offsets[1], name, dtype, shape))
    spans.sort()
    expected = 0
    for begin, end, name, _, _ in spans:
        if begin != expected:
            what = "overlaps the previous tensor" if begin < expected else "leaves a hole before it"
            raise GoldenFormatError(f"{path}: tensor {name!r} {what}")
        expected = end
    if expected != len(body):
        raise GoldenFormatError(f"{path}: {len(body) - expected} trailing bytes belong to no tensor")
    arrays = {name: np.frombuffer(body[b:e], dtype=dt).reshape(shape).copy()
              for b, e, name, dt, shape in spans}
    return arrays, metadata


def manifest_digest(raw, value):
    """SHA-256 of the manifest bytes with the last occurrence of the quoted digest `value`
    written as 64 '0' characters (how shardsim computes manifest_sha256)."""
    quoted = b'"' + value.encode() + b'"'
    at = raw.rfind(quoted)
    if at < 0:
        raise GoldenFormatError("manifest_sha256 is not in the manifest text")
    zeroed = raw[:at + 1] + b"0" * len(value) + raw[at + 1 + len(value):]
    return hashlib.sha256(zeroed).hexdigest()


class GoldenTensor:
    """One golden tensor and what the manifest says about it."""

    def __init__(self, info, array, boundary_params=None):
        self.array = array
        self.info = info
        self.name = info["name"]
        self.dtype = info["dtype"]
        self.axes = list(info["axes"])
        self.role = info["role"]            # "global" (the oracle's value) or "shard"
        self.rank = info["rank"]            # the shard's rank, None for a global value
        self.slice = info["slice"]          # "seq=12:13", "replicate", "partial"; None if global
        self.offset = dict(info["offset"])  # global offset per sharded axis (shards)
        # zigzag shares: {axis: [[begin, end], [begin, end]]}, the two runs in local order
        self.runs = dict(info.get("runs", {}))
        self.placement = info["placement"]
        self.global_shape = dict(info["global_shape"])
        self.boundary = dict(info["boundary"])
        self.ranks = info["ranks"]          # every rank's local shape, offset and slice
        # BF16/F16 goldens: the error budget of correct programs, {"normwise": x, "ulp": n}
        # (README "Error budgets"); None for other dtypes and manifests without budgets.
        self.budget = info.get("budget")
        # The parameters of the op (or update) that recorded this boundary, defaults filled in,
        # e.g. {"eps": 1e-05, "axis": "hidden", ...}; None for inputs.
        self.params = boundary_params

    def global_slices(self):
        """Index that cuts this shard's valid part out of the global tensor: a tuple of slices,
        or for a zigzag shard (two runs on an axis) an np.ix_ of index arrays, in local order."""
        out = []
        for axis, extent in zip(self.axes, self.array.shape):
            if axis in self.runs:
                out.append(np.concatenate([np.arange(b, e) for b, e in self.runs[axis]]))
                continue
            begin = self.offset.get(axis, 0)
            end = min(begin + extent, self.global_shape.get(axis, begin + extent))
            out.append(slice(begin, end))
        if not self.runs:
            return tuple(out)
        return np.ix_(*[np.arange(s.start, s.stop) if isinstance(s, slice) else s for s in out])

    def __repr__(self):
        return f"GoldenTensor({self.name!r}, {self.dtype}, {dict(zip(self.axes, self.array.shape))})"


class Goldens:
    """A golden directory: manifest.json plus goldens.safetensors or one .npy per tensor."""

    def __init__(self, directory):
        self.directory = directory
        with open(os.path.join(directory, MANIFEST), "rb") as f:
            raw = f.read()
        self.manifest = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
        if self.manifest.get("format") != "shardsim-goldens":
            raise GoldenFormatError(f"{directory}: not a shardsim golden directory")
        if self.manifest.get("format_version") != FORMAT_VERSION:
            raise GoldenFormatError(f"{directory}: manifest format_version "
                                    f"{self.manifest.get('format_version')!r}, this reader reads {FORMAT_VERSION}")
        digest = self.manifest.get(DIGEST_KEY, "")
        if manifest_digest(raw, digest) != digest:
            raise GoldenFormatError(f"{directory}: manifest_sha256 does not match the manifest's bytes")
        self.boundaries = {b["id"]: b for b in self.manifest["boundaries"]}
        storage = self.manifest["storage"]
        if storage == "safetensors":
            arrays, self.metadata = read_safetensors(os.path.join(directory, SAFETENSORS))
            # The header says only what the manifest (covered by its digest) says: the
            # __metadata__ shardsim writes, and the manifest's tensors and no other.
            expected = {"format": "shardsim-goldens",
                        "shardsim_version": self.manifest["shardsim_version"],
                        "scenario": self.manifest["scenario"]["name"],
                        "scenario_sha256": self.manifest["scenario"]["sha256"],
                        "precision": self.manifest["precision"],
                        "reduce_order": self.manifest["reduce_order"],
                        "manifest": MANIFEST}
            if self.metadata != expected:
                raise GoldenFormatError(f"{directory}: {SAFETENSORS}: __metadata__ does not match "
                                        f"the manifest")
            if len(arrays) != len(self.manifest["tensors"]):
                raise GoldenFormatError(f"{directory}: {SAFETENSORS}: holds {len(arrays)} tensors, "
                                        f"the manifest lists {len(self.manifest['tensors'])}")
        else:
            arrays, self.metadata = {}, {}
            for info in self.manifest["tensors"]:
                arrays[info["name"]] = np.load(os.path.join(directory, info["file"]), allow_pickle=False)
        self.tensors = {}
        for info in self.manifest["tensors"]:
            array = arrays[info["name"]]
            digest = hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()
            if digest != info["sha256"]:
                raise GoldenFormatError(f"{directory}: tensor {info['name']!r}: SHA-256 mismatch")
            if list(array.shape) != info["shape"]:
                raise GoldenFormatError(f"{directory}: tensor {info['name']!r}: shape mismatch")
            params = self.boundaries[info["boundary"]["id"]]["params"]
            if info["dtype"] == "BF16":  # bit patterns -> float32 holding the bf16 values exactly
                array = (array.astype(np.uint32) << 16).view(np.float32)
            self.tensors[info["name"]] = GoldenTensor(info, array, params)

    @property
    def precision(self):
        return self.manifest["precision"]

    @property
    def scenario_text(self):
        return self.manifest["scenario"]["text"]

    def names(self, prefix=""):
        return [n for n in self.tensors if n.startswith(prefix)]

    def tensor(self, name, dtype=None):
        """The GoldenTensor `name`; with dtype ("f64", "f32"), `name` is given without the
        dtype prefix (masks are found under "u8/" whatever the dtype)."""
        if dtype is None:
            return self.tensors[name]
        for full in (f"{dtype}/{name}", f"u8/{name}"):
            if full in self.tensors:
                return self.tensors[full]
        raise KeyError(f"no golden {dtype}/{name} (nor u8/{name})")

    def get(self, name, dtype="f64"):
        """The array of golden `name` (without the dtype prefix), e.g. get("s1/c1/y", "f32")."""
        return self.tensor(name, dtype).array

    def __getitem__(self, name):
        return self.tensors[name].array


def load(directory):
    return Goldens(directory)


# ---- comparison helpers (a backend's pytest suite can call these) ----

def _ordered(values):
    """The ordered-integer mapping: bit patterns to integers monotone in the value; +0 and -0
    both map to 0."""
    values = np.asarray(values)
    if values.dtype == np.float32:
        bits = values.view(np.uint32).astype(np.int64)
        sign = np.int64(1) << 31
    elif values.dtype == np.float64:
        bits = values.view(np.uint64)
        sign_bit = np.uint64(1) << np.uint64(63)
        magnitude = (bits & ~sign_bit).astype(np.int64)
        return np.where(bits & sign_bit, -magnitude, magnitude)
    else:
        raise TypeError(f"ULP distance needs float32 or float64, got {values.dtype}")
    return np.where(bits & sign, -(bits & ~sign), bits)


def ulp_distance(actual, golden):
    """Elementwise ULP distance in the golden's dtype (actual is rounded to it first).
    NaN on either side gives the largest uint64 (never "equal")."""
    golden = np.asarray(golden)
    actual = np.asarray(actual).astype(golden.dtype)
    a, g = _ordered(actual), _ordered(golden)
    # |a - g| in uint64: the two's-complement difference wraps correctly since it fits.
    au, gu = a.astype(np.uint64), g.astype(np.uint64)
    distance = np.where(a >= g, au - gu, gu - au)
    nan = np.isnan(actual) | np.isnan(golden)
    return np.where(nan, np.iinfo(np.uint64).max, distance).astype(np.uint64)


def relative_error(actual, golden):
    """|actual - golden| / |golden| elementwise, in float64; inf where golden is 0 and they
    differ, NaN where either is NaN."""
    a = np.asarray(actual, dtype=np.float64)
    g = np.asarray(golden, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.abs(a - g)
        rel = np.where(diff == 0, 0.0, diff / np.abs(g))
    return rel


def compare(actual, golden, rtol=None, atol=None, max_ulp=None):
    """Shardsim compare's rule. An element is within tolerance when |a - g| <= atol + rtol*|g|,
    or (when max_ulp is given) its ULP distance is <= max_ulp. NaN never matches; an infinity
    matches only the same infinity. With no tolerance given: torch.testing.assert_close's
    defaults (f32: rtol 1.3e-6, atol 1e-5; f64: rtol 1e-7, atol 1e-7). Returns a dict with
    max_abs, max_rel, max_ulp, outside (count), worst (index of the largest ULP distance) and ok."""
    golden = np.asarray(golden)
    actual = np.asarray(actual)
    if actual.shape != golden.shape:
        raise AssertionError(f"shape {actual.shape} differs from the golden's {golden.shape}")
    if rtol is None and atol is None and max_ulp is None:
        rtol, atol = (1.3e-6, 1e-5) if golden.dtype == np.float32 else (1e-7, 1e-7)
    rtol, atol = rtol or 0.0, atol or 0.0
    a = actual.astype(np.float64)
    g = golden.astype(np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - g)
        both_inf = np.isinf(a) & np.isinf(g) & (a == g)
        finite = np.isfinite(a) & np.isfinite(g)
        ok = np.where(finite, diff <= atol + rtol * np.abs(g), both_inf)
    ulps = ulp_distance(actual, golden) if golden.dtype.kind == "f" else diff.astype(np.uint64)
    if max_ulp is not None:
        ok |= (ulps <= max_ulp) & np.isfinite(a) & np.isfinite(g)
    ok &= ~(np.isnan(a) | np.isnan(g))
    worst = np.unravel_index(int(np.argmax(ulps)), golden.shape) if golden.size else ()
    return {
        "max_abs": float(np.nanmax(np.where(both_inf, 0.0, diff), initial=0.0)) if golden.size else 0.0,
        "max_rel": float(np.nanmax(relative_error(a, g), initial=0.0)) if golden.size else 0.0,
        "max_ulp": int(ulps.max(initial=0)),
        "outside": int((~ok).sum()),
        "worst": tuple(int(i) for i in worst),
        "ok": bool(ok.all()),
    }


def assert_close(actual, golden, rtol=None, atol=None, max_ulp=None, name="tensor", axes=None):
    """Raises AssertionError naming the worst element (by named axis when `axes` is given, e.g.
    GoldenTensor.axes) when `actual` is outside the tolerance of `golden` (see compare)."""
    result = compare(actual, golden, rtol=rtol, atol=atol, max_ulp=max_ulp)
    if not result["ok"]:
        index = result["worst"]
        where = ", ".join(f"{a}={i}" for a, i in zip(axes, index)) if axes else str(index)
        raise AssertionError(
            f"{name}: {result['outside']} element(s) outside tolerance; worst [{where}]: "
            f"golden {np.asarray(golden)[index]!r}, actual {np.asarray(actual)[index]!r} "
            f"({result['max_ulp']} ulp); max_abs {result['max_abs']:.3e}, max_rel {result['max_rel']:.3e}")
    return result


def main(argv):
    """`shardsim_golden.py DIR`: list the goldens with dtype, shape and placement."""
    if len(argv) != 2:
        print("usage: shardsim_golden.py GOLDEN_DIR", file=sys.stderr)
        return 2
    g = load(argv[1])
    print(f"{g.manifest['scenario']['name']}: {len(g.tensors)} tensors, {g.precision}, "
          f"reduce order {g.manifest['reduce_order']}")
    for name, t in g.tensors.items():
        print(f"  {name}  {t.dtype} {list(t.array.shape)} {t.placement}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
