"""Subjects declaring the contracts of real kernels (worker protocol 2), in plain numpy, each the
numpy attention or merge of numpy_subjects.py with one change:

attention-np-nozero        refuses zero-key ranges (declared) and declares no tilings: it raises
                           on a sequence with no keys, so one such call is a crash; attncheck must
                           never make it.
attention-np-nozero-undeclared  the same kernel without the declaration: attncheck calls it with
                           zero keys and it crashes (the control of the one above).
merge-np-ftz               flushes every output whose value is subnormal in its format to +0
                           (FTZ), declared.
merge-np-ftz-undeclared    the same without the declaration: over budget where the exact output
                           is subnormal.
attention-np-lse-undefined the empty rows' LSE is garbage (12345.0 and NaN), declared "undefined".
attention-np-o-garbage     the same declaration, but the empty rows' O is garbage too: the O = 0
                           contract still holds and is caught.
attention-np-nondet        accumulates P V and the row sum in float32 over the keys in an order
                           that changes from call to call, as a combine ordered by atomics does,
                           declared nondeterministic: run_to_run passes and reports the spread.
attention-np-nondet-undeclared  the same without the declaration: run_to_run fails.
merge-np-guard-copies      the engines' guarded merge: where both states are empty (LSE -inf or
                           +inf) it copies the prefix O, so it relies on producers writing O = 0
                           there, declared (empty_states_zero_o): passes.
merge-np-guard-copies-undeclared  the same without the declaration: an empty state's non-zero O
                           reaches the output and merge_sentinels fails.

    build/attncheck check --worker "python3 -m attncheck.worker examples/python_worker/contract_subjects.py"
"""
import numpy as np

import attncheck as ac
from attncheck import helpers
from numpy_subjects import attention as _attention, merge_states as _merge_states, scores as _scores

_ATT = dict(ops="attention", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 256),
            features=("causal", "mask", "varlen", "gqa", "lse"))


def _no_zero_keys(call):
    ck = call.cu_seqlens_k_host
    for i in range(len(ck) - 1):
        if ck[i + 1] - ck[i] == 0:
            raise RuntimeError(f"sequence {i} has no keys: this kernel cannot take a zero-key range")
    return _attention(call)


attention_np_nozero = ac.subject(name="attention-np-nozero", refuses_zero_keys=True, **_ATT,
                                 description="numpy attention that refuses zero-key ranges, no tilings")(_no_zero_keys)
attention_np_nozero_undeclared = ac.subject(name="attention-np-nozero-undeclared", **_ATT,
                                            description="refuses zero-key ranges without saying so")(_no_zero_keys)

# The smallest normal of each format: below it, an FTZ store writes +0.
_MIN_NORMAL = {"fp32": 2.0 ** -126, "fp16": 2.0 ** -14, "bf16": 2.0 ** -126}


def _ftz(call):
    out, lse = _merge_states(call)
    vals = ac.to_float32(out, call.dtype).astype(np.float64)
    tiny = (np.abs(vals) < _MIN_NORMAL[call.dtype]) & (vals != 0)
    out = out.copy()
    out[tiny] = 0  # +0 in every format's bits
    return out, lse


_MERGE = dict(ops="merge", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 512), lse_layout="heads_tokens")
merge_np_ftz = ac.subject(name="merge-np-ftz", flushes_subnormals=True, **_MERGE,
                          description="numpy merge flushing subnormal outputs to zero, declared")(_ftz)
merge_np_ftz_undeclared = ac.subject(name="merge-np-ftz-undeclared", **_MERGE,
                                     description="numpy merge flushing subnormal outputs to zero, undeclared")(_ftz)


def _empty_rows(call):
    """[total_q, heads] booleans: the rows that see no key."""
    empty = np.zeros((call.q.shape[0], call.num_heads), bool)
    for _, qs, ks, visible in helpers.sequences(call):
        tq, tk = qs.stop - qs.start, ks.stop - ks.start
        if visible is None:
            visible = np.ones((tq, tk), bool)
        empty[qs] = helpers.empty_rows(visible)[:, None]
    return empty


def _garbage_lse(call):
    out, lse = _attention(call)
    empty = _empty_rows(call)
    lse_th = helpers.lse_from_layout(lse, call.lse_layout).copy()
    lse_th[empty] = np.where(np.arange(empty.sum()) % 2 == 0, 12345.0, np.nan).astype(np.float32)
    return out, helpers.lse_to_layout(lse_th, call.lse_layout)


def _garbage_lse_and_o(call):
    out, lse = _garbage_lse(call)
    out = out.copy()
    out[_empty_rows(call)] = ac.from_float(np.float64(0.5), call.dtype)
    return out, lse


