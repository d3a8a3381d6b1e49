#!/usr/bin/env bash
# test_deps.sh: scripts/deps.sh (what `make train` / `make test` need, installed before anything is built)
# and the Makefile's use of it, with stub dpkg-query, apt-get, sudo, id, python3 (and pkg-config, g++, ...)
# in a PATH of their own that record every call; the machine's own packages are never touched.
#   - everything present: nothing installed, no output, exit 0;
#   - root, OpenBLAS missing: apt-get update, then apt-get install of exactly libopenblas-openmp-dev; the
#     output says what and why; a second run installs nothing;
#   - a package removed with its configuration files left ("deinstall ok config-files", which `dpkg -s`
#     reports as present) counts as missing;
#   - not root, sudo without a password: every apt-get call through `sudo -n`;
#   - not root, no sudo: exactly one line naming the missing packages and the command to run, exit 1,
#     no apt-get call;
#   - not Debian (no dpkg-query, no apt-get): one line naming what is missing, exit 1, nothing installed;
#   - Python (make test): Debian's python3-numpy by apt for Debian's python, ml_dtypes (not in Debian 12)
#     by pip into the project's venv (created with --system-site-packages, python3-venv installed first);
#     a python that does not read Debian's packages (pyenv, conda) gets numpy by pip into the venv, no apt;
#     not root and no sudo but only Python packages missing: into the venv without root, and a second run asks
#     the venv's python (which alone sees what pip put there) and installs nothing;
#   - --check: one line per package with what it is for, exit 1 when one is missing, nothing installed;
#   - the Makefile: `make train` with a failing deps script stops before any compiler runs; with a deps
#     script that installs MPI, the compiler gets MPI's flags (the second make reads the Makefile anew),
#     the stamp is written and a second `make train` does not run the deps script again; `make test` with
#     a failing deps script builds and runs nothing.
# Runtime: ~2 s of CPU (~10 s wall on a busy 2-core machine: mostly make and process starts).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
DEPS=${DEPS:-$repo/scripts/deps.sh}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

# --- the stubs: each appends "name args" to $STATE/calls; state in $STATE (missing packages and modules) ---
stub=$tmp/stub; tools=$tmp/tools; mkdir -p "$stub" "$tools"
for t in dirname env cat true grep mv cp mkdir; do ln -s "$(type -P $t)" "$tools/$t"; done   # (what deps.sh needs besides the stubs)
mk() { printf '#!/bin/bash\n%s\n' "$2" > "$stub/$1"; chmod +x "$stub/$1"; }
mk id 'echo "id $*" >> "$STATE/calls"; [ "$1" = -u ] && echo "$STUB_UID"'
# dpkg-query -W -f=${Status} PKG: installed unless listed in $STATE/missing (config-only: in $STATE/config)
mk dpkg-query 'echo "dpkg-query $*" >> "$STATE/calls"; p=${@: -1}
if grep -qx "$p" "$STATE/config" 2>/dev/null; then printf "deinstall ok config-files"; exit 0; fi
if grep -qx "$p" "$STATE/missing" 2>/dev/null; then echo "dpkg-query: no packages found matching $p" >&2; exit 1; fi
printf "install ok installed"'
# apt-get install PKGS: they are installed from then on (python3-X also makes module X importable)
mk apt-get 'echo "apt-get $*" >> "$STATE/calls"; echo "DEBIAN_FRONTEND=${DEBIAN_FRONTEND:-}" >> "$STATE/calls"
if [ "$1" = install ]; then for p in "$@"; do
  grep -vx "$p" "$STATE/missing" > "$STATE/m" 2>/dev/null; mv "$STATE/m" "$STATE/missing"
  grep -vx "$p" "$STATE/config" > "$STATE/m" 2>/dev/null; mv "$STATE/m" "$STATE/config"
  case $p in python3-*) grep -vx "${p#python3-}" "$STATE/pymissing" > "$STATE/m" 2>/dev/null; mv "$STATE/m" "$STATE/pymissing";; esac
