#!/usr/bin/env bash
# The mpi transport's end-to-end tests (ctest mpi:*), on localhost through tools/mpirun.
# Usage: tests/mpi/mpi_test.sh SHARDSIM_BINARY CHECK [ARGS]
#   identity NP            every bundled scenario with at least max(2, NP) ranks: reports and
#                          goldens under -np NP hash to tests/data/bundled_digests.txt (the
#                          single-process digests; tools/digests --launch drops the report's
#                          "transport" line, the one key the mpi transport adds)
#   same NP SCENARIO ARGS  one scenario, local against -np NP: report (minus "transport"), golden
#                          set and stdout byte-identical, nothing on stderr
#   distributed NP [SCENARIO...]
#                          --oracle distributed: every bundled scenario (or those named) with at least NP ranks
#                          and NP batch rows that the local run accepts (exit 0 or 1) gives, under
#                          -np NP, the local report (minus "transport") and stdout
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
  distributed)
    np=$1; shift; ran=0; refused=0
    if [[ $# -gt 0 ]]; then list=("$@"); else mapfile -t list < <(find scenarios tests/mpi -name '*.toml' ! -name 'bench_*' | LC_ALL=C sort); fi
    for s in "${list[@]}"; do
      [[ $(ranks_of "$s") -ge $np ]] || continue
      status=0
      "$bin" run "$s" --oracle distributed --report "$scratch/local.json" > "$scratch/local.out" \
        2> "$scratch/local.err" < /dev/null || status=$?
      if [[ $status -eq 2 ]]; then
        grep -q -- "--oracle distributed" "$scratch/local.err" || { cat "$scratch/local.err" >&2; fail "$s: exit 2 for another reason"; }
        refused=$((refused + 1)); continue  # the errors check covers a refusal under mpirun
      fi
      mstatus=0
      "${mpirun[@]}" -np "$np" "$bin" run "$s" --oracle distributed --report "$scratch/mpi.json" \
        > "$scratch/mpi.out" 2> "$scratch/mpi.err" < /dev/null || mstatus=$?
      if [[ $mstatus -eq 2 ]] && grep -q "processes for [0-9]* 'batch' rows" "$scratch/mpi.err"; then
        refused=$((refused + 1)); rm -f "$scratch/local.json"; continue  # fewer rows than processes
      fi
      [[ $mstatus -eq $status ]] || { cat "$scratch/mpi.err" >&2; fail "$s: local exit $status, -np $np exit $mstatus"; }
      [[ -s "$scratch/mpi.err" ]] && { cat "$scratch/mpi.err" >&2; fail "$s: stderr is not empty"; }
      grep -q '^  "transport": "mpi: '"$np"' processes.*dense oracle in row blocks of batch' \
        "$scratch/mpi.json" || fail "$s: no distributed transport line"
      sed -i '2{/^  "transport": /d}' "$scratch/mpi.json"
      cmp "$scratch/local.json" "$scratch/mpi.json" || fail "$s: reports differ"
      sed -i "s#$scratch/mpi#$scratch/local#g" "$scratch/mpi.out"
      cmp "$scratch/local.out" "$scratch/mpi.out" || fail "$s: stdout differs"
      rm -f "$scratch/local.json" "$scratch/mpi.json"
      ran=$((ran + 1)); echo "  $s"
    done
    [[ $ran -gt 0 ]] || fail "no scenario ran with --oracle distributed"
    echo "mpi_test distributed: $ran scenarios identical under -np $np; $refused refused (exit 2: not row-blockable, or fewer batch rows than processes)" ;;
  *) source "$root/tests/mpi/mpi_faults.sh" ;;
esac
