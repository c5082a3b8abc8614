// A report directory: its files written atomically, the manifest that tells a complete set from
// one a kill interrupted, and the page's figures once they are drawn.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "attncheck/atomic_file.hpp"
#include "attncheck/hash.hpp"
#include "attncheck/json_fields.hpp"
#include "attncheck/report.hpp"
#include "report_internal.hpp"

namespace attncheck {

using nlohmann::json;

void ensure_writable_dir(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw ReportError(what + " " + dir + " cannot be created: " + (ec ? ec.message() : "not a directory"));
  const std::string probe = dir + "/.attncheck-write-probe";
  {
    std::ofstream f(probe);
    if (!f) throw ReportError(what + " " + dir + " is not writable");
  }
  fs::remove(probe, ec);
}

std::string report_detail::content_hash(const std::string& text) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash::fnv1a64(text)));
  return buf;
}

namespace {
constexpr const char* kManifest = "manifest.json";
using report_detail::content_hash;
}  // namespace

namespace {
// Writes the set; `figures` go into report.html only.
void write_set(const std::string& dir, const Report& r,
               const std::vector<std::pair<std::string, std::string>>& figures) {
  ensure_writable_dir(dir);
  // Each file is replaced atomically; the manifest, written last, records the hash of every file
  // of the set, so a reader can tell a complete set from one that a kill interrupted between two
  // renames (check_report_set).
  const std::pair<const char*, std::string> files[] = {
      {"report.json", report_to_json(r).dump(2, ' ', false, json::error_handler_t::replace) + "\n"},
      {"report.md", render_markdown(r)},
      {"report.html", render_html(r, figures)},
      {"junit.xml", render_junit(r)}};
  json manifest = {{"schema", "attncheck-report-manifest"}, {"files", json::object()}};
  for (const auto& [name, text] : files) manifest["files"][name] = content_hash(text);
  try {
    for (const auto& [name, text] : files) write_file_atomic(dir + "/" + name, text);
    write_file_atomic(dir + "/" + kManifest, manifest.dump(1) + "\n");
  } catch (const AtomicWriteError& e) {
    throw ReportError(e.what());
  }
}
}  // namespace

void write_report_dir(const std::string& dir, const Report& r) { write_set(dir, r, {}); }

void embed_plots_in_report(const std::string& dir) {
  namespace fs = std::filesystem;
  const Report r = read_report_file(dir + "/report.json");
  // The figures that decide: the run's summary, then err/budget per dtype (plot_report.py).
  std::vector<std::string> names;
  std::error_code ec;
  const fs::path plots = fs::path(dir) / "plots";
  if (fs::exists(plots / "summary.svg", ec)) names.push_back("summary.svg");
  std::vector<std::string> budget;
  for (fs::directory_iterator it(plots, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind("budget-", 0) == 0 && it->path().extension() == ".svg") budget.push_back(n);
  }
  std::sort(budget.begin(), budget.end());
  names.insert(names.end(), budget.begin(), budget.end());
  std::vector<std::pair<std::string, std::string>> figures;
  for (const std::string& n : names) {
    std::string error;
    auto text = json_fields::try_read_text_file((plots / n).string(), size_t(16) << 20, error);
    if (!text) continue;
    // An inline <svg> element: the XML declaration and doctype before it do not belong in HTML.
    const size_t at = text->find("<svg");
    if (at != std::string::npos) figures.emplace_back(n, text->substr(at));
  }
  write_set(dir, r, figures);
}

std::vector<std::string> check_report_set(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> problems;
  const fs::path manifest_path = fs::path(dir) / kManifest;
  std::error_code ec;
  if (!fs::exists(manifest_path, ec)) return problems;  // no report written here yet
  auto slurp = [](const fs::path& p, std::string& out) {
    std::string error;
    auto text = json_fields::try_read_text_file(p.string(), size_t(256) << 20, error);
    if (text) out = std::move(*text);
    return text.has_value();
  };
  std::string text;
  std::string error;
  std::optional<json> m;
  if (slurp(manifest_path, text)) m = json_fields::try_parse_strict(text, error);
  if (!m || !m->is_object() || !m->contains("files") || !(*m)["files"].is_object()) {
    problems.push_back(std::string(kManifest) + " is unreadable");
    return problems;
  }
  for (const auto& [name, hash] : (*m)["files"].items()) {
    std::string content;
    if (!slurp(fs::path(dir) / name, content))
      problems.push_back(name + " is missing");
    else if (!hash.is_string() || content_hash(content) != hash.get<std::string>())
      problems.push_back(name +
                         " belongs to another run than the manifest (a run was interrupted while writing)");
  }
  return problems;
}

}  // namespace attncheck
