"""The plan vocabulary of shardsim.capture (DTensor's names), the mesh, the loss and the error
they raise: what a capture's arguments are made of. No torch needed here; the modules that
trace and build import it, and it imports none of them.
"""
import difflib
import numbers


class CaptureError(ValueError):
    """A model, plan, mesh or loss the capture cannot express as a shardsim scenario."""


# ---- the plan vocabulary (DTensor's names) ----

class Shard:
    """DTensor's Shard(dim): dim indexes the tensor's axes (batch, seq, hidden): 1 is seq."""

    def __init__(self, dim):
        self.dim = dim


class Replicate:
    """DTensor's Replicate()."""


class ParallelStyle:
    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True,
                 mesh_dim=None):
        self.input_layouts = input_layouts
        self.output_layouts = output_layouts
        self.use_local_output = use_local_output
        self.mesh_dim = mesh_dim  # None: the only dim of a 1-D mesh


class ColwiseParallel(ParallelStyle):
    """nn.Linear: weight and bias Shard(out); the input is made Replicate (all-gather)."""


class RowwiseParallel(ParallelStyle):
    """nn.Linear: weight Shard(in), bias Replicate; the output is Partial(sum), reduced when the
    next op needs it (reduce-scatter to Shard(seq) under sequence parallelism, else all-reduce),
    or at once to `output_layouts` when given (Shard(1) or Replicate()).
    nn.Embedding (as DTensor shards it): weight Shard(vocab), its dim 0 (vocab-parallel); the
    ids Replicate; the masked lookups reduced at once, to `output_layouts` when given, else to
    Shard(seq) under sequence parallelism (reduce-scatter), else Replicate (all-reduce)."""


class SequenceParallel(ParallelStyle):
    """LayerNorm, RMSNorm, Dropout, GELU: the input and output are Shard(seq)."""

    def __init__(self, *, sequence_dim=1, use_local_output=False, mesh_dim=None):
        super().__init__(use_local_output=use_local_output, mesh_dim=mesh_dim)
        self.sequence_dim = sequence_dim


class HeadParallel(ParallelStyle):
    """shardsim.modules.GQAttention, heads over the mesh dim (Megatron's ParallelAttention;
    torchtitan plans it as wq, wk, wv ColwiseParallel and wo RowwiseParallel, which capture()
    also reads): wq and wo Shard(head), wk and wv Shard(kv_head) when the dim's size divides
    n_kv_head, else Replicate; the input is made Replicate; the output is Partial(sum), reduced
    when the next op needs it (as RowwiseParallel's), or at once to `output_layouts`."""


class ContextParallel:
    """shardsim.modules.SlidingWindowAttention: the KV axis is split over the mesh dim's ranks.
    mode: allgather | ring | ulysses (docs/ops/attention.md); layout: how the KV
    axis is split, "chunk" (torch.chunk) is shardsim's."""

    MODES = ("allgather", "ring", "ulysses")
    LAYOUTS = ("chunk",)

    def __init__(self, mode="allgather", layout="chunk", mesh_dim=None):
        self.mode, self.layout, self.mesh_dim = mode, layout, mesh_dim


STYLES = {cls.__name__: cls for cls in (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                        HeadParallel, ContextParallel)}


class MSELoss:
    """shardsim's mse_loss of the model's output against `target` (same shape): the sum over
    valid tokens of sum_h (y - target)^2 divided by the valid-token count; token (b, s) is valid
    iff s < valid_lengths[b] (all valid when None). shardsim.modules.mse_loss computes it."""

    def __init__(self, target, valid_lengths=None):
        self.target = target
        self.valid_lengths = None
        if valid_lengths is not None:  # integers, never truncated (counts: ops/loss.cpp)
            lengths = list(valid_lengths) if isinstance(valid_lengths, (list, tuple)) else None
            if lengths is None or any(isinstance(n, bool) or not isinstance(n, numbers.Integral)
                                      for n in lengths):
                raise CaptureError(f"MSELoss valid_lengths={valid_lengths!r}: expected a list of "
                                   f"integers, one per batch element")
            self.valid_lengths = [int(n) for n in lengths]


class CrossEntropyLoss:
    """shardsim's cross_entropy of the model's output (the logits, vocabulary last) against
    `labels`, class indices (torch.int64) of the logits' other axes: PyTorch's
    F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=ignore_index,
    label_smoothing=label_smoothing), the mean over the labels that are not ignore_index; plus,
    when z_loss > 0, PaLM's z-loss z_loss * (sum of lse^2 over those tokens) / their count (not
    in PyTorch). Class weights, class-probability labels and other reductions are not
    supported. The numbers are checked by capture() (shardsim.capture.arguments)."""

    def __init__(self, labels, ignore_index=-100, label_smoothing=0.0, z_loss=0.0):
        self.labels = labels
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        self.z_loss = z_loss


LOSSES = (MSELoss, CrossEntropyLoss)


# ---- mesh and plan ----

