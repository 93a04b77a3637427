"""The scenario a capture writes (shardsim.capture): tensors, steps, placements.

Builder walks the traced graph in execution order and emits shardsim steps. Each tensor value
has one placement (a shardsim placement string) on the 1-D mesh. The rules, per op:
  - a style wants a placement: ColwiseParallel wants a Replicate input (all-gather/all-reduce
    first), RowwiseParallel wants Shard(in) (a local slice from Replicate), SequenceParallel
    wants Shard(seq), attention wants Replicate (HeadParallel's too; its output is Partial, as
    RowwiseParallel's);
  - a Partial(sum) value (a RowwiseParallel or HeadParallel output) stays pending until an op
    needs it whole: then it is reduced to the stream placement (Shard(seq) when the plan uses
    SequenceParallel: a reduce-scatter; else Replicate: an all-reduce), or at once to the
    style's output_layouts when given;
  - an add gets both operands in one placement (Partial operands reduced, a Replicate operand
    sliced to the other's Shard);
  - a norm or a Replicate-weight linear needs its feature axis whole (gathered if sharded);
  - token ids (an int64 model input) are Replicate and only an embedding reads them;
  - silu(g) is kept pending (values.Gate) until it is multiplied by the up projection u: then
    g and u get one placement, as an add's operands, and the product is a swiglu step.
Every move is a `redistribute` step named SOURCE.full (to Replicate) or SOURCE.AXIS (to
Shard(AXIS)); a Replicate input of a column-parallel layer or a HeadParallel attention gets
SOURCE.tp, Replicate -> Replicate, Megatron's f (its backward all-reduces the Partial input
gradient, as DTensor's ColwiseParallel does). For an N-D mesh a placement becomes a tuple indexed
by mesh dim and each rule runs on its style's dim (Mesh.dim_of).
"""
import json
import operator
import os

import torch
from torch import nn

from . import losses, ops
from .plan import CaptureError, MSELoss
from .tracing import module_kind
from .values import PARTIAL, REPLICATE, Gate, Value, shard

DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
INTEGERS = {torch.int64: "I64"}  # token ids and labels: dtype = "i64" tensors
ADDS = (operator.add, torch.add, "add")
MULS = (operator.mul, torch.mul, "mul")
SILUS = (nn.functional.silu,)
MAPPED = ("LayerNorm, RMSNorm, Linear, GELU, Dropout, Identity, Embedding, "
          "SlidingWindowAttention and GQAttention")


