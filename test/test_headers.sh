#!/usr/bin/env bash
# test_headers.sh: the library's headers are real headers (../shared/DESIGN.md, "Layout"): each compiles
# alone, the includes of llm/ form no cycle and run downhill, and no file under llm/ names dev/.
#
#   1. every llm/*/*.h and llm/*/*.cuh, included first and alone in a translation unit, passes
#      `g++ -fsyntax-only` in three builds, with the Makefile's own flags: the CPU build with MPI
#      (CPU_FLAGS_FP32), the CPU build without MPI (NO_MPI=1: -DLLM_NO_MPI) and the emulated CUDA
#      build (EMU_FLAGS: -DLLM_EMU -Idev/emu, NCCL's code against dev/emu/nccl_emu.h). A header that
#      leans on what an earlier include happened to bring fails here. The headers of one transport
#      (TRANSPORT_ONLY below: llm/comm/watchdog_mpi.h needs MPI, ...) are compiled in the builds that
#      have it, and in the others must stop first on a transport's #error (so that one included by
#      mistake where its transport is missing says so).
#      The CPU and no-MPI builds' flags differ only in preprocessor options (-D, -I): a header whose includes
#      (followed through the repository) name neither LLM_NO_MPI nor an MPI header gives both builds the same
#      translation unit token for token (test/same_tu.py says which, and why that suffices): it is compiled
#      once, in the CPU build, and that result stands for both (the no-MPI line says how many); every other
#      header is compiled in each build.
#   2. the include graph of llm/ (the #include "..." lines, resolved relative to the including file)
#      has no cycle; the cycle is printed if there is one.
#   3. no #include line under llm/ names dev/ (the emulated build reaches dev/emu/ through -Idev/emu).
#   4. the includes of llm/ run downhill: a file includes files of its own folder or of a folder lower in
#      ORDER below (docs/architecture.md, "The tree"); each include that climbs is printed as
#      llm/a/f.h:LINE includes "../b/g.h" (b is above a), and a folder of llm/ missing from ORDER fails.
#   5. the model never branches on the layout (docs/architecture.md, "The process mesh"): no code line under
#      llm/model/ (comments and strings left out) compares a layout size (a group's `.size`, an `<axis>_size`)
#      with anything, or names the mesh. What differs by layout lives below it, in the Linear spec and in
#      llm/sharded/'s operators, which are the identity on a group of one. Each offending line is printed.
# One line per check; about a minute on 2 cores (the compiles run two at a time).
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
LOG=build/test_logs/headers
mkdir -p "$LOG"
CXX=${CXX:-g++}

# the flags of each build, from the Makefile itself
flags() { make -s --no-print-directory "$@" --eval='llm-print-flags: ; @echo $(FLAGS_OF_BUILD)' llm-print-flags; }
CPU_FLAGS=$(flags 'FLAGS_OF_BUILD=$(CPU_FLAGS_FP32)')
NOMPI_FLAGS=$(flags NO_MPI=1 'FLAGS_OF_BUILD=$(CPU_FLAGS_FP32)')
EMU_FLAGS=$(flags 'FLAGS_OF_BUILD=$(EMU_FLAGS)')
[[ "$CPU_FLAGS" == *-std=c++17* && "$EMU_FLAGS" == *-DLLM_EMU* && "$NOMPI_FLAGS" == *-DLLM_NO_MPI* ]] \
    || { echo "FAIL could not read the builds' flags from the Makefile"; echo "headers: 0 passed, 1 failed"; exit 1; }
if [[ "$CPU_FLAGS" == *-DLLM_NO_MPI* ]]; then
    echo "note: no MPI found: the MPI build is the NO_MPI build here"
fi

# headers of one transport: the builds that have it (cpu = CPU with MPI, emu = emulated CUDA with NCCL
# over MPI, nompi = without MPI)
declare -A TRANSPORT_ONLY=(
    [llm/comm/watchdog_mpi.h]="cpu emu"
    [llm/comm/watchdog_nccl.h]="emu"
    [llm/comm/comm_mpi16.h]="cpu"
    [llm/comm/comm_engine_nccl.h]="emu"
    [llm/comm/comm_engine_mpi.h]="cpu"
    [llm/comm/comm_engine_none.h]="nompi"
)

