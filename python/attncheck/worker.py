"""The worker side of the worker protocol (harness/WORKER_PROTOCOL.md), versions 1 to 4.

    python3 -m attncheck.worker SPEC [SPEC...]

SPEC is module:object or path/to/file.py:object (object: a Subject, a list of them, or a
function returning either); without ':object', every Subject found in the module is served.
attncheck starts this with `attncheck check --worker "python3 -m attncheck.worker SPEC"`.

Requests arrive as JSON lines on stdin, replies leave as JSON lines on the original stdout; fd 1
is pointed at stderr first, so print() in a subject cannot corrupt the protocol. Tensors live in
the shared arena at fd 3 (mapped once, remapped when the harness grows it).
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import mmap
import os
import sys
import traceback
from typing import Any, Dict, List, Optional, Sequence, TextIO, cast

import numpy as np

from . import calls as _calls
from ._caps import CapsError, as_protocol_1, as_protocol_3
from .dtypes import NUMPY_DTYPES
from .subject import DeviceError, Subject, Unsupported

# Version 3: every reply echoes its request's "seq" (serve() does it for every reply). Version 4:
# subjects declare variants, and attention calls carry them.
PROTOCOL_VERSION = 4
ARENA_FD = 3

_ELEM: Dict[str, Any] = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16, "u8": np.uint8,
                         "i32": np.int32, "e4m3fn": np.uint8, "e5m2": np.uint8,
                         "e4m3fnuz": np.uint8}


class _Arena:
    def __init__(self) -> None:
        self.map: Optional[mmap.mmap] = None
        self.size = 0

    def ensure(self, size: int) -> None:
        if size > self.size:
            if self.map is not None:
                try:
                    self.map.close()
                except BufferError:
                    pass  # a subject still holds a view of the old mapping: leave it to the GC
            self.map = mmap.mmap(ARENA_FD, size)
            self.size = size

    def view(self, t: Dict[str, Any], writable: bool = False) -> Any:
        n = 1
        for d in t["shape"]:
            n *= d
        a = np.frombuffer(cast(mmap.mmap, self.map), dtype=_ELEM[t["dtype"]], count=n, offset=t["offset"]).reshape(t["shape"])
        if not writable:
            a.flags.writeable = False
        return a


def load_subjects(specs: Sequence[str]) -> List[Subject]:
    """Subjects named by module:object or file.py:object specs."""
    found = []
    for spec in specs:
        target, _, attr = spec.partition(":")
        if target.endswith(".py"):
            path = os.path.abspath(target)
            sys.path.insert(0, os.path.dirname(path))
            modname = os.path.splitext(os.path.basename(path))[0]
            if modname in sys.modules and getattr(sys.modules[modname], "__file__", None) == path:
                mod = sys.modules[modname]
            else:
                s = importlib.util.spec_from_file_location(modname, path)
                if s is None or s.loader is None:
                    raise ImportError(f"{path}: not a loadable Python file")
                mod = importlib.util.module_from_spec(s)
                sys.modules[modname] = mod
                s.loader.exec_module(mod)
        else:
            mod = importlib.import_module(target)
        if attr:
            obj = mod
            for part in attr.split("."):
                obj = getattr(obj, part)
            if callable(obj) and not isinstance(obj, Subject) and not isinstance(obj, type):
                obj = obj()
            if isinstance(obj, type) and issubclass(obj, Subject):
                obj = obj()
            objs = list(obj) if isinstance(obj, (list, tuple)) else [obj]
        else:
            objs = [v for v in vars(mod).values() if isinstance(v, Subject)]
        for o in objs:
            if not isinstance(o, Subject):
                raise TypeError(f"{spec}: {o!r} is not an attncheck Subject (decorate it with @attncheck.subject(...))")
        if not objs:
            raise TypeError(f"{spec}: no attncheck Subject found")
        found.extend(objs)
    return found


def _framework(subject: Subject) -> str:
    if subject.framework:
        return subject.framework
    try:
        import torch  # noqa: F401  (only when a CUDA subject is served)
        return "torch"
    except ImportError:
        pass
    try:
        import cupy  # noqa: F401
        return "cupy"
    except ImportError:
        raise RuntimeError(
            f"subject '{subject.name}' declares memory='cuda' but neither torch nor cupy can be imported"
        ) from None


def _to_device(a: Any, dtype: Optional[str], framework: str) -> Any:
    a = np.ascontiguousarray(a)
    if framework == "torch":
        import torch
        if dtype == "bf16":
            return torch.from_numpy(a.view(np.int16).copy()).cuda().view(torch.bfloat16)
        if dtype in ("e4m3fn", "e5m2", "e4m3fnuz"):  # FP8 codes as PyTorch's own FP8 dtypes
            fp8 = getattr(torch, "float8_" + dtype)
            return torch.from_numpy(a.copy()).cuda().view(fp8)
        return torch.from_numpy(a.copy()).cuda()
    import cupy
    return cupy.asarray(a)  # bf16 stays uint16 bits: CuPy has no bfloat16


def _to_host(x: Any, dtype: str) -> Any:
    if isinstance(x, np.ndarray):
        return x
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch
        if x.dtype == torch.bfloat16:
            return x.detach().view(torch.int16).cpu().numpy().view(np.uint16)
        if x.dtype.itemsize == 1 and x.dtype.is_floating_point:  # torch's float8 dtypes: the codes
            return x.detach().view(torch.uint8).cpu().numpy()
        return x.detach().cpu().numpy()
    if mod.startswith("cupy"):
        import cupy
        return cupy.asnumpy(x)
    return np.asarray(x)


def _storage_dtype(dtype: str) -> Any:
    return np.dtype(NUMPY_DTYPES[dtype])


class _Server:
    def __init__(self, subjects: Sequence[Subject]) -> None:
        self.subjects = {s.name: s for s in subjects}
        if len(self.subjects) != len(subjects):
            raise TypeError("two subjects share a name")
        self.arena = _Arena()

    def inputs(self, req: Dict[str, Any], subject: Subject, names: Sequence[str]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for n in names:
            t = req["inputs"].get(n)
            if t is None:
                out[n] = None
                continue
            a = self.arena.view(t)
            if subject.declaration["memory"] == "cuda":
                a = _to_device(a, t["dtype"], _framework(subject))
            out[n] = a
        return out

    def write(self, req: Dict[str, Any], subject: Subject, name: str, value: Any, want_dtype: str) -> int:
        t = req["outputs"][name]
        v = _to_host(value, want_dtype)
        shape = tuple(t["shape"])
        if tuple(v.shape) != shape:
            raise _Wrong(f"{subject.name} returned {name} of shape {tuple(v.shape)}, expected {shape}")
        want = np.dtype(_ELEM[t["dtype"]])
        if v.dtype != want:
            raise _Wrong(f"{subject.name} returned {name} of dtype {v.dtype}, expected {want} ({t['dtype']})")
        self.arena.view(t, writable=True)[...] = v
        return cast(int, t["bytes"])

    def handle(self, req: Dict[str, Any]) -> Dict[str, Any]:
        op = req["op"]
        # A subject's operations and a call's fields are the user's (set below per op).
        s: Any = self.subjects.get(req.get("subject"))
        call: Any
        if s is None:
            return {"status": "error", "error": f"unknown subject {req.get('subject')!r}"}
        cuda = s.declaration["memory"] == "cuda"
        if op == "merge":
            call = _calls.MergeCall(req, s)
            for k in ("num_tokens", "num_heads", "head_size"):
                setattr(call, k, req[k])
            for k, v in self.inputs(req, s, ("prefix_out", "prefix_lse", "suffix_out", "suffix_lse",
                                             "output_scale")).items():
                setattr(call, k, v)
            call.out_dtype = req.get("out_dtype")
            res = s.merge(call)
            if not isinstance(res, tuple) or len(res) != 2:
                raise _Wrong(f"{s.name} merge returned {type(res).__name__}, expected (out, lse)")
            written = {"out": self.write(req, s, "out", res[0], call.out_dtype or call.dtype),
                       "out_lse": self.write(req, s, "out_lse", res[1], "fp32")}
        elif op == "quantize":
            call = _calls.QuantizeCall(req, s)
            for k in ("out_dtype", "num_tokens", "num_heads", "head_size"):
                setattr(call, k, req[k])
            for k, v in self.inputs(req, s, ("x", "scale")).items():
                setattr(call, k, v)
            written = {"y": self.write(req, s, "y", s.quantize(call), call.out_dtype)}
        elif op == "softmax":
            call = _calls.SoftmaxCall(req, s)
            call.rows, call.cols = req["rows"], req["cols"]
            call.x = self.inputs(req, s, ("x",))["x"]
            written = {"y": self.write(req, s, "y", s.softmax(call), call.dtype)}
        elif op in ("attention", "splitkv"):
            call = _calls.AttentionCall(req, s)
            call.op = op
            for k in ("num_seqs", "num_heads", "num_kv_heads", "head_size", "max_seqlen_q", "max_seqlen_k", "causal",
                      "softmax_scale", "num_splits", "fold_order"):
                setattr(call, k, req[k])
            # None when the subject declares no tilings (protocol 2).
            t = req.get("tiling")
            call.tiling = None if t is None else (t["index"], t.get("br"), t.get("bc"))
            call.cu_seqlens_q_host = list(req["cu_seqlens_q"])
            call.cu_seqlens_k_host = list(req["cu_seqlens_k"])
            call.cu_mask_host = None if req.get("cu_mask") is None else list(req["cu_mask"])
            cu_q = np.asarray(req["cu_seqlens_q"], dtype=np.int32)
            cu_k = np.asarray(req["cu_seqlens_k"], dtype=np.int32)
            cu_m = None if call.cu_mask_host is None else np.asarray(call.cu_mask_host, dtype=np.int64)
            if cuda:
                fw = _framework(s)
                cu_q, cu_k = _to_device(cu_q, None, fw), _to_device(cu_k, None, fw)
                cu_m = None if cu_m is None else _to_device(cu_m, None, fw)
            call.cu_seqlens_q, call.cu_seqlens_k, call.cu_mask = cu_q, cu_k, cu_m
            # Protocol 4's variants; a field the request leaves out is the variant's neutral value.
            call.head_size_v = int(req.get("head_size_v", req["head_size"]))
            call.softcap = float(req.get("softcap", 0.0))
            call.window_left = int(req.get("window_left", -1))
            call.window_right = int(req.get("window_right", -1))
            call.page_size = int(req.get("page_size", 0))
            call.num_pages = int(req.get("num_pages", 0))
            call.max_blocks = int(req.get("max_blocks", 0))
            table = req["inputs"].get("block_table")
            call.block_table_host = None if table is None else np.array(self.arena.view(table))
            # An FP8 KV cache (protocol 4): k and v are codes of kv_dtype, read times their descales.
            call.kv_dtype = req.get("kv_dtype")
            for k, v in self.inputs(req, s, ("q", "k", "v", "mask", "sinks", "block_table", "k_descale",
                                             "v_descale", "q_descale", "p_scale", "output_scale")).items():
                setattr(call, k, v)
            call.out_dtype = req.get("out_dtype")  # an FP8 output (protocol 4, fp8 "fp8_out")
            # V inside K (protocol 4, variants "v_in_k"): no v input; v is a view of K's first
            # head_size_v columns, at K's row stride (as FlashMLA reads its cache).
            call.v_in_k = bool(req.get("v_in_k", False))
            if call.v_in_k:
                call.v = call.k[..., :call.head_size_v]
            # The maxima (protocol 4, fp8 "amax"): an output the subject writes in place, NaN until it does.
            if "amax" in req["outputs"]:
                amax = np.full(2, np.nan, np.float32)
                call.amax = _to_device(amax, "fp32", _framework(s)) if cuda else amax
            res = s.attention(call)
            wants_lse = "lse" in req["outputs"]
            if wants_lse:
                if not isinstance(res, tuple) or len(res) != 2:
                    raise _Wrong(f"{s.name} attention returned {type(res).__name__}, expected (out, lse): it declares the lse feature")
                out, lse = res
            else:
                out = res[0] if isinstance(res, tuple) else res
            written = {"out": self.write(req, s, "out", out, call.out_dtype or call.dtype)}
            if wants_lse:
                written["lse"] = self.write(req, s, "lse", lse, "fp32")
            if "amax" in req["outputs"]:  # a value the subject set on a call that did not ask is ignored
                written["amax"] = self.write(req, s, "amax", call.amax, "fp32")
        else:
            return {"status": "error", "error": f"unknown op {op!r}"}
        if cuda and _framework(s) == "torch":
            import torch
            torch.cuda.synchronize()
        return {"status": "ok", "written": written}


class _Wrong(Exception):
    """The subject returned something of the wrong shape or type."""


def _one_line(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}".replace("\n", " ")
    return s[:500]


def _is_device_fault(e: BaseException) -> bool:
    text = str(e)
    return "CUDA error" in text or "illegal memory access" in text or "device-side assert" in text


def private_stdout() -> TextIO:
    """The protocol's own copy of stdout; fd 1 (and sys.stdout) then go to stderr, so whatever the
    subject's code or its libraries print, at import or at call time, cannot corrupt a reply."""
    proto_out = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto_out


