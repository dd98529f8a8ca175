#!/usr/bin/env bash
# test_launchers.sh [BIN]: rank discovery and the NCCL-id bootstrap under real launchers, on the
# CPU. BIN (default build/host/dev/test/test_multi_gpu_host) is started as 3 ranks with --launched:
# each finds its rank, world size and local rank from the launcher's environment as the trainer
# does, and receives rank 0's id over the TCP bootstrap. Launchers:
#   mpirun -np 3       OpenMPI's OMPI_COMM_WORLD_* variables (openmpi-bin; SKIP without mpirun)
#   scripts/run/launch.sh  LLMC_RANK / LLMC_WORLD_SIZE / LLMC_LOCAL_RANK (CUDA_VISIBLE_DEVICES set,
#                      so its GPU count check does not apply on a machine without GPUs)
#   srun's variables   SLURM_PROCID / SLURM_STEP_NUM_TASKS / SLURM_LOCALID set by hand per
#                      process (no Slurm here), as srun sets them in a job step
# PASS when every rank prints "id ok" with its own rank; exits 1 on a failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=${1:-build/host/dev/test/test_multi_gpu_host}
[ -x "$BIN" ] || { echo "FAIL: $BIN is not built (make $BIN)"; exit 1; }
ok=0 bad=0
verdict() {  # verdict NAME OUTPUT: every rank 0..2 reported "id ok" with the expected source
    local name=$1 out=$2 good=1
    for r in 0 1 2; do grep -q "^rank $r of 3 (local $r, $3): id ok" <<<"$out" || good=0; done
    if [ "$good" = 1 ]; then echo "ok   $name"; ok=$((ok + 1)); else
        echo "FAIL $name"; sed 's/^/     /' <<<"$out"; bad=$((bad + 1)); fi
}
port() { echo $((20000 + RANDOM % 20000)); }

if command -v mpirun >/dev/null 2>&1; then
    p=$(port)
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LLMC_MASTER_PORT=$p \
        timeout 120 mpirun --oversubscribe -np 3 -x LLMC_MASTER_PORT "$BIN" --launched OpenMPI 2>&1)
    verdict "mpirun -np 3: OpenMPI's variables, TCP bootstrap" "$out" OpenMPI
else
    echo "SKIP mpirun: not installed (Debian: openmpi-bin)"
fi

# launch.sh prints rank 0's output and keeps the others' in --logs.
logs=$(mktemp -d)
out=$(CUDA_VISIBLE_DEVICES=0,1,2 timeout 120 scripts/run/launch.sh -n 3 --logs "$logs" -- \
    "$BIN" --launched LLMC_RANK 2>&1; cat "$logs"/rank_*.log 2>/dev/null)
verdict "scripts/run/launch.sh -n 3: LLMC_* variables, TCP bootstrap" "$out" LLMC_RANK
rm -rf "$logs"

p=$(port)
pids=()
tmp=$(mktemp -d)
for r in 0 1 2; do
    env -u LLMC_RANK SLURM_PROCID=$r SLURM_STEP_NUM_TASKS=3 SLURM_LOCALID=$r MASTER_PORT=$p \
        timeout 120 "$BIN" --launched Slurm >"$tmp/$r.log" 2>&1 &
    pids+=($!)
done
wait "${pids[@]}"
verdict "srun's variables (set by hand): Slurm discovery, MASTER_PORT" "$(cat "$tmp"/*.log)" Slurm
rm -rf "$tmp"

echo "test_launchers: $ok passed, $bad failed"
[ "$bad" = 0 ]
