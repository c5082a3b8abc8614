// ptx_proxy_lint: a static check, on PTX text, for a missing generic-to-async proxy fence on shared
// memory. Mutant 16 (HopperMutation::no_proxy_fence) drops the fence.proxy.async between the
// producer's ordinary stores of the partial V tile and the wgmma that reads that tile; on the H200
// the outputs stay right and the sanitizers are silent, so only the instruction stream shows it.
//
//   ptx_proxy_lint [--verbose] FILE.ptx...
//
// For every kernel (`.entry NAME`, its body up to the matching closing brace) the rule is:
//   flagged  <=>  the kernel holds a generic-proxy shared store
//                 AND an async-proxy shared read
//                 AND no fence.proxy.async
// where the kernel's instructions are those of its body and of every `.func` body defined in the
// same file that it calls, directly or through other functions (`call` by name).
//   generic-proxy shared store: `st` with a .shared state space (.shared, .shared::cta,
//     .shared::cluster; any width, type, vector or ordering: st.volatile.shared, st.relaxed...,
//     st.release...) and `stmatrix ... .shared`. Not counted: st.async and st.bulk (asynchronous
//     and bulk forms, not the stores nvcc emits for C++ assignments); atom.shared and red.shared
//     (read-modify-writes of counters and flags that generic loads read back, not tiles an
//     async-proxy instruction consumes: counting them would only add false flags); mbarrier.*
//     (the kernel orders its mbarrier.init with fence.mbarrier_init, another fence); cp.async
//     without .bulk.
//   async-proxy shared read: any wgmma.mma_async (its B operand, and A in the SS form, is a
//     shared-memory descriptor); cp.async.bulk[.tensor] and cp.reduce.async.bulk[.tensor] whose
//     source state space (the second one named) is shared: shared-to-global stores and reductions
//     and shared::cta-to-shared::cluster copies. Bulk copies from global into shared memory write
//     shared memory and are not reads.
//   fence: fence.proxy.async, bare or with a shared state space. fence.proxy.async.global does not
//     order shared memory and is not counted; nor are the fence.proxy.async::generic forms (a
//     kernel that relies on one of those is flagged).
//
// Limits (the rule is about presence in the kernel, not about order or paths):
//   - Not flow-sensitive: a kernel with one fence anywhere passes, even when the fence sits before
//     the stores, on another path, or in a warpgroup that never stores.
//   - Not address-sensitive: a kernel whose generic stores only feed generic loads (a reduction
//     scratch buffer, say) but which also runs wgmma on tiles the copy engine loaded is flagged
//     although it needs no fence. The rule is not narrowed for that: telling which buffer a store
//     writes needs address tracking through the arithmetic on one dynamic shared-memory base, which
//     the PTX text does not give cheaply. Such a kernel either carries the (cheap) fence or is not
//     given to this checker.
//   - Stores through generic addresses (st without a state space) that land in shared memory are
//     not seen; nvcc emits st.shared for stores it can trace to __shared__ memory, as it does for
//     the Hopper kernel's V tile.
//   - Indirect calls (call through a register) are not followed.
//
// Output: with --verbose, per kernel its counts; per flagged kernel one line
// `NAME: generic-proxy shared stores and async-proxy shared reads with no fence.proxy.async` and an
// indented line with the first instance of each (line numbers of the file); per file
// `FILE: N kernels checked, M flagged`. Exit 0: nothing flagged; 1: a kernel flagged; 2: bad input
// (unreadable file, no .entry, unbalanced braces, no file given), one line on stderr.
// Check: ctest --test-dir build -R proxy_lint
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Facts {
  int stores = 0, reads = 0, fences = 0;
  size_t store_at = 0, read_at = 0;  // offsets of the first store / read (valid when counted)
  std::string store_op, read_op;
  std::vector<std::string> callees;
};

struct Function {
  std::string name;
  bool entry = false;
  Facts facts;
};

bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
         c == '%';
}

