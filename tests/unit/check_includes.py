"""The layering of a folder's C files, from their #include lines: a module is a stem (x.c and x.h),
and module x depends on module y when x.c or x.h includes "y.h" of the same folder. Fails when
the dependencies have a cycle, or when a header declares a function or an extern object that its
own .c does not define (a header shared by several .c files hides their cycles: each module
states its contract in its own header; a header with no .c holds types only).

Usage: check_includes.py FOLDER...
"""

import os
import re
import sys


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def modules(folder):
    """{stem: [file names]} of the folder's .c and .h files."""
    mods = {}
    for name in sorted(os.listdir(folder)):
        stem, ext = os.path.splitext(name)
        if ext in (".c", ".h"):
            mods.setdefault(stem, []).append(name)
    return mods


def dependencies(folder, mods):
    deps = {stem: set() for stem in mods}
    for stem, files in mods.items():
        for name in files:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                for inc in re.findall(r'^\s*#\s*include\s+"([^"/]+)\.h"', f.read(), re.M):
                    if inc in mods and inc != stem:
                        deps[stem].add(inc)
    return deps


def cycles(deps):
    """Every cycle found by a depth-first walk, as lists of stems."""
    found, state, path = [], {}, []

    def walk(m):
        state[m] = 1
        path.append(m)
        for d in sorted(deps[m]):
            if state.get(d) == 1:
                found.append(path[path.index(d):] + [d])
            elif d not in state:
                walk(d)
        path.pop()
        state[m] = 2

    for m in sorted(deps):
        if m not in state:
            walk(m)
    return found


def declared(header_text):
    """Names of the functions and extern objects a header declares at file scope."""
    text = strip_comments(header_text)
    text = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)  # directives
    names, depth, stmt = [], 0, ""
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            stmt = ""
        elif depth == 0:
            if ch == ";":
                s = " ".join(stmt.split())
                if s.startswith("extern "):
                    # a pointer to functions, an array, or a plain object
                    m = (re.search(r"\(\s*\*\s*(?:const\s+)?(\w+)", s) or
                         re.search(r"(\w+)\s*\[", s) or re.search(r"(\w+)$", s))
                    names.append(m.group(1))
                elif not s.startswith(("typedef", "struct", "enum", "union")) or "(" in s:
                    m = re.match(r"[\w\s\*]*?\b(\w+)\s*\(", s)
                    if m and not s.startswith("typedef"):
                        names.append(m.group(1))
                stmt = ""
            else:
                stmt += ch
    return names


def defines(c_text, name):
    """Whether the .c text defines `name` at file scope (its line starts the definition)."""
    for line in strip_comments(c_text).splitlines():
        if re.match(r"\S", line) and not line.startswith(("static", "#")) and \
                re.search(rf"\b{re.escape(name)}\s*[\(\[]", line) and not line.rstrip().endswith(";"):
            return True
    return False


def check(folder):
    problems = []
    mods = modules(folder)
    for cycle in cycles(dependencies(folder, mods)):
        problems.append(f"{folder}: include cycle {' -> '.join(cycle)}")
    for stem, files in mods.items():
        if stem + ".h" not in files:
            continue
        with open(os.path.join(folder, stem + ".h"), encoding="utf-8") as f:
            names = declared(f.read())
        c_text = ""
        if stem + ".c" in files:
            with open(os.path.join(folder, stem + ".c"), encoding="utf-8") as f:
                c_text = f.read()
        for name in names:
            if not defines(c_text, name):
                problems.append(f"{folder}/{stem}.h declares {name}, which {stem}.c does not "
                                "define")
    return problems


def main(folders):
    problems = [p for folder in folders for p in check(folder)]
    for p in problems:
        print(p)
    if not problems:
        print(f"no include cycle, every header its own module's: {' '.join(folders)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
