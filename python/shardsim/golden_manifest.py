"""A golden manifest read back the way `shardsim compare` reads it (sim/golden/manifest_reader.cpp
parse_manifest, sim/golden/manifest_budgets.cpp parse_budgets): every key typed, the digest
checked, and each tensor's metadata (file, dtype, global shape, placement, role, rank, offset,
runs, slice, ranks) rebuilt from its placement and compared, so that an edited manifest is a
GoldenFormatError naming the key (`DIR/manifest.json: tensors[7].offset: expected {"seq": 12}
for Shard(seq)`) and never a wrong location. For shardsim.golden; numpy-free.
"""
import hashlib
import json
import re

from . import golden_layout as gl
from .golden_format import DTYPES, INT64_MAX, GoldenFormatError, parse_json


def quote(value, limit=80):
    """A manifest value as JSON, clipped (ManifestReader's clipped(v.dump()))."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[:limit] + "..."


def name(text, limit=80):
    """A name in single quotes, clipped, control characters escaped (error.hpp quote)."""
    text = json.dumps(text, ensure_ascii=True)[1:-1]
    return "'" + (text if len(text) <= limit else text[:limit] + "...") + "'"


FORMAT, FORMAT_VERSION = "shardsim-goldens", 2
DIGEST_KEY = "manifest_sha256"
SAFETENSORS = "goldens.safetensors"
MAX_DEPTH = 32           # manifest_reader.cpp parse_json
KINDS = ("input", "op", "collective", "update", "check")  # trace.cpp boundary_kind_name


def manifest_digest(raw, value):
    """SHA-256 of the manifest bytes with the last occurrence of the quoted digest `value`
    written as 64 '0' characters (how shardsim computes manifest_sha256)."""
    quoted = b'"' + value.encode() + b'"'
    at = raw.rfind(quoted)
    if at < 0:
        raise GoldenFormatError("manifest_sha256 is not in the manifest text")
    zeroed = raw[:at + 1] + b"0" * len(value) + raw[at + 1 + len(value):]
    return hashlib.sha256(zeroed).hexdigest()


def json_equal(a, b):
    """nlohmann::ordered_json's ==: booleans are no numbers, 1 == 1.0, object keys in order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


class Reader:
    """Typed access with located errors (manifest_reader.cpp ManifestReader)."""

    def __init__(self, what):
        self.what = what

    def fail(self, path, message):
        raise GoldenFormatError(f"{self.what}: {path}: {message}")

    def member(self, obj, path, key):
        if not isinstance(obj, dict):
            self.fail(path, "expected an object")
        if key not in obj:
            self.fail(path, f"missing key '{key}'")
        return obj[key]

    def string(self, obj, path, key):
        value = self.member(obj, path, key)
        if not isinstance(value, str):
            self.fail(f"{path}.{key}", f"expected a string, got {quote(value)}")
        return value

    def integer(self, value, path):
        if isinstance(value, bool) or not isinstance(value, int) or value < -INT64_MAX - 1:
            self.fail(path, f"expected an integer, got {quote(value)}")
        if value > INT64_MAX:
            self.fail(path, "integer too large")
        return value

    def key_integer(self, obj, path, key):
        return self.integer(self.member(obj, path, key), f"{path}.{key}")

    def parsed(self, path, check, text):
        try:
            check(text)
        except (ValueError, gl.LayoutError) as e:
            self.fail(path, str(e))


def _extents(m, path, extents):
    count = 1
    for extent in extents:
        count *= extent
    if count >= 2**62:
        m.fail(path, "more than 2^62 elements")


def _shapes(m, item, path):
    """manifest_reader.cpp parse_shapes: (shape, axes, global_shape)."""
    shape, axes = m.member(item, path, "shape"), m.member(item, path, "axes")
    if (not isinstance(shape, list) or not isinstance(axes, list) or len(shape) != len(axes)
            or len(shape) > 64):
        m.fail(f"{path}.shape", "shape and axes must be arrays of the same length")
    for a, extent in enumerate(shape):
        if m.integer(extent, f"{path}.shape[{a}]") < 0:
            m.fail(f"{path}.shape", "negative extent")
        if not isinstance(axes[a], str):
            m.fail(f"{path}.axes", "axis names must be strings")
    _extents(m, f"{path}.shape", shape)
    global_shape = m.member(item, path, "global_shape")
    if not isinstance(global_shape, dict) or len(global_shape) > 64:
        m.fail(f"{path}.global_shape", "expected an object")
    for axis, extent in global_shape.items():
        if m.integer(extent, f"{path}.global_shape.{axis}") < 0:
            m.fail(f"{path}.global_shape", "negative extent")
    _extents(m, f"{path}.global_shape", global_shape.values())
    return shape, axes, global_shape


