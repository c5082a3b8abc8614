"""PyTorch's attention backends at the shapes of hopper_bench, timed the same way.

    python3 kernels/bench/peers.py [repeats] [--json]

For each shape (T in {2048, 8192}, 32 query heads, 8 KV heads, d = 128, fp16 and bf16, causal and
not) and each SDPA backend that runs it (FlashAttention-2, cuDNN), prints one line in
hopper_bench's format: "peer-<backend> <shape> <ms> ms <TFLOP/s> TFLOP/s". Each number is the median
of `repeats` launches, each timed alone with CUDA events after a 512 MiB memset that flushes L2,
on random inputs in [-1, 1]. TFLOP/s counts 4 T^2 h d flops, half of it when causal, as
hopper_bench does. K and V are expanded to 32 heads (SDPA's FlashAttention path has no GQA), which
the flop count does not include. Needs torch with CUDA; a script beside the benchmark suite, not
part of the Python SDK.
With --json, each measurement is one JSON object per line instead (what `attncheck bench` reads):
{"peer", "T", "dtype", "causal", "ms", "tflops"}, or {"peer", "T", "dtype", "causal", "error"}.
Then PyTorch's flex_attention at the variants rows (flex_rows): {"peer": "flex", "variant", "T",
"dtype", "causal", "ms", "tflops"} or with "error".
Last, the FP8 GEMM ceiling that fused-hopper-fp8's rows are judged against: torch._scaled_mm on
8192^3 e4m3fn operands (A row-major, B column-major, as it requires; scales of 1, bf16 out), timed
the same way: {"ceiling": "fp8_gemm", "ms", "tflops"} or {"ceiling": "fp8_gemm", "error"}.
"""

import json
import statistics
import sys


def median_ms(torch, flush, repeats, launch):
    """The median of `repeats` launches, each alone between CUDA events after the L2 flush, after one
    warm-up launch."""
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        flush.zero_()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def flex_rows(torch, flush, repeats, as_json):
    """torch.nn.attention.flex_attention, compiled, at the variants rows of `attncheck bench`
    (kernels/bench/suite.cu variants): bf16, T in {2048, 8192}, 32 query heads over 8 KV heads
    (enable_gqa), d = 128; the softcap of 30 as a score_mod (flex scales q.k before score_mod sees
    it: scale, then cap), non-causal and causal, and causal with a window of 1024 keys as a
    mask_mod. The flops are the suite's: 4 d per head for each visible (query, key) pair. One JSON
    line each with "variant" ("softcap=30" or "window=1024"), or with "error" where flex did not
    run."""
    variants = (("softcap=30", False), ("softcap=30", True), ("window=1024", True))
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    except (ImportError, RuntimeError, AttributeError) as e:
        why = (str(e).splitlines() or ["error"])[0]
        for t in (2048, 8192):
            for variant, causal in variants:
                line = {"peer": "flex", "variant": variant, "T": t, "dtype": "bf16", "causal": causal, "error": why}
                print(json.dumps(line) if as_json else f"peer-flex {variant} T={t}: not run ({why})", flush=True)
        return
    dev = torch.device("cuda")
    window = 1024

    def softcap(score, b, h, q_idx, kv_idx):
        return 30.0 * torch.tanh(score / 30.0)

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def window_mask(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    for t in (2048, 8192):
        q = (torch.rand(1, 32, t, 128, device=dev) * 2 - 1).to(torch.bfloat16)
        k = (torch.rand(1, 8, t, 128, device=dev) * 2 - 1).to(torch.bfloat16)
        v = (torch.rand(1, 8, t, 128, device=dev) * 2 - 1).to(torch.bfloat16)
        for variant, causal in variants:
            if variant.startswith("window"):
                w = min(t, window)
                pairs = 0.5 * w * (w + 1) + (t - w) * w
                score_mod, mask_mod = None, window_mask
            else:
                pairs = 0.5 * t * (t + 1) if causal else float(t) * t
                score_mod, mask_mod = softcap, (causal_mask if causal else None)
            flops = 4.0 * pairs * 32 * 128
            line = {"peer": "flex", "variant": variant, "T": t, "dtype": "bf16", "causal": causal}
            try:
                block_mask = create_block_mask(mask_mod, None, None, t, t, device=dev) if mask_mod else None
                ms = median_ms(torch, flush, repeats,
                               lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True))
                line.update({"ms": ms, "tflops": flops / ms / 1e9})
            except Exception as e:  # a compile or launch failure is reported as the peer's, not raised
                line["error"] = (str(e).splitlines() or ["error"])[0]
            if as_json:
                print(json.dumps(line), flush=True)
            elif "error" in line:
                print(f"peer-flex {variant} T={t} causal={int(causal)}: not run ({line['error']})")
            else:
                print(f"peer-flex {variant} T={t} h=32/8 d=128 bf16 causal={int(causal)} {line['ms']:.4f} ms "
                      f"{line['tflops']:.1f} TFLOP/s")