class Builder:
    def __init__(self, module, display, styles, mesh, inputs, stream=None):
        self.module, self.display, self.styles, self.mesh = module, display, styles, mesh
        self.inputs, self.stream = inputs, stream
        self.sp = any(s.kind == "SequenceParallel" for s in styles.values())
        self.stream_placement = shard("seq") if self.sp else REPLICATE
        self.tensors = []      # declared: dicts name, axes, shape, role, placement, value, comment
        self.steps = []        # (comment, [(key, value)])
        self.place = {}        # tensor name -> placement
        self.values = {}       # fx node -> Value
        self.params = {}       # id(parameter) -> (name, placement)
        self.used = set()
        self.calls = {}        # module path -> number of calls
        self.moved = {}        # (tensor name, placement) -> its redistributed Value
        self.output = None
        self.hidden = None     # the model's width: the first floating input's, or an embedding's
        embeddings = [m for m in module.modules() if isinstance(m, nn.Embedding)]
        self.embedding_weights = {id(m.weight) for m in embeddings}  # a Linear using one: LM head
        self.vocab_sizes = {m.num_embeddings for m in embeddings}

    # ---- names, tensors, steps ----
    def unique(self, name):
        candidate, k = name, 1
        while candidate in self.used:
            k += 1
            candidate = f"{name}_{k}"
        self.used.add(candidate)
        return candidate

    def declare(self, name, axes, value, role, placement, comment=""):
        # input_files.cpp: shardsim reads F64, F32, BF16 or F16 values, every one finite, or
        # I64 values into an i64 tensor (ids, labels: never a parameter).
        what = f"{comment or role} '{name}'"
        integer = value.dtype in INTEGERS and role != "parameter"
        if value.dtype not in DTYPES and not integer:
            raise CaptureError(f"{what} is {value.dtype}; shardsim reads float64, float32, "
                               f"bfloat16 or float16 values")
        finite = torch.isfinite(value.detach())
        if not bool(finite.all()):
            index = [int(i) for i in (~finite).nonzero()[0]]
            raise CaptureError(f"{what}: element {index} is {float(value.detach()[tuple(index)])}; "
                               f"shardsim's inputs must be finite")
        self.used.add(name)
        self.tensors.append(dict(name=name, axes=list(axes), shape=list(value.shape), role=role,
                                 placement=placement, value=value.detach(), comment=comment))
        self.place[name] = placement
        return Value(name, axes, value.shape, integer=integer)

    def parameter(self, path, field, axes, placement):
        """The scenario name of a module's parameter, declared at its first use. A Parameter
        object used again (an LM head tied to the embedding) is that same tensor: one name, and
        shardsim sums the gradients of its uses; both uses must agree on axes and placement."""
        tensor = getattr(self.module.get_submodule(path), field)
        name = f"{self.display[path]}.{field}" if self.display[path] else field
        if id(tensor) in self.params:
            known, known_axes, known_placement = self.params[id(tensor)]
            if known_axes != list(axes):
                raise CaptureError(f"parameter '{known}' {known_axes} is shared by "
                                   f"'{self.display[path]}', which reads it as {list(axes)}")
            if known_placement != placement:
                hint = (" (a tied embedding and LM head: plan the embedding RowwiseParallel and "
                        "the head ColwiseParallel, or neither)"
                        if id(tensor) in self.embedding_weights else "")
                raise CaptureError(f"parameter '{known}' is shared by '{self.display[path]}', "
                                   f"which needs it {placement}, not {known_placement}{hint}")
            return known
        role = "parameter" if tensor.requires_grad else "input"
        self.params[id(tensor)] = (name, list(axes), placement)
        self.declare(name, axes, tensor, role, placement)
        return name

    def step(self, op, comment, output_value, placement, **keys):
        self.steps.append((comment, [("op", op)] + list(keys.items()) +
                           [("output", output_value.name)]))
        self.place[output_value.name] = placement
        return output_value

    def redistribute(self, value, to, why, conjugate=False):
        """`value` in placement `to`: itself, an earlier move of it, or a new redistribute.
        conjugate: a Replicate value still gets a Replicate -> Replicate step (Megatron's f:
        identity forward, all-reduce of the Partial gradient backward)."""
        here = self.place[value.name]
        if here == to and not (conjugate and to == REPLICATE):
            return value
        if (value.name, to) in self.moved:
            return self.moved[(value.name, to)]
        suffix = "tp" if here == to else "full" if to == REPLICATE else to[len("Shard("):-1]
        moved = Value(self.unique(f"{value.name}.{suffix}"), value.axes, value.shape)
        self.moved[(value.name, to)] = moved
        return self.step("redistribute", f"{here} -> {to}: {why}", moved, to,
                         input=value.name, to=to)

    def whole(self, value, why):
        """A Partial value reduced to the stream placement; anything else unchanged."""
        if self.place[value.name] != PARTIAL:
            return value
        return self.redistribute(value, self.stream_placement, why)

    def feature_whole(self, value, why):
        value = self.whole(value, why)
        if self.place[value.name] == shard(value.axes[-1]):
            value = self.redistribute(value, REPLICATE, why)
        return value

    # ---- the walk ----
    def walk(self):
        for node in self.module.graph.nodes:
            function = node.op in ("call_function", "call_method")
            if node.op == "placeholder":
                self.model_input(node)
            elif node.op == "call_module":
                self.call_module(node)
            elif function and node.target in ADDS:
                self.add(node)
            elif function and node.target in MULS:
                self.mul(node)
            elif node.op == "call_function" and node.target in SILUS:
                self.silu(node)
            elif node.op == "output":
                arg = node.args[0]
                if not isinstance(arg, torch.fx.Node) or arg not in self.values:
                    raise CaptureError("the model must return one tensor")
                self.output = self.operand(arg, "the model's output")
            else:
                self.unsupported(node)
        for path, style in self.styles.items():
            if path not in self.calls:
                what = type(self.module.get_submodule(path)).__name__
                raise CaptureError(f"plan['{self.display[path]}'] ({style.kind}) names {what}, "
                                   f"which the model never calls as a module the capture maps")

    def unsupported(self, node):
        caller = node.meta.get("shardsim_caller")
        where = (f" in '{self.display.get(caller[0], caller[0])}' "
                 f"({caller[1].__module__}.{caller[1].__qualname__})") if caller else ""
        what = getattr(node.target, "__name__", str(node.target))
        raise CaptureError(f"unsupported {node.op.replace('_', ' ')} '{what}'{where}: shardsim "
                           f"maps modules ({MAPPED}), residual adds and SwiGLU's "
                           f"silu(gate(x)) * up(x)")

    def operand(self, arg, user):
        """The Value of fx node `arg` read by `user`: refused if it is a pending silu (Gate) or
        token ids, which only the multiplication by up (mul) or an embedding read."""
        value = self.values.get(arg) if isinstance(arg, torch.fx.Node) else None
        if isinstance(value, Gate):
            raise CaptureError(f"silu ({value.label}) feeds {user}: shardsim maps silu only as "
                               f"SwiGLU's gate, silu(gate(x)) * up(x) (op swiglu)")
        if value is not None and value.integer:
            raise CaptureError(f"token ids '{value.name}' feed {user}: only nn.Embedding reads "
                               f"token ids")
        return value

    def model_input(self, node):
        count = sum(1 for t in self.tensors if t["comment"] == "model input")
        if count >= len(self.inputs):
            raise CaptureError(f"the model takes more inputs than the {len(self.inputs)} "
                               f"example(s)")
        example = self.inputs[count]
        if example.dim() == 2 and example.dtype in INTEGERS:  # token ids, for an embedding
            self.values[node] = self.declare(self.unique(node.target), ("batch", "seq"),
                                             example, "input", REPLICATE, "model input")
            return
        if example.dim() != 3 or example.dtype not in DTYPES:
            raise CaptureError(f"model input '{node.target}' is {tuple(example.shape)} "
                               f"{example.dtype}; inputs are (batch, seq, hidden) floating tensors "
                               f"or (batch, seq) torch.int64 token ids")
        self.hidden = self.hidden or example.shape[-1]
        self.values[node] = self.declare(self.unique(node.target), ("batch", "seq", "hidden"),
                                         example, "input", self.stream_placement, "model input")

    def call_module(self, node):
        path = node.target
        module = self.module.get_submodule(path)
        kind = module_kind(module)
        if kind is None:
            cls = type(module)
            raise CaptureError(f"unsupported module '{self.display[path]}' "
                               f"({cls.__module__}.{cls.__qualname__}): shardsim maps {MAPPED}, "
                               f"and SiLU as SwiGLU's gate")
        if len(node.args) != 1 or node.kwargs or node.args[0] not in self.values:
            raise CaptureError(f"module '{self.display[path]}' must be called with one tensor")
        source = self.values[node.args[0]]
        if kind != "embedding" or isinstance(source, Gate):  # only an embedding reads ids
            source = self.operand(node.args[0], f"module '{self.display[path]}'")
        self.calls[path] = self.calls.get(path, 0) + 1
        style = self.styles.get(path)
        allowed = ops.STYLES_FOR[kind]
        if style and style.kind not in allowed:
            raise CaptureError(f"plan['{self.display[path]}'] = {style.kind}, but "
                               f"'{self.display[path]}' is {type(module).__name__} (styles for "
                               f"it: {', '.join(allowed) or 'none'})")
        name = self.unique(self.display[path] or kind)
        out_shape = list(node.meta["tensor_meta"].shape)
        self.values[node] = getattr(ops, kind)(self, path, module, style, source, name, out_shape)
        if kind == "embedding":
            self.hidden = self.hidden or out_shape[-1]

    def add(self, node):
        operands = list(node.args)
        if len(operands) != 2 or node.kwargs or not all(a in self.values for a in operands):
            self.unsupported(node)
        a, b = (self.operand(x, f"add '{node.name}'") for x in operands)
        if a.axes != b.axes or a.shape != b.shape:
            raise CaptureError(f"add '{node.name}' of {a.name} {dict(zip(a.axes, a.shape))} and "
                               f"{b.name} {dict(zip(b.axes, b.shape))}: shardsim adds tensors of "
                               f"the same named shape")
        a, b, target = self.one_placement(a, b, "the residual add needs one placement")
        out = Value(self.unique(node.name), a.axes, a.shape)
        self.values[node] = self.step("add", "residual add", out, target,
                                      input=a.name, residual=b.name)

    def one_placement(self, a, b, why):
        """a and b moved to one placement: Partial if both are, else the other's (a Partial
        operand reduced), a Shard over Replicate (the Replicate one sliced)."""
        pa, pb = self.place[a.name], self.place[b.name]
        if pa == PARTIAL and pb == PARTIAL:
            target = PARTIAL
        else:
            target = pb if pa == PARTIAL else pa if pb == PARTIAL else (
                pa if pa != REPLICATE else pb)
        return self.redistribute(a, target, why), self.redistribute(b, target, why), target

    def silu(self, node):
        """F.silu(g): pending (a Gate) until mul makes it SwiGLU's gated unit."""
        if len(node.args) != 1 or node.kwargs.get("inplace") or node.args[0] not in self.values:
            self.unsupported(node)
        caller = node.meta.get("shardsim_caller")
        where = f" in '{self.display.get(caller[0], caller[0])}'" if caller else ""
        g = self.operand(node.args[0], f"silu '{node.name}'")
        self.values[node] = Gate(self.whole(g, "silu is elementwise on whole values"),
                                 f"'{node.name}'{where}")

    def mul(self, node):
        """silu(g) * u (either order): a swiglu step, y = silu(g) * u, g and u of one named shape
        and one placement (moved as an add's operands). Any other product is unsupported."""
        operands = list(node.args)
        if len(operands) != 2 or node.kwargs or not all(a in self.values for a in operands):
            self.unsupported(node)
        gates = [x for x in operands if isinstance(self.values[x], Gate)]
        if len(gates) != 1:
            self.unsupported(node)
        gate = self.values[gates[0]]
        up = self.operand(operands[1] if gates[0] is operands[0] else operands[0],
                          f"mul '{node.name}'")
        g = gate.value
        if g.axes != up.axes or g.shape != up.shape:
            raise CaptureError(f"SwiGLU mul '{node.name}' of silu({g.name}) "
                               f"{dict(zip(g.axes, g.shape))} and {up.name} "
                               f"{dict(zip(up.axes, up.shape))}: the gate and up projections "
                               f"have one named shape")
        g, up, target = self.one_placement(g, up, "swiglu's gate and up need one placement")
        caller = node.meta.get("shardsim_caller")
        base = self.display.get(caller[0], "") if caller else ""
        out = Value(self.unique(f"{base}.swiglu" if base else "swiglu"), g.axes, g.shape)
        self.values[node] = self.step("swiglu", "SwiGLU: silu(gate) * up", out, target,
                                      input=g.name, up=up.name)

    def finish(self, loss, stream):
        """The loss step (shardsim.capture.losses), or the output made whole without one."""
        if loss is None:
            self.output = self.whole(self.output, "the model's output")
        elif isinstance(loss, MSELoss):
            losses.mse_loss(self, loss, self.output)
        else:
            losses.cross_entropy(self, loss, self.output)


