#!/usr/bin/env python3
"""Checks of kt.h against what it promises, each from a source independent of the thing it checks.

  check_header.py symbols --cc CC --header H --include DIR --nm NM LIBRARY...
      The functions H declares, as the C compiler parses them (GCC's -aux-info, Clang's AST dump), must be exactly
      the kt_* functions each library defines (nm): none declared and missing, none defined and undeclared.
  check_header.py layout --header kt.h --layout kt_layout.h
      Every struct kt.h defines is in kt_layout.h with the same fields in the same order, and nothing else is.

Exits 1 with the differences listed when a check fails.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def fail(lines):
    for line in lines:
        print(line)
    sys.exit(1)


def declared_functions(cc, header, include_dir):
    """Names of the kt_* functions the compiler sees declared in `header` (and the headers it includes from
    include_dir)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "decls.c")
        with open(src, "w") as f:
            f.write('#include "%s"\n' % os.path.abspath(header))
        version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
        if "clang" in version:
            out = subprocess.run([cc, "-std=c99", "-I", include_dir, "-fsyntax-only", "-Xclang", "-ast-dump", src],
                                 capture_output=True, text=True, check=True).stdout
            return set(re.findall(r"FunctionDecl .*? (kt_\w+) '", out))
        aux = os.path.join(tmp, "decls.aux")
        subprocess.run([cc, "-std=c99", "-I", include_dir, "-fsyntax-only", "-aux-info", aux, src], check=True)
        names = set()
        with open(aux) as f:
            for line in f:
                m = re.search(r"\b(kt_\w+)\s*\(", line.split("*/", 1)[-1])
                if m:
                    names.add(m.group(1))
        return names


def defined_functions(nm, library):
    """C-linkage kt_* functions a static archive or shared library defines (and, for a shared one, exports)."""
    args = [nm, "--defined-only", "-g"] + (["-D"] if ".so" in os.path.basename(library) else []) + [library]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r"^\S*\s+T\s+(kt_\w+)$", out, re.M)}


def check_symbols(a):
    declared = declared_functions(a.cc, a.header, a.include)
    if len(declared) < 20:
        fail([f"only {len(declared)} kt_* declarations found in {a.header}: the scan is broken"])
    problems = []
    for library in a.libraries:
        defined = defined_functions(a.nm, library)
        problems += [f"{library}: declared in {a.header} but not defined: {n}" for n in sorted(declared - defined)]
        problems += [f"{library}: defined but not declared in {a.header}: {n}" for n in sorted(defined - declared)]
    if problems:
        fail(problems)
    print(f"{len(declared)} kt.h functions, each defined by {', '.join(a.libraries)}, and no others")


def header_structs(path):
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    structs = {}
    for name, body in re.findall(r"typedef struct (kt_\w+) \{(.*?)\} \1;", text, re.S):
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if decl:
                fields.append(re.match(r".*?(\w+)\s*(\[[^\]]*\])?$", decl, re.S).group(1))
        structs[name] = fields
    return structs


def layout_structs(path):
    structs = {}
    for kind, args in re.findall(r"^KT_LAYOUT_(STRUCT|FIELD)\(([^)]*)\)", open(path).read(), re.M):
        parts = [p.strip() for p in args.split(",")]
        if kind == "STRUCT":
            structs[parts[0]] = []
        else:
            structs.setdefault(parts[0], []).append(parts[1])
    return structs


def check_layout(a):
    want, have = header_structs(a.header), layout_structs(a.layout)
    problems = [f"{a.layout}: no entry for struct {n}" for n in sorted(set(want) - set(have))]
    problems += [f"{a.layout}: {n} is not a struct of {a.header}" for n in sorted(set(have) - set(want))]
    for name in sorted(set(want) & set(have)):
        if want[name] != have[name]:
            problems.append(f"{name}: kt.h has fields {want[name]}, {a.layout} lists {have[name]}")
    if problems:
        fail(problems)
    print(f"{len(want)} structs of {a.header}, every field listed in {a.layout}")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="check", required=True)
    s = sub.add_parser("symbols")
    s.add_argument("--cc", required=True)
    s.add_argument("--header", required=True)
    s.add_argument("--include", required=True)
    s.add_argument("--nm", required=True)
    s.add_argument("libraries", nargs="+")
    s.set_defaults(run=check_symbols)
    l = sub.add_parser("layout")
    l.add_argument("--header", required=True)
    l.add_argument("--layout", required=True)
    l.set_defaults(run=check_layout)
    a = parser.parse_args()
    a.run(a)


if __name__ == "__main__":
    main()
