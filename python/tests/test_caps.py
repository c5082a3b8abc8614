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
    (dict(ops="merge", dtypes="fp16", empty_lse="nan"), "empty_lse must be '-inf', '+inf' or 'undefined'"),
    (dict(ops="merge", dtypes="fp16", refuses_zero_keys="yes"), "refuses_zero_keys must be True or False"),
    (dict(ops="merge", dtypes="fp16", flushes_subnormals=1), "flushes_subnormals must be True or False"),
    (dict(ops="merge", dtypes="fp16", nondeterministic="sometimes"), "nondeterministic must be True or False"),
    (dict(ops="attention", dtypes="bf16", ftz_arithmetic="fast-math"), "ftz_arithmetic must be True or False"),
    (dict(ops="attention", dtypes="bf16", batch_invariant=1), "batch_invariant must be True or False"),
    (dict(ops="merge", dtypes="fp16", empty_states_zero_o="yes"), "empty_states_zero_o must be True or False"),
    (dict(ops="merge", dtypes="fp16", head_size_range=(0, 8)), "head_size_range (0, 8) is empty or starts below 1"),
    (dict(ops="splitkv", dtypes="fp16"), "declares splitkv but max_splits < 1"),
    (dict(ops="attention", dtypes="fp16", tilings=[(64, 0)]), "has Br or Bc <= 0"),
    (dict(ops="merge", dtypes="fp16", memory="gpu"), "memory must be 'host' or 'cuda'"),
    # The ranges of plugin_abi.h (AC_MAX_*), which attncheck checks at the handshake.
    (dict(ops="splitkv", dtypes="fp16", max_splits=2**31 - 1, fold_orders="left"),
     "max_splits 2147483647 is out of range 0..1024"),
    (dict(ops="merge", dtypes="fp16", head_sizes=[2**30]), "head size 1073741824 is out of range 1..1024"),
    (dict(ops="merge", dtypes="fp16", head_size_range=(1, 2**32 + 64)), "head_size_range (1, 4294967360) is out of range"),
    (dict(ops="attention", dtypes="fp16", tilings=[(64, 2**20)]), "Br or Bc is out of range 1..1024"),
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


def test_protocol_2_contracts_are_declared_and_tilings_optional():
    s = ac.subject(name="fa", ops="attention", dtypes="fp16", features="lse", refuses_zero_keys=True,
                   flushes_subnormals=True, empty_lse="undefined", nondeterministic=True,
                   ftz_arithmetic=True)(lambda call: None)
    d = s.declaration
    assert d["refuses_zero_keys"] is True and d["flushes_subnormals"] is True and d["nondeterministic"] is True
    assert d["ftz_arithmetic"] is True
    assert ac.subject(name="inv", ops="attention", dtypes="fp16", batch_invariant=True)(
        lambda call: None).declaration["batch_invariant"] is True
    assert ac.subject(name="plain", ops="merge", dtypes="fp16")(lambda call: None).declaration["ftz_arithmetic"] is False
    assert d["empty_lse"] == "undefined" and d["tilings"] == []


def test_empty_states_zero_o_is_declared_in_the_handshake():
    from attncheck._caps import as_protocol_1
    guarded = ac.subject(name="guarded", ops="merge", dtypes="fp16", empty_states_zero_o=True)(lambda call: None)
    assert guarded.declaration["empty_states_zero_o"] is True

    class Guarded(ac.Subject):
        name = "guarded-class"
        ops = ("merge",)
        dtypes = ("fp32",)
        empty_states_zero_o = True

        def merge(self, call):
            return None
    assert Guarded().declaration["empty_states_zero_o"] is True
    plain = ac.subject(name="plain", ops="merge", dtypes="fp16")(lambda call: None).declaration
    assert plain["empty_states_zero_o"] is False
    # Protocol 1 cannot say it: refused, naming the field; left out of an undeclared subject's form.
    with pytest.raises(ac.CapsError, match="declares empty_states_zero_o, which needs worker protocol 2"):
        as_protocol_1(guarded.declaration)
    assert "empty_states_zero_o" not in as_protocol_1(plain)


def test_unknown_capability_names_the_new_fields():
    with pytest.raises(TypeError, match="refuses_zero_keys"):
        ac.Subject(name="x", ops="merge", dtypes="fp32", refuse_zero_keys=True)


def test_hello_answers_the_newest_common_protocol():
    from attncheck.worker import hello
    plain = ac.subject(name="att", ops="attention", dtypes="fp16")(lambda call: None)
    r2 = hello({"op": "hello", "protocol": 2}, [plain])
    assert r2["protocol"] == 2 and r2["subjects"][0]["tilings"] == []
    # An attncheck speaking version 1: the version-1 form, with a nominal tiling and no new fields.
    r1 = hello({"op": "hello", "protocol": 1}, [plain])
    assert r1["status"] == "ok" and r1["protocol"] == 1
    assert r1["subjects"][0]["tilings"] == [[64, 64]] and "refuses_zero_keys" not in r1["subjects"][0]
    # A contract version 1 cannot state is an error, not a silent drop.
    nozero = ac.subject(name="nz", ops="attention", dtypes="fp16", refuses_zero_keys=True)(lambda call: None)
    r = hello({"op": "hello", "protocol": 1}, [nozero])
    assert r["status"] == "error" and "needs worker protocol 2" in r["error"] and "refuses_zero_keys" in r["error"]


def test_long_names_are_refused_at_registration():
    with pytest.raises(ac.CapsError, match="is 300 characters long, more than 64"):
        ac.subject(name="n" * 300, ops="merge", dtypes="fp16")(lambda call: None)


def test_every_reply_echoes_its_request_number():
    """Protocol 3: attncheck refuses a reply whose seq is not its request's (a reply sent twice)."""
    import io
    import json

    from attncheck.worker import serve
    plain = ac.subject(name="m", ops="merge", dtypes="fp32")(lambda call: None)
    requests = [{"op": "hello", "protocol": 3, "seq": 1},
                {"op": "merge", "subject": "nope", "seq": 2},
                {"op": "shutdown", "seq": 3}]
    out = io.StringIO()
    serve([plain], stdin=io.StringIO("".join(json.dumps(r) + "\n" for r in requests)), proto_out=out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["seq"] for r in replies] == [1, 2, 3]
    assert replies[0]["protocol"] == 3 and replies[1]["status"] == "error"
