"""PyTorch modules whose semantics are exactly shardsim's ops, for shardsim.capture.

Needs PyTorch (Debian's python3-torch: tools/bootstrap --torch) and runs on Debian's
/usr/bin/python3. Every formula below is the one the shardsim op documents (docs/ and the
headers named); the capture recognizes these classes and writes their parameters as they are.

- SlidingWindowAttention: op sliding_window_attention (sim/ops/attention/*.hpp,
  sim/ops/rope.hpp, docs/ops/attention.md). Projections laid out as shardsim lays
  them out: wq, wk, wv [hidden, head, head_dim], wo [head, head_dim, hidden], no biases. RoPE at
  absolute positions, rotate_half or interleaved, inv_freq_i = theta^(-2i/D). A query at p sees
  key k iff 0 <= p - k < window (causal without a window); scale 1/sqrt(D). The KV cache
  (KVCache) holds the last min(window - 1, L + t) keys AFTER RoPE and their values, detached: no
  gradient flows into an earlier chunk.
- GQAttention: op gqa_attention (sim/ops/gqa_attention/gqa.hpp, docs/ops/language-model.md):
  causal self-attention with n_kv_head key/value heads shared by groups of n_head / n_kv_head
  query heads; wq [hidden, head, head_dim], wk and wv [hidden, kv_head, head_dim], wo [head,
  head_dim, hidden], no biases. RoPE (rotate_half by default) on q and k at positions 0 .. seq-1;
  query head h reads kv head h // (n_head // n_kv_head) (repeat_interleave); scale 1/sqrt(D);
  y = attn wo. No KV cache (shardsim's gqa_attention does not stream).
- RMSNorm: op rms_norm, y = (x * rrms) * weight, rrms = 1 / sqrt(sum x^2 / H + eps). It is also
  the documented duck type the capture accepts from other code: a module whose class name ends
  in "RMSNorm", with a 1-D `weight` (or None) and a float `eps` (or `variance_epsilon`, as in
  Hugging Face's LlamaRMSNorm), computing that formula over the last axis.
- SwiGLU: the Llama MLP, down(silu(gate(x)) * up(x)), gate and up nn.Linear(hidden, ffn), down
  nn.Linear(ffn, hidden); the capture writes linear, linear, swiglu (sim/ops/swiglu/swiglu.hpp:
  y = silu(g) * u, silu(g) = g / (1 + exp(-g)), as PyTorch's CPU silu), linear. The product
  silu(g) * u is what the capture maps, so a module of another class computing it with nn.SiLU
  or F.silu (Hugging Face's LlamaMLP) is captured the same way.
- mse_loss: op mse_loss, (1 / V) * sum over valid tokens of sum_h (y - target)^2, V the number of
  valid tokens (token (b, s) is valid iff s < valid_lengths[b]). Note: not F.mse_loss's mean over
  every element, which divides by V * H as well.
"""
import math

import torch
from torch import nn

ROPE_CONVENTIONS = ("rotate_half", "interleaved")


def apply_rope(x, positions, theta, convention):
    """x: (batch, seq, head, head_dim); positions: (seq,) absolute positions.

    Plane i = 0 .. D/2-1 turns by p * theta^(-2i/D); rotate_half pairs (i, i + D/2), interleaved
    pairs (2i, 2i + 1); a pair (a, b) becomes (a cos - b sin, b cos + a sin).
    """
    dim = x.shape[-1]
    half = dim // 2
    planes = torch.arange(half, dtype=x.dtype)
    inv_freq = torch.pow(torch.tensor(theta, dtype=x.dtype), (-2 * planes) / dim)  # (half)
    angle = positions.to(x.dtype)[:, None] * inv_freq[None, :]  # (seq, half)
    cos = torch.cos(angle)[None, :, None, :]
    sin = torch.sin(angle)[None, :, None, :]
    if convention == "rotate_half":
        a, b = x[..., :half], x[..., half:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)


class KVCache:
    """The cache a streamed SlidingWindowAttention carries from chunk to chunk.

    k: RoPE'd keys (batch, L, head, head_dim), v: values, position: tokens streamed so far. Both
    are detached (truncated streaming training). Start a fresh one per training step.
    """

    def __init__(self):
        self.k = None
        self.v = None
        self.position = 0


