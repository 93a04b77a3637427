"""shardsim.capture of a language-model head: token ids, nn.Embedding (vocab-parallel), an LM head
tied to it, CrossEntropyLoss, and SwiGLU; captured, replayed and checked against PyTorch.

    PYTHONPATH=python SHARDSIM_BINARY=build/shardsim SHARDSIM_SOURCE_DIR=. \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_capture_lm.py

Needs Debian's python3-torch (tools/bootstrap --torch).

The model is written here as a user would write it, Llama's two ends: ids -> nn.Embedding(97, 16)
-> an HF-style RMSNorm -> nn.Linear(16, 97, bias=False) whose weight IS the embedding's
Parameter, and F.cross_entropy with some labels -100. The plan is DTensor's: RowwiseParallel on
the embedding (weight Shard(0), the vocabulary: 49 + 48 rows on tp=2) and ColwiseParallel on the
head (Shard(vocab) logits: Megatron's vocab-parallel cross-entropy). Two SGD steps.

The bounds, as in test_capture.py: PyTorch's own f64 forward, backward and SGD step on the
captured values against the mp256 goldens rounded to F64, normwise: max |torch - golden| /
max |golden| <= 8 * 2^-52 (8 f64 epsilons); PyTorch's f32 run against the F32 goldens within 8
f32 epsilons (8 * 2^-23), far inside shardsim's f32 budget 2^-8. PyTorch's kernels round a few
times per value (sums of 97 exponentials, 16-term dot products); a wrong convention (the mean's
denominator, an ignored label counted, one use of the tied weight dropped, a row of the
vocabulary split off by one) moves values by 1e-3 or more. Observed at the worst boundary: 4.7
f64 epsilons (grad(embed.weight), the tied sum, step 1) and 3.6 f32 epsilons (the LM head's
share grad(embed.weight)#1, step 2); 3.2 f64 epsilons with the SwiGLU block
(grad(mlp.gate.weight)).
"""
import copy
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:
    raise ImportError(f"{sys.executable} has no torch: install python3-torch (tools/bootstrap "
                      f"--torch)") from None

import shardsim.capture as sc
import shardsim.golden as sg
import shardsim.modules as sm

# conftest.py checks that ctest's environment names it (tests/CMakeLists.txt).
SHARDSIM = os.environ["SHARDSIM_BINARY"]

F64_BOUND = 8 * 2.0**-52
F32_BUDGET = 2.0**-8
F32_BOUND = 8 * 2.0**-23  # inside F32_BUDGET
VOCAB, HIDDEN, IGNORE = 97, 16, -100


def replay(scenario, golden):
    """shardsim run SCENARIO --golden DIR; the exit status is shardsim's own verdict."""
    result = subprocess.run([SHARDSIM, "run", "--quiet", scenario, "--golden", golden],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"shardsim run exited {result.returncode}:\n{result.stdout}"
                             f"{result.stderr}")
    return sg.load(golden)


def normwise(actual, golden):
    actual = actual.detach().to(torch.float64).numpy()
    scale = abs(golden).max()
    err = abs(actual - golden).max()
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


class LlamaRMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm (the capture's RMSNorm duck type)."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(hidden) + 0.5)
        self.variance_epsilon = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


class LmHead(nn.Module):
    """ids -> embedding -> (optional SwiGLU MLP with a residual) -> RMSNorm -> tied LM head."""

    def __init__(self, mlp=None):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.mlp = mlp
        self.norm = LlamaRMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.lm_head.weight = self.embed.weight  # tied: one Parameter, two uses

    def forward(self, ids):
        h = self.embed(ids)
        if self.mlp is not None:
            h = self.mlp(h) + h
        return self.lm_head(self.norm(h))


def example(seed):
    """ids (2, 6) with one id repeated (the scatter-add sums its rows) and labels (2, 6) with
    three of them ignore_index."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (2, 6), generator=generator)
    ids[1, 3:] = ids[0, 2]
    labels = torch.randint(0, VOCAB, (2, 6), generator=generator)
    labels[0, 1] = labels[1, 0] = labels[1, 5] = IGNORE
    return ids, labels


def torch_steps(model, ids, labels, steps, lr, outputs, dtype=torch.float64):
    """PyTorch per SGD step, in `dtype`: the outputs of the modules named in `outputs`, the
    loss, the logits' gradient grad(lm_head), every parameter's gradient and its value after the
    update, and the LM head's share of the tied gradient alone (its dW = dlogits^T h, as `#1`)."""
    model = copy.deepcopy(model).to(dtype)
    assert model.lm_head.weight is model.embed.weight  # deepcopy and .double() keep the tie
    seen = {}
    for name in outputs:
        model.get_submodule(name).register_forward_hook(
            lambda mod, inp, out, name=name: seen.__setitem__(name, out))
    model.lm_head.register_forward_pre_hook(lambda mod, inp: seen.__setitem__("head_in", inp[0]))
    records = []
    for _ in range(steps):
        seen.clear()
        logits = model(ids)
        logits.retain_grad()
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                               ignore_index=IGNORE)
        model.zero_grad()
        loss.backward()
        head_in = seen.pop("head_in")
        record = dict(seen, loss=loss)
        record["grad(lm_head)"] = logits.grad
        record["grad(embed.weight)#1"] = (logits.grad.reshape(-1, VOCAB).T
                                          @ head_in.detach().reshape(-1, HIDDEN))
        with torch.no_grad():
            for name, p in model.named_parameters():  # the tied weight once, as embed.weight
                record[f"grad({name})"] = p.grad.clone()
                p -= lr * p.grad
                record[name] = p.clone()
        records.append(record)
    return records


