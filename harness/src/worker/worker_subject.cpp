// WorkerSubject (see worker_subject.hpp): encodes a case into the shared arena and one request
// line, and decodes the reply. Inputs are written into the arena once, in the subject's element
// type and LSE layout; outputs are poisoned there first (as AbiSubject does), so an element the
// worker never wrote reads back as NaN.
#include "worker_subject.hpp"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string_view>
#include <type_traits>

#include "attncheck/abi_subject.hpp"
#include "attncheck/case.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/plugin.hpp"
#include "attncheck/staging.hpp"
#include "process.hpp"
#include "protocol.hpp"

namespace attncheck::worker {

namespace {
// A --worker subject's origin: this prefix and the command (list, reports and reproduce lines read it).
constexpr std::string_view kWorkerOriginPrefix = "worker: ";
// A worker's error text is cut to this length in a result's message (the protocol says one line).
constexpr size_t kMaxErrorChars = 500;
}  // namespace

using nlohmann::json;

namespace {

// The process and what its first handshake declared, shared by all of its subjects.
struct Host {
  std::string command, origin;
  double call_timeout_s = kDefaultCallTimeoutS;
  WorkerProcess process;
  json declared;                    // the subjects list of the first handshake
  int protocol = kProtocolVersion;  // the version the worker answered with
  explicit Host(std::string cmd) : command(cmd), process(std::move(cmd)) {}
  explicit Host(WorkerProcess::Socket socket) : command(socket.path), process(std::move(socket)) {}

  json hello(double timeout_s) {
    return process.call({{"op", "hello"},
                         {"protocol", kProtocolVersion},
                         {"arena_fd", kArenaFd},
                         {"arena_bytes", process.arena().size()}},
                        timeout_s);
  }
};

// A float as its bit pattern, "0x3e000000": the authoritative copy of a JSON number.
std::string float_bits_hex(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08x", bits);
  return hex;
}

[[noreturn]] void transport_failed(const Host& h, const std::string& what) {
  throw SubjectError(SubjectError::Kind::transport_failed,
                     "transport failed: " + what + " [worker: " + h.command + "]");
}

class WorkerSubject final : public Subject {
 public:
  WorkerSubject(std::shared_ptr<Host> host, DeclaredSubject d) : host_(std::move(host)), d_(std::move(d)) {}

  const std::string& name() const override { return d_.name; }
  const std::string& description() const override { return d_.description; }
  const ac_caps& caps() const override { return d_.caps; }
  std::string backend() const override { return d_.caps.memory == AC_MEMORY_CUDA ? "cuda" : "host"; }
  std::string origin() const override { return host_->origin; }

  void set_context(const std::string& property, const std::string& case_id) {
    property_ = property;
    case_id_ = case_id;
  }

  MergeOutput merge(const MergeInput& in) override {
    if (!has_op(AC_OP_MERGE)) throw SubjectError(SubjectError::Kind::unsupported, d_.name + " has no merge");
    const int64_t T = in.num_tokens, H = in.num_heads, D = in.head_size;
    const size_t n_out = size_t(T * H * D), n_lse = size_t(T * H);
    require_merge_sizes(in);
    const ac_lse_layout lay = d_.caps.lse_layout;
    const std::string dt = dtype_name(in.dtype);
    // An FP8 output (protocol 4, only to a worker declaring its format): out in one-byte codes of
    // out_dtype, the scale an fp32 input.
    if (const std::string why = undeclared_fp8_output(in, d_.caps); !why.empty())
      throw SubjectError(SubjectError::Kind::unsupported, d_.name + " " + why);
    const std::string od = in.fp8_out() ? kv_dtype_name(in.out_dtype) : dt;
    Layout L;
    const TensorRef po = L.add(dt, {T, H, D}), so = L.add(dt, {T, H, D});
    const TensorRef pl = L.add("fp32", lse_shape(lay, T, H)), sl = L.add("fp32", lse_shape(lay, T, H));
    const TensorRef out = L.add(od, {T, H, D}), out_lse = L.add("fp32", lse_shape(lay, T, H));
    const TensorRef scale = L.add("fp32", {in.fp8_out() ? 1 : 0});
    unsigned char* a = arena(L.size());
    put_bits(a, po, in.dtype, in.prefix_out);
    put_bits(a, so, in.dtype, in.suffix_out);
    put_lse(a, pl, lay, in.prefix_lse, T, H);
    put_lse(a, sl, lay, in.suffix_lse, T, H);
    fill_bits(a, out, in.o_dtype(), poison_bits(in.o_dtype()), n_out);
    fill_bits(a, out_lse, AC_DTYPE_F32, kPoisonF32, n_lse);
    json r = request("merge", dt, L.size());
    r["num_tokens"] = T;
    r["num_heads"] = H;
    r["head_size"] = D;
    r["inputs"] = {{"prefix_out", tensor_json(po)},
                   {"prefix_lse", tensor_json(pl)},
                   {"suffix_out", tensor_json(so)},
                   {"suffix_lse", tensor_json(sl)}};
    if (in.fp8_out()) {
      std::memcpy(a + scale.offset, &in.output_scale, sizeof(float));
      r["out_dtype"] = od;
      r["inputs"]["output_scale"] = tensor_json(scale);
    }
    r["outputs"] = {{"out", tensor_json(out)}, {"out_lse", tensor_json(out_lse)}};
    a = call(r, {{"out", out}, {"out_lse", out_lse}});
    MergeOutput m;
    m.out = get_bits(a, out, in.o_dtype(), n_out);
    m.lse = get_lse(a, out_lse, lay, T, H);
    return m;
  }

