#!/bin/sh
# Installs the Debian packages vkq needs, only those missing (so a second run
# takes a fraction of a second). Needs root for apt-get.
#   Vulkan loader + lavapipe driver, vulkaninfo, the validation layers
#   shader compiler and validator (glslang-tools, spirv-tools)
#   what Kompute's build needs (cmake, g++, headers for Vulkan and fmt; pybind11
#   comes from pip, see tools/install_kompute.sh)
#   python3-venv / python3-dev for Debian's own python3
set -eu
PACKAGES="libvulkan1 libvulkan-dev mesa-vulkan-drivers vulkan-tools vulkan-validationlayers
glslang-tools spirv-tools cmake g++ make patch libfmt-dev python3-venv python3-dev"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "installing Debian packages:$missing"
if [ "$(id -u)" != 0 ]; then
    echo "error: these packages are missing and installing them needs root:$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing
