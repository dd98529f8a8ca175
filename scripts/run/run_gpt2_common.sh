#!/usr/bin/env bash
# run_gpt2_common.sh: the loop the run_gpt2_<size>.sh scripts share (source it, then call
# run_gpt2 with the trainer's options). It starts train_gpt2cu with --resume in the run
# directory, so a first start trains from scratch and every later start continues bit for bit
# from the newest complete checkpoint. After a crash (any exit but 0, or 2 = a bad option) it
# waits RETRY_WAIT seconds (default 30) and starts again; it gives up after MAX_RETRIES (default
# 5) starts in a row that wrote no new checkpoint, since such a crash repeats (e.g. the run
# stops on --max-bad-steps, or the data is gone). SIGINT/SIGTERM stop the trainer cleanly (it
# writes a checkpoint and exits 0) and end the loop. stdout/stderr go to DIR/train.log too.
set -uo pipefail

newest_checkpoint() {  # newest_checkpoint DIR: the newest state file's step, or -1
    local f
    f=$(ls "$1"/state_*.bin 2>/dev/null | sort | tail -n 1)
    [ -n "$f" ] && basename "$f" .bin | sed 's/^state_0*//; s/^$/0/' || echo -1
}

run_gpt2() {  # run_gpt2 OUT_DIR TRAINER_OPTIONS...
    local out=$1; shift
    local bin=${BIN:-./train_gpt2cu} retries=0 rc before after
    [ -x "$bin" ] || { echo "error: $bin is not built; run 'make PRECISION=BF16 train_gpt2cu' first" >&2; return 1; }
    mkdir -p "$out"
    trap 'echo "stopping: the trainer finishes its step and checkpoints"' INT TERM
    while true; do
        before=$(newest_checkpoint "$out")
        echo "== $(date -u +%FT%TZ) start (newest checkpoint: step $before): $bin $* -o $out --resume" | tee -a "$out/train.log"
        # tee ignores SIGINT/SIGTERM so that the trainer can still print while it checkpoints.
        "$bin" "$@" -o "$out" --resume 2>&1 | (trap "" INT TERM; exec tee -a "$out/train.log")
        rc=${PIPESTATUS[0]}
        [ "$rc" = 0 ] && { echo "== done (exit 0)"; return 0; }
        [ "$rc" = 2 ] && { echo "== the trainer refused its options (exit 2); not retrying"; return 2; }
        after=$(newest_checkpoint "$out")
        if [ "$after" -gt "$before" ]; then retries=0; else retries=$((retries + 1)); fi
        if [ "$retries" -ge "${MAX_RETRIES:-5}" ]; then
            echo "== $retries starts in a row without a new checkpoint (last exit $rc); giving up"
            return "$rc"
        fi
        echo "== exit $rc at $(date -u +%FT%TZ); newest checkpoint: step $after; restarting in ${RETRY_WAIT:-30} s"
        sleep "${RETRY_WAIT:-30}"
    done
}

# Checks that the shard globs match something before a long run starts.
need_shards() {  # need_shards GLOB WHAT
    compgen -G "$1" >/dev/null || {
        echo "error: no $2 shards match '$1'; tokenize a corpus first (scripts/data/prepare_data.sh INPUT... OUTDIR) and pass TRAIN=... VAL=..." >&2
        exit 1
    }
}

# run_fineweb OUT_DIR TRAINER_OPTIONS...: run_gpt2 on the shards TRAIN and VAL name (default
# FineWeb 10B's, scripts/data/datasets.sh), after checking that both globs match.
run_fineweb() {
    local out=$1; shift
    local train=${TRAIN:-data/fineweb10B/fineweb_train_*.bin}
    local val=${VAL:-data/fineweb10B/fineweb_val_*.bin}
    need_shards "$train" train
    need_shards "$val" validation
    run_gpt2 "$out" -i "$train" -j "$val" "$@"
}