# ---- writing ----

def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def safetensors_bytes(tensors):
    """The safetensors encoding (docs/goldens.md, "Golden file formats") of (name, tensor) pairs."""
    header, blobs, offset = {"__metadata__": {"format": "shardsim-capture"}}, [], 0
    for name, tensor in tensors:
        t = tensor.detach().contiguous().cpu()
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        data = raw.numpy().astype(raw.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": {**DTYPES, **INTEGERS}[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def scenario_text(b, name, precisions, train_steps, lr, seed, stream, origin):
    lines = [f"# Captured by shardsim.capture (torch {torch.__version__}); every tensor's",
             "# values are in inputs.safetensors.",
             f"name = {toml_value(name)}",
             f"description = {toml_value('captured from PyTorch: ' + origin)}"]
    if seed is not None:
        lines.append(f"seed = {int(seed)}")  # checked: shardsim.capture.arguments
    lines.append(f"precisions = {toml_value(list(precisions))}")
    if train_steps is not None:
        lines.append(f"train_steps = {int(train_steps)}")
    if lr is not None:
        lines.append(f"learning_rate = {toml_value(float(lr))}")
    dim, size = b.mesh.dims[0]
    lines += ["", "[mesh]", f"ranks = {size}                 # mesh dim '{dim}'"]
    for t in b.tensors:
        lines += ["", "[[tensors]]" + (f"               # {t['comment']}" if t["comment"] else ""),
                  f"name = {toml_value(t['name'])}"]
        if t["value"].dtype in INTEGERS:
            lines.append('dtype = "i64"')
        lines += [f"role = {toml_value(t['role'])}",
                  f"axes = {toml_value(t['axes'])}", f"shape = {toml_value(t['shape'])}",
                  f"init = {{ file = \"inputs.safetensors\", tensor = {toml_value(t['name'])} }}",
                  f"placement = {toml_value(t['placement'])}"]
    for comment, keys in b.steps:
        lines += ["", f"[[steps]]                 # {comment}"]
        lines += [f"{key} = {toml_value(value)}" for key, value in keys]
    if stream is not None:
        lines += ["", "[stream]", 'axis = "seq"', f"chunks = {toml_value(stream)}"]
    return "\n".join(lines) + "\n"


def write(b, out, name, precisions, train_steps, lr, seed, stream, origin):
    """Both files through temporary names, renamed once both are written (the scenario last);
    a failure removes what this call wrote (and OUT when it created it): CaptureError."""
    files = {"inputs.safetensors": safetensors_bytes([(t["name"], t["value"]) for t in b.tensors]),
             "scenario.toml": scenario_text(b, name, precisions, train_steps, lr, seed,
                                            stream, origin).encode()}
    created = not os.path.isdir(out)
    temporary = [os.path.join(out, file + ".tmp") for file in files]
    try:
        os.makedirs(out, exist_ok=True)
        for path, data in zip(temporary, files.values()):
            with open(path, "wb") as f:
                f.write(data)
        for path in temporary:
            os.replace(path, path[:-len(".tmp")])
    except OSError as e:
        for path in temporary:
            if os.path.exists(path):
                os.unlink(path)
        if created and os.path.isdir(out) and not os.listdir(out):
            os.rmdir(out)
        raise CaptureError(f"out={os.fspath(out)!r}: cannot write {e.filename or out}: "
                           f"{e.strerror or e}") from None
    return os.path.join(out, "scenario.toml")
