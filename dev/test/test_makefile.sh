#!/usr/bin/env bash
# test_makefile.sh: the Makefile's promises, by dry runs (make -n: nothing is built); on the CPU.
#
# `make` with no goal builds everything; `make help` lists the targets; GPU_ARCH below sm_80 or
# outside the supported list is refused with one sentence; the default GPU_ARCH follows the
# local GPU (a stand-in nvidia-smi) to its family's supported entry; sm_90 compiles for sm_90a;
# spills are errors only under SPILLS_ARE_ERRORS=1 and for the tuned architectures; PRECISION
# picks the build directory; header dependencies come from the compiler (-MMD -MP), so a
# header rebuilds its includers and nothing else (checked on the objects already built).
# Prints one line per check; exits 1 on a failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
# Run from `make test`, make's own flags and variables would reach the makes below.
unset MAKEFLAGS MFLAGS MAKELEVEL GPU_ARCH PRECISION SPILLS_ARE_ERRORS ARCH_CHECK_ARCHS FLASH_TILES_ARCH
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok=0 bad=0
check() {  # check NAME CONDITION-EXIT-CODE
    if [ "$2" = 0 ]; then echo "ok   $1"; ok=$((ok + 1)); else echo "FAIL $1"; bad=$((bad + 1)); fi
}
# No local GPU unless a check puts a stand-in nvidia-smi first: an empty one lists nothing.
mkdir -p "$tmp/nogpu"
printf '#!/bin/sh\nexit 6\n' >"$tmp/nogpu/nvidia-smi"
chmod +x "$tmp/nogpu/nvidia-smi"
mk() { PATH="$tmp/nogpu:$PATH" make --no-print-directory "$@" 2>&1; }

out=$(mk -n -B)
grep -q -- '-o build/bf16/train_gpt2cu' <<<"$out" && grep -q -- 'cp build/bf16/train_gpt2cu train_gpt2cu' <<<"$out" &&
    grep -q -- 'cp build/bf16/test_gpt2cu test_gpt2cu' <<<"$out" && grep -q -- '-o build/bf16/generate_gpt2cu' <<<"$out" &&
    grep -q -- '-o prepare_data' <<<"$out" && grep -q -- '-o build/bf16/dev/test/test_gelu' <<<"$out" &&
    grep -q -- '-o build/host/dev/test/test_tokenizer' <<<"$out"
check "make with no goal builds the binaries, the GPU and host tests" $?

out=$(mk -n -B PRECISION=FP32 train_gpt2cu)
grep -q -- '-DENABLE_FP32 .* -o build/fp32/train_gpt2.o' <<<"$out" &&
    grep -q -- 'cp build/fp32/train_gpt2cu train_gpt2cu' <<<"$out" && ! grep -q 'ENABLE_BF16' <<<"$out"
check "PRECISION=FP32 builds into build/fp32 with -DENABLE_FP32, copied to ./train_gpt2cu" $?

out=$(mk help)
for t in all test arch-check objects data fuzz format-check clean GPU_ARCH PRECISION SPILLS_ARE_ERRORS; do
    grep -q "$t" <<<"$out" || { echo "  make help does not name $t"; false; }
done
check "make help lists the targets and variables" $?

out=$(mk -n GPU_ARCH=sm_75 train_gpt2cu)
rc=$?
[ $rc != 0 ] && grep -q 'GPU_ARCH=sm_75 is below the minimum, sm_80: the kernels use cp.async and bf16' <<<"$out"
check "GPU_ARCH=sm_75 refused, naming the minimum sm_80 (exit $rc: $(tail -n 1 <<<"$out" | cut -c1-120))" $?
out=$(mk -n GPU_ARCH=sm_87 train_gpt2cu)
rc=$?
[ $rc != 0 ] && grep -q 'GPU_ARCH=sm_87 is not supported; use one of sm_80 sm_86 sm_89 sm_90 sm_100 sm_120' <<<"$out"
check "GPU_ARCH=sm_87 refused, listing the supported ones (exit $rc)" $?

