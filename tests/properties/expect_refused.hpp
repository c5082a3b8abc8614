// One check for the property tests: declared_variants fails a subject that refuses an item it
// declares, as refused_declared, with the message naming the item.
#pragma once
#include <catch2/catch.hpp>
#include <string>

#include "attncheck/properties.hpp"

// declared_variants on `s` fails as a refusal of a declared item, with exactly `message`.
inline void expect_refused_declared(
    attncheck::Subject& s, const std::string& message, attncheck::RunConfig cfg = [] {
      attncheck::RunConfig c;
      c.shrink = false;
      return c;
    }()) {
  const attncheck::PropertyResult r = attncheck::run_property("declared_variants", s, cfg);
  INFO(r.message);
  CHECK(r.status == attncheck::PropertyResult::Status::failed);
  CHECK(r.failure_class == "refused_declared");
  CHECK(r.message == message);
}
