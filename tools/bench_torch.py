#!/usr/bin/python3
"""PyTorch CPU yardstick for shardsim_bench (issue 8). Run with Debian's /usr/bin/python3.

--serve: reads one request per line on stdin and answers one line on stdout:
  "ping"                    -> "0"
  "ln f32|f64 ROWS HIDDEN"  -> seconds of one F.layer_norm forward + backward, single thread
Inputs are built once per (dtype, shape) and reused; each request times one call.
"""
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
_cache = {}


def layer_norm_case(dtype, rows, hidden):
    key = ("ln", dtype, rows, hidden)
    if key not in _cache:
        dt = torch.float32 if dtype == "f32" else torch.float64
        g = torch.Generator().manual_seed(0)
        x = (torch.rand(rows, hidden, generator=g, dtype=dt) * 4 - 2).requires_grad_()
        w = (torch.rand(hidden, generator=g, dtype=dt) + 0.5).requires_grad_()
        b = (torch.rand(hidden, generator=g, dtype=dt) - 0.5).requires_grad_()
        dy = torch.rand(rows, hidden, generator=g, dtype=dt) * 2 - 1
        _cache[key] = (x, w, b, dy)
    return _cache[key]


def time_layer_norm(dtype, rows, hidden):
    x, w, b, dy = layer_norm_case(dtype, rows, hidden)
    t0 = time.perf_counter()
    y = F.layer_norm(x, (hidden,), w, b, 1e-5)
    y.backward(dy)
    elapsed = time.perf_counter() - t0
    x.grad = None
    w.grad = None
    b.grad = None
    return elapsed


def main():
    if "--serve" not in sys.argv:
        for dtype in ("f64", "f32"):
            best = min(time_layer_norm(dtype, 2048, 1024) for _ in range(5))
            print(f"torch {torch.__version__} {dtype} LayerNorm fwd+bwd 2048x1024: "
                  f"{2048 * 1024 / best / 1e9:.3f} G elem/s")
        return
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "ping":
            reply = 0.0
        elif parts[0] == "ln":
            reply = time_layer_norm(parts[1], int(parts[2]), int(parts[3]))
        else:
            reply = -1.0
        sys.stdout.write(f"{reply:.9f}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
