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


def test_variants_are_declared_in_protocol_4_and_left_out_before():
    from attncheck.worker import hello
    s = ac.subject(name="paged", ops="attention", dtypes="fp16", variants=("paged_kv", "sinks", "head_size_v"),
                   page_sizes=[16, 1], head_pairs=[(192, 128)])(lambda call: None)
    d = s.declaration
    assert d["variants"] == ["paged_kv", "sinks", "head_size_v"]
    assert d["page_sizes"] == [16, 1] and d["head_pairs"] == [[192, 128]]
    plain = ac.subject(name="plain", ops="attention", dtypes="fp16")(lambda call: None).declaration
    assert not any(f in plain for f in ("variants", "page_sizes", "head_pairs"))
    r4 = hello({"op": "hello", "protocol": 4}, [s])
    assert r4["protocol"] == 4 and r4["subjects"][0]["variants"] == ["paged_kv", "sinks", "head_size_v"]
    # An attncheck of protocol 3 never sends a variant: the subject is declared without them.
    for version in (3, 2, 1):
        r = hello({"op": "hello", "protocol": version}, [s])
        assert r["status"] == "ok" and r["protocol"] == version
        assert not any(f in r["subjects"][0] for f in ("variants", "page_sizes", "head_pairs"))


def test_call_limits_are_declared_in_protocol_4_and_left_out_before():
    from attncheck.worker import hello
    s = ac.subject(name="bounded", ops="attention", dtypes="fp16", max_call_seqs=8, max_call_tokens=4096,
                   max_call_keys=2**40)(lambda call: None)
    d = s.declaration
    assert (d["max_call_seqs"], d["max_call_tokens"], d["max_call_keys"]) == (8, 4096, 2**40)
    plain = ac.subject(name="plain", ops="attention", dtypes="fp16")(lambda call: None).declaration
    assert not any(f in plain for f in ("max_call_seqs", "max_call_tokens", "max_call_keys"))
    assert hello({"op": "hello", "protocol": 4}, [s])["subjects"][0]["max_call_seqs"] == 8
    assert "max_call_seqs" not in hello({"op": "hello", "protocol": 3}, [s])["subjects"][0]


@pytest.mark.parametrize("caps, message", [
    (dict(max_call_seqs=-1), "max_call_seqs must be an integer from 0 (no limit) to 2147483647, not -1"),
    (dict(max_call_tokens=2**31), "max_call_tokens must be an integer from 0 (no limit) to 2147483647"),
    (dict(max_call_keys=1.5), "max_call_keys must be an integer from 0 (no limit)"),
    (dict(max_call_seqs=True), "max_call_seqs must be an integer"),
])
def test_bad_call_limits_are_refused(caps, message):
    with pytest.raises(ac.CapsError) as e:
        ac.subject(name="bad", ops="attention", dtypes="fp16", **caps)(lambda call: None)
    assert message in str(e.value)


@pytest.mark.parametrize("caps, message", [
    (dict(ops="merge", variants="softcap"), "declares variants without attention or splitkv"),
    (dict(ops="attention", variants="sliding_window"),
     "unknown word 'sliding_window' in 'variants' (known: paged_kv, head_size_v, softcap, window, sinks, v_in_k)"),
    (dict(ops="attention", variants="paged_kv"), "declares paged_kv with 0 page_sizes; it needs 1 to 16"),
    (dict(ops="attention", variants="paged_kv", page_sizes=[16, 0]), "page size 0 is out of range 1..4096"),
    (dict(ops="attention", variants="paged_kv", page_sizes=[8192]), "page size 8192 is out of range 1..4096"),
    (dict(ops="attention", variants="paged_kv", page_sizes=list(range(1, 18))), "17 page_sizes; it needs 1 to 16"),
    (dict(ops="attention", page_sizes=[16]), "page_sizes given without the paged_kv variant"),
    (dict(ops="attention", variants="head_size_v"), "declares head_size_v with 0 head_pairs"),
    (dict(ops="attention", variants="v_in_k"), 'variant "v_in_k" needs "head_size_v"'),
    (dict(ops="attention", variants=("head_size_v", "v_in_k"), head_pairs=[(64, 128)]),
     'variant "v_in_k" needs a head pair whose V head size is below K\'s'),
    (dict(ops="attention", variants="paged_kv", page_sizes=[16, 64, 16]), "page size 16 is named twice"),
    (dict(ops="attention", variants="head_size_v", head_pairs=[(192, 0)]), "head pair (192, 0): a size is out of range"),
    (dict(ops="attention", variants="head_size_v", head_pairs=[(192,)]), "head_pairs must be (qk, v) pairs"),
    (dict(ops="attention", head_pairs=[(192, 128)]), "head_pairs given without the head_size_v variant"),
    # Read through int(), 16.5 would declare pages of 16, True pages of 1 and (64.9, 32.2) the pair
    # (64, 32): sizes the kernel never named. The raw protocol refuses each.
    (dict(ops="attention", variants="paged_kv", page_sizes=[16.5]), "page_sizes must hold integers, got 16.5"),
    (dict(ops="attention", variants="paged_kv", page_sizes=[16, True]), "page_sizes must hold integers, got True"),
    (dict(ops="attention", variants="paged_kv", page_sizes=["16"]), "page_sizes must hold integers, got '16'"),
    (dict(ops="attention", variants="head_size_v", head_pairs=[(64.9, 32.2)]), "head_pairs must be (qk, v) pairs, got (64.9, 32.2)"),
    (dict(ops="attention", head_sizes=[64.0]), "head_sizes must hold integers, got 64.0"),
    (dict(ops="attention", tilings=[(64, 64.5)]), "tilings must be (br, bc) pairs, got (64, 64.5)"),
    (dict(ops="splitkv", max_splits=8.0, fold_orders=("left",)), "max_splits must hold integers, got 8.0"),
])
def test_bad_variant_declarations_are_refused(caps, message):
    with pytest.raises(ac.CapsError) as e:
        ac.subject(name="bad", dtypes="fp16", **caps)(lambda call: None)
    assert message in str(e.value)


