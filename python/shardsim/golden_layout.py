"""Placements on a device mesh, as shardsim computes them (sim/core/placement.cpp,
sim/core/mesh.cpp, sim/core/trace.cpp rank_extents, sim/golden/manifest.cpp): what the golden
writer derives from a tensor's global shape, placement and rank, so that shardsim.golden
can check a manifest's offset, runs, slice, local shape and ranks the way `shardsim compare`
checks them (sim/golden/manifest_reader.cpp check_metadata). numpy-free.

A mesh is a list of (name, size) dims, outermost first; a global shape an ordered dict
{axis: extent}; a layout a list of Placement, one per mesh dim. The other names a manifest
uses (precision, reduce order, schedule) are checked at the end, as shardsim parses them.
"""
import re
from collections import namedtuple

SPLITS = ("chunk", "balanced", "padded", "zigzag")
USAGE = "expected Replicate, Partial(sum), Shard(AXIS) or Shard(AXIS, chunk|balanced|padded|zigzag)"


class LayoutError(ValueError):
    """A placement or layout that does not parse (placement.cpp parse_placement/parse_layout)."""


Placement = namedtuple("Placement", "kind axis split")  # kind: shard | replicate | partial


class Slice(namedtuple("Slice", "begin end local_extent second_begin second_end",
                       defaults=(0, 0))):
    """A rank's share of an axis (placement.hpp Slice): [begin, end), then (zigzag) a second
    run [second_begin, second_end); positions past the valid ones are padding."""

    @property
    def valid(self):
        return self.end - self.begin + self.second_end - self.second_begin

    @property
    def contiguous(self):
        return self.second_end == self.second_begin

    @property
    def pad(self):
        return self.local_extent - self.valid


def is_axis_name(name):
    """placement.cpp is_axis_name: non-empty, ASCII letters, digits and '_' only."""
    return (isinstance(name, str) and bool(name) and
            all(c == "_" or (c.isascii() and c.isalnum()) for c in name))


def parse_placement(text):
    """placement.cpp parse_placement: Replicate, Partial(sum) (or Partial), Shard(AXIS) or
    Shard(AXIS, SPLIT); spaces around the whole and around AXIS and SPLIT are allowed."""
    s = text.strip(" ")
    if s == "Replicate":
        return Placement("replicate", "", "chunk")
    if s in ("Partial(sum)", "Partial"):
        return Placement("partial", "", "chunk")
    if len(s) > 7 and s.startswith("Shard(") and s.endswith(")"):
        axis, comma, policy = s[6:-1].partition(",")
        split = policy.strip(" ") if comma else "chunk"
        if split not in SPLITS:
            raise LayoutError(f"placement {s!r}: unknown split policy {split!r} (known: "
                              f"{', '.join(SPLITS)})")
        if is_axis_name(axis.strip(" ")):
            return Placement("shard", axis.strip(" "), split)
    raise LayoutError(f"invalid placement {s!r}: {USAGE}")


def parse_layout(text, ndim):
    """placement.cpp parse_layout: one placement on a 1-D mesh, else "[P0, P1, ...]" with
    exactly ndim entries (split at commas outside parentheses)."""
    if ndim == 1:
        return [parse_placement(text)]
    if len(text) < 2 or not text.startswith("[") or not text.endswith("]"):
        raise LayoutError(f"expected a list of {ndim} placements, e.g. [Replicate, Shard(seq)]")
    items, depth, start, rest = [], 0, 0, text[1:-1]
    for i, c in enumerate(rest + ","):
        depth += (c == "(") - (c == ")")
        if c == "," and (depth == 0 or i == len(rest)):
            items.append(parse_placement(rest[start:i].lstrip(" ")))
            start = i + 1
    if len(items) != ndim:
        raise LayoutError(f"expected {ndim} placements, one per mesh dim, got {len(items)}")
    return items


def layout_str(layout):
    """placement.cpp Layout::str."""
    def one(p):
        if p.kind != "shard":
            return "Replicate" if p.kind == "replicate" else "Partial(sum)"
        return f"Shard({p.axis})" if p.split == "chunk" else f"Shard({p.axis}, {p.split})"
    return one(layout[0]) if len(layout) == 1 else "[" + ", ".join(map(one, layout)) + "]"


def layout_problem(layout, mesh):
    """placement.cpp Layout::problem: a zigzag dim must be the only dim sharding its axis."""
    for d, p in enumerate(layout):
        if p.kind == "shard" and p.split == "zigzag":
            for e, q in enumerate(layout):
                if e != d and q.kind == "shard" and q.axis == p.axis:
                    return (f"mesh dims '{mesh[min(d, e)][0]}' and '{mesh[max(d, e)][0]}' both "
                            f"shard '{p.axis}', and a zigzag share cannot nest with another")
    return ""


def shard_slices(extent, ranks, split):
    """placement.cpp shard_slices: one Slice per rank."""
    if split == "zigzag":  # rank r holds torch.chunk pieces r and 2k-1-r of 2k
        pieces, out = shard_slices(extent, 2 * ranks, "chunk"), []
        for r in range(ranks):
            first, second = pieces[r], pieces[2 * ranks - 1 - r]
            share = Slice(first.begin, first.end, first.valid + second.valid)
            if second.valid == 0:
                pass
            elif first.valid == 0:
                share = share._replace(begin=second.begin, end=second.end)
            elif second.begin == first.end:
                share = share._replace(end=second.end)
            else:
                share = share._replace(second_begin=second.begin, second_end=second.end)
            out.append(share)
        return out
    if split == "balanced":
        base, extra, out, begin = extent // ranks, extent % ranks, [], 0
        for r in range(ranks):
            size = base + (1 if r < extra else 0)
            out.append(Slice(begin, begin + size, size))
            begin += size
        return out
    chunk, out = (extent + ranks - 1) // ranks, []
    for r in range(ranks):
        begin, end = min(extent, r * chunk), min(extent, (r + 1) * chunk)
        out.append(Slice(begin, end, chunk if split == "padded" else end - begin))
    return out