def _boundary(m, boundary, path):
    """manifest_reader.cpp boundary_text: id >= 0, step and chunk >= 1, a known kind, ..."""
    if m.key_integer(boundary, path, "id") < 0:
        m.fail(f"{path}.id", "negative")
    if m.key_integer(boundary, path, "step") < 1:
        m.fail(f"{path}.step", "steps count from 1")
    if m.key_integer(boundary, path, "chunk") < 1:
        m.fail(f"{path}.chunk", "chunks count from 1")
    if "micro" in boundary and m.key_integer(boundary, path, "micro") < 0:
        m.fail(f"{path}.micro", "negative")
    if m.string(boundary, path, "kind") not in KINDS:
        m.fail(f"{path}.kind", f"unknown boundary kind {name(boundary['kind'])}")
    m.string(boundary, path, "dense")
    if not isinstance(m.member(boundary, path, "exact_claimed"), bool):
        m.fail(f"{path}.exact_claimed", "expected true or false")
    m.string(boundary, path, "op")
    m.string(boundary, path, "tensor")


def _near_midpoint(m, item, path, shape):
    if "near_midpoint" not in item:
        return
    where, numel = f"{path}.near_midpoint", 1
    for extent in shape:
        numel *= extent
    count = m.key_integer(item["near_midpoint"], where, "count")
    first = m.key_integer(item["near_midpoint"], where, "first_index")
    if not 1 <= count <= numel:
        m.fail(f"{where}.count", "out of range")
    if not 0 <= first < numel:
        m.fail(f"{where}.first_index", "out of range")


def _metadata(m, item, path, info, mesh, derived):
    """manifest_reader.cpp check_metadata: what the writer derives from the global shape, the
    placement and the rank. `derived` caches the ranks of a (global shape, placement)."""
    try:
        layout = gl.parse_layout(info["placement"], len(mesh))
    except gl.LayoutError as e:
        m.fail(f"{path}.placement", str(e))
    shape, glob, rank = info["shape"], info["global_shape"], info["rank"]
    text = gl.layout_str(layout)
    if list(glob) != info["axes"]:
        m.fail(f"{path}.global_shape", f"its axes {gl.shape_str(glob)} are not the tensor's axes, "
                                       f"in order")
    for p in layout:
        if p.kind == "shard" and p.axis not in glob:
            m.fail(f"{path}.placement", f"{text} shards an axis global_shape does not have")
    problem = gl.layout_problem(layout, mesh)  # compare asserts instead (axis_slice)
    if problem:
        m.fail(f"{path}.placement", problem)
    shard = rank is not None
    if m.string(item, path, "role") != ("shard" if shard else "global"):
        m.fail(f"{path}.role", 'a tensor with a rank must be a "shard"' if shard
               else 'a tensor without a rank must be "global"')
    expected = gl.local_shape(glob, layout, mesh, rank) if shard else glob
    if list(expected.values()) != shape:
        m.fail(f"{path}.shape", f"does not match {gl.shape_str(expected)}, which global_shape and "
                                f"{text} give {'this rank' if shard else 'the global value'}")
    offset = gl.offset_json(glob, layout, mesh, rank) if shard else {}
    if not json_equal(m.member(item, path, "offset"), offset):
        m.fail(f"{path}.offset", f"expected {json.dumps(offset)} for {text}")
    runs = gl.runs_json(glob, layout, mesh, rank) if shard else {}
    if not json_equal(item.get("runs", {}), runs):
        m.fail(f"{path}.runs", f"expected {json.dumps(runs)} for {text}" if runs else
               f"unexpected: {text} gives this tensor one run per sharded axis")
    if shard and info["slice"] != gl.slice_label(glob, layout, mesh, rank):
        m.fail(f"{path}.slice", f"expected {name(gl.slice_label(glob, layout, mesh, rank))}")
    key = (json.dumps(list(glob.items())), text)
    if key not in derived:
        derived[key] = gl.ranks_json(glob, layout, mesh)
    if not json_equal(m.member(item, path, "ranks"), derived[key]):
        m.fail(f"{path}.ranks", f"does not match the extents {text} gives each of the "
                                f"{len(derived[key])} ranks")


