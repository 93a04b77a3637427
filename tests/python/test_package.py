"""The shardsim package itself (python/shardsim/); ctest python:package.

    PYTHONPATH=python SHARDSIM_BINARY=build/shardsim SHARDSIM_SOURCE_DIR=. \\
        /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python/test_package.py

Each check runs a fresh interpreter, from a temporary working directory, so that nothing this
pytest process has imported (torch, by the capture tests, or the package itself) can hide what
`import X` does on its own.
"""
import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

MODULES = ("shardsim", "shardsim.golden", "shardsim.golden_format", "shardsim.golden_layout",
           "shardsim.golden_manifest", "shardsim.modules", "shardsim.capture",
           "shardsim.capture.plan", "shardsim.capture.tracing", "shardsim.capture.arguments",
           "shardsim.capture.values", "shardsim.capture.ops", "shardsim.capture.losses",
           "shardsim.capture.builder")


def python(code, cwd, pythonpath, *args):
    """/usr/bin/python3 (this interpreter) -c CODE in `cwd`, with PYTHONPATH `pythonpath` only."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, *args, "-c", code] if code else [sys.executable, *args],
                          cwd=cwd, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def package_root(source_dir):
    return pathlib.Path(source_dir, "python")


def test_import_from_another_directory_loads_neither_torch_nor_numpy(tmp_path, package_root):
    # `import shardsim` is the light one: the golden names load shardsim.golden (and numpy) on
    # first use, and only shardsim.capture and shardsim.modules import torch.
    code = ("import sys, shardsim\n"
            "print(shardsim.__file__)\n"
            "print(sorted(m for m in ('torch', 'numpy', 'shardsim.golden') if m in sys.modules))\n"
            "shardsim.load\n"
            "print(sorted(m for m in ('torch', 'numpy', 'shardsim.golden') if m in sys.modules))\n")
    result = python(code, tmp_path, package_root)
    assert result.returncode == 0, result.stderr
    where, before, after = result.stdout.splitlines()
    assert pathlib.Path(where) == package_root / "shardsim" / "__init__.py"
    assert (before, after) == ("[]", "['numpy', 'shardsim.golden']")


def test_the_golden_names_are_the_readers(tmp_path, package_root):
    code = ("import shardsim, shardsim.golden as sg\n"
            "assert all(getattr(shardsim, n) is getattr(sg, n) for n in shardsim.GOLDEN_NAMES)\n"
            "assert set(shardsim.GOLDEN_NAMES) <= set(dir(shardsim))\n"
            "from shardsim import load, assert_close\n"
            "try:\n"
            "    shardsim.no_such_name\n"
            "except AttributeError as e:\n"
            "    print(e)\n")
    result = python(code, tmp_path, package_root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "module 'shardsim' has no attribute 'no_such_name'\n"


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_first_in_a_fresh_interpreter(tmp_path, package_root, module):
    # An import cycle shows as an ImportError (a partly initialized module) when the import
    # starts at the right module; so each module starts one.
    result = python(f"import {module}", tmp_path, package_root)
    assert result.returncode == 0, result.stderr


def imports_of(path, package_root):
    """(module, [(imported module, at module level?)]) of a package file: every `import` and
    `from ... import` naming a shardsim module, relative ones resolved; `from . import x` names
    the submodule x."""
    relative = path.relative_to(package_root).with_suffix("")
    parts = list(relative.parts)
    package = parts[:-1]  # a package's __init__ is the package
    module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    found = []
    tree = ast.parse(path.read_text(), str(path))
    top_level = set(map(id, tree.body))
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{stem}.{a.name}" if not node.module else stem for a in node.names]
        for target in targets:
            if target == "shardsim" or target.startswith("shardsim."):
                found.append((target, id(node) in top_level))
    return module, found


def test_no_import_cycle_and_no_function_level_import(package_root):
    modules = {}
    for path in sorted((package_root / "shardsim").rglob("*.py")):
        module, found = imports_of(path, package_root)
        assert all(at_top for _, at_top in found), f"{path}: an import inside a function: {found}"
        modules[module] = {target for target, _ in found}
    assert set(modules) == set(MODULES)
    for module, targets in modules.items():
        assert targets <= set(modules), f"{module} imports {targets - set(modules)}"
    # Depth-first search; a module met again while on the stack closes a cycle.
    state = {}

    def visit(module, stack):
        state[module] = "open"
        for target in sorted(modules[module]):
            assert state.get(target) != "open", f"import cycle: {' -> '.join(stack + [target])}"
            if target not in state:
                visit(target, stack + [target])
        state[module] = "done"
    for module in sorted(modules):
        if module not in state:
            visit(module, [module])


def test_no_sys_path_manipulation(source_dir):
    # The package is found through PYTHONPATH or an install, never by a file editing sys.path.
    root = pathlib.Path(source_dir)
    files = [*root.glob("python/**/*.py"), *root.glob("examples/*.py"),
             *root.glob("tests/python/*.py"), *root.glob("tools/*.py")]
    assert len(files) > 20
    edited = [str(f) for f in files if re.search(r"sys\.path\.(insert|append)\(", f.read_text())]
    assert edited == []


def test_versions_agree(tmp_path, source_dir, package_root):
    cmake = pathlib.Path(source_dir, "CMakeLists.txt").read_text()
    project = re.search(r"project\(shardsim VERSION (\S+)", cmake).group(1)
    pyproject = re.search(r'(?m)^version = "([^"]+)"',
                          (package_root / "pyproject.toml").read_text())
    result = python("import shardsim; print(shardsim.__version__)", tmp_path, package_root)
    assert (pyproject.group(1), result.stdout.strip()) == (project, project), result.stderr


def test_golden_command_line_without_runpy_warning(tmp_path, package_root):
    # `python3 -m shardsim.golden`: the usage line alone on stderr (runpy warns when the package
    # imports the module it then runs as __main__), exit 2.
    result = python(None, tmp_path, package_root, "-m", "shardsim.golden")
    assert (result.returncode, result.stdout, result.stderr) == (
        2, "", "usage: python3 -m shardsim.golden GOLDEN_DIR\n")


def test_pip_installs_it_offline(tmp_path, package_root):
    # `pip install --no-build-isolation`: Debian's setuptools builds it, nothing is fetched
    # (--no-index). A copy is built: setuptools writes build/ and *.egg-info next to pyproject.
    source = tmp_path / "src"
    shutil.copytree(package_root, source, ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info"))
    target = tmp_path / "target"
    result = python(None, tmp_path, "", "-m", "pip", "install", "--quiet", "--no-build-isolation",
                    "--no-deps", "--no-index", "--no-cache-dir", "--target", str(target),
                    str(source))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (target / "bin" / "shardsim-golden").is_file()
    installed = python("import shardsim.golden as g, shardsim.capture.plan; print(g.__file__)",
                       tmp_path, target)
    assert installed.returncode == 0, installed.stderr
    assert pathlib.Path(installed.stdout.strip()) == target / "shardsim" / "golden.py"
