// The exact reference on the command line: `attncheck round`, `attncheck exact` and
// `attncheck selfcheck` (reference/).
#include <cstdio>
#include <memory>

#include "attncheck/reference/ask.hpp"
#include "attncheck/reference/format.hpp"
#include "attncheck/reference/precision.hpp"
#include "command.hpp"
#include "options.hpp"

namespace attncheck::cli {

Command add_round_command(CLI::App& app, Common&) {
  struct Options {
    std::string to, value;
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app = app.add_subcommand("round", "correctly rounded value of VALUE (decimal or hexfloat) in a format");
  c.app->add_option("--to", o->to, "fp16 | bf16 | fp32 | e4m3fn | e5m2 | e4m3fnuz")->required();
  c.app->add_option("value", o->value, "decimal or hexfloat")->required();
  c.run = [o] {
    std::printf("%s\n", ref::ask_round(o->to, o->value).c_str());
    return kExitOk;
  };
  return c;
}

Command add_exact_command(CLI::App& app, Common&) {
  struct Options {
    std::string what, logits;
    int base = 0;  // 0: e
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app =
      app.add_subcommand("exact", "exact lse or softmax of logits, with their rounded fp16/bf16/fp32 values");
  c.app->add_option("what", o->what, "lse | softmax")->required()->check(CLI::IsMember({"lse", "softmax"}));
  c.app->add_option("--logits", o->logits, "x1,x2,...")->required();
  c.app->add_option("--base", o->base, "LSE base: e (default) or 2")->check(CLI::IsMember({0, 2}));
  c.run = [o] {
    std::printf(
        "%s\n",
        ref::ask_exact(o->what, o->logits, o->base == 2 ? ref::LseBase::two : ref::LseBase::e).c_str());
    return kExitOk;
  };
  return c;
}

Command add_selfcheck_command(CLI::App& app, Common&) {
  Command c;
  c.app = app.add_subcommand("selfcheck", "the exact reference checks itself against known values");
  c.run = [] {
    try {
      std::printf("%s\n", ref::self_check().c_str());
      return kExitOk;
    } catch (const ref::ReferenceError& e) {
      std::fprintf(stderr, "attncheck selfcheck: FAILED: %s\n", e.what());
      return kExitFailed;
    }
  };
  return c;
}

}  // namespace attncheck::cli