def _info(m, item, path, mesh, derived):
    """manifest_reader.cpp parse_info: one tensors[] entry, checked."""
    info = {"name": m.string(item, path, "name"), "file": m.string(item, path, "file")}
    file = info["file"]
    if not file or "/" in file or file.startswith(".") or "\0" in file:
        m.fail(f"{path}.file", f"{name(file)} must be a plain file name inside the directory")
    info["dtype"] = m.string(item, path, "dtype")
    if info["dtype"] not in DTYPES:
        m.fail(f"{path}.dtype", f"unknown dtype {name(info['dtype'])}")
    info["shape"], info["axes"], info["global_shape"] = _shapes(m, item, path)
    info["rank"] = info["slice"] = None
    if m.member(item, path, "rank") is not None:
        info["rank"] = m.integer(item["rank"], f"{path}.rank")
        if not 0 <= info["rank"] < gl.mesh_size(mesh):
            m.fail(f"{path}.rank", "rank out of range")
        info["slice"] = m.string(item, path, "slice")
    offset = m.member(item, path, "offset")
    if not isinstance(offset, dict):
        m.fail(f"{path}.offset", "expected an object")
    for axis, begin in offset.items():
        m.integer(begin, f"{path}.offset.{axis}")
    info["placement"] = m.string(item, path, "placement")
    info["sha256"] = m.string(item, path, "sha256")
    _boundary(m, m.member(item, path, "boundary"), f"{path}.boundary")
    if info["rank"] is None and item.get("slice") is not None:
        m.fail(f"{path}.slice", f"a global tensor has no slice (null), got {quote(item['slice'])}")
    _near_midpoint(m, item, path, info["shape"])
    _metadata(m, item, path, info, mesh, derived)
    return info


def _mesh(m, manifest, ranks):
    """manifest_reader.cpp parse_mesh: "mesh" (N-D) multiplies to "ranks"; else 1-D "world"."""
    if "mesh" not in manifest:
        return [("world", ranks)]
    dims, out, total = manifest["mesh"], [], 1
    if not isinstance(dims, list) or not dims:
        m.fail("mesh", "expected a non-empty array of dims")
    for d, dim in enumerate(dims):
        path = f"mesh[{d}]"
        dim_name = m.string(dim, path, "name")
        if not gl.is_axis_name(dim_name):
            m.fail(f"{path}.name", f"not a dim name: {name(dim_name)}")
        if any(dim_name == earlier for earlier, _ in out):
            m.fail(f"{path}.name", f"duplicate dim name {name(dim_name)}")
        size = m.key_integer(dim, path, "size")
        if not 1 <= size <= 4096:
            m.fail(f"{path}.size", "out of range")
        total *= size
        if total > 4096:
            m.fail("mesh", "more than 4096 ranks")
        out.append((dim_name, size))
    if total != ranks:
        m.fail("mesh", f"its dims multiply to {total}, not to ranks")
    return out


def _descriptive(m, manifest):
    """manifest_reader.cpp check_descriptive: the keys compare only prints, typed."""
    if m.key_integer(manifest, "(root)", "significand_bits") < 2:
        m.fail("significand_bits", "out of range")
    m.parsed("reduce_order", gl.check_reduce_order, m.string(manifest, "(root)", "reduce_order"))
    m.parsed("schedule", gl.check_schedule, m.string(manifest, "(root)", "schedule"))
    if m.string(manifest, "(root)", "verdict") not in ("pass", "fail"):
        m.fail("verdict", 'expected "pass" or "fail"')
    for key in ("faults", "dtypes"):
        names = m.member(manifest, "(root)", key)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            m.fail(key, "expected an array of names")
        for dtype in names:
            if key == "dtypes" and dtype not in ("f64", "f32", "bf16", "f16"):
                m.fail(key, f"unknown dtype {name(dtype)}")
    if not isinstance(m.member(manifest, "(root)", "boundaries"), list):
        m.fail("boundaries", "expected an array")


def _gap(m, budget, key, path):
    """manifest_budgets.cpp read_gap: a number >= 0 (an integer for ulp), or "inf"."""
    value = m.member(budget, path, key)
    if value == "inf":
        return float("inf")
    integer = isinstance(value, int) and not isinstance(value, bool)
    number = integer or (isinstance(value, float) and key != "ulp")
    if not number or not 0 <= value < float("inf"):
        m.fail(f"{path}.{key}", f"expected {'an integer' if key == 'ulp' else 'a number'} >= 0 "
                                f'or "inf", got {quote(value)}')
    return value


