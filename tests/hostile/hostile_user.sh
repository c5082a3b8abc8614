#!/usr/bin/env bash
# The hostile user: a table of bad inputs to the attncheck CLI, each with the exit code it must
# give and a pattern its message must match. The contract (README, "Exit codes"): an input problem
# exits 2 with one line on stderr before any work; exit 3 ("internal error", a subject crash) never
# answers bad input; nothing hangs (every row runs under a timeout).
#
#   hostile_user.sh ATTNCHECK REPO_ROOT SCRATCH_DIR
#
# Prints one line per row (ok / FAIL / skip) and a summary; exits 1 if any row failed.
set -u
AC=$1
ROOT=$2
S=$3
ROW_TIMEOUT=${ROW_TIMEOUT:-60}
rm -rf "$S" 2>/dev/null
mkdir -p "$S"
S=$(cd "$S" && pwd)
D="$S/data"
mkdir -p "$D"

n_ok=0
n_fail=0
n_skip=0
failed=()

# row NAME EXPECT REGEX COMMAND...
#   EXPECT  the allowed exit codes, "2" or "0|2"
#   REGEX   extended regex that must match the message: stderr's only line when the exit is 2
#           (which must then be exactly one line, starting "attncheck: "), else stdout + stderr.
row() {
  local name=$1 expect=$2 regex=$3
  shift 3
  local rc=0
  timeout -k 5 "$ROW_TIMEOUT" "$@" >"$S/out" 2>"$S/err" </dev/null || rc=$?
  local why=""
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    why="timed out after ${ROW_TIMEOUT}s"
  elif ! [[ "|$expect|" == *"|$rc|"* ]]; then
    why="exit $rc, expected $expect"
  elif [ "$rc" -eq 2 ]; then
    local lines
    lines=$(wc -l <"$S/err")
    if [ "$lines" -ne 1 ]; then
      why="exit 2 with $lines lines on stderr, expected one"
    elif ! grep -Eq '^attncheck( [a-z]+)?: ' "$S/err"; then
      why="stderr does not start with 'attncheck:'"
    elif ! grep -Eq -- "$regex" "$S/err"; then
      why="message does not match /$regex/"
    fi
  elif ! cat "$S/out" "$S/err" | grep -Eq -- "$regex"; then
    why="output does not match /$regex/"
  fi
  if [ -z "$why" ]; then
    n_ok=$((n_ok + 1))
    printf 'ok    %-34s exit %s  %s\n' "$name" "$rc" "$(head -c 150 "$S/err" | tr '\n' ' ')"
  else
    n_fail=$((n_fail + 1))
    failed+=("$name")
    printf 'FAIL  %-34s %s\n' "$name" "$why"
    printf '      stderr: %s\n' "$(head -c 400 "$S/err" | tr '\n' '|')"
    printf '      stdout: %s\n' "$(head -c 200 "$S/out" | tr '\n' '|')"
  fi
}
# holds NAME WHAT COMMAND...: a row on what a row before it left behind (files, their content);
# it passes when COMMAND succeeds.
holds() {
  local name=$1 what=$2
  shift 2
  if "$@" >/dev/null 2>&1; then
    n_ok=$((n_ok + 1))
    printf 'ok    %-34s %s\n' "$name" "$what"
  else
    n_fail=$((n_fail + 1))
    failed+=("$name")
    printf 'FAIL  %-34s not so: %s\n' "$name" "$what"
  fi
}
skip() {
  n_skip=$((n_skip + 1))
  printf 'skip  %-34s %s\n' "$1" "$2"
}

# ---- inputs ---------------------------------------------------------------------------------
# A valid case (softmax, one row of two fp32 logits), then variants of it; edits go through
# python3 so each variant differs from the valid case in one place.
cat >"$D/valid.json" <<'JSON'
{"format": "attncheck-case", "version": 1, "op": "softmax", "subject": "softmax-safe", "property": "accuracy",
 "note": "", "seed": "1", "rc_reproduce": "", "conventions": {"lse_base": 0, "empty_lse_sign": -1},
 "options": {"tiling": 0, "num_splits": 1, "fold": "left"},
 "input": {"dtype": "fp32", "rows": 1, "cols": 2, "x": "hex:0000803f00000040"}}
