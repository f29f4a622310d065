#!/usr/bin/env python3
"""Per-request instruction profile from a callgrind dump (cost_per_request.sh).

  callgrind_profile.py DUMP REQUESTS [--calls FUNCTION] [ARCHIVE...]

With --calls, the requests are the calls of FUNCTION in the dump (one per
request: exact, where REQUESTS is an estimate) when it has any. Prints the
requests and the instructions per request on its first line, then, per
request: the top functions by self instructions; the split
between kwd's code, OpenSSL (every symbol an ARCHIVE, e.g. libssl.a and
libcrypto.a, defines: kwd-proxy links OpenSSL statically), the C library
and the rest (libstdc++, std:: templates); and the OpenSSL functions kwd
calls into, with the instructions each costs inclusively. The dump's own cost
lines are summed (callgrind_annotate 3.19 put every instruction of a dump
taken with callgrind_control under main).
"""
import collections
import re
import subprocess
import sys

dump, requests = sys.argv[1], max(int(sys.argv[2] or 0), 1)
args = sys.argv[3:]
count_fn = None
if args[:1] == ["--calls"]:
    count_fn, args = args[1], args[2:]
openssl = set()
for archive in args:
    out = subprocess.run(["nm", "--defined-only", archive], capture_output=True, text=True).stdout
    openssl.update(f[2] for f in (line.split() for line in out.splitlines()) if len(f) == 3)

names, objects = {}, {}


def name(table, value):
    m = re.match(r"\((\d+)\)(?: (.*))?", value)
    if not m:
        return value
    if m.group(2):
        table[m.group(1)] = m.group(2)
    return table.get(m.group(1), value)


self_cost = collections.Counter()
object_of = {}
called = collections.Counter()  # (caller, callee) -> inclusive instructions of the calls
calls = collections.Counter()  # (caller, callee) -> number of calls
fn = obj = cobj = cfn = None
call_count = None
for line in open(dump, errors="replace"):
    if line.startswith("ob="):
        obj = cobj = name(objects, line[3:].strip())
    elif line.startswith("fn="):
        fn = name(names, line[3:].strip())
        object_of[fn] = obj
        cobj = obj
    elif line.startswith("cob="):
        cobj = name(objects, line[4:].strip())
    elif line.startswith("cfn="):
        cfn = name(names, line[4:].strip())
        object_of.setdefault(cfn, cobj)
    elif line.startswith("calls="):
        call_count = int(line.split("=")[1].split()[0])
    elif line[:1].isdigit() or line[:1] in "+-*":
        parts = line.split()
        if len(parts) < 2:
            continue
        if call_count is not None:
            called[fn, cfn] += int(parts[1])
            calls[fn, cfn] += call_count
            call_count = None
        else:
            self_cost[fn] += int(parts[1])


def group(f):
    o = (object_of.get(f) or "").rsplit("/", 1)[-1]
    if o.startswith("libc.so") or o.startswith("ld-linux"):
        return "libc"
    if o and not o.startswith("kwd-proxy"):
        return o
    bare = f.split("'")[0]
    if bare in openssl:
        return "OpenSSL"
    if "kwd::" in f:
        return "kwd"
    return "libstdc++ and std:: templates"


total = sum(self_cost.values())
source = "estimated"
if count_fn is not None:
    counted = sum(c for (_, callee), c in calls.items() if callee.startswith(count_fn))
    if counted > 0:
        requests, source = counted, f"calls of {count_fn.rstrip('(')}"
print(f"{requests} requests ({source}), {total / requests:.0f} instructions/request")
print("by code (self instructions):")
groups = collections.Counter()
for f, c in self_cost.items():
    groups[group(f)] += c
for g, c in groups.most_common():
    print(f"{c / requests:9.0f}/req {100 * c / total:5.1f}%  {g}")
print("top functions (self instructions):")
for f, c in self_cost.most_common(25):
    print(f"{c / requests:9.0f}/req {100 * c / total:5.1f}%  [{group(f)}] {f[:110]}")
entry, entry_calls = collections.Counter(), collections.Counter()
for (caller, callee), c in called.items():
    if group(callee) == "OpenSSL" and group(caller) != "OpenSSL" and caller != callee:
        entry[callee] += c
        entry_calls[callee] += calls[caller, callee]
if entry:
    print("OpenSSL entry points kwd calls (inclusive instructions, calls per request):")
    for f, c in entry.most_common(15):
        print(f"{c / requests:9.0f}/req {entry_calls[f] / requests:6.2f} calls/req  {f[:100]}")
