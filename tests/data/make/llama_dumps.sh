#!/bin/sh
# Write tests/data/llama_<dtype> (fp32, bf16, fp16) and tests/data/moe_<dtype> (bf16, fp16) with
# msprobe 26.2.0 in its own venv:
#   PYTHON=VENV/bin/python sh tests/data/make/llama_dumps.sh
# VENV: python -m venv VENV && VENV/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"
set -e
PYTHON=${PYTHON:-python}
MAKE=$(cd "$(dirname "$0")" && pwd)
DATA=$(dirname "$MAKE")
WORK=$(mktemp -d)
cd "$WORK"
for name in llama_fp32 llama_bf16 llama_fp16 moe_bf16 moe_fp16; do
  rm -rf out
  MODEL=${name%_*} DTYPE=${name#*_} "$PYTHON" "$MAKE/llama_dump.py" "$MAKE/llama_tensor_L1.json" 2>&1 | grep -v '\[INFO\]'
  proc=$(echo out/llama_tensor_L1/step0/proc*)
  rm -rf "$DATA/$name" && mkdir -p "$DATA/$name"
  cp -r "$proc/dump.json" "$proc/stack.json" "$proc/dump_tensor_data" "$DATA/$name/"
done
rm -rf "$WORK"
