#include "attncheck/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace attncheck {
namespace fs = std::filesystem;
namespace {

std::atomic<uint64_t> g_counter{0};
constexpr std::string_view kPrefix = ".tmp-";

void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // flushing the directory is durability, not correctness
  ::fsync(fd);
  ::close(fd);
}

// The writer's pid, from ".tmp-<name>-<pid>-<n>"; -1 when the name does not parse.
long writer_pid(const std::string& name) {
  const size_t last = name.rfind('-');
  if (last == std::string::npos || last == 0) return -1;
  const size_t before = name.rfind('-', last - 1);
  if (before == std::string::npos) return -1;
  const std::string pid = name.substr(before + 1, last - before - 1);
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) return -1;
  return std::stol(pid);
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view text, Durability durability) {
  const fs::path target(path);
  const fs::path dir = target.parent_path();
  std::error_code ec;
  if (!dir.empty()) {
    fs::create_directories(dir, ec);
    if (ec) throw AtomicWriteError("cannot create directory " + dir.string() + ": " + ec.message());
  }
  const fs::path tmp = dir / (std::string(kPrefix) + target.filename().string() + "-" +
                              std::to_string(::getpid()) + "-" + std::to_string(g_counter++));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw AtomicWriteError("cannot write " + path + ": " + std::strerror(errno));
  size_t done = 0;
  bool ok = true;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += size_t(n);
  }
  // fsync before rename: after a crash the name then points at complete contents.
  if (ok && durability == Durability::power_loss && ::fsync(fd) != 0) ok = false;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    fs::remove(tmp, ec);
    throw AtomicWriteError("cannot write " + path + ": " + std::strerror(saved));
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    std::error_code ignore;
    fs::remove(tmp, ignore);
    throw AtomicWriteError("cannot write " + path + ": " + ec.message());
  }
  if (durability == Durability::power_loss) sync_directory(dir);
}

namespace {
// Whether the process `pid` still runs. A killed writer whose parent died too may stay a zombie
// for as long as nobody reaps it (a container's init may not): it exists, but writes nothing more.
bool writer_runs(long pid) {
  if (::kill(pid_t(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;  // no /proc: trust kill()
  const size_t paren = text.rfind(')');
  const char state = paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : '?';
  return state != 'Z' && state != 'X';
}
}  // namespace

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = writer_pid(name);
    if (pid > 0 && writer_runs(pid)) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (!rm) removed.push_back(name);
  }
  return removed;
}

}  // namespace attncheck