done; fi; exit 0'
# sudo -n CMD: works when $STUB_SUDO=ok; VAR=value arguments go into the environment
mk sudo 'echo "sudo $*" >> "$STATE/calls"; [ "${STUB_SUDO:-no}" = ok ] || { echo "sudo: a password is required" >&2; exit 1; }
[ "$1" = -n ] || exit 1; shift; while [[ "$1" == *=* ]]; do export "$1"; shift; done; exec "$@"'
# python3: -c "import X" fails for X in $STATE/pymissing, unless this is the venv's python (a copy of the stub under
# .../venv/bin/) and pip installed X there ($STATE/venv_has): what pip puts in the venv only the venv's python sees;
# the dist-packages question answers $STUB_DEBPY; -m venv DIR makes DIR/bin/python3 (this stub again)
mk python3 'echo "$0 $*" >> "$STATE/calls"
if [ "$1" = -c ]; then case $2 in
  *dist-packages*) [ "${STUB_DEBPY:-1}" = 1 ]; exit;;
  "import "*) grep -qx "${2#import }" "$STATE/pymissing" 2>/dev/null || exit 0
              case $0 in */venv/bin/python3) grep -qx "${2#import }" "$STATE/venv_has" 2>/dev/null; exit;; esac; exit 1;;
  *) exit 0;; esac; fi
if [ "$1 $2" = "-m venv" ]; then d=${@: -1}; mkdir -p "$d/bin" && cp "$0" "$d/bin/python3"; exit; fi
if [ "$1 $2 $3" = "-m pip install" ]; then printf "%s\\n" "$@" >> "$STATE/venv_has"; exit 0; fi
exit 1'
for c in g++ make bc mpicxx mpirun; do mk $c 'exit 0'; done
mk pkg-config 'echo "pkg-config $*" >> "$STATE/calls"; exit 0'   # (--exists openblas: yes)