def hello(req: Dict[str, Any], subjects: Sequence[Subject]) -> Dict[str, Any]:
    """The handshake reply: the newest protocol both sides speak (the request names attncheck's
    newest; an attncheck of version 1 is answered in version 1 where the subjects allow it, one of
    version 3 or older without the subjects' variants, which it would never send)."""
    version = min(PROTOCOL_VERSION, int(req.get("protocol", 1)))
    try:
        decls = [s.declaration if version >= 4 else as_protocol_3(s.declaration) for s in subjects]
        if version < 2:
            decls = [as_protocol_1(d) for d in decls]
    except CapsError as e:
        return {"status": "error", "error": str(e)}
    return {"status": "ok", "protocol": version, "worker": "attncheck.worker (python)", "subjects": decls}


def serve(subjects: Sequence[Subject], stdin: Optional[TextIO] = None, proto_out: Optional[TextIO] = None) -> None:
    """Answers requests until stdin closes or a shutdown request arrives."""
    out = private_stdout() if proto_out is None else proto_out
    stdin = stdin or sys.stdin
    server = _Server(subjects)

    seq: Any = None  # the request's number, echoed by its reply (protocol 3)

    def reply(obj: Dict[str, Any]) -> None:
        if seq is not None:
            obj = dict(obj, seq=seq)
        out.write(json.dumps(obj, allow_nan=False) + "\n")
        out.flush()

    for line in stdin:
        seq = None
        try:
            req = json.loads(line)
            seq = req.get("seq") if isinstance(req, dict) else None
            if "arena_bytes" in req:
                server.arena.ensure(int(req["arena_bytes"]))
            op = req.get("op")
            if op == "hello":
                reply(hello(req, subjects))
                continue
            if op == "shutdown":
                reply({"status": "ok"})
                return
            reply(server.handle(req))
        except Unsupported as e:
            reply({"status": "unsupported", "error": _one_line(e)})
        except DeviceError as e:
            reply({"status": "device_error", "error": _one_line(e)})
        except _Wrong as e:
            reply({"status": "error", "error": str(e)})
        except Exception as e:  # the subject failed: the harness records a crash, with this line
            traceback.print_exc(file=sys.stderr)
            reply({"status": "device_error" if _is_device_fault(e) else "error", "error": _one_line(e)})


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    proto_out = private_stdout()
    try:
        subjects = load_subjects(argv)
    except Exception as e:
        # A failed handshake: the harness reports this line and exits 2.
        traceback.print_exc(file=sys.stderr)
        proto_out.write(json.dumps({"status": "error", "error": f"cannot load {' '.join(argv)}: {_one_line(e)}"}) + "\n")
        proto_out.flush()
        return 1
    serve(subjects, proto_out=proto_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
