#!/usr/bin/env python3
"""check_functions.py: no function of the C++/CUDA sources is longer than a limit, kernels aside.

A brace counter, not a parser: comments, strings and character literals are blanked, then every
'{' at namespace or class level whose preceding text (since the last ';', '{' or '}') ends in a
parameter list is a function body; its length is the lines from the line of its signature's
start to its closing '}'. Bodies of __global__ functions (kernels) are listed apart and exempt:
a kernel is one algorithm and reads best in one piece.

  dev/test/check_functions.py [--limit N] [--top K] [FILE...]   (default: every source of the tree)

Prints the K longest functions (kernels and the rest) and exits 1 when a non-kernel function is
longer than N lines (default 150).
"""
import argparse
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATTERNS = ["*.cu", "llmc/*.cu", "llmc/*.cuh", "llmc/*.cpp", "llmc/*.h",
            "dev/**/*.cu", "dev/**/*.cuh", "dev/**/*.cpp", "dev/**/*.h"]
GENERATED = {"llmc/unicode_tables.h"}
NOT_FUNCTIONS = re.compile(r"\b(namespace|struct|class|union|enum)\b[^()]*$")
ATTRIBUTES = {"__launch_bounds__", "__attribute__", "alignas", "__align__", "decltype"}
CONTROL = re.compile(r"^(if|for|while|switch|catch|do|else|return)\b")


def blank(text):
    """Comments, strings and character literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, last line, is_kernel) of each function defined at namespace level."""
    text = blank(open(path, encoding="utf-8", errors="replace").read())
    text = re.sub(r"^\s*#.*$", lambda m: " " * len(m.group(0)), text, flags=re.M)
    found, stack = [], []  # stack entries: ("function", start, name, kernel) or ("block",)
    last_cut = 0
    line_of = [0]
    for ch in text:
        line_of.append(line_of[-1] + (ch == "\n"))
    for i, ch in enumerate(text):
        if ch == ";":
            last_cut = i + 1
        elif ch == "{":
            header = text[last_cut:i].strip()
            in_function = any(e[0] == "function" for e in stack)
            flat = " ".join(header.split())
            is_function = (not in_function and re.search(r"\)\s*(const|override|final|noexcept|"
                                                         r"mutable|->\s*[\w:<>]+|\s)*$", flat)
                           and not NOT_FUNCTIONS.search(flat) and not CONTROL.match(flat)
                           and "=" not in flat.split("(")[0])
            if is_function:
                start = last_cut + len(text[last_cut:i]) - len(text[last_cut:i].lstrip())
                names = [n for n in re.findall(r"([~\w:]+)\s*\(", flat) if n not in ATTRIBUTES]
                stack.append(("function", line_of[start] + 1, names[0] if names else "?",
                              "__global__" in flat))
            else:
                stack.append(("block",))
            last_cut = i + 1
        elif ch == "}":
            if stack:
                entry = stack.pop()
                if entry[0] == "function":
                    found.append((entry[2], entry[1], line_of[i] + 1, entry[3]))
            last_cut = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    os.chdir(ROOT)
    files = args.files or sorted({f for p in PATTERNS for f in glob.glob(p, recursive=True)}
                                 - GENERATED)
    rows = []
    for f in files:
        for name, first, last, kernel in functions(f):
            rows.append((last - first + 1, f, first, name, kernel))
    rows.sort(reverse=True)
    print(f"check_functions: the {args.top} longest functions of {len(files)} files:")
    for length, f, first, name, kernel in rows[:args.top]:
        print(f"  {length:4d} lines  {f}:{first}  {name}{'  (kernel)' if kernel else ''}")
    over = [r for r in rows if r[0] > args.limit and not r[4]]
    for length, f, first, name, _ in over:
        print(f"FAIL {f}:{first} {name} is {length} lines, over {args.limit}")
    longest = next((r for r in rows if not r[4]), None)
    if longest:
        print(f"longest outside kernels: {longest[0]} lines ({longest[1]}:{longest[2]} "
              f"{longest[3]}); limit {args.limit}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
