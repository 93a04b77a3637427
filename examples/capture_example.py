#!/usr/bin/python3
"""The "Bring your own model" example (docs/python.md), runnable: captures a small MLP block
with a sequence- and tensor-parallel plan on 4 ranks.

    PYTHONPATH=python /usr/bin/python3 examples/capture_example.py [OUT]   (default: a temp dir)

writes OUT/scenario.toml and OUT/inputs.safetensors and prints the scenario's path; then
`build/shardsim run OUT/scenario.toml --golden g/`. scenarios/captured_mlp_block/ was written by
this example with OUT scenarios/captured_mlp_block (torch 1.13, Debian's python3-torch).
"""
import sys
import tempfile

import torch
from torch import nn

import shardsim.capture as sc


class Block(nn.Module):
    """LayerNorm -> Linear -> GELU -> Linear -> Dropout(p=0) -> residual, then LayerNorm."""

    def __init__(self, hidden=16, ffn=32):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(ffn, hidden)
        self.drop = nn.Dropout(p=0.0)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x):
        return self.ln2(self.drop(self.fc2(self.act(self.fc1(self.ln1(x))))) + x)


def main(argv):
    out = argv[1] if len(argv) > 1 else tempfile.mkdtemp(prefix="shardsim_capture_")
    torch.manual_seed(18)
    model = Block()
    x, target = torch.randn(2, 13, 16), torch.randn(2, 13, 16)
    print(sc.capture(model, x, mesh={"tp": 4},
                     plan={"ln1": "SequenceParallel", "fc1": "ColwiseParallel",
                           "fc2": "RowwiseParallel", "drop": "SequenceParallel"},
                     out=out, loss=sc.MSELoss(target), train_steps=2, lr=0.1,
                     name="captured_mlp_block"))


if __name__ == "__main__":
    main(sys.argv)