// Comments and string contents (`.file 1 "path"`) become blanks, newlines stay, so that offsets
// keep their line numbers and braces or semicolons inside them are not taken for code.
std::string strip_comments(const std::string& in) {
  std::string out = in;
  size_t i = 0;
  while (i < out.size()) {
    if (out.compare(i, 2, "//") == 0) {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
    } else if (out.compare(i, 2, "/*") == 0) {
      out[i] = out[i + 1] = ' ';
      i += 2;
      while (i < out.size() && out.compare(i, 2, "*/") != 0) {
        if (out[i] != '\n') out[i] = ' ';
        ++i;
      }
      if (i < out.size()) {
        out[i] = out[i + 1] = ' ';
        i += 2;
      }
    } else if (out[i] == '"') {
      ++i;
      while (i < out.size() && out[i] != '"' && out[i] != '\n') out[i++] = ' ';
      if (i < out.size() && out[i] == '"') ++i;
    } else {
      ++i;
    }
  }
  return out;
}

std::vector<std::string> split_dots(std::string_view op) {
  std::vector<std::string> parts;
  size_t b = 0;
  for (size_t i = 0; i <= op.size(); ++i)
    if (i == op.size() || op[i] == '.') {
      parts.emplace_back(op.substr(b, i - b));
      b = i + 1;
    }
  return parts;
}

bool is_shared(const std::string& q) { return q == "shared" || q.rfind("shared::", 0) == 0; }
bool is_state_space(const std::string& q) {
  return is_shared(q) || q == "global" || q == "local" || q == "param" || q == "const";
}
bool has(const std::vector<std::string>& parts, std::string_view q) {
  return std::find(parts.begin(), parts.end(), q) != parts.end();
}

bool generic_shared_store(const std::vector<std::string>& p) {
  const bool shared = std::any_of(p.begin() + 1, p.end(), is_shared);
  if (p[0] == "st") return shared && !has(p, "async") && !has(p, "bulk");
  if (p[0] == "stmatrix") return shared;
  return false;
}

bool async_shared_read(const std::vector<std::string>& p) {
  if (p[0] == "wgmma") return p.size() > 1 && p[1] == "mma_async";
  if (p[0] != "cp") return false;
  const bool bulk = (p.size() > 2 && p[1] == "async" && p[2] == "bulk") ||
                    (p.size() > 3 && p[1] == "reduce" && p[2] == "async" && p[3] == "bulk");
  if (!bulk) return false;
  // The state spaces are named destination first, then source.
  std::vector<std::string> spaces;
  for (const auto& q : p)
    if (is_state_space(q)) spaces.push_back(q);
  return spaces.size() >= 2 && is_shared(spaces[1]);
}

bool proxy_async_fence(const std::vector<std::string>& p) {
  return p[0] == "fence" && p.size() > 2 && p[1] == "proxy" && p[2] == "async" && !has(p, "global");
}

// The callee of `call[.uni] [(rets),] name [, (args)] [, proto]`; empty for a call through a register.
std::string callee_of(std::string_view operands) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < operands.size() && space(operands[i])) ++i;
  };
  skip_space();
  if (i < operands.size() && operands[i] == '(') {
    const size_t close = operands.find(')', i);
    if (close == std::string_view::npos) return {};
    i = close + 1;
    skip_space();
    if (i < operands.size() && operands[i] == ',') ++i;
    skip_space();
  }
  if (i < operands.size() && operands[i] == '%') return {};
  const size_t b = i;
  while (i < operands.size() && ident_char(operands[i])) ++i;
  return std::string(operands.substr(b, i - b));
}

