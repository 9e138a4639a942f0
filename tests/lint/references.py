#!/usr/bin/env python3
"""Every file the repository's code, tests and docs point a reader at must exist in it.

A reader who clones vgpu follows two kinds of pointers: Markdown links in the docs, and
paths named in prose and comments ("see docs/protocol.md", "src/region/region.{h,c}",
"tests/lint/banned.sh"). A pointer to a file that was renamed, moved or never committed
sends that reader nowhere, so this check fails on any of them:

  * a Markdown link `[text](target)` whose target is not a URL or an anchor must name an
    existing file or directory, relative to the page (anchors after `#` are not checked);
  * a mention of a `.md` file anywhere (`GUIDE.md`, `docs/foo.md`, `foo.md`) must resolve
    from the repository root or from the mentioning file's directory;
  * a path that starts with one of the repository's top-level directories (`src/`,
    `tests/`, `bench/`, `demo/`, `docs/`, `cmake/`, `tools/`) must exist; `{a,b}` is
    expanded and `*` is a glob that must match something;
  * a source file named relative to `src/` as `#include` writes it (`base/prng.h`,
    `grpc/kubelet/api.proto`, first part a directory of `src/`) must exist there.

Not references: URLs (anything in a chunk with `://` or starting `github.com/`), paths
built from variables (`$OUT/summary.md`, `${DIR}/x`), placeholders (`src/<module>/`), and
the names in NOT_IN_REPOSITORY below, each with the reason it is not a repository file.
Files from elsewhere are cited by URL, which this check leaves alone.

Usage: references.py [ROOT]   (default: the repository holding this script)
Exit status 0 when every reference resolves, 1 otherwise (each one listed as file:line).
"""

import glob
import os
import re
import sys

SCANNED = ["src", "tests", "bench", "demo", "docs", "cmake", "README.md", "CMakeLists.txt",
           "Makefile", ".ci"]
# Inputs for parsers and fixtures: their bytes are data, not prose.
SKIPPED_DIRS = {os.path.join("tests", "fuzz", "corpus"), os.path.join("tests", "data")}
# The check and its self-test name made-up files on purpose.
SELF = {os.path.join("tests", "lint", "references.py"),
        os.path.join("tests", "lint", "references_selftest.sh")}
TOP_DIRS = ("src", "tests", "bench", "demo", "docs", "cmake", "tools")

# Names that look like repository files but are not meant to be one.
NOT_IN_REPOSITORY = {
    "summary.md": "written by tests/gpu/run.sh into its output directory",
}

MD_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MD_MENTION = re.compile(r"(?<![\w./$}-])((?:[\w.-]+/)*[\w-][\w.-]*\.md)(?![\w-])")
PATH_MENTION = re.compile(r"(?<![\w./$}<>-])((?:%s)/[\w./*{},+-]*)" % "|".join(TOP_DIRS))
# A file named relative to src/ ("base/prng.h", as #include writes it): the file must be there.
MODULE_FILE = re.compile(r"(?<![\w./$}<>-])([a-z][a-z0-9_-]*/(?:[\w-]+/)*[\w-]+\.(?:c|h|proto|map|cmake))\b")


def chunk_around(line, start, end):
    """The whitespace-delimited text around line[start:end]."""
    left = start
    while left > 0 and not line[left - 1].isspace():
        left -= 1
    right = end
    while right < len(line) and not line[right].isspace():
        right += 1
    return line[left:right]


def is_external(line, start, end):
    chunk = chunk_around(line, start, end)
    return "://" in chunk or chunk.lstrip("(<`'\"[").startswith("github.com/")


def expand_braces(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(path[:m.start()] + alt + path[m.end():]))
    return out


def exists(root, base_dir, path):
    for candidate in expand_braces(path):
        for anchor in (root, base_dir):
            full = os.path.normpath(os.path.join(anchor, candidate))
            if not full.startswith(root):
                continue
            if "*" in candidate:
                if glob.glob(full):
                    break
            elif os.path.exists(full):
                break
        else:
            return False
    return True


def clean_path(path):
    """Drops the punctuation a sentence puts after a path ("see src/x.c.", "(docs/)")."""
    path = path.rstrip(".,")
    # An unbalanced closing brace or a trailing comma inside braces is prose, not a path.
    while path.count("}") > path.count("{"):
        path = path[:path.rfind("}")]
    if path.count("{") > path.count("}"):
        path = path[:path.find("{")]
    return path.rstrip(".,")


def references(text, markdown, modules):
    """Yields (line number, kind, target, start, end, line) for every pointer in text."""
    for number, line in enumerate(text.splitlines(), 1):
        if markdown:
            for m in MD_LINK.finditer(line):
                yield number, "link", m.group(1), m.start(1), m.end(1), line
        for m in MD_MENTION.finditer(line):
            yield number, "mention", m.group(1), m.start(1), m.end(1), line
        for m in PATH_MENTION.finditer(line):
            after = line[m.end(1):m.end(1) + 1]
            if after == "<" or after == "$":
                continue  # a placeholder or a variable follows: src/<module>/, tests/$x
            yield number, "path", clean_path(m.group(1)), m.start(1), m.end(1), line
        for m in MODULE_FILE.finditer(line):
            if m.group(1).split("/", 1)[0] in modules:
                yield number, "module path", "src/" + m.group(1), m.start(1), m.end(1), line


def check_file(root, rel, modules):
    full = os.path.join(root, rel)
    try:
        with open(full, encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, OSError):
        return []
    base_dir = os.path.dirname(full)
    problems = []
    seen = set()
    for number, kind, target, start, end, line in references(text, rel.endswith(".md"), modules):
        if kind == "link":
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            target = target.split("#", 1)[0]
            if not target:
                continue
            ok = os.path.exists(os.path.normpath(os.path.join(base_dir, target)))
        else:
            if is_external(line, start, end):
                continue
            if os.path.basename(target) in NOT_IN_REPOSITORY and "/" not in target:
                continue
            if not target or target.endswith("/") and target.count("/") == 1 and kind == "path":
                # a bare top-level directory ("src/") always exists; nothing to check
                if not target or os.path.isdir(os.path.join(root, target)):
                    continue
            # A program is named by its path without ".c" (bench/kube_stub).
            ok = exists(root, base_dir, target) or (
                kind == "path" and exists(root, base_dir, target + ".c"))
        if not ok and (number, target) not in seen:
            seen.add((number, target))
            problems.append("%s:%d: %s to a file the repository does not have: %s"
                            % (rel, number, kind, target))
    return problems


def scanned_files(root):
    for entry in SCANNED:
        full = os.path.join(root, entry)
        if os.path.isfile(full):
            yield entry
            continue
        for dirpath, dirnames, filenames in os.walk(full):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames
                                 if os.path.join(rel_dir, d) not in SKIPPED_DIRS
                                 and not d.startswith("__pycache__"))
            for name in sorted(filenames):
                rel = os.path.join(rel_dir, name)
                if rel not in SELF:
                    yield rel


def main():
    root = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else
                            os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    src = os.path.join(root, "src")
    modules = {d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d))} \
        if os.path.isdir(src) else set()
    problems = []
    count = 0
    for rel in scanned_files(root):
        count += 1
        problems.extend(check_file(root, rel, modules))
    if problems:
        print("references to files the repository does not contain (cite files from elsewhere"
              " by URL):")
        print("\n".join(problems))
        return 1
    print("references ok (%d files)" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
