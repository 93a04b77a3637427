"""The scenario a capture writes (shardsim.capture): tensors, steps, placements.

Builder walks the traced graph in execution order and emits shardsim steps. Each tensor value
has one placement (a shardsim placement string) on the 1-D mesh. The rules, per op:
  - a style wants a placement: ColwiseParallel wants a Replicate input (all-gather/all-reduce
    first), RowwiseParallel wants Shard(in) (a local slice from Replicate), SequenceParallel
    wants Shard(seq), attention wants Replicate;
  - a Partial(sum) value (a RowwiseParallel output) stays pending until an op needs it whole:
    then it is reduced to the stream placement (Shard(seq) when the plan uses
    SequenceParallel: a reduce-scatter; else Replicate: an all-reduce), or at once to the
    style's output_layouts when given;
  - an add gets both operands in one placement (Partial operands reduced, a Replicate operand
    sliced to the other's Shard);
  - a norm or a Replicate-weight linear needs its feature axis whole (gathered if sharded).
Every move is a `redistribute` step named SOURCE.full (to Replicate) or SOURCE.AXIS (to
Shard(AXIS)); a Replicate input of a column-parallel layer gets SOURCE.tp, Replicate ->
Replicate, Megatron's f (its backward all-reduces the Partial input gradient, as DTensor's
ColwiseParallel does). For an N-D mesh a placement becomes a tuple indexed by mesh dim and each rule
runs on its style's dim (Mesh.dim_of).
"""
import json
import operator
import os

import torch

from . import ops
from .plan import CaptureError
from .tracing import module_kind
from .values import PARTIAL, REPLICATE, Value, shard

DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
ADDS = (operator.add, torch.add, "add")


