// AbiSubject: stages a case's bit tensors into an ac_subject's memory space (staging_buffers.hpp),
// calls it, and reads the outputs back (see abi_subject.hpp).
#include "attncheck/abi_subject.hpp"

#include <cstring>
#include <stdexcept>

#include "attncheck/attention_args.hpp"
#include "attncheck/case.hpp"
#include "attncheck/json_fields.hpp"
#include "staging_buffers.hpp"

#if defined(ATTNCHECK_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace attncheck {

namespace {

// After a CUDA subject returns, surface asynchronous faults the subject did not report.
void sync_device(ac_memory mem) {
#if defined(ATTNCHECK_HAVE_CUDA)
  if (mem != AC_MEMORY_CUDA) return;
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess)
    throw SubjectError(SubjectError::Kind::device_fault,
                       std::string("device fault after the call: ") + cudaGetErrorString(e));
#else
  (void)mem;
#endif
}

void throw_on_error(int rc, const std::string& subject, const char* op, const char* err) {
  if (rc == AC_OK) return;
  std::string why = err[0] ? json_fields::printable(err, 500) : std::string("no reason given");
  std::string msg = subject + " " + op + ": " + why;
  if (rc == AC_ERR_UNSUPPORTED) throw SubjectError(SubjectError::Kind::unsupported, msg);
  if (rc == AC_ERR_DEVICE) throw SubjectError(SubjectError::Kind::device_fault, msg);
  throw SubjectError(SubjectError::Kind::internal, msg + " (code " + std::to_string(rc) + ")");
}

// Calls one entry point of a plugin subject and turns its outcome into a SubjectError. The
// plugin is foreign code: its error text is terminated here whatever it wrote (it may fill the
// buffer without a NUL), and a C++ exception that escapes across the C ABI is a failure of the
// subject (internal), never a pass.
template <class Call>
void call_plugin(const std::string& subject, const char* op, Call&& call) {
  char err[512] = {0};
  int rc;
  try {
    rc = call(err, sizeof err);
  } catch (const std::exception& e) {
    throw SubjectError(SubjectError::Kind::internal,
                       subject + " " + op + ": the plugin threw a C++ exception across the C ABI: " +
                           json_fields::printable(e.what(), 300));
  } catch (...) {
    throw SubjectError(SubjectError::Kind::internal,
                       subject + " " + op + ": the plugin threw an exception across the C ABI");
  }
  err[sizeof err - 1] = '\0';
  throw_on_error(rc, subject, op, err);
}

// The descale_granularity a call passes: the input's, except one sequence's descales per KV head
// go as its descales per (sequence, KV head) to a subject that declares only those (the same array).
int32_t granularity_for(const AttentionInput& in, const ac_caps& caps) {
  const int32_t g = in.descale_granularity();
  return g == 1 && !(caps.fp8 & AC_FP8_DESCALE_PER_KV_HEAD) ? 2 : g;
}

}  // namespace

AbiSubject::AbiSubject(const ac_subject& s, std::string origin, std::shared_ptr<void> keep_alive)
    : subject_(s),
      name_(s.name ? s.name : ""),
      description_(s.description ? s.description : ""),
      origin_(std::move(origin)),
      keep_alive_(std::move(keep_alive)) {}

std::string AbiSubject::backend() const { return subject_.caps.memory == AC_MEMORY_CUDA ? "cuda" : "host"; }

MergeOutput AbiSubject::merge(const MergeInput& in) {
  if (!has_op(AC_OP_MERGE) || !subject_.merge)
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " has no merge");
  const ac_memory mem = subject_.caps.memory;
  const int64_t tokens = in.num_tokens, heads = in.num_heads;
  const size_t n_out = size_t(tokens * heads * in.head_size), n_lse = size_t(tokens * heads);
  require_merge_sizes(in);
  const ac_lse_layout layout = subject_.caps.lse_layout;
  if (const std::string why = undeclared_fp8_output(in, subject_.caps); !why.empty())
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " " + why);

  Staging st(mem);
  const size_t prefix = st.add(pack(in.dtype, in.prefix_out)), suffix = st.add(pack(in.dtype, in.suffix_out));
  const size_t prefix_lse = st.add(as_bytes(to_layout(in.prefix_lse, layout, tokens, heads)));
  const size_t suffix_lse = st.add(as_bytes(to_layout(in.suffix_lse, layout, tokens, heads)));
  const size_t out = st.add(poisoned(in.o_dtype(), n_out), "O"),
               out_lse = st.add(as_bytes(poisoned_lse(n_lse)), "LSE");
  const size_t scale = st.add(as_bytes(std::vector<float>{in.output_scale}));
  st.upload();

  const LseStrides ls = lse_strides(layout, tokens, heads);
  ac_merge_args a{};
  a.dtype = in.dtype;
  a.num_tokens = in.num_tokens;
  a.num_heads = in.num_heads;
  a.head_size = in.head_size;
  a.out = st.get(out);
  a.out_stride_token = heads * in.head_size;
  a.out_stride_head = in.head_size;
  a.out_lse = static_cast<float*>(st.get(out_lse));
  a.prefix_out = st.get(prefix);
  a.prefix_stride_token = a.out_stride_token;
  a.prefix_stride_head = a.out_stride_head;
  a.prefix_lse = static_cast<const float*>(st.get(prefix_lse));
  a.suffix_out = st.get(suffix);
  a.suffix_stride_token = a.out_stride_token;
  a.suffix_stride_head = a.out_stride_head;
  a.suffix_lse = static_cast<const float*>(st.get(suffix_lse));
  a.lse_stride_token = ls.token;
  a.lse_stride_head = ls.head;
  a.stream = nullptr;
  a.out_dtype = in.o_dtype();
  a.output_scale = in.fp8_out() ? static_cast<const float*>(st.get(scale)) : nullptr;

  if (before_call_) before_call_();
  call_plugin(name_, "merge",
              [&](char* err, size_t len) { return subject_.merge(subject_.self, &a, err, len); });
  sync_device(mem);

  st.download(out);
  MergeOutput result;
  result.out = unpack(in.o_dtype(), st.read(out));
  const auto lse_bytes = st.read(out_lse);
  std::vector<float> stored(n_lse);
  if (n_lse) std::memcpy(stored.data(), lse_bytes.data(), n_lse * 4);
  result.lse = from_layout(stored, layout, tokens, heads);
  return result;
}

