#!/bin/sh
# Builds Kompute's Python package (kp 0.9.0, PyPI sdist) from source for the
# given Python (3.10-3.13; a venv, a conda env, ...), with vkq's patch
# (tools/kompute/vkq-kompute-0.9.0.patch):
#   - the shaderIntegerDotProduct feature is enabled when the int-dot
#     extension is requested (stock kp enables no device features),
#   - kp.OpGlobalMemoryBarrier orders dependent dispatches in one sequence,
#   - Manager.algorithm_with_bindings binds tensors as uniform texel buffer
#     views (tensors get that usage flag too),
#   - Tensor.release_staging frees a device tensor's host staging copy once
#     its data is on the device,
#   - timestamp queries are reset before use (stock kp never resets them),
#   - a sequence keeps one fence and resets it per submit (stock kp creates
#     and destroys one per eval: driver calls on every submit's path),
#   - algorithms of the same shader, specialization constants, push-constant
#     size and binding types share one pipeline (stock kp compiles one per
#     algorithm: ~15 ms each on lavapipe, hundreds per decode step),
#   - the build takes pybind11 >= 2.12 from pip (numpy 2, Python 3.12+;
#     kp pins pybind11 2.9 and numpy<2), and setup.py passes the Python
#     executable to CMake (a missing comma dropped it).
# The CMake options below make kp use the system's Vulkan headers and fmt
# instead of fetching them from the network, and keep Kompute from
# switching the validation layer on by itself.
# Needs: cmake, g++, the Vulkan and fmt headers, the Python's own headers
# (README.md, "Installing into an existing environment").
# Usage: tools/install_kompute.sh PYTHON
set -eu
PY=${1:?usage: install_kompute.sh PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m pip download --quiet --no-deps --no-binary :all: kp==0.9.0 -d "$work"
tar xzf "$work"/kp-0.9.0.tar.gz -C "$work"
patch --quiet -d "$work/kp-0.9.0" -p1 < "$here/kompute/vkq-kompute-0.9.0.patch"

# The patch's pyproject.toml lists the build dependencies (setuptools,
# pybind11): pip fetches them into an isolated build environment. kp's one
# dependency, numpy (1.x or 2.x), is installed only if the Python has none;
# an older kp build is uninstalled first so that this one replaces it.
"$PY" -m pip uninstall --quiet --yes kp 2>/dev/null || true
KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF \
KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
KOMPUTE_OPT_INSTALL=OFF \
KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON \
KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON \
  "$PY" -m pip install --quiet "$work/kp-0.9.0"
"$PY" -c "import kp; assert kp.VKQ_PATCH_LEVEL >= 6; print('kp', kp.__version__, 'with vkq patch', kp.VKQ_PATCH_LEVEL)"
