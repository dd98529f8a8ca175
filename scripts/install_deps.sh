#!/usr/bin/env bash
# Makes sure the tests' dependencies are there: PyTorch, numpy and regex for the reference
# script, clang-format for the style check. Installs Debian's packages when they are missing and apt-get can run;
# otherwise says what to install. Prints the interpreter to use on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
# clang++ with libFuzzer and the sanitizers, for scripts/fuzz.sh (failures here are reported by
# fuzz.sh itself, with what to install).
if ! command -v clang++ >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing clang from Debian (for scripts/fuzz.sh)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang; } >&2 || true
elif ! command -v clang++ >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
    { sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang; } >&2 || true
fi
# mpirun (OpenMPI), for dev/test_launchers.sh (it skips the mpirun case without it).
if ! command -v mpirun >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing openmpi-bin from Debian (for dev/test_launchers.sh)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin; } >&2 || true
elif ! command -v mpirun >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
    { sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin; } >&2 || true
fi
have_all() { py=$(bash scripts/find_python.sh) && "$py" -c 'import regex' >/dev/null 2>&1 && command -v clang-format >/dev/null; }
if have_all; then
    echo "$py"
    exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing python3-torch python3-numpy python3-regex clang-format from Debian (about a minute)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq python3-torch python3-numpy python3-regex clang-format >&2
elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq >&2
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy python3-regex clang-format >&2
fi
if have_all; then
    echo "$py"
    exit 0
fi
echo "error: missing test dependencies: a python3 with torch, numpy and regex, and clang-format (Debian: apt-get install python3-torch python3-numpy python3-regex clang-format; LLMC_PYTHON picks the interpreter)" >&2
exit 1
