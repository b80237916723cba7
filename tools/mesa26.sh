#!/usr/bin/env bash
# A newer Mesa (Debian trixie-backports, 26.1.x) beside the machine's own,
# for what Debian 12's Mesa 22.3 cannot show: lavapipe with cooperative
# matrices, and AMD's and NVIDIA's own shader compilers (ACO, NAK) on "null"
# GPUs (Mesa's drm-shim: a fake GPU whose dispatches do nothing).
#
#   tools/mesa26.sh fetch                 download the pinned packages, check their
#                                         hashes, unpack them (once; offline after)
#   tools/mesa26.sh check                 exit 0 when ready, else one line saying what is missing
#   tools/mesa26.sh lvp COMMAND ARGS...   run COMMAND against lavapipe 26
#   tools/mesa26.sh radv[:GPU] COMMAND... RADV on a null AMD GPU: navi21 (RDNA2),
#                                         navi31 (RDNA3, the default), navi33, gfx1201 (RDNA4)
#   tools/mesa26.sh nvk[:CHIP] COMMAND... NVK on a null NVIDIA GPU: 172 (GA102, Ampere, the
#                                         default), 162 or 166 (Turing)
#   tools/mesa26.sh version               the Mesa version pinned
#   tools/mesa26.sh pin                   resolve the newest versions again and rewrite
#                                         tools/mesa26.pins (needs the network)
#
# Nothing is installed: the packages (Mesa, the Vulkan loader and validation
# layer, glibc and the rest of what they need; tools/mesa26.pins lists each
# file with its SHA-256) are unpacked into $VKQ_MESA26_DIR (default
# ~/.cache/vkq/mesa26), and COMMAND runs through their own dynamic loader,
# since they need a newer glibc than Debian 12's. So COMMAND must be a
# program file (an ELF binary such as a venv's bin/python, or a script whose
# #! line names one); the processes it starts run on the machine's own
# libraries, not on this Mesa. Only this Mesa's drivers are visible to it,
# and VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation loads this validation
# layer. The same works on Debian 13.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PINS=$HERE/mesa26.pins
CACHE=${VKQ_MESA26_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vkq/mesa26}
DEBS=$CACHE/debs
# Where the pinned files are fetched from: the Debian mirror, then (for a
# version the mirror no longer has) snapshot.debian.org as of the pin date.
MIRROR=${VKQ_MESA26_MIRROR:-http://deb.debian.org}
SNAPSHOT=https://snapshot.debian.org/archive

die() { echo "mesa26: $*" >&2; exit 1; }

pins() { grep -v '^#' "$PINS" | grep -v '^$'; }
pin_value() { sed -n "s/^# $1: //p" "$PINS"; }

# The unpacked tree belongs to one pin file: a new pin unpacks afresh.
tree() { echo "$CACHE/root-$(sha256sum "$PINS" | cut -c1-12)"; }

missing() {
    # One line: what `fetch` would still have to do ("" when ready).
    local root; root=$(tree)
    [ -f "$root/.complete" ] && return 0
    local absent=()
    while read -r sha size path; do
        [ -f "$DEBS/$(basename "$path")" ] || absent+=("$(basename "$path" .deb)")
    done < <(pins)
    if [ ${#absent[@]} = 0 ]; then
        echo "the pinned packages are downloaded but not unpacked: run tools/mesa26.sh fetch"
    else
        echo "${#absent[@]} of $(pins | wc -l) pinned packages not downloaded (${absent[*]:0:3}$([ ${#absent[@]} -gt 3 ] && echo ' ...')): run tools/mesa26.sh fetch (needs $MIRROR)"
    fi
}

download() {
    # download URL FILE: curl, else wget, else Python.
    if command -v curl >/dev/null; then curl -fsSL --retry 2 -o "$2" "$1"
    elif command -v wget >/dev/null; then wget -q -O "$2" "$1"
    else python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"
    fi
}

fetch() {
    command -v dpkg-deb >/dev/null || die "dpkg-deb not found (Debian's dpkg package unpacks the .deb files)"
    local root; root=$(tree)
    [ -f "$root/.complete" ] && return 0
    mkdir -p "$DEBS"
    # one fetch at a time (several commands may start on an empty cache at once)
    exec 9>"$CACHE/.lock"
    command -v flock >/dev/null && flock 9
    [ -f "$root/.complete" ] && return 0
    local date; date=$(pin_value date)
    while read -r sha size path; do
        local file=$DEBS/$(basename "$path")
        if [ -f "$file" ] && [ "$(sha256sum "$file" | cut -d' ' -f1)" = "$sha" ]; then continue; fi
        echo "mesa26: downloading $(basename "$path") ($((size / 1024)) KiB)" >&2
        download "$MIRROR/$path" "$file.part" 2>/dev/null \
            || download "$SNAPSHOT/${path%%/*}/$date/${path#*/}" "$file.part" 2>/dev/null \
            || die "cannot download $(basename "$path") from $MIRROR (or snapshot.debian.org as of $date): offline, or the mirror no longer has this version (tools/mesa26.sh pin)"
        [ "$(sha256sum "$file.part" | cut -d' ' -f1)" = "$sha" ] \
            || { rm -f "$file.part"; die "$(basename "$path"): SHA-256 differs from tools/mesa26.pins"; }
        mv "$file.part" "$file"
    done < <(pins)
    rm -rf "$root.part"
    mkdir -p "$root.part"
    while read -r sha size path; do
        local file=$DEBS/$(basename "$path")
        # checked again: the cache may have changed since it was downloaded
        [ "$(sha256sum "$file" | cut -d' ' -f1)" = "$sha" ] || die "$file: SHA-256 differs from tools/mesa26.pins; delete it and fetch again"
        dpkg-deb -x "$file" "$root.part"
    done < <(pins)
    local lib=$root/usr/lib/x86_64-linux-gnu
    mkdir -p "$root.part/vkq/icd" "$root.part/vkq/layers"
    # The drivers' and the layer's manifests, pointing at their libraries by
    # absolute path (the packages' own name a path or a bare name).
    for icd in lvp radeon nouveau; do
        sed "s#\"library_path\": \"[^\"]*\"#\"library_path\": \"$lib/libvulkan_$icd.so\"#" \
            "$root.part/usr/share/vulkan/icd.d/${icd}_icd.json" > "$root.part/vkq/icd/$icd.json"
    done
    sed "s#\"library_path\": \"[^\"]*\"#\"library_path\": \"$lib/libVkLayer_khronos_validation.so\"#" \
        "$root.part/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json" \
        > "$root.part/vkq/layers/VkLayer_khronos_validation.json"
    touch "$root.part/.complete"
    mv "$root.part" "$root"
    # trees of earlier pins
    find "$CACHE" -maxdepth 1 -name 'root-*' ! -path "$root" -exec rm -rf {} +
    echo "mesa26: Mesa $(pin_value mesa) ready in $root" >&2
}

run() {
    local driver=${1%%:*} gpu=; [[ $1 == *:* ]] && gpu=${1#*:}
    shift
    [ $# -gt 0 ] || die "no command to run (tools/mesa26.sh $driver COMMAND ARGS...)"
    case $driver in
        lvp) [ -z "$gpu" ] || die "lvp:$gpu: lavapipe takes no GPU name" ;;
        radv) gpu=${gpu:-navi31}
            case $gpu in navi21|navi31|navi33|gfx1201) ;; *) die "radv:$gpu: the null AMD GPUs are navi21, navi31, navi33, gfx1201" ;; esac ;;
        nvk) gpu=${gpu:-172}
            case $gpu in 172|162|166) ;; *) die "nvk:$gpu: the null NVIDIA GPUs are 172 (GA102), 162, 166 (Turing)" ;; esac ;;
    esac
    local line; line=$(missing) || true
    if [ -n "$line" ]; then fetch || die "$line"; fi
    local root; root=$(tree)
    local lib=$root/usr/lib/x86_64-linux-gnu preload=()
    case $driver in
        lvp) export VK_DRIVER_FILES=$root/vkq/icd/lvp.json ;;
        radv) export VK_DRIVER_FILES=$root/vkq/icd/radeon.json AMDGPU_GPU_ID=$gpu
            preload=(--preload "$lib/libamdgpu_noop_drm_shim.so") ;;
        nvk) export VK_DRIVER_FILES=$root/vkq/icd/nouveau.json NOUVEAU_CHIPSET=$gpu
            preload=(--preload "$lib/libnouveau_noop_drm_shim.so") ;;
    esac
    unset VK_ICD_FILENAMES VK_ADD_DRIVER_FILES
    export VK_LAYER_PATH=$root/vkq/layers
    # The program and, for a script, the interpreter its #! line names
    # (through env), so that the loader is given an ELF file.
    local prog; prog=$(type -P "$1") || die "$1: no such program file (COMMAND must be a file: an ELF binary or a #! script)"
    shift
    local cmd=("$prog")
    if [ "$(head -c2 "$prog")" = "#!" ]; then
        local shebang; read -r -a shebang < <(head -1 "$prog" | cut -c3-)
        if [ "$(basename "${shebang[0]}")" = env ]; then
            shebang=("$(command -v "${shebang[1]}")" "${shebang[@]:2}")
        fi
        cmd=("${shebang[@]}" "$prog")
    fi
    exec "$root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$lib" "${preload[@]}" "${cmd[@]}" "$@"
}