class SlidingWindowAttention(nn.Module):
    """shardsim's sliding_window_attention as a module: forward(x, cache=None) -> y.

    x: (batch, seq, hidden). Without a cache the chunk sits at positions 0 .. seq-1; with one it
    continues at cache.position after cache's keys, and the cache is updated in place.
    """

    def __init__(self, hidden, n_head, head_dim, window=None, rope="rotate_half",
                 rope_theta=10000.0, dtype=None):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates pairs), got {head_dim}")
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 (or None for causal), got {window}")
        if rope not in ROPE_CONVENTIONS:
            raise ValueError(f"rope must be one of {ROPE_CONVENTIONS}, got {rope!r}")
        self.hidden, self.n_head, self.head_dim = hidden, n_head, head_dim
        self.window, self.rope, self.rope_theta = window, rope, float(rope_theta)
        scale = 1.0 / math.sqrt(hidden)
        def weight(*shape):
            return nn.Parameter((torch.rand(*shape, dtype=dtype) * 2 - 1) * scale)
        self.wq = weight(hidden, n_head, head_dim)
        self.wk = weight(hidden, n_head, head_dim)
        self.wv = weight(hidden, n_head, head_dim)
        self.wo = weight(n_head, head_dim, hidden)

    def forward(self, x, cache=None):
        first = cache.position if cache is not None else 0
        length = x.shape[1]
        positions = torch.arange(first, first + length)
        q = torch.einsum("bsc,chd->bshd", x, self.wq)
        k = torch.einsum("bsc,chd->bshd", x, self.wk)
        v = torch.einsum("bsc,chd->bshd", x, self.wv)
        q = apply_rope(q, positions, self.rope_theta, self.rope)
        k = apply_rope(k, positions, self.rope_theta, self.rope)
        if cache is not None and cache.k is not None:
            k_all, v_all = torch.cat((cache.k, k), dim=1), torch.cat((cache.v, v), dim=1)
        else:
            k_all, v_all = k, v
        cached = k_all.shape[1] - length
        k_pos = torch.arange(first - cached, first + length)
        distance = positions[:, None] - k_pos[None, :]  # (query, key)
        visible = distance >= 0
        if self.window is not None:
            visible &= distance < self.window
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k_all) * (1.0 / math.sqrt(self.head_dim))
        scores = scores.masked_fill(~visible[None, None], float("-inf"))
        attn = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v_all)
        y = torch.einsum("bshd,hdc->bsc", attn, self.wo)
        if cache is not None:
            keep = k_all.shape[1] if self.window is None else min(self.window - 1, k_all.shape[1])
            start = k_all.shape[1] - keep
            cache.k, cache.v = k_all[:, start:].detach(), v_all[:, start:].detach()
            cache.position = first + length
        return y


def streamed(module, x, chunks):
    """Runs a SlidingWindowAttention chunk by chunk along seq (chunk lengths `chunks`) with one
    fresh KVCache, as shardsim's [stream] does, and returns the outputs concatenated along seq."""
    if not isinstance(module, SlidingWindowAttention):
        raise TypeError("streamed() runs a SlidingWindowAttention module")
    cache = KVCache()
    outputs, begin = [], 0
    for length in chunks:
        outputs.append(module(x[:, begin:begin + length], cache))
        begin += length
    return torch.cat(outputs, dim=1)


class GQAttention(nn.Module):
    """shardsim's gqa_attention as a module: forward(x) -> y, x (batch, seq, hidden) at positions
    0 .. seq-1, causal. q = x wq, k = x wk, v = x wv (einsum over hidden), RoPE on q and k, query
    head h reads kv head h // (n_head // n_kv_head), softmax(q k^T / sqrt(D)) v, then wo."""

    def __init__(self, hidden, n_head, n_kv_head, head_dim, rope_theta=10000.0,
                 rope="rotate_half", dtype=None):
        super().__init__()
        if n_kv_head < 1 or n_head % n_kv_head:
            raise ValueError(f"n_kv_head must divide n_head, got {n_kv_head} kv heads for "
                             f"{n_head} query heads")
        if head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates pairs), got {head_dim}")
        if rope not in ROPE_CONVENTIONS:
            raise ValueError(f"rope must be one of {ROPE_CONVENTIONS}, got {rope!r}")
        self.hidden, self.n_head, self.n_kv_head = hidden, n_head, n_kv_head
        self.head_dim, self.rope, self.rope_theta = head_dim, rope, float(rope_theta)
        scale = 1.0 / math.sqrt(hidden)

        def weight(*shape):
            return nn.Parameter((torch.rand(*shape, dtype=dtype) * 2 - 1) * scale)
        self.wq = weight(hidden, n_head, head_dim)
        self.wk = weight(hidden, n_kv_head, head_dim)
        self.wv = weight(hidden, n_kv_head, head_dim)
        self.wo = weight(n_head, head_dim, hidden)

    def forward(self, x):
        positions = torch.arange(x.shape[1])
        q = apply_rope(torch.einsum("bsc,chd->bshd", x, self.wq), positions, self.rope_theta,
                       self.rope)
        k = apply_rope(torch.einsum("bsc,chd->bshd", x, self.wk), positions, self.rope_theta,
                       self.rope)
        v = torch.einsum("bsc,chd->bshd", x, self.wv)
        group = self.n_head // self.n_kv_head  # query head h reads kv head h // group
        k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(self.head_dim))
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal[None, None], float("-inf"))
        attn = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(scores, dim=-1), v)
        return torch.einsum("bshd,hdc->bsc", attn, self.wo)


class RMSNorm(nn.Module):
    """y = (x * rrms) * weight, rrms = 1 / sqrt(sum x^2 / H + eps), over the last axis."""

    def __init__(self, hidden, eps=1e-5, elementwise_affine=True, dtype=None):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype)) if elementwise_affine else None

    def forward(self, x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return y * self.weight if self.weight is not None else y


class SwiGLU(nn.Module):
    """y = down(silu(gate(x)) * up(x)): Llama's MLP (no biases by default)."""

    def __init__(self, hidden, ffn, bias=False, dtype=None):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=bias, dtype=dtype)
        self.up = nn.Linear(hidden, ffn, bias=bias, dtype=dtype)
        self.down = nn.Linear(ffn, hidden, bias=bias, dtype=dtype)

    def forward(self, x):
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


def mse_loss(y, target, valid_lengths=None):
    """shardsim's mse_loss on (batch, seq, hidden): sum over valid tokens of sum_h (y - t)^2,
    divided by the number of valid tokens V."""
    squared = ((y - target) ** 2).sum(dim=-1)  # (batch, seq)
    if valid_lengths is None:
        return squared.sum() / (squared.shape[0] * squared.shape[1])
    seq = torch.arange(squared.shape[1])
    valid = seq[None, :] < torch.tensor(list(valid_lengths))[:, None]
    return squared[valid].sum() / int(valid.sum())
