#!/usr/bin/env bash
# launch.sh: one process per GPU on this host, for machines without MPI or Slurm.
#
#   scripts/run/launch.sh -n N [--logs DIR] [--] ./train_gpt2cu ARGS...
#
# Starts N copies of the command with LLMC_RANK=r, LLMC_WORLD_SIZE=N, LLMC_LOCAL_RANK=r (the
# trainer uses GPU r), LLMC_MASTER_ADDR=127.0.0.1 and a LLMC_MASTER_PORT picked at random in
# 20000-39999 unless already set (the trainer's bootstrap; llmc/dist_env.h), and
# NCCL_NVLS_ENABLE=0 unless already set. Rank 0's output goes to this terminal; rank r's
# (stdout and stderr) to DIR/rank_r.log (default: a new directory under ${TMPDIR:-/tmp}, named
# on stderr). When a rank exits with a non-zero code the others are killed (TERM, then KILL
# after 10 s), the last lines of its log are shown, and launch.sh exits with that code: a
# failure never leaves the others waiting on a collective. SIGINT/SIGTERM are forwarded to every
# rank (the trainer then stops after the step and checkpoints); ranks still running
# LLMC_LAUNCH_GRACE seconds (default 300) after that are killed. Exit code: 0 when every rank
# succeeded, else the first failing rank's code (2 for a usage error here).
set -uo pipefail

n="" logs=""
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
while [ $# -gt 0 ]; do
    case $1 in
        -n) n=${2:-}; shift 2 ;;
        --logs) logs=${2:-}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        -*) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: -n needs the number of processes (GPUs), e.g. scripts/run/launch.sh -n 2 ./train_gpt2cu ..." >&2
    exit 2
fi
if [ $# -eq 0 ]; then
    echo "error: no command to launch: scripts/run/launch.sh -n $n ./train_gpt2cu ARGS..." >&2
    exit 2
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ -z "${CUDA_VISIBLE_DEVICES:-}" ] && [ "$gpus" -gt 0 ] && [ "$n" -gt "$gpus" ]; then
        echo "error: -n $n asks for more processes than the $gpus GPUs nvidia-smi lists on this host" >&2
        exit 2
    fi
fi
if [ -z "$logs" ]; then
    logs=$(mktemp -d "${TMPDIR:-/tmp}/llmc_launch.XXXXXX") || exit 1
fi
mkdir -p "$logs" || { echo "error: cannot create the log directory $logs" >&2; exit 1; }
[ "$n" -gt 1 ] && echo "launch: $n ranks; logs of ranks 1..$((n - 1)) in $logs/rank_R.log" >&2

export LLMC_WORLD_SIZE=$n
export LLMC_MASTER_ADDR=${LLMC_MASTER_ADDR:-127.0.0.1}
export LLMC_MASTER_PORT=${LLMC_MASTER_PORT:-$((20000 + RANDOM % 20000))}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

# Job control puts each rank in its own process group: a terminal's Ctrl-C then reaches only
# this script, which forwards it once (a second SIGINT would kill the trainer without its
# checkpoint), and the ranks do not inherit the SIGINT-ignored state of background jobs.
set -m
pids=()
for ((r = 0; r < n; r++)); do
    if [ "$r" = 0 ]; then
        LLMC_RANK=$r LLMC_LOCAL_RANK=$r "$@" &
    else
        LLMC_RANK=$r LLMC_LOCAL_RANK=$r "$@" >"$logs/rank_$r.log" 2>&1 &
    fi
    pids+=($!)
done

forward() {  # forward SIGNAL: to every rank still running
    for p in "${pids[@]}"; do kill -s "$1" "$p" 2>/dev/null; done
}
# A signal asks the ranks to stop after their step (and checkpoint); ranks still running
# LLMC_LAUNCH_GRACE seconds later (default 300) are killed, so a rank stuck in a collective
# cannot outlive the launcher (they run in their own process groups).
grace=${LLMC_LAUNCH_GRACE:-300}
signalled_at=""
on_signal() {
    forward "$1"
    [ -z "$signalled_at" ] && signalled_at=$SECONDS
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

stop_all() {  # TERM every rank left, then KILL after 10 s
    forward TERM
    for _ in $(seq 1 100); do
        local alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && return
        sleep 0.1
    done
    forward KILL
}

# Poll rather than `wait -n -p` (bash 5.1): any bash 4 runs this, and a signal trapped above
# cannot make the loop lose a rank's exit code.
status=0
done_rank=()
for ((r = 0; r < n; r++)); do done_rank+=(0); done
left=$n
while [ "$left" -gt 0 ]; do
    for ((r = 0; r < n; r++)); do
        [ "${done_rank[$r]}" = 1 ] && continue
        kill -0 "${pids[$r]}" 2>/dev/null && continue
        wait "${pids[$r]}"
        rc=$?
        done_rank[$r]=1
        left=$((left - 1))
        if [ "$rc" != 0 ] && [ "$status" = 0 ]; then
            status=$rc
            echo "launch: rank $r exited with code $rc; stopping the other ranks" >&2
            if [ "$r" != 0 ] && [ -f "$logs/rank_$r.log" ]; then
                echo "launch: last lines of $logs/rank_$r.log:" >&2
                tail -n 15 "$logs/rank_$r.log" | sed 's/^/    /' >&2
            fi
            stop_all
        fi
    done
    if [ -n "$signalled_at" ] && [ $((SECONDS - signalled_at)) -gt "$grace" ]; then
        echo "launch: ranks still running $grace s after the stop signal; killing them" >&2
        forward KILL
        signalled_at=""
    fi
    [ "$left" -gt 0 ] && sleep 0.2
done
exit "$status"
