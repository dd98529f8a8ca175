#!/usr/bin/env python3
"""test_docs.py: every command the docs show runs as written (standard library only).

Reads README.md, data/README.md and docs/*.md and checks, on the CPU:
  1. every path under scripts/ or dev/ they name exists, and every script they show as a command
     (in a code block, after python3/bash, or with arguments) is executable in git (mode 100755,
     so a fresh clone runs it) with a #! line;
  2. every script users run is executable in git with a #! line: every .sh of scripts/ and dev/
     (in any room), and every .py there that has a main;
  3. each option a command is shown with (--long, and -x for the binaries and Python scripts)
     exists in that program's --help (train_gpt2cu, test_gpt2cu, generate_gpt2cu, prepare_data,
     the Python scripts), or for shell scripts and profile_gpt2cu, in its source; a nested command
     (scripts/run/launch.sh -n 2 ./train_gpt2cu ...) is checked against its own program; scripts that
     hand their options on (quickstart.sh to train_gpt2cu, prepare_data.sh to prepare_data) are
     checked against both;
  4. every `make TARGET` they show is a target of the Makefile (make -p lists those written
     through variables, such as $(GPU_MAINS));
  5. every relative link [text](path#anchor) between the docs points at a file that exists, and
     its anchor at a heading of that file;
  6. the scripts themselves (scripts/ and dev/, the Makefile, .ci/run): every scripts/ or dev/
     path they name exists, a `cd "$(dirname "$0")/../.."` climbs exactly to the root, and a
     directory put on sys.path holds the repository's modules imported after it (the GPU
     scripts stop with SKIP before their paths are used in CI, so a moved file shows here).
Prints one PASS/FAIL line per check group with the offending places; exits 1 on any failure.
Usage: dev/test/test_docs.py [--python PY] (PY runs the Python scripts' --help; default: this one).
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, failures  # noqa: E402 (after the path)

BINARIES = {"train_gpt2cu": "train_gpt2.cu", "test_gpt2cu": "test_gpt2.cu",
            "generate_gpt2cu": "generate_gpt2.cu", "profile_gpt2cu": "profile_gpt2.cu",
            "prepare_data": "dev/tools/prepare_data.cpp"}
NO_HELP = {"profile_gpt2cu"}  # needs a GPU before it parses: checked against its source
# Scripts whose options go on to a program, which may hold them instead.
FORWARDS = {"scripts/quickstart.sh": "train_gpt2cu", "scripts/data/prepare_data.sh": "prepare_data"}
PATH_RE = re.compile(r"(?<![\w./-])((?:scripts|dev)/[\w.-]+(?:/[\w.-]+)*)")
BIN_RE = re.compile(r"^(?:\./|build/(?:bf16|fp32)/)?(%s)$" % "|".join(BINARIES))
SCRIPT_RE = re.compile(r"^(?:\./)?((?:scripts|dev)/(?:[\w.-]+/)*[\w.-]+\.(?:sh|py))$")
SEPARATORS = {"&&", "||", ";", "|", "&"}


def doc_files():
    return ["README.md", "data/README.md"] + sorted(
        os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def commands(text):
    """(line number, command line, in_code_block) for every code-block line (continuations
    joined) and every inline code span (which may run over a line break)."""
    out, in_block, pending, start, prose = [], False, "", 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            in_block, pending = not in_block, ""
            prose.append("")
            continue
        if in_block:
            prose.append("")
            if not pending:
                start = n
            pending += line.rstrip().rstrip("\\") + " "
            if not line.rstrip().endswith("\\"):
                out.append((start, pending.strip(), True))
                pending = ""
            continue
        prose.append(line)
    joined = "\n".join(prose)
    for m in re.finditer(r"`([^`]+)`", joined):
        out.append((joined.count("\n", 0, m.start()) + 1, m.group(1).replace("\n", " "), False))
    return out


def anchors(path):
    """GitHub's anchors of a markdown file's headings: lower case, punctuation dropped, spaces
    to hyphens."""
    out = set()
    in_block = False
    for line in open(path):
        if line.strip().startswith("```"):
            in_block = not in_block
        elif not in_block and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def strip_comment(line):
    return re.sub(r"(^|\s)#.*$", "", line)


def tokens(line):
    try:
        return shlex.split(strip_comment(line))
    except ValueError:  # unbalanced quotes in prose: split plainly
        return strip_comment(line).split()


def segments(toks):
    """[(program, [arguments])]: a known binary or a scripts/ or dev/ script starts a segment;
    separators end it; arguments before any known program belong to an unknown one (None)."""
    segs, prog, args = [], None, []
    for t in toks:
        if t in SEPARATORS:
            segs.append((prog, args))
            prog, args = None, []
            continue
        m = BIN_RE.match(t) or SCRIPT_RE.match(t)
        if m:
            segs.append((prog, args))
            prog, args = m.group(1), []
        else:
            args.append(t)
    segs.append((prog, args))
    return [s for s in segs if s[0]]


class Programs:
    def __init__(self, python):
        self.python, self.cache = python, {}

    def help_text(self, prog):
        """What the program's options are checked against; None when it cannot be read."""
        if prog in self.cache:
            return self.cache[prog]
        text = None
        if prog in BINARIES and prog not in NO_HELP:
            exe = os.path.join(ROOT, prog)
            if os.access(exe, os.X_OK):
                r = subprocess.run([exe, "--help"], capture_output=True, text=True, cwd=ROOT)
                text = r.stdout + r.stderr if r.returncode == 0 else None
        elif prog in BINARIES:
            text = open(os.path.join(ROOT, BINARIES[prog])).read()
        elif prog.endswith(".py") and os.path.isfile(os.path.join(ROOT, prog)):
            r = subprocess.run([self.python, prog, "--help"], capture_output=True, text=True,
                               cwd=ROOT)
            text = r.stdout if r.returncode == 0 else None
        elif os.path.isfile(os.path.join(ROOT, prog)):
            text = open(os.path.join(ROOT, prog)).read()
        if prog in FORWARDS and text is not None:
            extra = self.help_text(FORWARDS[prog])
            text = text + "\n" + (extra or "")
        self.cache[prog] = text
        return text


