// Spawning, pipes, the shared arena and deadlines of a worker process (see process.hpp).
// Everything that waits uses poll() against one deadline, so no read or write can block past the
// call timeout; stderr is drained while waiting, so a chatty worker never blocks on a full pipe.
#include "process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

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

}  // namespace

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
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_adddup2(&fa, arena_.fd(), kArenaFd);  // dup2 clears close-on-exec
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group: Ctrl-C reaches the harness only (which then shuts the worker down),
  // and a timeout kills the worker and every process it started.
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);
  sigaddset(&dflt, SIGINT);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dflt);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string script = "exec " + command_;
  char* argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"), const_cast<char*>(script.c_str()),
                  nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    throw TransportError("cannot start worker '" + command_ + "': " + std::strerror(rc));
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
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
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

bool WorkerProcess::read_available() {
  bool any = false;
  for (;;) {
    char buf[65536];
    const ssize_t n = ::read(from_worker_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
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
    pollfd p[3] = {{from_worker_, POLLIN, 0}, {err_from_worker_, POLLIN, 0}, {pid_fd_, POLLIN, 0}};
    const bool watch_exit = pid_ > 0;
    const int pr = ::poll(p, 3, watch_exit && pid_fd_ < 0 ? std::min(left, kExitCheckMs) : left);
    if (pr < 0 && errno == EINTR) continue;
    if (p[1].revents) drain_stderr(0);
    if (watch_exit && !p[0].revents && (pid_fd_ >= 0 ? p[2].revents != 0 : exited())) {
      // The worker ended with its stdout still open: a process it started holds it. What it wrote
      // before ending is read first (a reply followed by an exit is still a reply).
      if (read_available() && out_buf_.find('\n') != std::string::npos) continue;
      drain_stderr(300);
      const std::string why = death_reason();
      fail("worker crashed: " + why + " during " + what +
           " (a process it started still holds its stdout; that process was killed with the group)");
    }
    if (p[0].revents) {
      char buf[65536];
      const ssize_t n = ::read(from_worker_, buf, sizeof buf);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) {
        drain_stderr(300);
        const bool partial = !out_buf_.empty();
        const std::string why = death_reason();
        fail(std::string("worker crashed: ") +
             (partial
                  ? "closed its pipe mid-reply (" + std::to_string(out_buf_.size()) + " bytes of a line) and "
                  : "") +
             why + " during " + what);
      }
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
  nlohmann::json reply;
  try {
    reply = call({{"op", "shutdown"}}, 2.0);
  } catch (const TransportError&) {
    return nullptr;  // already reaped by fail()
  }
  int status;
  for (int i = 0; i < 25 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) ::usleep(20000);
  close_fds();
  return reply;
}

}  // namespace attncheck::worker
