"""The tiny Llama against a PyTorch f64 model written here; ctest python:llama.

    PYTHONPATH=python SHARDSIM_BINARY=build/shardsim SHARDSIM_SOURCE_DIR=. \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_llama.py

scenarios/llama_tiny_dp2_cp2_tp2.toml (dp 2 x cp 2 x tp 2, sequence parallel) and its 1-rank twin
scenarios/llama_tiny_1rank.toml are the same model: a vocab-parallel embedding (vocab 97, hidden
48) tied to the LM head, 2 decoder layers (RMSNorm; GQA attention with 4 query heads and 2 kv
heads of 12, RoPE rotate_half, causal; RMSNorm; SwiGLU MLP of 128; residuals), a final RMSNorm and
cross-entropy, trained 2 AdamW steps. This test writes the model out in PyTorch from the
definitions (F.embedding, einsum projections, RoPE at positions 0..23 with theta_i = 10000^(-2i/12)
on the pairs (i, i + 6), repeat_interleave of the kv heads, a causal softmax, F.silu,
F.cross_entropy) with ids and labels drawn here by numpy and read by the scenarios from .npy
files, and steps it with torch.optim.AdamW. At each step, from the golden's parameters before it
(teacher forcing, as tests/python/test_adamw.py explains: AdamW's direction is ill-conditioned
where a gradient is near eps), it checks the goldens of the mp256 reference run rounded to F64:
the loss, the logits, every parameter's gradient, and the parameters AdamW updates from the
golden's gradients.

The bound. max |torch - golden| / max |golden| <= 16 * 2^-52 per tensor. PyTorch's f64 kernels
round at every operation of a 2-layer model (sums of 48 and 128 products, softmaxes over 24 keys,
RMS statistics, 97-term log-sum-exps, and the backward of each), against goldens that are the
exact values rounded once. A few epsilons normwise is that, not a convention: a wrong kv group, a
missing 1/sqrt(head_dim), RoPE on the other pairs or a dropped residual moves values by 1e-3 or
more. Observed: 5.7 f64 epsilons at the worst, on both layouts.
"""
import os
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError:
    raise ImportError(f"{sys.executable} needs numpy and torch: install python3-numpy and "
                      f"python3-torch (tools/bootstrap --torch)") from None

# pytest puts this directory on the path (rootdir conftest.py, "prepend" import mode).
from test_cross_entropy import SOURCE, goldens, normwise  # noqa: E402

BOUND = 16 * 2.0**-52
SCENARIOS = {"dp 2 x cp 2 x tp 2": "llama_tiny_dp2_cp2_tp2.toml", "1 rank": "llama_tiny_1rank.toml"}
LAYERS, HEADS, KV_HEADS, HEAD_DIM, THETA, EPS = 2, 4, 2, 12, 10000.0, 1e-5
LR, BETAS, DECAY, STEPS = 1e-3, (0.9, 0.95), 0.1, 2


def rms_norm(x, w):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + EPS) * w


def rope(x):
    """rotate_half at positions 0..seq-1: the pair (i, i + D/2) turns by p * THETA^(-2i/D)."""
    seq, half = x.shape[1], x.shape[-1] // 2
    inv = THETA ** (-2.0 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def attention(x, wq, wk, wv, wo):
    q = rope(torch.einsum("bsc,chd->bshd", x, wq))
    k = rope(torch.einsum("bsc,chd->bshd", x, wk))
    v = torch.einsum("bsc,chd->bshd", x, wv)
    group = HEADS // KV_HEADS  # query head h reads kv head h // group
    k, v = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / HEAD_DIM ** 0.5
    seq = x.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    p = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    return torch.einsum("bhij,bjhd,hdc->bic", p, v, wo)


def model(ids, labels, p):
    x = F.embedding(ids, p["embed.weight"])
    for layer in range(LAYERS):
        w = {k[len(f"layers.{layer}."):]: t for k, t in p.items()
             if k.startswith(f"layers.{layer}.")}
        h = x + attention(rms_norm(x, w["attn_norm.weight"]), w["attn.wq"], w["attn.wk"],
                          w["attn.wv"], w["attn.wo"])
        hn = rms_norm(h, w["mlp_norm.weight"])
        mlp = (F.silu(hn @ w["mlp.gate.weight"].T) * (hn @ w["mlp.up.weight"].T))
        x = h + mlp @ w["mlp.down.weight"].T
    logits = rms_norm(x, p["norm.weight"]) @ p["embed.weight"].T
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    return loss, logits


class TinyLlamaTorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="shardsim_llama_")
        rng = np.random.default_rng(4646)
        cls.ids = rng.integers(0, 97, size=(4, 24)).astype(np.int64)
        cls.labels = rng.integers(0, 97, size=(4, 24)).astype(np.int64)
        arrays = {"ids.npy": cls.ids, "labels.npy": cls.labels}
        cls.sets = {}
        for what, file in SCENARIOS.items():
            with open(os.path.join(SOURCE, "scenarios", file)) as f:
                draws = f.read().split('init = { dist = "randint", low = 0, high = 97 }')
            assert len(draws) == 3, f"{file} draws ids and labels"
            text = draws[0] + 'init = { file = "ids.npy" }' + draws[1] + \
                'init = { file = "labels.npy" }' + draws[2]
            cls.sets[what] = goldens(text, os.path.join(cls.tmp.name, what.replace(" ", "_")),
                                     arrays)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_matches_pytorch(self):
        ids, labels = torch.from_numpy(self.ids), torch.from_numpy(self.labels)
        for what, g in self.sets.items():
            names = [n[len("f64/inputs/"):] for n in g.tensors
                     if n.startswith("f64/inputs/") and "@" not in n]
            params = {n: torch.from_numpy(g.tensors[f"f64/inputs/{n}"].array.copy())
                      .requires_grad_(True) for n in names}
            self.assertEqual(len(params), 2 + 9 * LAYERS, what)
            opt = torch.optim.AdamW(params.values(), lr=LR, betas=BETAS, weight_decay=DECAY)
            worst = 0.0
            for step in range(1, STEPS + 1):
                at = f"f64/s{step}/c1/"
                opt.zero_grad()
                loss, logits = model(ids, labels, params)
                loss.backward()
                checks = {"loss": loss, "logits": logits}
                checks.update({f"grad({n})": p.grad for n, p in params.items()})
                for n, p in params.items():  # AdamW from the golden's gradients
                    p.grad = torch.from_numpy(g.tensors[at + f"grad({n})"].array.copy())
                opt.step()
                checks.update({n: p for n, p in params.items()})
                for name, value in checks.items():
                    golden = g.tensors[at + name].array
                    self.assertEqual(tuple(value.shape), golden.shape, (what, step, name))
                    err = normwise(value, golden)
                    worst = max(worst, err)
                    self.assertLessEqual(err, BOUND, f"{what}, step {step}, {name}: {err:.3g}")
                with torch.no_grad():  # the next step starts from the golden's parameters
                    for n, p in params.items():
                        p.copy_(torch.from_numpy(g.tensors[at + n].array.copy()))
            print(f"{what}: worst {worst / 2.0**-52:.1f} f64 epsilons")


if __name__ == "__main__":
    unittest.main()
