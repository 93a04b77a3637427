"""The module kinds a capture maps to shardsim ops, and the model traced with torch.fx in
execution order, each node's output shape recorded (shardsim.capture).
"""
import torch
import torch.fx as fx
from torch import nn

from ..modules import GQAttention, SlidingWindowAttention
from .plan import CaptureError


def is_rms_norm(module):
    """The RMSNorm duck type (shardsim.modules states it): class name ending in RMSNorm, a 1-D
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
    if isinstance(module, nn.Embedding):
        return "embedding"
    if isinstance(module, nn.SiLU):
        return "silu"  # only as SwiGLU's gate: silu(gate(x)) * up(x)
    if isinstance(module, SlidingWindowAttention):
        return "attention"
    if isinstance(module, GQAttention):
        return "gqa_attention"
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
    LayerNorm of another width, a token id out of range) is a CaptureError naming the module,
    instead of ShapeProp's printed traceback and RuntimeError."""

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