SoftmaxOutput AbiSubject::softmax(const SoftmaxInput& in) {
  if (!has_op(AC_OP_SOFTMAX) || !subject_.softmax)
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " has no softmax");
  const ac_memory mem = subject_.caps.memory;
  const size_t n = size_t(int64_t(in.rows) * in.cols);
  require_tensor_size("x", in.x.size(), n);
  Staging st(mem);
  const size_t x = st.add(pack(in.dtype, in.x)), y = st.add(poisoned(in.dtype, n), "y");
  st.upload();
  ac_softmax_args a{};
  a.dtype = in.dtype;
  a.rows = in.rows;
  a.cols = in.cols;
  a.x = st.get(x);
  a.y = st.get(y);
  a.row_stride = in.cols;
  a.stream = nullptr;
  if (before_call_) before_call_();
  call_plugin(name_, "softmax",
              [&](char* err, size_t len) { return subject_.softmax(subject_.self, &a, err, len); });
  sync_device(mem);
  st.download(y);
  return SoftmaxOutput{unpack(in.dtype, st.read(y))};
}

QuantizeOutput AbiSubject::quantize(const QuantizeInput& in) {
  if (!has_op(AC_OP_QUANTIZE) || !subject_.quantize)
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " has no quantize");
  if (const std::string why = undeclared_fp8_output(in, subject_.caps); !why.empty())
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " " + why);
  const ac_memory mem = subject_.caps.memory;
  const size_t n = size_t(int64_t(in.num_tokens) * in.num_heads * in.head_size);
  require_tensor_size("x", in.x.size(), n);
  Staging st(mem);
  const size_t x = st.add(pack(in.dtype, in.x)), y = st.add(poisoned(in.out_dtype, n), "y"),
               scale = st.add(as_bytes(in.scales));
  st.upload();
  ac_quantize_args a{};
  a.dtype = in.dtype;
  a.out_dtype = in.out_dtype;
  a.num_tokens = in.num_tokens;
  a.num_heads = in.num_heads;
  a.head_size = in.head_size;
  a.x = st.get(x);
  a.y = static_cast<uint8_t*>(st.get(y));
  a.scale = static_cast<const float*>(st.get(scale));
  a.num_scales = int32_t(in.scales.size());
  a.stream = nullptr;
  if (before_call_) before_call_();
  call_plugin(name_, "quantize",
              [&](char* err, size_t len) { return subject_.quantize(subject_.self, &a, err, len); });
  sync_device(mem);
  st.download(y);
  return QuantizeOutput{unpack(in.out_dtype, st.read(y))};
}

