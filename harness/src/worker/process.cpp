// Spawning, pipes, the shared arena and deadlines of a worker process (see process.hpp).
// Everything that waits uses poll() against one deadline, so no read or write can block past the
// call timeout; stderr is drained while waiting, so a chatty worker never blocks on a full pipe.
#include "process.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "attncheck/json_fields.hpp"
#include "protocol.hpp"

extern char** environ;

namespace attncheck::worker {

namespace {

constexpr size_t kStderrLines = 20;
constexpr size_t kMaxReplyBytes = 1 << 20;  // a reply is a status line, never tensor data

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : int(left);
}

// A worker's reply and stderr lines, quoted in a message by json_fields::printable, are cut to
// these lengths, to leave room for the rest of the message.
constexpr size_t kQuoteChars = 60, kStderrLineChars = 200;

// Without a pidfd, how often a wait for a reply checks whether the worker has ended.
constexpr int kExitCheckMs = 100;

std::atomic<const std::atomic<bool>*> g_cancel{nullptr};

bool cancelled() {
  const std::atomic<bool>* flag = g_cancel.load();
  return flag && flag->load();
}

// A process as /proc names it: its pid and its start time, so that a pid the kernel hands to a new
// process later is not taken for it.
struct ProcId {
  pid_t pid = 0;
  unsigned long long start = 0;
};

// Parent and start time of pid from /proc/PID/stat; false when it is gone.
bool read_stat(pid_t pid, pid_t& parent, unsigned long long& start) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = 0;
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p) return false;
  char state = 0;
  int ppid = 0;
  // Fields 3 (state) and 4 (ppid), then 17 skipped, then field 22 (starttime).
  if (std::sscanf(p + 1, " %c %d %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
                  &state, &ppid, &start) != 3)
    return false;
  parent = pid_t(ppid);
  return true;
}

// Every live descendant of root, whatever its process group or session.
std::vector<ProcId> descendants(pid_t root) {
  std::multimap<pid_t, ProcId> children;
  if (DIR* d = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(d)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (pid <= 0 || *end) continue;
      ProcId id{pid_t(pid), 0};
      pid_t parent = 0;
      if (read_stat(id.pid, parent, id.start)) children.emplace(parent, id);
    }
    ::closedir(d);
  }
  std::vector<ProcId> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second.pid);
    }
  }
  return out;
}

// SIGKILL to each process still the one listed; those that became this process's children (their
// parent died first and adopt_orphans made this process their reaper) are reaped.
void kill_listed(const std::vector<ProcId>& procs) {
  for (const ProcId& p : procs) {
    pid_t parent = 0;
    unsigned long long start = 0;
    if (read_stat(p.pid, parent, start) && start == p.start) ::kill(p.pid, SIGKILL);
  }
  for (const ProcId& p : procs)
    for (int i = 0; i < 10; ++i) {
      int status = 0;
      const pid_t r = ::waitpid(p.pid, &status, WNOHANG);
      if (r == p.pid || (r < 0 && errno == ECHILD)) break;
      ::usleep(2000);
    }
}

}  // namespace

void set_cancel_flag(const std::atomic<bool>* flag) { g_cancel.store(flag); }

void adopt_orphans() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

Arena::Arena() {
  // The worker shares the file: truncated under this process's mapping, the next read of a page
  // past its new end would raise SIGBUS here. Sealed against shrinking, no ftruncate can do that;
  // F_SEAL_SEAL keeps a worker from adding F_SEAL_GROW, which would stop the arena from growing.
  fd_ = ::memfd_create("attncheck-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) throw TransportError(std::string("cannot create the shared arena: ") + std::strerror(errno));
  if (::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    throw TransportError(std::string("cannot seal the shared arena: ") + std::strerror(e));
  }
  reserve(1 << 20);
}

bool Arena::intact() const {
  struct stat st {};
  return ::fstat(fd_, &st) == 0 && st.st_size >= off_t(size_);
}

Arena::~Arena() {
  if (base_) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void Arena::reserve(size_t bytes) {
  if (bytes <= size_) return;
  size_t n = size_ ? size_ : 1;
  while (n < bytes) n *= 2;
  // A worker may have grown the file already (growing is not sealed); truncating it back to n
  // would be a shrink, which the seal refuses.
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || st.st_size < off_t(n))
    if (::ftruncate(fd_, off_t(n)) != 0)
      throw TransportError(std::string("cannot grow the shared arena: ") + std::strerror(errno));
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED)
    throw TransportError(std::string("cannot map the shared arena: ") + std::strerror(errno));
  if (base_) ::munmap(base_, size_);
  base_ = static_cast<unsigned char*>(p);
  size_ = n;
}