def mesh_size(mesh):
    size = 1
    for _, n in mesh:
        size *= n
    return size


def coord(mesh, rank, d):
    """mesh.cpp Mesh::coord: row-major coordinates, the last dim fastest."""
    inner = 1
    for _, size in mesh[d + 1:]:
        inner *= size
    return (rank // inner) % mesh[d][1]


def shards(layout, axis):
    return any(p.kind == "shard" and p.axis == axis for p in layout)


def axis_slice(global_shape, layout, mesh, rank, axis):
    """placement.cpp axis_slice: the dims in order, each splitting the current local extent.
    REQUIRES: layout_problem(layout, mesh) is empty."""
    extent = global_shape[axis]
    share = Slice(0, extent, extent)
    for d, p in enumerate(layout):
        if p.kind != "shard" or p.axis != axis:
            continue
        piece = shard_slices(share.local_extent, mesh[d][1], p.split)[coord(mesh, rank, d)]
        if p.split == "zigzag" or not share.contiguous:
            share = piece
            continue
        valid = share.valid
        share = Slice(share.begin + min(piece.begin, valid), share.begin + min(piece.end, valid),
                      piece.local_extent)
    return share


def local_shape(global_shape, layout, mesh, rank):
    return {axis: axis_slice(global_shape, layout, mesh, rank, axis).local_extent
            if shards(layout, axis) else extent for axis, extent in global_shape.items()}


def _label(s):  # placement.cpp slice_label_str
    out = f"{s.begin}:{s.end}" + ("" if s.contiguous else f"+{s.second_begin}:{s.second_end}")
    return out + (f"+{s.pad}pad" if s.pad > 0 else "")


def _slice_str(axis, s):  # placement.cpp slice_str
    out = f"{axis}[{s.begin}:{s.end})"
    out += "" if s.contiguous else f"+[{s.second_begin}:{s.second_end})"
    return out + (f"+{s.pad}pad" if s.pad > 0 else "")


def _sharded(global_shape, layout, mesh, rank):
    return [(axis, axis_slice(global_shape, layout, mesh, rank, axis))
            for axis in global_shape if shards(layout, axis)]


def slice_label(global_shape, layout, mesh, rank):
    """manifest.cpp slice_label: "seq=12:13", "batch=0:1,seq=7:13", ",partial", "replicate"."""
    out = ",".join(f"{a}={_label(s)}" for a, s in _sharded(global_shape, layout, mesh, rank))
    if any(p.kind == "partial" for p in layout):
        return out + ",partial" if out else "partial"
    return out or "replicate"


def offset_json(global_shape, layout, mesh, rank):
    """manifest.cpp offset_json: {axis: begin} per sharded axis, in the global shape's order."""
    return {a: s.begin for a, s in _sharded(global_shape, layout, mesh, rank)}


def runs_json(global_shape, layout, mesh, rank):
    """manifest.cpp runs_json: {axis: [[b, e], [b, e]]} for each two-run (zigzag) share."""
    return {a: [[s.begin, s.end], [s.second_begin, s.second_end]]
            for a, s in _sharded(global_shape, layout, mesh, rank) if not s.contiguous}


def ranks_json(global_shape, layout, mesh):
    """manifest.cpp ranks_json (trace.cpp rank_extents): every rank's coords (N-D meshes only),
    local shape, offset (a std::map: sorted by axis name) and slice text."""
    out = []
    for r in range(mesh_size(mesh)):
        sharded = _sharded(global_shape, layout, mesh, r)
        text = " ".join(_slice_str(a, s) for a, s in sharded)
        if any(p.kind == "partial" for p in layout):
            text += " (addend)" if text else "full (addend)"
        item = {"rank": r}
        if len(mesh) > 1:
            item["coords"] = [coord(mesh, r, d) for d in range(len(mesh))]
        item.update(local_shape=local_shape(global_shape, layout, mesh, r),
                    offset={a: s.begin for a, s in sorted(sharded)}, slice=text or "full")
        out.append(item)
    return out


# ---- the other names a manifest uses ----

def shape_str(shape):
    """shape.cpp Shape::str: [batch=2, seq=13, hidden=16]."""
    return "[" + ", ".join(f"{axis}={extent}" for axis, extent in shape.items()) + "]"


def check_precision(text):
    """scalar.cpp parse_precision: bf16, f16, f32, f64, dd, qd or mpN with 64 <= N <= 65536."""
    m = re.fullmatch(r"mp([0-9]+)", text)
    if text in ("f32", "f64", "bf16", "f16", "dd", "qd") or (m and 64 <= int(m.group(1)) <= 65536):
        return
    raise ValueError(f"invalid precision {text!r}: expected bf16, f16, f32, f64, dd, qd or "
                     f"mp<bits> with 64 <= bits <= 65536 (e.g. mp256)")


def check_reduce_order(text):  # mesh.cpp parse_reduce_order
    if text not in ("rank", "ring", "tree"):
        raise ValueError(f"unknown reduce order {text!r} (known: rank, ring, tree)")


def check_schedule(text):  # mesh.cpp parse_schedule: rank, reverse, shuffle:SEED (a u64)
    m = re.fullmatch(r"shuffle:([0-9]+)", text)
    if text not in ("rank", "reverse") and not (m and int(m.group(1)) < 2**64):
        raise ValueError(f"unknown schedule {text!r} (known: rank, reverse, shuffle:SEED)")
