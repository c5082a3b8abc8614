// A worker process as the harness sees it: spawned in its own process group, spoken to by one line
// of JSON per request on its stdin and one line per reply on its stdout, with tensors in a shared
// arena (a memfd handed to it as fd 3). Its stderr is drained into a ring of its last lines, which
// every failure message quotes.
//
// Failure modes, each one line (TransportError): the worker died (exit status or signal), did not
// answer within the deadline (it is then killed, with its whole process group), wrote a line that
// is not protocol JSON, or closed its stdout mid-reply. After any of them the process is gone; the
// next call() restarts it and repeats the handshake (WorkerSubject checks that the subjects did not
// change).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace attncheck::worker {

// The handshake may import frameworks and compile kernels: it gets --call-timeout, but at least
// this long (a hung hello is reported with this limit).
constexpr double kMinHandshakeTimeoutS = 120.0;

// The worker died, hung or broke the protocol. what() is one line: what happened, then the
// worker's last stderr lines when there are any. Both parts are kept apart too, so that a caller
// that must fit the line into a length limit can keep the end of the quote, where a Python
// traceback's cause is.
struct TransportError : std::runtime_error {
  explicit TransportError(const std::string& what, const std::string& stderr_tail = "")
      : std::runtime_error(stderr_tail.empty() ? what : what + "; last stderr: " + stderr_tail),
        reason(what),
        stderr_tail(stderr_tail) {}
  std::string reason;       // what() without the quote
  std::string stderr_tail;  // the last stderr lines, joined with " | " ("" when none)
};

// The run was asked to stop (Ctrl-C, SIGTERM) while a call waited for its reply: the worker and
// every process it started were killed at once, without waiting for --call-timeout. The case did
// not end: it is neither a verdict nor a crash.
struct CallInterrupted : TransportError {
  using TransportError::TransportError;
};

// The flag a run sets when it is asked to stop; every wait for a worker checks it at least every
// kCancelCheckMs. nullptr (the default): calls wait for their reply or their timeout only.
void set_cancel_flag(const std::atomic<bool>* flag);
constexpr int kCancelCheckMs = 100;

// Makes this process the reaper of every process its workers start (PR_SET_CHILD_SUBREAPER): a
// worker's descendant that leaves its process group, or its session, is still found and ended
// when the worker is (descendants listed from /proc). Called once by a command that may start workers.
void adopt_orphans();

// A shared-memory arena: a memfd mapped here, inherited by the worker as fd 3. It only grows, and
// is sealed so that nobody can shrink it (F_SEAL_SHRINK).
class Arena {
 public:
  Arena();
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  void reserve(size_t bytes);  // grow (ftruncate + remap) to at least `bytes`
  unsigned char* data() { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  // Whether the file still holds every mapped byte. It is sealed against shrinking, so a worker
  // cannot truncate it; checked before outputs are read all the same, since a read past the
  // file's end would be SIGBUS in this process.
  bool intact() const;

 private:
  int fd_ = -1;
  unsigned char* base_ = nullptr;
  size_t size_ = 0;
};

class WorkerProcess {
 public:
  // command runs through /bin/sh -c "exec COMMAND", so quoting works as in a shell.
  explicit WorkerProcess(std::string command);
  // A connection to a worker that already runs and listens on a Unix socket (a device server,
  // serve.hpp): start() connects and hands it the arena's fd (SCM_RIGHTS), requests and
  // replies travel over the socket, and shutdown() only disconnects. There is no stderr to quote.
  struct Socket {
    std::string path;
  };
  explicit WorkerProcess(Socket socket);
  ~WorkerProcess();  // asks the worker to shut down, then kills what is left of its group
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  const std::string& command() const { return command_; }
  bool running() const { return pid_ > 0 || (!socket_path_.empty() && to_worker_ >= 0); }
  void start();  // spawn (no handshake); TransportError if the command cannot start
  // Send one request, wait for one reply line. On timeout the process group is killed.
  nlohmann::json call(const nlohmann::json& request, double timeout_s);
  // {"op":"shutdown"}, a short wait, then SIGKILL to the group; returns the worker's reply (null
  // when it gave none, or for a connection, which only disconnects).
  nlohmann::json shutdown();
  Arena& arena() { return arena_; }
  std::string last_stderr(size_t lines = 5) const;  // joined with " | "
  int restarts() const { return starts_ > 0 ? starts_ - 1 : 0; }
  // Protocol 3 (the handshake says so): every reply must echo its request's "seq". Before, a
  // reply's "seq" is checked only where it has one.
  void require_seq(bool on) { require_seq_ = on; }

 private:
  std::string death_reason();  // reaps the child: "exited with status 1" / "killed by signal 6 (SIGABRT)"
  bool exited() const;         // the child has ended (not yet reaped)
  // Reads what stdout holds now into out_buf_; whether it read any. *eof: the pipe reached its end
  // (every writer closed it).
  bool read_available(bool* eof = nullptr);
  // The worker, its process group and every descendant (listed from /proc before it dies).
  void kill_group();
  void drain_stderr(int timeout_ms);
  void close_fds();
  [[noreturn]] void fail(const std::string& what);

  void connect();

  std::string command_, socket_path_;
  Arena arena_;
  pid_t pid_ = -1;
  int to_worker_ = -1, from_worker_ = -1, err_from_worker_ = -1, pid_fd_ = -1;
  std::string out_buf_, err_partial_;
  std::deque<std::string> err_lines_;
  int starts_ = 0;
  uint64_t seq_ = 0;  // the last request's number: every request gets the next one
  bool require_seq_ = false;
};

}  // namespace attncheck::worker
