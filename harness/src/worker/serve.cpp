// The worker side of the protocol: requests answered by AbiSubject-adapted subjects, and the
// device server (serve.hpp).
#include "serve.hpp"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "../staging_buffers.hpp"
#include "attncheck/case.hpp"
#include "attncheck/json_fields.hpp"
#include "process.hpp"
#include "worker_subject.hpp"

namespace attncheck::worker {

using nlohmann::json;

void ArenaMap::map(size_t bytes) {
  if (bytes <= size) return;
  if (base) ::munmap(base, size);
  base = nullptr;
  size = 0;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw ProtocolError("cannot map the arena (fd " + std::to_string(fd) + ", " + std::to_string(bytes) +
                        " bytes)");
  base = static_cast<unsigned char*>(p);
  size = bytes;
}

std::FILE* private_stdout() {
  const int fd = ::dup(1);
  if (fd < 0) return nullptr;
  ::dup2(2, 1);
  return ::fdopen(fd, "w");
}

void reply(std::FILE* proto, const json& j) {
  const std::string s = j.dump() + "\n";
  std::fwrite(s.data(), 1, s.size(), proto);
  std::fflush(proto);
}

namespace {

std::atomic<int64_t> g_served{0};  // the device server's calls answered "ok"

// The calls in progress, by connection, for the watchdog (run_device_server).
std::mutex g_inflight_mutex;
std::map<int, std::chrono::steady_clock::time_point> g_inflight;

// Faults to show in tests (tests/harness/device_server.sh) that the clients' verdicts do not
// change: ATTNCHECK_DEVICE_SERVER_DIES_AFTER=N ends the server after its N-th call without
// answering it, as a server that crashes mid-run would; ATTNCHECK_DEVICE_SERVER_DELAY_MS=M makes
// every call M ms slower, as a kernel that hangs would (the watchdog then ends the server).
int64_t env_count(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : -1;
}
int64_t dies_after() {
  static const int64_t n = env_count("ATTNCHECK_DEVICE_SERVER_DIES_AFTER");
  return n;
}
int64_t delay_ms() {
  static const int64_t n = env_count("ATTNCHECK_DEVICE_SERVER_DELAY_MS");
  return n;
}

TensorRef in(const json& r, const char* group, const char* name) {
  return tensor_from_json(r.at(group).at(name), name);
}

// A tensor of n four-byte elements of type `dtype` (the variants' sinks and block table), which
// must be what its descriptor says.
template <class T>
std::vector<T> get_words(const unsigned char* arena, const TensorRef& t, const char* dtype, size_t n) {
  static_assert(sizeof(T) == 4);
  if (t.dtype != dtype || t.bytes != n * 4)
    throw ProtocolError("tensor of " + t.dtype + ", " + std::to_string(t.bytes) + " bytes where " +
                        std::to_string(n) + " " + dtype + " elements belong");
  std::vector<T> out(n);
  if (n) std::memcpy(out.data(), arena + t.offset, n * 4);
  return out;
}
std::vector<float> get_floats(const unsigned char* arena, const TensorRef& t, size_t n) {
  return get_words<float>(arena, t, "fp32", n);
}
std::vector<int32_t> get_int32s(const unsigned char* arena, const TensorRef& t, size_t n) {
  return get_words<int32_t>(arena, t, "i32", n);
}

// A float from its bit pattern as the request writes it ("0x41f00000"), the authoritative copy.
float float_from_hex(const json& v, const char* field) {
  const std::string s = v.is_string() ? v.get<std::string>() : "";
  char* end = nullptr;
  const unsigned long long bits =
      s.size() == 10 && s.rfind("0x", 0) == 0 ? std::strtoull(s.c_str(), &end, 16) : 0;
  if (!end || *end != 0) throw ProtocolError(std::string("'") + field + "' must be \"0x\" and 8 hex digits");
  const uint32_t b = uint32_t(bits);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// An FP8 format's word ("e4m3fn"), for `field`.
ac_dtype fp8_word(const json& r, const char* field) {
  const std::string f = r.contains(field) && r[field].is_string() ? r[field].get<std::string>() : "";
  const auto kv = kv_dtype_from(f);
  if (!kv) throw ProtocolError(std::string("'") + field + "' must be one of " + kv_dtype_names());
  return *kv;
}

json serve_call(const json& r, Subject& s, unsigned char* arena) {
  const std::string op = r.at("op");
  const ac_dtype d = dtype_from_word(r.at("dtype"));
  const ac_lse_layout lay = s.caps().lse_layout;
  json written;
  if (op == "merge") {
    MergeInput m;
    m.dtype = d;
    m.num_tokens = r.at("num_tokens");
    m.num_heads = r.at("num_heads");
    m.head_size = r.at("head_size");
    const int64_t T = m.num_tokens, H = m.num_heads;
    const size_t n = size_t(T * H * m.head_size);
    m.prefix_out = get_bits(arena, in(r, "inputs", "prefix_out"), d, n);
    m.suffix_out = get_bits(arena, in(r, "inputs", "suffix_out"), d, n);
    m.prefix_lse = get_lse(arena, in(r, "inputs", "prefix_lse"), lay, T, H);
    m.suffix_lse = get_lse(arena, in(r, "inputs", "suffix_lse"), lay, T, H);
    if (r.contains("out_dtype")) {  // an FP8 output, divided by its scale
      m.out_dtype = fp8_word(r, "out_dtype");
      m.output_scale = get_floats(arena, in(r, "inputs", "output_scale"), 1).at(0);
    }
    const MergeOutput o = s.merge(m);
    const auto out = in(r, "outputs", "out"), out_lse = in(r, "outputs", "out_lse");
    put_bits(arena, out, m.o_dtype(), o.out);
    put_lse(arena, out_lse, lay, o.lse, T, H);
    written = {{"out", out.bytes}, {"out_lse", out_lse.bytes}};
  } else if (op == "softmax") {
    SoftmaxInput x;
    x.dtype = d;
    x.rows = r.at("rows");
    x.cols = r.at("cols");
    x.x = get_bits(arena, in(r, "inputs", "x"), d, size_t(int64_t(x.rows) * x.cols));
    const SoftmaxOutput o = s.softmax(x);
    const auto y = in(r, "outputs", "y");
    put_bits(arena, y, d, o.y);
    written = {{"y", y.bytes}};
  } else if (op == "attention" || op == "splitkv") {
    AttentionInput a;
    a.dtype = d;
    a.num_heads = r.at("num_heads");
    a.num_kv_heads = r.at("num_kv_heads");
    a.head_size = r.at("head_size");
    a.seqlens_q = r.at("seqlens_q").get<std::vector<int32_t>>();
    a.seqlens_k = r.at("seqlens_k").get<std::vector<int32_t>>();
    a.causal = r.at("causal");
    a.softmax_scale = float(r.at("softmax_scale").get<double>());
    // Protocol 4's variants: a field the request leaves out is the variant's neutral value.
    // head_size_v equal to head_size is the plain contract's input (head_size_v 0), as it was sent.
    const int32_t dv = r.value("head_size_v", 0);
    a.head_size_v = dv == a.head_size ? 0 : dv;
    if (r.contains("softcap_bits"))
      a.softcap = float_from_hex(r["softcap_bits"], "softcap_bits");
    else if (r.contains("softcap"))
      a.softcap = float(r["softcap"].get<double>());
    a.window_left = r.value("window_left", -1);
    a.window_right = r.value("window_right", -1);
    a.page_size = r.value("page_size", 0);
    a.num_pages = r.value("num_pages", 0);
    a.max_blocks = r.value("max_blocks", 0);
    int64_t tq = 0;
    for (size_t i = 0; i < a.seqlens_q.size(); ++i) tq += a.seqlens_q[i];
    if (a.seqlens_k.size() != a.seqlens_q.size())
      throw ProtocolError("seqlens_q and seqlens_k differ in length");
    if (r.at("inputs").contains("sinks"))
      a.sinks = get_floats(arena, in(r, "inputs", "sinks"), size_t(a.num_heads));
    if (a.paged()) {
      if (a.max_blocks < 0)
        throw ProtocolError("max_blocks " + std::to_string(a.max_blocks) + " is negative");
      const auto t = in(r, "inputs", "block_table");
      a.block_table = get_int32s(arena, t, a.seqlens_k.size() * size_t(a.max_blocks));
    }
    // An FP8 KV cache: the format, and one descale per tensor, per KV head or per (sequence, KV
    // head) (Q's too, where Q is in FP8).
    if (r.contains("kv_dtype")) {
      const std::string f = r["kv_dtype"].is_string() ? r["kv_dtype"].get<std::string>() : "";
      const auto kv = kv_dtype_from(f);
      if (!kv) throw ProtocolError("'kv_dtype' must be one of " + kv_dtype_names());
      a.kv_dtype = *kv;
      for (auto [field, to] : {std::pair{"k_descale", &a.k_descale}, std::pair{"v_descale", &a.v_descale},
                               std::pair{"q_descale", &a.q_descale}}) {
        if (to == &a.q_descale && !r.at("inputs").contains(field)) continue;  // q in dtype
        const TensorRef t = in(r, "inputs", field);
        const size_t n = t.bytes / 4;
        const size_t per_sequence = a.seqlens_q.size() * size_t(a.num_kv_heads);
        if (n != 1 && n != size_t(a.num_kv_heads) && n != per_sequence)
          throw ProtocolError(std::string("'") + field + "' holds " + std::to_string(n) +
                              " values; one, one per KV head (" + std::to_string(a.num_kv_heads) +
                              ") or one per (sequence, KV head) (" + std::to_string(per_sequence) + ")");
        *to = get_floats(arena, t, n);
      }
      if (r.at("inputs").contains("p_scale"))
        a.p_scale = get_floats(arena, in(r, "inputs", "p_scale"), 1).at(0);
      if (r.contains("out_dtype")) {  // O in FP8, divided by its scale
        a.out_dtype = fp8_word(r, "out_dtype");
        a.output_scale = get_floats(arena, in(r, "inputs", "output_scale"), 1).at(0);
      }
    }
    // Checked before K and V are read: their sizes come from the page numbers.
    if (const std::string why = attention_variant_problem(a); !why.empty()) throw ProtocolError(why);
    const size_t rows = size_t(a.kv_rows());
    a.q = get_bits(arena, in(r, "inputs", "q"), a.q_dtype(), size_t(tq * a.num_heads * a.head_size));
    a.k = get_bits(arena, in(r, "inputs", "k"), a.k_dtype(),
                   rows * size_t(a.num_kv_heads) * size_t(a.head_size));
    // V inside K (protocol 4, v_in_k): no v input; V is K's first head_size_v columns.
    if (r.value("v_in_k", false))
      a.share_v_with_k();
    else
      a.v =
          get_bits(arena, in(r, "inputs", "v"), a.k_dtype(), rows * size_t(a.num_kv_heads) * size_t(a.dv()));
    if (r.at("inputs").contains("mask")) {
      const auto m = in(r, "inputs", "mask");
      a.mask.assign(arena + m.offset, arena + m.offset + m.bytes);
    }
    a.want_amax = r.at("outputs").contains("amax");
    AttentionOptions opt;
    // null: the subject declares no tilings (AbiSubject then passes the plugin -1).
    opt.tiling = r.at("tiling").is_null() ? 0 : r.at("tiling").at("index").get<int32_t>();
    opt.num_splits = r.at("num_splits");
    opt.fold_order = fold_from_word(r.at("fold_order"));
    const AttentionOutput o = s.attention(a, opt);
    const auto out = in(r, "outputs", "out");
    put_bits(arena, out, a.o_dtype(), o.out);
    written = {{"out", out.bytes}};
    if (r.at("outputs").contains("lse")) {
      const auto lse = in(r, "outputs", "lse");
      put_lse(arena, lse, lay, o.lse, tq, a.num_heads);
      written["lse"] = lse.bytes;
    }
    if (a.want_amax) {  // two fp32 values, written as one LSE row
      const auto amax = in(r, "outputs", "amax");
      if (o.amax.size() != 2) throw std::runtime_error("the subject wrote no amax");
      put_lse(arena, amax, AC_LSE_TOKENS_HEADS, o.amax, 1, 2);
      written["amax"] = amax.bytes;
    }
  } else if (op == "quantize") {
    QuantizeInput q;
    q.dtype = d;
    q.out_dtype = fp8_word(r, "out_dtype");
    q.num_tokens = r.at("num_tokens");
    q.num_heads = r.at("num_heads");
    q.head_size = r.at("head_size");
    const size_t n = size_t(int64_t(q.num_tokens) * q.num_heads * q.head_size);
    const auto scale = in(r, "inputs", "scale");
    q.scales = get_floats(arena, scale, scale.bytes / sizeof(float));
    q.x = get_bits(arena, in(r, "inputs", "x"), d, n);
    const QuantizeOutput o = s.quantize(q);
    const auto y = in(r, "outputs", "y");
    put_bits(arena, y, q.out_dtype, o.y);
    written = {{"y", y.bytes}};
  } else {
    throw ProtocolError("unknown op '" + op + "'");
  }
  return {{"status", "ok"}, {"written", written}};
}

}  // namespace

json answer(const json& r, const std::vector<std::unique_ptr<Subject>>& subjects, ArenaMap& arena) {
  try {
    if (r.contains("arena_bytes")) arena.map(r["arena_bytes"].get<size_t>());
    Subject* s = nullptr;
    for (auto& c : subjects)
      if (c->name() == r.at("subject").get<std::string>()) s = c.get();
    if (!s) throw ProtocolError("unknown subject " + r.at("subject").dump());
    return serve_call(r, *s, arena.base);
  } catch (const SubjectError& e) {
    const char* status = e.kind == SubjectError::Kind::unsupported    ? "unsupported"
                         : e.kind == SubjectError::Kind::device_fault ? "device_error"
                                                                      : "error";
    return {{"status", status}, {"error", e.what()}};
  } catch (const std::exception& e) {
    return {{"status", "error"}, {"error", std::string("attncheck worker: ") + e.what()}};
  }
}

json hello_reply(const std::vector<std::unique_ptr<Subject>>& subjects, const std::string& worker) {
  json list = json::array();
  for (const auto& s : subjects) list.push_back(caps_to_json(s->name(), s->description(), s->caps()));
  return {{"status", "ok"}, {"protocol", kProtocolVersion}, {"worker", worker}, {"subjects", list}};
}

namespace {

bool send_all(int fd, const std::string& s) {
  for (size_t sent = 0; sent < s.size();) {
    const ssize_t n = ::send(fd, s.data() + sent, s.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

// One client of the device server, until it disconnects.
void serve_connection(int fd, const std::vector<std::unique_ptr<Subject>>& subjects,
                      const std::string& worker) {
  ArenaMap arena;
  arena.fd = receive_fd(fd);
  std::string buf;
  char chunk[65536];
  bool open = arena.fd >= 0;
  while (open) {
    size_t nl;
    while ((nl = buf.find('\n')) == std::string::npos) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        open = false;
        break;
      }
      buf.append(chunk, size_t(n));
    }
    if (!open) break;
    const std::string line = buf.substr(0, nl);
    buf.erase(0, nl + 1);
    json r, out;
    try {
      r = json::parse(line);
      if (r.at("op") == "hello") {
        out = hello_reply(subjects, worker);
      } else {
        {
          const std::lock_guard<std::mutex> lock(g_inflight_mutex);
          g_inflight[fd] = std::chrono::steady_clock::now();
        }
        if (delay_ms() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms()));
        out = answer(r, subjects, arena);
        const std::lock_guard<std::mutex> lock(g_inflight_mutex);
        g_inflight.erase(fd);
      }
    } catch (const std::exception& e) {
      out = {{"status", "error"}, {"error", std::string("attncheck worker: ") + e.what()}};
    }
    if (out["status"] == "ok" && r.value("op", "") != "hello" && ++g_served == dies_after()) std::_Exit(9);
    if (!send_all(fd, with_seq(r, out).dump() + "\n")) break;
    if (out["status"] == "device_error") std::_Exit(3);  // the context is gone for every client
  }
  if (arena.base) ::munmap(arena.base, arena.size);
  if (arena.fd >= 0) ::close(arena.fd);
  ::close(fd);
}

}  // namespace

int run_device_server(const std::string& socket_path, const std::vector<std::unique_ptr<Subject>>& subjects,
                      std::string error, const std::string& worker, double call_limit_s, std::FILE* proto) {
  if (call_limit_s > 0)
    std::thread([call_limit_s, socket_path] {
      const auto limit = std::chrono::duration<double>(call_limit_s);
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        const std::lock_guard<std::mutex> lock(g_inflight_mutex);
        for (const auto& [fd, start] : g_inflight)
          if (std::chrono::steady_clock::now() - start > limit) {
            std::fprintf(stderr, "attncheck device server: a call ran past %.1f s; ending\n", call_limit_s);
            ::unlink(socket_path.c_str());
            // Not fflush(nullptr): the main thread may hold stdin's lock, blocked reading it.
            std::fflush(stderr);
            std::_Exit(4);
          }
      }
    }).detach();
  const int ls = error.empty() ? ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (error.empty() && socket_path.size() >= sizeof addr.sun_path)
    error = "socket path too long: " + socket_path;
  if (error.empty()) {
    std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
    if (ls < 0 || ::bind(ls, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(ls, 128) != 0)
      error = "cannot listen on " + socket_path + ": " + std::strerror(errno);
  }
  if (error.empty())
    std::thread([ls, &subjects, worker] {
      for (;;) {
        const int fd = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0 && errno == EINTR) continue;
        if (fd < 0) return;
        std::thread(serve_connection, fd, std::cref(subjects), worker).detach();
      }
    }).detach();
  // The starting process: hello once the socket listens, shutdown (or the end of stdin) to stop.
  std::string line;
  while (std::getline(std::cin, line)) {
    json r;
    try {
      r = json::parse(line);
    } catch (const std::exception&) {
      continue;
    }
    if (r.value("op", "") == "hello")
      reply(proto, with_seq(r, error.empty() ? hello_reply(subjects, worker)
                                             : json{{"status", "error"}, {"error", error}}));
    if (r.value("op", "") == "shutdown") {
      reply(proto, with_seq(r, {{"status", "ok"},
                                {"served_calls", g_served.load()},
                                {"device_seconds", staging_device_seconds()}}));
      break;
    }
  }
  if (error.empty()) ::unlink(socket_path.c_str());
  return 0;
}

std::optional<int> device_server_main(int argc, char** argv, BuiltinLoader load_builtins) {
  if (argc != 5 || std::string(argv[1]) != kDeviceServerFlag) return std::nullopt;
  std::FILE* proto = private_stdout();
  if (!proto) return 2;
  std::vector<std::unique_ptr<Subject>> builtins;
  std::string error;
  try {
    std::string note;
    builtins = load_builtins(parse_backend(argv[3]), &note);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const int rc = run_device_server(argv[2], builtins, error,
                                   std::string("attncheck ") + kDeviceServerFlag + " " + argv[3],
                                   std::atof(argv[4]), proto);
  std::fflush(nullptr);
  std::_Exit(rc);
}

bool DeviceServers::wanted(bool cuda_backend) {
  const char* mode_env = std::getenv(kDeviceServerModeEnv);
  const std::string mode = mode_env ? mode_env : "";
  return mode != "off" && (cuda_backend || mode == "on");
}

DeviceServers::DeviceServers() = default;
DeviceServers::~DeviceServers() { shut_down(); }

void DeviceServers::start(const std::vector<std::string>& devices, const std::string& backend,
                          double call_timeout_s, const std::string& log_dir, bool quiet) {
  namespace fs = std::filesystem;
  for (size_t k = 0; k < devices.size(); ++k) {
    const std::string sock = (fs::temp_directory_path() /
                              ("attncheck-" + std::to_string(::getpid()) + "-" + std::to_string(k) + ".sock"))
                                 .string();
    auto server = std::make_unique<WorkerProcess>(
        device_server_command(sock, backend, devices[k], call_timeout_s / 2,
                              log_dir + "/device-server-" + std::to_string(k) + ".log"));
    std::string why = "its handshake was refused";
    try {
      if (server->call({{"op", "hello"}}, kMinHandshakeTimeoutS).value("status", "") == "ok") {
        sockets_[devices[k]] = sock;
        servers_.emplace_back(devices[k], std::move(server));
        continue;
      }
    } catch (const TransportError& e) {
      why = e.what();
    }
    if (!quiet)
      std::fprintf(stderr, "note: no device server for device '%s' (%s); its children make their own calls\n",
                   devices[k].c_str(), json_fields::printable(why, json_fields::kMaxMessageChars).c_str());
  }
}

json DeviceServers::shut_down() {
  json served = json::array();
  for (auto& [device, server] : servers_) {
    const json bye = server->shutdown();
    // device_seconds: the time the server's calls held the device, one at a time (staging_buffers.hpp);
    // against the run's wall time, how much of it the device server serialised.
    served.push_back({{"device", device.empty() ? "inherited" : device},
                      {"calls", bye.is_object() ? bye.value("served_calls", int64_t(-1)) : int64_t(-1)},
                      {"device_seconds", bye.is_object() ? bye.value("device_seconds", -1.0) : -1.0}});
  }
  servers_.clear();
  std::error_code ec;
  for (const auto& [device, sock] : sockets_) std::filesystem::remove(sock, ec);
  sockets_.clear();
  return served;
}

}  // namespace attncheck::worker