JSON
variant() {  # variant NAME PYTHON-STATEMENT (on the dict c)
  python3 - "$D/valid.json" "$D/$1.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
open(sys.argv[2], "w").write(json.dumps(c))
PY
}
variant lse-base-1 'c["conventions"]["lse_base"] = 1'
variant empty-sign-0 'c["conventions"]["empty_lse_sign"] = 0'
variant seed-minus-1 'c["seed"] = "-1"'
variant seed-space 'c["seed"] = " 1"'
variant seed-number 'c["seed"] = 5'
variant version-2 'c["version"] = 2'
variant version-float 'c["version"] = 1.0'
variant odd-hex 'c["input"]["x"] = "hex:0000803f000000"'
variant bad-b64 'c["input"]["x"] = "b64:AAC/P*AAAEA="'
variant too-few 'c["input"]["cols"] = 3'
variant newline-op 'c["op"] = "soft\nmax\u001b[31m"'
variant newline-subject 'c["subject"] = "evil\nattncheck: pass\u001b[2J"'
variant softmax-16m 'c["input"]["rows"] = 16777216; c["input"]["cols"] = 0; c["input"]["x"] = "hex:"'
variant softmax-2e24 'c["input"]["rows"] = 16777217; c["input"]["cols"] = 0; c["input"]["x"] = "hex:"'
variant merge-16m 'c["op"] = "merge"; c["input"] = {"dtype": "fp16", "num_tokens": 16777216, "num_heads": 1, "head_size": 0, "prefix_out": "hex:", "suffix_out": "hex:", "prefix_lse": "hex:", "suffix_lse": "hex:"}'
variant attention-16m-heads 'c["op"] = "attention"; c["subject"] = "fused"; c["input"] = {"dtype": "fp16", "num_heads": 16777216, "num_kv_heads": 16777216, "head_size": 16777216, "seqlens_q": [0], "seqlens_k": [0], "causal": False, "softmax_scale_bits": "0x3f800000", "mask": "", "q": "hex:", "k": "hex:", "v": "hex:"}'
variant attention-16m-rows 'c["op"] = "attention"; c["subject"] = "fused"; c["input"] = {"dtype": "fp16", "num_heads": 1, "num_kv_heads": 1, "head_size": 1, "seqlens_q": [16777216], "seqlens_k": [0], "causal": False, "softmax_scale_bits": "0x3f800000", "mask": "", "q": "hex:", "k": "hex:", "v": "hex:"}'
variant attention-gqa-3-2 'c["op"] = "attention"; c["subject"] = "fused"; c["input"] = {"dtype": "fp16", "num_heads": 3, "num_kv_heads": 2, "head_size": 1, "seqlens_q": [0], "seqlens_k": [0], "causal": False, "softmax_scale_bits": "0x3f800000", "mask": "", "q": "hex:", "k": "hex:", "v": "hex:"}'
variant mask-zero 'c["op"] = "attention"; c["subject"] = "fused"; c["input"] = {"dtype": "fp16", "num_heads": 1, "num_kv_heads": 1, "head_size": 1, "seqlens_q": [1], "seqlens_k": [1], "causal": False, "softmax_scale_bits": "0x3f800000", "mask": 0, "q": "hex:003c", "k": "hex:003c", "v": "hex:003c"}'
variant scale-bits-short 'c["op"] = "attention"; c["subject"] = "fused"; c["input"] = {"dtype": "fp16", "num_heads": 1, "num_kv_heads": 1, "head_size": 1, "seqlens_q": [1], "seqlens_k": [1], "causal": False, "softmax_scale_bits": " 0x3f8000", "mask": "", "q": "hex:003c", "k": "hex:003c", "v": "hex:003c"}'
variant unknown-subject 'c["subject"] = "no-such-kernel"'
# A misspelt property would be judged by accuracy alone, a failing reproducer passing; fp8_amax
# judges only the maxima a case asks for.
variant property-misspelt 'c["property"] = "acuracy"'
variant property-needs-amax 'c["property"] = "fp8_amax"'
variant excused-not-a-kind 'c["excused_rows"] = ["fully visible row"]'
# fp8_descales exchanges and doubles the descales and sets its own NaN codes: a file it cannot
# judge that way (no FP8 cache, a v_descale whose double is past the ABI's bound, a NaN already in
# the input, which the NaN checks would read as theirs) is refused, never judged or crashed on.
fp8_case='c["op"] = "attention"; c["subject"] = "fused-fp8kv"; c["property"] = "fp8_descales"; c["input"] = {"dtype": "fp16", "num_heads": 1, "num_kv_heads": 1, "head_size": 64, "seqlens_q": [1], "seqlens_k": [1], "causal": False, "softmax_scale_bits": "0x3f800000", "mask": "", "q": "hex:" + "003c" * 64, "kv_dtype": "e4m3fn", "k": "hex:" + "38" * 64, "v": "hex:" + "38" * 64, "k_descale": "hex:0000803f", "v_descale": "hex:0000803f"}'
variant fp8-descales-valid "$fp8_case"
variant fp8-descales-no-cache "$fp8_case"'; [c["input"].pop(f) for f in ("kv_dtype", "k_descale", "v_descale")]; c["input"]["k"] = c["input"]["v"] = "hex:" + "003c" * 64'
variant fp8-descales-nan-v "$fp8_case"'; c["input"]["v"] = "hex:7f" + "38" * 63'
variant fp8-descales-nan-q "$fp8_case"'; c["input"]["q"] = "hex:007e" + "003c" * 63'
variant fp8-descales-v-2p32 "$fp8_case"'; c["input"]["v_descale"] = "hex:0000804f"'
# Calls with no output row are legal and made; a pass of one says that nothing was compared.
variant fp8-descales-no-query "$fp8_case"'; c["input"]["seqlens_q"] = [0]; c["input"]["q"] = "hex:"'
variant merge-no-tokens 'c["op"] = "merge"; c["subject"] = "merge-fp8"; c["input"] = {"dtype": "fp16", "num_tokens": 0, "num_heads": 3, "head_size": 96, "prefix_out": "hex:", "suffix_out": "hex:", "prefix_lse": "hex:", "suffix_lse": "hex:"}'
variant excused-empty 'c["excused_rows"] = []'
attention_case='c["op"] = "attention"; c["subject"] = "textbook"; c["input"] = {"dtype": "fp16", "num_heads": 1, "num_kv_heads": 1, "head_size": 1, "seqlens_q": [1], "seqlens_k": [1], "causal": False, "softmax_scale_bits": SCALE, "mask": "", "q": "hex:003c", "k": "hex:003c", "v": "hex:003c"}'
variant scale-nan "SCALE = '0x7fc00000'; $attention_case"
variant scale-inf "SCALE = '0x7f800000'; $attention_case"
variant scale-one "SCALE = '0x3f800000'; $attention_case"
sed 's/"softmax", "subject"/"softmax", "op": "merge", "subject"/' "$D/valid.json" >"$D/dup-key.json"
sed 's/"format": "attncheck-case"/"format": "attncheck-case", "format": "attncheck-case"/' "$D/valid.json" >"$D/dup-key-same.json"
{ cat "$D/valid.json"; echo '{}'; } >"$D/trailing.json"
printf '{"format": "attncheck-case", "op": "soft\nmax"}' >"$D/raw-newline.json"
printf '{"format": "attncheck-case", "version": 1\000}' >"$D/nul.json"
: >"$D/empty.json"
# 300,000 nested arrays: a recursive copy or dump would overflow the stack.
python3 -c 'import sys; sys.stdout.write("[" * 300000 + "]" * 300000)' >"$D/deep.json"
python3 -c 'import sys; sys.stdout.write("{\"a\":" * 100000 + "1" + "}" * 100000)' >"$D/deep-objects.json"