class TiedVocabParallelHead(unittest.TestCase):
    """The LM head above on tp=2, vocab-parallel embedding and head, 2 SGD steps."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="shardsim_capture_lm_")
        torch.manual_seed(97)
        cls.model = LmHead()
        cls.ids, cls.labels = example(2026)
        scenario = sc.capture(cls.model, cls.ids, mesh={"tp": 2},
                              plan={"embed": sc.RowwiseParallel(), "lm_head": "ColwiseParallel"},
                              out=os.path.join(cls.tmp.name, "captured"),
                              loss=sc.CrossEntropyLoss(cls.labels, ignore_index=IGNORE),
                              train_steps=2, lr=0.5)
        with open(scenario) as f:
            cls.text = f.read()
        cls.inputs, _ = sg.read_safetensors(os.path.join(os.path.dirname(scenario),
                                                         "inputs.safetensors"))
        cls.goldens = replay(scenario, os.path.join(cls.tmp.name, "g"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_plan_is_a_vocab_parallel_embedding_and_a_tied_column_parallel_head(self):
        for line in ('name = "ids"\ndtype = "i64"\nrole = "input"\naxes = ["batch", "seq"]',
                     'name = "labels"\ndtype = "i64"\nrole = "target"',
                     'name = "embed.weight"\nrole = "parameter"\naxes = ["vocab", "hidden"]\n'
                     'shape = [97, 16]', 'placement = "Shard(vocab)"',
                     'op = "embedding"\ninput = "ids"\nweight = "embed.weight"\n'
                     'to = "Replicate"', 'input = "norm"\nto = "Replicate"\noutput = "norm.tp"',
                     'weight = "embed.weight"\nparallel = "column"\noutput = "lm_head"',
                     'op = "cross_entropy"\ninput = "lm_head"\nlabels = "labels"\n'
                     'ignore_index = -100', "ranks = 2"):
            self.assertIn(line, self.text)
        self.assertNotIn("lm_head.weight", self.text)  # the tie: no second tensor
        self.assertEqual(self.text.count('weight = "embed.weight"'), 2)
        self.assertEqual(self.goldens.manifest["verdict"], "pass")
        # The ids and labels are written as they are, I64, next to the float parameters.
        self.assertEqual(sorted(self.inputs), ["embed.weight", "ids", "labels", "norm.weight"])
        for name, value in (("ids", self.ids), ("labels", self.labels)):
            array = self.inputs[name]
            self.assertEqual(array.dtype.str, "<i8", name)
            self.assertTrue((array == value.numpy()).all(), name)
        # 49 + 48 rows: the vocabulary split as DTensor's Shard(0) (torch.chunk) splits it.
        shards = [t for n, t in self.goldens.tensors.items()
                  if n.startswith("f64/inputs/embed.weight@")]
        self.assertEqual(sorted(t.array.shape[0] for t in shards), [48, 49])

    def check(self, dtype, prefix, bound):
        records = torch_steps(self.model, self.ids, self.labels, 2, 0.5,
                              ("embed", "norm", "lm_head"), dtype)
        checked = 0
        for step, record in enumerate(records, start=1):
            for name, value in record.items():
                golden = self.goldens.get(f"s{step}/c1/{name}", prefix)
                self.assertEqual(tuple(value.shape), golden.shape, name)
                err = normwise(value, golden)
                with self.subTest(step=step, tensor=name, dtype=prefix):
                    self.assertLessEqual(err, bound, f"s{step}/c1/{name}: {err:.3g}")
                checked += 1
        # Per step: embed, norm, lm_head (the logits), the loss, grad(lm_head), the head's
        # share #1, 2 gradients and 2 updated parameters.
        self.assertEqual(checked, 2 * 10)

    def test_pytorch_f64_forward_backward_within_8_epsilons(self):
        self.check(torch.float64, "f64", F64_BOUND)

    def test_pytorch_f32_forward_backward_within_the_f32_budget(self):
        self.assertLess(F32_BOUND, F32_BUDGET)
        self.check(torch.float32, "f32", F32_BOUND)

    def test_the_tied_gradient_is_the_sum_of_both_uses(self):
        # The LM head's share alone (#1) and the sum differ by the embedding's scatter-add, far
        # more than the bound: a sum that dropped either use would fail the check above.
        record = torch_steps(self.model, self.ids, self.labels, 1, 0.5, ())[0]
        total = self.goldens.get("s1/c1/grad(embed.weight)")
        head = self.goldens.get("s1/c1/grad(embed.weight)#1")
        self.assertLessEqual(normwise(record["grad(embed.weight)"], total), F64_BOUND)
        self.assertGreater(normwise(record["grad(embed.weight)#1"], total), 1e-3)
        embedding_share = torch.from_numpy(total - head)
        self.assertGreater(float(embedding_share.abs().max()), 1e-3)
        # Rows of ids never looked up get only the head's share.
        unused = sorted(set(range(VOCAB)) - set(self.ids.flatten().tolist()))
        self.assertTrue((embedding_share[unused] == 0).all())


class SwiGLUBlock(unittest.TestCase):
    """LmHead with shardsim.modules.SwiGLU and a residual between the embedding and the norm:
    the MLP captured as linear, linear, swiglu, linear, gate and up ColwiseParallel, down
    RowwiseParallel; one SGD step."""

    def test_swiglu_block_within_8_epsilons(self):
        torch.manual_seed(11)
        model = LmHead(mlp=sm.SwiGLU(HIDDEN, 24))
        ids, labels = example(7)
        plan = {"embed": "RowwiseParallel", "lm_head": "ColwiseParallel",
                "mlp.gate": "ColwiseParallel", "mlp.up": "ColwiseParallel",
                "mlp.down": "RowwiseParallel"}
        with tempfile.TemporaryDirectory() as tmp:
            scenario = sc.capture(model, ids, mesh={"tp": 2}, plan=plan,
                                  out=os.path.join(tmp, "c"), loss=sc.CrossEntropyLoss(labels),
                                  train_steps=1, lr=0.5)
            with open(scenario) as f:
                text = f.read()
            g = replay(scenario, os.path.join(tmp, "g"))
        ops = [line[len('op = "'):-1] for line in text.splitlines() if line.startswith("op = ")]
        self.assertEqual(ops[ops.index("swiglu") - 2:ops.index("swiglu") + 2],
                         ["linear", "linear", "swiglu", "linear"])
        self.assertIn('op = "swiglu"\ninput = "mlp.gate"\nup = "mlp.up"\noutput = "mlp.swiglu"',
                      text)
        record = torch_steps(model, ids, labels, 1, 0.5, ("mlp.gate", "mlp.up", "mlp.down"))[0]
        for name, value in record.items():
            err = normwise(value, g.get(f"s1/c1/{name}"))
            with self.subTest(tensor=name):
                self.assertLessEqual(err, F64_BOUND, f"s1/c1/{name}: {err:.3g}")
        # 3 module outputs, the loss, grad(lm_head), #1; 5 parameters: gradient and update.
        self.assertEqual(len(record), 6 + 2 * 5)


class Errors(unittest.TestCase):
    def refused(self, message, model=None, plan=None, loss=None, ids=None):
        torch.manual_seed(1)
        default_ids, labels = example(3)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "c")
            with self.assertRaisesRegex(sc.CaptureError, message):
                sc.capture(model or LmHead(), default_ids if ids is None else ids,
                           mesh={"tp": 2}, plan=plan or {}, out=out,
                           loss=loss or sc.CrossEntropyLoss(labels))
            self.assertFalse(os.path.exists(out))  # nothing written

    def test_float_labels_are_refused(self):
        _, labels = example(3)
        self.refused(r"^CrossEntropyLoss labels are \(2, 6\) torch.float32; labels are class "
                     r"indices, a torch.int64 tensor", loss=sc.CrossEntropyLoss(labels.float()))

    def test_labels_outside_the_vocabulary_are_named(self):
        _, labels = example(3)
        labels[1, 2] = VOCAB
        self.refused(r"^CrossEntropyLoss labels: element \[1, 2\] is 97: a label is a class in "
                     r"\[0, 97\) or ignore_index \(-100\)", loss=sc.CrossEntropyLoss(labels))

    def test_a_tie_planned_on_one_side_only(self):
        self.refused(r"^parameter 'embed.weight' is shared by 'lm_head', which needs it "
                     r"Replicate, not Shard\(vocab\) \(a tied embedding and LM head",
                     plan={"embed": "RowwiseParallel"})

    def test_colwise_embedding_is_not_modelled(self):
        self.refused(r"^plan\['embed'\] = ColwiseParallel, but 'embed' is Embedding \(styles "
                     r"for it: RowwiseParallel\)", plan={"embed": "ColwiseParallel"})

    def test_silu_outside_a_swiglu_product(self):
        class Gelu2Silu(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed, self.act = nn.Embedding(VOCAB, HIDDEN), nn.SiLU()
                self.head = nn.Linear(HIDDEN, VOCAB)

            def forward(self, ids):
                return self.head(self.act(self.embed(ids)))
        self.refused(r"^silu \(module 'act'\) feeds module 'head': shardsim maps silu only as "
                     r"SwiGLU's gate", model=Gelu2Silu())

    def test_float_ids_and_padding_idx(self):
        self.refused(r"^example input 0 is \(2, 6\) torch.float32; inputs are \(batch, seq, "
                     r"hidden\) floating tensors .* or \(batch, seq\) torch.int64 token ids",
                     ids=torch.zeros(2, 6))
        model = LmHead()
        model.embed.padding_idx = 0
        self.refused(r"^Embedding 'embed' has padding_idx=0; shardsim's embedding is "
                     r"nn.Embedding's plain lookup", model=model)


if __name__ == "__main__":
    unittest.main()