WorkerProcess::WorkerProcess(std::string command) : command_(std::move(command)) {
  // A worker that dies between our write and its read must give EPIPE, not kill the harness.
  ::signal(SIGPIPE, SIG_IGN);
}

WorkerProcess::WorkerProcess(Socket socket) : WorkerProcess("the server at " + socket.path) {
  socket_path_ = std::move(socket.path);
}

WorkerProcess::~WorkerProcess() { shutdown(); }

void WorkerProcess::connect() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw TransportError(std::string("cannot create a socket: ") + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof addr.sun_path) {
    ::close(fd);
    throw TransportError("socket path too long: " + socket_path_);
  }
  std::memcpy(addr.sun_path, socket_path_.c_str(), socket_path_.size() + 1);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    throw TransportError("cannot connect to " + command_ + ": " + std::strerror(e));
  }
  // The arena's fd goes with the first byte; the server maps it as a worker maps its fd 3.
  if (!send_fd(fd, arena_.fd())) {
    const int e = errno;
    ::close(fd);
    throw TransportError("cannot hand the arena to " + command_ + ": " + std::strerror(e));
  }
  to_worker_ = fd;
  from_worker_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  for (int f : {to_worker_, from_worker_}) ::fcntl(f, F_SETFL, ::fcntl(f, F_GETFL) | O_NONBLOCK);
  out_buf_.clear();
  ++starts_;
}

void WorkerProcess::fail(const std::string& what) {
  drain_stderr(200);
  const std::string tail = last_stderr();
  close_fds();
  throw TransportError(what, tail);
}

void WorkerProcess::start() {
  if (!socket_path_.empty()) return connect();
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC))
    throw TransportError(std::string("cannot create pipes: ") + std::strerror(errno));
  const std::string script = "exec " + command_;
  char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), const_cast<char*>(script.c_str()),
                  nullptr};
  const pid_t parent = ::getpid();
  const int arena_fd = arena_.fd();
  // fork + exec rather than posix_spawn: only a forked child can ask the kernel to kill it when
  // this process dies (PR_SET_PDEATHSIG survives exec), so kill -9 of attncheck does not leave a
  // worker running its call. Between fork and exec the child calls only async-signal-safe
  // functions: this process may have other threads.
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Its own process group: Ctrl-C reaches the harness only (which then shuts the worker down),
    // and a timeout kills the worker and every process it started.
    ::setpgid(0, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGINT, SIGTERM}) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    if (arena_fd == kArenaFd)
      ::fcntl(kArenaFd, F_SETFD, 0);
    else
      ::dup2(arena_fd, kArenaFd);  // dup2 clears close-on-exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the harness died before the line above
    ::execve("/bin/sh", argv, environ);
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    throw TransportError("cannot start worker '" + command_ + "': " + std::strerror(fork_errno));
  }
  pid_ = pid;
  // A descriptor that turns readable when the worker ends: its exit is seen even while a process
  // it started still holds its stdout open (no end of file then). Where the kernel has no
  // pidfd_open (before Linux 5.3), wait_reply checks the process every kExitCheckMs instead.
  pid_fd_ = int(::syscall(SYS_pidfd_open, pid, 0));
  if (pid_fd_ >= 0) ::fcntl(pid_fd_, F_SETFD, FD_CLOEXEC);
  to_worker_ = in[1];
  from_worker_ = out[0];
  err_from_worker_ = err[0];
  for (int fd : {to_worker_, from_worker_, err_from_worker_})
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  out_buf_.clear();
  err_partial_.clear();
  err_lines_.clear();
  ++starts_;
}

void WorkerProcess::drain_stderr(int timeout_ms) {
  if (err_from_worker_ < 0) return;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pollfd p{err_from_worker_, POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) return;
    char buf[4096];
    const ssize_t n = ::read(err_from_worker_, buf, sizeof buf);
    if (n <= 0) return;
    err_partial_.append(buf, size_t(n));
    size_t nl;
    while ((nl = err_partial_.find('\n')) != std::string::npos) {
      err_lines_.push_back(err_partial_.substr(0, nl));
      err_partial_.erase(0, nl + 1);
      if (err_lines_.size() > kStderrLines) err_lines_.pop_front();
    }
    if (err_partial_.size() > 4096) err_partial_.erase(0, err_partial_.size() - 4096);
  }
}