# Scenarios.
cp "$ROOT/corpus/prefill/miss-in-batch.json" "$D/scenario.json"
scenario() {  # scenario NAME PYTHON-STATEMENT (on the dict s)
  python3 - "$D/scenario.json" "$D/$1.json" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
exec(sys.argv[3])
open(sys.argv[2], "w").write(json.dumps(s))
PY
}
scenario sc-no-requests 's["requests"] = []'
scenario sc-gqa 's["num_heads"] = 3; s["num_kv_heads"] = 2'
scenario sc-too-many 's["requests"] = [{"cached_prefix": 0, "prefix_hit": False, "new_tokens": 1}] * 4097'
# 1M cached keys in chunks of 1, and 4095 requests each running every context chunk: 4 billion
# subject calls from a 200 KB file.
scenario sc-huge-work 's["chunk_size"] = 1; s["requests"] = [{"cached_prefix": 1000000, "prefix_hit": True, "new_tokens": 1}] + [{"cached_prefix": 0, "prefix_hit": False, "new_tokens": 10}] * 4095'
scenario sc-long-suffix 's["chunk_size"] = 1; s["requests"] = [{"cached_prefix": 0, "prefix_hit": False, "new_tokens": 200000}]'
sed 's/"dtype": "fp16"/"dtype": "fp16", "dtype": "fp32"/' "$D/scenario.json" >"$D/sc-dup.json"
# Reports: one real run gives a valid report set to corrupt.
"$AC" check --backend host --no-plots --quiet --cases 2 --subject merge --property accuracy \
  --report-dir "$S/good" >/dev/null 2>&1 || echo "setup: the reference run failed"
python3 - "$S/good/report.json" "$D" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d = sys.argv[2]
text = json.dumps(r)
open(d + "/report-dup.json", "w").write(text.replace('"seed":', '"seed": 1, "seed":', 1))
bad = dict(r); bad["shard"] = {"index": 0, "count": "one"}
open(d + "/report-badtype.json", "w").write(json.dumps(bad))
huge = dict(r); huge["num_cases"] = 1e300
open(d + "/report-huge-float.json", "w").write(json.dumps(huge))
PY
mkdir -p "$S/mixed"
cp "$S/good/"* "$S/mixed/" 2>/dev/null
echo "# edited" >>"$S/mixed/report.md"  # report.md no longer matches the manifest
mkdir -p "$S/empty-dir" "$S/malformed-dir/sub"
cp "$D/odd-hex.json" "$D/lse-base-1.json" "$S/malformed-dir/"
cp "$D/trailing.json" "$S/malformed-dir/sub/"
mkdir -p "$S/report-json-dir/report.json"
mkfifo "$S/fifo.json"
truncate -s 2G "$S/sparse-2g.json"
ln -sf "$S/loop.json" "$S/loop.json"

# ---- the table --------------------------------------------------------------------------------
C=(check --backend host --no-plots --cases 1 --subject merge --property accuracy --report-dir "$S/r")
range='not in range|out of range|must be|Could not convert|failed|invalid|[Ee]xpected'

# Numeric options out of range, or not numbers.
row max-keys-1e9 2 'max-keys' "$AC" "${C[@]}" --max-keys 1000000000
row max-keys-int-max 2 'max-keys' "$AC" "${C[@]}" --max-keys 2147483647
row max-keys-overflow 2 'max-keys' "$AC" "${C[@]}" --max-keys 99999999999999999999
row max-keys-negative 2 'max-keys' "$AC" "${C[@]}" --max-keys -5
row max-keys-zero 2 'max-keys' "$AC" "${C[@]}" --max-keys 0
row cases-int-max 2 'cases' "$AC" "${C[@]}" --cases 2147483647
row cases-zero 2 'cases' "$AC" "${C[@]}" --cases 0
row cases-negative 2 'cases' "$AC" "${C[@]}" --cases -1
row cases-fraction 2 'cases' "$AC" "${C[@]}" --cases 1.5
row tiling-cases-1e9 2 'cases' "$AC" tiling --subject fused --backend host --no-plots --cases 1000000000
row tiling-cases-zero 2 'cases' "$AC" tiling --subject fused --backend host --no-plots --cases 0
row mutants-cases-zero 2 'cases' "$AC" mutants --backend host --cases 0
row mutants-mutant-only-comma 2 'mutant' "$AC" mutants --backend host --mutant , --cases 1 --report-dir "$S/mut"
row mutants-oracle-empty 2 'oracle' "$AC" mutants --backend host --oracle '' --cases 1 --report-dir "$S/mut"
row mutants-max-keys-huge 2 'max-keys' "$AC" mutants --backend host --max-keys 2147483647
row seed-minus-one 2 'seed' "$AC" "${C[@]}" --seed -1
row seed-leading-space 2 'seed' "$AC" "${C[@]}" --seed " 1"
row seed-2-pow-64 2 'seed' "$AC" "${C[@]}" --seed 18446744073709551616
row seed-hex 2 'seed' "$AC" "${C[@]}" --seed 0x10
row tiling-seed-minus-one 2 'seed' "$AC" tiling --subject fused --backend host --seed -1
row chunk-zero 2 'chunk' "$AC" prefill --scenario "$D/scenario.json" --backend host --chunk 0
row chunk-negative 2 'chunk' "$AC" prefill --scenario "$D/scenario.json" --backend host --chunk -3
row chunk-huge 2 'chunk' "$AC" prefill --scenario "$D/scenario.json" --backend host --chunk 99999999999
# A named subject that cannot run the scenario: the line says what it lacks first.
row prefill-attention-no-op 2 "attention subject 'quantize-fp8' has no attention operation" "$AC" prefill --scenario "$D/scenario.json" --backend host --attention quantize-fp8
row exact-base-3 2 'base' "$AC" exact lse --logits 1,2 --base 3

