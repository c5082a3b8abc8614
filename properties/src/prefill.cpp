// Chunked-prefill NaN reproduction: a batch of requests through the cascade.
//
// Model (vLLM's chunked prefill with a chunked cached context, the path of the chunked-prefill NaN report):
// for each request and each chunk of its new tokens,
//   prefix   attention of the chunk's queries over each context chunk of the batch, non-causal. The
//            batch walks ceil(max cached prefix / chunk_size) context chunks; a request whose prefix
//            missed (or is shorter) sees zero keys in some of them: an empty state (O = 0, LSE = the
//            attention subject's sentinel).
//   prefix_merge  the context chunks' states folded left to right with the merge subject. Two empty
//            states meet here for a request with no prefix hit: an unguarded merge gives NaN.
//   suffix   causal attention of the chunk's queries over the request's new tokens up to the chunk end.
//   merge    merge(prefix state, suffix state): the request's output.
// The first non-finite value (O anywhere, or a NaN LSE) is reported with its provenance.
// Tensors come from a deterministic splitmix64 stream seeded by the scenario, so a scenario file is
// small and still bit-reproducible. LSEs are converted between the two subjects' bases if they differ.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "attncheck/hash.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/memory.hpp"
#include "internal.hpp"

namespace attncheck {

namespace {

using json = nlohmann::json;

struct Request {
  int cached_prefix = 0;
  bool prefix_hit = false;
  int new_tokens = 0;
};

struct Scenario {
  ac_dtype dtype = AC_DTYPE_F16;
  int num_heads = 1, num_kv_heads = 1, head_size = 8, chunk_size = 4;
  uint64_t seed = 1;
  std::vector<Request> requests;
};

// Stated bounds of a scenario, checked before any work: a scenario is a reproduction, not a load
// test. They bound its time; its memory (up to 2 GiB of one request's K and V within them) is
// estimated by prefill_peak_bytes and held to --max-memory by the caller.
constexpr int kMaxRequests = 4096;
constexpr int64_t kMaxScenarioTokens = int64_t(1) << 20;    // cached prefix + new tokens, all requests
constexpr int64_t kMaxScenarioElements = int64_t(1) << 28;  // tokens x KV heads x head size
// Every chunk of every request runs one prefix attention per context chunk of the whole batch, so
// a small file (chunk_size 1, one long cached prefix, many requests) could ask for billions of
// subject calls: the calls and the attention work (scores x head size) are bounded as well.
constexpr double kMaxScenarioCalls = double(1 << 20);
constexpr double kMaxScenarioWork = 0x1p32;

int get_int(const json& j, const char* key, const std::string& where, int lo, int hi) {
  return int(json_fields::get_int<PrefillScenarioError>(j, key, where, lo, hi));
}

Scenario parse(const std::string& text) {
  const json j = json_fields::parse_strict<PrefillScenarioError>(text, "scenario");
  const std::string w = "scenario";
  if (!j.is_object() ||
      json_fields::get_string_or<PrefillScenarioError>(j, "format", w, "") != "attncheck-prefill")
    throw PrefillScenarioError("not an attncheck prefill scenario (format field)");
  Scenario s;
  const std::string dtype = json_fields::get_string_or<PrefillScenarioError>(j, "dtype", w, "fp16");
  const auto d = dtype_from(dtype);
  if (!d) throw PrefillScenarioError("scenario.dtype must be one of " + dtype_names());
  s.dtype = *d;
  s.num_heads = get_int(j, "num_heads", w, 1, 256);
  s.num_kv_heads = get_int(j, "num_kv_heads", w, 1, 256);
  if (s.num_heads % s.num_kv_heads)
    throw PrefillScenarioError("scenario: num_heads must be a multiple of num_kv_heads");
  s.head_size = get_int(j, "head_size", w, 1, 1024);
  s.chunk_size = get_int(j, "chunk_size", w, 1, 1 << 20);
  s.seed = uint64_t(json_fields::get_int_or<PrefillScenarioError>(j, "seed", w, 0, INT64_MAX, 1));
  const json& reqs = json_fields::field<PrefillScenarioError>(j, "requests", w);
  if (!reqs.is_array() || reqs.empty() || reqs.size() > size_t(kMaxRequests))
    throw PrefillScenarioError("scenario.requests must be an array of 1 to " + std::to_string(kMaxRequests) +
                               " requests");
  int64_t tokens = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::string rw = w + ".requests[" + std::to_string(i) + "]";
    Request q;
    q.cached_prefix = get_int(reqs[i], "cached_prefix", rw, 0, 1 << 20);
    q.prefix_hit = json_fields::get_bool<PrefillScenarioError>(reqs[i], "prefix_hit", rw);
    q.new_tokens = get_int(reqs[i], "new_tokens", rw, 0, 1 << 20);
    tokens += q.cached_prefix + q.new_tokens;
    s.requests.push_back(q);
  }
  if (tokens > kMaxScenarioTokens || tokens * s.num_kv_heads * s.head_size > kMaxScenarioElements)
    throw PrefillScenarioError("scenario: " + std::to_string(tokens) +
                               " tokens in all requests is beyond the stated bound (" +
                               std::to_string(kMaxScenarioTokens) + " tokens, " +
                               std::to_string(kMaxScenarioElements) + " K elements)");
  int64_t max_prefix = 0;
  for (const Request& q : s.requests)
    max_prefix = std::max<int64_t>(max_prefix, q.prefix_hit ? q.cached_prefix : 0);
  const double context_chunks = double((max_prefix + s.chunk_size - 1) / s.chunk_size);
  double calls = 0, work = 0;
  for (const Request& q : s.requests) {
    const double chunks = double((q.new_tokens + s.chunk_size - 1) / s.chunk_size), n = q.new_tokens;
    calls += chunks * (2 * context_chunks + 2);  // prefix attentions and merges, suffix, final merge
    work += n * (context_chunks * s.chunk_size + n) * s.num_heads * s.head_size;
  }
  if (calls > kMaxScenarioCalls || work > kMaxScenarioWork)
    throw PrefillScenarioError("scenario: chunks x context chunks beyond the stated bound (" +
                               std::to_string(int64_t(kMaxScenarioCalls)) +
                               " subject calls, 2^32 attention work)");
  return s;
}

struct Stream {
  uint64_t x;
  double next() {  // uniform in [-1, 1): splitmix64's generator
    const uint64_t z = hash::splitmix64(x);
    x += hash::kGoldenGamma;
    return double(z >> 11) * 0x1p-52 - 1.0;
  }
};

Bits random_bits(Stream& st, ac_dtype d, int64_t n, double amp) {
  Bits b(static_cast<size_t>(n));
  for (uint32_t& x : b) x = detail::round_bits(d, amp * st.next());
  return b;
}

std::string fmt_value(double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

}  // namespace

void validate_prefill_scenario(const std::string& text) { (void)parse(text); }

double prefill_peak_bytes(const std::string& text) {
  const Scenario sc = parse(text);
  const int64_t H = sc.num_heads, Hkv = sc.num_kv_heads, D = sc.head_size, C = sc.chunk_size;
  double worst = 0;
  for (const Request& r : sc.requests) {
    // run_prefill_text holds one request's tensors at a time (4 B per element: q, and K and V of
    // its cached prefix and new tokens), with one subject call and the merge states on top.
    const int64_t P = r.prefix_hit ? r.cached_prefix : 0, n = r.new_tokens, tq = std::min<int64_t>(C, n);
    const double tensors = 4.0 * double(n * H * D + 2 * (P + n) * Hkv * D);
    const double call = std::max(attention_call_bytes(tq, std::min<int64_t>(C, P), H, Hkv, D),
                                 attention_call_bytes(tq, n, H, Hkv, D));
    const double states = 4 * 4.0 * double(tq * H * (D + 1));
    worst = std::max(worst, tensors + call + states);
  }
  return process_base_bytes() + worst;
}

PrefillReport run_prefill_text(const std::string& text, Subject& attention, Subject& merge) {
  const Scenario sc = parse(text);
  if (!attention.has_op(AC_OP_ATTENTION))
    throw PrefillScenarioError("subject " + attention.name() + " has no attention operation");
  if (!merge.has_op(AC_OP_MERGE))
    throw PrefillScenarioError("subject " + merge.name() + " has no merge operation");
  if (!(attention.caps().features & AC_FEAT_LSE))
    throw PrefillScenarioError("subject " + attention.name() + " writes no LSE");
  const double att_to_nat = attention.caps().lse_base == 2 ? std::log(2.0) : 1.0;
  const bool refuses_zero_keys = (attention.caps().flags & AC_CAP_REFUSES_ZERO_KEYS) != 0;
  const bool empty_lse_undefined = (attention.caps().flags & AC_CAP_EMPTY_LSE_UNDEFINED) != 0;
  const double nat_to_merge = merge.caps().lse_base == 2 ? 1.0 / std::log(2.0) : 1.0;
  const int H = sc.num_heads, Hkv = sc.num_kv_heads, D = sc.head_size, C = sc.chunk_size;
  int max_prefix = 0;
  for (const Request& r : sc.requests) max_prefix = std::max(max_prefix, r.prefix_hit ? r.cached_prefix : 0);
  const int context_chunks = (max_prefix + C - 1) / C;

  PrefillReport rep;
  rep.requests = int(sc.requests.size());
  std::set<std::pair<int, std::string>> reported;
  Stream st{sc.seed};
  const double scale = 1.0 / std::sqrt(double(D));

  auto scan = [&](const Bits& o, const std::vector<float>& lse, int req, int chunk, int tok0, int rows,
                  const std::string& stage, const std::string& detail_of_row) {
    for (int t = 0; t < rows; ++t)
      for (int h = 0; h < H; ++h) {
        double bad = 0;
        bool found = false;
        for (int d = 0; d < D && !found; ++d) {
          const double v = detail::decode(sc.dtype, o[size_t((t * H + h) * D + d)]);
          if (!std::isfinite(v)) bad = v, found = true;
        }
        if (!found && std::isnan(lse[size_t(t * H + h)])) bad = NAN, found = true;
        if (!found) continue;
        rep.ok = false;
        if (!reported.insert({req, stage}).second && !rep.findings.empty()) continue;
        PrefillFinding f{req, chunk, tok0 + t, h, stage, fmt_value(bad), detail_of_row};
        rep.findings.push_back(f);
      }
  };

  for (int ri = 0; ri < int(sc.requests.size()); ++ri) {
    const Request& r = sc.requests[size_t(ri)];
    const int P = r.prefix_hit ? r.cached_prefix : 0;
    // The request's tensors: queries for its new tokens, keys/values for its cached prefix and new tokens.
    const Bits q = random_bits(st, sc.dtype, int64_t(r.new_tokens) * H * D, 1.0);
    const Bits kp = random_bits(st, sc.dtype, int64_t(P) * Hkv * D, 1.0),
               vp = random_bits(st, sc.dtype, int64_t(P) * Hkv * D, 1.0);
    const Bits kn = random_bits(st, sc.dtype, int64_t(r.new_tokens) * Hkv * D, 1.0),
               vn = random_bits(st, sc.dtype, int64_t(r.new_tokens) * Hkv * D, 1.0);
    for (int ci = 0, t0 = 0; t0 < r.new_tokens; ++ci, t0 += C) {
      const int tq = std::min(C, r.new_tokens - t0);
      ++rep.chunks;
      rep.rows_checked += tq * H;
      auto attend = [&](const Bits& k, const Bits& v, int64_t k0, int tk, bool causal) {
        if (tk == 0 && refuses_zero_keys) {
          // Such a kernel is never called on an empty context chunk; its caller stands in the
          // empty state, O = 0 and LSE = -inf, which is what the merge then receives.
          AttentionOutput empty;
          empty.out.assign(size_t(int64_t(tq) * H * D), detail::round_bits(sc.dtype, 0.0));
          empty.lse.assign(size_t(int64_t(tq) * H), -INFINITY);
          return empty;
        }
        AttentionInput a;
        a.dtype = sc.dtype;
        a.num_heads = H;
        a.num_kv_heads = Hkv;
        a.head_size = D;
        a.seqlens_q = {tq};
        a.seqlens_k = {tk};
        a.causal = causal;
        a.softmax_scale = float(scale);
        a.q.assign(q.begin() + int64_t(t0) * H * D, q.begin() + int64_t(t0 + tq) * H * D);
        if (tk > 0) {  // an empty context chunk past an empty prefix has no base to offset
          a.k.assign(k.begin() + k0 * Hkv * D, k.begin() + (k0 + tk) * Hkv * D);
          a.v.assign(v.begin() + k0 * Hkv * D, v.begin() + (k0 + tk) * Hkv * D);
        }
        AttentionOutput out = attention.attention(a, AttentionOptions{});
        // An empty chunk's LSE is declared meaningless; the caller stands in -inf before merging.
        if (tk == 0 && empty_lse_undefined) out.lse.assign(out.lse.size(), -INFINITY);
        for (float& l : out.lse) l = float(double(l) * att_to_nat * nat_to_merge);  // into the merge's base
        return out;
      };
      auto do_merge = [&](const AttentionOutput& a, const AttentionOutput& b) {
        MergeInput m;
        m.dtype = sc.dtype;
        m.num_tokens = tq;
        m.num_heads = H;
        m.head_size = D;
        m.prefix_out = a.out;
        m.suffix_out = b.out;
        m.prefix_lse = a.lse;
        m.suffix_lse = b.lse;
        const MergeOutput mo = merge.merge(m);
        AttentionOutput o;
        o.out = mo.out;
        o.lse = mo.lse;
        return o;
      };
      auto lse_detail = [](const AttentionOutput& a, const AttentionOutput& b) {
        std::ostringstream s;
        s << "first row's LSE pair " << (a.lse.empty() ? 0.0 : a.lse[0]) << ", "
          << (b.lse.empty() ? 0.0 : b.lse[0]);
        return s.str();
      };
      AttentionOutput state;
      for (int cc = 0; cc < context_chunks; ++cc) {
        const int k0 = cc * C;
        const int tk = std::max(0, std::min(C, P - k0));
        AttentionOutput part = attend(kp, vp, k0, tk, false);
        scan(part.out, part.lse, ri, ci, t0, tq, "prefix",
             "context chunk " + std::to_string(cc) + ", " + std::to_string(tk) + " keys");
        if (cc == 0) {
          state = part;
        } else {
          const std::string det = "context chunk " + std::to_string(cc) + ": " + lse_detail(state, part);
          state = do_merge(state, part);
          scan(state.out, state.lse, ri, ci, t0, tq, "prefix_merge", det);
        }
      }
      AttentionOutput suffix = attend(kn, vn, 0, t0 + tq, true);
      scan(suffix.out, suffix.lse, ri, ci, t0, tq, "suffix", std::to_string(t0 + tq) + " keys, causal");
      AttentionOutput out = suffix;
      if (context_chunks > 0) {
        const std::string det = lse_detail(state, suffix);
        out = do_merge(state, suffix);
        scan(out.out, out.lse, ri, ci, t0, tq, "merge", det);
      }
    }
  }
  if (rep.ok) {
    rep.summary = "no non-finite value in " + std::to_string(rep.rows_checked) + " rows (" +
                  std::to_string(rep.requests) + " requests, " + std::to_string(rep.chunks) + " chunks)";
  } else {
    const PrefillFinding& f = rep.findings.front();
    rep.summary = "first non-finite value: " + f.value + " at request " + std::to_string(f.request) +
                  ", chunk " + std::to_string(f.chunk) + ", token " + std::to_string(f.token) + ", head " +
                  std::to_string(f.head) + ", stage " + f.stage + " (" + f.detail + ")";
  }
  return rep;
}

bool is_prefill_scenario_file(const std::string& path) {
  try {
    validate_prefill_scenario(
        json_fields::read_text_file<PrefillScenarioError>(path, kMaxScenarioFileBytes, "scenario"));
    return true;
  } catch (const PrefillScenarioError&) {
    return false;
  }
}

PrefillReport run_prefill(const std::string& path, Subject& attention, Subject& merge) {
  const std::string text =
      json_fields::read_text_file<PrefillScenarioError>(path, kMaxScenarioFileBytes, "scenario");
  try {
    return run_prefill_text(text, attention, merge);
  } catch (const PrefillScenarioError& e) {
    throw PrefillScenarioError(path + ": " + e.what());
  }
}

}  // namespace attncheck