def test_attention_requests_decode_the_variants():
    """A protocol-4 request's variant fields and tensors reach the call as attributes and arrays."""
    import numpy as np

    from attncheck.worker import _Server
    seen = []

    def attention(call):
        seen.append(call)
        return np.zeros((3, 2, 4), np.float16)

    s = ac.subject(name="v", ops="attention", dtypes="fp16", variants=("paged_kv", "softcap", "window", "sinks",
                   "head_size_v"), page_sizes=[2], head_pairs=[(8, 4)])(attention)
    server = _Server([s])
    server.arena.map, server.arena.size = bytearray(4096), 4096  # a stand-in for the shared mapping

    def tensor(dtype, shape, offset, values):
        n = int(np.prod(shape))
        a = np.frombuffer(server.arena.map, dtype={"fp16": np.float16, "fp32": np.float32, "i32": np.int32}[dtype],
                          count=n, offset=offset)
        a[...] = np.ravel(values)
        strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
        return {"dtype": dtype, "shape": shape, "strides": strides, "offset": offset, "bytes": a.nbytes}

    req = {"op": "attention", "subject": "v", "dtype": "fp16", "case_id": "c", "property": "p", "seq": 1,
           "num_seqs": 2, "seqlens_q": [1, 2], "seqlens_k": [3, 1], "cu_seqlens_q": [0, 1, 3],
           "cu_seqlens_k": [0, 3, 4], "max_seqlen_q": 2, "max_seqlen_k": 3, "num_heads": 2, "num_kv_heads": 1,
           "head_size": 8, "causal": True, "softmax_scale": 0.125, "softmax_scale_bits": "0x3e000000",
           "tiling": None, "num_splits": 1, "fold_order": "left", "cu_mask": None,
           "head_size_v": 4, "softcap": 30.0, "softcap_bits": "0x41f00000", "window_left": 2, "window_right": 0,
           "page_size": 2, "num_pages": 3, "max_blocks": 2,
           "inputs": {"q": tensor("fp16", [3, 2, 8], 0, 1.0),
                      "k": tensor("fp16", [3, 2, 1, 8], 256, np.arange(48)),
                      "v": tensor("fp16", [3, 2, 1, 4], 512, -np.arange(24)),
                      "sinks": tensor("fp32", [2], 768, [0.5, -2.0]),
                      "block_table": tensor("i32", [2, 2], 1024, [[2, 0], [1, 1]])},
           "outputs": {"out": {"dtype": "fp16", "shape": [3, 2, 4], "strides": [8, 4, 1], "offset": 1280,
                               "bytes": 48}}}
    assert server.handle(req) == {"status": "ok", "written": {"out": 48}}
    c = seen[0]
    assert (c.head_size, c.head_size_v, c.softcap, c.window_left, c.window_right) == (8, 4, 30.0, 2, 0)
    assert (c.page_size, c.num_pages, c.max_blocks) == (2, 3, 2)
    assert c.k.shape == (3, 2, 1, 8) and c.v.shape == (3, 2, 1, 4) and c.v[2, 1, 0, 3] == -23
    assert c.sinks.dtype == np.float32 and c.sinks.tolist() == [0.5, -2.0]
    assert c.block_table.dtype == np.int32 and c.block_table.tolist() == [[2, 0], [1, 1]]
    assert c.block_table_host.tolist() == [[2, 0], [1, 1]]
    # Through the helper: sequence 0's keys 0..2 are page 2's slots 0, 1 and page 0's slot 0.
    k, v = ac.helpers.gather_pages(c.k, c.v, c.block_table_host, np.diff(c.cu_seqlens_k_host), c.page_size)
    assert k[:, 0, 0].tolist() == [32, 40, 0, 16] and v.shape == (4, 1, 4)
    # A plain request: every variant at its neutral value.
    plain = dict(req, inputs={n: req["inputs"][n] for n in ("q",)})
    for f in ("head_size_v", "softcap", "softcap_bits", "window_left", "window_right", "page_size", "num_pages",
              "max_blocks"):
        del plain[f]
    plain["inputs"]["k"] = tensor("fp16", [4, 1, 8], 256, 0.0)
    plain["inputs"]["v"] = tensor("fp16", [4, 1, 8], 512, 0.0)
    plain["outputs"] = {"out": dict(req["outputs"]["out"], shape=[3, 2, 8], strides=[16, 8, 1], bytes=96)}
    seen.clear()
    s.attention = lambda call: (seen.append(call), np.zeros((3, 2, 8), np.float16))[1]
    assert server.handle(plain)["status"] == "ok"
    c = seen[0]
    assert (c.head_size_v, c.softcap, c.window_left, c.window_right, c.page_size) == (8, 0.0, -1, -1, 0)
    assert c.sinks is None and c.block_table is None and c.block_table_host is None


