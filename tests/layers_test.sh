#!/usr/bin/env bash
# The layering is enforced (CMakeLists.txt SHARDSIM_LAYERS, docs/architecture.md):
#   1. tools/check_layers.py passes on the tree, and fails on a copy of it with one back edge
#      (core including a runner header), naming the file and line;
#   2. the compiler, given core's include path (BUILD/layers/core), cannot find a runner header
#      and can find a core one: a core source with that back edge fails to build;
#   3. every layer source compiles with only layer link folders on its include path
#      (BUILD/compile_commands.json): nothing puts sim/ or include/ itself there.
# Usage: tests/layers_test.sh SOURCE_DIR BUILD_DIR CXX
set -euo pipefail
source_dir=$1 build_dir=$2 cxx=$3
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

/usr/bin/python3 "$source_dir/tools/check_layers.py" "$source_dir"

cp "$source_dir/CMakeLists.txt" "$scratch/"
cp -r "$source_dir/sim" "$scratch/sim"
echo '#include "runner/runner.hpp"' >> "$scratch/sim/core/shape.hpp"
if /usr/bin/python3 "$source_dir/tools/check_layers.py" "$scratch" > "$scratch/out.txt"; then
  echo "check_layers.py accepted core including runner/runner.hpp" >&2
  exit 1
fi
grep -q '^sim/core/shape.hpp:[0-9]*: "runner/runner.hpp": core may not include runner' \
  "$scratch/out.txt" || { echo "unexpected check_layers.py output:" >&2; cat "$scratch/out.txt" >&2; exit 1; }

compile() {  # compile one line of C++ with core's include path
  echo "$1" | "$cxx" -std=c++20 -fsyntax-only -I "$build_dir/layers/core" -x c++ - 2>&1
}
if out=$(compile '#include "runner/runner.hpp"'); then
  echo "a core source compiled with #include \"runner/runner.hpp\"" >&2
  exit 1
fi
# GCC: "runner/runner.hpp: No such file"; clang: "'runner/runner.hpp' file not found".
grep -Eq "runner/runner.hpp(: No such file|' file not found)" <<< "$out" || { echo "$out" >&2; exit 1; }
compile '#include "core/shape.hpp"' >/dev/null

/usr/bin/python3 - "$source_dir" "$build_dir" <<'PY'
import json, os, shlex, sys
source, build = (os.path.realpath(p) for p in sys.argv[1:3])
layers_root = os.path.join(build, "layers")
checked = 0
for command in json.load(open(os.path.join(build, "compile_commands.json"))):
    path = os.path.realpath(os.path.join(command["directory"], command["file"]))
    rel = os.path.relpath(path, source)
    in_layer = rel.startswith("sim/") and rel.split("/")[1] not in ("cli", "transport")
    if not (in_layer or path.startswith(os.path.join(build, "generated", "instantiations") + os.sep)):
        continue
    words = shlex.split(command["command"])
    dirs = [w[2:] or words[i + 1] for i, w in enumerate(words) if w.startswith("-I")]
    dirs += [words[i + 1] for i, w in enumerate(words) if w == "-isystem"]
    for d in dirs:
        real = os.path.normpath(os.path.join(command["directory"], d))
        allowed = (layers_root + os.sep, os.path.join(build, "generated") + os.sep)
        if real.startswith(source) and not real.startswith(allowed):
            sys.exit(f"{rel} compiles with -I {d}: only {layers_root}/<layer> and generated "
                     "headers belong there")
    checked += 1
if checked < 50:
    sys.exit(f"only {checked} layer sources in compile_commands.json")
print(f"layers: {checked} layer sources compile with layer include paths only")
PY
echo "layers: the check and the core include path both refuse core -> runner"