def option_known(opt, text, short_ok):
    if opt.startswith("--"):
        return re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(opt), text) is not None
    return not short_ok or re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(opt), text) is not None


def git_modes():
    try:
        out = subprocess.run(["git", "ls-files", "-s", "scripts", "dev"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None  # not a git checkout: the file's own mode is the next best thing
    return {line.split("\t", 1)[1]: line.split()[0] for line in out.splitlines()}


def runnable(path, modes):
    """'' when path is executable (in git when there is git) with a #! line, else why not."""
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        return "does not exist"
    with open(full, "rb") as f:
        if f.read(2) != b"#!":
            return "has no #! line"
    if modes is not None:
        mode = modes.get(path)
        if mode is None:
            return "is not tracked by git"
        if mode != "100755":
            return f"is mode {mode} in git (git update-index --chmod=+x {path})"
    elif not os.access(full, os.X_OK):
        return "is not executable"
    return ""


def make_knows(target):
    """True when make has a rule for target (a pattern or generated rule the text search misses):
    a dry run, which writes nothing."""
    r = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


def script_paths():
    """Group 6: the places in the scripts whose paths lead nowhere."""
    files = ["Makefile", ".ci/run"]
    for pattern in ("scripts/**/*.sh", "dev/**/*.sh", "scripts/**/*.py", "dev/**/*.py",
                    "scripts/**/*.mjs", "scripts/**/*.js"):
        files += sorted(os.path.relpath(f, ROOT) for f in
                        glob.glob(os.path.join(ROOT, pattern), recursive=True)
                        if "node_modules" not in f)
    # The repository's own Python modules, by name: an import of one of them must find it.
    ours = {}
    for f in glob.glob(os.path.join(ROOT, "scripts/**/*.py"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "dev/**/*.py"), recursive=True):
        ours.setdefault(os.path.basename(f)[:-3], []).append(os.path.dirname(f))
    bad = []
    for rel in files:
        text = open(os.path.join(ROOT, rel)).read()
        for path in set(PATH_RE.findall(text)):
            path = path.rstrip(".")
            if "*" not in path and not glob.glob(os.path.join(ROOT, glob.escape(path) + "*")):
                bad.append(f"{rel}: {path}")
        for m in re.finditer(r'cd "\$\(dirname "\$0"\)((?:/\.\.)*)"', text):
            if m.group(1).count("..") != rel.count("/"):
                bad.append(f"{rel}: cd \"$(dirname \"$0\"){m.group(1)}\" is not the root")
        for m in re.finditer(r'sys\.path\.insert\(0, "([^"]+)"\)', text):
            where = os.path.normpath(os.path.join(ROOT, m.group(1)))
            rest = text[m.end():]
            for mod in re.findall(r"^\s*(?:from (\w+) import|import (\w+))", rest, re.M):
                mod = mod[0] or mod[1]
                if mod in ours and where not in [os.path.normpath(d) for d in ours[mod]]:
                    bad.append(f"{rel}: {mod} imported through sys.path {m.group(1)}, "
                               f"which does not hold it")
    return sorted(set(bad))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=sys.executable, help="runs the Python scripts' --help")
    args = p.parse_args(argv)
    progs, modes = Programs(args.python), git_modes()
    missing, not_runnable, bad_options, bad_make, bad_links = [], [], [], [], []
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    targets = set(re.findall(r"^([\w.-]+)\s*:(?!=)", makefile, re.M))
    # Targets written through variables ($(GPU_MAINS): ...) from make's own database.
    try:
        db = subprocess.run(["make", "-pRrq", "-f", "Makefile", ":"], cwd=ROOT,
                            capture_output=True, text=True).stdout
        targets |= set(re.findall(r"^([\w.-]+):(?!=)", db, re.M))
    except OSError:
        pass
    for doc in doc_files():
        text = open(os.path.join(ROOT, doc)).read()
        for path in set(PATH_RE.findall(text)):
            path = path.rstrip(".")
            # A program built from a source (dev/bench/bench_ops) or a name's stem (dev/fuzz/fuzz_<x>.cpp)
            # counts when a file starts with it.
            if "*" not in path and not glob.glob(os.path.join(ROOT, glob.escape(path) + "*")):
                missing.append(f"{doc}: {path}")
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), target)
                                    if target else os.path.join(ROOT, doc))
            if not os.path.exists(path):
                bad_links.append(f"{doc}: ({target})")
            elif anchor and (not path.endswith(".md") or anchor not in anchors(path)):
                bad_links.append(f"{doc}: ({target}#{anchor}): no such heading")
        for n, line, in_block in commands(text):
            toks = tokens(line)
            if toks[:1] == ["make"]:
                for t in toks[1:]:
                    if t in SEPARATORS:
                        break
                    if "=" not in t and not t.startswith("-") and "/" not in t and \
                            t not in targets and not make_knows(t):
                        bad_make.append(f"{doc}:{n}: make {t}")
            for prog, prog_args in segments(toks):
                is_script = "/" in prog
                if is_script and (in_block or prog_args or toks[0] in ("python3", "bash")):
                    why = runnable(prog, modes)
                    if why:
                        not_runnable.append(f"{doc}:{n}: {prog} {why}")
                help_text = progs.help_text(prog)
                if help_text is None:
                    if prog_args and any(a.startswith("-") for a in prog_args):
                        bad_options.append(f"{doc}:{n}: {prog}: its --help could not be read")
                    continue
                short_ok = not prog.endswith(".sh") and prog not in NO_HELP
                for a in prog_args:
                    opt = a.split("=", 1)[0]
                    if re.fullmatch(r"--[a-z][\w-]*|-[a-zA-Z]", opt) and \
                            not option_known(opt, help_text, short_ok):
                        bad_options.append(f"{doc}:{n}: {prog} {opt}")
    for pattern in ("scripts/**/*.sh", "dev/**/*.sh", "scripts/**/*.py", "dev/**/*.py"):
        for full in sorted(glob.glob(os.path.join(ROOT, pattern), recursive=True)):
            rel = os.path.relpath(full, ROOT)
            if rel.endswith(".py") and "__main__" not in open(full).read():
                continue  # a module (pydeps.py, make_shards.py, pycheck.py)
            why = runnable(rel, modes)
            if why:
                not_runnable.append(f"{rel} {why}")

    bad_script_paths = script_paths()

    def report(items, what):
        check(not items, what + ("" if not items else ":\n    " + "\n    ".join(sorted(items))))
    report(missing, "every scripts/ and dev/ path the docs name exists")
    report(sorted(set(not_runnable)), "every script the docs run, and every script with a main, "
           "is executable in git with a #! line")
    report(bad_options, "every option the docs show is in its program's --help (or source)")
    report(bad_make, "every make target the docs show is in the Makefile")
    report(bad_links, "every relative link of the docs points at a file (and a heading)")
    report(bad_script_paths, "every path, cd and sys.path entry of the scripts leads to a file")
    print(f"test_docs: {'all passed' if not failures else f'{len(failures)} failed'} "
          f"({len(doc_files())} files)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