  QuantizeOutput quantize(const QuantizeInput& in) override {
    if (!has_op(AC_OP_QUANTIZE))
      throw SubjectError(SubjectError::Kind::unsupported, d_.name + " has no quantize");
    if (const std::string why = undeclared_fp8_output(in, d_.caps); !why.empty())
      throw SubjectError(SubjectError::Kind::unsupported, d_.name + " " + why);
    const int64_t T = in.num_tokens, H = in.num_heads, D = in.head_size;
    const size_t n = size_t(T * H * D);
    require_tensor_size("x", in.x.size(), n);
    const std::string dt = dtype_name(in.dtype), od = kv_dtype_name(in.out_dtype);
    Layout L;
    const TensorRef x = L.add(dt, {T, H, D}), scale = L.add("fp32", {int64_t(in.scales.size())}),
                    y = L.add(od, {T, H, D});
    unsigned char* a = arena(L.size());
    put_bits(a, x, in.dtype, in.x);
    std::memcpy(a + scale.offset, in.scales.data(), in.scales.size() * sizeof(float));
    fill_bits(a, y, in.out_dtype, poison_bits(in.out_dtype), n);
    json r = request("quantize", dt, L.size());
    r["out_dtype"] = od;
    r["num_tokens"] = T;
    r["num_heads"] = H;
    r["head_size"] = D;
    r["inputs"] = {{"x", tensor_json(x)}, {"scale", tensor_json(scale)}};
    r["outputs"] = {{"y", tensor_json(y)}};
    a = call(r, {{"y", y}});
    return QuantizeOutput{get_bits(a, y, in.out_dtype, n)};
  }

  SoftmaxOutput softmax(const SoftmaxInput& in) override {
    if (!has_op(AC_OP_SOFTMAX))
      throw SubjectError(SubjectError::Kind::unsupported, d_.name + " has no softmax");
    const size_t n = size_t(int64_t(in.rows) * in.cols);
    require_tensor_size("x", in.x.size(), n);
    const std::string dt = dtype_name(in.dtype);
    Layout L;
    const TensorRef x = L.add(dt, {in.rows, in.cols}), y = L.add(dt, {in.rows, in.cols});
    unsigned char* a = arena(L.size());
    put_bits(a, x, in.dtype, in.x);
    fill_bits(a, y, in.dtype, poison_bits(in.dtype), n);
    json r = request("softmax", dt, L.size());
    r["rows"] = in.rows;
    r["cols"] = in.cols;
    r["inputs"] = {{"x", tensor_json(x)}};
    r["outputs"] = {{"y", tensor_json(y)}};
    a = call(r, {{"y", y}});
    return SoftmaxOutput{get_bits(a, y, in.dtype, n)};
  }

