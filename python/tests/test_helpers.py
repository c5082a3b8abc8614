"""The adapter helpers, each against an independent statement of its convention, and all of them
together against the exact reference: attention-np (examples/python_worker/numpy_subjects.py) is
built from them and must pass attncheck's accuracy and empty-row properties; the same subject with
top-left causal alignment must fail (so the check can fail). The variants' helpers likewise, together
and each alone (gather_pages, window_mask, softcap_scores), with window_mask used off by one caught."""
import numpy as np
import pytest

import attncheck as ac
from attncheck import helpers


def test_causal_alignments():
    # Tq = 2 queries, Tk = 4 keys. bottom-right: the last query sees every key (chunked prefill);
    # top-left: query t sees keys 0..t.
    assert helpers.causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert helpers.causal_mask(2, 4, "top_left").tolist() == [[True, False, False, False], [True, True, False, False]]
    assert (helpers.causal_mask(3, 3) == helpers.causal_mask(3, 3, "top_left")).all()
    # More queries than keys, bottom-right: the first rows see nothing (empty rows).
    assert helpers.empty_rows(helpers.causal_mask(3, 1)).tolist() == [True, True, False]


def test_mask_to_bias_is_zero_or_minus_inf():
    b = helpers.mask_to_bias(np.array([[True, False]]))
    assert b[0, 0] == 0 and b[0, 1] == -np.inf


def test_gqa_groups_consecutive_heads():
    kv = np.arange(2)[None, :, None] * np.ones((1, 2, 1))  # KV head j holds value j
    ex = helpers.expand_kv_heads(kv, 8)
    # query head h reads KV head h // 4
    assert ex[0, :, 0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    with pytest.raises(ValueError):
        helpers.expand_kv_heads(kv, 3)


def test_lse_layout_round_trip():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)  # [tokens, heads]
    assert helpers.lse_to_layout(a, "heads_tokens").shape == (3, 2)
    assert (helpers.lse_from_layout(helpers.lse_to_layout(a, "heads_tokens"), "heads_tokens") == a).all()


def test_helpers_agree_with_the_exact_reference(binary, tmp_path):
    import numpy_subjects
    r = ac.check(numpy_subjects.attention_np, properties=["accuracy", "empty_row_contract"], cases=40, seed=3,
                 report_dir=tmp_path / "r", binary=binary)
    assert r.exit_code == 0 and all(x["status"] == "passed" for x in r.results)


def _top_left_attention(call):
    # The numpy attention with the top-left convention (torch SDPA's is_causal=True) substituted.
    import numpy_subjects
    real = helpers.causal_mask
    helpers.causal_mask = lambda tq, tk, align="bottom_right": real(tq, tk, "top_left")
    try:
        return numpy_subjects.attention(call)
    finally:
        helpers.causal_mask = real


attention_top_left = ac.subject(name="attention-np-top-left", ops="attention", dtypes=("fp32",), head_size_range=(1, 256),
                                features=("causal", "varlen", "gqa", "lse"))(_top_left_attention)


def test_top_left_causal_is_caught(binary, tmp_path):
    with pytest.raises(ac.AttncheckFailure) as e:
        ac.check(attention_top_left, properties=["accuracy"], cases=40, seed=1, max_keys=8, report_dir=tmp_path / "r",
                 binary=binary)
    msg = str(e.value)
    assert "attention-np-top-left / accuracy: failed" in msg
    assert "reproduce:" in msg and "case file:" in msg


# The variants' helpers (protocol 4), each against expectations worked out by hand from the
# conventions of plugin_abi.h's AC_VAR_* bits.