# run NAME GOAL UID SUDO MISSING PYMISSING [ARGS...]: deps.sh in a fresh state; output in $tmp/NAME.out, calls in
# $tmp/NAME/calls, status in rc. NOTDEB=1: dpkg-query and apt-get removed from PATH; NOSTUB="a b": stubs left out
run() {
    local name=$1 goal=$2 uid=$3 sudo=$4 missing=$5 pymissing=$6; shift 6
    export STATE=$tmp/$name; mkdir -p "$STATE"; : > "$STATE/calls"
    printf '%s\n' $missing > "$STATE/missing"; printf '%s\n' $pymissing > "$STATE/pymissing"
    printf '%s\n' ${CONFIG:-} > "$STATE/config"
    local p=$tmp/path_$name; mkdir -p "$p"
    for f in "$stub"/*; do
        local b; b=$(basename "$f")
        [ "${NOTDEB:-0}" = 1 ] && { [ "$b" = dpkg-query ] || [ "$b" = apt-get ]; } && continue
        [[ " ${NOSTUB:-} " == *" $b "* ]] && continue
        ln -sf "$f" "$p/$b"
    done
    PATH="$p:$tools" STUB_UID=$uid STUB_SUDO=$sudo DEPS_VENV="$STATE/venv" PYTHON=python3 \
        /bin/bash "$DEPS" "$@" "$goal" > "$tmp/$name.out" 2>&1
    rc=$?
}
calls() { grep -E "^$2 " "$tmp/$1/calls"; }
out() { tr '\n' '|' < "$tmp/$1.out"; }

# (a) everything present: nothing installed, nothing printed
run present test 0 no "" ""
if [ $rc -eq 0 ] && [ ! -s "$tmp/present.out" ] && ! calls present 'apt-get|sudo' > /dev/null && [ ! -e "$tmp/present/venv" ]; then
    ok "everything present (make test, root): exit 0, no output, no apt-get or sudo call, no venv"
else bad "everything present: exit $rc, output: $(out present), calls: $(calls present 'apt-get|sudo' | tr '\n' '|')"; fi

# (b) root, OpenBLAS missing: apt-get update, then install of exactly that package, non-interactive
run root train 0 no "libopenblas-openmp-dev" ""
a=$(calls root apt-get | tr '\n' '|')
if [ $rc -eq 0 ] && [ "$a" = "apt-get update -qq|apt-get install -y -qq --no-install-recommends libopenblas-openmp-dev|" ] &&
   [ "$(grep -c 'DEBIAN_FRONTEND=noninteractive' "$tmp/root/calls")" = 2 ] && ! calls root sudo > /dev/null &&
   grep -q 'libopenblas-openmp-dev (OpenBLAS' "$tmp/root.out"; then
    ok "root, OpenBLAS missing: apt-get update then install libopenblas-openmp-dev (noninteractive), says why: $(grep -m1 OpenBLAS "$tmp/root.out" | sed 's/^ *//')"
else bad "root, OpenBLAS missing: exit $rc, apt-get calls: $a output: $(out root)"; fi
# the same state, run again: nothing left to install
: > "$tmp/root/calls"
PATH="$tmp/path_root:$tools" STUB_UID=0 STUB_SUDO=no DEPS_VENV="$tmp/root/venv" PYTHON=python3 /bin/bash "$DEPS" train > "$tmp/root2.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && ! calls root apt-get > /dev/null && [ ! -s "$tmp/root2.out" ]; then ok "root, after the install: a second run installs nothing"
else bad "root, second run: exit $rc, calls: $(calls root apt-get | tr '\n' '|') output: $(out root2)"; fi

# a package removed with its configuration files left counts as missing (dpkg -s would answer 0 for it)
CONFIG="libopenblas-openmp-dev" run config train 0 no "" ""
if [ $rc -eq 0 ] && calls config apt-get | grep -q 'install .*libopenblas-openmp-dev'; then
    ok "removed with configuration files left (deinstall ok config-files): reinstalled"
else bad "removed with configuration files left: exit $rc, apt-get: $(calls config apt-get | tr '\n' '|')"; fi

# (c) not root, sudo works without a password: every apt-get call through sudo -n
run sudo train 1000 ok "libopenblas-openmp-dev pkg-config" ""
s=$(calls sudo sudo | tr '\n' '|')
if [ $rc -eq 0 ] && [ "$s" = "sudo -n true|sudo -n DEBIAN_FRONTEND=noninteractive apt-get update -qq|sudo -n DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pkg-config libopenblas-openmp-dev|" ] &&
   [ "$(calls sudo apt-get | wc -l)" = 2 ]; then
    ok "not root, sudo -n works: sudo -n apt-get update, then install pkg-config libopenblas-openmp-dev"
else bad "not root, sudo works: exit $rc, sudo calls: $s apt-get calls: $(calls sudo apt-get | tr '\n' '|')"; fi

# (d) not root, no sudo: one line naming the packages and the command, exit 1, no apt-get
run nosudo test 1000 no "libopenblas-openmp-dev openmpi-bin" ""
l=$(grep -c . "$tmp/nosudo.out"); line=$(cat "$tmp/nosudo.out")
if [ $rc -ne 0 ] && [ "$l" = 1 ] && ! calls nosudo apt-get > /dev/null &&
   [[ "$line" == "error: "*"sudo apt-get install -y libopenblas-openmp-dev openmpi-bin "* ]]; then
    ok "not root, no sudo: exit $rc, one line, no apt-get call: $line"
else bad "not root, no sudo: exit $rc, $l lines, apt-get: $(calls nosudo apt-get | tr '\n' '|'): $(out nosudo)"; fi
# no sudo command at all: the same one line
NOSTUB=sudo run nosudo2 train 1000 no "g++" ""
if [ $rc -ne 0 ] && [ "$(grep -c . "$tmp/nosudo2.out")" = 1 ] && grep -q 'sudo apt-get install -y g++ ' "$tmp/nosudo2.out" &&
   ! calls nosudo2 apt-get > /dev/null; then ok "not root, sudo not installed: one line, exit $rc, no apt-get call"
else bad "not root, sudo not installed: exit $rc: $(out nosudo2)"; fi

# (e) not Debian: what is missing found as commands, one line naming it, exit 1, nothing installed
NOTDEB=1 NOSTUB="mpicxx mpirun" run notdeb test 0 no "" ""
line=$(cat "$tmp/notdeb.out")
if [ $rc -ne 0 ] && [ "$(grep -c . "$tmp/notdeb.out")" = 1 ] && [[ "$line" == "error: "*"libopenmpi-dev ("*"openmpi-bin ("* ]] &&
   [[ "$line" != *"g++ ("* ]] && ! calls notdeb 'sudo|apt-get' > /dev/null; then
    ok "not Debian, Open MPI missing: exit $rc, one line naming it (not the rest): $line"
else bad "not Debian: exit $rc, sudo/apt-get calls: $(calls notdeb 'sudo|apt-get' | tr '\n' '|'): $(out notdeb)"; fi
NOTDEB=1 run notdeb_ok test 0 no "" ""
if [ $rc -eq 0 ] && [ ! -s "$tmp/notdeb_ok.out" ]; then ok "not Debian, everything found: exit 0, no output"
else bad "not Debian, everything found: exit $rc: $(out notdeb_ok)"; fi

# Python, Debian's python, root: numpy from Debian, ml_dtypes by pip into the venv (python3-venv first)
run pydeb test 0 no "python3-venv" "numpy ml_dtypes"
inst=$(calls pydeb apt-get | grep ' install ')
if [ $rc -eq 0 ] && [[ "$inst" == *" python3-venv"* ]] && [[ "$inst" == *" python3-numpy"* ]] && [[ "$inst" != *ml* ]] &&
   grep -q -- "-m venv --system-site-packages $tmp/pydeb/venv" "$tmp/pydeb/calls" &&
   grep -qx "$tmp/pydeb/venv/bin/python3 -m pip install --quiet --disable-pip-version-check ml_dtypes" "$tmp/pydeb/calls" &&
   grep -q '^  python3-numpy (python: ' "$tmp/pydeb.out" && ! grep -qx ' *' "$tmp/pydeb.out"; then
    ok "Debian python: python3-numpy and python3-venv by apt-get, ml_dtypes by pip into the venv"
else bad "Debian python: exit $rc, apt: $inst, calls: $(grep -E 'venv|pip' "$tmp/pydeb/calls" | tr '\n' '|') $(out pydeb)"; fi
# a python that does not read Debian's packages: numpy by pip into the venv, no apt-get
STUB_DEBPY=0 run pyenv test 0 no "" "numpy"
if [ $rc -eq 0 ] && ! calls pyenv apt-get > /dev/null && grep -q 'venv/bin/python3 -m pip install .* numpy$' "$tmp/pyenv/calls"; then
    ok "a python that does not read Debian's packages: numpy by pip into the venv, no apt-get"
else bad "non-Debian python: exit $rc, calls: $(grep -E 'apt-get|pip' "$tmp/pyenv/calls" | tr '\n' '|')"; fi
# not root, no sudo, only Python packages missing (python3-venv there): into the venv, no root needed
run pyuser test 1000 no "" "matplotlib"
if [ $rc -eq 0 ] && ! calls pyuser apt-get > /dev/null && grep -q 'venv/bin/python3 -m pip install .* matplotlib$' "$tmp/pyuser/calls"; then
    ok "not root, no sudo, only matplotlib missing: pip into the venv, exit 0"
else bad "not root, only matplotlib missing: exit $rc: $(out pyuser)"; fi
# and run again: the venv now exists and has matplotlib, which only its python sees: deps.sh must ask that python,
# find nothing missing and install nothing (asking the system's python3 would pip-install matplotlib every run)
: > "$STATE/calls"
PATH="$tmp/path_pyuser:$tools" STUB_UID=1000 STUB_SUDO=no DEPS_VENV="$STATE/venv" PYTHON=python3 /bin/bash "$DEPS" test > "$tmp/pyuser2.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && [ ! -s "$tmp/pyuser2.out" ] && ! grep -qE 'pip install|apt-get' "$STATE/calls" &&
   grep -q "venv/bin/python3 -c import matplotlib" "$STATE/calls"; then
    ok "not root, after the pip install: a second run asks the venv's python, installs nothing, prints nothing"
else bad "not root, second run: exit $rc, calls: $(grep -E 'pip|apt-get|import matplotlib' "$STATE/calls" | tr '\n' '|') $(out pyuser2)"; fi

# --check: each package and what it is for, exit 1 when one is missing, nothing installed
run check test 0 ok "bc" "ml_dtypes" --check
if [ $rc -ne 0 ] && grep -q '^  missing  bc: ' "$tmp/check.out" && grep -q '^  missing  python: ml_dtypes ' "$tmp/check.out" &&
   grep -q '^  ok       libopenblas-openmp-dev: OpenBLAS' "$tmp/check.out" && [ "$(grep -c '^  \(ok\|missing\) ' "$tmp/check.out")" = 14 ] &&
   ! calls check 'apt-get|sudo' > /dev/null && [ ! -e "$tmp/check/venv" ]; then
    ok "--check: 14 lines, bc and ml_dtypes missing, exit $rc, nothing installed"
else bad "--check: exit $rc: $(out check)"; fi

# --- the Makefile: deps first, before any compiler; flags read after the install; the stamp ---
mkf=$tmp/mk; mkdir -p "$mkf/test" "$mkf/dev/data" "$mkf/bin" "$mkf/scripts"
cp Makefile "$mkf/"; cp test/test.mk "$mkf/test/"; : > "$mkf/train_gpt.cu"
printf 'import os, sys\nd = sys.argv[-1]\nos.makedirs(d, exist_ok=True)\nfor n in ("train", "val", "test"): open(os.path.join(d, "addition_%%s.bin" %% n), "w").close()\n' > "$mkf/dev/data/addition.py"
# the loss plot after the run: a stub that only creates the file it is asked for (--out FILE)
printf 'import os, sys\np = sys.argv[sys.argv.index("--out") + 1]\nos.makedirs(os.path.dirname(p), exist_ok=True)\nopen(p, "w").close()\n' > "$mkf/scripts/plot_logs.py"
# the compiler: records its arguments, writes a trainer that prints one line
printf '#!/bin/bash\necho "cxx $*" >> "%s/calls"\nwhile [ $# -gt 0 ]; do [ "$1" = -o ] && { printf "#!/bin/sh\\necho trained\\n" > "$2"; chmod +x "$2"; }; shift; done\n' "$mkf" > "$mkf/bin/cxx"
# MPI is found by pkg-config only once the deps script has "installed" it (the file mpi_installed)
printf '#!/bin/bash\n[ -e "%s/mpi_installed" ] && [ "$1 $2" = "--cflags ompi" ] && { echo -I/stub/mpi; exit 0; }\n[ -e "%s/mpi_installed" ] && [ "$1 $2" = "--libs ompi" ] && { echo -lstub_mpi; exit 0; }\nexit 1\n' "$mkf" "$mkf" > "$mkf/bin/pkg-config"
printf '#!/bin/bash\nexit 1\n' > "$mkf/bin/mpicxx"
printf '#!/bin/bash\necho "deps $*" >> "%s/calls"\n[ "$DEPS_OK" = 1 ] || { echo "error: stub deps: missing"; exit 1; }\ntouch "%s/mpi_installed"\n' "$mkf" "$mkf" > "$mkf/deps.sh"
chmod +x "$mkf/bin/"* "$mkf/deps.sh"
mkrun() { (cd "$mkf" && PATH="$mkf/bin:$PATH" DEPS_OK=$1 make --no-print-directory "$2" CXX="$mkf/bin/cxx" DEPS_SCRIPT="$mkf/deps.sh" > "$mkf/$2.out" 2>&1); }
: > "$mkf/calls"; mkrun 0 train; rc=$?
if [ $rc -ne 0 ] && [ "$(cat "$mkf/calls")" = "deps train" ] && [ ! -e "$mkf/build/deps/train.ok" ]; then
    ok "make train, the deps script failing: exit $rc, the deps script ran, no compiler call, no stamp"
else bad "make train, deps failing: exit $rc, calls: $(tr '\n' '|' < "$mkf/calls")"; fi
: > "$mkf/calls"; rm -rf "$mkf/build" "$mkf/train_gpt_cpu"; mkrun 1 train; rc=$?   # (from scratch: nothing built yet)
c=$(grep '^cxx ' "$mkf/calls")
if [ $rc -eq 0 ] && [ "$(head -1 "$mkf/calls")" = "deps train" ] && [ "$(grep -c '^cxx ' "$mkf/calls")" = 1 ] &&
   [[ "$c" == *"-I/stub/mpi"* ]] && [[ "$c" == *"-lstub_mpi"* ]] &&
   [ -e "$mkf/build/deps/train.ok" ] && grep -q '^trained' "$mkf/train.out"; then
    ok "make train, the deps script installing MPI: deps first, then one compiler call with MPI's flags (read after the install), then the run"
else bad "make train, deps installing MPI: exit $rc, calls: $(tr '\n' '|' < "$mkf/calls") output: $(tail -3 "$mkf/train.out" | tr '\n' '|')"; fi
: > "$mkf/calls"; mkrun 1 train; rc=$?
if [ $rc -eq 0 ] && ! grep -q '^deps' "$mkf/calls" && grep -q '^trained' "$mkf/train.out"; then ok "make train again: the stamp holds, no deps run"
else bad "make train again: exit $rc, calls: $(tr '\n' '|' < "$mkf/calls")"; fi
: > "$mkf/calls"; mkrun 0 test; rc=$?
if [ $rc -ne 0 ] && [ "$(cat "$mkf/calls")" = "deps test" ] && ! grep -q 'run_tests' "$mkf/test.out"; then
    ok "make test, the deps script failing: exit $rc, nothing built, no test run"
else bad "make test, deps failing: exit $rc, calls: $(tr '\n' '|' < "$mkf/calls") output: $(tail -3 "$mkf/test.out" | tr '\n' '|')"; fi

echo "deps: $pass passed, $fail failed"
[ $fail -eq 0 ]