# Names and text options.
row subject-empty 2 'subject' "$AC" check --backend host --no-plots --cases 1 --subject '' --report-dir "$S/r"
row subject-only-comma 2 'subject' "$AC" check --backend host --no-plots --cases 1 --subject ',' --report-dir "$S/r"
row property-empty 2 'property' "$AC" check --backend host --no-plots --cases 1 --subject merge --property '' --report-dir "$S/r"
row replay-subject-empty 2 'subject' "$AC" replay "$D/valid.json" --backend host --subject ''
row report-dir-empty 2 'report-dir' "$AC" check --backend host --no-plots --cases 1 --subject merge --report-dir ''
row suite-unknown 2 "unknown suite" "$AC" check --backend host --no-plots --cases 1 --suite nightly --report-dir "$S/r"
row backend-empty 2 'backend' "$AC" list --backend ''
row shard-leading-space 2 'shard' "$AC" "${C[@]}" --shard " 1/3"
row shard-trailing-space 2 'shard' "$AC" "${C[@]}" --shard "1/3 "
row shard-space-after-slash 2 'shard' "$AC" "${C[@]}" --shard "1/ 3"
row shard-plus-sign 2 'shard' "$AC" "${C[@]}" --shard "+1/3"
row shard-negative 2 'shard' "$AC" "${C[@]}" --shard "-1/3"
row shard-zero-count 2 'shard' "$AC" "${C[@]}" --shard "0/0"
row shard-overflow 2 'shard' "$AC" "${C[@]}" --shard "0/99999999999"
row round-unknown-format 2 'fp8|format' "$AC" round --to fp8 1
# CLI11 reads -inf and -nan as options: the line says where such a value goes, and there it works.
row round-negative-inf 2 "value such as '-inf' goes after '--'" "$AC" round --to e5m2 -inf
row round-negative-inf-after-dashes 0 '0xfc' "$AC" round --to e5m2 -- -inf
row round-not-a-number 2 'abc|number|value' "$AC" round --to fp16 abc
row exact-empty-logit 2 'empty|logit' "$AC" exact lse --logits 1,,2
row no-subcommand 2 'subcommand' "$AC"
row unknown-subcommand 2 'frobnicate|subcommand|xtra' "$AC" frobnicate

# Files that are not what they claim.
row replay-dev-zero 2 'not a regular file' "$AC" replay /dev/zero --backend host --subject softmax-safe
row replay-fifo 2 'not a regular file' "$AC" replay "$S/fifo.json" --backend host --subject softmax-safe
row replay-sparse-2g 2 'larger than' "$AC" replay "$S/sparse-2g.json" --backend host --subject softmax-safe
row replay-symlink-loop 2 'loop.json' "$AC" replay "$S/loop.json" --backend host --subject softmax-safe
row replay-empty-file 2 'empty.json' "$AC" replay "$D/empty.json" --backend host --subject softmax-safe
row replay-no-such-file 2 'no such file' "$AC" replay "$S/nope.json" --backend host
row replay-newline-in-path 2 'no such file' "$AC" replay "$S/a
b.json" --backend host
row replay-empty-dir 2 'no readable case' "$AC" replay "$S/empty-dir" --backend host --subject softmax-safe
row replay-malformed-dir 2 'no readable case.*3 malformed' "$AC" replay "$S/malformed-dir" --backend host --subject softmax-safe
if [ "$(id -u)" -eq 0 ]; then
  skip replay-unreadable-subdir-chmod "running as root: chmod 000 does not stop root (the long-path row covers it)"
else
  mkdir -p "$S/locked/sub"
  cp "$D/valid.json" "$S/locked/"
  chmod 000 "$S/locked/sub"
  row replay-unreadable-subdir-chmod 2 'cannot list' "$AC" replay "$S/locked" --backend host
  chmod 755 "$S/locked/sub"
fi
# A case file that cannot be read whoever runs the test (its path is longer than PATH_MAX) next to
# a good one: skipped and named with the true reason, the good one replayed.
mkdir -p "$S/longpath"
cp "$D/valid.json" "$S/longpath/"
(cd "$S/longpath" && for i in $(seq 20); do d=$(printf 'd%.0s' $(seq 250)); mkdir "$d" && cd "$d" || exit 1; done &&
  cp "$D/valid.json" deep.json)