def test_gather_pages_reads_each_key_from_its_page_and_slot():
    # Page size 2, three pages. Page p slot i holds the value 10 p + i in K and -(10 p + i) in V.
    pool = np.array([[10 * p + i for i in range(2)] for p in range(3)], dtype=np.float32)  # [pages, P]
    k_pool = pool[:, :, None, None]  # [3, 2, 1, 1]
    v_pool = np.repeat(-pool[:, :, None, None], 2, axis=3)  # d_v = 2
    # Sequence 0: 3 keys on pages 2, 0 (its second entry's slot 1 is past its last key);
    # sequence 1: 1 key on page 1, its second entry past its last page (never read).
    table = np.array([[2, 0], [1, 2]], dtype=np.int32)
    k, v = helpers.gather_pages(k_pool, v_pool, table, [3, 1], 2)
    # keys: (page 2, slot 0), (2, 1), (0, 0); then (1, 0)
    assert k[:, 0, 0].tolist() == [20, 21, 0, 10]
    assert k.shape == (4, 1, 1) and v.shape == (4, 1, 2)
    assert v[:, 0, 1].tolist() == [-20, -21, 0, -10]
    # A flat table is read as [num_seqs, max_blocks]; a sequence of 0 keys takes no row.
    k2, _ = helpers.gather_pages(k_pool, v_pool, table.reshape(-1), [0, 2], 2)
    assert k2[:, 0, 0].tolist() == [10, 11]
    with pytest.raises(ValueError):
        helpers.gather_pages(k_pool, v_pool, table, [5, 1], 2)  # 5 keys need 3 pages of 2


def test_window_mask_is_bottom_right_aligned():
    # Tq = 2, Tk = 5: the diagonal of query t is key t + 3.
    assert helpers.window_mask(2, 5, 1, 0).tolist() == [[False, False, True, True, False],
                                                         [False, False, False, True, True]]
    # Tq = 3, Tk = 5 (diagonals 2, 3, 4), left unbounded, right 1: query 0 sees keys 0..3.
    assert helpers.window_mask(3, 5, -1, 1).tolist() == [[True, True, True, True, False]] + [[True] * 5] * 2
    assert helpers.window_mask(2, 5, -1, 0).tolist() == helpers.causal_mask(2, 5).tolist()
    # Both unbounded: every key; with causal, the causal mask.
    assert helpers.window_mask(3, 2, -1, -1).all()
    assert helpers.window_mask(3, 2, -1, -1, causal=True).tolist() == helpers.causal_mask(3, 2).tolist()
    # causal and a right side: the smaller bound wins (causal = right 0).
    assert helpers.window_mask(1, 4, 0, 2, causal=True).tolist() == [[False, False, False, True]]
    # Left 0, right 0: the diagonal alone; more queries than keys leaves the first rows empty.
    assert helpers.window_mask(3, 2, 0, 0).tolist() == [[False, False], [True, False], [False, True]]
    assert helpers.empty_rows(helpers.window_mask(3, 2, 0, 0)).tolist() == [True, False, False]


def test_softcap_scores_is_cap_tanh_of_scaled_scores():
    s = np.array([0.0, 1.0, -30.0, 1e6])
    capped = helpers.softcap_scores(s, 30.0)
    assert capped[0] == 0.0
    assert capped[1] == pytest.approx(30.0 * np.tanh(1.0 / 30.0), rel=1e-15)
    assert capped[2] == pytest.approx(-30.0 * np.tanh(1.0), rel=1e-15)  # tanh(1) = 0.7615941559557649
    assert capped[2] == pytest.approx(-22.847824678672946, rel=1e-14)
    assert capped[3] == 30.0  # saturated: never above the cap
    assert np.all(np.abs(helpers.softcap_scores(np.linspace(-1e4, 1e4, 101), 5.0)) <= 5.0)
    # Small scores pass almost unchanged: cap tanh(x / cap) = x - x^3 / (3 cap^2) + ...
    assert helpers.softcap_scores(np.array([0.01]), 50.0)[0] == pytest.approx(0.01 - 1e-6 / 7500, rel=1e-12)
    assert helpers.softcap_scores(s, 0) is s  # no cap
    with pytest.raises(ValueError):
        helpers.softcap_scores(s, -1.0)


def test_variant_helpers_agree_with_the_exact_reference(binary, tmp_path):
    # attention-np-variants (examples/python_worker/variants_worker.py) is built from gather_pages,
    # softcap_scores and sequences' window; attncheck draws the variants it declares into its cases.
    import variants_worker
    r = ac.check(variants_worker.attention_np_variants, properties=["accuracy", "empty_row_contract"], cases=60,
                 seed=3, report_dir=tmp_path / "r", binary=binary)
    assert r.exit_code == 0 and all(x["status"] == "passed" for x in r.results)


