"""cross_entropy against PyTorch autograd; ctest python:cross_entropy.

    PYTHONPATH=python SHARDSIM_BINARY=build/shardsim SHARDSIM_SOURCE_DIR=. \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_cross_entropy.py

The bundled scenario scenarios/lm_head_vocab_parallel.toml is a vocab-parallel LM head (weight
[97, 16] Shard(vocab) over tp 2, batch over dp 2) and a cross-entropy with label smoothing 0.1,
a z-loss of 1e-3 and 5 ignored labels, trained 2 SGD steps (lr 0.5). This test builds the same
model independently in PyTorch f64:
  logits = h @ W^T
  loss = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.1)
         + 1e-3 * (sum over counted tokens of logsumexp(logits)^2) / (number of counted tokens)
  W <- W - 0.5 * dloss/dW, twice
from the scenario's inputs (the goldens' f64/inputs, and the labels' .npy file). It then checks
the goldens of the mp256 reference run, rounded to F64: each step's loss, the logits, the
logits' gradient, the weight's gradient and the updated weight.

The bound. max |torch - golden| / max |golden| <= 8 * 2^-52, as in test_capture.py. PyTorch's f64
kernels each round a few times per value: sums of 97 exponentials, 16-term dot products. Their
error is a few f64 epsilons relative to the largest value, far below what a wrong convention
would give. A wrong convention moves values by 1e-3 or more: the denominator, the smoothing
weight eps / C, a missing z term (1e-3 * lse^2 / V), or a dropped ignore_index.
Observed: 2.3 f64 epsilons at the worst (the logits' gradient, step 1), in both layouts.

The same check runs on the 1-rank twin of the same data (tp and dp of 1), so that the
vocab-parallel plan and the plain one are both tied to PyTorch.
"""
import os
import re
import subprocess
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

import shardsim.golden as sg

SHARDSIM, SOURCE = os.environ["SHARDSIM_BINARY"], os.environ["SHARDSIM_SOURCE_DIR"]
SCENARIO = os.path.join(SOURCE, "scenarios", "lm_head_vocab_parallel.toml")
LABELS = os.path.join(SOURCE, "scenarios", "data", "lm_labels_ignored.npy")
BOUND = 8 * 2.0**-52
LR, EPS, Z, IGNORE = 0.5, 0.1, 1e-3, -100


def normwise(actual, golden):
    actual = actual.detach().numpy()
    scale = abs(golden).max()
    return abs(actual - golden).max() / scale


def goldens(scenario_text, directory, arrays=None):
    """Goldens of `scenario_text` written into `directory`, beside `arrays` ({relative path:
    array}, the scenario's input files); by default the labels file the bundled one reads."""
    os.makedirs(directory)
    path = os.path.join(directory, "scenario.toml")
    with open(path, "w") as f:
        f.write(scenario_text)
    if arrays is None:
        arrays = {os.path.join("data", "lm_labels_ignored.npy"): np.load(LABELS)}
    for name, array in arrays.items():
        os.makedirs(os.path.dirname(os.path.join(directory, name)) or directory, exist_ok=True)
        np.save(os.path.join(directory, name), array)
    out = os.path.join(directory, "goldens")
    result = subprocess.run([SHARDSIM, "run", "--quiet", path, "--precision", "f64",
                             "--reference", "mp256", "--dtype", "f64", "--golden", out],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"shardsim run exited {result.returncode}:\n{result.stdout}"
                             f"{result.stderr}")
    return sg.load(out)


def single_rank(text):
    """The 1-rank twin of a dp 2 x tp 2 scenario: one rank on each dim, every placement
    Replicate, and so no parallel linear."""
    text = text.replace("dims = { dp = 2, tp = 2 }", "dims = { dp = 1, tp = 1 }")
    text = re.sub(r'"Shard\([a-z]+\)"', '"Replicate"', text)
    return text.replace('parallel = "column"\n', '')


def both_layouts(scenario, ids, labels, directory):
    """Goldens of `scenario` (a dp 2 x tp 2 file drawing ids and labels with randint over 97
    classes) and of its 1-rank twin, both reading `ids` and `labels` from .npy files instead."""
    with open(scenario) as f:
        text = f.read()
    draws = text.split('init = { dist = "randint", low = 0, high = 97 }')
    assert len(draws) == 3, f"{scenario} draws ids and labels"
    text = draws[0] + 'init = { file = "ids.npy" }' + draws[1] + \
        'init = { file = "labels.npy" }' + draws[2]
    arrays = {"ids.npy": ids, "labels.npy": labels}
    return {"dp 2 x tp 2": goldens(text, os.path.join(directory, "sharded"), arrays),
            "1 rank": goldens(single_rank(text), os.path.join(directory, "single"), arrays)}