// One statement: its text from `begin` to `end` in `t`. Labels and a guard predicate are skipped,
// and `.loc` / `.file` lines (directives without a terminating semicolon, which nvcc puts before
// instructions with -lineinfo) are dropped; the first word left is the opcode.
void classify(const std::string& t, size_t begin, size_t end, Facts& f) {
  size_t i = begin;
  for (;;) {
    while (i < end && space(t[i])) ++i;
    if (i >= end) return;
    if (t.compare(i, 4, ".loc") == 0 || t.compare(i, 5, ".file") == 0) {
      while (i < end && t[i] != '\n') ++i;
      continue;
    }
    if (t[i] == '@') {  // guard: @p or @!p
      while (i < end && !space(t[i])) ++i;
      continue;
    }
    size_t j = i;
    while (j < end && ident_char(t[j])) ++j;
    if (j > i && j < end && t[j] == ':' && (j + 1 >= end || t[j + 1] != ':')) {  // label
      i = j + 1;
      continue;
    }
    break;
  }
  if (t[i] == '.') return;  // a directive (.reg, .shared, .pragma, ...)
  size_t j = i;
  while (j < end && !space(t[j]) && t[j] != '[' && t[j] != '(' && t[j] != ',') ++j;
  const std::string op = t.substr(i, j - i);
  const auto parts = split_dots(op);
  if (parts.empty() || parts[0].empty()) return;
  if (generic_shared_store(parts)) {
    if (f.stores++ == 0) f.store_at = i, f.store_op = op;
  } else if (async_shared_read(parts)) {
    if (f.reads++ == 0) f.read_at = i, f.read_op = op;
  } else if (proxy_async_fence(parts)) {
    ++f.fences;
  } else if (parts[0] == "call") {
    std::string c = callee_of(std::string_view(t).substr(j, end - j));
    if (!c.empty()) f.callees.push_back(std::move(c));
  }
}

// Statements end at ';'; '{' and '}' (inline-asm scopes, vector operands) also cut, which leaves
// the opcode at the head of its piece.
Facts scan_body(const std::string& t, size_t begin, size_t end) {
  Facts f;
  size_t s = begin;
  for (size_t i = begin; i < end; ++i)
    if (t[i] == ';' || t[i] == '{' || t[i] == '}') {
      classify(t, s, i, f);
      s = i + 1;
    }
  classify(t, s, end, f);
  return f;
}

struct Parsed {
  std::vector<Function> functions;
  std::string error;  // non-empty: bad input
};

// The offset just past the ')' that closes the '(' at `open` (or the end of the text).
size_t past_parens(const std::string& t, size_t open) {
  int d = 0;
  for (size_t i = open; i < t.size(); ++i) {
    if (t[i] == '(') ++d;
    if (t[i] == ')' && --d == 0) return i + 1;
  }
  return t.size();
}

// Finds `.entry` and `.func` definitions at the top level (outside any braces) and scans their
// bodies. A header followed by ';' before '{' is a declaration.
Parsed parse(const std::string& t) {
  Parsed out;
  int depth = 0;
  size_t i = 0;
  while (i < t.size()) {
    const char c = t[i];
    if (c == '{') {
      ++depth, ++i;
      continue;
    }
    if (c == '}') {
      --depth, ++i;
      continue;
    }
    const bool at_word = c == '.' && (i == 0 || space(t[i - 1]));
    const bool is_entry = at_word && t.compare(i, 6, ".entry") == 0 && i + 6 < t.size() && space(t[i + 6]);
    const bool is_func =
        at_word && t.compare(i, 5, ".func") == 0 && i + 5 < t.size() && (space(t[i + 5]) || t[i + 5] == '(');
    if (depth != 0 || (!is_entry && !is_func)) {
      ++i;
      continue;
    }
    i += is_entry ? 6 : 5;
    // The name: after any parenthesised return list and .attribute(...) words.
    std::string name;
    while (i < t.size() && name.empty()) {
      while (i < t.size() && space(t[i])) ++i;
      if (i >= t.size()) break;
      if (t[i] == '(') {
        i = past_parens(t, i);
      } else if (t[i] == '.') {
        while (i < t.size() && !space(t[i]) && t[i] != '(') ++i;
        if (i < t.size() && t[i] == '(') i = past_parens(t, i);
      } else {
        const size_t b = i;
        while (i < t.size() && ident_char(t[i])) ++i;
        if (i == b) break;
        name = t.substr(b, i - b);
      }
    }
    if (name.empty()) {
      out.error = "a .entry or .func without a name";
      return out;
    }
    int parens = 0;
    size_t open = std::string::npos;
    for (; i < t.size(); ++i) {
      if (t[i] == '(') ++parens;
      if (t[i] == ')') --parens;
      if (parens == 0 && (t[i] == ';' || t[i] == '{')) {
        if (t[i] == '{') open = i;
        ++i;
        break;
      }
    }
    if (open == std::string::npos) {
      if (is_entry && i >= t.size()) {
        out.error = "no body for .entry " + name;
        return out;
      }
      continue;  // a declaration
    }
    int d = 1;
    size_t close = open + 1;
    for (; close < t.size() && d > 0; ++close) {
      if (t[close] == '{') ++d;
      if (t[close] == '}') --d;
    }
    if (d != 0) {
      out.error = "unbalanced braces in the body of " + name;
      return out;
    }
    out.functions.push_back({name, is_entry, scan_body(t, open + 1, close - 1)});
    i = close;
  }
  return out;
}

