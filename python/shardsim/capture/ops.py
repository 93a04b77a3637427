"""One function per supported module kind (shardsim.capture): each places its input,
declares its parameters with their placements and emits its shardsim step.

Signature: kind(builder, path, module, style, x, name, out_shape) -> the output Value, where
`x` is the input Value, `style` the plan entry (or None) and `name` the output's tensor name.
Parameters are named as in the model's state_dict ("fc1.weight").
"""
import copy

import torch

from .plan import CaptureError
from .values import PARTIAL, REPLICATE, Gate, Value, shard

SP = ("SequenceParallel",)
STYLES_FOR = {"linear": ("ColwiseParallel", "RowwiseParallel"), "layer_norm": SP,
              "rms_norm": SP, "gelu": SP, "dropout": SP, "identity": (),
              "attention": ("ContextParallel",), "embedding": ("RowwiseParallel",),
              "silu": (), "gqa_attention": ("HeadParallel",)}


def layout_placement(layout, axes, where):
    """A DTensor layout (Shard(dim), Replicate(), their DTensor originals, or a shardsim
    placement string) as a shardsim placement of a tensor with `axes`."""
    if isinstance(layout, (tuple, list)) and len(layout) == 1:
        layout = layout[0]
    if isinstance(layout, str) and (layout == REPLICATE or layout.startswith("Shard(")):
        return layout
    kind = type(layout).__name__
    if kind == "Replicate":
        return REPLICATE
    if kind == "Shard" and isinstance(getattr(layout, "dim", None), int):
        if -len(axes) <= layout.dim < len(axes):
            return shard(axes[layout.dim])
    raise CaptureError(f"{where}: layout {layout!r} is not Shard(dim) of {axes} or Replicate()")


def sequence_parallel(b, x, path):
    """SequenceParallel: the input is made Shard(seq) (reduce-scatter a Partial, slice a
    Replicate)."""
    x = b.whole(x, f"SequenceParallel '{b.display[path]}' takes Shard(seq)")
    return b.redistribute(x, shard("seq"), f"SequenceParallel '{b.display[path]}' takes Shard(seq)")


def out_axis_name(b, x, m):
    """The name of a Linear's output axis: "vocab" for an LM head (its weight an embedding's, or
    its width an embedding's vocabulary and not the model's); "hidden" when it maps back to the
    model's width from another axis; else the first of ffn, ffn2, ... that is not the input
    axis."""
    features = m.out_features
    if id(m.weight) in b.embedding_weights or (features in b.vocab_sizes and features != b.hidden):
        return "vocab"
    if features == b.hidden and x.axes[-1] != "hidden":
        return "hidden"
    k = 1
    while (name := "ffn" if k == 1 else f"ffn{k}") == x.axes[-1]:
        k += 1
    return name


def linear(b, path, m, style, x, name, out_shape):
    kind = style.kind if style else None
    in_axis, out_axis = x.axes[-1], out_axis_name(b, x, m)
    label = f"'{b.display[path]}'"
    if kind == "ColwiseParallel":
        x = b.whole(x, f"ColwiseParallel {label} takes a Replicate input")
        x = b.redistribute(x, REPLICATE, f"ColwiseParallel {label} takes a Replicate input "
                           f"(backward: all-reduce the Partial input gradient)", conjugate=True)
        weight_placement = bias_placement = out_placement = shard(out_axis)
    elif kind == "RowwiseParallel":
        x = b.whole(x, f"RowwiseParallel {label} takes Shard({in_axis})")
        x = b.redistribute(x, shard(in_axis), f"RowwiseParallel {label} takes Shard({in_axis})")
        weight_placement, bias_placement, out_placement = shard(in_axis), REPLICATE, PARTIAL
    else:
        x = b.feature_whole(x, f"Linear {label} has a Replicate weight: whole input rows")
        weight_placement = bias_placement = REPLICATE
        out_placement = b.place[x.name]
    keys = dict(input=x.name, weight=b.parameter(path, "weight", [out_axis, in_axis],
                                                 weight_placement))
    if m.bias is not None:
        keys["bias"] = b.parameter(path, "bias", [out_axis], bias_placement)
    keys["parallel"] = {"ColwiseParallel": "column", "RowwiseParallel": "row"}.get(kind, "none")
    comment = (f"{b.display[path]}: nn.Linear({m.in_features} -> {m.out_features}), "
               f"{kind or 'replicated'}")
    y = b.step("linear", comment, Value(name, x.axes[:-1] + [out_axis], out_shape), out_placement,
               **keys)
    if kind == "RowwiseParallel" and style.output_layouts is not None:
        to = layout_placement(style.output_layouts, y.axes, f"plan['{b.display[path]}']")
        y = b.redistribute(y, to, f"RowwiseParallel {label} output_layouts")
    return y


def norm_input(b, path, style, x, what):
    if style:
        return sequence_parallel(b, x, path)
    return b.feature_whole(x, f"{what} '{b.display[path]}' normalizes whole rows")


