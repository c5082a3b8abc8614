// `attncheck list`: the loaded subjects with their capabilities, and the properties with their suites.
#include <cstdio>
#include <sstream>

#include "common.hpp"
#include "options.hpp"

namespace attncheck::cli {
namespace {

std::string ops_string(uint32_t ops) {
  std::string s;
  for (const auto& [bit, name] : op_spellings())
    if (ops & bit) s += (s.empty() ? "" : ",") + std::string(name);
  return s;
}

std::string caps_string(const Subject& s) {
  const ac_caps& c = s.caps();
  std::ostringstream o;
  o << ops_string(c.ops) << "; dtypes";
  for (ac_dtype d : {AC_DTYPE_F32, AC_DTYPE_F16, AC_DTYPE_BF16})
    if (s.has_dtype(d)) o << " " << dtype_name(d);
  // Head sizes and LSE conventions mean nothing to a softmax-only subject.
  const bool has_lse =
      (c.ops & AC_OP_MERGE) || ((c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)) && (c.features & AC_FEAT_LSE));
  if (c.ops != AC_OP_SOFTMAX) {
    o << "; d ";
    if (c.head_sizes) {
      for (int32_t i = 0; i < c.num_head_sizes; ++i) o << (i ? "," : "") << c.head_sizes[i];
    } else {
      o << c.head_size_min << ".." << c.head_size_max;
    }
  }
  if (has_lse)
    o << "; LSE base " << (c.lse_base == 2 ? "2" : "e") << " "
      << (c.lse_layout == AC_LSE_HEADS_TOKENS ? "[heads,tokens]" : "[tokens,heads]");
  if (c.ops & (AC_OP_MERGE | AC_OP_ATTENTION | AC_OP_SPLITKV))
    o << "; empty row LSE "
      << ((c.flags & AC_CAP_EMPTY_LSE_UNDEFINED) ? "undefined"
          : c.empty_lse_sign > 0                 ? "+inf"
                                                 : "-inf");
  if (c.flags & AC_CAP_REFUSES_ZERO_KEYS) o << "; refuses zero keys";
  if (c.flags & AC_CAP_FLUSHES_SUBNORMALS) o << "; flushes subnormals";
  if (c.flags & AC_CAP_NONDETERMINISTIC) o << "; nondeterministic by design";
  if (c.flags & AC_CAP_FTZ_ARITHMETIC)
    o << "; FTZ / DAZ arithmetic (flushed subnormal inputs and intermediates)";
  if (c.flags & AC_CAP_BATCH_INVARIANT) o << "; batch invariant";
  if (c.flags & AC_CAP_EMPTY_STATES_ZERO_O) o << "; relies on O = 0 for empty states";
  if (c.ops & (AC_OP_ATTENTION | AC_OP_SPLITKV)) {
    o << "; tilings";
    if (c.num_tilings <= 0) o << " none declared";
    for (int32_t i = 0; i < c.num_tilings; ++i) o << " " << c.tilings[i].br << "x" << c.tilings[i].bc;
    if (c.features & AC_FEAT_CAUSAL) o << "; causal";
    if (c.features & AC_FEAT_MASK) o << "; mask";
    if (c.features & AC_FEAT_VARLEN) o << "; varlen";
    if (c.features & AC_FEAT_GQA) o << "; gqa";
    if (c.features & AC_FEAT_NAIVE_EXP) o << "; naive-exp (declared hazard)";
    if (c.features & AC_FEAT_FLUSHED_EXP) o << "; flushed exp2 (weights below 2^-126 dropped)";
    if (c.variants & AC_VAR_PAGED_KV) {
      o << "; paged KV (pages";
      for (int32_t i = 0; i < c.num_page_sizes; ++i) o << " " << c.page_sizes[i];
      o << ")";
    }
    if (c.variants & AC_VAR_HEAD_SIZE_V) {
      o << "; V head sizes";
      for (int32_t i = 0; i < c.num_head_pairs; ++i)
        o << " " << c.head_pairs[i].qk << "/" << c.head_pairs[i].v;
    }
    if (c.variants & AC_VAR_V_IN_K) o << "; V inside K";
    if (c.variants & AC_VAR_SOFTCAP) o << "; softcap";
    if (c.variants & AC_VAR_WINDOW) o << "; sliding window";
    if (c.variants & AC_VAR_SINKS) o << "; sinks";
    if (c.kv_dtypes) {
      o << "; FP8 KV cache";
      for (const auto& [f, name] : kv_dtype_spellings())
        if (c.kv_dtypes & AC_DTYPE_BIT(f)) o << " " << name;
      o << " (descales per tensor" << (c.fp8 & AC_FP8_DESCALE_PER_KV_HEAD ? ", per KV head" : "")
        << (c.fp8 & AC_FP8_DESCALE_PER_SEQUENCE ? ", per (sequence, KV head)" : "") << ")";
      if (c.fp8 & AC_FP8_Q) o << (c.fp8 & AC_FP8_Q_REQUIRED ? "; Q in FP8 in every FP8 call" : "; Q in FP8");
      if (c.fp8 & AC_FP8_P_E4M3)
        o << (c.fp8 & AC_FP8_P_SCALE ? "; P in e4m3fn (the call's p_scale, 2^8 without one)"
                                     : "; P in e4m3fn (offset 2^8)");
      if (c.fp8 & AC_FP8_TRUNCATED_SUMS) o << "; e4m3 sums on the tensor cores (13-bit, fp32 every 128)";
      if (c.fp8 & AC_FP8_OUT)
        o << "; O in FP8 over output_scale ("
          << (c.fp8 & AC_FP8_SATURATE ? "saturating" : "overflow to NaN / inf") << ")";
      if (c.fp8 & AC_FP8_AMAX) o << "; writes amax of P and O";
    }
    if (c.max_call_seqs > 0) o << "; at most " << c.max_call_seqs << " sequences a call";
    if (c.max_call_tokens > 0) o << "; at most " << c.max_call_tokens << " query tokens a call";
    if (c.max_call_keys > 0) o << "; at most " << c.max_call_keys << " keys a call";
  }
  // FP8 outputs: a quantiser's codes, or a merge's.
  if ((c.ops & (AC_OP_QUANTIZE | AC_OP_MERGE)) && c.kv_dtypes) {
    o << (c.ops & AC_OP_QUANTIZE ? "; writes" : "; FP8 outputs");
    for (const auto& [f, name] : kv_dtype_spellings())
      if (c.kv_dtypes & AC_DTYPE_BIT(f)) o << " " << name;
    o << (c.fp8 & AC_FP8_SATURATE ? " (saturating" : " (overflow to NaN / inf")
      << (c.ops & AC_OP_QUANTIZE
              ? (c.fp8 & AC_FP8_DESCALE_PER_KV_HEAD ? ", a scale per tensor or head)" : ", one scale)")
              : ", output_scale)");
  }
  if (c.ops & AC_OP_SPLITKV) {
    o << "; splits 1.." << c.max_splits << " folds";
    for (ac_fold f : folds_in(c.fold_orders)) o << " " << fold_name(f);
  }
  return o.str();
}

int run_list(const Common& common) {
  SubjectSet set = load_subject_set(common);
  std::printf("%s\n", set.backend_note.c_str());
  for (const auto& n : set.notes) std::printf("%s\n", n.c_str());
  std::printf("\nsubjects:\n");
  for (const auto& s : set.all) {
    std::printf("  %-22s %-4s %-8s %s\n", s->name().c_str(), s->backend().c_str(),
                s->origin() == "builtin"                 ? "builtin"
                : !worker::worker_command_of(*s).empty() ? "worker"
                                                         : "plugin",
                s->description().c_str());
    std::printf("  %-22s %s\n", "", caps_string(*s).c_str());
    if (s->origin() != "builtin") std::printf("  %-22s from %s\n", "", s->origin().c_str());
  }
  std::printf(
      "\nproperties (gate = in the default suite, long = also in --suite long, full = in full only):\n");
  for (const auto& p : all_properties()) {
    const std::string suites = in_suite(p, "long") ? "gate,long" : in_suite(p, "gate") ? "gate" : "full";
    std::printf("  %-24s %-9s %-9s %s  [%s]\n", p.name.c_str(), suites.c_str(), ops_string(p.ops).c_str(),
                p.description.c_str(), p.seed_section.c_str());
  }
  return kExitOk;
}

}  // namespace

Command add_list_command(CLI::App& app, Common& common) {
  Command c;
  c.app = app.add_subcommand("list", "subjects (built-in and plugin) with capabilities; properties");
  add_common_options(c.app, common);
  c.run = [&common] { return run_list(common); };
  return c;
}

}  // namespace attncheck::cli
