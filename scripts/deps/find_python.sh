#!/usr/bin/env bash
# Prints the path of a python3 that can import torch and numpy, or nothing and exit 1.
# Debian's python3-torch lands in /usr/bin/python3's packages, which a python3 earlier on
# PATH (pyenv, conda) does not see, so each candidate is asked in turn.
for py in "${LLMC_PYTHON:-}" /usr/bin/python3 python3; do
    [ -n "$py" ] || continue
    if "$py" -c 'import torch, numpy' >/dev/null 2>&1; then
        command -v "$py"
        exit 0
    fi
done
exit 1
