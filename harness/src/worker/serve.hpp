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
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attncheck/backend.hpp"
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

// The built-in subjects of a backend (load_builtin_subjects, which lives with the kernels: passed
// in, so that this library does not link them).
using BuiltinLoader = std::vector<std::unique_ptr<Subject>> (*)(Backend, std::string* note);
// The device server's process: when argv is `attncheck --device-server SOCKET BACKEND CALL_LIMIT_S`
// (device_server_command), serves the backend's built-ins and ends the process (_Exit: a
// connection may be inside a call, so no static destructor may run under it), or returns 2 when
// the protocol's stdout cannot be made. nullopt for any other argv.
std::optional<int> device_server_main(int argc, char** argv, BuiltinLoader load_builtins);

class WorkerProcess;

// The device servers of one `check --jobs N` run, on the parent's side: one per device, started
// before the children and shut down after them.
class DeviceServers {
 public:
  // Whether this run serves its children's built-in calls: on the cuda backend unless
  // ATTNCHECK_DEVICE_SERVER=off, and on the host backend too with =on.
  static bool wanted(bool cuda_backend);
  DeviceServers();
  ~DeviceServers();  // shuts down what shut_down() did not
  DeviceServers(const DeviceServers&) = delete;
  DeviceServers& operator=(const DeviceServers&) = delete;
  // One server per device ("" keeps the caller's CUDA_VISIBLE_DEVICES) for the built-ins of
  // `backend`, each answering the hello handshake; its stderr goes to a file in log_dir (nobody
  // reads a pipe from it during the run, and a full pipe would block it). A server that does not
  // start is left out with a note on stderr (unless quiet): its children make their calls themselves.
  void start(const std::vector<std::string>& devices, const std::string& backend, double call_timeout_s,
             const std::string& log_dir, bool quiet);
  // Device -> the socket of its server, for the children (PoolOptions::device_servers).
  const std::map<std::string, std::string>& sockets() const { return sockets_; }
  // Shuts every server down and removes its socket. Returns each server's count of the calls it
  // answered, [{"device", "calls"}] ("inherited" for "", -1 when a server gave no count).
  nlohmann::json shut_down();

 private:
  std::vector<std::pair<std::string, std::unique_ptr<WorkerProcess>>> servers_;  // by device
  std::map<std::string, std::string> sockets_;
};

}  // namespace attncheck::worker