def torch_steps(h, w, labels, steps=2):
    """Per step: loss, logits, dlogits, dW, the updated W (PyTorch f64 autograd)."""
    out = []
    w = w.clone()
    flat = labels.reshape(-1)
    counted = (flat != IGNORE)
    for _ in range(steps):
        w.requires_grad_(True)
        logits = h @ w.T
        logits.retain_grad()
        x = logits.reshape(-1, logits.shape[-1])
        lse = torch.logsumexp(x, dim=-1)
        loss = (F.cross_entropy(x, flat, ignore_index=IGNORE, label_smoothing=EPS)
                + Z * (lse[counted] ** 2).sum() / counted.sum())
        loss.backward()
        with torch.no_grad():
            updated = w - LR * w.grad
        out.append((loss, logits, logits.grad, w.grad.clone(), updated))
        w = updated.detach()
    return out


class CrossEntropyTorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="shardsim_ce_")
        with open(SCENARIO) as f:
            text = f.read()
        cls.sets = {"dp 2 x tp 2": goldens(text, os.path.join(cls.tmp.name, "sharded"))}
        cls.sets["1 rank"] = goldens(single_rank(text), os.path.join(cls.tmp.name, "single"))
        cls.labels = torch.from_numpy(np.load(LABELS))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_matches_pytorch_autograd(self):
        for what, g in self.sets.items():
            h = torch.from_numpy(g.tensors["f64/inputs/h"].array.copy())
            w = torch.from_numpy(g.tensors["f64/inputs/head.weight"].array.copy())
            for step, (loss, logits, dlogits, dw, updated) in enumerate(
                    torch_steps(h, w, self.labels), start=1):
                prefix = f"f64/s{step}/c1/"
                checks = {"loss": loss, "logits": logits, "grad(logits)": dlogits,
                          "grad(head.weight)": dw, "head.weight": updated}
                for name, value in checks.items():
                    golden = g.tensors[prefix + name].array
                    self.assertEqual(tuple(value.shape), golden.shape, (what, step, name))
                    err = normwise(value, golden)
                    self.assertLessEqual(err, BOUND, f"{what}, step {step}, {name}: {err:.3g}")

    def test_ignored_tokens_have_no_gradient(self):
        # The 5 tokens labelled -100 contribute nothing: their logits' gradient is 0 exactly.
        g = self.sets["dp 2 x tp 2"]
        dlogits = g.tensors["f64/s1/c1/grad(logits)"].array
        ignored = self.labels.numpy() == IGNORE
        self.assertEqual(int(ignored.sum()), 5)
        self.assertTrue((dlogits[ignored] == 0).all())
        self.assertTrue((dlogits[~ignored] != 0).all())


TIED = os.path.join(SOURCE, "scenarios", "lm_tied_embedding_tp2.toml")


def torch_tied_steps(ids, labels, w, g, steps=2, lr=0.5, eps=1e-5):
    """Per step: loss, logits, dW, dg, the updated W (PyTorch f64 autograd). One weight W is the
    embedding and the LM head, so autograd sums its two uses."""
    out = []
    for _ in range(steps):
        w = w.detach().requires_grad_(True)
        g = g.detach().requires_grad_(True)
        x = F.embedding(ids, w)
        xn = (x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps)) * g
        logits = xn @ w.T
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        with torch.no_grad():
            updated, updated_g = w - lr * w.grad, g - lr * g.grad
        out.append((loss, logits, w.grad.clone(), g.grad.clone(), updated))
        w, g = updated, updated_g
    return out


class TiedEmbeddingTorchTest(unittest.TestCase):
    """scenarios/lm_tied_embedding_tp2.toml (vocab-parallel embedding, RMSNorm, the LM head tied to
    the embedding, cross-entropy) and its 1-rank twin against PyTorch autograd, with the ids and
    labels drawn here by numpy (including repeated ids, whose rows the scatter-add sums) and read
    by the scenario from .npy files. Same bound as above. Observed: 2.9 f64 epsilons at the worst."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="shardsim_tied_")
        rng = np.random.default_rng(2026)
        cls.ids = rng.integers(0, 97, size=(4, 6)).astype(np.int64)
        cls.ids[3, :3] = cls.ids[0, 0]  # one id four times, across both dp ranks
        cls.labels = rng.integers(0, 97, size=(4, 6)).astype(np.int64)
        cls.sets = both_layouts(TIED, cls.ids, cls.labels, cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_matches_pytorch_autograd(self):
        ids, labels = torch.from_numpy(self.ids), torch.from_numpy(self.labels)
        for what, g in self.sets.items():
            w = torch.from_numpy(g.tensors["f64/inputs/embed.weight"].array.copy())
            gain = torch.from_numpy(g.tensors["f64/inputs/norm.weight"].array.copy())
            for step, (loss, logits, dw, dg, updated) in enumerate(
                    torch_tied_steps(ids, labels, w, gain), start=1):
                prefix = f"f64/s{step}/c1/"
                checks = {"loss": loss, "logits": logits, "grad(embed.weight)": dw,
                          "grad(norm.weight)": dg, "embed.weight": updated}
                for name, value in checks.items():
                    golden = g.tensors[prefix + name].array
                    self.assertEqual(tuple(value.shape), golden.shape, (what, step, name))
                    err = normwise(value, golden)
                    self.assertLessEqual(err, BOUND, f"{what}, step {step}, {name}: {err:.3g}")


if __name__ == "__main__":
    unittest.main()
