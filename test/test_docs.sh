#!/usr/bin/env bash
# test_docs.sh: the docs stay true to the tree and to the programs' figures.
#  1. Every deterministic figure of the fast groups of dev/doc_figures.py (token counts of dev/data/addition.py,
#     the simulator's bubble fractions, the allocator's bytes per layer and per parameter of small models) is
#     produced by running the programs and must stand in the docs/ page (docs/README.md, docs/model.md,
#     docs/precision.md, ...) or dev/data/README.md where the docs quote it (the table row or line it belongs
#     to). A change that moves a figure fails here until the docs follow. The GPT-2 124M figures take minutes: `python3 dev/doc_figures.py --slow` checks them.
#  2. The reading guide names every file of the library: each llm/<folder>/<file> path appears in docs/README.md.
#  3. Every llm/, dev/, test/, scripts/ or docs/ path that docs/*.md names exists (a renamed file is followed).
#  4. No doc points a reader at ../shared/ (design notes a clone does not have): README.md, train_gpt.cu,
#     dev/data/README.md and docs/ point at docs/architecture.md and docs/formats.md, which exist.
#  5. The flags page cannot rot: every long flag of the FLAGS table in llm/train/args.h appears in docs/flags.md,
#     and every --flag that docs/flags.md names is a row of that table (or a name the parser compares by itself:
#     strcmp(arg, "--help")). At least 50 rows must be found, so that a table the sed no longer finds fails.
#  6. The links resolve: the target of every relative Markdown link (text](target) and image) in README.md and
#     docs/*.md exists (a link in docs/ is relative to docs/), and every docs/<page>.md that README.md names is
#     a file; at least 10 links must be found, so that a pattern that no longer matches fails.
# Needs ./train_gpt_cpu, build/train_gpt_cpu_bf16, build/train_gpt_cpu_fp16, build/train_gpt_emu_bf16 and
# build/test_schedule_cpu (make test-build). About 20-40 s on 2 cores (checks 2-6 take well under a second).
# Ends with "test_docs: N passed, M failed"; exit status 1 on any failure.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
claim() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }  # claim WHAT CMD...

# 1. the figures (doc_figures.py prints its own ok / FAIL lines; they are counted here)
out=$(python3 dev/doc_figures.py 2>&1); rc=$?
echo "$out" | grep -v '^doc_figures:'
p=$(echo "$out" | grep -c '^ok   ')
f=$(echo "$out" | grep -c '^FAIL')
pass=$((pass + p)); fail=$((fail + f))
# a crash, or a group that produced no figure, must not pass as "no figure failed"
claim "doc_figures.py ran to its end (exit $rc) and checked at least 20 figures (got $((p + f)))" \
    bash -c "[ $rc -eq 0 -o $f -gt 0 ] && echo \"\$1\" | grep -q '^doc_figures: ' && [ $((p + f)) -ge 20 ]" _ "$out"

# 2. every file of llm/ named in the reading guide
missing=""
for path in llm/*/*; do
    grep -qF "$path" docs/README.md || missing="$missing $path"
done
n=$(ls llm/*/* | wc -l)
claim "docs/README.md names each of the $n files under llm/${missing:+ (not named:$missing)}" test -z "$missing"

# 3. the paths the docs name exist
stale=""
for doc in docs/*.md; do
    for path in $(grep -oE '(llm|dev|test|scripts|docs)/[A-Za-z0-9_./-]*[A-Za-z0-9_]' "$doc" | sort -u); do
        case "$path" in *'*'*) continue ;; esac
        [ -e "$path" ] || stale="$stale $doc:$path"
    done
done
claim "every path named in docs/*.md exists${stale:+ (missing:$stale)}" test -z "$stale"

# 4. no pointer to ../shared/, and the pages pointed at exist
shared=$(grep -lE '\.\./shared/|shared/DESIGN\.md|shared/FORMATS\.md' README.md train_gpt.cu dev/data/README.md docs/*.md 2>/dev/null | tr '\n' ' ')
claim "README.md, train_gpt.cu, dev/data/README.md and docs/ point at no ../shared/ page${shared:+ (found in $shared)}" test -z "$shared"
claim "docs/architecture.md and docs/formats.md exist and README.md points at both" \
    bash -c 'test -s docs/architecture.md && test -s docs/formats.md && grep -q docs/architecture.md README.md && grep -q docs/formats.md README.md'

# 5. the flags page against the flags table, both ways
table=$(sed -n '/^static const FlagDoc FLAGS\[\] = {/,/^};/p' llm/train/args.h | grep -oE '^ *\{"--[a-z0-9-]+"' | grep -oE -- '--[a-z0-9-]+' | sort -u)
page=$(grep -oE -- '--[a-z][a-z0-9-]*' docs/flags.md | sort -u)
undocumented=""
for f in $table; do echo "$page" | grep -qxF -- "$f" || undocumented="$undocumented $f"; done
unknown=""
for f in $page; do
    echo "$table" | grep -qxF -- "$f" || grep -qF -- "strcmp(arg, \"$f\")" llm/train/args.h || unknown="$unknown $f"
done
claim "docs/flags.md names each of the $(echo "$table" | wc -w) flags of args.h's FLAGS table${undocumented:+ (not named:$undocumented)}" \
    bash -c '[ "$1" -ge 50 ] && [ -z "$2" ]' _ "$(echo "$table" | wc -w)" "$undocumented"
claim "every flag docs/flags.md names is one args.h parses${unknown:+ (no such flag:$unknown)}" test -z "$unknown"

# 6. the links resolve (targets with a scheme, and #anchors within a page, are not files here)
broken=""
for doc in README.md docs/*.md; do
    dir=$(dirname "$doc")
    for target in $(grep -oE '\]\([^) ]+\)' "$doc" | sed -E 's/^\]\((.*)\)$/\1/' | sort -u); do
        case "$target" in *://*|mailto:*|'#'*) continue ;; esac
        target=${target%%#*}
        [ -e "$dir/$target" ] || broken="$broken $doc:$target"
    done
done
for page in $(grep -oE 'docs/[A-Za-z0-9_.-]+\.md' README.md | sort -u); do
    [ -f "$page" ] || broken="$broken README.md:$page"
done
broken=$(echo $broken | tr ' ' '\n' | sort -u | tr '\n' ' '); broken=${broken% }
nlinks=$(cat README.md docs/*.md | grep -oE '\]\([^) ]+\)' | wc -l)
claim "every relative link of README.md and docs/*.md ($nlinks links) and every docs/ page README.md names exists${broken:+ (missing: $broken)}" \
    bash -c '[ "$1" -ge 10 ] && [ -z "$2" ]' _ "$nlinks" "$broken"

echo "test_docs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