pin() {
    # Resolve mesa-vulkan-drivers and mesa-drm-shim from trixie-backports,
    # the loader and validation layer from trixie, with everything they
    # depend on (an empty dpkg status: glibc included), through a private
    # apt configuration; apt checks each file against the signed indexes,
    # and the pins record their SHA-256.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
    printf 'deb %s/debian trixie main\ndeb %s/debian trixie-backports main\ndeb %s/debian trixie-updates main\ndeb %s/debian-security trixie-security main\n' \
        "$MIRROR" "$MIRROR" "$MIRROR" "$MIRROR" > "$work/sources.list"
    : > "$work/status"
    local apto=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=/dev/null
                -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Dir::State::status="$work/status"
                -o APT::Architecture=amd64 -o Debug::NoLocking=1 -o APT::Install-Recommends=0
                -o APT::Sandbox::User=root)
    apt-get "${apto[@]}" -qq update
    apt-get "${apto[@]}" -qq -y --print-uris -t trixie install \
        mesa-vulkan-drivers/trixie-backports mesa-drm-shim/trixie-backports libvulkan1 vulkan-validationlayers \
        > "$work/uris"
    apt-get "${apto[@]}" -qq -y --download-only -t trixie install \
        mesa-vulkan-drivers/trixie-backports mesa-drm-shim/trixie-backports libvulkan1 vulkan-validationlayers
    local mesa; mesa=$(sed -n "s/.*mesa-vulkan-drivers_\([^_]*\)_amd64.deb.*/\1/p" "$work/uris")
    {
        echo "# Debian packages of tools/mesa26.sh: SHA-256, size, path on the mirror ($MIRROR)."
        echo "# Written by \`tools/mesa26.sh pin\`; apt checked each against the signed indexes."
        echo "# mesa: ${mesa//%3a/:}"
        echo "# date: $(date -u +%Y%m%dT%H%M%SZ)"
        while read -r url file size _; do
            url=${url//\'/}
            local deb=$work/cache/archives/$file
            echo "$(sha256sum "$deb" | cut -d' ' -f1) $size ${url#"$MIRROR"/}"
        done < "$work/uris"
    } > "$PINS.new"
    mv "$PINS.new" "$PINS"
    echo "mesa26: pinned Mesa ${mesa//%3a/:}, $(pins | wc -l) packages, in $PINS" >&2
}

case ${1:-} in
    fetch) fetch ;;
    check) line=$(missing) || true; [ -z "$line" ] || { echo "mesa26: $line"; exit 1; } ;;
    version) pin_value mesa ;;
    pin) pin ;;
    lvp|lvp:*|radv|radv:*|nvk|nvk:*) run "$@" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