def main(argv):
    try:
        import torch
    except ImportError as e:
        print(f"peers.py: torch is not importable ({e})", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("peers.py: torch sees no CUDA device", file=sys.stderr)
        return 77
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    as_json = "--json" in argv[1:]
    args = [a for a in argv[1:] if a != "--json"]
    repeats = int(args[0]) if args else 10
    dev = torch.device("cuda")
    flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    backends = [("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    if not as_json:
        print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}, median of {repeats}")
    for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for t in (2048, 8192):
            q = torch.rand(1, 32, t, 128, device=dev, dtype=dtype) * 2 - 1
            k = torch.rand(1, 8, t, 128, device=dev, dtype=dtype) * 2 - 1
            v = torch.rand(1, 8, t, 128, device=dev, dtype=dtype) * 2 - 1
            k32, v32 = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)
            for causal in (False, True):
                flops = 4.0 * t * t * 32 * 128 * (0.5 if causal else 1.0)
                for name, backend in backends:
                    try:
                        with sdpa_kernel(backend):
                            ms = median_ms(torch, flush, repeats,
                                           lambda: F.scaled_dot_product_attention(q, k32, v32, is_causal=causal))
                    except RuntimeError as e:
                        why = (str(e).splitlines() or ["error"])[0]
                        if as_json:
                            print(json.dumps({"peer": name, "T": t, "dtype": dtype_name, "causal": causal,
                                              "error": why}), flush=True)
                        else:
                            print(f"peer-{name} T={t} {dtype_name} causal={int(causal)}: not run ({why})")
                        continue
                    if as_json:
                        print(json.dumps({"peer": name, "T": t, "dtype": dtype_name, "causal": causal, "ms": ms,
                                          "tflops": flops / ms / 1e9}), flush=True)
                    else:
                        print(f"peer-{name} T={t} h=32/8 d=128 {dtype_name} causal={int(causal)} {ms:.4f} ms "
                              f"{flops / ms / 1e9:.1f} TFLOP/s")
    flex_rows(torch, flush, repeats, as_json)
    n = 8192
    try:
        fp8 = torch.float8_e4m3fn
        a = (torch.rand(n, n, device=dev) * 2 - 1).to(fp8)
        b = (torch.rand(n, n, device=dev) * 2 - 1).to(fp8).t()
        one = torch.ones((), device=dev)
        ms = median_ms(torch, flush, repeats,
                       lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        tflops = 2.0 * n ** 3 / ms / 1e9
        if as_json:
            print(json.dumps({"ceiling": "fp8_gemm", "ms": ms, "tflops": tflops}), flush=True)
        else:
            print(f"ceiling-fp8-gemm torch._scaled_mm {n}^3 e4m3fn {ms:.4f} ms {tflops:.1f} TFLOP/s")
    except (RuntimeError, AttributeError, TypeError) as e:
        why = (str(e).splitlines() or ["error"])[0]
        print(json.dumps({"ceiling": "fp8_gemm", "error": why}) if as_json else f"ceiling-fp8-gemm: not run ({why})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
