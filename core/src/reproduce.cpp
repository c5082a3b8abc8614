#include "attncheck/reproduce.hpp"

namespace attncheck {
namespace {

// Every reproduce command: the context around the words that name the case.
std::string with_context(const ReproduceContext& ctx, const std::string& words) {
  return ctx.env + ctx.program + " " + words + ctx.source_flags +
         (ctx.backend.empty() ? "" : " --backend " + ctx.backend);
}

}  // namespace

std::string replay_command(const ReproduceContext& ctx, const std::string& file, const std::string& subject) {
  return with_context(ctx, "replay " + file + " --subject " + subject);
}

std::string check_command(const ReproduceContext& ctx, const std::string& subject,
                          const std::string& property, uint64_t seed, const std::string& stream_flags) {
  return with_context(ctx, "check --subject " + subject + " --property " + property + " --seed " +
                               std::to_string(seed) + " --shard 0/1" + stream_flags);
}

}  // namespace attncheck
