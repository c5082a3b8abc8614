"""The capability vocabulary of a subject: the same words as the worker protocol's handshake
(harness/WORKER_PROTOCOL.md), which are the C ABI's ac_caps fields written as names.
validate_caps() rejects anything the harness would reject, with one clear message, at
registration time rather than at the first call."""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

OPS = ("merge", "softmax", "attention", "splitkv", "quantize")
DTYPES = ("fp32", "fp16", "bf16")
MEMORY = ("host", "cuda")
LSE_BASES = ("e", "2")
LSE_LAYOUTS = ("heads_tokens", "tokens_heads")
EMPTY_LSE = ("-inf", "+inf", "undefined")
FEATURES = ("causal", "mask", "varlen", "gqa", "lse", "naive_exp", "scores_in_input_type", "flushed_exp")
FOLDS = ("left", "right", "tree")
# Protocol 4: the engines' variants an attention / split-KV subject accepts (the C ABI's AC_VAR_*).
VARIANTS = ("paged_kv", "head_size_v", "softcap", "window", "sinks", "v_in_k")
# Protocol 4: an FP8 KV cache's formats (the C ABI's ac_caps.kv_dtypes) and contract (AC_FP8_*).
KV_DTYPES = ("e4m3fn", "e5m2", "e4m3fnuz")
FP8 = ("descale_per_kv_head", "fp8_q", "p_e4m3", "descale_per_sequence", "saturate", "fp8_q_required",
       "truncated_sums", "p_scale", "fp8_out", "amax")


# The ranges of every declared number (abi/include/attncheck/plugin_abi.h, AC_MAX_*): attncheck
# refuses a subject outside them at the handshake; checked here so the user hears it at
# registration.
MAX_NAME_CHARS = 64
MAX_HEAD_SIZE = 1024
MAX_HEAD_SIZES = 64
MAX_TILINGS = 64
MAX_TILE = 1024
MAX_SPLITS = 1024
MAX_PAGE_SIZE = 4096
MAX_PAGE_SIZES = 16
MAX_HEAD_PAIRS = 16
INT32_MAX = 2**31 - 1


class CapsError(ValueError):
    """A subject declared capabilities the harness would refuse."""


def _words(name: Optional[str], field: str, value: Any, known: Sequence[str]) -> Tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    try:
        value = tuple(value)
    except TypeError:
        raise CapsError(f"subject {name!r}: {field!r} must be a word or a list of words from {', '.join(known)}") from None
    for w in value:
        if w not in known:
            raise CapsError(f"subject {name!r}: unknown word {w!r} in {field!r} (known: {', '.join(known)})")
    return cast(Tuple[str, ...], value)


