#!/usr/bin/python3
"""Checks that every #include in sim/ and include/ follows the layering of CMakeLists.txt.

The layers are SHARDSIM_LAYERS in CMakeLists.txt, bottom to top (docs/architecture.md). A file
in sim/<layer>/ may include "<seen>/file.hpp" for its own layer and the layers before it in that
list (in an op's folder sim/ops/<op>/, entry.cpp is the scenario layer's and step.hpp the
runner's); the function lab (sim/lab) sees core and itself, the mpi transport (sim/transport) core
and itself, the CLI (sim/cli) everything. The headers CMake generates count as present. include/shardsim/ (the public API) may include any layer.
No include climbs with "../" or names a file that does not exist. The build enforces most of this
by each layer's include path (CMakeLists.txt); this check also covers headers that only a higher
layer's sources include, which the compiler sees under that higher layer's path.

Usage: tools/check_layers.py SOURCE_DIR   (prints one line per violation; exit 1 if any)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+(["<])([^">]+)[">]')


def layers_of(cmake_text):
    match = re.search(r"set\(SHARDSIM_LAYERS ([a-z_ ]+)\)", cmake_text)
    if not match:
        sys.exit("check_layers: no set(SHARDSIM_LAYERS ...) in CMakeLists.txt")
    return match.group(1).split()


def visible_from(layers):
    """folder -> the set of folders its files may include."""
    visible = {}
    for i, layer in enumerate(layers):
        visible[layer] = set(layers[: i + 1])
    visible["lab"] = {"core", "lab"}
    visible["transport"] = {"core", "transport"}
    visible["cli"] = set(layers) | {"lab", "transport", "cli"}
    return visible


# An op's folder sim/ops/<op>/ holds files of three layers (CMakeLists.txt SHARDSIM_OPS): its
# scenario entry is compiled into the scenario layer and its runner step is the runner's.
OP_FOLDER_FILES = {"entry.cpp": "scenario", "step.hpp": "runner"}


def generated_headers(cmake_text):
    """The headers CMakeLists.txt generates, as included: "<layer>/file"."""
    found = re.findall(r"\$\{generated\}/(\w+)/(\w+)/([\w.]+) CONTENT", cmake_text)
    return {f"{inner}/{name}" for layer, inner, name in found if layer == inner}


def layer_of(rel):
    """The layer of a file under sim/ (rel = "sim/<folder>/...")."""
    parts = rel.split("/")
    if parts[1] == "ops" and len(parts) == 4 and parts[3] in OP_FOLDER_FILES:
        return OP_FOLDER_FILES[parts[3]]
    return parts[1]


def violations(root):
    cmake_text = open(os.path.join(root, "CMakeLists.txt")).read()
    layers = layers_of(cmake_text)
    generated = generated_headers(cmake_text)
    visible = visible_from(layers)
    sim = os.path.join(root, "sim")
    found = []
    for entry in sorted(os.listdir(sim)):
        if not os.path.isdir(os.path.join(sim, entry)):
            found.append(f"sim/{entry}: a file outside every layer's folder")
        elif entry not in visible:
            found.append(f"sim/{entry}/: a folder that is no layer (add it to SHARDSIM_LAYERS)")
    for layer in layers:
        if not os.path.isdir(os.path.join(sim, layer)):
            found.append(f"SHARDSIM_LAYERS names '{layer}', which has no folder sim/{layer}/")
    scanned = [("sim", os.path.join(root, "sim")), ("include", os.path.join(root, "include"))]
    for kind, top in scanned:
        for directory, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp")):
                    continue
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, root)
                folder = layer_of(rel) if kind == "sim" else "include"
                allowed = visible.get(folder, set()) if kind == "sim" else set(layers)
                for number, line in enumerate(open(path, encoding="utf-8"), 1):
                    match = INCLUDE.match(line)
                    if not match:
                        continue
                    quoted, target = match.group(1) == '"', match.group(2)
                    where = f"{rel}:{number}"
                    head = target.split("/")[0]
                    if not quoted:
                        # <...> is for system and third-party headers; one of ours is a back
                        # edge the same way when it names a layer's folder.
                        if head in visible and os.path.isdir(os.path.join(sim, head)):
                            found.append(f'{where}: <{target}>: include shardsim\'s headers '
                                         f'as "<layer>/file"')
                        continue
                    if os.path.exists(os.path.join(directory, target)):
                        found.append(f'{where}: "{target}" also resolves beside the including '
                                     f"file ({os.path.relpath(directory, root)}/{target}), "
                                     "which shadows the layer's header")
                    elif ".." in target.split("/"):
                        found.append(f'{where}: "{target}" climbs with ../')
                    elif head not in visible:
                        found.append(f'{where}: "{target}" is not spelled "<layer>/file"')
                    elif head not in allowed:
                        found.append(f'{where}: "{target}": {folder} may not include {head} '
                                     f"(a back edge; CMakeLists.txt SHARDSIM_LAYERS)")
                    elif not os.path.isfile(os.path.join(sim, target)) and target not in generated:
                        found.append(f'{where}: "{target}" does not exist')
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tools/check_layers.py SOURCE_DIR")
    found = violations(sys.argv[1])
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
