#!/usr/bin/python3
"""Load shardsim golden tensors into numpy, and compare a backend's tensors against them.

numpy only (Debian's /usr/bin/python3 with python3-numpy); no safetensors or torch needed.

    import shardsim.golden as sg            # or `import shardsim`: the same names
    g = sg.load("goldens/")                 # a directory written by `shardsim run --golden`
    y = g.get("s1/c1/y")                    # the oracle's y, f64 ("f64/s1/c1/y")
    y32 = g.get("s1/c1/y", dtype="f32")     # the same value rounded once to f32
    t = g.tensor("f64/s1/c1/y@rank3[seq=12:13]")
    t.rank, t.placement, t.offset           # 3, 'Shard(seq)', {'seq': 12}
    sg.assert_close(my_y, y32, max_ulp=4)   # raises AssertionError naming the worst element

Names (docs/goldens.md, "Golden tensors"): DTYPE/inputs/TENSOR for a scenario tensor's global
initial value, DTYPE/sSTEP/cCHUNK/TENSOR[#K] for every boundary's global value (a streamed
chunk's slice of an input included), NAME@rankR[SLICE] for rank R's local tensor; DTYPE is f64,
f32, bf16, f16 (with run --golden --dtype), u8 for dropout masks, or i64 for token ids and labels
(i64/inputs/TENSOR). A bf16 golden loads as a
float32 array holding the bf16 values exactly. Each tensor's boundary carries its op's parameters
(GoldenTensor.params: eps, p, seed, window, rope_theta, learning_rate, ...).
"""

import hashlib
import os
import sys

import numpy as np

# The readers, checked as shardsim's are (docs/goldens.md, "Golden file formats", "The manifest").
from .golden_format import (DTYPES, MAX_HEADER_BYTES, GoldenFormatError,  # noqa: F401
                            decode_npy, decode_safetensors, read_bytes)
from .golden_manifest import (DIGEST_KEY, FORMAT_VERSION, SAFETENSORS,  # noqa: F401
                              manifest_digest, parse_manifest)

MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 30  # reader.cpp kMaxManifestBytes


def read_safetensors(path):
    """Returns ({name: ndarray}, metadata) from a safetensors file, checked like shardsim's reader:
    header length within the file, JSON object without duplicate keys, known dtypes, shapes that
    match their byte ranges, and ranges that tile the data section with no overlap or hole.
    Raises GoldenFormatError (a missing or unreadable file included). BF16 tensors hold their
    bit patterns as uint16."""
    arrays, metadata = decode_safetensors(read_bytes(path, None), path)
    return {name: array for name, (array, _) in arrays.items()}, metadata


def read_npy(path):
    """The array of an .npy file (1.0/2.0/3.0, C order), checked like shardsim's reader (no
    trailing bytes, a strict header, no pickles). Raises GoldenFormatError."""
    return decode_npy(read_bytes(path, None), path)[0]


