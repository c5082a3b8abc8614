"""A worker that attacks attncheck through the worker protocol (raw protocol lines, no SDK), for
the hostile-user table. Usage: python3 hostile_worker.py MODE; each MODE serves one merge subject
(or split-KV, where the declaration needs it) and does one thing a trusting harness would not
survive:
  truncate-arena     truncates the shared arena (fd 3) to 0 bytes, then replies ok
  max-splits         declares max_splits 2^31 - 1
  head-size-2e30     declares head_sizes [2^30]
  head-size-max-wrap declares head_size_max 2^32 + 64 (64 once wrapped to 32 bits)
  head-size-neg-wrap declares head_sizes [-2^32 + 64] (64 once wrapped)
  tile-huge          declares an attention tiling of 2^20 keys
  refuse-all         answers "unsupported" to every call
  long-name          names its subject with 300 characters
  exit-keep-stdout   on a call, starts a child holding its stdout and exits without replying
  reply-twice        sends every reply twice (speaks protocol 3, numbering its replies)
  escape-error       fails every call with an error text holding control bytes
  hang-in-call       never answers a call (sleeps an hour in it)
  setsid-child FILE  starts a process in a session of its own, then answers like the default mode
  slow               answers like the default mode, 50 ms after each call
  slow-start         answers like the default mode, after 1 s asleep before its first request (a
                     worker importing a framework)
setsid-child takes a second argument: a file where it writes that process's pid and start time.
"""
import json
import os
import subprocess
import sys
import time

mode = sys.argv[1]
SUBJECT = {"name": "hostile-merge", "description": "attacks the harness", "ops": ["merge"], "dtypes": ["fp32"],
           "memory": "host", "head_size_min": 1, "head_size_max": 512}
SPLITKV = {"name": "hostile-splitkv", "description": "attacks the harness", "ops": ["splitkv"], "dtypes": ["fp32"],
           "memory": "host", "head_sizes": [64], "tilings": [[64, 64]], "max_splits": 8, "fold_orders": ["left"]}
DECLARED = {
    "max-splits": dict(SPLITKV, max_splits=2**31 - 1),
    "head-size-2e30": dict(SPLITKV, head_sizes=[2**30]),
    "head-size-max-wrap": dict(SUBJECT, head_size_max=2**32 + 64),
    "head-size-neg-wrap": dict(SPLITKV, head_sizes=[-2**32 + 64]),
    "tile-huge": dict(SPLITKV, tilings=[[64, 2**20]]),
    "long-name": dict(SUBJECT, name="n" * 300),
}.get(mode, SUBJECT)
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)


def send(obj, req):
    if mode == "reply-twice" and "seq" in req:
        obj = dict(obj, seq=req["seq"])
    out.write(json.dumps(obj) + "\n")
    out.flush()


if mode == "setsid-child":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             close_fds=True)
    stat = open("/proc/%d/stat" % child.pid).read()
    with open(sys.argv[2], "w") as f:
        f.write("%d %s\n" % (child.pid, stat[stat.rindex(")") + 2:].split()[19]))

if mode == "slow-start":
    time.sleep(1.0)

for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "hello":
        version = min(3, req.get("protocol", 1)) if mode == "reply-twice" else 1
        send({"status": "ok", "protocol": version, "subjects": [DECLARED]}, req)
        continue
    if req["op"] == "shutdown":
        send({"status": "ok"}, req)
        break
    written = {name: t["bytes"] for name, t in req["outputs"].items()}
    if mode == "truncate-arena":
        os.ftruncate(3, 0)
        send({"status": "ok", "written": written}, req)
    elif mode == "refuse-all":
        send({"status": "unsupported", "error": "not today"}, req)
    elif mode == "exit-keep-stdout":
        subprocess.Popen(["sleep", "60"], stdout=out.fileno(), stdin=subprocess.DEVNULL, close_fds=True)
        os._exit(0)
    elif mode == "reply-twice":
        send({"status": "unsupported", "error": "shape"}, req)
        send({"status": "unsupported", "error": "shape"}, req)
    elif mode == "hang-in-call":
        time.sleep(3600)
    elif mode == "slow":
        time.sleep(0.05)
        send({"status": "ok", "written": written}, req)
    elif mode == "escape-error":
        send({"status": "error", "error": "boom\x1b[2J\x1b]0;owned\x07 done"}, req)
    else:
        send({"status": "ok", "written": written}, req)