def layer_norm(b, path, m, style, x, name, out_shape):
    if tuple(m.normalized_shape) != (x.shape[-1],):
        raise CaptureError(f"LayerNorm '{b.display[path]}' normalizes {tuple(m.normalized_shape)}"
                           f"; shardsim normalizes the last axis only ({x.shape[-1]})")
    x = norm_input(b, path, style, x, "LayerNorm")
    axis = x.axes[-1]
    keys = dict(input=x.name)
    if m.weight is not None:
        keys["weight"] = b.parameter(path, "weight", [axis], REPLICATE)
    if m.bias is not None:
        keys["bias"] = b.parameter(path, "bias", [axis], REPLICATE)
    keys.update(axis=axis, eps=float(m.eps))
    how = style.kind if style else "rows"
    return b.step("layer_norm", f"{b.display[path]}: nn.LayerNorm, {how}",
                  Value(name, x.axes, out_shape), b.place[x.name], **keys)


def rms_norm(b, path, m, style, x, name, out_shape):
    eps = float(getattr(m, "eps", getattr(m, "variance_epsilon", None)))
    probe = copy.deepcopy(m).double()
    sample = torch.randn(2, 3, x.shape[-1], dtype=torch.float64,
                         generator=torch.Generator().manual_seed(0)) + 0.5
    with torch.no_grad():
        got = probe(sample)
        want = sample * torch.rsqrt(sample.pow(2).mean(-1, keepdim=True) + eps)
        want = want * probe.weight if probe.weight is not None else want
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-12, atol=0):
        cls = type(m)
        raise CaptureError(f"'{b.display[path]}' ({cls.__module__}.{cls.__qualname__}) looks like "
                           f"an RMSNorm but does not compute x * rsqrt(mean(x^2) + eps) * weight")
    x = norm_input(b, path, style, x, "RMSNorm")
    axis = x.axes[-1]
    keys = dict(input=x.name)
    if m.weight is not None:
        keys["weight"] = b.parameter(path, "weight", [axis], REPLICATE)
    keys.update(axis=axis, eps=eps)
    return b.step("rms_norm", f"{b.display[path]}: RMSNorm, {style.kind if style else 'rows'}",
                  Value(name, x.axes, out_shape), b.place[x.name], **keys)


def elementwise_input(b, path, style, x, what):
    if style:
        return sequence_parallel(b, x, path)
    return b.whole(x, f"{what} '{b.display[path]}' is elementwise on whole values")


def gelu(b, path, m, style, x, name, out_shape):
    x = elementwise_input(b, path, style, x, "GELU")
    approximate = getattr(m, "approximate", "none")
    return b.step("gelu", f"{b.display[path]}: nn.GELU(approximate={approximate!r})",
                  Value(name, x.axes, out_shape), b.place[x.name], input=x.name,
                  approximate=approximate)


def dropout(b, path, m, style, x, name, out_shape):
    x = elementwise_input(b, path, style, x, "Dropout")
    p = float(m.p) if m.training else 0.0
    note = "" if m.training else f" (eval mode: p = {m.p} off)"
    return b.step("dropout", f"{b.display[path]}: nn.Dropout; shardsim's Philox masks{note}",
                  Value(name, x.axes, out_shape), b.place[x.name], input=x.name, p=p)


def identity(b, path, m, style, x, name, out_shape):
    b.used.discard(name)
    return x


def attention(b, path, m, style, x, name, out_shape):
    if x.axes != ["batch", "seq", "hidden"]:
        raise CaptureError(f"SlidingWindowAttention '{b.display[path]}' takes (batch, seq, "
                           f"hidden), got {dict(zip(x.axes, x.shape))}")
    x = b.whole(x, "attention's queries are Replicate over the cp group")
    x = b.redistribute(x, REPLICATE, "attention's queries are Replicate over the cp group")
    heads = ["hidden", "head", "head_dim"]
    keys = dict(input=x.name)
    for field in ("wq", "wk", "wv"):
        keys[field] = b.parameter(path, field, heads, REPLICATE)
    keys["wo"] = b.parameter(path, "wo", ["head", "head_dim", "hidden"], REPLICATE)
    keys.update(n_head=m.n_head, head_dim=m.head_dim)
    if m.window is not None:
        keys["window"] = m.window
    mode = style.mode if style else "allgather"
    keys.update(rope_theta=float(m.rope_theta), rope=m.rope, cp_mode=mode)
    return b.step("sliding_window_attention", f"{b.display[path]}: SlidingWindowAttention, "
                  f"ContextParallel(mode={mode!r}, layout='chunk')",
                  Value(name, x.axes, out_shape), REPLICATE, **keys)