row replay-unreadable-file-in-dir 0 'skipped \(malformed\).*(too long)' "$AC" replay "$S/longpath" --backend host

# Case files: strictness and bounds.
row case-lse-base-1 2 'lse_base' "$AC" replay "$D/lse-base-1.json" --backend host
row case-empty-lse-sign-0 2 'empty_lse_sign' "$AC" replay "$D/empty-sign-0.json" --backend host
row case-seed-minus-1 2 'seed' "$AC" replay "$D/seed-minus-1.json" --backend host
row case-seed-space 2 'seed' "$AC" replay "$D/seed-space.json" --backend host
row case-seed-number 2 'seed' "$AC" replay "$D/seed-number.json" --backend host
row case-version-2 2 'version' "$AC" replay "$D/version-2.json" --backend host
row case-property-misspelt 2 'property "acuracy" is none of attncheck' "$AC" replay "$D/property-misspelt.json" --backend host
row case-property-needs-amax 2 'fp8_amax judges the maxima a case asks for' "$AC" replay "$D/property-needs-amax.json" --backend host
row case-fp8-descales-valid 0 'fused-fp8kv: pass \(fp8_descales\)' "$AC" replay "$D/fp8-descales-valid.json" --backend host
row case-fp8-descales-no-cache 2 'fp8_descales judges an FP8 KV cache.s descales, and the case has no kv_dtype' "$AC" replay "$D/fp8-descales-no-cache.json" --backend host
row case-fp8-descales-nan-v 2 "takes finite inputs only: V's element 0 \(0x7f\) is not finite" "$AC" replay "$D/fp8-descales-nan-v.json" --backend host
row case-fp8-descales-nan-q 2 "takes finite inputs only: Q's element 0 \(0x7e00\) is not finite" "$AC" replay "$D/fp8-descales-nan-q.json" --backend host
row case-fp8-descales-v-2p32 2 'doubled is past AC_MAX_DESCALE' "$AC" replay "$D/fp8-descales-v-2p32.json" --backend host
row case-fp8-descales-no-query 0 'pass \(fp8_descales; the call has no output row: it returned, and nothing was compared\)' "$AC" replay "$D/fp8-descales-no-query.json" --backend host
row case-merge-no-tokens 0 'merge-fp8: pass \(accuracy; the call has no output row' "$AC" replay "$D/merge-no-tokens.json" --backend host
row case-excused-not-a-kind 2 'excused_rows holds "fully visible row"' "$AC" replay "$D/excused-not-a-kind.json" --backend host
row case-excused-empty 2 'excused_rows must be a non-empty array' "$AC" replay "$D/excused-empty.json" --backend host
row case-version-float 2 'version' "$AC" replay "$D/version-float.json" --backend host
row case-odd-hex 2 'hex' "$AC" replay "$D/odd-hex.json" --backend host
row case-bad-base64 2 'base64' "$AC" replay "$D/bad-b64.json" --backend host
row case-size-mismatch 2 'elements' "$AC" replay "$D/too-few.json" --backend host
row case-mask-zero 2 'mask' "$AC" replay "$D/mask-zero.json" --backend host
row case-scale-bits-short 2 'softmax_scale_bits' "$AC" replay "$D/scale-bits-short.json" --backend host
row case-gqa-3-2 2 'num_kv_heads' "$AC" replay "$D/attention-gqa-3-2.json" --backend host
row case-duplicate-key 2 'duplicate key' "$AC" replay "$D/dup-key.json" --backend host
row case-duplicate-same-value 2 'duplicate key' "$AC" replay "$D/dup-key-same.json" --backend host
row case-trailing-garbage 2 'invalid JSON' "$AC" replay "$D/trailing.json" --backend host
row case-nul-byte 2 'invalid JSON' "$AC" replay "$D/nul.json" --backend host
row case-deep-arrays 2 'nesting' "$AC" replay "$D/deep.json" --backend host
row case-deep-objects 2 'nesting' "$AC" replay "$D/deep-objects.json" --backend host
row case-raw-newline 2 'invalid JSON' "$AC" replay "$D/raw-newline.json" --backend host
row case-escaped-newline-op 2 'unknown op' "$AC" replay "$D/newline-op.json" --backend host
row case-newline-subject 2 'not loaded' "$AC" replay "$D/newline-subject.json" --backend host
row case-unknown-subject 2 "no-such-kernel" "$AC" replay "$D/unknown-subject.json" --backend host
# A NaN or infinite scale is a malformed file (the exact reference has no answer), not a failure;
# the same case with scale 1 replays.
row case-scale-nan 2 'softmax_scale_bits "0x7fc00000" is not a finite float' "$AC" replay "$D/scale-nan.json" --backend host
row case-scale-inf 2 'softmax_scale_bits "0x7f800000" is not a finite float' "$AC" replay "$D/scale-inf.json" --backend host
row case-scale-one 0 'pass' "$AC" replay "$D/scale-one.json" --backend host
# 300-byte cases declaring 16M rows: refused, or bounded so the replay ends quickly.
row case-softmax-16m-rows '0|1|2' 'softmax|rows|pass' "$AC" replay "$D/softmax-16m.json" --backend host
row case-softmax-2e24-plus-1 2 'rows' "$AC" replay "$D/softmax-2e24.json" --backend host
row case-merge-16m-tokens 2 'prefix_lse' "$AC" replay "$D/merge-16m.json" --backend host
row case-attention-16m-heads '0|1|2' 'fused|too large|range' "$AC" replay "$D/attention-16m-heads.json" --backend host
row case-attention-16m-rows 2 'input.q' "$AC" replay "$D/attention-16m-rows.json" --backend host

