#!/bin/sh
# Write tests/data/ssm_fp32, ssm_bf16 (tensor) and ssm_stats (statistics) with msprobe 26.2.0 in its
# own venv:
#   PYTHON=VENV/bin/python sh tests/data/make/ssm_dumps.sh
# VENV: python -m venv VENV && VENV/bin/pip install torch==2.13.0 mindstudio-probe==26.2.0 "numpy<2" "pandas<3" "ml_dtypes<0.6"
set -e
PYTHON=${PYTHON:-python}
MAKE=$(cd "$(dirname "$0")" && pwd)
DATA=$(dirname "$MAKE")
WORK=$(mktemp -d)
cd "$WORK"
for name in ssm_fp32 ssm_bf16 ssm_stats; do
  case $name in ssm_stats) task=statistics dtype=fp32 ;; *) task=tensor dtype=${name#*_} ;; esac
  rm -rf out
  DTYPE=$dtype "$PYTHON" "$MAKE/ssm_dump.py" $task out 2>&1 | grep -v '\[INFO\]'
  proc=$(echo out/step0/proc*)
  rm -rf "$DATA/$name" && mkdir -p "$DATA/$name"
  cp -r "$proc/dump.json" "$proc/stack.json" "$DATA/$name/"
  if [ -d "$proc/dump_tensor_data" ]; then cp -r "$proc/dump_tensor_data" "$DATA/$name/"; fi
done
rm -rf "$WORK"
