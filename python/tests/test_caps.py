import pytest

import attncheck as ac


def test_valid_declaration_is_the_handshake_dictionary():
    s = ac.subject(name="m", ops="merge", dtypes=("fp16",), lse_layout="tokens_heads")(lambda call: None)
    d = s.declaration
    assert d["ops"] == ["merge"] and d["dtypes"] == ["fp16"] and d["lse_layout"] == "tokens_heads"
    assert d["head_size_min"] == 1 and d["head_size_max"] == 512 and d["empty_lse"] == "-inf"


@pytest.mark.parametrize("caps, message", [
    (dict(ops="merge", dtypes=("fp8",)), "unknown word 'fp8' in 'dtypes' (known: fp32, fp16, bf16)"),
    (dict(ops="fused", dtypes="fp16"), "unknown word 'fused' in 'ops'"),
    (dict(ops=(), dtypes="fp16"), "declares no operation"),
    (dict(ops="merge", dtypes="fp16", lse_layout="thd"), "lse_layout must be one of heads_tokens, tokens_heads"),
    (dict(ops="merge", dtypes="fp16", empty_lse="nan"), "empty_lse must be '-inf' or '+inf'"),
    (dict(ops="merge", dtypes="fp16", head_size_range=(0, 8)), "head_size_range (0, 8) is empty or starts below 1"),
    (dict(ops="splitkv", dtypes="fp16"), "declares splitkv but max_splits < 1"),
    (dict(ops="attention", dtypes="fp16", tilings=[(64, 0)]), "has Br or Bc <= 0"),
    (dict(ops="merge", dtypes="fp16", memory="gpu"), "memory must be 'host' or 'cuda'"),
])
def test_bad_declarations_are_refused_at_registration(caps, message):
    with pytest.raises(ac.CapsError) as e:
        ac.subject(name="bad", **caps)(lambda call: None)
    assert message in str(e.value)


def test_bad_name_and_missing_method():
    with pytest.raises(ac.CapsError, match="must be non-empty letters"):
        ac.subject(name="has space", ops="merge", dtypes="fp32")(lambda call: None)

    class NoAttention(ac.Subject):
        name = "no-attn"
        ops = ("attention",)
        dtypes = ("fp16",)
    with pytest.raises(ac.CapsError, match="declares attention but has no attention"):
        NoAttention()
