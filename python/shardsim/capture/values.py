"""The values a capture places (shardsim.capture.builder, shardsim.capture.ops): placement
strings and the scenario tensor a traced node becomes. No torch; imported by both, importing
neither.
"""

REPLICATE, PARTIAL = "Replicate", "Partial(sum)"


def shard(axis):
    return f"Shard({axis})"


class Value:
    """A tensor of the scenario: its name, axes and extents; integer: an i64 tensor (token ids
    or labels), which only an embedding or a loss reads."""

    def __init__(self, name, axes, shape, integer=False):
        self.name, self.axes, self.shape = name, list(axes), [int(n) for n in shape]
        self.integer = integer


class Gate:
    """silu(g) of a Value g, not yet a tensor of the scenario: it becomes one swiglu step
    (y = silu(g) * u) when it is multiplied by the up projection u, and is refused anywhere
    else (shardsim has no silu op of its own)."""

    def __init__(self, value, label):
        self.value, self.label = value, label
