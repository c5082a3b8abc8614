// attncheck-isolate PLUGIN.so: attncheck's own worker. It hosts a C-ABI plugin (plugin_abi.h) in
// a process of its own and serves its subjects over the worker protocol
// (harness/WORKER_PROTOCOL.md), so `attncheck check --plugin P --isolate` survives a plugin that
// segfaults: the harness records the crash (exit 3, case in the corpus) and restarts this worker.
//
// The plugin is called through AbiSubject, the same adapter the in-process path uses, so an
// isolated plugin is judged by the same code path. The protocol's stdout is kept private: fd 1 is
// pointed at stderr, so whatever the plugin prints cannot corrupt a reply.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "attncheck/case.hpp"
#include "attncheck/plugin.hpp"
#include "protocol.hpp"

namespace ac = attncheck;
namespace w = attncheck::worker;
using nlohmann::json;

namespace {

std::FILE* g_proto = nullptr;
unsigned char* g_arena = nullptr;
size_t g_arena_size = 0;

void reply(const json& j) {
  const std::string s = j.dump() + "\n";
  std::fwrite(s.data(), 1, s.size(), g_proto);
  std::fflush(g_proto);
}

void map_arena(size_t bytes) {
  if (bytes <= g_arena_size) return;
  if (g_arena) ::munmap(g_arena, g_arena_size);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, w::kArenaFd, 0);
  if (p == MAP_FAILED)
    throw w::ProtocolError("cannot map the arena (fd 3, " + std::to_string(bytes) + " bytes)");
  g_arena = static_cast<unsigned char*>(p);
  g_arena_size = bytes;
}

w::TensorRef in(const json& r, const char* group, const char* name) {
  return w::tensor_from_json(r.at(group).at(name), name);
}

json serve_call(const json& r, ac::Subject& s) {
  const std::string op = r.at("op");
  const ac_dtype d = w::dtype_from_word(r.at("dtype"));
  const ac_lse_layout lay = s.caps().lse_layout;
  json written;
  if (op == "merge") {
    ac::MergeInput m;
    m.dtype = d;
    m.num_tokens = r.at("num_tokens");
    m.num_heads = r.at("num_heads");
    m.head_size = r.at("head_size");
    const int64_t T = m.num_tokens, H = m.num_heads;
    const size_t n = size_t(T * H * m.head_size);
    m.prefix_out = w::get_bits(g_arena, in(r, "inputs", "prefix_out"), d, n);
    m.suffix_out = w::get_bits(g_arena, in(r, "inputs", "suffix_out"), d, n);
    m.prefix_lse = w::get_lse(g_arena, in(r, "inputs", "prefix_lse"), lay, T, H);
    m.suffix_lse = w::get_lse(g_arena, in(r, "inputs", "suffix_lse"), lay, T, H);
    const ac::MergeOutput o = s.merge(m);
    const auto out = in(r, "outputs", "out"), out_lse = in(r, "outputs", "out_lse");
    w::put_bits(g_arena, out, d, o.out);
    w::put_lse(g_arena, out_lse, lay, o.lse, T, H);
    written = {{"out", out.bytes}, {"out_lse", out_lse.bytes}};
  } else if (op == "softmax") {
    ac::SoftmaxInput x;
    x.dtype = d;
    x.rows = r.at("rows");
    x.cols = r.at("cols");
    x.x = w::get_bits(g_arena, in(r, "inputs", "x"), d, size_t(int64_t(x.rows) * x.cols));
    const ac::SoftmaxOutput o = s.softmax(x);
    const auto y = in(r, "outputs", "y");
    w::put_bits(g_arena, y, d, o.y);
    written = {{"y", y.bytes}};
  } else if (op == "attention" || op == "splitkv") {
    ac::AttentionInput a;
    a.dtype = d;
    a.num_heads = r.at("num_heads");
    a.num_kv_heads = r.at("num_kv_heads");
    a.head_size = r.at("head_size");
    a.seqlens_q = r.at("seqlens_q").get<std::vector<int32_t>>();
    a.seqlens_k = r.at("seqlens_k").get<std::vector<int32_t>>();
    a.causal = r.at("causal");
    a.softmax_scale = float(r.at("softmax_scale").get<double>());
    int64_t tq = 0, tk = 0;
    for (size_t i = 0; i < a.seqlens_q.size(); ++i) tq += a.seqlens_q[i], tk += a.seqlens_k[i];
    a.q = w::get_bits(g_arena, in(r, "inputs", "q"), d, size_t(tq * a.num_heads * a.head_size));
    a.k = w::get_bits(g_arena, in(r, "inputs", "k"), d, size_t(tk * a.num_kv_heads * a.head_size));
    a.v = w::get_bits(g_arena, in(r, "inputs", "v"), d, size_t(tk * a.num_kv_heads * a.head_size));
    if (r.at("inputs").contains("mask")) {
      const auto m = in(r, "inputs", "mask");
      a.mask.assign(g_arena + m.offset, g_arena + m.offset + m.bytes);
    }
    ac::AttentionOptions opt;
    // null: the subject declares no tilings (AbiSubject then passes the plugin -1).
    opt.tiling = r.at("tiling").is_null() ? 0 : r.at("tiling").at("index").get<int32_t>();
    opt.num_splits = r.at("num_splits");
    opt.fold_order = w::fold_from_word(r.at("fold_order"));
    const ac::AttentionOutput o = s.attention(a, opt);
    const auto out = in(r, "outputs", "out");
    w::put_bits(g_arena, out, d, o.out);
    written = {{"out", out.bytes}};
    if (r.at("outputs").contains("lse")) {
      const auto lse = in(r, "outputs", "lse");
      w::put_lse(g_arena, lse, lay, o.lse, tq, a.num_heads);
      written["lse"] = lse.bytes;
    }
  } else {
    throw w::ProtocolError("unknown op '" + op + "'");
  }
  return {{"status", "ok"}, {"written", written}};
}

}  // namespace

