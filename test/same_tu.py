#!/usr/bin/env python3
"""same_tu.py: which headers give two builds the same translation unit, token for token (test/test_headers.sh).

  python3 test/same_tu.py "FLAGS_A" "FLAGS_B" HEADER...

Prints, one per line, each HEADER for which `#include "HEADER"` alone preprocesses to the same tokens under
FLAGS_A and FLAGS_B (both with -I. after them, as test_headers.sh compiles), so that `g++ -fsyntax-only` passes
or fails on both alike. That holds when all of these do:
  - the two flag lists differ only in preprocessor options (-D, -U, -I): the same language, the same checks;
  - no file the header includes, followed through the repository's own files (a quoted include found next to
    the including file or under -I.), names a macro whose -D / -U differs (LLM_NO_MPI): in any other file the
    macro is not tested (system headers do not test this project's macros); nor a computed include
    (#include MACRO) or __has_include, which could reach any file;
  - no include line of those files names a file of the include folders that one list has and the other
    lacks (mpi.h of Open MPI's folders), and those folders hold no file that would hide a system header
    (a file under them with the relative path of one under the compiler's own include folders).
Prints nothing when the flags differ otherwise or a folder would hide a system header. A header is printed
only on this evidence; any doubt leaves it out, and test_headers.sh compiles it in both builds.
"""
import os
import re
import shlex
import subprocess
import sys


def split(flags):
    """(the other options in order, {macro: value or None for -U}, [include folders])"""
    other, defs, incs, i = [], {}, [], 0
    while i < len(flags):
        f = flags[i]
        if f in ("-D", "-U", "-I") and i + 1 < len(flags):
            f, i = f + flags[i + 1], i + 1
        if f.startswith("-D"):
            k, _, v = f[2:].partition("=")
            defs[k] = v or "1"
        elif f.startswith("-U"):
            defs[f[2:]] = None
        elif f.startswith("-I"):
            incs.append(os.path.normpath(f[2:]))
        else:
            other.append(f)
        i += 1
    return other, defs, incs


def system_dirs():
    """the compiler's own folders for #include <...> (g++ -v)"""
    err = subprocess.run(["g++", "-x", "c++", "-E", "-v", "-"], input="", capture_output=True, text=True).stderr
    block = err.split("#include <...> search starts here:")[-1].split("End of search list.")[0]
    return re.findall(r"^ (/\S+)$", block, re.M)


def main():
    fa, fb, headers = shlex.split(sys.argv[1]), shlex.split(sys.argv[2]), sys.argv[3:]
    oa, da, ia = split(fa)
    ob, db, ib = split(fb)
    if oa != ob:
        return
    macros = sorted(k for k in set(da) | set(db) if da.get(k, "") != db.get(k, ""))
    dirs = [d for d in set(ia) ^ set(ib) if os.path.isdir(d)]
    names_there = set()  # the files of those folders, as the names an include line would give
    for d in dirs:
        for root, _, files in os.walk(d):
            names_there |= {os.path.relpath(os.path.join(root, f), d) for f in files}
    sysdirs = system_dirs()
    if not sysdirs or any(os.path.exists(os.path.join(s, n)) for s in sysdirs for n in names_there):
        return
    word = re.compile(r"\b(" + "|".join(map(re.escape, macros)) + r")\b") if macros else None
    inc = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)

    def local(f, name):  # a quoted include found in the repository: next to the including file, then -I.
        for c in (os.path.join(os.path.dirname(f), name), name):
            c = os.path.normpath(c)
            if os.path.isfile(c) and not c.startswith(".."):
                return c
        return None

    info = {}

    def read(f):  # (the names it includes, the repository's files among them, whether it names a macro)
        if f not in info:
            text = open(f, encoding="utf-8").read()
            lines = list(inc.finditer(text))
            names = [m.group(2) for m in lines]
            files = [l for m in lines if m.group(1) == '"' for l in [local(f, m.group(2))] if l]
            # a computed include (#include MACRO) or __has_include could reach anything: counted as naming a macro
            odd = re.search(r'^\s*#\s*include\s*[^\s<"]|__has_include', text, re.M)
            info[f] = (names, files, bool(word and word.search(text)) or bool(odd))
        return info[f]

    for h in headers:
        seen, todo, same = set(), [h], True
        while todo and same:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            names, files, mentions = read(f)
            if mentions or any(os.path.normpath(n) in names_there for n in names):
                same = False
            todo += files
        if same:
            print(h)


if __name__ == "__main__":
    main()
