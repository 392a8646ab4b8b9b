# Shared by the scripts in this folder: source it, do not run it.
#   root                 the repository's top folder
#   step TEXT            prints a step header, with the time elapsed so far
#   use_python_env       creates (once) and activates the cached venv of scripts/python-env,
#                        for maturin, pytest and PyO3 builds
#   use_python_libdir    lets test binaries that embed Python load this interpreter's
#                        shared library (PYO3_PYTHON, or python3)
#   python_packages      prints its environment's site-packages, the PYTHONPATH of test
#                        binaries that import its packages (NumPy: dlpack-core's
#                        test_numpy_in_place)
#   build_extension      builds the test extension into the active venv (release mode;
#                        DLPACK_EXTENSION_FEATURES adds cargo features)
#   cargo_executables    runs `cargo ARGS --message-format=json` and prints the test and
#                        bench executables it built (not examples or binaries), one per
#                        line
#   cargo_examples       the same for the example executables it built
#   core_features, default_features, pure_features, feature_sets, msrv_of
#                        dlpack-core's features and the builds every check reads (below)

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# dlpack-core's features, each with the minimum Rust version it needs (the README's
# table), in one list that clippy, rustdoc, the tests, the sanitizers and the MSRV
# checks read.
declare -A msrv_of=(
    [ndarray]=1.85 [derive]=1.85 [half]=1.85 [complex]=1.85 [pyo3]=1.85
    [safetensors]=1.85 [dlpark]=1.88 [burn]=1.95 [arrow]=1.88
)
core_features=(ndarray derive half complex pyo3 dlpark burn safetensors arrow)
default_features=(ndarray derive)
# Every feature Miri runs: all but pyo3 (Miri cannot run CPython); ASan adds pyo3.
pure_features="$(printf '%s\n' "${core_features[@]}" | grep -vx pyo3 | paste -sd,)"
# The builds checked one by one (no dead code or broken link in any of them): none,
# the defaults, the derive alone, and each other feature beside the defaults.
feature_sets=("--no-default-features" "" "--no-default-features --features derive")
for feature in "${core_features[@]}"; do
    [[ " ${default_features[*]} " == *" $feature "* ]] || feature_sets+=("--features $feature")
done
unset feature

# (Each header also says how long the script has run, for the time budget of CI.)
# (Each header also says how much disk is left where the build goes.)
step() {
    printf '\n==> %s  [%dm%02ds, %s free]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)) \
        "$(df -h --output=avail "$root" 2>/dev/null | tail -n 1 | tr -d ' ')"
}

use_python_env() {
    local venv
    venv="$("$root/scripts/python-env")"
    export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" PYO3_PYTHON="$venv/bin/python"
    unset CONDA_PREFIX PYTHONHOME
}

use_python_libdir() {
    local python="${PYO3_PYTHON:-$(command -v python3)}" libdir
    export PYO3_PYTHON="$python"
    libdir="$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"
    export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# The site-packages of PYO3_PYTHON's environment, for the PYTHONPATH of a test binary
# that embeds Python and imports its packages (an embedded interpreter ignores the venv
# it was built against).
python_packages() {
    "$PYO3_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

build_extension() {
    local features="python${DLPACK_EXTENSION_FEATURES:+,$DLPACK_EXTENSION_FEATURES}"
    (cd "$root/tests" && maturin develop --release --quiet --features "$features")
}

cargo_executables() {
    cargo_built test "$@"
}

cargo_examples() {
    cargo_built example "$@"
}

# The executables of `cargo ARGS`: KIND `example` for the examples, `test` for the test
# and bench harnesses (never a binary).
cargo_built() {
    local kind="$1"
    shift
    cargo "$@" --message-format=json 2>/dev/null | python3 -c '
import json, sys
want_examples = sys.argv[1] == "example"
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") != "compiler-artifact" or not message.get("executable"):
        continue
    kinds = set(message["target"]["kind"])
    if "bin" in kinds or ("example" in kinds) != want_examples:
        continue
    print(message["executable"])
' "$kind"
}