def validate_caps(name: Optional[str], *, ops: Any, dtypes: Any, memory: str = "host",
                  head_sizes: Optional[Sequence[int]] = None, head_size_range: Optional[Tuple[int, int]] = None,
                  lse_base: str = "e", lse_layout: str = "heads_tokens", empty_lse: str = "-inf", features: Any = (),
                  tilings: Sequence[Tuple[int, int]] = (), max_splits: int = 0, fold_orders: Any = (),
                  description: str = "", refuses_zero_keys: bool = False, flushes_subnormals: bool = False,
                  nondeterministic: bool = False, ftz_arithmetic: bool = False,
                  batch_invariant: bool = False, empty_states_zero_o: bool = False, variants: Any = (),
                  page_sizes: Sequence[int] = (), head_pairs: Sequence[Tuple[int, int]] = (),
                  max_call_seqs: int = 0, max_call_tokens: int = 0, max_call_keys: int = 0,
                  kv_dtypes: Any = (), fp8: Any = ()) -> Dict[str, Any]:
    """Returns the handshake dictionary of one subject (protocol 4; hello() writes the older forms),
    or raises CapsError naming the problem.

    refuses_zero_keys: the subject cannot be called with a sequence of 0 keys; attncheck never does.
    flushes_subnormals: outputs whose exact value is subnormal may come back as 0 (FTZ / DAZ).
    ftz_arithmetic: the kernel computes in FTZ / DAZ fp32 arithmetic (fast math): subnormal inputs
    read as 0 and fp32 intermediates below 2^-126 flushed; the budgets allow each flushed term.
    nondeterministic: two launches on the same input may differ in bits (atomics, timing-ordered
    combines); run_to_run then reports the spread instead of failing.
    batch_invariant: a sequence's output does not depend on the other sequences of its call;
    batch_invariance then fails on any bit that changes (undeclared, it reports what changed).
    empty_states_zero_o: the merge relies on its producers writing O = 0 for an empty state (LSE
    -inf or +inf), as a guard that copies the prefix output does; the generators then give empty
    states a zero O (undeclared, their O is arbitrary and must not reach the output).
    empty_lse="undefined": an empty row's LSE is not judged (its O = 0 still is).
    tilings: may be empty for attention / splitkv (a black-box kernel picks its own).
    variants (protocol 4, attention / splitkv only): the engines' variants the subject accepts, each
    drawn into its cases: "paged_kv" (K / V page pools read through a block table; page_sizes lists
    the page sizes accepted, 1 to 16 of them, each 1..4096), "head_size_v" (V and O have their own
    head size; head_pairs lists the (qk, v) pairs accepted, 1 to 16, each size 1..1024), "softcap",
    "window" (a sliding window), "sinks" (one logit per query head in the softmax denominator) and
    "v_in_k" (with "head_size_v": V may be K's first head_size_v columns, AttentionCall.v_in_k).
    AttentionCall documents what each adds to a call. A subject declaring one must still accept
    calls that do not use it.
    max_call_seqs, max_call_tokens, max_call_keys (protocol 4): the largest call the subject takes,
    in sequences, query tokens and keys (all sequences), 0 for no limit; attncheck's cases stay
    within them, and one past them is skipped with its reason, never sent.
    kv_dtypes (protocol 4; attention / splitkv, or quantize / merge below): the FP8 KV cache formats the subject reads,
    "e4m3fn", "e5m2" and / or "e4m3fnuz": k and v then arrive as one-byte codes of kv_dtype with their fp32
    descales (AttentionCall: kv_dtype, k_descale, v_descale); fp8=("descale_per_kv_head",) adds one
    descale per KV head to the one per tensor, "descale_per_sequence" one per (sequence, KV head). out stays in dtypes, and q unless fp8 holds "fp8_q"
    (q then may arrive as codes of kv_dtype too, with q_descale; with "fp8_q_required" it always does
    in FP8 calls, never beside an FP8 cache in dtypes). "p_e4m3" declares that in FP8 calls
    P is held in e4m3fn with the offset 2^8 before P V (FlashAttention-3; its budget is allowed).
    "truncated_sums" (with "fp8_q") declares that the e4m3 products are summed by Hopper's FP8 tensor
    cores, whose accumulator truncates to 13 bits, with partial sums moved to fp32 at least every 128
    products (AC_FP8_TRUNCATED_SUMS; its budget is allowed). "p_scale" (with "p_e4m3") declares
    that P's scale is the call's AttentionCall.p_scale (cuDNN's scale_s, a one-element fp32 array,
    at most 448; None for the fixed 2^8): P stored as e4m3fn(p * p_scale), read over p_scale.
    "fp8_out" declares that it may be asked for O in FP8 (cuDNN's scale_o: AttentionCall.out_dtype one
    of kv_dtypes, output_scale a one-element fp32 array): out then holds the codes of O / output_scale,
    saturating with "saturate", else overflowing to NaN (e5m2: infinity). "amax" declares that it
    writes cuDNN's Amax_S and Amax_O when a call asks (AttentionCall.amax, a two-element fp32 array,
    not None): [0] the largest normalised softmax weight e^(s - LSE) over every row and visible key
    (before P's scale), [1] the largest |O| before output_scale and any cast.
    ops "quantize" (protocol 4): a KV-cache quantiser writing the kv_dtypes formats (QuantizeCall);
    fp8 "saturate" says its casts saturate (else overflow gives NaN, or e5m2's infinity), and
    "descale_per_kv_head" that it takes one scale per head. A merge declaring kv_dtypes (with
    "saturate") may be asked for FP8 outputs (MergeCall.out_dtype, output_scale)."""
    if not isinstance(name, str) or not name or any(not (c.isascii() and (c.isalnum() or c in "-_.")) for c in name):
        raise CapsError(f"subject name {name!r} must be non-empty letters, digits, '-', '_', '.'")
    if len(name) > MAX_NAME_CHARS:
        raise CapsError(f"subject name {name[:20]!r}... is {len(name)} characters long, more than {MAX_NAME_CHARS}")
    ops = _words(name, "ops", ops, OPS)
    dtypes = _words(name, "dtypes", dtypes, DTYPES)
    features = _words(name, "features", features, FEATURES)
    fold_orders = _words(name, "fold_orders", fold_orders, FOLDS)
    if not ops:
        raise CapsError(f"subject {name!r} declares no operation (ops)")
    if not dtypes:
        raise CapsError(f"subject {name!r} declares no dtype (dtypes)")
    if memory not in MEMORY:
        raise CapsError(f"subject {name!r}: memory must be 'host' or 'cuda', not {memory!r}")
    if str(lse_base) not in LSE_BASES:
        raise CapsError(f"subject {name!r}: lse_base must be 'e' or 2, not {lse_base!r}")
    if lse_layout not in LSE_LAYOUTS:
        raise CapsError(f"subject {name!r}: lse_layout must be one of {', '.join(LSE_LAYOUTS)}, not {lse_layout!r}")
    if empty_lse not in EMPTY_LSE:
        raise CapsError(f"subject {name!r}: empty_lse must be '-inf', '+inf' or 'undefined', not {empty_lse!r}")
    for field, value in (("refuses_zero_keys", refuses_zero_keys), ("flushes_subnormals", flushes_subnormals),
                         ("nondeterministic", nondeterministic), ("ftz_arithmetic", ftz_arithmetic),
                         ("batch_invariant", batch_invariant), ("empty_states_zero_o", empty_states_zero_o)):
        if not isinstance(value, bool):
            raise CapsError(f"subject {name!r}: {field} must be True or False, not {value!r}")
    d = {"name": name, "description": description or name, "ops": list(ops), "dtypes": list(dtypes),
         "memory": memory, "lse_base": str(lse_base), "lse_layout": lse_layout, "empty_lse": empty_lse,
         "features": list(features), "refuses_zero_keys": refuses_zero_keys,
         "flushes_subnormals": flushes_subnormals, "nondeterministic": nondeterministic,
         "ftz_arithmetic": ftz_arithmetic, "batch_invariant": batch_invariant,
         "empty_states_zero_o": empty_states_zero_o}
    if head_sizes is not None and head_size_range is not None:
        raise CapsError(f"subject {name!r}: give head_sizes or head_size_range, not both")
    if head_sizes is not None:
        hs = _int_list(name, "head_sizes", head_sizes)
        if not hs or any(h <= 0 for h in hs):
            raise CapsError(f"subject {name!r}: head_sizes must be a non-empty list of positive sizes")
        if len(hs) > MAX_HEAD_SIZES:
            raise CapsError(f"subject {name!r}: head_sizes holds {len(hs)} sizes, more than {MAX_HEAD_SIZES}")
        for h in hs:
            if h > MAX_HEAD_SIZE:
                raise CapsError(f"subject {name!r}: head size {h} is out of range 1..{MAX_HEAD_SIZE}")
        d["head_sizes"] = hs
    else:
        lo, hi = head_size_range if head_size_range is not None else (1, 512)
        lo, hi = _int(name, "head_size_range", lo), _int(name, "head_size_range", hi)
        if lo < 1 or hi < lo:
            raise CapsError(f"subject {name!r}: head_size_range ({lo}, {hi}) is empty or starts below 1")
        if lo > MAX_HEAD_SIZE or hi > INT32_MAX:
            raise CapsError(f"subject {name!r}: head_size_range ({lo}, {hi}) is out of range: the minimum "
                            f"1..{MAX_HEAD_SIZE}, the maximum up to {INT32_MAX}")
        d["head_size_min"], d["head_size_max"] = lo, hi
    tl = []
    for t in tilings:
        try:
            br, bc = (_int(name, "tilings", x) for x in t)
        except (TypeError, ValueError):
            raise CapsError(f"subject {name!r}: tilings must be (br, bc) pairs, got {t!r}") from None
        if br <= 0 or bc <= 0:
            raise CapsError(f"subject {name!r}: tiling {t!r} has Br or Bc <= 0")
        if br > MAX_TILE or bc > MAX_TILE:
            raise CapsError(f"subject {name!r}: tiling {t!r}: Br or Bc is out of range 1..{MAX_TILE}")
        tl.append([br, bc])
    if len(tl) > MAX_TILINGS:
        raise CapsError(f"subject {name!r}: {len(tl)} tilings, more than {MAX_TILINGS}")
    # Empty for a black-box kernel: protocol 2 lets attention subjects declare no tilings.
    d["tilings"] = tl
    max_splits = _int(name, "max_splits", max_splits)
    if "splitkv" in ops:
        if max_splits < 1:
            raise CapsError(f"subject {name!r} declares splitkv but max_splits < 1")
        if not fold_orders:
            raise CapsError(f"subject {name!r} declares splitkv but no fold_orders")
    if not 0 <= max_splits <= MAX_SPLITS:
        raise CapsError(f"subject {name!r}: max_splits {max_splits} is out of range 0..{MAX_SPLITS}")
    d["max_splits"] = max_splits
    d["fold_orders"] = list(fold_orders)
    variants = _words(name, "variants", variants, VARIANTS)
    if variants and "attention" not in ops and "splitkv" not in ops:
        raise CapsError(f"subject {name!r} declares variants without attention or splitkv")
    ps = _int_list(name, "page_sizes", page_sizes)
    if "paged_kv" in variants:
        if not 1 <= len(ps) <= MAX_PAGE_SIZES:
            raise CapsError(f"subject {name!r} declares paged_kv with {len(ps)} page_sizes; it needs 1 to {MAX_PAGE_SIZES}")
    elif ps:
        raise CapsError(f"subject {name!r}: page_sizes given without the paged_kv variant")
    for i, p in enumerate(ps):
        if not 1 <= p <= MAX_PAGE_SIZE:
            raise CapsError(f"subject {name!r}: page size {p} is out of range 1..{MAX_PAGE_SIZE}")
        if p in ps[:i]:
            raise CapsError(f"subject {name!r}: page size {p} is named twice")
    hp = []
    for pair in head_pairs:
        try:
            qk, dv = (_int(name, "head_pairs", x) for x in pair)
        except (TypeError, ValueError):
            raise CapsError(f"subject {name!r}: head_pairs must be (qk, v) pairs, got {pair!r}") from None
        if not (1 <= qk <= MAX_HEAD_SIZE and 1 <= dv <= MAX_HEAD_SIZE):
            raise CapsError(f"subject {name!r}: head pair {pair!r}: a size is out of range 1..{MAX_HEAD_SIZE}")
        hp.append([qk, dv])
    if "head_size_v" in variants:
        if not 1 <= len(hp) <= MAX_HEAD_PAIRS:
            raise CapsError(f"subject {name!r} declares head_size_v with {len(hp)} head_pairs; it needs 1 to "
                            f"{MAX_HEAD_PAIRS}")
    elif hp:
        raise CapsError(f"subject {name!r}: head_pairs given without the head_size_v variant")
    if "v_in_k" in variants and "head_size_v" not in variants:
        raise CapsError(f"subject {name!r}: variant \"v_in_k\" needs \"head_size_v\" (a V head size below K's)")
    if "v_in_k" in variants and not any(dv < qk for qk, dv in hp):
        raise CapsError(f"subject {name!r}: variant \"v_in_k\" needs a head pair whose V head size is below K's")
    limits: Dict[str, int] = {}
    for limit, count, top in (("max_call_seqs", max_call_seqs, 2**31 - 1),
                              ("max_call_tokens", max_call_tokens, 2**31 - 1), ("max_call_keys", max_call_keys, 2**63 - 1)):
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= top:
            raise CapsError(f"subject {name!r}: {limit} must be an integer from 0 (no limit) to {top}, not {count!r}")
        if count:
            limits[limit] = count
    kv = _words(name, "kv_dtypes", kv_dtypes, KV_DTYPES)
    fp8_words = _words(name, "fp8", fp8, FP8)
    if kv and not {"attention", "splitkv", "quantize", "merge"} & set(ops):
        raise CapsError(f"subject {name!r} declares kv_dtypes without attention, splitkv, quantize or merge")
    if fp8_words and not kv:
        raise CapsError(f"subject {name!r}: fp8 given without kv_dtypes")
    if "quantize" in ops and not kv:
        raise CapsError(f"subject {name!r} declares quantize but no FP8 format to write (kv_dtypes)")
    if "merge" in ops and kv and "saturate" not in fp8_words:
        raise CapsError(f"subject {name!r}: a merge writing FP8 outputs (kv_dtypes) declares fp8=(\"saturate\",)")
    if "fp8_q_required" in fp8_words and "fp8_q" not in fp8_words:
        raise CapsError(f"subject {name!r}: fp8 \"fp8_q_required\" needs \"fp8_q\"")
    if "truncated_sums" in fp8_words and "fp8_q" not in fp8_words:
        raise CapsError(f"subject {name!r}: fp8 \"truncated_sums\" needs \"fp8_q\"")
    if "p_scale" in fp8_words and "p_e4m3" not in fp8_words:
        raise CapsError(f"subject {name!r}: fp8 \"p_scale\" needs \"p_e4m3\"")
    if "fp8_out" in fp8_words and not {"attention", "splitkv"} & set(ops):
        raise CapsError(f"subject {name!r}: fp8 \"fp8_out\" is an attention's or a split-KV's declaration")
    if "amax" in fp8_words and not {"attention", "splitkv"} & set(ops):
        raise CapsError(f"subject {name!r}: fp8 \"amax\" is an attention's or a split-KV's declaration")
    if "saturate" in fp8_words and not {"quantize", "merge"} & set(ops) and "fp8_out" not in fp8_words:
        raise CapsError(f"subject {name!r}: fp8 \"saturate\" is a quantiser's, a merge's or an FP8 output's "
                        "declaration")
    # Written only where declared, as attncheck writes its own subjects: a subject without variants
    # is declared as in protocol 3.
    if variants:
        d["variants"] = list(variants)
    if ps:
        d["page_sizes"] = ps
    if hp:
        d["head_pairs"] = hp
    d.update(limits)
    if kv:
        d["kv_dtypes"] = list(kv)
    if fp8_words:
        d["fp8"] = list(fp8_words)
    return d


