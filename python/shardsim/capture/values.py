"""The values a capture places (shardsim.capture.builder, shardsim.capture.ops): placement
strings and the scenario tensor a traced node becomes. No torch; imported by both, importing
neither.
"""

REPLICATE, PARTIAL = "Replicate", "Partial(sum)"


def shard(axis):
    return f"Shard({axis})"


class Value:
    """A tensor of the scenario: its name, axes and extents."""

    def __init__(self, name, axes, shape):
        self.name, self.axes, self.shape = name, list(axes), [int(n) for n in shape]
