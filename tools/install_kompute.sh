#!/bin/sh
# Builds Kompute's Python package (kp 0.9.0, PyPI sdist) from source into a
# virtual environment, with vkq's patch (tools/kompute/vkq-kompute-0.9.0.patch):
#   - the shaderIntegerDotProduct feature is enabled when the int-dot
#     extension is requested (stock kp enables no device features),
#   - kp.OpGlobalMemoryBarrier orders dependent dispatches in one sequence,
#   - Manager.algorithm_with_bindings binds tensors as uniform buffers or
#     uniform texel buffer views (tensors get those usage flags too),
#   - timestamp queries are reset before use (stock kp never resets them),
#   - setup.py passes -DPYTHON_EXECUTABLE (a missing comma dropped it).
# The CMake options below make kp use Debian's Vulkan headers, fmt and
# pybind11 instead of fetching them from the network, and keep Kompute from
# switching the validation layer on by itself.
# Usage: tools/install_kompute.sh PYTHON
set -eu
PY=${1:?usage: install_kompute.sh PYTHON}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PY" -m pip download --quiet --no-deps --no-binary :all: kp==0.9.0 -d "$work"
tar xzf "$work"/kp-0.9.0.tar.gz -C "$work"
patch --quiet -d "$work/kp-0.9.0" -p1 < "$here/kompute/vkq-kompute-0.9.0.patch"

KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF \
KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
KOMPUTE_OPT_INSTALL=OFF \
KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON \
KOMPUTE_OPT_DISABLE_VK_DEBUG_LAYERS=ON \
  "$PY" -m pip install --quiet --no-build-isolation --no-deps "$work/kp-0.9.0"
"$PY" -c "import kp; assert kp.VKQ_PATCH_LEVEL >= 3; print('kp', kp.__version__, 'with vkq patch', kp.VKQ_PATCH_LEVEL)"
