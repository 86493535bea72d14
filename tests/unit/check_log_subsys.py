"""The subsystems log lines are filed under, against LOG_SUBSYSTEMS in daemon/log.h: every
subsystem a log call in daemon/ names is in the list, every name of the list is used, a module
whose folder is a subsystem (daemon/rpc, daemon/world, daemon/transport) files its lines under its
folder's name, or under one no other module uses (rpc/'s "grpc", gRPC's own lines), and deploy/qdpd.conf lists
exactly these names where it describes log_subsys.

Usage: check_log_subsys.py SOURCE_ROOT
"""

import os
import re
import sys

# log_err("rpc", ...) ... log_debug, and log_write/log_fields/log_enabled(level, "rpc", ...).
CALL = re.compile(r'\blog_(?:(?:err|warning|notice|info|debug)\(\s*|'
                  r'(?:write|fields|enabled)\(\s*[^,()]+,\s*)"([^"]*)"')


def listed(root):
    with open(os.path.join(root, "daemon", "log.h"), encoding="utf-8") as f:
        m = re.search(r'#define\s+LOG_SUBSYSTEMS\s+"([^"]*)"', f.read())
    if not m:
        sys.exit("daemon/log.h defines no LOG_SUBSYSTEMS")
    return m.group(1).split(",")


def uses(root):
    """(path relative to root, subsystem) of every log call with a literal subsystem."""
    found = []
    for top, _, names in os.walk(os.path.join(root, "daemon")):
        for name in sorted(names):
            if name.endswith(".c") and name != "log.c":
                path = os.path.join(top, name)
                with open(path, encoding="utf-8") as f:
                    for sub in CALL.findall(f.read()):
                        found.append((os.path.relpath(path, root), sub))
    return found


def conf_names(root):
    with open(os.path.join(root, "deploy", "qdpd.conf"), encoding="utf-8") as f:
        text = re.sub(r"\n#\s*", " ", f.read())
    m = re.search(r"subsystems \(([^)]*)\) with log_subsys", text)
    return None if not m else [n.strip() for n in m.group(1).split(",")]


def check(root):
    names = listed(root)
    problems = []
    calls = uses(root)
    def folder(path):
        return path.split(os.sep)[1] if path.count(os.sep) >= 2 else None

    for path, sub in calls:
        if sub not in names:
            problems.append(f"{path} logs under '{sub}', which LOG_SUBSYSTEMS does not list")
        own = folder(path)
        # A module's lines carry its folder's name, or one that only this module uses.
        others = {p for p, s in calls if s == sub and folder(p) != own}
        if own in names and sub != own and others:
            problems.append(f"{path} logs under '{sub}', the name of {sorted(others)[0]}'s lines:"
                            f" use '{own}'")
    for name in names:
        if not any(sub == name for _, sub in calls):
            problems.append(f"LOG_SUBSYSTEMS lists '{name}', under which nothing logs")
    conf = conf_names(root)
    if conf is None:
        problems.append("deploy/qdpd.conf does not list the subsystems: 'subsystems (...) with "
                        "log_subsys'")
    elif sorted(conf) != sorted(names):
        problems.append(f"deploy/qdpd.conf lists the subsystems {', '.join(conf)}; "
                        f"LOG_SUBSYSTEMS has {', '.join(names)}")
    return problems, len(calls)


def main(root):
    problems, n = check(root)
    for p in problems:
        print(p)
    if not problems:
        print(f"{n} log calls, each under its module's subsystem, all of them listed and documented")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
