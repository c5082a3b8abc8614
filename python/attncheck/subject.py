"""Declaring subjects: a decorator for one function, or a class with one method per operation.

    import attncheck as ac

    @ac.subject(name="merge-np", ops="merge", dtypes=("fp32", "fp16"), lse_layout="heads_tokens")
    def merge_np(call):              # call: ac.MergeCall
        ...
        return out, lse              # out [tokens, heads, d] in call's dtype, lse fp32 in the layout

    class MyAttention(ac.Subject):
        name = "my-attn"
        ops = ("attention",)
        dtypes = ("fp16", "bf16")
        features = ("causal", "varlen", "gqa", "lse")
        def attention(self, call):   # call: ac.AttentionCall
            return out, lse

Capabilities use the worker protocol's words (the C ABI's ac_caps as names) and are validated
when the subject is created: a bad declaration raises CapsError at import, naming the field.
Contracts of real kernels: refuses_zero_keys=True (the kernel cannot take a sequence with no
keys), flushes_subnormals=True (subnormal outputs flushed), ftz_arithmetic=True (FTZ / DAZ fp32
arithmetic: subnormal inputs and intermediates flushed), empty_lse="undefined" (an empty row's LSE is garbage),
nondeterministic=True (launches may differ in bits by design; run_to_run reports the spread),
empty_states_zero_o=True (a merge that relies on producers writing O = 0 for empty states), and
tilings may be left empty. The engines' variants an attention subject accepts (protocol 4):
variants=("paged_kv", "softcap", "window", "sinks", "head_size_v") with page_sizes=[...] for
paged_kv and head_pairs=[(qk, v), ...] for head_size_v; attncheck.helpers has gather_pages,
window_mask and softcap_scores for them. max_call_seqs, max_call_tokens and max_call_keys bound the
calls the subject is given (protocol 4).
Serve subjects with `python3 -m attncheck.worker path/to/file.py:object` (or module:object).

Raise ac.Unsupported for inputs the subject refuses (skipped, not a failure) and ac.DeviceError
when the device faulted; any other exception fails the call (a crash of the subject, exit 3).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ._caps import validate_caps


class Unsupported(Exception):
    """The subject refuses this input (dtype, head size, shape): the case is skipped."""


class DeviceError(Exception):
    """The device faulted (an illegal address, a launch failure)."""


_CAP_FIELDS = ("ops", "dtypes", "memory", "head_sizes", "head_size_range", "lse_base", "lse_layout", "empty_lse",
               "features", "tilings", "max_splits", "fold_orders", "description", "refuses_zero_keys",
               "flushes_subnormals", "nondeterministic", "ftz_arithmetic", "batch_invariant", "empty_states_zero_o",
               "variants", "page_sizes", "head_pairs", "max_call_seqs", "max_call_tokens", "max_call_keys",
               "kv_dtypes", "fp8")


class Subject:
    """A subject: capabilities plus merge / softmax / attention methods for the declared ops.
    Subclass it and set the capability attributes, or build one with subject()."""

    name: Optional[str] = None
    ops: Sequence[str] = ()
    dtypes: Sequence[str] = ()
    memory: str = "host"
    head_sizes: Optional[Sequence[int]] = None
    head_size_range: Optional[Tuple[int, int]] = None
    lse_base: str = "e"
    lse_layout: str = "heads_tokens"
    empty_lse: str = "-inf"  # or "+inf", or "undefined": an empty row's LSE is then not judged
    features: Sequence[str] = ()
    tilings: Sequence[Tuple[int, int]] = ()  # (br, bc) pairs; empty: a black-box kernel that picks its own
    refuses_zero_keys: bool = False  # never called with a sequence of 0 keys
    flushes_subnormals: bool = False  # FTZ / DAZ: an exact subnormal output may come back as 0
    nondeterministic: bool = False  # launches may differ in bits by design (atomics, timing-ordered combines)
    ftz_arithmetic: bool = False  # FTZ / DAZ fp32 arithmetic: subnormal inputs and intermediates flushed
    batch_invariant: bool = False  # a sequence's bits do not depend on the other sequences of its call
    empty_states_zero_o: bool = False  # merge: relies on producers writing O = 0 for empty states
    max_splits: int = 0
    fold_orders: Sequence[str] = ()
    # Protocol 4: "paged_kv", "head_size_v", "softcap", "window", "sinks" (attention / splitkv).
    variants: Sequence[str] = ()
    page_sizes: Sequence[int] = ()  # with "paged_kv": the page sizes accepted
    head_pairs: Sequence[Tuple[int, int]] = ()  # with "head_size_v": the (qk, v) head sizes accepted
    # Protocol 4: the largest attention call the subject takes (0: no limit); attncheck's cases stay
    # within them, and a case past them is skipped (counted with its reason), never sent.
    max_call_seqs: int = 0  # sequences per call
    max_call_tokens: int = 0  # query tokens per call, all sequences
    max_call_keys: int = 0  # keys per call, all sequences
    # Protocol 4: an FP8 KV cache, "e4m3fn" / "e5m2" / "e4m3fnuz" (attention / splitkv); fp8=("descale_per_kv_head",)
    # adds descales per KV head to the one per tensor.
    kv_dtypes: Sequence[str] = ()
    fp8: Sequence[str] = ()
    description: str = ""
    # For memory="cuda": "torch" or "cupy" tensors (default: torch when importable, else cupy).
    framework: Optional[str] = None
    # The handshake declaration, validated (set by __init__).
    declaration: Dict[str, Any]
    # The decorated function of a subject built by subject().
    function: Optional[Callable[..., Any]]

    def __init__(self, **caps: Any) -> None:
        for k, v in caps.items():
            if k not in _CAP_FIELDS + ("name", "framework"):
                raise TypeError(f"unknown capability {k!r} (known: name, framework, {', '.join(_CAP_FIELDS)})")
            setattr(self, k, v)
        self.declaration = validate_caps(self.name, **{k: getattr(self, k) for k in _CAP_FIELDS})
        for op, method in (("merge", "merge"), ("softmax", "softmax"), ("attention", "attention"), ("splitkv", "attention"),
                           ("quantize", "quantize")):
            if op in self.declaration["ops"] and not callable(getattr(self, method, None)):
                from ._caps import CapsError
                raise CapsError(f"subject {self.name!r} declares {op} but has no {method}(call) method")

    def __repr__(self) -> str:
        return f"<attncheck subject {self.name}: {', '.join(self.declaration['ops'])}>"


def subject(name: str, **caps: Any) -> Callable[[Callable[..., Any]], Subject]:
    """Decorator: the function serves every op the subject declares (merge, softmax, attention,
    splitkv or quantize: the call object says which)."""
    def wrap(fn: Callable[..., Any]) -> Subject:
        s = Subject.__new__(Subject)
        for op in ("merge", "softmax", "attention", "quantize"):
            setattr(s, op, fn)
        Subject.__init__(s, name=name, **caps)
        s.function = fn
        s.__doc__ = fn.__doc__
        return s
    return wrap
