#!/usr/bin/python3
"""PyTorch CPU yardstick for shardsim_bench. Run with Debian's /usr/bin/python3.

--serve: reads one request per line on stdin and answers one line on stdout:
  "ping"                    -> "0"
  "ln f32|f64 ROWS HIDDEN"  -> seconds of one F.layer_norm forward + backward, single thread
  "attn SEQ CHUNKS WINDOW HEADS DIM"
                            -> seconds of one f64 streamed sliding-window attention forward:
                               per chunk, q/k/v projections, rotate_half RoPE at absolute
                               positions, cache ++ chunk, masked matmul attention (softmax of
                               q k^T / sqrt(DIM) with 0 <= q_pos - k_pos < WINDOW), the output
                               projection, and a cache of the last WINDOW - 1 RoPE'd keys
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


def attention_case(seq, heads, dim):
    key = ("attn", seq, heads, dim)
    if key not in _cache:
        hidden = heads * dim
        g = torch.Generator().manual_seed(0)
        dt = torch.float64
        scale = hidden ** -0.5
        x = torch.rand(seq, hidden, generator=g, dtype=dt) * 2 - 1
        ws = [(torch.rand(hidden, hidden, generator=g, dtype=dt) * 2 - 1) * scale
              for _ in range(4)]
        _cache[key] = (x, ws)
    return _cache[key]


def rope(t, positions, dim, theta=10000.0):
    # t: (heads, n, dim); rotate_half: plane i rotates (i, i + dim/2).
    inv_freq = theta ** (-torch.arange(0, dim // 2, dtype=torch.float64) * 2 / dim)
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angle.cos(), angle.sin()
    a, b = t[..., : dim // 2], t[..., dim // 2:]
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def time_attention(seq, chunks, window, heads, dim):
    x, (wq, wk, wv, wo) = attention_case(seq, heads, dim)
    t = seq // chunks
    t0 = time.perf_counter()
    with torch.no_grad():
        cache_k = torch.empty(heads, 0, dim, dtype=torch.float64)
        cache_v = torch.empty(heads, 0, dim, dtype=torch.float64)
        first = 0
        for _ in range(chunks):
            xc = x[first:first + t]
            q, k, v = ((xc @ w).view(t, heads, dim).transpose(0, 1) for w in (wq, wk, wv))
            q_pos = torch.arange(first, first + t)
            q = rope(q, q_pos, dim)
            k = rope(k, q_pos, dim)
            k_all = torch.cat((cache_k, k), dim=1)
            v_all = torch.cat((cache_v, v), dim=1)
            k_pos = torch.arange(first - cache_k.shape[1], first + t)
            delta = q_pos[:, None] - k_pos[None, :]
            allowed = (delta >= 0) & (delta < window)
            scores = (q @ k_all.transpose(1, 2)) * dim ** -0.5
            scores.masked_fill_(~allowed, float("-inf"))
            attn = torch.softmax(scores, dim=-1) @ v_all
            y = attn.transpose(0, 1).reshape(t, heads * dim) @ wo
            keep = min(window - 1, k_all.shape[1])
            cache_k = k_all[:, k_all.shape[1] - keep:]
            cache_v = v_all[:, v_all.shape[1] - keep:]
            first += t
    del y
    return time.perf_counter() - t0


def main():
    if "--serve" not in sys.argv:
        for dtype in ("f64", "f32"):
            best = min(time_layer_norm(dtype, 2048, 1024) for _ in range(5))
            print(f"torch {torch.__version__} {dtype} LayerNorm fwd+bwd 2048x1024: "
                  f"{2048 * 1024 / best / 1e9:.3f} G elem/s")
        best = min(time_attention(4096, 4, 512, 8, 64) for _ in range(3))
        print(f"torch f64 streamed sliding-window attention, seq 4096 in 4 chunks, window 512, "
              f"8 heads x 64: {best:.3f} s")
        return
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "ping":
            reply = 0.0
        elif parts[0] == "ln":
            reply = time_layer_norm(parts[1], int(parts[2]), int(parts[3]))
        elif parts[0] == "attn":
            reply = time_attention(*(int(p) for p in parts[1:6]))
        else:
            reply = -1.0
        sys.stdout.write(f"{reply:.9f}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
