#!/usr/bin/env bash
# Create ./.venv for this project unless it exists, on any Python 3.11 (pyenv, python.org, or
# Debian/Ubuntu's system Python, which refuses `pip install` outside a venv: PEP 668).
#
# --system-site-packages: packages the interpreter already has are reused, not downloaded again.
# Debian ships ensurepip separately (python3-venv); without it the venv is made --without-pip and
# borrows the interpreter's pip through those site-packages (pip inside a venv ignores PEP 668).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] && exit 0
python3 -m venv --system-site-packages .venv 2>/dev/null \
  || { rm -rf .venv; python3 -m venv --system-site-packages --without-pip .venv; }
.venv/bin/python -m pip --version >/dev/null 2>&1 || {
  echo "no pip for $(command -v python3): install python3-pip (Debian: apt-get install python3-pip)" >&2
  exit 1
}