class Builder:
    def __init__(self, module, display, styles, mesh, inputs):
        self.module, self.display, self.styles, self.mesh = module, display, styles, mesh
        self.inputs = inputs
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

    # ---- names, tensors, steps ----
    def unique(self, name):
        candidate, k = name, 1
        while candidate in self.used:
            k += 1
            candidate = f"{name}_{k}"
        self.used.add(candidate)
        return candidate

    def declare(self, name, axes, value, role, placement, comment=""):
        # input_files.cpp: shardsim reads F64, F32, BF16 or F16 values, every one finite.
        what = f"{comment or role} '{name}'"
        if value.dtype not in DTYPES:
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
        return Value(name, axes, value.shape)

    def parameter(self, path, field, axes, placement):
        tensor = getattr(self.module.get_submodule(path), field)
        name = f"{self.display[path]}.{field}" if self.display[path] else field
        if id(tensor) in self.params:
            known, known_placement = self.params[id(tensor)]
            if known_placement != placement:
                raise CaptureError(f"parameter '{known}' is shared by '{self.display[path]}', "
                                   f"which needs it {placement}, not {known_placement}")
            return known
        role = "parameter" if tensor.requires_grad else "input"
        self.params[id(tensor)] = (name, placement)
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
            if node.op == "placeholder":
                self.model_input(node)
            elif node.op == "call_module":
                self.call_module(node)
            elif node.op in ("call_function", "call_method") and node.target in ADDS:
                self.add(node)
            elif node.op == "output":
                arg = node.args[0]
                if not isinstance(arg, torch.fx.Node) or arg not in self.values:
                    raise CaptureError("the model must return one tensor")
                self.output = self.values[arg]
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
                           f"maps modules (LayerNorm, RMSNorm, Linear, GELU, Dropout, Identity, "
                           f"SlidingWindowAttention) and residual adds")

    def model_input(self, node):
        count = sum(1 for t in self.tensors if t["comment"] == "model input")
        if count >= len(self.inputs):
            raise CaptureError(f"the model takes more inputs than the {len(self.inputs)} "
                               f"example(s)")
        example = self.inputs[count]
        if example.dim() != 3 or example.dtype not in DTYPES:
            raise CaptureError(f"model input '{node.target}' is {tuple(example.shape)} "
                               f"{example.dtype}; inputs are (batch, seq, hidden) floating tensors")
        self.values[node] = self.declare(self.unique(node.target), ("batch", "seq", "hidden"),
                                         example, "input", self.stream_placement, "model input")

    def call_module(self, node):
        path = node.target
        module = self.module.get_submodule(path)
        kind = module_kind(module)
        if kind is None:
            cls = type(module)
            raise CaptureError(f"unsupported module '{self.display[path]}' "
                               f"({cls.__module__}.{cls.__qualname__}): shardsim maps LayerNorm, "
                               f"RMSNorm, Linear, GELU, Dropout, Identity and "
                               f"SlidingWindowAttention")
        if len(node.args) != 1 or node.kwargs or node.args[0] not in self.values:
            raise CaptureError(f"module '{self.display[path]}' must be called with one tensor")
        self.calls[path] = self.calls.get(path, 0) + 1
        style = self.styles.get(path)
        allowed = ops.STYLES_FOR[kind]
        if style and style.kind not in allowed:
            raise CaptureError(f"plan['{self.display[path]}'] = {style.kind}, but "
                               f"'{self.display[path]}' is {type(module).__name__} (styles for "
                               f"it: {', '.join(allowed) or 'none'})")
        source = self.values[node.args[0]]
        name = self.unique(self.display[path] or kind)
        out_shape = list(node.meta["tensor_meta"].shape)
        self.values[node] = getattr(ops, kind)(self, path, module, style, source, name, out_shape)

    def add(self, node):
        operands = list(node.args)
        if len(operands) != 2 or node.kwargs or not all(a in self.values for a in operands):
            self.unsupported(node)
        a, b = (self.values[x] for x in operands)
        if a.axes != b.axes or a.shape != b.shape:
            raise CaptureError(f"add '{node.name}' of {a.name} {dict(zip(a.axes, a.shape))} and "
                               f"{b.name} {dict(zip(b.axes, b.shape))}: shardsim adds tensors of "
                               f"the same named shape")
        pa, pb = self.place[a.name], self.place[b.name]
        if pa == PARTIAL and pb == PARTIAL:
            target = PARTIAL
        else:
            target = pb if pa == PARTIAL else pa if pb == PARTIAL else (
                pa if pa != REPLICATE else pb)
        a = self.redistribute(a, target, "the residual add needs one placement")
        b = self.redistribute(b, target, "the residual add needs one placement")
        out = Value(self.unique(node.name), a.axes, a.shape)
        self.values[node] = self.step("add", "residual add", out, target,
                                      input=a.name, residual=b.name)

    def finish(self, loss, stream):
        out = self.output
        if loss is None:
            self.output = self.whole(out, "the model's output")
            return
        target = loss.target
        if tuple(target.shape) != tuple(out.shape) or target.dtype not in DTYPES:
            raise CaptureError(f"MSELoss target is {tuple(target.shape)} {target.dtype}; the "
                               f"model's output is {tuple(out.shape)}")
        out = self.whole(out, "the loss needs whole tokens")
        if self.place[out.name] not in (REPLICATE, shard("seq"), shard("batch")):
            out = self.redistribute(out, REPLICATE, "the loss needs whole tokens")
        self.declare(self.unique("target"), out.axes, target, "target", self.place[out.name],
                     "MSELoss target")
        keys = dict(input=out.name, target=self.tensors[-1]["name"])
        if loss.valid_lengths is not None:
            keys["valid_lengths"] = loss.valid_lengths
        if out.axes[-1] != "hidden":
            keys["feature_axis"] = out.axes[-1]
        self.step("mse_loss", "shardsim's masked MSE (shardsim.modules.mse_loss)",
                  Value(self.unique("loss"), [], []), REPLICATE, **keys)


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
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
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
                  f"name = {toml_value(t['name'])}", f"role = {toml_value(t['role'])}",
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
