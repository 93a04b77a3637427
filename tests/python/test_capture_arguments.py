"""capture()'s arguments, each refused alone with a CaptureError naming it and nothing written
(shardsim.capture.arguments): the rules `shardsim run` applies to the scenario they would
become. Run with tests/python/test_capture.py (ctest python:capture).
"""
import os
import sys
import tempfile
import unittest

import pytest

try:
    import torch
except ImportError:
    raise ImportError(f"{sys.executable} has no torch: install python3-torch (tools/bootstrap "
                      f"--torch)") from None

import shardsim.capture as sc

PLAN = {"ln1": "SequenceParallel", "fc1": "ColwiseParallel", "fc2": "RowwiseParallel"}


class ArgumentErrors(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def example_block(self, example):
        """examples/capture_example.py's Block (conftest.py's example fixture)."""
        self.Block = example("capture_example").Block

    def capture(self, **changed):
        """examples/capture_example.py's Block and arguments, with `changed` in place."""
        torch.manual_seed(18)
        model = changed.pop("model", self.Block())
        x, target = torch.randn(2, 13, 16), torch.randn(2, 13, 16)
        args = dict(mesh={"tp": 4}, plan=PLAN, loss=sc.MSELoss(target), train_steps=2, lr=0.1)
        args.update(changed)
        with tempfile.TemporaryDirectory() as tmp:
            out = args.pop("out", os.path.join(tmp, "c"))
            sc.capture(model, args.pop("x", x), out=out, **args)

    def refused(self, message, **changed):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "c")
            with self.assertRaisesRegex(sc.CaptureError, message):
                self.capture(out=out, **changed)
            self.assertFalse(os.path.exists(out))  # nothing written

    def test_the_example_arguments_are_accepted(self):
        self.capture()  # so each refusal below is its one changed argument's

    def test_each_argument_shardsim_would_refuse(self):
        weights = self.Block()
        with torch.no_grad():
            weights.fc1.weight[0, 0] = float("inf")
        x = torch.randn(2, 13, 16)
        x[1, 2, 3] = float("nan")
        cases = [
            (dict(train_steps=1.5), r"^train_steps=1\.5: expected an integer in \[1, 100000\]"),
            (dict(train_steps=True), r"^train_steps=True: expected an integer"),
            (dict(train_steps=0), r"^train_steps=0: out of range"),
            (dict(train_steps=None), r"^lr=0\.1 without train_steps"),
            (dict(lr=-0.1), r"^lr=-0\.1: the learning rate must be a number > 0"),
            (dict(lr=float("nan")), r"^lr=nan: the learning rate"),
            (dict(loss=None, train_steps=None, lr=None, stream=[13, 0]), r"^stream\[1\]=0: out"),
            (dict(precisions=("f33",)), r"^precisions\[0\]='f33': expected bf16, f16"),
            (dict(precisions=("f64", "f64")), r"^precisions\[1\]='f64': .* listed twice"),
            (dict(precisions=()), r"^precisions=\(\): expected a non-empty list"),
            (dict(seed=-1), r"^seed=-1: out of range"),
            (dict(seed=2**70), r"^seed=1180591620717411303424: out of range"),
            (dict(name="a\x1bb"), r"^name='a\\x1bb': .* without control characters"),
            (dict(name="a\u202eb"), r"^name='a\\u202eb': .* without control characters"),
            (dict(x=x), r"^model input 'x': element \[1, 2, 3\] is nan; .* must be finite"),
            (dict(model=weights), r"^parameter 'fc1.weight': element \[0, 0\] is inf"),
            (dict(loss=sc.MSELoss(torch.randn(2, 13, 16), [14, 3])),
             r"^MSELoss valid_lengths=\[14, 3\]: each length must be in \[0, 13\]"),
            (dict(loss=sc.MSELoss(torch.randn(2, 13, 16), [3])),
             r"^MSELoss valid_lengths=\[3\]: needs one length per batch element \(2\), got 1"),
            (dict(x=torch.ones(2, 13, 16, dtype=torch.int64)),
             r"^example input 0 is \(2, 13, 16\) torch.int64; inputs are \(batch, seq, hidden\)"),
            (dict(x=torch.randn(2, 13, 15)), r"^module 'ln1' \(LayerNorm\) fails on the example "
                                             r"inputs: RuntimeError: Given normalized_shape"),
            (dict(mesh={"t p": 4}, plan={}), r"^mesh dim name 't p': a dim name"),
        ]
        for changed, message in cases:
            with self.subTest(changed=", ".join(changed), message=message):
                self.refused(message, **changed)

    def test_valid_lengths_are_integers(self):  # never truncated (1.5 was written as 1)
        with self.assertRaisesRegex(sc.CaptureError, r"^MSELoss valid_lengths=\[1\.5, 2\]: "
                                                     r"expected a list of integers"):
            sc.MSELoss(torch.randn(2, 13, 16), [1.5, 2])

    def test_out_must_be_a_directory(self):
        with tempfile.NamedTemporaryFile() as f:
            with self.assertRaisesRegex(sc.CaptureError, r"^out='.*' exists and is not a "
                                                         r"directory"):
                self.capture(out=f.name)
