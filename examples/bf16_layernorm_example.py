#!/usr/bin/python3
"""The error-budget worked example: a bf16 LayerNorm from another backend (PyTorch), run on the
golden inputs, written as a candidate that `shardsim compare --precision bf16` judges.

    export PYTHONPATH=python     # the shardsim package in place (not needed once installed)
    build/shardsim run scenarios/layernorm_small_activations.toml --golden /tmp/ln --dtype bf16
    /usr/bin/python3 examples/bf16_layernorm_example.py /tmp/ln /tmp/mine.safetensors
    build/shardsim compare /tmp/ln /tmp/mine.safetensors --precision bf16      # noise, exit 0
    /usr/bin/python3 examples/bf16_layernorm_example.py /tmp/ln /tmp/bad.safetensors --eps 1e-4
    build/shardsim compare /tmp/ln /tmp/bad.safetensors --precision bf16       # bug, exit 1

The LayerNorm is the first layer_norm step of the golden set's scenario (its input, weight,
bias, axis and eps are read from the manifest's boundary params); its inputs are the BF16
goldens `bf16/inputs/NAME`, the values a bf16 program stores. `--eps` replaces the manifest's
eps (the bug to catch). The candidate holds `bf16/s1/c1/OUT`, the global output, as BF16.

--backend torch (the default when PyTorch imports): torch.nn.functional.layer_norm on bf16
tensors, PyTorch's own kernel. --backend numpy: what autocast computes, emulated: the bf16
inputs widened to f32, the statistics and the affine map in f32 (numpy's pairwise sums), the
output rounded once to bf16 (round to nearest even). Either is a correct bf16 program, with its
own f32 accumulation order, and should be judged noise.
"""

import argparse
import json
import sys

import numpy as np

import shardsim.golden as sg


def round_to_bf16_bits(values):
    """float32 values -> bf16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(values)
    rounded[nan] = (bits[nan] >> 16) | 0x40  # a quiet NaN with the input's sign
    return rounded.astype(np.uint16)


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def layer_norm_numpy(x, weight, bias, eps, axis):
    """autocast's bf16 LayerNorm, emulated: f32 inside, the output rounded once to bf16."""
    f32 = np.float32
    mean = x.mean(axis=axis, keepdims=True, dtype=f32)
    centered = x - mean
    var = (centered * centered).mean(axis=axis, keepdims=True, dtype=f32)
    rstd = f32(1) / np.sqrt(var + f32(eps))
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    y = centered * rstd * weight.reshape(shape) + bias.reshape(shape)
    return round_to_bf16_bits(y.astype(f32))


def layer_norm_torch(x, weight, bias, eps, axis):
    import torch
    t = torch.from_numpy(np.moveaxis(x, axis, -1).copy()).to(torch.bfloat16)
    w = torch.from_numpy(weight).to(torch.bfloat16)  # exact: the values are bf16 already
    b = torch.from_numpy(bias).to(torch.bfloat16)
    y = torch.nn.functional.layer_norm(t, (t.shape[-1],), w, b, eps=eps)
    bits = y.contiguous().view(torch.int16).numpy().view(np.uint16)
    return np.ascontiguousarray(np.moveaxis(bits, -1, axis))


def bf16_safetensors(tensors):
    """safetensors bytes (docs/goldens.md, "Golden file formats") of (name, bf16 bit patterns)
    pairs."""
    header, blobs, offset = {"__metadata__": {"format": "bf16_layernorm_example"}}, [], 0
    for name, bits in tensors:
        data = np.ascontiguousarray(bits, dtype="<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(bits.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("golden", help="a directory written by shardsim run --golden --dtype bf16")
    parser.add_argument("out", help="the candidate safetensors file to write")
    parser.add_argument("--eps", type=float, help="the eps to use (default: the manifest's)")
    parser.add_argument("--backend", choices=("torch", "numpy"), help="default: torch if present")
    args = parser.parse_args(argv[1:])
    backend = args.backend
    if backend is None:
        try:
            import torch  # noqa: F401
            backend = "torch"
        except ImportError:
            backend = "numpy"
    g = sg.load(args.golden)
    step = next(b for b in g.manifest["boundaries"] if b["scenario_op"] == "layer_norm")["params"]
    eps = step["eps"] if args.eps is None else args.eps
    x = g.tensor(f"inputs/{step['input']}", "bf16")
    axis = x.axes.index(step["axis"])
    weight = g.get(f"inputs/{step['weight']}", "bf16")
    bias = g.get(f"inputs/{step['bias']}", "bf16")
    run = layer_norm_torch if backend == "torch" else layer_norm_numpy
    y = run(x.array, weight, bias, eps, axis)
    name = f"bf16/s1/c1/{step['output']}"
    with open(args.out, "wb") as f:
        f.write(bf16_safetensors([(name, y)]))
    print(f"bf16_layernorm_example: {backend} bf16 LayerNorm (eps {eps:g}) of "
          f"bf16/inputs/{step['input']} written to {args.out} as {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