# HEADERS="llm/comm/*.h" checks only those (while working on them); the graph is always the whole of llm/
headers=$(ls ${HEADERS:-llm/*/*.h llm/*/*.cuh} | sort)

# 1. each header alone, in each build: a translation unit whose first line includes it
compile_one() {  # BUILD HEADER: writes $LOG/BUILD/<header path with / as _>.{rc,err}
    local build=$1 h=$2 f out
    case $build in cpu) f=$CPU_FLAGS ;; nompi) f=$NOMPI_FLAGS ;; emu) f=$EMU_FLAGS ;; esac
    out=$LOG/$build/$(echo "$h" | tr / _)
    # shellcheck disable=SC2086
    printf '#include "%s"\n' "$h" | $CXX $f -I. -fsyntax-only -x c++ - > "$out.err" 2>&1
    echo $? > "$out.rc"
}
export -f compile_one
export LOG CXX CPU_FLAGS NOMPI_FLAGS EMU_FLAGS
t0=$SECONDS
# the headers whose no-MPI translation unit is the CPU build's, one per line (the transports' own headers left out)
same_tu=$(python3 test/same_tu.py "$CPU_FLAGS" "$NOMPI_FLAGS" $headers | while read -r h; do
    [ -z "${TRANSPORT_ONLY[$h]:-}" ] && echo "$h"; done)
for b in cpu nompi emu; do
    rm -rf "${LOG:?}/$b"; mkdir -p "$LOG/$b"
    for h in $headers; do
        [ "$b" = nompi ] && grep -qxF "$h" <<< "$same_tu" && continue
        echo "$b $h"
    done
done | xargs -P "${JOBS:-2}" -n 2 bash -c 'compile_one "$0" "$1"'
# those headers' no-MPI result: the CPU build's
nsame=0
for h in $same_tu; do
    out=$(echo "$h" | tr / _)
    cp "$LOG/cpu/$out.rc" "$LOG/cpu/$out.err" "$LOG/nompi/" && nsame=$((nsame + 1))
done
for b in cpu nompi emu; do
    nok=0
    for h in $headers; do
        out=$LOG/$b/$(echo "$h" | tr / _)
        rc=$(cat "$out.rc" 2>/dev/null || echo 99)
        only=${TRANSPORT_ONLY[$h]:-}
        if [ -n "$only" ] && [[ " $only " != *" $b "* ]]; then
            # not this build's transport: its first error must be the #error of a transport's file
            if [ "$rc" -ne 0 ] && grep -m1 'error' "$out.err" | grep -q '^llm/[a-z_0-9/]*\.h:[0-9]*:[0-9]*: error: #error'; then
                nok=$((nok+1))
            else bad "$b build: $h is for the builds '$only' only but its first error here is not a transport's #error: $(grep -m1 error "$out.err")"; fi
        elif [ "$rc" -eq 0 ]; then
            nok=$((nok+1))
        else
            bad "$b build: $h does not compile alone: $(grep -m1 'error' "$out.err") (see $out.err)"
        fi
    done
    note=""
    [ "$b" = nompi ] && note="; $nsame of them the CPU build's translation unit token for token (test/same_tu.py), compiled there"
    [ "$nok" -eq "$(echo "$headers" | wc -l)" ] && ok "$b build: each of the $nok headers of llm/ compiles alone (g++ -fsyntax-only, the Makefile's flags$note)"
done
echo "(compiles: $((SECONDS - t0)) s)"