def test_fp8_kv_cache_is_declared_in_protocol_4_and_left_out_before():
    from attncheck.worker import hello
    s = ac.subject(name="fp8", ops="attention", dtypes="fp16", kv_dtypes=("e4m3fn", "e5m2"),
                   fp8="descale_per_kv_head")(lambda call: None)
    assert (s.declaration["kv_dtypes"], s.declaration["fp8"]) == (["e4m3fn", "e5m2"], ["descale_per_kv_head"])
    plain = ac.subject(name="plain", ops="attention", dtypes="fp16")(lambda call: None).declaration
    assert "kv_dtypes" not in plain and "fp8" not in plain
    assert hello({"op": "hello", "protocol": 4}, [s])["subjects"][0]["kv_dtypes"] == ["e4m3fn", "e5m2"]
    assert not {"kv_dtypes", "fp8"} & set(hello({"op": "hello", "protocol": 3}, [s])["subjects"][0])


@pytest.mark.parametrize("caps, message", [
    (dict(ops="softmax", kv_dtypes="e4m3fn"), "declares kv_dtypes without attention, splitkv, quantize or merge"),
    (dict(ops="merge", kv_dtypes="e4m3fn"), 'a merge writing FP8 outputs (kv_dtypes) declares fp8=("saturate",)'),
    (dict(ops="quantize"), "declares quantize but no FP8 format to write (kv_dtypes)"),
    (dict(ops="attention", kv_dtypes="e4m3fn", fp8="saturate"), "fp8 \"saturate\" is a quantiser's, a merge's or an FP8 output's"),
    (dict(ops="attention", kv_dtypes="e4m3"), "unknown word 'e4m3' in 'kv_dtypes' (known: e4m3fn, e5m2, e4m3fnuz)"),
    (dict(ops="attention", fp8="descale_per_kv_head"), "fp8 given without kv_dtypes"),
    (dict(ops="attention", kv_dtypes="e5m2", fp8="per_head"),
     "unknown word 'per_head' in 'fp8' (known: descale_per_kv_head, fp8_q, p_e4m3, descale_per_sequence, saturate, "
     "fp8_q_required, truncated_sums, p_scale, fp8_out, amax)"),
    (dict(ops="attention", kv_dtypes="e4m3fn", fp8="fp8_q_required"), 'fp8 "fp8_q_required" needs "fp8_q"'),
    (dict(ops="attention", kv_dtypes="e4m3fn", fp8="truncated_sums"), 'fp8 "truncated_sums" needs "fp8_q"'),
    (dict(ops="attention", kv_dtypes="e4m3fn", fp8="p_scale"), 'fp8 "p_scale" needs "p_e4m3"'),
    (dict(ops="merge", kv_dtypes="e4m3fn", fp8=("saturate", "fp8_out")), 'fp8 "fp8_out" is an attention\'s'),
    (dict(ops="merge", kv_dtypes="e4m3fn", fp8=("saturate", "amax")), 'fp8 "amax" is an attention\'s'),
])
def test_bad_fp8_declarations_are_refused(caps, message):
    with pytest.raises(ac.CapsError) as e:
        ac.subject(name="bad", dtypes="fp16", **caps)(lambda call: None)
    assert message in str(e.value)