int main(int argc, char** argv) {
  // The protocol gets a private copy of stdout; fd 1 then goes to stderr, for the plugin's prints.
  const int proto_fd = ::dup(1);
  ::dup2(2, 1);
  g_proto = ::fdopen(proto_fd, "w");
  if (argc != 2 || !g_proto) {
    std::fprintf(stderr, "usage: attncheck-isolate PLUGIN.so (started by attncheck check --isolate)\n");
    return 2;
  }
  ac::LoadedPlugin plugin;
  std::string load_error;
  try {
    plugin = ac::load_plugin(argv[1]);
  } catch (const ac::PluginError& e) {
    load_error = e.what();
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    json r;
    try {
      r = json::parse(line);
      const std::string op = r.at("op");
      if (r.contains("arena_bytes")) map_arena(r["arena_bytes"].get<size_t>());
      if (op == "hello") {
        if (!load_error.empty()) {
          reply({{"status", "error"}, {"error", load_error}});
          continue;
        }
        json subjects = json::array();
        for (const auto& s : plugin.subjects)
          subjects.push_back(w::caps_to_json(s->name(), s->description(), s->caps()));
        reply({{"status", "ok"},
               {"protocol", w::kProtocolVersion},
               {"worker", "attncheck-isolate " + plugin.path},
               {"subjects", subjects}});
        continue;
      }
      if (op == "shutdown") {
        reply({{"status", "ok"}});
        return 0;
      }
      ac::Subject* s = nullptr;
      for (auto& c : plugin.subjects)
        if (c->name() == r.at("subject").get<std::string>()) s = c.get();
      if (!s) throw w::ProtocolError("unknown subject " + r.at("subject").dump());
      reply(serve_call(r, *s));
    } catch (const ac::SubjectError& e) {
      const char* status = e.kind == ac::SubjectError::Kind::unsupported    ? "unsupported"
                           : e.kind == ac::SubjectError::Kind::device_fault ? "device_error"
                                                                            : "error";
      reply({{"status", status}, {"error", e.what()}});
    } catch (const std::exception& e) {
      reply({{"status", "error"}, {"error", std::string("attncheck-isolate: ") + e.what()}});
    }
  }
  return 0;
}
