#!/bin/sh
# Installs vkq into an existing Python environment (a venv with torch, a
# conda env, ...): Kompute (kp) built with vkq's patch for that Python, then
# vkq itself with its compiled shaders. Needs the system packages listed in
# README.md ("Installing into an existing environment").
# Usage: tools/install.sh PYTHON      e.g. tools/install.sh "$(which python)"
set -eu
PY=${1:?usage: install.sh PYTHON}
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/install_kompute.sh" "$PY"
# Building vkq's wheel compiles the shaders (setup.py) into the package.
"$PY" -m pip install --quiet "$root"
cd /tmp && "$PY" -m vkq --version
