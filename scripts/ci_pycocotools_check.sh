#!/usr/bin/env bash
# CI step: prove that the committed COCO-eval goldens (tests/golden/eval/*.expected.json) are what
# the real pycocotools (from PyPI) computes. Installs pycocotools when it is missing, reruns
# tests/reference/pycocotools_expected.py into a temporary folder and compares (tolerance 1e-12).
# The C++ side (detforge_tests, EvalCocoEval.*) then checks detforge against the same files at 1e-6.
# Needs ../shared for the cases built on its datasets.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import pycocotools, numpy" 2>/dev/null; then
  "$PY" -m pip install --quiet pycocotools numpy
fi
"$PY" -c "import importlib.metadata as m; print('pycocotools', m.version('pycocotools'), 'numpy', m.version('numpy'))"
exec "$PY" tests/reference/pycocotools_expected.py --check "$@"