for a in sm_80 sm_86 sm_89 sm_100 sm_120; do
    n=${a#sm_}
    mk -n -B GPU_ARCH=$a build/bf16/llmc/gelu.o | grep -q -- "-gencode=arch=compute_$n,code=sm_$n -DLLMC_CUDA_ARCH=$n " ||
        { echo "  $a: no -gencode for sm_$n"; false; }
done
check "GPU_ARCH=sm_80, 86, 89, 100, 120 compile for that architecture" $?
mk -n -B GPU_ARCH=sm_90 build/bf16/llmc/gelu.o | grep -q -- '-gencode=arch=compute_90a,code=sm_90a -DLLMC_CUDA_ARCH=90 '
check "GPU_ARCH=sm_90 compiles for the arch-specific sm_90a" $?

# The default GPU_ARCH: the local GPU's family entry; sm_90 without one or for an unsupported one.
default_arch() {  # default_arch CAPABILITY: GPU_ARCH as make help reports it
    mkdir -p "$tmp/cc$1"
    printf '#!/bin/sh\necho "%s"\n' "$1" >"$tmp/cc$1/nvidia-smi"
    chmod +x "$tmp/cc$1/nvidia-smi"
    PATH="$tmp/cc$1:$PATH" make --no-print-directory help 2>&1 | sed -n 's/.*Now: //p'
}
[ "$(default_arch 8.0)" = sm_80 ] && [ "$(default_arch 8.7)" = sm_86 ] && [ "$(default_arch 9.0)" = sm_90 ] &&
    [ "$(default_arch 10.3)" = sm_100 ] && [ "$(default_arch 12.1)" = sm_120 ] &&
    [ "$(mk help | sed -n 's/.*Now: //p')" = sm_90 ]
check "default GPU_ARCH: 8.0->sm_80 8.7->sm_86 9.0->sm_90 10.3->sm_100 12.1->sm_120, none->sm_90" $?
out=$(default_arch 7.5; PATH="$tmp/cc7.5:$PATH" make --no-print-directory help 2>&1 | head -n 1)
grep -q '^sm_90' <<<"$out" && grep -q 'compute capability 7.5, for which llmc has no GPU_ARCH' <<<"$out"
check "a local GPU below 8.0: a warning, and sm_90 so that the host tools still build" $?

# Spills: warnings for users, errors under SPILLS_ARE_ERRORS=1 for sm_80 and sm_90 only.
flags() { mk -n -B "$@" build/bf16/llmc/gelu.o | grep nvcc; }
flags GPU_ARCH=sm_90 | grep -q -- '--warn-on-spills -Xcudafe --promote_warnings -Xcompiler -Werror' &&
    ! flags GPU_ARCH=sm_90 | grep -q 'all-warnings' &&
    flags GPU_ARCH=sm_90 SPILLS_ARE_ERRORS=1 | grep -q -- '--warn-on-spills -Werror all-warnings' &&
    flags GPU_ARCH=sm_80 SPILLS_ARE_ERRORS=1 | grep -q -- '-Werror all-warnings' &&
    ! flags GPU_ARCH=sm_86 SPILLS_ARE_ERRORS=1 | grep -q 'all-warnings'
check "spills: warnings by default, errors with SPILLS_ARE_ERRORS=1 for sm_80 and sm_90" $?

out=$(mk -n -B ARCH_CHECK_ARCHS="sm_80 sm_120" arch-check)
grep -q 'nvcc \[sm_80\] llmc/flash_attention.cu' <<<"$out" && grep -q 'nvcc \[sm_120\] dev/test/test_gelu.cu' <<<"$out" &&
    grep -q 'nvcc \[sm_80\] train_gpt2.cu' <<<"$out" && ! grep -q '\[sm_90\]' <<<"$out"
check "arch-check compiles llmc/, the top-level and dev/ CUDA files per architecture" $?

# Header dependencies from -MMD -MP (the .d files of the objects already built).
if [ -f build/bf16/llmc/gelu.d ] && [ -f build/bf16/llmc/encoder.d ] && [ -f build/host/llmc/tokenizer.d ]; then
    mk -n -W llmc/gelu.cuh build/bf16/llmc/gelu.o | grep -q -- '-o build/bf16/llmc/gelu.o' &&
        ! mk -n -W llmc/gelu.cuh build/bf16/llmc/encoder.o | grep -q nvcc &&
        mk -n -W llmc/check.h build/bf16/llmc/encoder.o | grep -q -- '-o build/bf16/llmc/encoder.o' &&
        mk -n -W llmc/tokenizer.h build/host/llmc/tokenizer.o | grep -q -- '-o build/host/llmc/tokenizer.o'
    check "a header rebuilds the objects that include it, not others (-MMD -MP)" $?
else
    check "the objects' .d files exist (make all writes them with -MMD -MP)" 1
fi

echo "test_makefile: $ok passed, $bad failed"
[ "$bad" = 0 ]
