// What the report files share inside ac_harness_core: status order, number spelling, the JSON
// spelling of non-finite numbers, content hashes. Not installed.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "attncheck/report.hpp"

namespace attncheck::report_detail {

// Worse is larger: crashed 3, failed 2, interrupted 1; passed and not_applicable 0.
int status_rank(const std::string& status);
// A number for a reader: 3 significant digits (prec), "inf", "-inf", "nan".
std::string short_number(double x, int prec = 3);
// JSON cannot hold non-finite numbers: they are the strings "inf", "-inf" and "nan".
nlohmann::json num(double x);
double get_num(const nlohmann::json& j);
const char* budget_use_name(PropertyInfo::BudgetUse);
// A file's content as 16 hex digits (FNV-1a): the manifest's hashes, a baseline's id.
std::string content_hash(const std::string& text);

}  // namespace attncheck::report_detail
