// AbiSubject: an ac_subject of the plugin ABI (plugin_abi.h), seen as an attncheck::Subject.
//
// Built-in kernels and users' plugins both reach the properties through this one adapter, so
// they are tested by the same code path. The adapter
//   - packs the host-side bit tensors of a case into the subject's element type (4 bytes for
//     fp32, 2 for fp16 / bf16) and, for AC_MEMORY_CUDA subjects, stages them to the device;
//   - poisons every output element with a NaN pattern before the call (staging.hpp), so an element
//     the subject never wrote shows up as NaN (a non-finite output) instead of stale zeros;
//   - writes input LSEs and reads output LSEs through the subject's declared layout
//     ([heads, tokens] or [tokens, heads]), handing the properties the logical [tokens, heads];
//   - maps AC_ERR_* codes to SubjectError kinds (AC_ERR_DEVICE -> device_fault).
// No rounding happens here: elements are copied bit for bit.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attncheck/backend.hpp"
#include "attncheck/plugin_abi.h"
#include "attncheck/staging.hpp"
#include "attncheck/subject.hpp"

namespace attncheck {

class AbiSubject final : public Subject {
 public:
  // keep_alive holds whatever owns the memory `s` points into (a plugin's dlopen handle).
  AbiSubject(const ac_subject& s, std::string origin, std::shared_ptr<void> keep_alive = nullptr);

  const std::string& name() const override { return name_; }
  const std::string& description() const override { return description_; }
  const ac_caps& caps() const override { return subject_.caps; }
  std::string backend() const override;
  std::string origin() const override { return origin_; }

  MergeOutput merge(const MergeInput& in) override;
  SoftmaxOutput softmax(const SoftmaxInput& in) override;
  AttentionOutput attention(const AttentionInput& in, const AttentionOptions& opt) override;
  QuantizeOutput quantize(const QuantizeInput& in) override;

  // Called just before each call into the subject (after staging, before launch). The harness
  // uses it to persist the case first, so a launch that kills the process leaves a reproducer.
  void set_before_call(std::function<void()> hook) { before_call_ = std::move(hook); }

 private:
  ac_subject subject_;
  std::string name_, description_, origin_;
  std::shared_ptr<void> keep_alive_;
  std::function<void()> before_call_;
};

// The built-in kernels of kernels/ for one backend (auto is resolved first; its choice is
// printed once to stderr unless `note` is given, which then receives it).
// Throws std::runtime_error when cuda is asked for and unavailable.
std::vector<std::unique_ptr<Subject>> load_builtin_subjects(Backend backend, std::string* note = nullptr);

// Adapt a list of ac_subject entries (shared by built-ins and plugins).
std::vector<std::unique_ptr<Subject>> adapt_subjects(const std::vector<ac_subject>& subjects,
                                                     const std::string& origin,
                                                     std::shared_ptr<void> keep_alive = nullptr);

}  // namespace attncheck