def gqa_attention(b, path, m, style, x, name, out_shape):
    """shardsim.modules.GQAttention. No plan entry: wq, wk, wv, wo Replicate, the input made
    Replicate, the output Replicate. HeadParallel (Megatron's ParallelAttention; torchtitan's wq,
    wk, wv ColwiseParallel and wo RowwiseParallel): wq and wo Shard(head) (the mesh dim's P ranks
    divide n_head), wk and wv Shard(kv_head) when P divides n_kv_head, else Replicate (each kv
    head on every rank); the input made Replicate with Megatron's f (its backward all-reduces
    the Partial grad(x)); the output Partial(sum), reduced when an op needs it, or at once to
    output_layouts."""
    label = f"GQAttention '{b.display[path]}'"
    if x.axes != ["batch", "seq", "hidden"]:
        raise CaptureError(f"{label} takes (batch, seq, hidden), got "
                           f"{dict(zip(x.axes, x.shape))}")
    if b.stream is not None:
        raise CaptureError(f"{label} with stream={b.stream!r}: shardsim's gqa_attention has no "
                           f"KV cache; it attends over the whole sequence at once")
    ranks = b.mesh.dims[b.mesh.dim_of(b.display[path], style)][1] if style else 1
    if style and m.n_head % ranks:
        raise CaptureError(f"plan['{b.display[path]}'] = HeadParallel over {ranks} ranks, which "
                           f"do not divide n_head = {m.n_head} (equal head groups, as Megatron)")
    heads = shard("head") if style else REPLICATE
    kv_heads = shard("kv_head") if style and m.n_kv_head % ranks == 0 else REPLICATE
    why = f"{label} takes a Replicate input"
    x = b.whole(x, why)
    x = b.redistribute(x, REPLICATE, why + (" (backward: all-reduce the Partial input gradient)"
                                            if style else ""), conjugate=bool(style))
    keys = dict(input=x.name,
                wq=b.parameter(path, "wq", ["hidden", "head", "head_dim"], heads),
                wk=b.parameter(path, "wk", ["hidden", "kv_head", "head_dim"], kv_heads),
                wv=b.parameter(path, "wv", ["hidden", "kv_head", "head_dim"], kv_heads),
                wo=b.parameter(path, "wo", ["head", "head_dim", "hidden"], heads),
                n_head=m.n_head, n_kv_head=m.n_kv_head, head_dim=m.head_dim,
                rope_theta=float(m.rope_theta))
    if m.rope != "rotate_half":
        keys["rope"] = m.rope
    how = (f"HeadParallel: {m.n_head // ranks} query heads per rank, wk, wv {kv_heads}"
           if style else "replicated")
    y = b.step("gqa_attention", f"{b.display[path]}: GQAttention({m.n_head} heads, "
               f"{m.n_kv_head} kv heads), {how}", Value(name, x.axes, out_shape),
               PARTIAL if style else REPLICATE, **keys)
    if style and style.output_layouts is not None:
        to = layout_placement(style.output_layouts, y.axes, f"plan['{b.display[path]}']")
        y = b.redistribute(y, to, f"HeadParallel {label} output_layouts")
    return y


def embedding(b, path, m, style, ids, name, out_shape):
    """nn.Embedding without padding_idx, max_norm or scale_grad_by_freq: y[t] = W[id_t]. The ids
    are Replicate. RowwiseParallel (DTensor's vocab-parallel Embedding): W Shard(vocab), each
    rank's masked lookup reduced at once (the op's `to`)."""
    label = f"Embedding '{b.display[path]}'"
    for field, plain in (("padding_idx", None), ("max_norm", None),
                         ("scale_grad_by_freq", False)):
        if getattr(m, field) != plain:
            raise CaptureError(f"{label} has {field}={getattr(m, field)!r}; shardsim's embedding "
                               f"is nn.Embedding's plain lookup ({field}={plain!r})")
    if not ids.integer:
        raise CaptureError(f"{label} takes token ids, a (batch, seq) torch.int64 model input; "
                           f"got '{ids.name}' {dict(zip(ids.axes, ids.shape))}")
    axes = ids.axes + ["hidden"]
    keys = dict(input=ids.name)
    if style:
        keys["weight"] = b.parameter(path, "weight", ["vocab", "hidden"], shard("vocab"))
        to = b.stream_placement
        if style.output_layouts is not None:
            to = layout_placement(style.output_layouts, axes, f"plan['{b.display[path]}']")
        if to != REPLICATE and to[len("Shard("):-1] not in ids.axes:
            raise CaptureError(f"plan['{b.display[path]}']: output_layouts {to}; a vocab-parallel "
                               f"embedding reduces to Replicate or Shard of a token axis "
                               f"({', '.join(ids.axes)})")
        keys["to"] = out_placement = to
        how = f"RowwiseParallel, vocab-parallel: masked lookups, reduced to {to}"
    else:
        keys["weight"] = b.parameter(path, "weight", ["vocab", "hidden"], REPLICATE)
        out_placement, how = b.place[ids.name], "replicated"
    return b.step("embedding", f"{b.display[path]}: nn.Embedding({m.num_embeddings}, "
                  f"{m.embedding_dim}), {how}", Value(name, axes, out_shape), out_placement,
                  **keys)


def silu(b, path, m, style, x, name, out_shape):
    """nn.SiLU: no step of its own; a Gate that the multiplication by the up projection turns
    into a swiglu step (Builder.mul)."""
    b.used.discard(name)
    return Gate(b.whole(x, f"SiLU '{b.display[path]}' is elementwise on whole values"),
                f"module '{b.display[path]}'")
