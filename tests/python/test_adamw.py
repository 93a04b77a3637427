"""AdamW against torch.optim.AdamW; ctest python:cross_entropy (with test_cross_entropy.py).

    PYTHONPATH=python SHARDSIM_BINARY=build/shardsim SHARDSIM_SOURCE_DIR=. \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_adamw.py

The bundled scenario scenarios/lm_adamw_dp2_tp2.toml (a vocab-parallel embedding tied to the LM
head, RMSNorm, vocab-parallel cross-entropy on dp 2 x tp 2) is trained 3 steps with
optimizer = { kind = "adamw", lr = 0.01, betas = [0.9, 0.95], eps = 1e-8, weight_decay = 0.1 }.
This test builds the same model independently in PyTorch f64 (F.embedding, an RMSNorm written
out, logits = xn @ W^T with the same W, F.cross_entropy) and steps it with torch.optim.AdamW
itself, with ids and labels drawn here by numpy and read by the scenario from .npy files. It then
checks the goldens of the mp256 reference run, rounded to F64, at every step: the loss, both
parameters' gradients, their exp_avg and exp_avg_sq (the optimizer's state) and the updated
parameters, on the sharded layout and on its 1-rank twin.

The bound. max |torch - golden| / max |golden| <= 8 * 2^-52, as the cross-entropy test: AdamW is
elementwise, a few roundings per value (the moments' two products and sum, a sqrt, a division),
given the same inputs. A wrong rule moves the values far more: without bias correction the first
step is 0.447 lr instead of lr per element, a coupled decay moves exp_avg by weight_decay * param
(0.1 here), an update count off by one changes 1 - beta1^t.

Each step is checked from the golden's state before it (teacher forcing): autograd's loss and
gradients at the golden's parameters, then torch.optim.AdamW stepped with the golden's
gradients. Chaining torch's own gradients instead would not be a fair comparison: AdamW's
direction m / (sqrt(v) + eps) is ill-conditioned where |g| is near eps (here one embedding
element's gradient is -1.7e-9 after its two uses cancel, against eps = 1e-8), so the few
epsilons by which two correct gradients differ become 20 epsilons of the updated weight.
Observed with teacher forcing: 3.2 f64 epsilons at the worst (a gradient; the AdamW values less).
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
from test_cross_entropy import BOUND, SOURCE, both_layouts, normwise  # noqa: E402

SCENARIO = os.path.join(SOURCE, "scenarios", "lm_adamw_dp2_tp2.toml")
LR, BETAS, EPS, DECAY, STEPS, NORM_EPS = 0.01, (0.9, 0.95), 1e-8, 0.1, 3, 1e-5


def torch_adamw_steps(ids, labels, golden):
    """Per step: {name: tensor} of the loss and the gradients (PyTorch f64 autograd at the
    golden's parameters before the step), and of the AdamW state and the updated parameters
    (torch.optim.AdamW stepping with the golden's gradients: see the module docstring)."""
    w = golden["f64/inputs/embed.weight"].clone().requires_grad_(True)
    g = golden["f64/inputs/norm.weight"].clone().requires_grad_(True)
    opt = torch.optim.AdamW([w, g], lr=LR, betas=BETAS, eps=EPS, weight_decay=DECAY)
    out = []
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        x = F.embedding(ids, w)
        xn = (x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + NORM_EPS)) * g
        logits = xn @ w.T
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        values = {"loss": loss.detach().clone(), "grad(embed.weight)": w.grad.clone(),
                  "grad(norm.weight)": g.grad.clone()}
        for name, p in (("embed.weight", w), ("norm.weight", g)):
            p.grad.copy_(golden[f"f64/s{step}/c1/grad({name})"])
        opt.step()
        for name, p in (("embed.weight", w), ("norm.weight", g)):
            state = opt.state[p]
            values[name] = p.detach().clone()
            values[name + ".exp_avg"] = state["exp_avg"].clone()
            values[name + ".exp_avg_sq"] = state["exp_avg_sq"].clone()
            with torch.no_grad():  # the next step starts from the golden's parameters
                p.copy_(golden[f"f64/s{step}/c1/{name}"])
        out.append(values)
    return out


class AdamWTorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="shardsim_adamw_")
        rng = np.random.default_rng(46)
        cls.ids = rng.integers(0, 97, size=(4, 6)).astype(np.int64)
        cls.ids[2, 1:4] = cls.ids[0, 5]  # a repeated id: its row's gradient sums four tokens
        cls.labels = rng.integers(0, 97, size=(4, 6)).astype(np.int64)
        cls.sets = both_layouts(SCENARIO, cls.ids, cls.labels, cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_matches_torch_optim_adamw(self):
        ids, labels = torch.from_numpy(self.ids), torch.from_numpy(self.labels)
        checked = 0
        for what, g in self.sets.items():
            golden = {name: torch.from_numpy(t.array.copy()) for name, t in g.tensors.items()
                      if name.startswith("f64/")}
            for step, values in enumerate(torch_adamw_steps(ids, labels, golden), start=1):
                for name, value in values.items():
                    want = g.tensors[f"f64/s{step}/c1/{name}"].array
                    self.assertEqual(tuple(value.shape), want.shape, (what, step, name))
                    err = normwise(value, want)
                    self.assertLessEqual(err, BOUND, f"{what}, step {step}, {name}: {err:.3g}")
                    checked += 1
        self.assertEqual(checked, 2 * STEPS * 9)

    def test_goldens_record_the_hyperparameters(self):
        params = self.sets["dp 2 x tp 2"].tensors["f64/s2/c1/embed.weight.exp_avg"].params
        self.assertEqual(params["optimizer"], "adamw")
        self.assertEqual(params["learning_rate"], LR)
        self.assertEqual(params["betas"], list(BETAS))
        self.assertEqual((params["eps"], params["weight_decay"]), (EPS, DECAY))
        self.assertEqual(params["update"], 2)

if __name__ == "__main__":
    unittest.main()
