"""A worker that breaks the protocol in one chosen way (no SDK: raw protocol lines), for the
harness's diagnosis tests. Usage: python3 bad_worker.py MODE, MODE one of
  garbage-handshake  prints a non-JSON line instead of the handshake reply   -> exit 2
  bad-caps           declares an unknown dtype                              -> exit 2
  old-protocol       answers the handshake with protocol 0                  -> exit 2
  variants-v3        declares variants in a protocol-3 handshake            -> exit 2
  page-size-0        declares paged K / V with a page size of 0            -> exit 2
  head-pair-0        declares a V head size of 0 in head_pairs             -> exit 2
  garbage-reply      answers a call with a non-JSON line                    -> crashed, exit 3
  wrong-size         says it wrote fewer bytes of "out" than asked          -> crashed, exit 3
  close-mid-reply    writes half a reply line and exits                     -> crashed, exit 3
  silent             never answers a call                                   -> hung, exit 3
  lie-on-restart     exits on its first call; restarted, it declares other
                     capabilities (STATE_FILE marks the restart)            -> crashed, exit 3
"""
import json
import os
import sys
import time

mode = sys.argv[1]
restarted = False
if mode == "lie-on-restart":
    state = sys.argv[2]
    restarted = os.path.exists(state)
    open(state, "w").close()
ATTENTION = {"name": "bad-attention", "description": "declares bad variants", "ops": ["attention"],
             "dtypes": ["fp16"], "memory": "host", "head_size_min": 1, "head_size_max": 256, "tilings": [],
             "variants": ["paged_kv", "head_size_v"], "page_sizes": [16], "head_pairs": [[192, 128]]}
SUBJECT = {"name": "bad-merge", "description": "breaks the protocol", "ops": ["merge"], "dtypes": ["fp32"],
           "memory": "host", "head_size_min": 1, "head_size_max": 512}


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    req = json.loads(line)
    if req["op"] == "hello":
        if mode == "garbage-handshake":
            print("Loading model weights... done", flush=True)
        elif mode == "bad-caps":
            send({"status": "ok", "protocol": 1, "subjects": [dict(SUBJECT, dtypes=["fp8"])]})
        elif mode == "variants-v3":
            send({"status": "ok", "protocol": 3, "seq": req.get("seq"), "subjects": [ATTENTION]})
        elif mode == "page-size-0":
            send({"status": "ok", "protocol": 4, "seq": req.get("seq"), "subjects": [dict(ATTENTION, page_sizes=[16, 0])]})
        elif mode == "head-pair-0":
            send({"status": "ok", "protocol": 4, "seq": req.get("seq"),
                  "subjects": [dict(ATTENTION, head_pairs=[[192, 0]])]})
        elif mode == "old-protocol":
            send({"status": "ok", "protocol": 0, "subjects": [SUBJECT]})
        elif restarted:
            send({"status": "ok", "protocol": 1, "subjects": [dict(SUBJECT, head_size_max=64)]})
        else:
            send({"status": "ok", "protocol": 1, "subjects": [SUBJECT]})
        continue
    if req["op"] == "shutdown":
        send({"status": "ok"})
        break
    if mode == "garbage-reply":
        print("warning: kernel cache miss", flush=True)
    elif mode == "wrong-size":
        send({"status": "ok", "written": {"out": req["outputs"]["out"]["bytes"] // 2, "out_lse": req["outputs"]["out_lse"]["bytes"]}})
    elif mode == "close-mid-reply":
        sys.stdout.write('{"status": "o')
        sys.stdout.flush()
        sys.exit(0)
    elif mode == "silent":
        time.sleep(3600)
    elif mode == "lie-on-restart":
        sys.exit(1)
