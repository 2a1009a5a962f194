#!/bin/sh
# Write tests/data/unet_<dtype> and tests/data/seq_<dtype> (fp32, bf16, autocast: a diffusion-style U-Net and
# a recurrent-convolutional sequence model, one training step each) with msprobe 26.2.0 in its own venv:
#   PYTHON=VENV/bin/python sh tests/data/make/heldout47_dumps.sh
# VENV: python -m venv VENV && VENV/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"
set -e
PYTHON=${PYTHON:-python}
MAKE=$(cd "$(dirname "$0")" && pwd)
DATA=$(dirname "$MAKE")
WORK=$(mktemp -d)
cd "$WORK"
for model in unet seq; do
  for dtype in fp32 bf16 autocast; do
    rm -rf out
    DTYPE=$dtype "$PYTHON" "$MAKE/${model}_dump.py" "$MAKE/${model}_tensor_L1.json" 2>&1 | grep -v '\[INFO\]'
    proc=$(echo out/${model}_tensor_L1/step0/proc*)
    rm -rf "$DATA/${model}_$dtype" && mkdir -p "$DATA/${model}_$dtype"
    cp -r "$proc/dump.json" "$proc/stack.json" "$proc/dump_tensor_data" "$DATA/${model}_$dtype/"
  done
done
rm -rf "$WORK"
