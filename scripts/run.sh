#!/usr/bin/env bash
# Set up a fresh machine and run the default experiment (arguments go to `composer-lab run`).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q --disable-pip-version-check -e .
composer-lab run "$@"
echo "Open the lab (JupyterLab on a working copy of the notebooks): . .venv/bin/activate && composer-lab lab"
