// Finding a python3 and running it: `attncheck plot` (matplotlib), bench's peers (torch) and
// worker_transport_bench (numpy) each take the first python3 on PATH that has what they need.
#pragma once
#include <string>
#include <vector>

namespace attncheck {

// Every python3 on PATH, in PATH order, each once. More than one is common (a pyenv or venv python
// first, the distribution's after it), and only some have matplotlib (or torch, for bench's peers).
std::vector<std::string> pythons_on_path();
// Runs args[0] with args (no shell), stdout and stderr captured together; status -1 when it could
// not be started or did not exit normally.
struct CapturedRun {
  int status = -1;
  std::string output;
};
CapturedRun run_captured(const std::vector<std::string>& args);

}  // namespace attncheck
