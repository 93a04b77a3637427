"""Capture a PyTorch model and a DTensor-style parallel plan as a shardsim scenario.

    import shardsim_capture as sc
    sc.capture(model, x, mesh={"tp": 4},
               plan={"ln1": "SequenceParallel", "fc1": "ColwiseParallel", "fc2": "RowwiseParallel"},
               out="captured/", loss=sc.MSELoss(target), train_steps=2, lr=0.1)
    # writes captured/scenario.toml and captured/inputs.safetensors;
    # then: build/shardsim run captured/scenario.toml --golden g/

Needs PyTorch (Debian's python3-torch, tools/bootstrap --torch; /usr/bin/python3). The model is
traced with torch.fx in execution order. Supported: nn.LayerNorm (over the last axis), RMSNorm by
duck type (tools/shardsim_modules.py states it), nn.Linear, nn.GELU (both approximations),
nn.Dropout (its p; 0 when the model is in eval mode), nn.Identity, residual adds (`a + b` of two
tensors), shardsim_modules.SlidingWindowAttention, and the loss MSELoss (shardsim's masked MSE).
Anything else is a CaptureError naming the module's path and type (or the function and the
module that calls it): a layer is never skipped silently.

The plan mirrors DTensor's parallelize_module: {module path: style}, a style being a name
("ColwiseParallel", "RowwiseParallel", "SequenceParallel", "ContextParallel") or an instance of
the marker classes below (or of DTensor's own classes of those names, read by duck type). Every
model input is (batch, seq, hidden) and starts Shard(seq) when the plan uses SequenceParallel,
else Replicate. The mesh is 1-D for now ({"tp": 4} -> ranks = 4); N-D meshes are refused.
"""
import numbers
import os
import sys

import torch
import torch.fx as fx
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardsim_modules  # noqa: E402


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
    or at once to `output_layouts` when given (Shard(1) or Replicate())."""


class SequenceParallel(ParallelStyle):
    """LayerNorm, RMSNorm, Dropout, GELU: the input and output are Shard(seq)."""

    def __init__(self, *, sequence_dim=1, use_local_output=False, mesh_dim=None):
        super().__init__(use_local_output=use_local_output, mesh_dim=mesh_dim)
        self.sequence_dim = sequence_dim


class ContextParallel:
    """shardsim_modules.SlidingWindowAttention: the KV axis is split over the mesh dim's ranks.
    mode: allgather | ring | ulysses (README "Sliding-window attention"); layout: how the KV
    axis is split, "chunk" (torch.chunk) is shardsim's."""

    MODES = ("allgather", "ring", "ulysses")
    LAYOUTS = ("chunk",)

    def __init__(self, mode="allgather", layout="chunk", mesh_dim=None):
        self.mode, self.layout, self.mesh_dim = mode, layout, mesh_dim


STYLES = {cls.__name__: cls for cls in (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                        ContextParallel)}


class MSELoss:
    """shardsim's mse_loss of the model's output against `target` (same shape): the sum over
    valid tokens of sum_h (y - target)^2 divided by the valid-token count; token (b, s) is valid
    iff s < valid_lengths[b] (all valid when None). shardsim_modules.mse_loss computes it."""

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


def _nearest(word, candidates):
    import difflib
    close = difflib.get_close_matches(word, candidates, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


# ---- module kinds and tracing ----

def is_rms_norm(module):
    """The RMSNorm duck type (tools/shardsim_modules.py): class name ending in RMSNorm, a 1-D
    `weight` or None, a float `eps` or `variance_epsilon`."""
    weight = getattr(module, "weight", None)
    eps = getattr(module, "eps", getattr(module, "variance_epsilon", None))
    return (type(module).__name__.lower().endswith("rmsnorm") and isinstance(eps, float)
            and (weight is None or (isinstance(weight, torch.Tensor) and weight.dim() == 1)))


def module_kind(module):
    """The shardsim op a module maps to, or None."""
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.LayerNorm):
        return "layer_norm"
    if is_rms_norm(module):
        return "rms_norm"
    if isinstance(module, nn.GELU):
        return "gelu"
    if isinstance(module, nn.Dropout):
        return "dropout"
    if isinstance(module, nn.Identity):
        return "identity"
    if isinstance(module, shardsim_modules.SlidingWindowAttention):
        return "attention"
    return None


class _Tracer(fx.Tracer):
    """Keeps supported modules (and every other torch.nn leaf, to be rejected by name) as leaves
    and records on each node the module path and type that called it."""

    def __init__(self, model):
        super().__init__()
        self.stack = []
        # Decided before tracing: while fx traces, a module's parameters read as Proxies.
        self.supported = {id(m) for m in model.modules() if module_kind(m) is not None}

    def is_leaf_module(self, m, qualname):
        containers = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
        return id(m) in self.supported or (
            type(m).__module__.startswith("torch.nn") and not isinstance(m, containers))

    def call_module(self, m, forward, args, kwargs):
        self.stack.append((self.path_of_module(m), type(m)))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self.stack.pop()

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        node.meta["shardsim_caller"] = self.stack[-1] if self.stack else None
        return node


