"""shardsim's Python package: read its golden tensors, capture PyTorch models as scenarios.

    import shardsim
    g = shardsim.load("goldens/")           # a directory written by `shardsim run --golden`
    shardsim.assert_close(my_y, g.get("s1/c1/y", "f32"), max_ulp=4)

Modules (docs/python.md):
  shardsim.golden    the golden reader and the comparison helpers (numpy only); its names are
                     also this package's (load, Goldens, GoldenTensor, GoldenFormatError,
                     read_safetensors, read_npy, ulp_distance, relative_error, compare,
                     assert_close). `python3 -m shardsim.golden DIR` lists a golden directory.
  shardsim.capture   a PyTorch model and a DTensor-style plan as a scenario (needs torch)
  shardsim.modules   PyTorch modules with exactly shardsim's op semantics (needs torch)

Importing shardsim imports nothing but this file: the golden names load shardsim.golden (and
numpy) on first use, and torch is imported only by shardsim.capture and shardsim.modules. So
`import shardsim` works without torch, and `python3 -m shardsim.golden` runs the module once
(runpy warns when the package has already imported the module it is asked to run).
"""
import importlib

__version__ = "0.1.0"  # CMakeLists.txt project(VERSION); python/pyproject.toml's version

GOLDEN_NAMES = ("load", "Goldens", "GoldenTensor", "GoldenFormatError", "read_safetensors",
                "read_npy", "ulp_distance", "relative_error", "compare", "assert_close")

__all__ = ["__version__", *GOLDEN_NAMES]


def __getattr__(name):
    """PEP 562: a golden name is shardsim.golden's, imported on first use."""
    if name in GOLDEN_NAMES:
        return getattr(importlib.import_module(".golden", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(GOLDEN_NAMES))