# 2, 3 and 4: the include graph
# the folders of llm/, lowest first: a file may include its own folder's files and those of the folders
# before its own (the same order as docs/architecture.md's rules paragraph)
ORDER="core comm ops sharded precision model parallel train faults ckpt"
graph=$(ORDER="$ORDER" python3 - $(ls llm/*/*.h llm/*/*.cuh) <<'EOF'
import os, re, sys
files = sys.argv[1:]
order = os.environ["ORDER"].split()
level = {d: i for i, d in enumerate(order)}
edges, devs, climbs = {}, [], []
for d in sorted({f.split("/")[1] for f in files} - set(level)):
    climbs.append(f"llm/{d}/ is not in the order of the folders ({' '.join(order)})")
for f in files:
    edges[f] = []
    for n, line in enumerate(open(f, encoding="utf-8"), 1):
        m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
        if not m:
            continue
        inc = m.group(1)
        if re.search(r'(^|/)dev/', inc):
            devs.append(f"{f}:{n} includes \"{inc}\"")
        target = os.path.normpath(os.path.join(os.path.dirname(f), inc))
        if target in edges or os.path.exists(target) and target.startswith("llm/"):
            edges[f].append(target)
            a, b = f.split("/")[1], target.split("/")[1]
            if a in level and b in level and level[b] > level[a]:
                climbs.append(f"{f}:{n} includes \"{inc}\" ({b} is above {a})")
nedges = sum(len(v) for v in edges.values())
# a depth-first search; a grey node reached again closes a cycle
state, stack, cycle = {}, [], None
def visit(u):
    global cycle
    state[u] = 1; stack.append(u)
    for v in edges.get(u, []):
        if cycle: return
        if state.get(v) == 1:
            cycle = stack[stack.index(v):] + [v]; return
        if not state.get(v): visit(v)
    stack.pop(); state[u] = 2
for f in files:
    if not state.get(f) and not cycle: visit(f)
print(f"EDGES {len(files)} {nedges}")
print("CYCLE " + (" -> ".join(cycle) if cycle else ""))
for d in devs: print("DEV " + d)
for c in climbs: print("CLIMB " + c)
EOF
)
read -r _ nfiles nedges <<< "$(grep '^EDGES' <<< "$graph")"
cycle=$(sed -n 's/^CYCLE //p' <<< "$graph")
if [ -z "$nedges" ]; then bad "include graph: could not compute it"
elif [ -z "$cycle" ]; then ok "include graph of llm/: $nfiles files, $nedges includes, no cycle"
else bad "include graph of llm/ has a cycle: $cycle"; fi
devs=$(grep '^DEV' <<< "$graph" | sed 's/^DEV //')
if [ -z "$devs" ]; then ok "no #include under llm/ names dev/ (the emulator comes through -Idev/emu)"
else bad "files under llm/ name dev/: $(echo $devs)"; fi
climbs=$(grep '^CLIMB' <<< "$graph" | sed 's/^CLIMB //')
if [ -z "$nedges" ]; then :
elif [ -z "$climbs" ]; then ok "the includes of llm/ run downhill (lowest first: ${ORDER// / < })"
else while IFS= read -r l; do bad "$l"; done <<< "$climbs"; fi

# 5. no layout branch in the model
branches=$(python3 - llm/model/*.h <<'EOF'
import re, sys
code = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', re.S)
OP = r'(?:==|!=|<=|>=|\s<\s|\s>\s)'
SIZE = r'(?:\b\w+(?:\.|->)(?:\w+(?:\.|->))*size\b|\b(?:dp|pp|cp|tp|ep|grad)_size\b)'
rules = [re.compile(SIZE + r'\s*' + OP), re.compile(OP + r'\s*' + SIZE), re.compile(r'\bmesh\b|\bMesh\b')]
for f in sys.argv[1:]:
    text = open(f, encoding="utf-8").read()
    blank = code.sub(lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text)  # comments and strings out, lines kept
    lines = text.split('\n')
    for n, line in enumerate(blank.split('\n'), 1):
        if any(r.search(line) for r in rules):
            print(f"{f}:{n}: {lines[n - 1].strip()}")
EOF
)
if [ -z "$branches" ]; then ok "no file under llm/model/ compares a layout size or names the mesh (the model never branches on the layout)"
else while IFS= read -r l; do bad "a layout branch in the model: $l"; done <<< "$branches"; fi

echo "headers: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