class _Root(nn.Module):
    """Wraps a model that is itself one supported module, so that it is traced as a call."""

    def __init__(self, inner):
        super().__init__()
        self.root = inner

    def forward(self, x):
        return self.root(x)


class _ShapeProp(fx.Interpreter):
    """Runs the traced model on the example inputs and records each node's output shape
    (node.meta['tensor_meta'].shape), as torch.fx's ShapeProp does; a node that fails (a
    LayerNorm of another width, an integer input) is a CaptureError naming the module, instead
    of ShapeProp's printed traceback and RuntimeError."""

    def __init__(self, module, prefix):
        super().__init__(module)
        self.prefix = prefix

    def run_node(self, n):
        try:
            result = super().run_node(n)
        except CaptureError:
            raise
        except Exception as e:  # torch raises many types for inputs a module cannot take
            if n.op == "call_module":
                path, cls = n.target, type(self.module.get_submodule(n.target))
            else:  # a function: the module calling it, if any
                path, cls = n.meta.get("shardsim_caller") or (None, None)
            where = f"'{n.name}'"
            if path is not None:
                shown = path[len(self.prefix):] if path.startswith(self.prefix) else path
                where = f"module '{shown}' ({cls.__name__})"
            reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
            error = CaptureError(f"{where} fails on the example inputs: {type(e).__name__}: "
                                 f"{reason}")
            error.message = error.args[0]  # Interpreter.run appends "While executing ..."
            raise error from None
        if isinstance(result, torch.Tensor):
            n.meta["tensor_meta"] = _TensorMeta(tuple(result.shape), result.dtype)
        return result


class _TensorMeta:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def trace(model, example_inputs):
    """The model as a GraphModule with shapes (node.meta['tensor_meta']), and the prefix its
    module paths carry ('root.' when the model itself is one supported module)."""
    prefix = ""
    if module_kind(model) is not None:
        model, prefix = _Root(model), "root."
    try:
        graph = _Tracer(model).trace(model)
    except Exception as e:  # torch.fx raises many types for untraceable code
        raise CaptureError(f"torch.fx cannot trace {type(model).__name__}: {e}") from e
    module = fx.GraphModule(model, graph)
    takes = sum(1 for node in graph.nodes if node.op == "placeholder")
    if takes != len(example_inputs):  # fx would drop extra inputs silently
        raise CaptureError(f"{type(model).__name__} takes {takes} input(s), but "
                           f"{len(example_inputs)} example input(s) were given")
    try:
        with torch.no_grad():
            _ShapeProp(module, prefix).run(*example_inputs)
    except CaptureError as e:
        raise CaptureError(getattr(e, "message", e.args[0])) from None
    return module, prefix


def capture(model, example_inputs, mesh, plan, out, loss=None, train_steps=None, lr=None,
            name=None, precisions=("f32", "f64", "mp256"), stream=None, seed=None):
    """Writes OUT/scenario.toml and OUT/inputs.safetensors; returns the scenario's path.

    example_inputs: a tensor or a tuple of tensors, each (batch, seq, hidden). loss: MSELoss or
    None (forward only). train_steps, lr: SGD steps (need a loss). stream: chunk lengths along
    seq (shardsim's [stream]). precisions: the scenario's precision list. seed: the scenario
    seed (dropout masks). An argument `shardsim run` would refuse in the scenario (lr without
    train_steps included: it would be ignored) raises CaptureError, and nothing is written."""
    import shardsim_capture_args as args
    import shardsim_capture_build as build
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
    styles = {}
    for path, value in (plan or {}).items():
        inner = prefix + path if path else prefix.rstrip(".")
        if inner not in display:
            known = [p for p in display.values() if p]
            raise CaptureError(f"plan names '{path}', which is not a module of "
                               f"{type(model).__name__}{_nearest(path, known)}")
        styles[inner] = Style(path, value)
        mesh.dim_of(path, styles[inner])
    builder = build.Builder(module, display, styles, mesh, inputs)
    builder.walk()
    builder.finish(loss, stream)
    plan_text = ", ".join(
        f"{display[p]!r}: {s.kind}" + (f"(mode={s.mode!r})" if s.mode else "")
        for p, s in styles.items())
    return build.write(builder, out, name=name or type(model).__name__, precisions=precisions,
                       train_steps=train_steps, lr=lr, seed=seed, stream=stream,
                       origin=f"{type(model).__name__}, mesh {dict(mesh.dims)}, "
                              f"plan {{{plan_text}}}")
