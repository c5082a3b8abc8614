// See pythons.hpp. Programs are started with posix_spawn and an argument vector (no shell), so
// arguments with spaces or quotes in them need no escaping.
#include "attncheck/pythons.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

extern char** environ;

namespace attncheck {
namespace fs = std::filesystem;

std::vector<std::string> pythons_on_path() {
  std::vector<std::string> found;
  std::set<std::string> seen;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/python3";
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) != 0 || !fs::is_regular_file(candidate, ec)) continue;
    const std::string key = fs::canonical(candidate, ec).string();
    if (!seen.insert(ec ? candidate : key).second) continue;
    found.push_back(candidate);
  }
  return found;
}

CapturedRun run_captured(const std::vector<std::string>& args) {
  CapturedRun r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (err == 0) {
    char buf[512];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) r.output.append(buf, size_t(n));
  }
  ::close(fds[0]);
  if (err != 0) return r;
  int ws = 0;
  while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(ws)) r.status = WEXITSTATUS(ws);
  return r;
}

}  // namespace attncheck