  AttentionOutput attention(const AttentionInput& in_given, const AttentionOptions& opt) override {
    if (!(has_op(AC_OP_ATTENTION) || has_op(AC_OP_SPLITKV)))
      throw SubjectError(SubjectError::Kind::unsupported, d_.name + " has no attention");
    // Protocol 4 carries the variants the worker declares; one it does not declare is refused,
    // never sent to a kernel that cannot read it, and paged K / V for a worker that does not take
    // pages is sent gathered (the same attention).
    const uint32_t declared = host_->protocol >= 4 ? d_.caps.variants : 0u;
    AttentionInput gathered;
    const AttentionInput& in = input_for_subject(in_given, declared, d_.caps, d_.name, gathered);
    const PackedSequences seqs = pack_sequences(in);
    const size_t S = in.seqlens_q.size();
    const int64_t TQ = seqs.total_q(), H = in.num_heads, HK = in.num_kv_heads, D = in.head_size, DV = in.dv();
    const bool has_mask = !in.mask.empty(), has_sinks = !in.sinks.empty();
    const bool wants_lse = (d_.caps.features & AC_FEAT_LSE) != 0;
    const ac_lse_layout lay = d_.caps.lse_layout;
    const std::string dt = dtype_name(in.dtype);
    // K and V: [total_k, kv_heads, d], or the page pools [num_pages, page_size, kv_heads, d].
    const std::vector<int64_t> k_shape = in.paged() ? std::vector<int64_t>{in.num_pages, in.page_size, HK, D}
                                                    : std::vector<int64_t>{seqs.total_k(), HK, D};
    std::vector<int64_t> v_shape = k_shape;
    v_shape.back() = DV;
    // V inside K (a worker declaring v_in_k, input_for_subject kept it): no v tensor, v_in_k true.
    if (in.v_in_k) v_shape.front() = 0;
    // An FP8 KV cache (protocol 4, only to a worker declaring its format): K and V as one-byte
    // codes of that format, and their fp32 descales (one, or one per KV head); Q too, with its own
    // descales, for a worker declaring fp8_q.
    const bool fp8 = in.fp8_kv(), fp8_q = in.fp8_q();
    const std::string kv_dt = fp8 ? kv_dtype_name(in.kv_dtype) : dt;
    Layout L;
    const TensorRef q = L.add(fp8_q ? kv_dt : dt, {TQ, H, D}), k = L.add(kv_dt, k_shape),
                    v = L.add(kv_dt, v_shape);
    const TensorRef k_descale = L.add("fp32", {fp8 ? int64_t(in.k_descale.size()) : 0});
    const TensorRef v_descale = L.add("fp32", {fp8 ? int64_t(in.v_descale.size()) : 0});
    const TensorRef q_descale = L.add("fp32", {fp8_q ? int64_t(in.q_descale.size()) : 0});
    const bool has_p_scale = in.p_scale > 0.0f;
    const TensorRef p_scale = L.add("fp32", {has_p_scale ? 1 : 0});
    const TensorRef output_scale = L.add("fp32", {in.fp8_out() ? 1 : 0});
    const TensorRef mask = L.add("u8", {has_mask ? seqs.cu_mask.back() : 0});
    const TensorRef sinks = L.add("fp32", {has_sinks ? H : 0});
    const TensorRef table = L.add("i32", {in.paged() ? int64_t(S) : 0, in.paged() ? in.max_blocks : 0});
    const std::string od = in.fp8_out() ? kv_dtype_name(in.out_dtype) : dt;  // an FP8 output's format
    const TensorRef out = L.add(od, {TQ, H, DV});
    const TensorRef lse = L.add("fp32", wants_lse ? lse_shape(lay, TQ, H) : std::vector<int64_t>{0});
    const TensorRef amax = L.add("fp32", {in.want_amax ? 2 : 0});  // fp8 "amax": P's and O's maxima
    unsigned char* a = arena(L.size());
    put_bits(a, q, in.q_dtype(), in.q);
    put_bits(a, k, in.k_dtype(), in.k);
    if (!in.v_in_k) put_bits(a, v, in.k_dtype(), in.v);
    if (fp8) {
      std::memcpy(a + k_descale.offset, in.k_descale.data(), in.k_descale.size() * sizeof(float));
      std::memcpy(a + v_descale.offset, in.v_descale.data(), in.v_descale.size() * sizeof(float));
    }
    if (fp8_q) std::memcpy(a + q_descale.offset, in.q_descale.data(), in.q_descale.size() * sizeof(float));
    if (has_p_scale) std::memcpy(a + p_scale.offset, &in.p_scale, sizeof(float));
    if (in.fp8_out()) std::memcpy(a + output_scale.offset, &in.output_scale, sizeof(float));
    if (has_mask) std::memcpy(a + mask.offset, in.mask.data(), in.mask.size());
    if (has_sinks) std::memcpy(a + sinks.offset, in.sinks.data(), in.sinks.size() * sizeof(float));
    if (in.paged())
      std::memcpy(a + table.offset, in.block_table.data(), in.block_table.size() * sizeof(int32_t));
    fill_bits(a, out, in.o_dtype(), poison_bits(in.o_dtype()), size_t(TQ * H * DV));
    if (wants_lse) fill_bits(a, lse, AC_DTYPE_F32, kPoisonF32, size_t(TQ * H));
    if (in.want_amax) fill_bits(a, amax, AC_DTYPE_F32, kPoisonF32, 2);
    const bool splitkv = !has_op(AC_OP_ATTENTION) || opt.num_splits > 1;
    json r = request(splitkv ? "splitkv" : "attention", dt, L.size());
    r["num_seqs"] = S;
    r["seqlens_q"] = in.seqlens_q;
    r["seqlens_k"] = in.seqlens_k;
    r["cu_seqlens_q"] = seqs.cu_q;
    r["cu_seqlens_k"] = seqs.cu_k;
    r["max_seqlen_q"] = seqs.max_q;
    r["max_seqlen_k"] = seqs.max_k;
    r["num_heads"] = H;
    r["num_kv_heads"] = HK;
    r["head_size"] = D;
    r["causal"] = in.causal;
    r["softmax_scale"] = double(in.softmax_scale);  // exact: every float is a double
    r["softmax_scale_bits"] = float_bits_hex(in.softmax_scale);
    if (d_.tilings.empty()) {
      r["tiling"] = nullptr;  // protocol 2: the subject declares no tilings
    } else {
      json tiling = {{"index", opt.tiling}};
      if (opt.tiling >= 0 && opt.tiling < int32_t(d_.tilings.size())) {
        tiling["br"] = d_.tilings[size_t(opt.tiling)].br;
        tiling["bc"] = d_.tilings[size_t(opt.tiling)].bc;
      }
      r["tiling"] = tiling;
    }
    r["num_splits"] = opt.num_splits;
    r["fold_order"] = fold_name(opt.fold_order);
    // Protocol 4: each declared variant's fields, in every call (at their neutral values when the
    // call does not use it), so a worker reads them without asking whether they are there.
    if (declared & AC_VAR_HEAD_SIZE_V) r["head_size_v"] = DV;
    if (declared & AC_VAR_SOFTCAP) {
      r["softcap"] = double(in.softcap);
      r["softcap_bits"] = float_bits_hex(in.softcap);
    }
    if (declared & AC_VAR_WINDOW) {
      r["window_left"] = in.window_left;
      r["window_right"] = in.window_right;
    }
    if (declared & AC_VAR_PAGED_KV) {
      r["page_size"] = in.page_size;
      r["num_pages"] = in.num_pages;
      r["max_blocks"] = in.max_blocks;
    }
    r["inputs"] = {{"q", tensor_json(q)}, {"k", tensor_json(k)}};
    if (in.v_in_k)
      r["v_in_k"] = true;
    else
      r["inputs"]["v"] = tensor_json(v);
    if (has_mask) {
      r["inputs"]["mask"] = tensor_json(mask);
      r["cu_mask"] = seqs.cu_mask;
    } else {
      r["cu_mask"] = nullptr;
    }
    if (has_sinks) r["inputs"]["sinks"] = tensor_json(sinks);
    if (fp8) {
      r["kv_dtype"] = kv_dt;
      r["inputs"]["k_descale"] = tensor_json(k_descale);
      r["inputs"]["v_descale"] = tensor_json(v_descale);
      if (fp8_q) r["inputs"]["q_descale"] = tensor_json(q_descale);
      if (has_p_scale) r["inputs"]["p_scale"] = tensor_json(p_scale);
      if (in.fp8_out()) {
        r["out_dtype"] = od;
        r["inputs"]["output_scale"] = tensor_json(output_scale);
      }
    }
    if (in.paged()) r["inputs"]["block_table"] = tensor_json(table);
    r["outputs"] = {{"out", tensor_json(out)}};
    std::vector<std::pair<std::string, TensorRef>> outs = {{"out", out}};
    if (wants_lse) {
      r["outputs"]["lse"] = tensor_json(lse);
      outs.push_back({"lse", lse});
    }
    if (in.want_amax) {
      r["outputs"]["amax"] = tensor_json(amax);
      outs.push_back({"amax", amax});
    }
    a = call(r, outs);
    AttentionOutput o;
    o.out = get_bits(a, out, in.o_dtype(), size_t(TQ * H * DV));
    if (wants_lse) o.lse = get_lse(a, lse, lay, TQ, H);
    if (in.want_amax)
      o.amax = get_lse(a, amax, AC_LSE_TOKENS_HEADS, 1, 2);  // two fp32 values, as one LSE row
    return o;
  }

