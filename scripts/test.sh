#!/usr/bin/env bash
# Set up a fresh machine and run the whole test suite: pytest (tests/) and nbval (notebooks/).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -x -k engine`.
set -euo pipefail
cd "$(dirname "$0")/.."

# The real-browser test drives JupyterLab in Debian's Chromium; it is skipped, with a
# message, where Chromium cannot be installed. apt installs it in the background, while pip
# installs the packages (both mostly wait on downloads).
chromium_install=""
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) &
  chromium_install=$!
fi

python3 -m venv .venv
. .venv/bin/activate
# The standard torch build from PyPI (CUDA libraries included, ~2 min to download): the
# CPU-only wheel cannot load torchvision's compiled ops. It runs on CPU and GPU alike.
pip install -q --disable-pip-version-check -e '.[test]'

if [ -n "$chromium_install" ] && ! wait "$chromium_install"; then
  echo "note: could not install chromium; the browser test will be skipped"
fi

# Style and the complexity limit; the layers contract and module sizes are tests (tests/test_layers.py,
# tests/test_code_shape.py).
ruff check composer_lab tests benchmarks

# Two worker processes (pytest-xdist), one per core of CI's two: every test uses one torch thread.
# (Not `-n auto`: it counts physical cores, one on a VM of two hyperthreads.) --dist loadfile keeps
# each file on one worker, in order: a notebook's cells share one kernel, and a test module's tests
# may share module state (the compatibility matrix). `-n 0` runs everything in this process.
python -m pytest tests notebooks --nbval --nbval-current-env \
  --nbval-sanitize-with composer_lab/nbval_sanitize.cfg -n 2 --dist loadfile "$@"
