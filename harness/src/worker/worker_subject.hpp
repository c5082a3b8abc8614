// WorkerSubject: a subject served by a worker process over the worker protocol
// (harness/WORKER_PROTOCOL.md), seen as an attncheck::Subject.
//
// One worker process serves every subject it declares, for every property of a run: it is
// started and warmed up once (the handshake), restarted after it dies or hangs, and shut down
// cleanly when the last of its subjects is destroyed. A dead, hung or protocol-breaking worker
// surfaces as SubjectError::Kind::transport_failed (one line: what happened, the exit status or
// signal, the worker's last stderr lines), never as a device fault; the next call restarts it.
#pragma once
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "attncheck/case.hpp"
#include "attncheck/subject.hpp"

namespace attncheck::worker {

// The worker did not start, or its handshake failed or declared something invalid. One line;
// the CLI turns it into exit 2 before any work is done.
struct HandshakeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr double kDefaultCallTimeoutS = 60.0;

struct WorkerOptions {
  double call_timeout_s = kDefaultCallTimeoutS;
  std::string origin;  // shown as the subjects' origin; default "worker: COMMAND"
};

// Starts the worker, performs the handshake and returns its subjects (which share the process).
std::vector<std::unique_ptr<Subject>> load_worker_subjects(const std::string& command,
                                                           const WorkerOptions& = {});

// The worker command that hosts a C-ABI plugin in attncheck's own worker (attncheck-isolate,
// found beside the running attncheck executable).
std::string isolate_command(const std::string& plugin_path);

// The device server: one process per GPU (attncheck --device-server SOCKET ...) that makes the
// built-in CUDA subjects' calls of every child of `check --jobs N` in its one CUDA context. Each
// child's calls in a context of its own made the GPU switch between up to N contexts, about a
// millisecond a call. The parent names the socket in kDeviceServerEnv; ATTNCHECK_DEVICE_SERVER=off
// in the caller's environment runs every call in its child, and =on also serves the host
// backend's built-ins (which is how CI, without a GPU, runs this path).
constexpr const char* kDeviceServerEnv = "ATTNCHECK_DEVICE_SERVER_SOCKET";
constexpr const char* kDeviceServerModeEnv = "ATTNCHECK_DEVICE_SERVER";
// The first argument that makes attncheck a device server (device_server_main in serve.hpp).
constexpr const char* kDeviceServerFlag = "--device-server";
// `subjects` with those that `which` picks served by the server at socket_path (ServedSubject in
// worker_subject.cpp: only the server's "ok" is taken, anything else is redone in this process).
// The same subjects, unchanged, when the server cannot be reached.
std::vector<std::unique_ptr<Subject>> served_subjects(std::vector<std::unique_ptr<Subject>> subjects,
                                                      const std::string& socket_path, double call_timeout_s,
                                                      const std::function<bool(const Subject&)>& which);
// The calls of this process that its device server failed and this process then made itself
// without failing: each is a server that died or hung, or a server-side defect (a request or reply
// it mis-encoded) that the redo hid. A call that fails here too is the subject's own failure and is
// not counted. `first` is the server's first such failure, in one line.
struct ServedRedone {
  int64_t calls = 0;
  std::string first;
};
ServedRedone served_redone();

// The command that starts attncheck's device server on socket_path for one backend and device
// ("" keeps the caller's CUDA_VISIBLE_DEVICES), ending when a call runs past call_limit_s
// (run_device_server), its stderr appended to log_path.
std::string device_server_command(const std::string& socket_path, const std::string& backend,
                                  const std::string& device, double call_limit_s,
                                  const std::string& log_path);

// Every request carries a case id and the property name, so a worker's logs can be matched to
// the report. For a WorkerSubject this sets them for the following calls; for any other subject
// it does nothing.
void set_call_context(Subject& s, const std::string& property, const std::string& case_id);
// Whether s is served by a worker process (its calls are isolated there already).
bool is_worker_subject(const Subject& s);
// The command of a subject served by a --worker command (its origin names it); "" for any other
// subject, an --isolate'd plugin included.
std::string worker_command_of(const Subject& s);
// A RunConfig::before_launch hook numbering the cases of one (subject, property):
// "<subject>/<property>/<shard>/<n>"; nullptr for subjects that are not workers.
std::function<void(const Case&)> call_context_hook(Subject& s, int shard_index);
// A word the shell reads back as itself: as it is when it holds nothing the shell interprets, else
// in single quotes. For the commands attncheck starts through /bin/sh and the ones it prints.
std::string shell_word(const std::string& s);

}  // namespace attncheck::worker