 private:
  unsigned char* arena(size_t bytes) {
    try {
      ensure_running();
      host_->process.arena().reserve(bytes);
    } catch (const CallInterrupted& e) {
      throw SubjectError(SubjectError::Kind::interrupted, e.what());
    } catch (const TransportError& e) {
      transport_failed(*host_, e.what());
    }
    return host_->process.arena().data();
  }

  // A restarted worker must declare the same subjects as the first one did.
  void ensure_running() {
    if (host_->process.running()) return;
    json reply;
    reply = host_->hello(std::max(kMinHandshakeTimeoutS, host_->call_timeout_s));
    if (reply.value("status", "") != "ok" || !reply.contains("subjects") ||
        reply["subjects"] != host_->declared) {
      host_->process.shutdown();
      throw TransportError("worker declared different subjects after its restart (" +
                           reply.dump().substr(0, 80) + ")");
    }
  }

  json request(const char* op, const std::string& dtype, size_t arena_bytes) {
    ++calls_;
    return {{"op", op},
            {"subject", d_.name},
            {"case_id", case_id_.empty() ? d_.name + "/" + std::to_string(calls_) : case_id_},
            {"property", property_},
            {"dtype", dtype},
            {"arena_bytes", std::max(arena_bytes, host_->process.arena().size())}};
  }

