#!/bin/sh
# Write tests/data/gpt_<dtype> (seq 48, the whole step) and tests/data/gpt512_<dtype> (seq 512, the last
# chunk's softmax) with msprobe 26.2.0 in its own venv:
#   PYTHON=VENV/bin/python sh tests/data/make/gpt_dumps.sh
# VENV: python -m venv VENV && VENV/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"
set -e
PYTHON=${PYTHON:-python}
MAKE=$(cd "$(dirname "$0")" && pwd)
DATA=$(dirname "$MAKE")
WORK=$(mktemp -d)
cd "$WORK"
for dtype in fp32 bf16 fp16; do
  for seq in 48 512; do
    if [ "$seq" = 48 ]; then config=gpt_tensor_L1; name=gpt_$dtype; else config=gpt_tensor_L1_512; name=gpt512_$dtype; fi
    rm -rf out
    DTYPE=$dtype SEQ=$seq "$PYTHON" "$MAKE/gpt_dump.py" "$MAKE/$config.json" 2>&1 | grep -v '\[INFO\]'
    proc=$(echo out/$config/step0/proc*)
    rm -rf "$DATA/$name" && mkdir -p "$DATA/$name"
    cp -r "$proc/dump.json" "$proc/stack.json" "$proc/dump_tensor_data" "$DATA/$name/"
  done
done
rm -rf "$WORK"
