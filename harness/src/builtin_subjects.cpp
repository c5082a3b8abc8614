// The built-in kernels of kernels/ (ac_kernels' registry), adapted like any plugin. Kept in its
// own translation unit so code that never asks for built-ins (plugin tests) does not pull the
// kernel library in.
#include <cstdio>

#include "attncheck/abi_subject.hpp"
#include "common/registry.h"

namespace attncheck {

std::vector<std::unique_ptr<Subject>> load_builtin_subjects(Backend backend, std::string* note) {
  const BackendResolution r = resolve_backend(backend);
  if (note) {
    *note = r.note;
  } else {
    static bool said = false;  // "say which once" per process
    if (!said) std::fprintf(stderr, "%s\n", r.note.c_str());
    said = true;
  }
  return adapt_subjects(kern::builtin_subjects(r.backend == Backend::cuda), "builtin");
}

}  // namespace attncheck
