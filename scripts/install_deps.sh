#!/usr/bin/env bash
# Makes sure the tests' Python dependencies are there: PyTorch, numpy and regex for the
# reference script. Installs Debian's packages when they are missing and apt-get can run;
# otherwise says what to install. Prints the interpreter to use on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
if py=$(bash scripts/find_python.sh) && "$py" -c 'import regex' >/dev/null 2>&1; then
    echo "$py"
    exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing python3-torch python3-numpy python3-regex from Debian (about a minute)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq python3-torch python3-numpy python3-regex >&2
elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq >&2
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy python3-regex >&2
fi
if py=$(bash scripts/find_python.sh) && "$py" -c 'import regex' >/dev/null 2>&1; then
    echo "$py"
    exit 0
fi
echo "error: no python3 with torch, numpy and regex; install them (Debian: apt-get install python3-torch python3-numpy python3-regex) or set LLMC_PYTHON" >&2
exit 1