# Prefill scenarios.
row prefill-miss-in-batch '0|1' 'attention subject' "$AC" prefill --scenario "$ROOT/corpus/prefill/miss-in-batch.json" --backend host
row prefill-dev-zero 2 'not a regular file' "$AC" prefill --scenario /dev/zero --backend host
row prefill-fifo 2 'not a regular file' "$AC" prefill --scenario "$S/fifo.json" --backend host
row prefill-deep 2 'nesting' "$AC" prefill --scenario "$D/deep.json" --backend host
row prefill-duplicate-key 2 'duplicate key' "$AC" prefill --scenario "$D/sc-dup.json" --backend host
row prefill-no-requests 2 'requests' "$AC" prefill --scenario "$D/sc-no-requests.json" --backend host
row prefill-gqa-3-2 2 'num_kv_heads' "$AC" prefill --scenario "$D/sc-gqa.json" --backend host
row prefill-4097-requests 2 'requests' "$AC" prefill --scenario "$D/sc-too-many.json" --backend host
row prefill-huge-work 2 'bound' "$AC" prefill --scenario "$D/sc-huge-work.json" --backend host
row prefill-long-suffix 2 'bound' "$AC" prefill --scenario "$D/sc-long-suffix.json" --backend host
row prefill-unknown-attention 2 'unknown subject' "$AC" prefill --scenario "$D/scenario.json" --backend host --attention nope
row prefill-merge-not-merge 2 'merge' "$AC" prefill --scenario "$D/scenario.json" --backend host --merge softmax-safe

# Baselines and report directories.
row baseline-deep 2 'nesting' "$AC" "${C[@]}" --baseline "$D/deep.json"
row baseline-duplicate-key 2 'duplicate key' "$AC" "${C[@]}" --baseline "$D/report-dup.json"
row baseline-wrong-type 2 'baseline' "$AC" "${C[@]}" --baseline "$D/report-badtype.json"
row baseline-huge-float 2 'baseline' "$AC" "${C[@]}" --baseline "$D/report-huge-float.json"
row baseline-is-directory 2 'is a directory' "$AC" "${C[@]}" --baseline "$S/good"
row baseline-dev-zero 2 'not a regular file' "$AC" "${C[@]}" --baseline /dev/zero
row baseline-fifo 2 'not a regular file' "$AC" "${C[@]}" --baseline "$S/fifo.json"
row baseline-mixed-set 2 'not one complete run' "$AC" "${C[@]}" --baseline "$S/mixed/report.json"
row baseline-a-case-file 2 'not an attncheck report' "$AC" "${C[@]}" --baseline "$D/valid.json"
row report-json-is-directory 2 'report.json exists and is not a regular file' \
  "$AC" check --backend host --no-plots --cases 1 --subject merge --property accuracy --report-dir "$S/report-json-dir"
row report-dir-is-file 2 'report directory' "$AC" check --backend host --no-plots --cases 1 --subject merge --report-dir "$D/valid.json"
row corpus-dir-is-file 2 'corpus directory .*valid.json' "$AC" "${C[@]}" --corpus-dir "$D/valid.json"
row report-dir-non-utf8 '0|2' 'attncheck' "$AC" "${C[@]:0:10}" --report-dir "$S/$(printf 'bad\xff\xfename')"
row corpus-dir-non-utf8 '0|2' 'attncheck' "$AC" "${C[@]}" --corpus-dir "$S/$(printf 'corpus\xff')"
mkdir -p "$S/$(printf 'cases\xff')"
cp "$D/valid.json" "$S/$(printf 'cases\xff')/"
row replay-non-utf8-dir '0|2' 'pass|attncheck' "$AC" replay "$S/$(printf 'cases\xff')" --backend host
row merge-same-shard-twice 2 'given twice' "$AC" report merge "$S/good" "$S/good" --out "$S/merged" --no-plots
row merge-report-json-dir 2 'is a directory' "$AC" report merge "$S/report-json-dir" --out "$S/merged" --no-plots
row merge-mixed-set 2 'not one complete run' "$AC" report merge "$S/mixed" --out "$S/merged" --no-plots
row merge-out-empty 2 'out' "$AC" report merge "$S/good" --out ''
# Reading from the directory it is about to replace: a merge onto one of its shards, and a baseline
# inside the run's report directory (a failing run would become the next run's baseline). Each
# refused before the directory is touched.
cp "$S/good/report.json" "$S/good-report-before.json"
row merge-out-is-a-shard 2 'holds the shard report' "$AC" report merge "$S/good" --out "$S/good/" --no-plots
row baseline-in-report-dir 2 'lies in --report-dir' "$AC" check --backend host --no-plots --cases 1 --subject merge \
  --property accuracy --report-dir "$S/good" --baseline "$S/good/report.json"
holds report-dir-kept 'report.json unchanged by the two refusals' cmp -s "$S/good/report.json" "$S/good-report-before.json"
row merge-out-non-utf8 '0|2' 'merged|attncheck' "$AC" report merge "$S/good" --out "$S/$(printf 'm\xff')" --no-plots

# Shards and baselines: the merged verdict is the single run's. Four pairs, three in shard 0 of 2
# and merge-th's in shard 1 (pair_shard); a baseline whose every max_ulp is -1 cannot be met
# (allowed max(-1 + 0.5, -1 x 1.25) = -0.5), so each pair regresses wherever it runs.
G=(check --backend host --no-plots --quiet --cases 2 --subject merge,merge-th,softmax-safe,softmax-online
  --property accuracy)