AttentionOutput AbiSubject::attention(const AttentionInput& in_given, const AttentionOptions& opt) {
  if (!(has_op(AC_OP_ATTENTION) || has_op(AC_OP_SPLITKV)) || !subject_.attention)
    throw SubjectError(SubjectError::Kind::unsupported, name_ + " has no attention");
  // A variant the subject does not declare is refused, never passed to a kernel that cannot read
  // it; paged K / V is the one exception: the same attention over gathered pages.
  AttentionInput gathered;
  const AttentionInput& in =
      input_for_subject(in_given, subject_.caps.variants, subject_.caps, name_, gathered);
  const PackedSequences seqs = pack_sequences(in);
  const ac_memory mem = subject_.caps.memory;
  const int64_t total_q = seqs.total_q();
  const size_t n_q = size_t(total_q * in.num_heads * in.dv());
  const bool has_mask = !in.mask.empty();
  const bool wants_lse = (subject_.caps.features & AC_FEAT_LSE) != 0;
  const size_t n_lse = size_t(total_q * in.num_heads);
  const ac_lse_layout layout = subject_.caps.lse_layout;

  Staging st(mem);
  // V inside K: no V tensor of its own, v points at k.
  const size_t q = st.add(pack(in.q_dtype(), in.q)), k = st.add(pack(in.k_dtype(), in.k)),
               v = in.v_in_k ? k : st.add(pack(in.k_dtype(), in.v));
  const size_t k_descale = st.add(as_bytes(in.k_descale)), v_descale = st.add(as_bytes(in.v_descale)),
               q_descale = st.add(as_bytes(in.q_descale)),
               p_scale = st.add(as_bytes(std::vector<float>{in.p_scale}));
  const size_t cu_q_s = st.add(as_bytes(seqs.cu_q)), cu_k_s = st.add(as_bytes(seqs.cu_k));
  const size_t mask = st.add(as_bytes(in.mask)), cu_mask_s = st.add(as_bytes(seqs.cu_mask));
  const size_t out = st.add(poisoned(in.o_dtype(), n_q), "O"),
               lse = st.add(as_bytes(poisoned_lse(wants_lse ? n_lse : 0)), "LSE");
  const size_t output_scale = st.add(as_bytes(std::vector<float>{in.output_scale}));
  const size_t amax =
      st.add(as_bytes(poisoned_lse(in.want_amax ? 2 : 0)), "amax");  // AC_FP8_AMAX's two values
  const size_t sinks = st.add(as_bytes(in.sinks)), table = st.add(as_bytes(in.block_table));
  st.upload();

  const ac_attention_args a =
      AttentionArgs(in.dtype, in.num_heads, in.num_kv_heads, in.head_size)
          .sequences(seqs.num_seqs(), static_cast<const int32_t*>(st.get(cu_q_s)),
                     static_cast<const int32_t*>(st.get(cu_k_s)), seqs.cu_q.data(), seqs.cu_k.data())
          .tensors(st.get(q), st.get(k), st.get(v), st.get(out),
                   wants_lse ? static_cast<float*>(st.get(lse)) : nullptr)
          .scale(in.softmax_scale)
          .causal(in.causal)
          .mask(has_mask ? static_cast<const uint8_t*>(st.get(mask)) : nullptr,
                has_mask ? static_cast<const int64_t*>(st.get(cu_mask_s)) : nullptr,
                has_mask ? seqs.cu_mask.data() : nullptr)
          .tiling(subject_.caps.num_tilings > 0 ? opt.tiling : -1)  // -1: the subject declares no tilings
          .splits(opt.num_splits, opt.fold_order)
          .variants(in.dv(), in.softcap, in.window_left, in.window_right,
                    in.sinks.empty() ? nullptr : static_cast<const float*>(st.get(sinks)))
          .paged(in.page_size, in.num_pages, in.max_blocks,
                 in.paged() ? static_cast<const int32_t*>(st.get(table)) : nullptr,
                 in.paged() ? in.block_table.data() : nullptr)
          .fp8_kv(in.k_dtype(), in.fp8_kv() ? static_cast<const float*>(st.get(k_descale)) : nullptr,
                  in.fp8_kv() ? static_cast<const float*>(st.get(v_descale)) : nullptr,
                  granularity_for(in, subject_.caps))
          .fp8_q(in.fp8_q() ? static_cast<const float*>(st.get(q_descale)) : nullptr)
          .p_scale(in.p_scale > 0.0f ? static_cast<const float*>(st.get(p_scale)) : nullptr)
          .fp8_out(in.o_dtype(), in.fp8_out() ? static_cast<const float*>(st.get(output_scale)) : nullptr)
          .v_in_k(in.v_in_k)
          .amax(in.want_amax ? static_cast<float*>(st.get(amax)) : nullptr);

  if (before_call_) before_call_();
  call_plugin(name_, "attention",
              [&](char* err, size_t len) { return subject_.attention(subject_.self, &a, err, len); });
  sync_device(mem);

  st.download(out);
  AttentionOutput result;
  result.out = unpack(in.o_dtype(), st.read(out));
  if (wants_lse) {
    const auto bytes = st.read(lse);
    std::vector<float> stored(n_lse);
    if (n_lse) std::memcpy(stored.data(), bytes.data(), n_lse * 4);
    result.lse = from_layout(stored, layout, total_q, in.num_heads);
  }
  if (in.want_amax) {  // brought back with out, added after it
    const auto bytes = st.read(amax);
    result.amax.resize(2);
    std::memcpy(result.amax.data(), bytes.data(), 2 * sizeof(float));
  }
  return result;
}

std::vector<std::unique_ptr<Subject>> adapt_subjects(const std::vector<ac_subject>& subjects,
                                                     const std::string& origin,
                                                     std::shared_ptr<void> keep_alive) {
  std::vector<std::unique_ptr<Subject>> out;
  out.reserve(subjects.size());
  for (const ac_subject& s : subjects) out.push_back(std::make_unique<AbiSubject>(s, origin, keep_alive));
  return out;
}

}  // namespace attncheck