  // Sends the request; on success checks the byte counts the worker says it wrote and returns the
  // arena's base (it may have moved while growing).
  unsigned char* call(const json& r, const std::vector<std::pair<std::string, TensorRef>>& outputs) {
    json reply;
    try {
      ensure_running();
      reply = host_->process.call(r, host_->call_timeout_s);
    } catch (const CallInterrupted& e) {
      throw SubjectError(SubjectError::Kind::interrupted, e.what());
    } catch (const TransportError& e) {
      transport_failed(*host_, e.what());
    }
    const std::string status = reply["status"].get<std::string>();
    // The worker's words reach the terminal, report.md and the corpus note: control bytes (an
    // escape sequence, a newline) are written as escapes there.
    const std::string why = reply.contains("error") && reply["error"].is_string()
                                ? json_fields::printable(reply["error"].get<std::string>(), kMaxErrorChars)
                                : "no reason given";
    const std::string where = d_.name + " " + r["op"].get<std::string>() + ": ";
    if (status == "unsupported") throw SubjectError(SubjectError::Kind::unsupported, where + why);
    if (status == "device_error") {
      // A faulted CUDA context is unusable: the next call gets a fresh worker.
      host_->process.shutdown();
      throw SubjectError(SubjectError::Kind::device_fault, where + why + " (worker restarted)");
    }
    if (status == "error") throw SubjectError(SubjectError::Kind::internal, where + why);
    if (status != "ok") {
      host_->process.shutdown();
      transport_failed(*host_, "worker broke the protocol: unknown reply status '" + status +
                                   "' (ok, unsupported, device_error, error)");
    }
    if (!host_->process.arena().intact()) {
      host_->process.shutdown();
      transport_failed(*host_, "worker broke the shared arena: the file is smaller than its mapping");
    }
    if (!reply.contains("written") || !reply["written"].is_object()) {
      host_->process.shutdown();
      transport_failed(
          *host_, "worker broke the protocol: an ok reply without \"written\" (bytes written per output)");
    }
    for (const auto& [name, t] : outputs) {
      const json& w = reply["written"];
      const int64_t got = w.contains(name) && w[name].is_number_integer() ? w[name].get<int64_t>() : -1;
      if (got != int64_t(t.bytes))
        throw SubjectError(SubjectError::Kind::internal,
                           where + "returned a wrong-sized output: " + name + " of " +
                               (got < 0 ? std::string("no") : std::to_string(got)) + " bytes, expected " +
                               std::to_string(t.bytes));
    }
    return host_->process.arena().data();
  }

