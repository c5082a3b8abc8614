#include "attncheck/bench_report.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "attncheck/json_fields.hpp"

namespace attncheck {
namespace {
using json = nlohmann::json;
namespace jf = json_fields;

constexpr size_t kMaxBenchFileBytes = size_t(64) << 20;
constexpr int64_t kMaxRepeats = 1 << 20;

// A positive finite number: a time or a rate of zero or below is no measurement.
double positive(const json& obj, const char* key, const std::string& where) {
  const double v = jf::get_number<BenchError>(obj, key, where);
  if (!(v > 0) || !std::isfinite(v)) throw BenchError(where + "." + key + " must be a positive number");
  return v;
}

// A finite number of zero or more, 0 where absent: a ceiling or a fraction of one (0: not measured).
double non_negative_or_zero(const json& obj, const char* key, const std::string& where) {
  const double v = jf::get_number_or<BenchError>(obj, key, where, 0);
  if (!(v >= 0) || !std::isfinite(v))
    throw BenchError(where + "." + key + " must be a finite number, 0 or more");
  return v;
}

std::string fmt(double v, const char* spec = "%.4g") {
  char b[48];
  std::snprintf(b, sizeof b, spec, v);
  return b;
}

}  // namespace

std::string BenchRow::id() const {
  return family + "/" + kernel + "/" + shape + "/" + dtype + (causal ? "/causal" : "/non-causal") +
         (tiling.empty() ? "" : "/" + tiling);
}

std::string bench_to_json_text(const BenchRun& r) {
  json rows = json::array();
  for (const BenchRow& x : r.rows) {
    json peers = json::object();
    for (const auto& [name, v] : x.peers) peers[name] = v;
    rows.push_back({{"id", x.id()},
                    {"family", x.family},
                    {"kernel", x.kernel},
                    {"shape", x.shape},
                    {"dtype", x.dtype},
                    {"causal", x.causal},
                    {"tiling", x.tiling},
                    {"ms", x.ms},
                    {"value", x.value},
                    {"unit", x.unit},
                    {"ceiling", x.ceiling},
                    {"of_ceiling", x.of_ceiling},
                    {"peers", peers}});
  }
  const json j = {
      {"schema", "attncheck-bench"},
      {"schema_version", r.schema_version},
      {"tool_version", r.tool_version},
      {"timestamp", r.timestamp},
      {"device", r.device},
      {"repeats", r.repeats},
      {"ceilings",
       {{"copy_gbps", r.copy_gbps}, {"gemm_tflops", r.gemm_tflops}, {"fp8_gemm_tflops", r.fp8_gemm_tflops}}},
      {"peers_note", r.peers_note},
      {"rows", rows}};
  return j.dump(1) + "\n";
}

BenchRun read_bench_file(const std::string& path) {
  return bench_from_json_text(jf::read_text_file<BenchError>(path, kMaxBenchFileBytes, "bench file"),
                              "bench file " + path);
}

BenchRun bench_from_json_text(const std::string& text, const std::string& where) {
  std::string error;
  const std::optional<json> parsed = jf::try_parse_strict(text, error);
  if (!parsed) throw BenchError(where + ": " + error);
  const json& j = *parsed;
  if (!j.is_object() || jf::get_string<BenchError>(j, "schema", where) != "attncheck-bench")
    throw BenchError(where + ": not an attncheck bench.json (schema is not \"attncheck-bench\")");
  BenchRun r;
  r.schema_version = int(jf::get_int<BenchError>(j, "schema_version", where, 1, 1000));
  if (r.schema_version > kBenchSchemaVersion)
    throw BenchError(where + ": schema_version " + std::to_string(r.schema_version) +
                     " is newer than this attncheck reads (" + std::to_string(kBenchSchemaVersion) + ")");
  r.tool_version = jf::get_string_or<BenchError>(j, "tool_version", where, "");
  r.timestamp = jf::get_string_or<BenchError>(j, "timestamp", where, "");
  r.device = jf::get_string<BenchError>(j, "device", where);
  r.peers_note = jf::get_string_or<BenchError>(j, "peers_note", where, "");
  r.repeats = int(jf::get_int<BenchError>(j, "repeats", where, 1, kMaxRepeats));
  const json& c = jf::field<BenchError>(j, "ceilings", where);
  if (!c.is_object()) throw BenchError(where + ".ceilings must be an object");
  r.copy_gbps = non_negative_or_zero(c, "copy_gbps", where + ".ceilings");
  r.gemm_tflops = non_negative_or_zero(c, "gemm_tflops", where + ".ceilings");
  r.fp8_gemm_tflops = non_negative_or_zero(c, "fp8_gemm_tflops", where + ".ceilings");
  const json& rows = jf::field<BenchError>(j, "rows", where);
  if (!rows.is_array()) throw BenchError(where + ".rows must be a list");
  std::set<std::string> ids;
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& x = rows[i];
    const std::string w = where + ".rows[" + std::to_string(i) + "]";
    if (!x.is_object()) throw BenchError(w + " must be an object");
    BenchRow b;
    b.family = jf::get_string<BenchError>(x, "family", w);
    b.kernel = jf::get_string<BenchError>(x, "kernel", w);
    b.shape = jf::get_string<BenchError>(x, "shape", w);
    b.dtype = jf::get_string<BenchError>(x, "dtype", w);
    b.causal = jf::get_bool<BenchError>(x, "causal", w);
    b.tiling = jf::get_string_or<BenchError>(x, "tiling", w, "");
    b.ms = positive(x, "ms", w);
    b.value = positive(x, "value", w);
    b.unit = jf::get_string<BenchError>(x, "unit", w);
    b.ceiling = jf::get_string_or<BenchError>(x, "ceiling", w, "");
    b.of_ceiling = non_negative_or_zero(x, "of_ceiling", w);
    if (x.contains("peers")) {
      const json& p = x["peers"];
      if (!p.is_object()) throw BenchError(w + ".peers must be an object");
      for (const auto& [name, v] : p.items()) b.peers[name] = positive(p, name.c_str(), w + ".peers");
    }
    if (!ids.insert(b.id()).second) throw BenchError(w + ": row " + b.id() + " appears twice");
    r.rows.push_back(std::move(b));
  }
  return r;
}

