#!/bin/sh
# Write tests/data/cnn_<dtype> (a small ResNet-like CNN, one training step) with msprobe 26.2.0 in its own venv:
#   PYTHON=VENV/bin/python sh tests/data/make/cnn_dumps.sh
# VENV: python -m venv VENV && VENV/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"
set -e
PYTHON=${PYTHON:-python}
MAKE=$(cd "$(dirname "$0")" && pwd)
DATA=$(dirname "$MAKE")
WORK=$(mktemp -d)
cd "$WORK"
for dtype in fp32 bf16 fp16; do
  rm -rf out
  DTYPE=$dtype "$PYTHON" "$MAKE/cnn_dump.py" "$MAKE/cnn_tensor_L1.json" 2>&1 | grep -v '\[INFO\]'
  proc=$(echo out/cnn_tensor_L1/step0/proc*)
  rm -rf "$DATA/cnn_$dtype" && mkdir -p "$DATA/cnn_$dtype"
  cp -r "$proc/dump.json" "$proc/stack.json" "$proc/dump_tensor_data" "$DATA/cnn_$dtype/"
done
rm -rf "$WORK"
