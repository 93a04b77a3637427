#!/usr/bin/env bash
# The mpi transport's end-to-end tests (ctest mpi:*), on localhost through tools/mpirun.
# Usage: tests/mpi/mpi_test.sh SHARDSIM_BINARY CHECK [ARGS]
#   identity NP            every bundled scenario with at least max(2, NP) ranks: reports and
#                          goldens under -np NP hash to tests/data/bundled_digests.txt (the
#                          single-process digests; tools/digests --launch drops the report's
#                          "transport" line, the one key the mpi transport adds)
#   same NP SCENARIO ARGS  one scenario, local against -np NP: report (minus "transport"), golden
#                          set and stdout byte-identical, nothing on stderr
#   errors                 more processes than ranks, a rendezvous mismatch between processes,
#                          --transport local under mpirun: exit 2 and a message on every process
#   killed                 a process killed mid-run, and one that hangs: the job ends within 30 s
#                          with a clear message, no report and no golden directory
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(realpath "$1"); check=$2; shift 2
cd "$root"
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
mpirun=("$root/tools/mpirun")
fail() { echo "mpi_test $check: FAIL: $*" >&2; exit 1; }
ranks_of() { "$bin" validate "$1" | sed -n 's/.*, \([0-9][0-9]*\) ranks.*/\1/p'; }
golden_sum() { (cd "$1" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1); }

case $check in
  identity)
    np=$1; need=$(( np > 2 ? np : 2 )); chosen=()
    while read -r s; do
      [[ $(ranks_of "$s") -ge $need ]] && chosen+=("$s")
    done < <(find scenarios -name '*.toml' | LC_ALL=C sort)
    echo "mpi_test identity: ${#chosen[@]} scenarios with >= $need ranks under -np $np"
    tools/digests "$bin" --launch "tools/mpirun -np $np" --check tests/data/bundled_digests.txt \
      "${chosen[@]}" ;;
  same)
    np=$1; scenario=$2; shift 2
    "$bin" run "$scenario" "$@" --report "$scratch/local.json" --golden "$scratch/local" \
      > "$scratch/local.out" 2> "$scratch/local.err" || true
    status=0
    "${mpirun[@]}" -np "$np" "$bin" run "$scenario" "$@" --report "$scratch/mpi.json" \
      --golden "$scratch/mpi" > "$scratch/mpi.out" 2> "$scratch/mpi.err" || status=$?
    [[ $status -eq 0 ]] || { cat "$scratch/mpi.err" >&2; fail "-np $np exited $status"; }
    [[ -s "$scratch/mpi.err" ]] && { cat "$scratch/mpi.err" >&2; fail "stderr is not empty"; }
    grep -q '^  "transport": "mpi: '"$np"' processes' "$scratch/mpi.json" || fail "no transport line"
    sed -i '2{/^  "transport": /d}' "$scratch/mpi.json"
    cmp "$scratch/local.json" "$scratch/mpi.json" || fail "reports differ"
    [[ $(golden_sum "$scratch/local") == $(golden_sum "$scratch/mpi") ]] || fail "goldens differ"
    sed -i "s#$scratch/mpi#$scratch/local#g" "$scratch/mpi.out"
    cmp "$scratch/local.out" "$scratch/mpi.out" || fail "stdout differs"
    echo "mpi_test same: $scenario -np $np: report, goldens and stdout identical" ;;
  *) source "$root/tests/mpi/mpi_faults.sh" ;;
esac