  std::shared_ptr<Host> host_;
  DeclaredSubject d_;
  std::string property_, case_id_;
  int64_t calls_ = 0;
};

// A subject of this process whose calls a device server makes when it can (served_subjects).
// Only the server's "ok" is taken from it: whatever else happens there (a refusal, an error, a
// fault, a dead or hung server) the call is made again here, so every verdict, refusal and crash
// is the in-process subject's own. A transport failure or a fault drops the server for good: its
// context may be unusable, and the process's own context is as good.
std::mutex redone_mutex;
ServedRedone redone;

void note_redone(const std::string& why) {
  std::lock_guard<std::mutex> lock(redone_mutex);
  if (redone.calls++ == 0) redone.first = json_fields::printable(why, json_fields::kMaxMessageChars);
}

class ServedSubject final : public Subject {
 public:
  ServedSubject(std::unique_ptr<Subject> local, std::unique_ptr<Subject> remote)
      : local_(std::move(local)), remote_(std::move(remote)) {}

  const std::string& name() const override { return local_->name(); }
  const std::string& description() const override { return local_->description(); }
  const ac_caps& caps() const override { return local_->caps(); }
  std::string backend() const override { return local_->backend(); }
  std::string origin() const override { return local_->origin(); }

  MergeOutput merge(const MergeInput& in) override {
    return either(in.prefix_out.size() + in.suffix_out.size(), [&](Subject& s) { return s.merge(in); });
  }
  SoftmaxOutput softmax(const SoftmaxInput& in) override {
    return either(in.x.size(), [&](Subject& s) { return s.softmax(in); });
  }
  AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override {
    return either(in.q.size() + in.k.size() + in.v.size(), [&](Subject& s) { return s.attention(in, opt); });
  }
  QuantizeOutput quantize(const QuantizeInput& in) override {
    return either(in.x.size(), [&](Subject& s) { return s.quantize(in); });
  }

 private:
  // Inputs of more elements than this are staged here: the server would copy them twice more
  // (into the arena, out of it) and hold its one device for each such call in turn, while a call
  // this large keeps its own context busy long enough that switching contexts costs little. On
  // the H200 the long suite's layer cases (5 x 10^7 elements) through the server stalled its
  // split_order_drift pairs; the gate's cases are all far below.
  static constexpr size_t kServedElements = size_t(1) << 20;

  template <class Call>
  std::invoke_result_t<Call&, Subject&> either(size_t elements, Call&& call) {
    if (remote_ && elements <= kServedElements) {
      // A child's call timeout (SIGALRM, armed before the call) times the calls it makes itself:
      // the server's call has its own deadline, so the countdown stops while the server works and
      // a call redone here gets all of it.
      const unsigned left = ::alarm(0);
      std::string failed;
      try {
        auto out = call(*remote_);
        if (left) ::alarm(left);
        return out;
      } catch (const SubjectError& e) {
        if (left) ::alarm(left);
        if (e.kind == SubjectError::Kind::transport_failed || e.kind == SubjectError::Kind::device_fault)
          remote_.reset();
        failed = e.what();
      }
      auto out = call(*local_);
      note_redone(failed);
      return out;
    }
    return call(*local_);
  }