def _int(name: Optional[str], field: str, x: Any) -> int:
    """x as an integer: an int, or anything with __index__ (numpy's integers). A float, a bool or a
    string is refused, never truncated or read as 0 or 1, as the raw protocol refuses them."""
    if isinstance(x, bool):
        raise CapsError(f"subject {name!r}: {field} must hold integers, got {x!r}")
    try:
        return operator.index(x)
    except TypeError:
        raise CapsError(f"subject {name!r}: {field} must hold integers, got {x!r}") from None


def _int_list(name: Optional[str], field: str, value: Any) -> List[int]:
    try:
        items = list(value)
    except TypeError:
        raise CapsError(f"subject {name!r}: {field} must be a list of integers, got {value!r}") from None
    return [_int(name, field, x) for x in items]


# The fields protocol 2 added; as_protocol_1() removes them.
V2_FIELDS = ("refuses_zero_keys", "flushes_subnormals", "nondeterministic", "ftz_arithmetic", "batch_invariant",
             "empty_states_zero_o")


def as_protocol_1(d: Dict[str, Any]) -> Dict[str, Any]:
    """The declaration for an attncheck that speaks only protocol 1, or CapsError when the subject
    relies on something version 1 cannot say (its result would be judged by the wrong rules)."""
    needs = [f for f in V2_FIELDS if d.get(f)]
    if d["empty_lse"] == "undefined":
        needs.append("empty_lse='undefined'")
    if needs:
        raise CapsError(f"subject {d['name']!r} declares {', '.join(needs)}, which needs worker protocol 2; "
                        "this attncheck speaks protocol 1 (upgrade attncheck)")
    d1 = {k: v for k, v in d.items() if k not in V2_FIELDS}
    if ("attention" in d["ops"] or "splitkv" in d["ops"]) and not d1["tilings"]:
        # Version 1 requires one tiling; a nominal 64 x 64 stands in for the kernel's own choice.
        d1["tilings"] = [[64, 64]]
    return d1


# The fields protocol 4 added; as_protocol_3() removes them.
V4_FIELDS = ("variants", "page_sizes", "head_pairs", "max_call_seqs", "max_call_tokens", "max_call_keys", "kv_dtypes",
             "fp8")


def as_protocol_3(d: Dict[str, Any]) -> Dict[str, Any]:
    """The declaration for an attncheck that speaks protocol 3 at most (or 2): without the variants
    and the call limits (such an attncheck may send a call past them: the subject refuses it).
    Unlike a protocol-2 contract, a variant relaxes nothing: such an attncheck never sends one, and
    judges the subject's plain calls by the same rules. Left out, the variants go untested there."""
    return {k: v for k, v in d.items() if k not in V4_FIELDS}
