#!/usr/bin/python3
"""A worked example for backend authors: recompute the LayerNorm of
scenarios/layernorm_sequence_sharded.toml in plain numpy from the golden inputs, and check it
against the goldens, globally and rank by rank.

    build/shardsim run scenarios/layernorm_sequence_sharded.toml --golden /tmp/ln
    PYTHONPATH=python /usr/bin/python3 examples/golden_example.py /tmp/ln

(PYTHONPATH=python: the shardsim package in place; not needed once it is installed,
`/usr/bin/python3 -m pip install --no-build-isolation ./python`.)

Exits 0 when every check passes, 1 (with the worst element named) when one fails.
"""

import sys

import numpy as np

import shardsim.golden as sg


def layer_norm(x, weight, bias, eps, axis):
    """LayerNorm as shardsim defines it: mean and biased variance over `axis`, eps inside the
    sqrt, then scale and shift. Every operation in x's dtype."""
    mean = x.mean(axis=axis, keepdims=True, dtype=x.dtype)
    centered = x - mean
    var = (centered * centered).mean(axis=axis, keepdims=True, dtype=x.dtype)
    rstd = x.dtype.type(1) / np.sqrt(var + x.dtype.type(eps))
    return centered * rstd * weight + bias, mean.squeeze(axis), rstd.squeeze(axis)


def main(argv):
    if len(argv) != 2:
        print("usage: golden_example.py GOLDEN_DIR", file=sys.stderr)
        return 2
    g = sg.load(argv[1])
    # The LayerNorm's parameters, defaults filled in, come with its output's boundary.
    ln = next(b for b in g.manifest["boundaries"] if b["scenario_op"] == "layer_norm")
    step = ln["params"]
    eps, out = step["eps"], step["output"]
    checks = 0
    for dtype, unit in (("f64", 2.0 ** -53), ("f32", 2.0 ** -24)):
        x = g.tensor(f"inputs/{step['input']}", dtype)
        axis = x.axes.index(step["axis"])
        y, mean, rstd = layer_norm(x.array, g.get(f"inputs/{step['weight']}", dtype),
                                   g.get(f"inputs/{step['bias']}", dtype), eps, axis)
        golden = g.tensor(f"s1/c1/{out}", dtype)
        # Each y element goes through a handful of roundings (mean, centering, variance, sqrt,
        # division, scale, shift), each at most one unit u of max|y| here (|x - mean| ~ std):
        # 16u normwise is a loose bound. It still catches a dropped eps (1e-5 / var(x) ~ 2.5e-6
        # relative, above 16u even in f32) or an unbiased variance (1/15 relative).
        for name, mine in ((out, y), (f"{out}.mean", mean), (f"{out}.rstd", rstd)):
            ref = g.get(f"s1/c1/{name}", dtype)
            sg.assert_close(mine, ref, rtol=0, atol=16 * unit * float(np.abs(ref).max()),
                            name=f"{dtype}/s1/c1/{name}", axes=g.tensor(f"s1/c1/{name}", dtype).axes)
            checks += 1
        # Rank by rank: each shard is its slice of the global tensor.
        for name in g.names(f"{dtype}/s1/c1/{out}@rank"):
            shard = g.tensor(name)
            mine = y[shard.global_slices()]
            sg.assert_close(mine, shard.array, rtol=0, atol=16 * unit * float(np.abs(golden.array).max()),
                            name=name, axes=shard.axes)
            checks += 1
        result = sg.compare(y, golden.array, rtol=0, atol=0, max_ulp=0)
        print(f"{dtype}: numpy LayerNorm vs {g.precision} goldens: max {result['max_ulp']} ulp, "
              f"max_rel {result['max_rel']:.2e} (worst at {dict(zip(golden.axes, result['worst']))})")
    print(f"golden_example: {checks} checks passed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except AssertionError as e:
        print(f"golden_example: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
