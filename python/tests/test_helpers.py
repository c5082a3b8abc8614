"""The adapter helpers, each against an independent statement of its convention, and all of them
together against the exact reference: attention-np (examples/python_worker/numpy_subjects.py) is
built from them and must pass attncheck's accuracy and empty-row properties; the same subject with
top-left causal alignment must fail (so the check can fail)."""
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
