#!/usr/bin/env bash
# The one command for the GPU host: bash tools/train-demo/run.sh OUTDIR [extra train.py flags]
set -euo pipefail
OUT=${1:?usage: bash tools/train-demo/run.sh OUTDIR [train.py flags]}
shift
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
if [ ! -s "$HERE/data/corpus.txt" ] || [ ! -s "$HERE/data/heldout.txt" ]; then
  "$PYTHON" "$HERE/prepare_data.py" ${KJV_DEB_DIR:+--deb-dir "$KJV_DEB_DIR"}
fi
"$PYTHON" "$HERE/train.py" --out "$OUT" "$@"
