#include "pair_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>

#include "worker_subject.hpp"

extern char** environ;

namespace attncheck::cli {
namespace {

struct Running {
  pid_t pid = -1;
  std::chrono::steady_clock::time_point start;
  int err_fd = -1;
  ChildOutcome outcome;
};

// The last lines of a child's stderr, kept short: enough to say why it died.
void keep_tail(std::string& tail, const char* data, size_t n) {
  tail.append(data, n);
  constexpr size_t kKeep = 2000;
  if (tail.size() > 2 * kKeep) tail.erase(0, tail.size() - kKeep);
}

pid_t spawn_child(char** argv, size_t pair, const std::string& result, const std::string& device,
                  const std::string& server, int& err_fd) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind(kChildPairEnv, 0) == 0 || kv.rfind(kChildResultEnv, 0) == 0 ||
        kv.rfind(kChildParentEnv, 0) == 0)
      continue;
    if (!device.empty() && kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    if (kv.rfind(std::string(worker::kDeviceServerEnv) + "=", 0) == 0) continue;
    env_store.push_back(kv);
  }
  env_store.push_back(std::string(kChildPairEnv) + "=" + std::to_string(pair));
  env_store.push_back(std::string(kChildParentEnv) + "=" + std::to_string(::getpid()));
  env_store.push_back(std::string(kChildResultEnv) + "=" + result);
  if (!device.empty()) env_store.push_back("CUDA_VISIBLE_DEVICES=" + device);
  if (!server.empty()) env_store.push_back(std::string(worker::kDeviceServerEnv) + "=" + server);
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(pipefd[1]);
  if (rc != 0) {
    ::close(pipefd[0]);
    throw std::runtime_error(std::string("cannot start a child process: ") + std::strerror(rc));
  }
  err_fd = pipefd[0];
  return pid;
}

}  // namespace

std::optional<std::pair<size_t, std::string>> child_pair_from_env() {
  const char* pair = std::getenv(kChildPairEnv);
  const char* result = std::getenv(kChildResultEnv);
  if (!pair || !result) return std::nullopt;
  // A child outlives nothing: if the parent is killed (kill -9 included), the kernel kills the
  // child too, so no orphan keeps writing into a report or corpus directory the next run owns.
  // The parent may have died before this line: then its pid is no longer our parent's.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char* parent = std::getenv(kChildParentEnv);
  if (parent && std::to_string(::getppid()) != parent) ::_exit(137);
  return std::make_pair(size_t(std::strtoull(pair, nullptr, 10)), std::string(result));
}

void run_pairs_in_children(char** argv, const std::vector<size_t>& pairs, const PoolOptions& opt,
                           const std::function<void(const ChildOutcome&)>& done) {
  const size_t count = pairs.size();
  std::map<pid_t, Running> running;
  size_t next = 0;
  const size_t jobs = size_t(std::max(1, opt.jobs));
  bool forwarded = false;
  while (next < count || !running.empty()) {
    const bool cancelled = opt.cancel && opt.cancel->load();
    // Ctrl-C reaches a terminal's whole process group; a SIGINT sent to the parent alone is passed
    // on once, so every child stops after its current case and reports what it completed.
    if (cancelled && !forwarded) {
      for (auto& [pid, r] : running) ::kill(pid, SIGINT);
      forwarded = true;
    }
    while (!cancelled && next < count && running.size() < jobs) {
      Running r;
      r.outcome.pair = pairs[next];
      r.outcome.result_path = opt.scratch_dir + "/pair-" + std::to_string(pairs[next]) + ".json";
      const std::string device = opt.devices.empty() ? "" : opt.devices[next % opt.devices.size()];
      r.outcome.device = device;
      r.start = std::chrono::steady_clock::now();
      const auto server = opt.device_servers.find(device);
      r.pid = spawn_child(argv, pairs[next], r.outcome.result_path, device,
                          server == opt.device_servers.end() ? "" : server->second, r.err_fd);
      running.emplace(r.pid, std::move(r));
      ++next;
    }
    if (running.empty()) break;
    // Drain stderr of every child; a closed pipe means the child is exiting.
    std::vector<pollfd> fds;
    for (auto& [pid, r] : running)
      if (r.err_fd >= 0) fds.push_back({r.err_fd, POLLIN, 0});
    if (!fds.empty())
      ::poll(fds.data(), fds.size(), 200);
    else
      ::usleep(20000);
    for (auto& [pid, r] : running) {
      if (r.err_fd < 0) continue;
      for (const auto& f : fds)
        if (f.fd == r.err_fd && (f.revents & (POLLIN | POLLHUP))) {
          char buf[4096];
          const ssize_t n = ::read(r.err_fd, buf, sizeof buf);
          if (n > 0) keep_tail(r.outcome.stderr_tail, buf, size_t(n));
          if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
            ::close(r.err_fd);
            r.err_fd = -1;
          }
        }
    }
    // Reap every child that has ended.
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      const pid_t w = ::waitpid(it->first, &status, WNOHANG);
      if (w != it->first) {
        ++it;
        continue;
      }
      Running r = std::move(it->second);
      it = running.erase(it);
      if (r.err_fd >= 0) {
        char buf[4096];
        ssize_t n;
        while ((n = ::read(r.err_fd, buf, sizeof buf)) > 0) keep_tail(r.outcome.stderr_tail, buf, size_t(n));
        ::close(r.err_fd);
      }
      r.outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
      if (WIFEXITED(status)) r.outcome.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) r.outcome.signal = WTERMSIG(status);
      r.outcome.result_written = ::access(r.outcome.result_path.c_str(), R_OK) == 0;
      done(r.outcome);
    }
  }
}

}  // namespace attncheck::cli