class Mesh:
    """The device mesh: ordered (name, size) dims. Only 1-D meshes reach a scenario for now;
    `dim_of(style)` is the seam where N-D placements will pick their dim."""

    def __init__(self, mesh):
        if not isinstance(mesh, dict) or not mesh:
            raise CaptureError(f"mesh must be a dict of dim name -> size, e.g. {{'tp': 4}}; "
                               f"got {mesh!r}")
        for name, size in mesh.items():
            if not isinstance(name, str) or not name or not all(
                    c == "_" or (c.isascii() and c.isalnum()) for c in name):
                # loader_mesh.cpp: a mesh dim name has letters, digits and _ only
                raise CaptureError(f"mesh dim name {name!r}: a dim name is non-empty and has "
                                   f"letters, digits and _ only")
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 4096:
                raise CaptureError(f"mesh dim '{name}' has size {size!r}; a size is an integer "
                                   f"in [1, 4096]")
        if len(mesh) > 1:
            raise CaptureError(f"mesh {mesh!r} has {len(mesh)} dims: N-D meshes are not "
                               f"supported yet (a scenario's mesh is 1-D, ranks = N); capture "
                               f"one dim, e.g. {{{next(iter(mesh))!r}: "
                               f"{next(iter(mesh.values()))}}}")
        self.dims = list(mesh.items())
        self.ranks = self.dims[0][1]

    def dim_of(self, path, style):
        """The index of the mesh dim `style` runs on (plan entry `path`)."""
        names = [name for name, _ in self.dims]
        if style.mesh_dim is None:
            return 0
        if isinstance(style.mesh_dim, int) and 0 <= style.mesh_dim < len(names):
            return style.mesh_dim
        if style.mesh_dim not in names:
            sizes = ", ".join(f"'{n}' (size {s})" for n, s in self.dims)
            raise CaptureError(f"plan['{path}'] ({style.kind}) runs on mesh dim "
                               f"'{style.mesh_dim}', but the mesh has only {sizes}")
        return names.index(style.mesh_dim)


class Style:
    """One plan entry, normalized: kind (the class name), mesh_dim, output_layouts, mode, layout."""

    def __init__(self, path, value):
        kind = value if isinstance(value, str) else type(value).__name__
        if kind not in STYLES:
            raise CaptureError(f"plan['{path}'] = {value!r}: unknown style (known: "
                               f"{', '.join(STYLES)})")
        spec = STYLES[kind]() if isinstance(value, str) else value
        self.kind = kind
        self.mesh_dim = getattr(spec, "mesh_dim", None)
        self.output_layouts = getattr(spec, "output_layouts", None)
        self.mode = getattr(spec, "mode", None)
        self.layout = getattr(spec, "layout", None)
        if kind == "SequenceParallel" and getattr(spec, "sequence_dim", 1) != 1:
            raise CaptureError(f"plan['{path}']: SequenceParallel(sequence_dim="
                               f"{spec.sequence_dim}); inputs are (batch, seq, hidden), seq is 1")
        if kind == "ContextParallel":
            if self.mode not in ContextParallel.MODES:
                raise CaptureError(f"plan['{path}']: ContextParallel mode {self.mode!r} "
                                   f"(known: {', '.join(ContextParallel.MODES)})")
            if self.layout not in ContextParallel.LAYOUTS:
                raise CaptureError(f"plan['{path}']: ContextParallel layout {self.layout!r} "
                                   f"(known: {', '.join(ContextParallel.LAYOUTS)})")


TORCHTITAN_ATTENTION = (("wq", "ColwiseParallel"), ("wk", "ColwiseParallel"),
                        ("wv", "ColwiseParallel"), ("wo", "RowwiseParallel"))


def head_parallel_plan(plan, attentions):
    """torchtitan's spelling of head-parallel attention read as HeadParallel: the plan keys
    ATTN.wq, ATTN.wk, ATTN.wv (ColwiseParallel) and ATTN.wo (RowwiseParallel), ATTN the path of a
    GQAttention (one of `attentions`; "" for the model itself), become one entry ATTN:
    HeadParallel, with wo's output_layouts, on their mesh dim. Some of the four, another style
    or a second plan entry for ATTN is a CaptureError. Other keys are returned as they are."""
    fields = dict(TORCHTITAN_ATTENTION)
    found, result = {}, {}
    for path, value in plan.items():
        owner, _, field = path.rpartition(".")
        if field in fields and owner in attentions:
            found.setdefault(owner, {})[field] = Style(path, value)
        else:
            result[path] = value
    for owner, entries in found.items():
        keys = {field: f"{owner}.{field}" if owner else field for field in fields}
        want = ", ".join(f"'{keys[f]}': {kind}" for f, kind in TORCHTITAN_ATTENTION)
        wrong = [f"plan['{keys[f]}'] = {s.kind}" for f, s in entries.items() if s.kind != fields[f]]
        wrong += [f"plan['{keys[f]}'] missing" for f in fields if f not in entries]
        if owner in result:
            wrong.append(f"plan['{owner}'] = {Style(owner, result[owner]).kind} as well")
        if len({repr(s.mesh_dim) for s in entries.values()}) > 1:
            wrong.append("the four on different mesh dims")
        if wrong:
            raise CaptureError(f"{'; '.join(wrong)}: GQAttention '{owner or 'the model'}' is "
                               f"planned as torchtitan plans attention, {{{want}}} (all four, on "
                               f"one mesh dim), or as {{'{owner}': HeadParallel}}")
        wo = entries["wo"]
        result[owner] = HeadParallel(output_layouts=wo.output_layouts, mesh_dim=wo.mesh_dim)
    return result


def _nearest(word, candidates):
    close = difflib.get_close_matches(word, candidates, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
