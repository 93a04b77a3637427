# Sourced by tests/mpi/mpi_test.sh for the checks `errors` and `killed` (see its header); uses
# its bin, scratch, mpirun and fail.

# Runs the mpi command in "$@", recording its exit status, stderr and wall seconds.
run_job() {
  local start=$SECONDS
  status=0
  timeout 60 "${mpirun[@]}" "$@" > "$scratch/out" 2> "$scratch/err" || status=$?
  elapsed=$((SECONDS - start))
}
expect_lines() {  # PATTERN COUNT: COUNT stderr lines match PATTERN
  local n
  n=$(grep -c -- "$1" "$scratch/err" || true)
  [[ $n -eq $2 ]] || { cat "$scratch/err" >&2; fail "$2 lines matching '$1' expected, got $n"; }
}

case $check in
  errors)
    # 3 processes for 2 ranks: every process says so, exit 2.
    run_job -np 3 "$bin" run scenarios/attention_stream_cp2_ring.toml --report "$scratch/r.json"
    [[ $status -eq 2 ]] || { cat "$scratch/err" >&2; fail "P > ranks exited $status, not 2"; }
    for p in 0 1 2; do expect_lines "process $p: 3 processes for a mesh of 2 ranks" 1; done
    [[ -e "$scratch/r.json" ]] && fail "P > ranks wrote a report"
    # Two programs under one mpirun (MPMD): hidden 16 against hidden 8. The first boundary's
    # rendezvous names the ranks on both processes; both exit 2.
    run_job -np 1 "$bin" run tests/mpi/layernorm_train_16ranks.toml --report "$scratch/r.json" \
      : -np 1 "$bin" run tests/mpi/layernorm_train_16ranks_hidden8.toml --report "$scratch/r.json"
    [[ $status -eq 2 ]] || { cat "$scratch/err" >&2; fail "a rendezvous mismatch exited $status"; }
    for p in 0 1; do
      expect_lines "process $p: collective mismatch: rendezvous mismatch: ranks 0,1,2,3,4,5,6,7 called boundary<mp> \[batch=2, seq=37, hidden=16\].* but ranks 8,9,10,11,12,13,14,15 called boundary<mp> \[batch=2, seq=37, hidden=8\]" 1
    done
    [[ -e "$scratch/r.json" ]] && fail "a mismatch wrote a report"
    # --transport local under mpirun -np 2 would run the scenario twice into the same files.
    run_job -np 2 "$bin" run scenarios/attention_stream_cp2_ring.toml --transport local
    [[ $status -eq 2 ]] || { cat "$scratch/err" >&2; fail "--transport local under mpirun exited $status"; }
    expect_lines "error: --transport local under mpirun with 2 processes" 2
    # --oracle distributed: attention training is refused on every process (its weight
    # gradients total every row before they are added); with --golden too; a bad --oracle value.
    run_job -np 2 "$bin" run scenarios/attention_train_sgd_ring.toml --oracle distributed --report "$scratch/r.json"
    [[ $status -eq 2 ]] || { cat "$scratch/err" >&2; fail "--oracle distributed on attention training exited $status"; }
    for p in 0 1; do expect_lines "process $p: scenarios/attention_train_sgd_ring.toml:[0-9:]* steps\[0\] (sliding_window_attention): --oracle distributed: in training, attention's weight gradients" 1; done
    run_job -np 2 "$bin" run tests/mpi/distributed_mlp_sp.toml --oracle distributed --golden "$scratch/g"
    [[ $status -eq 2 ]] || { cat "$scratch/err" >&2; fail "--oracle distributed --golden exited $status"; }
    expect_lines "error: process [01]: --oracle distributed does not write goldens" 2
    run_job -np 2 "$bin" run tests/mpi/distributed_mlp_sp.toml --oracle rows
    [[ $status -eq 2 ]] || { cat "$scratch/err" >&2; fail "--oracle rows exited $status"; }
    expect_lines "error: process [01]: --oracle: expected root or distributed, got 'rows'" 2
    [[ -z "$(ls -A "$scratch" | grep -v '^out$\|^err$')" ]] || { ls -la "$scratch" >&2; fail "a refused run wrote output"; }
    echo "mpi_test errors: ok" ;;
  killed)
    # Process 1 crashes (SIGKILL) at its 30th exchange: mpirun ends the job and says which.
    SHARDSIM_MPI_TEST_FAULT=1:30:KILL run_job -np 2 "$bin" run tests/mpi/layernorm_train_16ranks.toml \
      --report "$scratch/r.json" --golden "$scratch/golden"
    [[ $status -ne 0 && $elapsed -le 30 ]] || fail "a killed process: exit $status after $elapsed s"
    grep -q "signal 9" "$scratch/err" || { cat "$scratch/err" >&2; fail "no message naming the killed process"; }
    [[ -z "$(ls -A "$scratch" | grep -v '^out$\|^err$')" ]] || { ls -la "$scratch" >&2; fail "partial output after a crash"; }
    # Process 1 hangs (SIGSTOP): process 0 gives up after --peer-timeout, exit 4, the job ends.
    SHARDSIM_MPI_TEST_FAULT=1:30:STOP run_job -np 2 "$bin" run tests/mpi/layernorm_train_16ranks.toml \
      --report "$scratch/r.json" --golden "$scratch/golden" --peer-timeout 5
    [[ $status -eq 4 && $elapsed -le 30 ]] || { cat "$scratch/err" >&2; fail "a hung process: exit $status after $elapsed s"; }
    expect_lines "process 0: transport: process 0: no message from processes 1 for 5 s at exchange #30: a process died or hung" 1
    [[ -z "$(ls -A "$scratch" | grep -v '^out$\|^err$')" ]] || { ls -la "$scratch" >&2; fail "partial output after a hang"; }
    echo "mpi_test killed: ok" ;;
  *) echo "mpi_test: unknown check '$check'" >&2; exit 2 ;;
esac
