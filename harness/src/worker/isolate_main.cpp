// attncheck-isolate PLUGIN.so: attncheck's own worker. It hosts a C-ABI plugin (plugin_abi.h) in
// a process of its own and serves its subjects over the worker protocol
// (harness/WORKER_PROTOCOL.md), so `attncheck check --plugin P --isolate` survives a plugin that
// segfaults: the harness records the crash (exit 3, case in the corpus) and restarts this worker.
//
// The plugin is called through AbiSubject, the same adapter the in-process path uses, so an
// isolated plugin is judged by the same code path (serve.hpp). The protocol's stdout is kept
// private: fd 1 is pointed at stderr, so whatever the plugin prints cannot corrupt a reply.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "attncheck/plugin.hpp"
#include "serve.hpp"

namespace ac = attncheck;
namespace w = attncheck::worker;
using nlohmann::json;

int main(int argc, char** argv) {
  std::FILE* proto = w::private_stdout();
  if (argc != 2 || !proto) {
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
  w::ArenaMap arena;
  std::string line;
  while (std::getline(std::cin, line)) {
    json r;
    try {
      r = json::parse(line);
      const std::string op = r.at("op");
      if (op == "hello") {
        if (r.contains("arena_bytes")) arena.map(r["arena_bytes"].get<size_t>());
        w::reply(proto,
                 w::with_seq(r, load_error.empty()
                                    ? w::hello_reply(plugin.subjects, "attncheck-isolate " + plugin.path)
                                    : json{{"status", "error"}, {"error", load_error}}));
        continue;
      }
      if (op == "shutdown") {
        w::reply(proto, w::with_seq(r, {{"status", "ok"}}));
        return 0;
      }
      w::reply(proto, w::with_seq(r, w::answer(r, plugin.subjects, arena)));
    } catch (const std::exception& e) {
      w::reply(proto, w::with_seq(r, {{"status", "error"},
                                      {"error", std::string("attncheck-isolate: ") + e.what()}}));
    }
  }
  return 0;
}
