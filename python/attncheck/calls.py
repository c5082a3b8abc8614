"""What a subject receives: one call object per request, holding the inputs as arrays and the
request's metadata. Arrays are numpy arrays for memory="host" subjects (read-only views into the
shared arena, valid during the call only) and torch / CuPy tensors on the GPU for memory="cuda"
subjects. fp16 is numpy float16; numpy has no bfloat16, so bf16 host arrays are uint16 bit
patterns (see attncheck.bf16_to_float32 / float32_to_bf16); torch gets torch.bfloat16.

Every call carries case_id and property, so a subject's logs can be matched to the report."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, cast

if TYPE_CHECKING:
    from .subject import Subject

# An input array as the subject receives it: a numpy array (memory="host") or a torch / CuPy
# tensor (memory="cuda").
Array = Any


class _Call:
    op: Optional[str] = None
    request: Dict[str, Any]
    subject: str
    case_id: str
    property: str
    dtype: str
    lse_layout: str
    lse_base: str

    def __init__(self, request: Dict[str, Any], subject: Subject) -> None:
        self.request = request
        self.subject = cast(str, subject.name)  # validated when the subject was created
        self.case_id = request.get("case_id", "")
        self.property = request.get("property", "")
        self.dtype = request["dtype"]
        self.lse_layout = subject.declaration["lse_layout"]
        self.lse_base = subject.declaration["lse_base"]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.subject} {self.dtype} case {self.case_id}>"


class MergeCall(_Call):
    """out, lse = merge((prefix_out, prefix_lse), (suffix_out, suffix_lse)) per (token, head).
    prefix_out / suffix_out: [num_tokens, num_heads, head_size]; prefix_lse / suffix_lse: fp32 in
    the declared layout ([num_heads, num_tokens] or [num_tokens, num_heads]) and base. Return
    (out, lse) of the same shapes."""
    op = "merge"
    num_tokens: int
    num_heads: int
    head_size: int
    prefix_out: Array
    prefix_lse: Array
    suffix_out: Array
    suffix_lse: Array
    # Protocol 4, a subject declaring kv_dtypes: out_dtype an FP8 format ("e4m3fn", ...) asks for out
    # as its codes (uint8 on the host, torch's float8 dtype under torch) of the merged value divided
    # by output_scale (a one-element fp32 array), saturating; None for the plain merge.
    out_dtype: Optional[str] = None
    output_scale: Optional[Array] = None


class QuantizeCall(_Call):
    """A KV-cache quantiser (protocol 4): y = the out_dtype code of x / scale, x: [num_tokens,
    num_heads, head_size] in dtype, scale: fp32 of 1 or num_heads values (head h divides by
    scale[h]). Return y of x's shape as codes: uint8 (numpy, CuPy) or torch's float8 dtype of
    out_dtype. The contract (the rounding, saturation as declared by fp8 "saturate"):
    plugin_abi.h, AC_OP_QUANTIZE."""
    op = "quantize"
    out_dtype: str
    num_tokens: int
    num_heads: int
    head_size: int
    x: Array
    scale: Array


class SoftmaxCall(_Call):
    """y = softmax(x) per row; x: [rows, cols]. Return y of the same shape and dtype."""
    op = "softmax"
    rows: int
    cols: int
    x: Array


class AttentionCall(_Call):
    """Attention forward over packed sequences. q: [total_q, num_heads, head_size], k, v:
    [total_k, num_kv_heads, head_size]; cu_seqlens_q / cu_seqlens_k: num_seqs + 1 int32 offsets
    (cu_seqlens_*_host: the same as a list); causal is bottom-right aligned; mask: None or the
    per-sequence row-major [Tq_i, Tk_i] uint8 blocks back to back (block i at cu_mask_host[i]);
    softmax_scale: a Python float holding the float32 value exactly; tiling: (index, br, bc), or
    None when the subject declares no tilings;
    num_splits and fold_order for split-KV. Return out, or (out, lse) when the subject declares
    the "lse" feature (lse fp32 in the declared layout, [num_heads, total_q] or [total_q, num_heads]).

    The variants (protocol 4), each at its neutral value unless the subject declares it and the
    call uses it (helpers.gather_pages, window_mask and softcap_scores apply them):
      head_size_v   V's and O's head size (head_size unless "head_size_v"): v is
                    [total_k, num_kv_heads, head_size_v] and out [total_q, num_heads, head_size_v].
      softcap       0.0 (none), or the cap c > 0: a score is c * tanh(softmax_scale * q.k / c), the
                    scale applied first (a Python float holding the float32 value exactly).
      window_left, window_right
                    -1 (unbounded) or a width: query t of a sequence with Tq queries and Tk keys
                    sees key j only when t + Tk - Tq - window_left <= j <= t + Tk - Tq + window_right,
                    and-ed with causal and the mask; a row left without keys is empty.
      sinks         None, or num_heads fp32 logits (in the scaled and capped scores' units) that join
                    each row's softmax denominator only: O = sum_j e^s_j v_j / (e^sink + sum_j e^s_j),
                    LSE = log(e^sink + sum_j e^s_j); a row with no visible key has O = 0, LSE = sink.
      page_size     0 (K and V contiguous), or the page size P: k and v are then page pools
                    [num_pages, P, num_kv_heads, d] and key j of sequence s is slot j % P of page
                    block_table[s, j // P]; table entries past a sequence's last page, slots past its
                    last key and pages no sequence names hold garbage (NaN, huge values) that must
                    not reach the output.
      num_pages, max_blocks
                    the pools' pages and the block table's entries per sequence (0 when contiguous).
      block_table   None, or the int32 table [num_seqs, max_blocks] (block_table_host: the same as a
                    numpy array on the host, for any subject).
      kv_dtype      None, or the FP8 KV cache's format ("e4m3fn", "e5m2" or "e4m3fnuz", for a subject declaring
                    it in kv_dtypes): k and v are then its one-byte codes (uint8 on the host,
                    torch.float8_e4m3fn / float8_e5m2 / float8_e4m3fnuz under torch), and a key's value is
                    decode(code) * k_descale[h] (v alike) for its KV head h, the descales fp32
                    arrays of one value (per tensor) or num_kv_heads (fp8 "descale_per_kv_head");
                    helpers.dequantize_kv applies them. out stays in dtype, and so does q unless
                    q_descale is given.
      k_descale, v_descale
                    None without an FP8 cache.
      q_descale     None, or (fp8 "fp8_q") q's descales, as many as k_descale: q is then codes of
                    kv_dtype too, query head i reading its KV head's value (helpers.dequantize_q).
      p_scale       None (P's scale is the fixed 2^8 of fp8 "p_e4m3"), or (fp8 "p_scale", cuDNN's
                    scale_s) a one-element fp32 array in [2^-126, 448]: P is stored as the e4m3fn code of
                    p * p_scale and read over p_scale.
      out_dtype     None (out in dtype), or (fp8 "fp8_out", cuDNN's FP8 output) one of kv_dtypes: out is
                    then returned as that format's codes (uint8, or the torch float8 dtype) of
                    O / output_scale, saturating with fp8 "saturate".
      output_scale  None, or with out_dtype a one-element fp32 array, positive and finite.
      amax          None, or (fp8 "amax", cuDNN's Amax_S and Amax_O) a two-element fp32 array, NaN-filled,
                    that the subject writes in place: [0] the largest normalised softmax weight
                    e^(s - LSE) over every row and visible key (a sink counted in the sum, not as a
                    weight; before P's scale; 0 when no row has a key), [1] the largest |O| before
                    output_scale and any cast.
      v_in_k        (variants "v_in_k", with "head_size_v": MLA's absorbed decode as FlashMLA stores its
                    cache) True when V is K's first head_size_v columns: v is then a view of k
                    (k[..., :head_size_v], K's row stride, paged alike), not a tensor of its own."""
    op = "attention"  # or "splitkv"
    num_seqs: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    max_seqlen_q: int
    max_seqlen_k: int
    causal: bool
    softmax_scale: float
    num_splits: int
    fold_order: str  # "left" | "right" | "tree"
    tiling: Optional[Tuple[int, Optional[int], Optional[int]]]
    cu_seqlens_q: Array
    cu_seqlens_k: Array
    cu_mask: Optional[Array]
    cu_seqlens_q_host: List[int]
    cu_seqlens_k_host: List[int]
    cu_mask_host: Optional[List[int]]
    q: Array
    k: Array
    v: Array
    mask: Optional[Array]
    head_size_v: int
    softcap: float
    window_left: int
    window_right: int
    sinks: Optional[Array]
    page_size: int
    num_pages: int
    max_blocks: int
    block_table: Optional[Array]
    block_table_host: Optional[Array]
    kv_dtype: Optional[str]
    k_descale: Optional[Array]
    v_descale: Optional[Array]
    q_descale: Optional[Array]
    p_scale: Optional[Array]
    out_dtype: Optional[str] = None
    output_scale: Optional[Array] = None
    v_in_k: bool = False
    amax: Optional[Array] = None
