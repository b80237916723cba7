#!/bin/sh
# Builds Kompute's Python package (kp 0.9.0, PyPI sdist) from source for the
# given Python (3.10-3.13; a venv, a conda env, ...) with vkq's patch series,
# tools/kompute/*.patch, applied in name order (each patch opens with what it
# changes and why), and installs it.
# The CMake options below make kp use the system's Vulkan headers and fmt
# instead of fetching them from the network, and keep Kompute from
# switching the validation layer on by itself.
# The built wheel is kept in $VKQ_KP_WHEELS (default: $XDG_CACHE_HOME/vkq/kp-wheels,
# or ~/.cache/vkq/kp-wheels), under a hash of the series and this script, so a
# second environment or a fresh clone with the same Python version installs
# it in seconds; delete that folder to build again.
# Needs: cmake, g++, patch, the Vulkan and fmt headers, the Python's own
# headers (README.md, "Installing into an existing environment").
# Usage: tools/install_kompute.sh PYTHON
set -eu
PY=${1:?usage: install_kompute.sh PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
# The one statement of the patch level vkq needs: vkq/device/runtime.py.
need=$(sed -n 's/^REQUIRED_KP_PATCH = \([0-9][0-9]*\).*/\1/p' "$root/vkq/device/runtime.py")
[ -n "$need" ] || { echo "install_kompute.sh: no REQUIRED_KP_PATCH in vkq/device/runtime.py" >&2; exit 1; }

series=$(ls "$here"/kompute/*.patch | LC_ALL=C sort)
key=$(cat $series "$here/install_kompute.sh" | sha256sum | cut -c1-16)
tag=$("$PY" -c "import sys; print('cp%d%d' % sys.version_info[:2])")
wheels=${VKQ_KP_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/vkq/kp-wheels}/$key
wheel=$(ls "$wheels"/kp-0.9.0-"$tag"-*.whl 2>/dev/null | head -n 1 || true)

if [ -z "$wheel" ]; then
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$PY" -m pip download --quiet --no-deps --no-binary :all: kp==0.9.0 -d "$work"
    tar xzf "$work"/kp-0.9.0.tar.gz -C "$work"
    for p in $series; do
        patch --quiet -d "$work/kp-0.9.0" -p1 < "$p"
    done
    # The series' pyproject.toml lists the build dependencies (setuptools,
    # pybind11): pip fetches them into an isolated build environment.
    mkdir -p "$wheels"
    KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
    KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF \
    KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
    KOMPUTE_OPT_INSTALL=OFF \
    KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON \
    KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON \
      "$PY" -m pip wheel --quiet --no-deps -w "$wheels" "$work/kp-0.9.0"
    wheel=$(ls "$wheels"/kp-0.9.0-"$tag"-*.whl | head -n 1)
fi

# kp's one dependency, numpy (1.x or 2.x), is installed only if the Python
# has none; an older kp build is uninstalled first so that this one
# replaces it.
"$PY" -m pip uninstall --quiet --yes kp 2>/dev/null || true
"$PY" -m pip install --quiet "$wheel"
"$PY" -c "
import kp
level = getattr(kp, 'VKQ_PATCH_LEVEL', 0)
assert level == $need, f'kp reports vkq patch level {level} (patches 0001-{level:04d}); vkq needs $need'
print(f'kp {kp.__version__} with vkq patches 0001-{level:04d}')"
