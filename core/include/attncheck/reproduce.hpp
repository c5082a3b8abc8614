// The reproduce command: the line a report, `replay` and the mutation self-test print for a
// failure, which must work when pasted into a shell. Built here only: the properties fill in the
// case file (or, when none was written, the check flags), the caller's ReproduceContext says how
// attncheck was started and where the subject comes from.
#pragma once
#include <cstdint>
#include <string>

namespace attncheck {

// What a pasted command needs besides the case. The default is the bare command
// ("attncheck replay FILE --subject NAME"), which is what a library caller without a command
// line gets.
struct ReproduceContext {
  // The program as invoked, quoted for the shell: a path when it was given as one, so that the
  // command runs the same binary when pasted in the same directory.
  std::string program = "attncheck";
  // Environment assignments a fresh shell lacks, each followed by a space ("PYTHONPATH=... "):
  // a worker inherits attncheck's environment and a Python worker finds its modules through it.
  std::string env;
  // Where the subject comes from, each flag after a space (" --worker CMD", " --plugin P --isolate").
  std::string source_flags;
  // The backend the run resolved to; "" leaves out --backend (and the command stays bare).
  std::string backend;
};

// <env><program> replay FILE --subject NAME<source flags> --backend B
std::string replay_command(const ReproduceContext&, const std::string& file, const std::string& subject);
// <env><program> check --subject NAME --property P --seed S --shard 0/1<stream flags><source flags>
// --backend B; stream_flags are the check flags that shape the case stream besides --seed
// (properties' stream_flags). A reproducer of a run that wrote no corpus file.
std::string check_command(const ReproduceContext&, const std::string& subject, const std::string& property,
                          uint64_t seed, const std::string& stream_flags);

}  // namespace attncheck
