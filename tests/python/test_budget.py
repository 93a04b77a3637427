"""The error-budget worked example (examples/bf16_layernorm_example.py, docs/goldens.md, "Error
budgets"); ctest python:budget: a bf16 LayerNorm from another backend, run on the BF16 golden
inputs of scenarios/layernorm_small_activations.toml, is judged noise by `shardsim compare
--precision bf16`; the same with eps 1e-6 instead of the scenario's 1e-5 is judged bug.

    PYTHONPATH=python SHARDSIM_BINARY=build/shardsim SHARDSIM_SOURCE_DIR=. \
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_budget.py

The backends: PyTorch's own bf16 kernel (torch.nn.functional.layer_norm) where Debian's
python3-torch is installed (tools/bootstrap --torch), and always numpy emulating autocast's bf16
rounding (f32 statistics, the output rounded once to bf16).

Why the wrong eps must be a bug here: var(x) ~ 1e-4 (std 0.01), so eps 1e-6 instead of 1e-5
scales rstd by sqrt((1e-4 + 1e-5) / (1e-4 + 1e-6)) ~ 1.044, moving y - bias by ~4.4% of |y -
bias|: about 6 bf16 units (2^-8 relative) at the largest elements, several times the
allowance of 2 * budget + 2^-7 normwise. And why the same wrong eps on x of std 2
(layernorm_sequence_sharded.toml) must be noise: there it moves rstd by 9e-6 / 4 / 2 ~ 1.1e-6
relative, thousands of times below a bf16 unit: no bf16 program can tell the two apart.
"""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import pytest

import shardsim.golden as sg

# conftest.py checks that ctest's environment names both (tests/CMakeLists.txt).
SHARDSIM, SOURCE = os.environ["SHARDSIM_BINARY"], os.environ["SHARDSIM_SOURCE_DIR"]
# Run in a child (PYTHONPATH, from ctest, is inherited: it imports shardsim as it is here).
TOOL = os.path.join(SOURCE, "examples", "bf16_layernorm_example.py")
try:
    import torch  # noqa: F401
    BACKENDS = ("torch", "numpy")
except ImportError:
    BACKENDS = ("numpy",)


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


class WorkedExample(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def example_module(self, example):
        """examples/bf16_layernorm_example.py as a module (conftest.py's example fixture)."""
        self.example = example("bf16_layernorm_example")

    def goldens(self, scenario):
        directory = os.path.join(self.tmp.name, os.path.basename(scenario) + ".g")
        result = run([SHARDSIM, "run", "--quiet", os.path.join(SOURCE, "scenarios", scenario),
                      "--golden", directory, "--dtype", "bf16"])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return directory

    def judge(self, golden, backend, eps=None):
        out = os.path.join(self.tmp.name, f"{backend}-{eps}.safetensors")
        args = [sys.executable, TOOL, golden, out, "--backend", backend]
        made = run(args + (["--eps", str(eps)] if eps is not None else []))
        self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
        return run([SHARDSIM, "compare", golden, out, "--precision", "bf16"])

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_right_eps_is_noise_and_wrong_eps_is_a_bug(self):
        golden = self.goldens("layernorm_small_activations.toml")
        # The Python reader exposes the budgets: an input's is 0 (every program stores it
        # rounded once, as the golden is), y's is not.
        g = sg.load(golden)
        self.assertEqual(g.tensor("bf16/inputs/x").budget, {"normwise": 0.0, "ulp": 0})
        self.assertGreater(g.tensor("bf16/s1/c1/y").budget["normwise"], 0)
        for backend in BACKENDS:
            with self.subTest(backend=backend):
                right = self.judge(golden, backend)
                self.assertEqual(right.returncode, 0, right.stdout + right.stderr)
                self.assertIn("noise bf16/s1/c1/y ", right.stdout)
                self.assertIn("1 noise, 0 bug", right.stdout)
                wrong = self.judge(golden, backend, eps=1e-6)
                self.assertEqual(wrong.returncode, 1, wrong.stdout + wrong.stderr)
                self.assertIn("bug   bf16/s1/c1/y ", wrong.stdout)
                self.assertIn("OUTSIDE", wrong.stdout)

    def test_the_same_wrong_eps_is_noise_on_unit_scale_data(self):
        golden = self.goldens("layernorm_sequence_sharded.toml")
        for backend in BACKENDS:
            with self.subTest(backend=backend):
                wrong = self.judge(golden, backend, eps=1e-6)
                self.assertEqual(wrong.returncode, 0, wrong.stdout + wrong.stderr)
                self.assertIn("1 noise, 0 bug", wrong.stdout)

    def test_numpy_emulation_rounds_like_shardsim(self):
        """round_to_bf16_bits against hand-derived bit patterns: ties to even, overflow, NaN."""
        ex = self.example
        values = np.array([1.0, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20,
                           3.4e38, float("nan"), -0.0], dtype=np.float32)
        # 1 = 0x3f80; 1 + 2^-8 is the tie between 0x3f80 and 0x3f81: even 0x3f80; 1 + 3 * 2^-8
        # ties 0x3f81/0x3f82: even 0x3f82; a hair above the first tie rounds up to 0x3f81;
        # 3.4e38 lies above the largest bf16 (0x1.fep127) plus half a unit (0x1.ffp127, about
        # 3.3962e38): inf 0x7f80; NaN stays a quiet NaN; -0 keeps its sign, 0x8000.
        bits = ex.round_to_bf16_bits(values)
        self.assertEqual([hex(b) for b in bits[[0, 1, 2, 3, 4, 6]]],
                         ["0x3f80", "0x3f80", "0x3f82", "0x3f81", "0x7f80", "0x8000"])
        self.assertTrue(np.isnan(ex.bf16_values(bits[5:6]))[0])