  std::unique_ptr<Subject> local_, remote_;
};

// The one line of a failed handshake, in at most `limit` characters: the worker's command, what
// happened, and its last stderr lines. The CLI cuts a longer line at its end, which drops the last
// of those lines, and the last line of a Python traceback is its cause ("ModuleNotFoundError: No
// module named 'numpy'"). So where the line is too long, the quote keeps its end and loses its
// start; before that, a long command keeps only its two ends (the program and the script), so as
// to leave the quote at least kMinQuote characters; what happened is cut last.
std::string handshake_failed_line(const std::string& command, const std::string& reason,
                                  const std::string& tail, size_t limit) {
  const std::string sep = "; last stderr: ", cut = "...";
  constexpr size_t kMinQuote = 160, kCommandEnd = 40;
  const auto head_of = [&](const std::string& cmd) {
    return "worker '" + cmd + "': handshake failed: " + reason;
  };
  std::string head = head_of(command);
  if (tail.empty()) return head;
  const size_t min_quote = std::min(tail.size(), kMinQuote);
  if (head.size() + sep.size() + min_quote > limit && command.size() > 2 * kCommandEnd + cut.size())
    head = head_of(command.substr(0, kCommandEnd) + cut + command.substr(command.size() - kCommandEnd));
  if (head.size() + sep.size() + min_quote > limit)
    head = head.substr(0, limit - sep.size() - min_quote - cut.size()) + cut;
  const size_t room = limit - head.size() - sep.size();
  return head + sep + json_fields::printable_tail(tail, room);
}

}  // namespace

std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_@%+=:,./-", c) != nullptr;
  });
  if (plain) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::unique_ptr<Subject>> load_worker_subjects(const std::string& command,
                                                           const WorkerOptions& opt) {
  const std::string where = "worker '" + command + "': ";
  if (!(opt.call_timeout_s > 0)) throw HandshakeError("--call-timeout must be positive");
  auto host = std::make_shared<Host>(command);
  host->call_timeout_s = opt.call_timeout_s;
  host->origin = opt.origin.empty() ? std::string(kWorkerOriginPrefix) + command : opt.origin;
  json reply;
  try {
    host->process.start();
    reply = host->hello(std::max(kMinHandshakeTimeoutS, opt.call_timeout_s));
  } catch (const TransportError& e) {
    throw HandshakeError(
        handshake_failed_line(command, e.reason, e.stderr_tail, json_fields::kMaxMessageChars));
  }
  if (reply["status"] != "ok")
    throw HandshakeError(
        where + "handshake refused: " + (reply.contains("error") ? reply["error"].dump() : reply.dump()));
  const bool known_protocol = reply.contains("protocol") && reply["protocol"].is_number_integer() &&
                              reply["protocol"].get<int>() >= kMinProtocolVersion &&
                              reply["protocol"].get<int>() <= kProtocolVersion;
  if (!known_protocol)
    throw HandshakeError(where + "speaks protocol " +
                         (reply.contains("protocol") ? reply["protocol"].dump() : "(none)") +
                         ", this attncheck speaks " + std::to_string(kMinProtocolVersion) + " to " +
                         std::to_string(kProtocolVersion));
  host->protocol = reply["protocol"].get<int>();
  host->process.require_seq(host->protocol >= 3);
  if (!reply.contains("subjects") || !reply["subjects"].is_array() || reply["subjects"].empty())
    throw HandshakeError(where + "declares no subjects");
  host->declared = reply["subjects"];
  std::vector<std::unique_ptr<Subject>> out;
  std::set<std::string> names;
  for (size_t i = 0; i < host->declared.size(); ++i) {
    DeclaredSubject d;
    const json& j = host->declared[i];
    // Built with append rather than operator+ chains: GCC 12 -Wrestrict misfires on those.
    std::string label;
    if (j.contains("name") && j["name"].is_string())
      // Cut and escaped: an over-long name must leave room in the line for what is wrong with it.
      label.append(1, '\'')
          .append(json_fields::printable(j["name"].get<std::string>(), AC_MAX_NAME_CHARS))
          .append(1, '\'');
    else
      label.append("#").append(std::to_string(i));
    try {
      d = caps_from_json(j, host->protocol);
    } catch (const ProtocolError& e) {
      throw HandshakeError(where + "subject " + label + ": " + e.what());
    }
    // The same validation as a C-ABI plugin's, with stand-in function pointers: a worker serves
    // every operation it declares.
    ac_subject s{};
    s.name = d.name.c_str();
    s.description = d.description.c_str();
    s.caps = d.caps;
    s.merge = [](void*, const ac_merge_args*, char*, size_t) { return AC_OK; };
    s.softmax = [](void*, const ac_softmax_args*, char*, size_t) { return AC_OK; };
    s.attention = [](void*, const ac_attention_args*, char*, size_t) { return AC_OK; };
    s.quantize = [](void*, const ac_quantize_args*, char*, size_t) { return AC_OK; };
    const auto problems = validate_subject(s, abi_version_of_protocol(host->protocol));
    if (!problems.empty()) throw HandshakeError(where + "subject " + label + ": " + problems.front());
    if (!names.insert(d.name).second)
      throw HandshakeError(where + "subject name " + label + " declared twice");
    out.push_back(std::make_unique<WorkerSubject>(host, std::move(d)));
  }
  return out;
}