def _ignoring(what):
    """The variants subject with one variant's request field dropped before it computes: the check
    must catch each."""
    def attention(call):
        import variants_worker
        if what == "softcap":
            call.softcap = 0.0
        elif what == "window":
            call.window_left = call.window_right = -1
        elif what == "sinks":
            call.sinks = None
        elif what == "pages":  # the pool read as if it were the contiguous keys
            if call.page_size > 0:
                call.k = call.k.reshape(-1, *call.k.shape[2:])
                call.v = call.v.reshape(-1, *call.v.shape[2:])
                call.page_size = 0
        return variants_worker.attention(call)
    return ac.subject(name=f"attention-np-no-{what}", ops="attention", dtypes=("fp32", "fp16", "bf16"),
                      head_size_range=(1, 256), features=("causal", "mask", "varlen", "gqa", "lse"),
                      tilings=[(64, 64)], variants=("paged_kv", "softcap", "window", "sinks"),
                      page_sizes=[1, 3, 16])(attention)


attention_no_softcap = _ignoring("softcap")
attention_no_window = _ignoring("window")
attention_no_sinks = _ignoring("sinks")
attention_no_pages = _ignoring("pages")


@pytest.mark.parametrize("subject", [attention_no_softcap, attention_no_window, attention_no_sinks, attention_no_pages],
                         ids=["softcap", "window", "sinks", "pages"])
def test_an_ignored_variant_is_caught(binary, tmp_path, subject):
    with pytest.raises(ac.AttncheckFailure) as e:
        ac.check(subject, properties=["accuracy"], cases=100, seed=1, max_keys=16, report_dir=tmp_path / "r",
                 binary=binary, extra_args=["--shrink-time", "5"])
    assert f"{subject.name} / accuracy: failed" in str(e.value)


# Each variant helper alone against the exact reference: a subject declaring one variant only, so its
# cases draw that variant and no other, computed with that helper (variants_worker's attention, or for
# the window a mask built here from window_mask). Then window_mask used off by one, which must fail.

def _one_variant(name, variant, attention, **caps):
    return ac.subject(name=name, ops="attention", dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 256),
                      features=("causal", "mask", "varlen", "gqa", "lse"), tilings=[(64, 64)], variants=(variant,),
                      **caps)(attention)


def _variants_attention(call):
    import variants_worker
    return variants_worker.attention(call)


def _window_as_mask(shift):
    """variants_worker's attention with the window turned into an explicit mask by window_mask (the
    helper's use in an adapter whose library takes a mask), its left side widened by `shift` keys."""
    def attention(call):
        left, right = call.window_left, call.window_right
        if left != -1 or right != -1:
            cq, ck = call.cu_seqlens_q_host, call.cu_seqlens_k_host
            blocks, cu = [], [0]
            for i in range(len(cq) - 1):
                tq, tk = cq[i + 1] - cq[i], ck[i + 1] - ck[i]
                vis = helpers.window_mask(tq, tk, left + shift if left != -1 else -1, right)
                if call.mask is not None:
                    at = call.cu_mask_host[i]
                    vis = vis & (np.asarray(call.mask)[at:at + tq * tk].reshape(tq, tk) != 0)
                blocks.append(vis.reshape(-1).astype(np.uint8))
                cu.append(cu[-1] + tq * tk)
            call.mask = np.concatenate(blocks) if blocks else np.zeros(0, np.uint8)
            call.cu_mask_host = cu
            call.window_left = call.window_right = -1
        return _variants_attention(call)
    return attention


helpers_gather_pages = _one_variant("attention-np-gather-pages", "paged_kv", _variants_attention,
                                    page_sizes=[1, 3, 16, 64])
helpers_softcap_scores = _one_variant("attention-np-softcap-scores", "softcap", _variants_attention)
helpers_window_mask = _one_variant("attention-np-window-mask", "window", _window_as_mask(0))
helpers_window_off_by_one = _one_variant("attention-np-window-off-by-one", "window", _window_as_mask(1))


@pytest.mark.parametrize("subject", [helpers_gather_pages, helpers_softcap_scores, helpers_window_mask],
                         ids=["gather_pages", "softcap_scores", "window_mask"])
def test_each_variant_helper_agrees_with_the_exact_reference(binary, tmp_path, subject):
    r = ac.check(subject, properties=["accuracy"], cases=60, seed=5, report_dir=tmp_path / "r", binary=binary)
    assert r.exit_code == 0 and [(x["subject"], x["status"]) for x in r.results] == [(subject.name, "passed")]


