// The one atomic writer. Everything attncheck leaves on disk (corpus cases, write-ahead cases,
// reports, mutant tables) goes through it, so a reader, a crash or a kill -9 never sees a partial
// file: the text goes to a temporary file in the target's directory, is flushed to disk, and is
// renamed over the target (rename is atomic within one file system); the directory is flushed
// too, so the new name survives a power loss.
//
// Temporary files are named ".tmp-<target name>-<pid>-<n>". A writer killed before its rename
// leaves one behind; remove_stale_temporaries lists and deletes those of processes that are gone.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace attncheck {

// The file or its directory cannot be written. what() is one line naming the path and the reason.
struct AtomicWriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How long a write must last. power_loss: the file and its directory are flushed to disk before
// and after the rename, so the new contents survive a machine crash. process: no flush; the page
// cache already outlives the writing process, which is all a write-ahead case must survive (the
// subject segfaulting, faulting the device or being killed), and a flush per subject call (two
// fsyncs, 0.5 ms here and more on slower disks) would dominate runs of many small calls.
enum class Durability { power_loss, process };

// Writes `text` to `path` atomically, creating missing parent directories.
void write_file_atomic(const std::string& path, std::string_view text,
                       Durability durability = Durability::power_loss);

// Deletes the temporaries in `dir` (not recursive) left by writers that are no longer running,
// and returns their names. Temporaries of live processes are left alone.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace attncheck
