#!/bin/sh
# Write tests/data/hybrid_<dtype> (fp32, bf16, autocast: a small hybrid CNN + ViT, one training step) with
# msprobe 26.2.0 in its own venv:
#   PYTHON=VENV/bin/python sh tests/data/make/hybrid_dumps.sh
# VENV: python -m venv VENV && VENV/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"
set -e
PYTHON=${PYTHON:-python}
MAKE=$(cd "$(dirname "$0")" && pwd)
DATA=$(dirname "$MAKE")
WORK=$(mktemp -d)
cd "$WORK"
for dtype in fp32 bf16 autocast; do
  rm -rf out
  DTYPE=$dtype "$PYTHON" "$MAKE/hybrid_dump.py" "$MAKE/hybrid_tensor_L1.json" 2>&1 | grep -v '\[INFO\]'
  proc=$(echo out/hybrid_tensor_L1/step0/proc*)
  rm -rf "$DATA/hybrid_$dtype" && mkdir -p "$DATA/hybrid_$dtype"
  cp -r "$proc/dump.json" "$proc/stack.json" "$proc/dump_tensor_data" "$DATA/hybrid_$dtype/"
done
rm -rf "$WORK"
