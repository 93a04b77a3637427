"""Capture a PyTorch model and a DTensor-style parallel plan as a shardsim scenario.

    import shardsim.capture as sc
    sc.capture(model, x, mesh={"tp": 4},
               plan={"ln1": "SequenceParallel", "fc1": "ColwiseParallel", "fc2": "RowwiseParallel"},
               out="captured/", loss=sc.MSELoss(target), train_steps=2, lr=0.1)
    # writes captured/scenario.toml and captured/inputs.safetensors;
    # then: build/shardsim run captured/scenario.toml --golden g/

Needs PyTorch (Debian's python3-torch, tools/bootstrap --torch; /usr/bin/python3). The model is
traced with torch.fx in execution order. Supported: nn.LayerNorm (over the last axis), RMSNorm by
duck type (shardsim.modules states it), nn.Linear, nn.GELU (both approximations), nn.Dropout
(its p; 0 when the model is in eval mode), nn.Identity, nn.Embedding (of int64 token ids; an
nn.Linear whose weight is the embedding's Parameter is the tied LM head: one scenario
parameter), residual adds (`a + b` of two tensors), SwiGLU's silu(gate(x)) * up(x) (F.silu or
nn.SiLU; shardsim.modules.SwiGLU), shardsim.modules.SlidingWindowAttention,
shardsim.modules.GQAttention (grouped kv heads, op gqa_attention), and the losses MSELoss
(shardsim's masked MSE) and CrossEntropyLoss (F.cross_entropy with int64 labels).
Anything else is a CaptureError naming the module's path and type (or the function and the
module that calls it): a layer is never skipped silently.

The plan mirrors DTensor's parallelize_module: {module path: style}, a style being a name
("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "HeadParallel", "ContextParallel") or
an instance of the marker classes of shardsim.capture.plan, exported here (or of DTensor's own
classes of those names, read by duck type). HeadParallel is a GQAttention's query heads over the
mesh dim (Megatron's ParallelAttention); torchtitan's spelling of it, ATTN.wq, .wk, .wv
ColwiseParallel and ATTN.wo RowwiseParallel, is read as ATTN: HeadParallel. Every floating model
input is (batch, seq, hidden) and starts Shard(seq) when the plan uses SequenceParallel, else
Replicate; token ids are (batch, seq) torch.int64, Replicate. RowwiseParallel on an nn.Embedding
is DTensor's vocab-parallel embedding (weight Shard(vocab)). The mesh is 1-D for now ({"tp": 4}
-> ranks = 4); N-D meshes are refused.

The modules: plan (the vocabulary, Mesh, MSELoss, CrossEntropyLoss, CaptureError; no torch),
tracing (module kinds, torch.fx), arguments (capture()'s arguments checked), values, ops (one
function per module kind) and losses (one per loss), builder (the scenario's tensors and steps,
written out). Each imports only the ones before it in that order, and none imports this file:
there is no import cycle.
"""
from . import arguments as args
from . import builder as build
from .plan import (STYLES, CaptureError, ColwiseParallel, ContextParallel,  # noqa: F401
                   CrossEntropyLoss, HeadParallel, Mesh, MSELoss, ParallelStyle, Replicate,
                   RowwiseParallel, SequenceParallel, Shard, Style, _nearest,
                   head_parallel_plan)
from .tracing import is_rms_norm, module_kind, trace  # noqa: F401


def capture(model, example_inputs, mesh, plan, out, loss=None, train_steps=None, lr=None,
            name=None, precisions=("f32", "f64", "mp256"), stream=None, seed=None):
    """Writes OUT/scenario.toml and OUT/inputs.safetensors; returns the scenario's path.

    example_inputs: a tensor or a tuple of tensors, each (batch, seq, hidden) floating or
    (batch, seq) torch.int64 token ids. loss: MSELoss, CrossEntropyLoss or None (forward only).
    train_steps, lr: SGD steps (need a loss). stream: chunk lengths along
    seq (shardsim's [stream]). precisions: the scenario's precision list. seed: the scenario
    seed (dropout masks). An argument `shardsim run` would refuse in the scenario (lr without
    train_steps included: it would be ignored) raises CaptureError, and nothing is written."""
    inputs = (tuple(example_inputs) if isinstance(example_inputs, (tuple, list))
              else (example_inputs,))
    mesh = Mesh(mesh)
    precisions, stream = args.check_arguments(inputs, loss, train_steps, lr, name, precisions,
                                              stream, seed, out)
    module, prefix = trace(model, inputs)
    display = {p: p[len(prefix):] if p.startswith(prefix) else "" for p, _ in
               module.named_modules()}
    if plan is not None and not isinstance(plan, dict):
        plan = {"": plan}  # one style for the model itself, as parallelize_module accepts
    attentions = {display[p] for p, m in module.named_modules()
                  if module_kind(m) == "gqa_attention"}
    styles = {}
    for path, value in head_parallel_plan(plan or {}, attentions).items():
        inner = prefix + path if path else prefix.rstrip(".")
        if inner not in display:
            known = [p for p in display.values() if p]
            raise CaptureError(f"plan names '{path}', which is not a module of "
                               f"{type(model).__name__}{_nearest(path, known)}")
        styles[inner] = Style(path, value)
        mesh.dim_of(path, styles[inner])
    builder = build.Builder(module, display, styles, mesh, inputs, stream)
    builder.walk()
    builder.finish(loss, stream)
    plan_text = ", ".join(
        f"{display[p]!r}: {s.kind}" + (f"(mode={s.mode!r})" if s.mode else "")
        for p, s in styles.items())
    return build.write(builder, out, name=name or type(model).__name__, precisions=precisions,
                       train_steps=train_steps, lr=lr, seed=seed, stream=stream,
                       origin=f"{type(model).__name__}, mesh {dict(mesh.dims)}, "
                              f"plan {{{plan_text}}}")
