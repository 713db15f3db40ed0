#!/usr/bin/env bash
# The draft-checkpoint oracle: real SGLang releases and vLLM load speculators-made drafts on the CPU.
# Heavy (downloads ~400 MB of wheels, ~10 min); not run in CI. Writes tests/fixtures/draft_oracle.json.
#   scripts/draft_oracle/run.sh            # everything
#   ORACLE=/tmp/oracle scripts/draft_oracle/run.sh
# Never installs a CUDA torch: torch comes from the CPU wheel, engines are unpacked (not pip-installed), and
# only the light packages their model modules import are installed (see README.md).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ORACLE=${ORACLE:-/tmp/oracle}
VENV=$ORACLE/venv
SGLANG_VERSIONS=${SGLANG_VERSIONS:-"0.5.9 0.5.11 0.5.12 0.5.16 0.5.17 0.5.23"}
VLLM_VERSION=${VLLM_VERSION:-0.33.0}
declare -A TF=([0.5.9]=4.57.1 [0.5.11]=5.6.0 [0.5.12]=5.6.0 [0.5.16]=5.12.1 [0.5.17]=5.12.1 [0.5.23]=5.19.0)  # each release's pinned transformers
VLLM_TF=5.19.0
mkdir -p "$ORACLE"/{wheels,src,results}
cd "$ORACLE"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0  # the CPU wheel in /opt/wheels
  "$VENV/bin/pip" install -q safetensors numpy transformers orjson msgspec psutil requests pyzmq pybase64 einops \
    packaging regex setproctitle xxhash pydantic python-dateutil distro prometheus-client easydict zstandard tqdm \
    pillow partial_json_parser interegular numba scipy aiohttp uvloop fastapi python-multipart IPython dill \
    sentencepiece cachetools blake3 py-cpuinfo cloudpickle cbor2 ijson python-json-logger pyyaml jsonschema \
    lark==1.2.2 openai-harmony xgrammar==0.2.8 loguru pydantic-settings click typer rich httpx openai datasets
  "$VENV/bin/pip" install -q --no-deps triton apache-tvm-ffi speculators==0.9.0 hs-connectors==0.9.0
fi
"$VENV/bin/python" -c "import torch; assert '+cpu' in torch.__version__, torch.__version__"
for v in 4.57.1 5.6.0 5.12.1 5.19.0; do
  [ -d "tf-$v" ] || "$VENV/bin/pip" install -q --target "tf-$v" "transformers==$v"
done
for v in $SGLANG_VERSIONS; do
  if [ ! -d "src/sglang-$v" ]; then
    "$VENV/bin/pip" download -q --no-deps "sglang==$v" -d wheels
    mkdir -p "src/sglang-$v" && unzip -q -o wheels/sglang-"$v"-*.whl 'sglang/*' -d "src/sglang-$v"
  fi
done
if [ ! -d "src/vllm-$VLLM_VERSION" ]; then
  "$VENV/bin/pip" download -q --no-deps "vllm==$VLLM_VERSION" -d wheels
  mkdir -p "src/vllm-$VLLM_VERSION" && unzip -q -o wheels/vllm-"$VLLM_VERSION"-*.whl 'vllm/*' -x '*.so' -d "src/vllm-$VLLM_VERSION"
fi

# 1. the checkpoints (speculators' own save and convert), then check-draft's --write-renamed of each
PYTHONPATH=tf-5.19.0 "$VENV/bin/python" "$HERE/make_checkpoints.py" "$ORACLE/ckpts" > results/make.log 2>&1
"$REPO/.venv/bin/python" "$HERE/write_fixes.py" "$ORACLE/ckpts" $SGLANG_VERSIONS > results/fixes.log 2>&1
mkdir -p ckpts/fixed

# 2. each engine loads each checkpoint
SG_STUBS="torchvision,compressed_tensors,gguf,sgl_kernel,flashinfer,deep_gemm,cuda,pynvml"
VL_STUBS="torchvision,vllm._C,vllm._C_stable_libtorch,vllm._moe_C,llguidance,flashinfer"
for v in $SGLANG_VERSIONS; do
  ORACLE_STUBS=$SG_STUBS PYTHONPATH="$HERE/site:src/sglang-$v:tf-${TF[$v]}" \
    "$VENV/bin/python" "$HERE/sglang_load.py" "ckpts/drafts:ckpts/fixed/sglang-$v" "results/sglang-$v.json" > "results/sglang-$v.log" 2>&1
done
ORACLE_STUBS=$VL_STUBS PYTHONPATH="$HERE/site:src/vllm-$VLLM_VERSION:tf-$VLLM_TF" \
  "$VENV/bin/python" "$HERE/vllm_load.py" "ckpts/drafts:ckpts/fixed/vllm-$VLLM_VERSION" ckpts/targets/llama "results/vllm-$VLLM_VERSION.json" \
  > "results/vllm-$VLLM_VERSION.log" 2>&1

# 3. the committed fixture: configs, safetensors headers, and every engine's rows (no weights)
"$REPO/.venv/bin/python" "$HERE/fixture.py" "$ORACLE" "$REPO/tests/fixtures/draft_oracle.json"