attention_np_lse_undefined = ac.subject(name="attention-np-lse-undefined", empty_lse="undefined", tilings=[(64, 64)],
                                        **_ATT, description="garbage LSE on empty rows, declared undefined")(_garbage_lse)
attention_np_o_garbage = ac.subject(name="attention-np-o-garbage", empty_lse="undefined", tilings=[(64, 64)], **_ATT,
                                    description="garbage LSE and O on empty rows")(_garbage_lse_and_o)


_calls = [0]


def _shuffled_f32(call):
    """Attention whose fp32 sums over keys run in a different order on every call (a seeded
    permutation per call, so a test run is repeatable while two launches differ)."""
    _calls[0] += 1
    rng = np.random.default_rng(_calls[0])
    return _ordered_f32(call, rng.permutation)


def _batch_ordered_f32(call):
    """Attention whose fp32 sums over keys run backwards when the call holds more than one
    sequence, as a kernel whose schedule follows its batch: each sequence's bits depend on its
    neighbours, while a call repeats bit for bit."""
    batched = len(call.cu_seqlens_q_host) > 2
    return _ordered_f32(call, lambda n: np.arange(n)[::-1] if batched else np.arange(n))


def _ordered_f32(call, order_of):
    """Attention with fp32 sums over keys, one key at a time in the order order_of(keys) gives."""
    d = call.dtype
    tq_total, h = call.q.shape[0], call.num_heads
    out = np.zeros((tq_total, h, call.head_size), np.float32)
    lse = np.full((tq_total, h), -np.inf, np.float32)
    q = ac.to_float32(call.q, d).astype(np.float64)
    k = helpers.expand_kv_heads(ac.to_float32(call.k, d).astype(np.float64), h)
    v = helpers.expand_kv_heads(ac.to_float32(call.v, d), h)
    with np.errstate(all="ignore"):
        for _, qs, ks, visible in helpers.sequences(call):
            qi, ki, vi = q[qs], k[ks], v[ks]
            if ki.shape[0] == 0:
                continue
            s, mx, empty = _scores(call, qi, ki, visible)
            p = np.exp(s - np.where(empty[..., None], 0.0, mx)).astype(np.float32)  # [H, T, K]
            order = order_of(ki.shape[0])
            acc = np.zeros(out[qs].transpose(1, 0, 2).shape, np.float32)  # [H, T, D]
            total = np.zeros(p.shape[:2], np.float32)
            for j in order:  # one key at a time, in fp32: the order sets the rounding
                acc += p[:, :, j, None] * vi[j].astype(np.float32)[:, None, :]
                total += p[:, :, j]
            o = acc / np.where(empty, np.float32(1), total)[..., None]
            out[qs] = np.where(empty[..., None], 0, o).transpose(1, 0, 2)
            lse[qs] = np.where(empty, -np.inf, mx[..., 0] + np.log(np.where(empty, 1.0, total))).T
    return ac.from_float(out.astype(np.float64), d), helpers.lse_to_layout(lse, call.lse_layout)


attention_np_nondet = ac.subject(name="attention-np-nondet", nondeterministic=True, tilings=[(64, 64)], **_ATT,
                                 description="fp32 sums in a per-call key order, declared nondeterministic")(_shuffled_f32)
attention_np_nondet_undeclared = ac.subject(name="attention-np-nondet-undeclared", tilings=[(64, 64)], **_ATT,
                                            description="fp32 sums in a per-call key order, undeclared")(_shuffled_f32)


def _guard_copies_prefix(call):
    """The merge of numpy_subjects.py, except where both states are empty: there the prefix O is
    copied as is, and the LSE is -inf."""
    out, lse = _merge_states(call)
    pl = helpers.lse_from_layout(np.asarray(call.prefix_lse), call.lse_layout)
    sl = helpers.lse_from_layout(np.asarray(call.suffix_lse), call.lse_layout)
    both = np.isinf(pl) & np.isinf(sl)
    return np.where(both[..., None], call.prefix_out, out), lse


merge_np_guard_copies = ac.subject(name="merge-np-guard-copies", empty_states_zero_o=True, **_MERGE,
                                   description="both empty: copies the prefix O, relies on zero O, declared")(
    _guard_copies_prefix)
merge_np_guard_copies_undeclared = ac.subject(name="merge-np-guard-copies-undeclared", **_MERGE,
                                              description="both empty: copies the prefix O, undeclared")(
    _guard_copies_prefix)


attention_np_batch_variant = ac.subject(
    name="attention-np-batch-variant", batch_invariant=True, tilings=[(64, 64)], **_ATT,
    description="fp32 sums backwards in a call of several sequences, declared batch invariant")(_batch_ordered_f32)
attention_np_batch_reported = ac.subject(
    name="attention-np-batch-reported", tilings=[(64, 64)], **_ATT,
    description="fp32 sums backwards in a call of several sequences, not declared")(_batch_ordered_f32)