// A kernel's facts with those of every function it reaches through calls.
Facts closure(const Function& k, const std::map<std::string, const Function*>& by_name) {
  Facts all = k.facts;
  std::set<std::string> seen{k.name};
  std::vector<std::string> todo = k.facts.callees;
  while (!todo.empty()) {
    const std::string n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    const auto it = by_name.find(n);
    if (it == by_name.end()) continue;  // declared only: not in this file
    const Facts& g = it->second->facts;
    if (all.stores == 0 && g.stores > 0) all.store_at = g.store_at, all.store_op = g.store_op;
    if (all.reads == 0 && g.reads > 0) all.read_at = g.read_at, all.read_op = g.read_op;
    all.stores += g.stores, all.reads += g.reads, all.fences += g.fences;
    todo.insert(todo.end(), g.callees.begin(), g.callees.end());
  }
  return all;
}

size_t line_of(const std::string& t, size_t offset) {
  return size_t(std::count(t.begin(), t.begin() + std::ptrdiff_t(offset), '\n')) + 1;
}

// Checks one file; returns the number of flagged kernels, or -1 after one line on stderr.
int check_file(const std::string& path, bool verbose) {
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  if (!std::filesystem::is_regular_file(path, ec) || !in) {
    std::fprintf(stderr, "ptx_proxy_lint: %s: cannot read the file\n", path.c_str());
    return -1;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string text = strip_comments(buf.str());
  const Parsed parsed = parse(text);
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "ptx_proxy_lint: %s: %s\n", path.c_str(), parsed.error.c_str());
    return -1;
  }
  std::map<std::string, const Function*> by_name;
  int kernels = 0;
  for (const auto& fn : parsed.functions) {
    by_name.emplace(fn.name, &fn);
    kernels += fn.entry ? 1 : 0;
  }
  if (kernels == 0) {
    std::fprintf(stderr, "ptx_proxy_lint: %s: no .entry (not a PTX file with kernels)\n", path.c_str());
    return -1;
  }
  int flagged = 0;
  for (const auto& fn : parsed.functions) {
    if (!fn.entry) continue;
    const Facts f = closure(fn, by_name);
    if (verbose)
      std::printf("  %s: %d generic-proxy shared stores, %d async-proxy shared reads, %d fence.proxy.async\n",
                  fn.name.c_str(), f.stores, f.reads, f.fences);
    if (f.stores > 0 && f.reads > 0 && f.fences == 0) {
      ++flagged;
      std::printf("%s: generic-proxy shared stores and async-proxy shared reads with no fence.proxy.async\n",
                  fn.name.c_str());
      std::printf("  first store: line %zu %s; first async read: line %zu %s\n", line_of(text, f.store_at),
                  f.store_op.c_str(), line_of(text, f.read_at), f.read_op.c_str());
    }
  }
  std::printf("%s: %d kernels checked, %d flagged\n", path.c_str(), kernels, flagged);
  return flagged;
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  std::vector<std::string> files;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--verbose" || arg == "-v") {
      verbose = true;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr,
                   "ptx_proxy_lint: unknown option %s (usage: ptx_proxy_lint [--verbose] FILE.ptx...)\n",
                   arg.c_str());
      return 2;
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr,
                 "ptx_proxy_lint: no PTX file given (usage: ptx_proxy_lint [--verbose] FILE.ptx...)\n");
    return 2;
  }
  int flagged = 0;
  for (const auto& f : files) {
    const int n = check_file(f, verbose);
    if (n < 0) return 2;
    flagged += n;
  }
  return flagged > 0 ? 1 : 0;
}