def _budgets(m, manifest, infos):
    """manifest_budgets.cpp parse_budgets: with "budgets", every BF16/F16 tensor of a format
    with budgets has one and no other tensor does; without, no tensor has one."""
    tensors = manifest["tensors"]
    if "budgets" not in manifest:
        for i, item in enumerate(tensors):
            if "budget" in item:
                m.fail(f"tensors[{i}].budget", 'a budget without "budgets"')
        return
    budgets = manifest["budgets"]
    if not isinstance(budgets, dict):
        m.fail("budgets", "expected an object")
    if budgets.get("accumulate") != "f32":
        m.fail("budgets.accumulate", 'expected "f32"')
    for key, check in (("reduce_orders", gl.check_reduce_order), ("schedules", gl.check_schedule)):
        names = budgets.get(key)
        if not isinstance(names, list) or not names:
            m.fail(f"budgets.{key}", "expected a non-empty array of names")
        for text in names:
            if not isinstance(text, str):
                m.fail(f"budgets.{key}", "expected names (strings)")
            m.parsed(f"budgets.{key}", check, text)
    unavailable = budgets.get("unavailable")
    if not isinstance(unavailable, dict):
        m.fail("budgets.unavailable", "expected an object")
    for fmt, reason in unavailable.items():
        if fmt not in ("bf16", "f16") or not isinstance(reason, str):
            m.fail(f"budgets.unavailable.{fmt}", "expected bf16 or f16: a reason")
    for i, (item, info) in enumerate(zip(tensors, infos)):
        fmt = {"BF16": "bf16", "F16": "f16"}.get(info["dtype"])
        expected = fmt is not None and fmt not in unavailable
        if ("budget" in item) != expected:
            m.fail(f"tensors[{i}].budget", "missing: every BF16/F16 tensor has a budget" if expected
                   else "unexpected: only BF16/F16 tensors of a format with budgets have one")
        if expected:
            path = f"tensors[{i}].budget"
            if not isinstance(item["budget"], dict):
                m.fail(path, "expected an object")
            info["budget"] = {k: _gap(m, item["budget"], k, path) for k in ("normwise", "ulp")}


def _boundary_params(m, manifest, infos):
    """{boundary id: params} from "boundaries" (compare does not read them; this reader hands
    them out as GoldenTensor.params, so each tensor's boundary must be listed once)."""
    params = {}
    for i, b in enumerate(manifest["boundaries"]):
        bid = m.key_integer(b, f"boundaries[{i}]", "id")
        if bid in params:
            m.fail(f"boundaries[{i}].id", f"duplicate boundary id {bid}")
        params[bid] = m.member(b, f"boundaries[{i}]", "params")
        if params[bid] is not None and not isinstance(params[bid], dict):
            m.fail(f"boundaries[{i}].params", "expected an object or null")
    for i, item in enumerate(manifest["tensors"]):
        if item["boundary"]["id"] not in params:
            m.fail(f"tensors[{i}].boundary.id", "no entry of \"boundaries\" has this id")
        infos[i]["params"] = params[item["boundary"]["id"]]


def parse_manifest(raw, what):
    """(manifest, infos) of a manifest's bytes, checked as manifest_reader.cpp parse_manifest
    checks it; infos: one dict per tensor (name, file, dtype, shape, axes, global_shape, rank,
    slice, placement, sha256, budget, params). Raises GoldenFormatError naming the key."""
    manifest, m = parse_json(raw, what, MAX_DEPTH), Reader(what)
    if not isinstance(manifest, dict) or m.string(manifest, "(root)", "format") != FORMAT:
        m.fail("format", "not a shardsim golden manifest")
    if m.key_integer(manifest, "(root)", "format_version") != FORMAT_VERSION:
        m.fail("format_version", f"unsupported version (this reader reads version "
                                 f"{FORMAT_VERSION}; rewrite the goldens with shardsim)")
    digest = m.string(manifest, "(root)", DIGEST_KEY)
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        m.fail(DIGEST_KEY, "expected 64 lowercase hex digits")
    if manifest_digest(raw, digest) != digest:
        m.fail(DIGEST_KEY, "does not match the manifest's bytes: the manifest was edited or is "
                           "corrupt")
    m.parsed("precision", gl.check_precision, m.string(manifest, "(root)", "precision"))
    ranks = m.key_integer(manifest, "(root)", "ranks")
    if not 1 <= ranks <= 4096:
        m.fail("ranks", "out of range")
    mesh = _mesh(m, manifest, ranks)
    if m.string(manifest, "(root)", "storage") not in ("safetensors", "npy"):
        m.fail("storage", "expected safetensors or npy")
    if not isinstance(m.member(manifest, "(root)", "tensors"), list):
        m.fail("tensors", "expected an array")
    _descriptive(m, manifest)
    m.string(m.member(manifest, "(root)", "scenario"), "scenario", "name")
    m.string(manifest["scenario"], "scenario", "sha256")
    m.string(manifest, "(root)", "shardsim_version")
    infos, names, derived = [], set(), {}
    for i, item in enumerate(manifest["tensors"]):
        path = f"tensors[{i}]"
        infos.append(_info(m, item, path, mesh, derived))
        file = infos[-1]["file"]
        npy = manifest["storage"] == "npy"
        if (not file.endswith(".npy")) if npy else file != SAFETENSORS:
            m.fail(f"{path}.file", f"{name(file)} is not a file of {manifest['storage']} storage")
        if infos[-1]["name"] in names:
            m.fail(f"{path}.name", f"duplicate name {name(infos[-1]['name'])}")
        names.add(infos[-1]["name"])
    _budgets(m, manifest, infos)
    _boundary_params(m, manifest, infos)
    return manifest, infos
