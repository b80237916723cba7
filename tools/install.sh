#!/bin/sh
# Installs vkq into an existing Python environment (a venv with torch, a
# conda env, ...): Kompute (kp) built with vkq's patch series for that
# Python, then vkq itself, built from this checkout with its compiled shaders
# (or a vkq wheel or sdist you give). Needs the system packages listed in
# README.md ("Installing into an existing environment").
# Usage: tools/install.sh PYTHON [VKQ_WHEEL_OR_SDIST]
#        e.g. tools/install.sh "$(which python)"
set -eu
PY=${1:?usage: install.sh PYTHON [VKQ_WHEEL_OR_SDIST]}
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install_kompute.sh" "$PY"
# Building vkq's wheel compiles the shaders (setup.py) into the package.
"$PY" -m pip install --quiet "${2:-$root}"
cd /tmp && "$PY" -m vkq --version
