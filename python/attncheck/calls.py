"""What a subject receives: one call object per request, holding the inputs as arrays and the
request's metadata. Arrays are numpy arrays for memory="host" subjects (read-only views into the
shared arena, valid during the call only) and torch / CuPy tensors on the GPU for memory="cuda"
subjects. fp16 is numpy float16; numpy has no bfloat16, so bf16 host arrays are uint16 bit
patterns (see attncheck.bf16_to_float32 / float32_to_bf16); torch gets torch.bfloat16.

Every call carries case_id and property, so a subject's logs can be matched to the report."""


class _Call:
    op = None

    def __init__(self, request, subject):
        self.request = request
        self.subject = subject.name
        self.case_id = request.get("case_id", "")
        self.property = request.get("property", "")
        self.dtype = request["dtype"]
        self.lse_layout = subject.declaration["lse_layout"]
        self.lse_base = subject.declaration["lse_base"]

    def __repr__(self):
        return f"<{type(self).__name__} {self.subject} {self.dtype} case {self.case_id}>"


class MergeCall(_Call):
    """out, lse = merge((prefix_out, prefix_lse), (suffix_out, suffix_lse)) per (token, head).
    prefix_out / suffix_out: [num_tokens, num_heads, head_size]; prefix_lse / suffix_lse: fp32 in
    the declared layout ([num_heads, num_tokens] or [num_tokens, num_heads]) and base. Return
    (out, lse) of the same shapes."""
    op = "merge"


class SoftmaxCall(_Call):
    """y = softmax(x) per row; x: [rows, cols]. Return y of the same shape and dtype."""
    op = "softmax"


class AttentionCall(_Call):
    """Attention forward over packed sequences. q: [total_q, num_heads, head_size], k, v:
    [total_k, num_kv_heads, head_size]; cu_seqlens_q / cu_seqlens_k: num_seqs + 1 int32 offsets
    (cu_seqlens_*_host: the same as a list); causal is bottom-right aligned; mask: None or the
    per-sequence row-major [Tq_i, Tk_i] uint8 blocks back to back (block i at cu_mask_host[i]);
    softmax_scale: a Python float holding the float32 value exactly; tiling: (index, br, bc), or
    None when the subject declares no tilings;
    num_splits and fold_order for split-KV. Return out, or (out, lse) when the subject declares
    the "lse" feature (lse fp32 in the declared layout, [num_heads, total_q] or [total_q, num_heads])."""
    op = "attention"