def test_window_mask_off_by_one_is_caught(binary, tmp_path):
    # window_mask(tq, tk, left + 1, right): each row also sees the key just past its window's left edge.
    with pytest.raises(ac.AttncheckFailure) as e:
        ac.check(helpers_window_off_by_one, properties=["accuracy"], cases=60, seed=5, max_keys=16,
                 report_dir=tmp_path / "r", binary=binary, extra_args=["--shrink-time", "5"])
    assert "attention-np-window-off-by-one / accuracy: failed" in str(e.value)


def _refuses_pages_of_64(call):
    if call.page_size == 64:
        raise ac.Unsupported("pages of 64 are not compiled in")
    return _variants_attention(call)


pages_refusing_64 = _one_variant("attention-np-refuses-64", "paged_kv", _refuses_pages_of_64, page_sizes=[16, 64])


def test_a_refused_declared_page_size_fails_declared_variants(binary, tmp_path):
    # The subject declares pages of 16 and 64 and refuses 64: declared_variants fails it (exit 1, a
    # property failed) naming the size; accuracy takes the same refusals for skipped cases and passes.
    with pytest.raises(ac.AttncheckFailure) as e:
        ac.check(pages_refusing_64, properties=["declared_variants", "accuracy"], cases=20, seed=1,
                 report_dir=tmp_path / "r", binary=binary)
    assert e.value.result.exit_code == 1
    by_property = {x["property"]: x for x in e.value.result.results}
    assert by_property["declared_variants"]["status"] == "failed"
    assert "refused its declared page size 64" in by_property["declared_variants"]["message"]
    assert by_property["accuracy"]["status"] == "passed"
    # Accepting both sizes, the same subject passes.
    r = ac.check(helpers_gather_pages, properties=["declared_variants"], cases=20, seed=1, report_dir=tmp_path / "ok",
                 binary=binary)
    assert r.exit_code == 0


# The FP8 KV cache through the worker protocol: attention-np-fp8kv (variants_worker.py, built on
# helpers.dequantize_kv) against the exact reference and the descales' exact arithmetic; the same
# subject reading V's codes without v_descale, or with every descale read at KV head 0, must fail.

def _fp8_with(bug):
    def attention(call):
        import variants_worker
        if call.kv_dtype:
            if bug == "v_descale_ignored":
                call.v_descale = np.ones_like(np.asarray(call.v_descale))
            elif bug == "descale_of_head_0":
                call.k_descale = np.full_like(np.asarray(call.k_descale), np.asarray(call.k_descale)[0])
            elif bug == "q_descale_ignored" and call.q_descale is not None:
                call.q_descale = np.ones_like(np.asarray(call.q_descale))
            elif bug == "descale_of_sequence_0" and np.asarray(call.k_descale).size > call.num_kv_heads:
                # descales per (sequence, KV head): every sequence reads the first one's
                for name in ("k_descale", "v_descale"):
                    d = np.asarray(getattr(call, name)).reshape(-1, call.num_kv_heads)
                    setattr(call, name, np.tile(d[0], d.shape[0]))
        return variants_worker.attention(call)
    fp8 = (("descale_per_kv_head", "fp8_q") if bug.startswith("q_") else
           ("descale_per_kv_head", "descale_per_sequence") if bug.endswith("sequence_0") else ("descale_per_kv_head",))
    return ac.subject(name=f"attention-np-fp8kv-{bug.replace('_', '-')}", ops="attention",
                      dtypes=("fp32", "fp16", "bf16"), head_size_range=(1, 256),
                      features=("causal", "mask", "varlen", "gqa", "lse"), tilings=[(64, 64)],
                      kv_dtypes=("e4m3fn", "e5m2"), fp8=fp8)(attention)


fp8_v_descale_ignored = _fp8_with("v_descale_ignored")
fp8_descale_of_head_0 = _fp8_with("descale_of_head_0")
fp8_q_descale_ignored = _fp8_with("q_descale_ignored")
fp8_descale_of_sequence_0 = _fp8_with("descale_of_sequence_0")


