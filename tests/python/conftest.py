"""pytest set-up for the Python tests (ctest python:*, tests/CMakeLists.txt).

ctest runs, from the build tree,
    /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_X.py
with PYTHONPATH=SOURCE/python (the shardsim package in place), SHARDSIM_BINARY (the shardsim
binary), SHARDSIM_SOURCE_DIR (the source tree: scenarios/, examples/) and
PYTHONDONTWRITEBYTECODE=1, so that nothing is written into the source tree (outputs go to
temporary directories). By hand, from the source tree:
    PYTHONPATH=python SHARDSIM_BINARY=build/shardsim SHARDSIM_SOURCE_DIR=. \\
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python

The unittest-style modules read the two variables when imported (setUpClass takes no
fixtures); pytest_configure checks them first, so a missing one is one clear message.
"""
import importlib.util
import os

import pytest

VARIABLES = ("SHARDSIM_BINARY", "SHARDSIM_SOURCE_DIR")


def pytest_configure(config):
    missing = [name for name in VARIABLES if not os.environ.get(name)]
    if missing:
        raise pytest.UsageError(f"tests/python needs {' and '.join(missing)} in the environment "
                                f"(the shardsim binary, the source tree); ctest sets them")
    if not os.access(os.environ["SHARDSIM_BINARY"], os.X_OK):
        raise pytest.UsageError(f"SHARDSIM_BINARY={os.environ['SHARDSIM_BINARY']}: not an "
                                f"executable file")


@pytest.fixture(scope="session")
def shardsim_binary():
    """The shardsim binary (SHARDSIM_BINARY)."""
    return os.environ["SHARDSIM_BINARY"]


@pytest.fixture(scope="session")
def source_dir():
    """The source tree (SHARDSIM_SOURCE_DIR)."""
    return os.environ["SHARDSIM_SOURCE_DIR"]


def load_example(source, name):
    """examples/NAME.py as a module (loaded by its path: examples/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(source, "examples",
                                                                     name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def example(source_dir):
    """example(NAME): examples/NAME.py as a module, loaded once per session."""
    loaded = {}

    def get(name):
        if name not in loaded:
            loaded[name] = load_example(source_dir, name)
        return loaded[name]
    return get
