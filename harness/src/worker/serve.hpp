// Serving subjects over the worker protocol (harness/WORKER_PROTOCOL.md), attncheck's side of a
// worker: attncheck-isolate (a plugin in a process of its own, on stdin/stdout) and the device
// server (`attncheck --device-server SOCKET cuda|host`, started by `check --jobs N`: the built-in
// subjects of one backend for every child that connects, so one GPU runs all their calls in one
// CUDA context; see served_subjects in worker_subject.hpp).
//
// The device server: each connection hands over its arena's fd first (SCM_RIGHTS), then speaks
// the protocol on the socket, on a thread of its own; AbiSubject's staging makes one call at a time
// on the device. stdin/stdout carry the starting process's hello and shutdown. After a device
// fault the context is unusable: the fault is answered, then the server ends, and its clients make
// their calls themselves.
#pragma once
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attncheck/subject.hpp"
#include "protocol.hpp"

namespace attncheck::worker {

// One client's arena (its memfd), mapped as large as its requests say.
struct ArenaMap {
  int fd = kArenaFd;
  unsigned char* base = nullptr;
  size_t size = 0;
  void map(size_t bytes);  // ProtocolError when it cannot
};

// The protocol's own copy of stdout; fd 1 then goes to stderr, so a subject's prints cannot
// corrupt a reply. nullptr when it cannot be made.
std::FILE* private_stdout();
void reply(std::FILE* proto, const nlohmann::json& j);  // one line, flushed

nlohmann::json hello_reply(const std::vector<std::unique_ptr<Subject>>& subjects, const std::string& worker);
// A call request (not hello or shutdown) answered by the subject it names; every failure is a
// reply status, never an exception.
nlohmann::json answer(const nlohmann::json& r, const std::vector<std::unique_ptr<Subject>>& subjects,
                      ArenaMap& arena);

// The device server on socket_path for `subjects` (or, when `error` is not empty, a server that
// answers the starting process's hello with it), answering the starting process on `proto`.
// Its reply to shutdown counts the calls it answered "ok" (served_calls). Returns when stdin says
// shutdown or closes; connections may still be inside a call then, so
// the caller ends the process with _Exit (no static destructor under a running call).
// A call that runs past call_limit_s (when positive; the clients' own deadline) ends the server
// with status 4: the call cannot be cancelled and would hold the device from every other client,
// which then make their calls themselves.
int run_device_server(const std::string& socket_path, const std::vector<std::unique_ptr<Subject>>& subjects,
                      std::string error, const std::string& worker, double call_limit_s, std::FILE* proto);

}  // namespace attncheck::worker
