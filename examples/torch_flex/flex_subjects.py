"""torch.nn.attention.flex_attention as an attncheck subject, with the engines' variants it can
express itself: the logit softcap as a score_mod, bottom-right causal, the sliding window and an
explicit mask as one mask_mod (a BlockMask), and its own LSE (return_lse). Needs a CUDA GPU and
torch >= 2.5.

    build/attncheck check --worker "python3 -m attncheck.worker examples/torch_flex/flex_subjects.py" \\
        --subject flex-attention --report-dir flex-report

What the adapter does, and why:
- Scale, then cap: flex multiplies q.k by the scale before score_mod sees the score, so
  score_mod = cap * tanh(score / cap) is attncheck's declared order.
- Visibility: the sequence's [Tq, Tk] boolean block (helpers.sequences: the mask, bottom-right
  causal and the window combined) is read by the mask_mod; flex's own block sparsity skips the
  blocks it hides.
- LSE: flex returns its logsumexp per (batch, head, query), declared natural here (lse_convention
  says if it is not). Rows with no visible key: flex returns O = 0 and LSE = -inf itself; nothing
  is patched.
- Compilation: flex_attention's fused kernel runs only under torch.compile (eager flex is a
  reference implementation, not the kernel). Every new shape compiles anew (dynamic=False: with
  dynamic shapes, inductor failed to lower the mask_mod's captured visibility tensor on the H200,
  "unbacked_bindings"), which takes seconds. So a sequence is padded to a bucket with zeros,
  queries to the next power of two (not to 128, so that a short query block stays short) and keys
  to the next power of two of at least 128 (flex's key block); the mask_mod hides the padded keys
  from every row, as flex hides a key block's tail past the last key, and the padded rows are
  dropped. The cap is a 0-d tensor read by the score_mod, not a constant, so a new cap is no new
  program. Run it with a generous --call-timeout all the same. The cache limit is raised so that no
  call falls back to eager. FLEX_EAGER=1 runs eager flex instead; FLEX_BUCKET=0 compiles each exact
  shape, as before.
- Not declared: sinks (flex has no denominator-only term), paged K / V (flex reads contiguous K and
  V here; its paged helpers are a separate API).
"""
import os

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import attncheck as ac
from attncheck import helpers

torch._dynamo.config.cache_size_limit = 1024
_flex = flex_attention if os.environ.get("FLEX_EAGER") == "1" else torch.compile(flex_attention, dynamic=False)


def _bhtd(x, num_heads=None):
    if num_heads is not None:
        x = helpers.expand_kv_heads(x, num_heads)
    return x.transpose(0, 1).unsqueeze(0)  # [T, H, D] -> [1, H, T, D]


_BUCKET = os.environ.get("FLEX_BUCKET", "1") == "1"


def _pow2(n, least):
    return max(least, 1 << (n - 1).bit_length())


def _padded(x, rows):
    """[T, H, D] with zero rows appended up to `rows`."""
    return x if x.shape[0] == rows else torch.cat([x, x.new_zeros((rows - x.shape[0],) + x.shape[1:])])


def attention(call):
    out = torch.zeros_like(call.q)
    lse = torch.full((call.q.shape[0], call.num_heads), float("-inf"), device=call.q.device, dtype=torch.float32)
    score_mod = None
    if float(call.softcap) > 0:
        cap = torch.tensor(float(call.softcap), dtype=torch.float32, device=call.q.device)

        def score_mod(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)
    for _, qs, ks, visible in helpers.sequences(call):
        tq, tk = qs.stop - qs.start, ks.stop - ks.start
        if tq == 0 or tk == 0:
            continue  # no queries, or every row empty: O = 0, LSE = -inf already
        bq, bk = (_pow2(tq, 1), _pow2(tk, 128)) if _BUCKET else (tq, tk)
        q = _bhtd(_padded(call.q[qs], bq))
        k = _bhtd(_padded(call.k[ks], bk), call.num_heads)
        v = _bhtd(_padded(call.v[ks], bk), call.num_heads)
        block_mask = None
        if visible is not None or (bq, bk) != (tq, tk):
            vis = torch.zeros((bq, bk), dtype=torch.bool, device=q.device)
            vis[:tq, :tk] = True if visible is None else torch.from_numpy(visible.copy()).to(q.device)

            def mask_mod(b, h, q_idx, kv_idx):
                return vis[q_idx, kv_idx]

            block_mask = create_block_mask(mask_mod, None, None, bq, bk, device=q.device)
        o, l = _flex(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=float(call.softmax_scale),
                     return_lse=True)
        out[qs] = o[0, :, :tq].transpose(0, 1)
        lse[qs] = l[0, :, :tq].transpose(0, 1).float()
    return out, helpers.lse_to_layout(lse, call.lse_layout)


# Its Triton kernel flushes subnormal fp32 intermediates: undeclared, outputs whose exact value is
# subnormal came back off by 2 to 11 budgets on the H200 (bf16 -1.02e-38 as -0x1.fp-127; fp32
# -3.98e-41 as +0x1.4cp-143), every normal output within budget; so it declares FTZ / DAZ arithmetic.
flex = ac.subject(
    name="flex-attention", ops="attention", memory="cuda", framework="torch", dtypes=("fp16", "bf16", "fp32"),
    ftz_arithmetic=True,
    head_sizes=[64, 128], features=("causal", "mask", "varlen", "gqa", "lse"), lse_layout="heads_tokens",
    tilings=[(128, 128)], variants=("softcap", "window"),
    description="torch flex_attention (compiled): softcap as score_mod, causal, window and mask as mask_mod, its LSE")(
        attention)