"$AC" "${G[@]}" --report-dir "$S/g-single" >/dev/null 2>&1 || echo "setup: the unsharded run failed"
for i in 0 1; do
  "$AC" "${G[@]}" --shard $i/2 --report-dir "$S/g-shard$i" >/dev/null 2>&1 || echo "setup: shard $i failed"
done
unmeetable() {  # unmeetable REPORT_JSON OUT: the report with every max_ulp -1
  python3 - "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for e in r["results"]:
    for s in e["stats"]:
        s["max_ulp"] = -1.0
open(sys.argv[2], "w").write(json.dumps(r))
PY
}
unmeetable "$S/g-single/report.json" "$D/unmeetable.json"
unmeetable "$S/g-shard0/report.json" "$D/unmeetable-shard0.json"
unmeetable "$S/g-shard1/report.json" "$D/unmeetable-shard1.json"
"$AC" "${G[@]}" --baseline "$D/unmeetable.json" --report-dir "$S/g-single-gated" >/dev/null 2>&1
# A shard against the unsharded baseline runs the same cases per pair: its ulp checks apply.
row shard-gated-by-whole-baseline 1 'REGRESSION merge-th \(host\) / accuracy [a-z0-9]+ [A-Z]+: max ulp -1 -> ' \
  "$AC" "${G[@]}" --shard 1/2 --baseline "$D/unmeetable.json" --report-dir "$S/g-gated1"
row shard-0-gated-by-whole-baseline 1 'REGRESSION softmax-safe \(host\) / accuracy fp32 Y: max ulp -1 -> ' \
  "$AC" "${G[@]}" --shard 0/2 --baseline "$D/unmeetable.json" --report-dir "$S/g-gated0"
row merge-keeps-regressions 1 'attncheck: fail: 2 shard reports merged \(shards 0 1 of 2\)' \
  "$AC" report merge "$S/g-gated0" "$S/g-gated1" --out "$S/g-merged" --no-plots
same_gate() {  # the merged comparison is the unsharded run's: same regressions, same verdict
  python3 - "$S/g-merged/report.json" "$S/g-single-gated/report.json" <<'PY'
import json, sys
m, s = (json.load(open(p)) for p in sys.argv[1:])
assert m["verdict"] == s["verdict"] == "fail", (m["verdict"], s["verdict"])
assert len(s["baseline"]["regressions"]) >= 4
assert sorted(m["baseline"]["regressions"]) == sorted(s["baseline"]["regressions"])
assert m["baseline"]["compared"] == s["baseline"]["compared"] == 4
assert m["baseline"]["id"] == s["baseline"]["id"]
PY
}
holds merge-keeps-regressions-all "merged report.json: the unsharded run's verdict, regressions, baseline id" same_gate
"$AC" "${G[@]}" --shard 0/2 --baseline "$D/unmeetable-shard0.json" --report-dir "$S/g-own0" >/dev/null 2>&1
"$AC" "${G[@]}" --shard 1/2 --baseline "$D/unmeetable-shard1.json" --report-dir "$S/g-own1" >/dev/null 2>&1
row merge-different-baselines 2 'different baselines \(shard 0: .*unmeetable-shard0.json .*; shard 1: .*unmeetable-shard1.json' \
  "$AC" report merge "$S/g-own0" "$S/g-own1" --out "$S/g-merged-own" --no-plots
row merge-gated-and-not 2 'shard 0 compared with a baseline, shard 1 with none' \
  "$AC" report merge "$S/g-gated0" "$S/g-shard1" --out "$S/g-merged-mixed" --no-plots
# A shard of a baseline holds only its share of the pairs: never the gate of another share.
row whole-run-gated-by-shard-baseline 2 'unmeetable-shard0.json: it holds shard 0 of 2 only, not the whole run' \
  "$AC" "${G[@]}" --baseline "$D/unmeetable-shard0.json" --report-dir "$S/g-r"
row shard-gated-by-other-count 2 'it holds shard 0 of 2 only, not the pairs of shard 0 of 3' \
  "$AC" "${G[@]}" --shard 0/3 --baseline "$D/unmeetable-shard0.json" --report-dir "$S/g-r"
# A missing shard: refused, or with --allow-partial a report whose verdict says so, never exit 0.
row merge-missing-shard 2 'report merge: shard 1 of 2 missing \(given: 0\)' \
  "$AC" report merge "$S/g-shard0" --out "$S/g-merged-part" --no-plots
row merge-allow-partial 1 'attncheck: partial: .*shard 1 of 2 missing' \
  "$AC" report merge "$S/g-shard0" --out "$S/g-merged-part" --no-plots --allow-partial
partial_report() {
  python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["verdict"] == "partial"' \
    "$S/g-merged-part/report.json" && grep -q '^## PARTIAL: shard 1 of 2 missing' "$S/g-merged-part/report.md" &&
    grep -q 'name="every_shard_merged"' "$S/g-merged-part/junit.xml"
}
holds merge-allow-partial-report 'verdict partial in report.json, report.md and junit.xml' partial_report

# Plugins and backends.
row plugin-not-a-library 2 'plugin' "$AC" list --plugin "$D/valid.json"
row plugin-directory 2 'plugin' "$AC" list --plugin "$S/empty-dir"
row plugin-dev-zero 2 'plugin' "$AC" list --plugin /dev/zero
if "$AC" list --backend cuda >/dev/null 2>&1; then
  skip mutants-cuda-without-gpu "a CUDA device is usable here"
  skip check-cuda-without-gpu "a CUDA device is usable here"
