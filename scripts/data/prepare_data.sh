#!/usr/bin/env bash
# prepare_data.sh INPUT... OUTDIR [prepare_data options]: tokenizes any corpus for training.
#
#   scripts/data/prepare_data.sh my_book.txt data/my_book
#   scripts/data/prepare_data.sh texts/ more.jsonl data/mix --val-fraction 0.02 --shard-tokens 50000000
#
#   gunzip -c corpus.jsonl.gz | scripts/data/prepare_data.sh - data/corpus --format jsonl
#
# INPUT: text files (one document each, or cut with --doc-sep STR), folders (every file below
# them, in sorted order), JSONL files (*.jsonl, one {"text": ...} object per line), or - for
# standard input. The last name is the output folder; options (each with its value, as the next
# word or after '=', and the flag --special-eot) may come anywhere and go to ./prepare_data
# unchanged (./prepare_data --help lists them). This wrapper builds ./prepare_data
# when it is missing and fetches GPT-2's tokenizer files into data/gpt2_tokenizer (or the
# --tokenizer folder) with scripts/data/tokenizer_files.sh. Then train with
#   ./train_gpt2cu -i 'OUTDIR/*_train_*.bin' -j 'OUTDIR/*_val_*.bin' ...
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
names=() opts=() tokdir=$root/data/gpt2_tokenizer
while [ $# -gt 0 ]; do
    case $1 in
        -h | --help) exec "$root/prepare_data" --help ;;
        --tokenizer) [ $# -ge 2 ] || { echo "error: --tokenizer needs a value" >&2; exit 2; }; tokdir=$2; shift 2 ;;
        --tokenizer=*) tokdir=${1#--tokenizer=}; shift ;;
        --special-eot | --*=*) opts+=("$1"); shift ;;
        -) names+=("$1"); shift ;;  # standard input
        -*) [ $# -ge 2 ] || { echo "error: $1 needs a value" >&2; exit 2; }; opts+=("$1" "$2"); shift 2 ;;
        *) names+=("$1"); shift ;;
    esac
done
if [ ${#names[@]} -lt 2 ]; then
    echo "usage: scripts/data/prepare_data.sh INPUT... OUTDIR [prepare_data options]" >&2
    exit 2
fi
out=${names[-1]}
unset 'names[-1]'
[ -x "$root/prepare_data" ] || make -C "$root" --no-print-directory prepare_data >&2
bash "$root/scripts/data/tokenizer_files.sh" "$tokdir" >/dev/null
exec "$root/prepare_data" -o "$out" --tokenizer "$tokdir" "${opts[@]}" "${names[@]}"