def test_dequantize_kv_applies_each_kv_heads_descale():
    # Two keys, two KV heads, d = 1: e4m3fn codes 0x38 (1.0) and 0x44 (3.0); descales 0.5 and 2.
    k = np.array([[[0x38], [0x44]], [[0x44], [0x38]]], np.uint8)
    kk, vv = helpers.dequantize_kv(k, k, "e4m3fn", np.array([0.5, 2.0], np.float32), np.array([0.25], np.float32))
    assert kk[:, :, 0].tolist() == [[0.5, 6.0], [1.5, 2.0]]
    assert vv[:, :, 0].tolist() == [[0.25, 0.75], [0.75, 0.25]]


def test_dequantize_q_applies_its_kv_heads_descale():
    # One token, four query heads over two KV heads (group 2), d = 1: e4m3fn codes 0x38 (1.0), 0x44
    # (3.0), 0x40 (2.0), 0x30 (0.5); descales 0.5 (KV head 0: query heads 0, 1) and 4 (heads 2, 3).
    q = np.array([[[0x38], [0x44], [0x40], [0x30]]], np.uint8)
    qq = helpers.dequantize_q(q, "e4m3fn", np.array([0.5, 4.0], np.float32), 2)
    assert qq[0, :, 0].tolist() == [0.5, 1.5, 8.0, 2.0]
    assert helpers.dequantize_q(q, "e4m3fn", np.array([0.25], np.float32), 2)[0, :, 0].tolist() == [
        0.25, 0.75, 0.5, 0.125]


def test_dequantize_applies_each_sequences_descales():
    # Two sequences of 1 and 2 keys (tokens), one KV head, two query heads, d = 1, e4m3fn codes 0x38
    # (1.0) everywhere: descales per (sequence, KV head) 0.5 and 4 give keys 0.5, 4, 4 and tokens
    # alike; without cu_seqlens they are refused.
    k = np.full((3, 1, 1), 0x38, np.uint8)
    kk, vv = helpers.dequantize_kv(k, k, "e4m3fn", np.array([0.5, 4.0], np.float32),
                                   np.array([2.0, 0.25], np.float32), [0, 1, 3])
    assert kk[:, 0, 0].tolist() == [0.5, 4.0, 4.0]
    assert vv[:, 0, 0].tolist() == [2.0, 0.25, 0.25]
    q = np.full((3, 2, 1), 0x38, np.uint8)
    assert helpers.dequantize_q(q, "e4m3fn", np.array([0.5, 4.0], np.float32), 1, [0, 1, 3])[:, :, 0].tolist() == [
        [0.5, 0.5], [4.0, 4.0], [4.0, 4.0]]
    with pytest.raises(ValueError):
        helpers.dequantize_kv(k, k, "e4m3fn", np.array([0.5, 4.0], np.float32), np.array([2.0, 0.25], np.float32))


def test_fp8_q_subject_agrees_with_the_exact_reference(binary, tmp_path):
    import variants_worker
    r = ac.check(variants_worker.attention_np_fp8, properties=["accuracy", "declared_variants", "fp8_descales"],
                 cases=40, seed=4, report_dir=tmp_path / "r", binary=binary)
    assert r.exit_code == 0 and all(x["status"] == "passed" for x in r.results)
    assert len(r.results) == 3


def test_fp8_kv_subject_agrees_with_the_exact_reference(binary, tmp_path):
    import variants_worker
    r = ac.check(variants_worker.attention_np_fp8kv,
                 properties=["accuracy", "declared_variants", "fp8_descales", "empty_row_contract"], cases=40,
                 seed=4, report_dir=tmp_path / "r", binary=binary)
    assert r.exit_code == 0 and all(x["status"] == "passed" for x in r.results)
    assert {x["property"] for x in r.results} == {"accuracy", "declared_variants", "fp8_descales",
                                                  "empty_row_contract"}


@pytest.mark.parametrize("subject", [fp8_v_descale_ignored, fp8_descale_of_head_0, fp8_q_descale_ignored,
                                     fp8_descale_of_sequence_0],
                         ids=["v_descale_ignored", "descale_of_head_0", "q_descale_ignored", "descale_of_sequence_0"])
def test_an_fp8_descale_bug_is_caught_by_fp8_descales(binary, tmp_path, subject):
    with pytest.raises(ac.AttncheckFailure) as e:
        ac.check(subject, properties=["fp8_descales"], cases=40, seed=1, report_dir=tmp_path / "r", binary=binary,
                 extra_args=["--shrink-time", "5"])
    assert f"{subject.name} / fp8_descales: failed" in str(e.value)
