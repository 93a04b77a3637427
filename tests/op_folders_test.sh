#!/usr/bin/env bash
# An op lives in one folder (CMakeLists.txt SHARDSIM_OPS, docs/architecture.md "Adding an op"), and
# configuring the build catches a missed piece:
#   1. the generated op list (BUILD/generated/ops/ops/op_rows.hpp) has one X(name, Type) per row
#      and includes every row's args.hpp, and runner/op_steps.hpp every row's step.hpp;
#   2. in a copy of the tree, a row whose folder lacks step.hpp stops CMake, naming the file;
#   3. in a copy of the tree, an op folder with an args.hpp but no row stops CMake, naming it.
# Usage: tests/op_folders_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build_dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

rows=$(sed -n '/^set(SHARDSIM_OPS/,/)/p' "$source_dir/CMakeLists.txt" | tr ' ()' '\n\n\n' |
       grep -E '^[a-z_0-9]+:[A-Za-z0-9]+:[a-z_0-9]+$')
[[ $(wc -l <<< "$rows") -ge 9 ]] || { echo "SHARDSIM_OPS has fewer than 9 rows: $rows" >&2; exit 1; }
op_rows="$build_dir/generated/ops/ops/op_rows.hpp"
op_steps="$build_dir/generated/runner/runner/op_steps.hpp"
while IFS=: read -r name type folder; do
  grep -qF "X($name, $type)" "$op_rows" || { echo "$op_rows lacks X($name, $type)" >&2; exit 1; }
  grep -qF "#include \"ops/$folder/args.hpp\"" "$op_rows" ||
    { echo "$op_rows does not include ops/$folder/args.hpp" >&2; exit 1; }
  grep -qF "#include \"ops/$folder/step.hpp\"" "$op_steps" ||
    { echo "$op_steps does not include ops/$folder/step.hpp" >&2; exit 1; }
done <<< "$rows"

configure_fails_with() {  # configure the copy in $scratch/tree; expect failure and the message $1
  rm -rf "$scratch/build"
  if cmake -S "$scratch/tree" -B "$scratch/build" > "$scratch/out.txt" 2>&1; then
    echo "configuring succeeded; expected: $1" >&2
    exit 1
  fi
  tr -s ' \n' ' ' < "$scratch/out.txt" | grep -qF "$1" ||
    { echo "expected \"$1\" in:" >&2; cat "$scratch/out.txt" >&2; exit 1; }
}
fresh_copy() {
  rm -rf "$scratch/tree"
  mkdir "$scratch/tree"
  cp "$source_dir/CMakeLists.txt" "$scratch/tree/"
  cp -r "$source_dir/sim" "$scratch/tree/sim"
}

fresh_copy
rm "$scratch/tree/sim/ops/gelu/step.hpp"
configure_fails_with "op 'gelu' (SHARDSIM_OPS): sim/ops/gelu/step.hpp is missing"

fresh_copy
mkdir "$scratch/tree/sim/ops/softmax"
cp "$source_dir/sim/ops/gelu/args.hpp" "$scratch/tree/sim/ops/softmax/args.hpp"
configure_fails_with "sim/ops/softmax/args.hpp: an op folder without a row in SHARDSIM_OPS"
echo "op folders: $(wc -l <<< "$rows") rows generated; a missing step.hpp and a folder without a row stop CMake"