namespace {
// The running executable's path ("" when /proc cannot say).
std::string self_path() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  self[n] = 0;
  return self;
}
}  // namespace

std::string isolate_command(const std::string& plugin_path) {
  const std::string self = self_path();
  const std::string dir = self.empty() ? "." : self.substr(0, self.rfind('/'));
  return shell_word(dir + "/attncheck-isolate") + " " + shell_word(plugin_path);
}

std::string device_server_command(const std::string& socket_path, const std::string& backend,
                                  const std::string& device, double call_limit_s,
                                  const std::string& log_path) {
  return "env" + (device.empty() ? std::string() : " CUDA_VISIBLE_DEVICES=" + shell_word(device)) + " " +
         shell_word(self_path()) + " " + kDeviceServerFlag + " " + shell_word(socket_path) + " " +
         shell_word(backend) + " " + std::to_string(call_limit_s) + " 2>>" + shell_word(log_path);
}

ServedRedone served_redone() {
  std::lock_guard<std::mutex> lock(redone_mutex);
  return redone;
}

std::vector<std::unique_ptr<Subject>> served_subjects(std::vector<std::unique_ptr<Subject>> subjects,
                                                      const std::string& socket_path, double call_timeout_s,
                                                      const std::function<bool(const Subject&)>& which) {
  auto host = std::make_shared<Host>(WorkerProcess::Socket{socket_path});
  host->call_timeout_s = call_timeout_s;
  host->origin = "builtin";
  json reply;
  try {
    host->process.start();
    reply = host->hello(call_timeout_s);
  } catch (const TransportError&) {
    return subjects;  // no server: every call in this process, as without one
  }
  if (reply.value("status", "") != "ok" || !reply.contains("subjects") || !reply["subjects"].is_array())
    return subjects;
  host->declared = reply["subjects"];
  host->protocol = reply.value("protocol", kProtocolVersion);
  host->process.require_seq(host->protocol >= 3);
  for (auto& s : subjects) {
    if (!which(*s)) continue;
    for (const json& j : host->declared) {
      if (!j.contains("name") || j["name"] != s->name()) continue;
      try {
        s = std::make_unique<ServedSubject>(
            std::move(s), std::make_unique<WorkerSubject>(host, caps_from_json(j, host->protocol)));
      } catch (const ProtocolError&) {
      }
      break;
    }
  }
  return subjects;
}

void set_call_context(Subject& s, const std::string& property, const std::string& case_id) {
  if (auto* w = dynamic_cast<WorkerSubject*>(&s)) w->set_context(property, case_id);
}

bool is_worker_subject(const Subject& s) { return dynamic_cast<const WorkerSubject*>(&s) != nullptr; }

std::string worker_command_of(const Subject& s) {
  const std::string origin = s.origin();
  return is_worker_subject(s) && origin.rfind(kWorkerOriginPrefix, 0) == 0
             ? origin.substr(kWorkerOriginPrefix.size())
             : "";
}

std::function<void(const Case&)> call_context_hook(Subject& s, int shard_index) {
  auto* w = dynamic_cast<WorkerSubject*>(&s);
  if (!w) return nullptr;
  auto n = std::make_shared<int64_t>(0);
  return [w, n, shard_index](const Case& c) {
    w->set_context(c.property, c.subject + "/" + c.property + "/" + std::to_string(shard_index) + "/" +
                                   std::to_string(++*n));
  };
}

}  // namespace attncheck::worker