std::string WorkerProcess::last_stderr(size_t lines) const {
  std::deque<std::string> all = err_lines_;
  if (!err_partial_.empty()) all.push_back(err_partial_);
  std::string s;
  const size_t from = all.size() > lines ? all.size() - lines : 0;
  for (size_t i = from; i < all.size(); ++i)
    if (!all[i].empty()) s += (s.empty() ? "" : " | ") + json_fields::printable(all[i], kStderrLineChars);
  return s;
}

void WorkerProcess::kill_group() {
  if (pid_ > 0) {
    // Listed before the worker dies: afterwards its descendants have another parent.
    const std::vector<ProcId> tree = descendants(pid_);
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    kill_listed(tree);
  }
}

std::string WorkerProcess::death_reason() {
  if (!socket_path_.empty()) return "the server closed the connection";
  if (pid_ <= 0) return "not running";
  int status = 0;
  pid_t r = 0;
  // A worker that closed its stdout may still be alive: give it a moment, then kill it.
  for (int i = 0; i < 50 && (r = ::waitpid(pid_, &status, WNOHANG)) == 0; ++i) ::usleep(20000);
  std::string why;
  if (r == 0) {
    kill_group();
    ::waitpid(pid_, &status, 0);
    why = "closed its stdout and was killed";
  } else if (WIFEXITED(status)) {
    why = "exited with status " + std::to_string(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    why = "killed by signal " + std::to_string(WTERMSIG(status)) + " (SIG" + sigabbrev_np(WTERMSIG(status)) +
          ")";
  } else {
    why = "ended";
  }
  kill_group();  // whatever it started
  pid_ = -1;
  return why;
}

bool WorkerProcess::exited() const {
  if (pid_ <= 0) return false;
  siginfo_t si{};
  // WNOWAIT: the status stays for death_reason to read.
  return ::waitid(P_PID, id_t(pid_), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid_;
}

void WorkerProcess::close_fds() {
  for (int* fd : {&to_worker_, &from_worker_, &err_from_worker_, &pid_fd_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  if (pid_ > 0) {
    kill_group();
    int st;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }
}

bool WorkerProcess::read_available(bool* eof) {
  bool any = false;
  for (;;) {
    char buf[65536];
    const ssize_t n = ::read(from_worker_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && eof) *eof = true;
    if (n <= 0 || out_buf_.size() > kMaxReplyBytes) return any;
    out_buf_.append(buf, size_t(n));
    any = true;
  }
}

nlohmann::json WorkerProcess::call(const nlohmann::json& request, double timeout_s) {
  if (!running()) start();
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  const std::string op = request.value("op", std::string("?"));
  const std::string what =
      op + (request.contains("case_id") ? " (case " + request["case_id"].get<std::string>() + ")" : "");
  // The worker's stdout reached its end: the worker crashed, mid-reply where part of a line came.
  auto closed = [&]() {
    drain_stderr(300);
    const bool partial = !out_buf_.empty();
    const std::string why = death_reason();
    fail(std::string("worker crashed: ") +
         (partial ? "closed its pipe mid-reply (" + std::to_string(out_buf_.size()) + " bytes of a line) and "
                  : "") +
         why + " during " + what);
  };
  // A worker that numbers nothing cannot be told apart from one that answered twice by what it
  // sends next; what it sent with no request in flight is then refused here. A numbering worker's
  // stale line is read below and refused by its number.
  if (!require_seq_ && !out_buf_.empty()) {
    kill_group();
    fail("worker broke the protocol: it wrote '" + json_fields::printable(out_buf_, kQuoteChars) +
         "' with no request in flight (a reply sent twice?)");
  }
  nlohmann::json numbered = request;
  const uint64_t seq = ++seq_;
  numbered["seq"] = seq;
  std::string line = numbered.dump() + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    pollfd p[2] = {{to_worker_, POLLOUT, 0}, {err_from_worker_, POLLIN, 0}};
    if (::poll(p, 2, ms_left(deadline)) <= 0 && ms_left(deadline) == 0) {
      kill_group();
      fail("worker hung: did not read the " + what + " request within " + std::to_string(timeout_s) +
           " s; killed");
    }
    if (p[1].revents) drain_stderr(0);
    if (!(p[0].revents & (POLLOUT | POLLERR | POLLHUP))) continue;
    const ssize_t n = ::write(to_worker_, line.data() + sent, line.size() - sent);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) {
      drain_stderr(200);
      fail("worker crashed: " + death_reason() + " before reading the " + what + " request");
    }
    sent += size_t(n);
  }
  for (;;) {
    const size_t nl = out_buf_.find('\n');
    if (nl != std::string::npos) {
      std::string reply = out_buf_.substr(0, nl);
      out_buf_.erase(0, nl + 1);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(reply);
      } catch (const nlohmann::json::exception&) {
        kill_group();
        fail("worker broke the protocol: its reply to " + what + " is not JSON: '" +
             json_fields::printable(reply, kQuoteChars) + "'");
      }
      if (!j.is_object() || !j.contains("status") || !j["status"].is_string()) {
        kill_group();
        fail("worker broke the protocol: its reply to " + what + " has no \"status\": '" +
             json_fields::printable(reply, kQuoteChars) + "'");
      }
      if (j.contains("seq") || require_seq_) {
        const bool same =
            j.contains("seq") && j["seq"].is_number_unsigned() && j["seq"].get<uint64_t>() == seq;
        if (!same) {
          kill_group();
          fail("worker broke the protocol: its reply to " + what + " carries seq " +
               (j.contains("seq") ? json_fields::printable(j["seq"].dump(), kQuoteChars)
                                  : std::string("(none)")) +
               ", expected " + std::to_string(seq) + " (a reply sent twice, or to another request)");
        }
      }
      return j;
    }
    if (out_buf_.size() > kMaxReplyBytes) {
      kill_group();
      fail("worker broke the protocol: more than 1 MiB on stdout without a newline ('" +
           json_fields::printable(out_buf_, kQuoteChars) + "')");
    }
    const int left = ms_left(deadline);
    if (left == 0) {
      kill_group();
      fail("worker hung: no reply to " + what + " within " +
           std::to_string(timeout_s).substr(0, std::to_string(timeout_s).find('.') + 2) +
           (op == "hello" ? " s (the handshake's limit: --call-timeout, at least " +
                                std::to_string(int(kMinHandshakeTimeoutS)) + " s); killed"
                          : std::string(" s (--call-timeout); killed")));
    }
    if (cancelled() && op != "shutdown") {
      close_fds();  // kills the worker's group and tree, and reaps it
      throw CallInterrupted("the run was interrupted during " + what + "; the worker was stopped");
    }
    pollfd p[3] = {{from_worker_, POLLIN, 0}, {err_from_worker_, POLLIN, 0}, {pid_fd_, POLLIN, 0}};
    const bool watch_exit = pid_ > 0;
    int slice = watch_exit && pid_fd_ < 0 ? std::min(left, kExitCheckMs) : left;
    if (g_cancel.load()) slice = std::min(slice, kCancelCheckMs);
    const int pr = ::poll(p, 3, slice);
    if (pr < 0 && errno == EINTR) continue;
    if (p[1].revents) drain_stderr(0);
    if (watch_exit && !p[0].revents && (pid_fd_ >= 0 ? p[2].revents != 0 : exited())) {
      // The worker ended with its stdout still open: a process it started holds it. What it wrote
      // before ending is read first (a reply followed by an exit is still a reply).
      // Where the pipe reached its end meanwhile (it closed after the poll), no process holds it:
      // the worker closed it, mid-reply or not.
      bool eof = false;
      if (read_available(&eof) && out_buf_.find('\n') != std::string::npos) continue;
      if (eof) closed();
      drain_stderr(300);
      const std::string why = death_reason();
      fail("worker crashed: " + why + " during " + what +
           " (a process it started still holds its stdout; that process was killed with the group)");
    }
    if (p[0].revents) {
      char buf[65536];
      const ssize_t n = ::read(from_worker_, buf, sizeof buf);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) closed();
      out_buf_.append(buf, size_t(n));
    }
  }
}

nlohmann::json WorkerProcess::shutdown() {
  if (!socket_path_.empty()) {
    close_fds();  // the server serves others: only disconnect
    return nullptr;
  }
  if (pid_ <= 0) return nullptr;
  // A process the worker started outlives it otherwise (in its own session, no group kill reaches
  // it): listed now, ended after the worker's exit.
  const std::vector<ProcId> tree = descendants(pid_);
  nlohmann::json reply;
  try {
    reply = call({{"op", "shutdown"}}, 2.0);
  } catch (const TransportError&) {
    kill_listed(tree);
    return nullptr;  // already reaped by fail()
  }
  int status;
  for (int i = 0; i < 25 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) ::usleep(20000);
  close_fds();
  kill_listed(tree);
  return reply;
}

}  // namespace attncheck::worker