class GoldenTensor:
    """One golden tensor and what the manifest says about it (checked against the file and
    against the tensor's placement when the directory was loaded)."""

    def __init__(self, info, array, boundary_params=None):
        self.array = array
        self.info = info
        self.name = info["name"]
        self.dtype = info["dtype"]
        self.axes = list(info["axes"])
        self.role = info["role"]            # "global" (the oracle's value) or "shard"
        self.rank = info["rank"]            # the shard's rank, None for a global value
        self.slice = info.get("slice")      # "seq=12:13", "replicate", "partial"; None if global
        self.offset = dict(info["offset"])  # global offset per sharded axis (shards)
        # zigzag shares: {axis: [[begin, end], [begin, end]]}, the two runs in local order
        self.runs = dict(info.get("runs", {}))
        self.placement = info["placement"]
        self.global_shape = dict(info["global_shape"])
        self.boundary = dict(info["boundary"])
        self.ranks = info["ranks"]          # every rank's local shape, offset and slice
        # BF16/F16 goldens: the error budget of correct programs, {"normwise": x, "ulp": n}
        # (docs/goldens.md, "Error budgets"); None for other dtypes and manifests without budgets.
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
    """A golden directory: manifest.json plus goldens.safetensors or one .npy per tensor.
    Everything `shardsim compare` refuses is a GoldenFormatError naming the file and the key:
    a missing directory or file, a manifest whose digest does not match or whose metadata
    contradicts itself (sim/golden/manifest_reader.cpp), a file whose dtype, shape or SHA-256
    is not the manifest's (sim/golden/reader.cpp)."""

    def __init__(self, directory):
        self.directory = directory
        try:
            is_dir = os.path.isdir(directory)
        except (TypeError, ValueError):
            is_dir = False
        if not is_dir:
            raise GoldenFormatError(f"{directory}: not a directory: GOLDEN must be a directory "
                                    f"written by 'shardsim run --golden'")
        manifest_path = os.path.join(directory, MANIFEST)
        raw = read_bytes(manifest_path, MAX_MANIFEST_BYTES)
        self.manifest, infos = parse_manifest(raw, manifest_path)
        self.boundaries = {b["id"]: b for b in self.manifest["boundaries"]}
        if self.manifest["storage"] == "safetensors":
            arrays = self._safetensors(infos)
        else:
            arrays, self.metadata = {}, {}
            for i, info in enumerate(infos):
                path = os.path.join(directory, info["file"])
                data = read_bytes(path, None, f"{manifest_path}: tensors[{i}].file")
                array, dtype = decode_npy(data, path)
                # BF16 has no npy dtype: its golden file holds the bit patterns as <u2.
                arrays[info["name"]] = (array, "BF16" if (dtype, info["dtype"]) == ("U16", "BF16")
                                        else dtype, path)
        self.tensors = {}
        for info, item in zip(infos, self.manifest["tensors"]):
            array, dtype, path = arrays[info["name"]]
            # reader.cpp check_against_manifest: dtype, shape, then the SHA-256 of the bytes.
            if dtype != info["dtype"]:
                raise GoldenFormatError(f"{path}: tensor {info['name']!r} is {dtype}, the "
                                        f"manifest says {info['dtype']}")
            if list(array.shape) != info["shape"]:
                raise GoldenFormatError(f"{path}: tensor {info['name']!r} has a different shape "
                                        f"than the manifest says")
            if hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest() != info["sha256"]:
                raise GoldenFormatError(f"{path}: tensor {info['name']!r}: SHA-256 of its bytes "
                                        f"does not match the manifest (corrupt golden file)")
            if dtype == "BF16":  # bit patterns -> float32 holding the bf16 values exactly
                # (np.left_shift keeps a 0-d array, e.g. a loss, an array of uint32)
                array = np.asarray(np.left_shift(array.astype(np.uint32), np.uint32(16)))
                array = array.view(np.float32)
            self.tensors[info["name"]] = GoldenTensor(item, array, info["params"])

    def _safetensors(self, infos):
        """{name: (array, dtype, path)} of goldens.safetensors, whose header says only what the
        manifest (covered by its digest) says: the __metadata__ shardsim writes, and the
        manifest's tensors and no other (reader.cpp load_golden_dir)."""
        path = os.path.join(self.directory, SAFETENSORS)
        arrays, self.metadata = decode_safetensors(read_bytes(path, None), path)
        m = self.manifest
        expected = {"format": "shardsim-goldens", "shardsim_version": m["shardsim_version"],
                    "scenario": m["scenario"]["name"], "scenario_sha256": m["scenario"]["sha256"],
                    "precision": m["precision"], "reduce_order": m["reduce_order"],
                    "manifest": MANIFEST}
        if self.metadata != expected:
            raise GoldenFormatError(f"{path}: __metadata__ does not match the manifest")
        if len(arrays) != len(infos):
            raise GoldenFormatError(f"{path}: holds {len(arrays)} tensors, the manifest lists "
                                    f"{len(infos)}")
        for info in infos:
            if info["name"] not in arrays:
                raise GoldenFormatError(f"{path}: tensor {info['name']!r} listed in the manifest "
                                        f"is missing")
        return {name: (array, dtype, path) for name, (array, dtype) in arrays.items()}

    @property
    def precision(self):
        return self.manifest["precision"]

    @property
    def scenario_text(self):
        return self.manifest["scenario"].get("text")

    def names(self, prefix=""):
        return [n for n in self.tensors if n.startswith(prefix)]

    def tensor(self, name, dtype=None):
        """The GoldenTensor `name`; with dtype ("f64", "f32"), `name` is given without the
        dtype prefix (masks are found under "u8/", token ids and labels under "i64/", whatever
        the dtype)."""
        if dtype is None:
            return self.tensors[name]
        for full in (f"{dtype}/{name}", f"u8/{name}", f"i64/{name}"):
            if full in self.tensors:
                return self.tensors[full]
        raise KeyError(f"no golden {dtype}/{name} (nor u8/{name}, i64/{name})")

    def get(self, name, dtype="f64"):
        """The array of golden `name` (without the dtype prefix), e.g. get("s1/c1/y", "f32")."""
        return self.tensor(name, dtype).array

    def __getitem__(self, name):
        return self.tensors[name].array


def load(directory):
    """The golden directory `directory` (see Goldens). Raises GoldenFormatError for anything
    `shardsim compare` would refuse."""
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


def main(argv=None):
    """`python3 -m shardsim.golden DIR` (or the console script `shardsim-golden DIR`): list the
    goldens with dtype, shape and placement. A directory shardsim would refuse is one line on
    stderr and exit 2. argv: the command line, program name first (default sys.argv)."""
    argv = sys.argv if argv is None else argv
    if len(argv) != 2:
        print("usage: python3 -m shardsim.golden GOLDEN_DIR", file=sys.stderr)
        return 2
    try:
        g = load(argv[1])
    except GoldenFormatError as e:
        print(f"shardsim.golden: error: {e}", file=sys.stderr)
        return 2
    print(f"{g.manifest['scenario']['name']}: {len(g.tensors)} tensors, {g.precision}, "
          f"reduce order {g.manifest['reduce_order']}")
    for name, t in g.tensors.items():
        print(f"  {name}  {t.dtype} {list(t.array.shape)} {t.placement}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
