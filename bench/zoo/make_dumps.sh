#!/bin/sh
# Write bench/zoo/dumps/<model>_<dtype> with msprobe 26.2.0 in its own venv (see make_dump.py):
#   PYTHON=VENV/bin/python [DTYPES="fp32 bf16"] [TASK=statistics] [SUFFIX=_wide WIDTH=1024 ...] sh bench/zoo/make_dumps.sh [model ...]
# VENV: python -m venv VENV && VENV/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"
set -e
PYTHON=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
MODELS=${*:-gpt2 bert t5 vit gemma mamba qwenmoe torchnn bloom neox mistral deepseek unet convnet swin clip linattn segdet}
WORK=$(mktemp -d)
cd "$WORK"
for model in $MODELS; do
  for dtype in ${DTYPES:-fp32 bf16 fp16 amp}; do
    rm -rf out
    MODEL=$model DTYPE=$dtype "$PYTHON" "$HERE/make_dump.py" out/dump 2>&1 | grep -v '\[INFO\]' || true
    proc=$(echo out/dump/step0/proc*)
    [ -f "$proc/dump.json" ] || { echo "make_dumps.sh: no dump for $model $dtype"; continue; }
    name=${model}${SUFFIX}_$dtype${TASK:+_$TASK}
    rm -rf "$HERE/dumps/$name" && mkdir -p "$HERE/dumps/$name"
    cp -r "$proc/dump.json" "$proc/stack.json" "$HERE/dumps/$name/"
    [ -d "$proc/dump_tensor_data" ] && cp -r "$proc/dump_tensor_data" "$HERE/dumps/$name/"
  done
done
rm -rf "$WORK"
