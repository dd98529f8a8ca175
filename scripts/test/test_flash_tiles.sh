#!/usr/bin/env bash
# test_flash_tiles.sh: every architecture's flash attention tile shapes, on this machine's GPU.
#
#   scripts/test/test_flash_tiles.sh [sm_XX ...]     (default: every supported GPU_ARCH)
#
# llmc/flash_attention.cu picks its tile shapes per architecture at compile time; the shapes
# are plain mma.sync code that any GPU from sm_80 runs, so one GPU can check them all: for each
# architecture, dev/test/test_flash_attention is rebuilt with that architecture's shapes
# (make FLASH_TILES_ARCH=sm_XX, compiled for this GPU's GPU_ARCH) and run. Only
# flash_attention.o is recompiled each time; it is rebuilt with this GPU's own shapes at the
# end. Prints PASS/FAIL per architecture, exits 1 if any failed, 77 (SKIP) without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
archs=("$@")
[ ${#archs[@]} -gt 0 ] || read -r -a archs <<<"$(sed -n 's/^SUPPORTED_ARCHS := //p' Makefile)"
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "SKIP no NVIDIA GPU visible (nvidia-smi lists none)"; exit 77; }
DEF=$(sed -n 's/^PRECISION ?= *//p' Makefile | tr A-Z a-z)
BIN=build/$DEF/dev/test/test_flash_attention
LOGS=build/test_flash_tiles
mkdir -p "$LOGS"
results=() failed=0
for a in "${archs[@]}"; do
    if ! make -j"$(nproc)" FLASH_TILES_ARCH="$a" "$BIN" >"$LOGS/build_$a.log" 2>&1; then
        results+=("FAIL $a: build (see $LOGS/build_$a.log)")
        failed=$((failed + 1))
        continue
    fi
    "$BIN" >"$LOGS/test_$a.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then
        results+=("PASS $a: $(tail -n 1 "$LOGS/test_$a.log")")
    else
        results+=("FAIL $a: exit $rc, $(tail -n 1 "$LOGS/test_$a.log") (see $LOGS/test_$a.log)")
        failed=$((failed + 1))
    fi
    echo "${results[-1]}"
done
make -j"$(nproc)" FLASH_TILES_ARCH= "$BIN" >"$LOGS/build_restore.log" 2>&1 ||
    echo "warning: rebuilding $BIN with this GPU's own shapes failed (see $LOGS/build_restore.log)"
echo "== test_flash_tiles: ${#archs[@]} architectures, $failed failed"
printf '%s\n' "${results[@]}"
[ "$failed" = 0 ]