BenchComparison compare_bench(const BenchRun& baseline, const BenchRun& now, double tolerance) {
  if (!(tolerance >= 0 && tolerance <= 10))
    throw BenchError("--tolerance must be a fraction between 0 and 10 (0.05 is 5%), not " + fmt(tolerance));
  if (baseline.device != now.device)
    throw BenchError("the baseline was measured on '" + baseline.device + "', this run on '" + now.device +
                     "': times on different devices are not compared");
  std::map<std::string, const BenchRow*> current;
  for (const BenchRow& r : now.rows) current[r.id()] = &r;
  BenchComparison c;
  for (const BenchRow& b : baseline.rows) {
    const auto it = current.find(b.id());
    if (it == current.end()) {
      c.missing.push_back(b.id());
      continue;
    }
    ++c.compared;
    const double change = it->second->ms / b.ms - 1;
    if (change > tolerance)
      c.regressions.push_back(b.id() + ": " + fmt(b.ms) + " ms -> " + fmt(it->second->ms) + " ms (+" +
                              fmt(100 * change, "%.1f") + "%, tolerance " + fmt(100 * tolerance, "%.1f") +
                              "%)");
  }
  return c;
}

std::string find_peers_script(const std::string& built, std::string& why) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(built, ec)) return built;
  const std::string here = "kernels/bench/peers.py";
  if (fs::is_regular_file(here, ec)) {
    const fs::path abs = fs::absolute(here, ec);
    if (!ec) return abs.string();
  }
  why = "peers: no " + built + " (the source tree is gone) and no ./" + here;
  return {};
}

}  // namespace attncheck
