#!/usr/bin/env bash
# Create ./.venv for this project unless it exists, on any Python 3.11 (pyenv, python.org, or
# Debian/Ubuntu's system Python, which refuses `pip install` outside a venv: PEP 668).
#
# The venv is isolated from the interpreter's site-packages: every package and tool the tests use
# comes from .venv, so a package that happens to be on the host cannot hide a missing dependency.
# Debian ships ensurepip separately (python3-venv); without it the venv is made --without-pip and
# pip is bootstrapped into it from a pip wheel fetched by the interpreter's own pip.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] && .venv/bin/python -m pip --version >/dev/null 2>&1 && exit 0
rm -rf .venv
if ! python3 -m venv .venv 2>/dev/null; then
  rm -rf .venv
  python3 -m venv --without-pip .venv
  python3 -m pip --version >/dev/null 2>&1 || {
    echo "no pip and no ensurepip for $(command -v python3): install python3-venv or python3-pip" >&2
    exit 1
  }
  wheels="$(mktemp -d)"
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$wheels" pip
  whl="$(ls "$wheels"/pip-*.whl)"
  .venv/bin/python "$whl/pip" install -q --disable-pip-version-check --no-index "$whl"
  rm -rf "$wheels"
fi
.venv/bin/python -c 'import sys; assert sys.prefix != sys.base_prefix' 2>/dev/null || {
  echo ".venv is not a virtual environment" >&2; exit 1; }
