#!/bin/sh
# tests/docs_figures.sh [README] - measured figures live in docs/BENCHMARKS.md
# only (issue 33).  Two rules, each line a case:
#  1. A line of README.md outside ``` blocks (transcripts are examples, not
#     quotes) that holds a figure "<number> ms", "<number> s", "<number>x" or
#     "<number>×" must point to BENCHMARKS.md on that same line.
#  2. Every link "BENCHMARKS.md#NAME" in README.md and docs/*.md, and every
#     "](#NAME)" inside docs/BENCHMARKS.md, names an anchor <a id="NAME">
#     that docs/BENCHMARKS.md holds.
# Then it checks itself: a copy of README.md with one unsourced figure must
# fail rule 1.  Prints "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
README=${1:-README.md}
BENCH=docs/BENCHMARKS.md
LC_ALL=C
export LC_ALL
pass=0 fail=0

# figure_lines FILE: "LINENO:TEXT" of each figure line outside ``` blocks
figure_lines() {
  awk '/^[ \t]*```/ { inblock = !inblock; next } !inblock { print NR ":" $0 }' "$1" |
    grep -E "^[0-9]+:.*$(printf '[0-9] ?(ms|s|x|\303\227)')([^A-Za-z0-9_]|\$)"
}

# rule 1 on FILE: prints offending lines, returns how many passed/failed
rule1() {
  p=0 f=0
  tmp=$(figure_lines "$1")
  if [ -n "$tmp" ]; then
    while IFS= read -r l; do
      case $l in
        *BENCHMARKS.md*) p=$((p + 1)) ;;
        *) f=$((f + 1)); echo "FAIL: $1:${l%%:*}: a figure without BENCHMARKS.md: ${l#*:}" ;;
      esac
    done <<END
$tmp
END
  fi
  r1p=$p r1f=$f
}

rule1 "$README"
pass=$((pass + r1p)) fail=$((fail + r1f))
[ "$r1p" -gt 0 ] || { fail=$((fail + 1)); echo "FAIL: $README quotes no figure from BENCHMARKS.md (the rule would test nothing)"; }

# rule 2: every BENCHMARKS.md#anchor resolves
for name in $( { grep -oh 'BENCHMARKS\.md#[A-Za-z0-9_-]*' README.md docs/*.md; grep -o '](#[A-Za-z0-9_-]*)' "$BENCH"; } |
                sed 's/.*#//; s/)$//' | sort -u); do
  if grep -q "<a id=\"$name\"></a>" "$BENCH"; then pass=$((pass + 1))
  else fail=$((fail + 1)); echo "FAIL: BENCHMARKS.md#$name: no <a id=\"$name\"> in $BENCH"; fi
done
grep -q '^## Headline figures$' "$BENCH" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL: $BENCH has no '## Headline figures' index"; }

# the rule can fail: an unsourced figure added to a copy of README.md
T=$(mktemp /tmp/lumen-docs-figures.XXXXXX)
trap 'rm -f "$T"' EXIT
{ cat "$README"; echo; echo "A 20-step image takes 1.31 s (unsourced)."; } > "$T"
rule1 "$T" >/dev/null
if [ "$r1f" = 1 ]; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: a copy with an unsourced '1.31 s' line gave $r1f failures, not 1"; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
