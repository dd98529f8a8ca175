#!/usr/bin/env python3
"""check_layers.py: llmc/'s include graph has no cycle and no file includes a layer above its own.

The layers are the Makefile's comment lines "#   layer NAME: FILE ..." (continued by lines
"#     + FILE ..."), lowest first. Each names headers; a source x.cu or x.cpp is in the layer of
its header x.cuh or x.h (a source without a header of its own is named itself). A file of llmc/
may include files of its own layer and of the layers below, never one above, never a file of
dev/, and never a .cu or .cpp; every file of llmc/ is in exactly one layer, and every file a
layer names exists.

  dev/test/check_layers.py [--graph]   (--graph also prints each layer's files and what they include)

Prints one line per violation and a summary line; exits 1 on any violation.
"""
import argparse
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LAYER_RE = re.compile(r"^#\s+layer\s+([\w-]+):(.*)$")
MORE_RE = re.compile(r"^#\s+\+(.*)$")


def read_layers(makefile):
    """[(name, [file names])] from the Makefile's layer lines, lowest first."""
    layers = []
    for line in open(makefile):
        line = line.rstrip("\n")
        m = LAYER_RE.match(line)
        if m:
            layers.append((m.group(1), m.group(2).split()))
            continue
        m = MORE_RE.match(line)
        if m and layers:
            layers[-1][1].extend(m.group(1).split())
    return layers


def header_of(name, files):
    """The header whose layer a source is in: x.cuh for x.cu, x.h for x.cpp, else itself."""
    stem, ext = os.path.splitext(name)
    for h in {".cu": [".cuh"], ".cpp": [".h"]}.get(ext, []):
        if stem + h in files:
            return stem + h
    return name


def find_cycle(graph):
    """One cycle of the graph as a list of names, or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    layers = read_layers(os.path.join(ROOT, "Makefile"))
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "llmc", "*"))
                   if os.path.splitext(p)[1] in (".h", ".cuh", ".cu", ".cpp"))
    dev_files = {os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "dev", "**", "*"),
                                                        recursive=True)}
    errors = []
    if not layers:
        errors.append("Makefile: no '#   layer NAME: FILE ...' lines")
    rank, layer_name = {}, {}
    for i, (name, names) in enumerate(layers):
        for f in names:
            if f in rank:
                errors.append(f"Makefile: {f} is in layers {layer_name[f]} and {name}")
            rank[f], layer_name[f] = i, name
            if f not in files:
                errors.append(f"Makefile: layer {name} names llmc/{f}, which does not exist")
    graph = {}
    for f in files:
        home = header_of(f, files)
        if home not in rank:
            errors.append(f"llmc/{f}: in no layer (add {home} to one of the Makefile's layers)")
            continue
        text = open(os.path.join(ROOT, "llmc", f), encoding="utf-8", errors="replace").read()
        graph[f] = set()
        for inc in INCLUDE_RE.findall(text):
            base = os.path.basename(inc)
            if os.path.splitext(base)[1] in (".cu", ".cpp"):
                errors.append(f"llmc/{f}: includes a source file, {inc}")
            if base not in files:
                if base in dev_files:
                    errors.append(f"llmc/{f}: includes dev/'s {inc}: llmc/ must not need dev/")
                continue
            graph[f].add(base)
            target = header_of(base, files)
            if target in rank and rank[target] > rank[home]:
                errors.append(f"llmc/{f} (layer {layer_name[home]}) includes {base}, of the "
                              f"higher layer {layer_name[target]}")
    cycle = find_cycle(graph)
    if cycle:
        errors.append("include cycle: " + " -> ".join(cycle))
    if args.graph:
        for name, names in layers:
            print(f"layer {name}:")
            for f in names:
                srcs = [s for s in files if header_of(s, files) == f]
                incs = sorted(set().union(*(graph.get(s, set()) for s in srcs)) - set(srcs))
                print(f"  {f}: {' '.join(incs)}")
    for e in errors:
        print("FAIL " + e)
    edges = sum(len(v) for v in graph.values())
    print(f"check_layers: {len(files)} files in {len(layers)} layers "
          f"({' < '.join(n for n, _ in layers)}), {edges} includes: "
          f"{'no cycle, no upward include' if not errors else f'{len(errors)} problems'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