else
  row mutants-cuda-without-gpu 2 'cuda|CUDA|GPU' "$AC" mutants --backend cuda --cases 1 --report-dir "$S/mut"
  row check-cuda-without-gpu 2 'cuda|CUDA|GPU' "$AC" check --backend cuda --no-plots --cases 1 --report-dir "$S/r"
fi

# Workers attacking through the protocol (hostile_worker.py). Declarations outside the ranges of
# plugin_abi.h (AC_MAX_*) are refused at the handshake, before any work.
HW=(python3 "$ROOT/tests/hostile/hostile_worker.py")
W=(--no-plots --cases 5 --property accuracy --call-timeout 30)
row worker-max-splits-int-max 2 "subject 'hostile-splitkv': caps.max_splits 2147483647 is out of range 0..1024" \
  "$AC" check --worker "${HW[*]} max-splits" "${W[@]}" --report-dir "$S/w"
row worker-head-size-2e30 2 'caps.head_sizes\[0\] 1073741824 is out of range 1..1024' \
  "$AC" check --worker "${HW[*]} head-size-2e30" "${W[@]}" --report-dir "$S/w"
row worker-head-size-max-wrap 2 "'head_size_max' 4294967360 is out of range \(a 32-bit integer\)" \
  "$AC" check --worker "${HW[*]} head-size-max-wrap" "${W[@]}" --report-dir "$S/w"
row worker-head-size-negative-wrap 2 "'head_sizes' -4294967232 is out of range \(a 32-bit integer\)" \
  "$AC" check --worker "${HW[*]} head-size-neg-wrap" "${W[@]}" --report-dir "$S/w"
row worker-tile-huge 2 'tiling 0 \(64, 1048576\): Br or Bc is out of range 1..1024' \
  "$AC" check --worker "${HW[*]} tile-huge" "${W[@]}" --report-dir "$S/w"
row worker-name-300 2 'name is 300 characters long, more than 64' \
  "$AC" check --worker "${HW[*]} long-name" "${W[@]}" --report-dir "$S/w"
# A subject that refuses every case it declared never passes: failed, exit 1.
row worker-refuses-everything 1 'hostile-merge / accuracy: failed.*refused all [0-9]+ cases drawn from its declared capabilities: [0-9]+x "hostile-merge merge: not today"' \
  "$AC" check --worker "${HW[*]} refuse-all" "${W[@]}" --report-dir "$S/w-refuse"
holds worker-refuses-everything-sample 'one refused case kept in the corpus as a sample, its note saying so' \
  grep -lq 'refused_every_case: a sample of the refused cases' "$S"/w-refuse/corpus/merge-hostile-merge-*.json
# A worker truncating the shared arena cannot: the arena is sealed against shrinking. Its call
# fails in the worker, a transport failure (exit 3); the run goes on to the next property, the
# report is written, the case is kept in the corpus and no write-ahead or temporary file is left.
row worker-truncates-arena 3 'merge_sentinels: crashed.*Operation not permitted' \
  "$AC" check --worker "${HW[*]} truncate-arena" --no-plots --cases 5 --property accuracy,merge_sentinels \
  --call-timeout 30 --report-dir "$S/w-arena" --corpus-dir "$S/w-arena-corpus"
arena_files() {
  local cases
  cases=$(find "$S/w-arena-corpus" -name 'merge-hostile-merge-*.json' | wc -l)
  test -s "$S/w-arena/report.json" && [ "$cases" -eq 2 ] &&
    [ -z "$(find "$S/w-arena" "$S/w-arena-corpus" -name 'inflight-*' -o -name '.tmp*')" ]
}
holds worker-truncates-arena-files 'report.json written, 2 corpus cases kept, no inflight-* or .tmp* file' arena_files
# A worker that exits while a process it started holds its stdout: seen when it exits, not after
# --call-timeout (30 s) as a hang.
start=$(date +%s)
row worker-exit-stdout-held 3 'worker crashed: exited with status 0 during merge[^|]*still holds its stdout' \
  "$AC" check --worker "${HW[*]} exit-keep-stdout" "${W[@]}" --report-dir "$S/w-exit"
holds worker-exit-stdout-held-fast 'seen within 15 s (the call timeout is 30 s)' test $(($(date +%s) - start)) -lt 15
# A reply sent twice is refused by its sequence number, not read as the next call's reply.
row worker-reply-twice 3 'worker broke the protocol: its reply to merge [^|]*carries seq [0-9]+, expected [0-9]+' \
  "$AC" check --worker "${HW[*]} reply-twice" "${W[@]}" --report-dir "$S/w-twice"
# A worker's error text reaches report.md with its control bytes escaped.
row worker-error-control-bytes 3 'boom\\x1b\[2J' \
  "$AC" check --worker "${HW[*]} escape-error" "${W[@]}" --report-dir "$S/w-esc"
escaped_report() {
  grep -qF 'boom\x1b[2J' "$S/w-esc/report.md" && ! grep -q $'[\x1b\x07]' "$S/w-esc/report.md"
}
holds worker-error-control-bytes-report 'report.md holds boom\x1b[2J and no raw ESC or BEL byte' escaped_report

echo "hostile user: $((n_ok + n_fail + n_skip)) rows: $n_ok ok, $n_fail failed, $n_skip skipped"
rm -rf "$S/longpath" "$S/sparse-2g.json" 2>/dev/null
if [ "$n_fail" -ne 0 ]; then
  echo "failed rows: ${failed[*]}"
  exit 1
fi
