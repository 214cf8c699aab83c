#!/usr/bin/env bash
# For developers, on the GPU host (after `source .gpu-host/env.sh`, from the repo root, dist/ built): the figures of
# the CUDA performance issue's table in one run, each with its share of the roofline, printed and kept as JSON under
# ${OUT:-/tmp/bars}. Models are random-weight ones of bench/shapes.json, made once under /tmp.
#   bash scripts/gpu-bars.sh            # every row
#   ROWS="w2 w1" bash scripts/gpu-bars.sh   # some rows: w2 w1 w2-8b w1-8b prefill startup peer
#   ROWS="w2-ctx w2-8b-ctx" ...  # the decode issue's rows: batch 1 at 128, 4k, 16k and 32k of context (weights + K/V)
#   ROWS="batch-8b-ctx serve-ctx" ...  # and qwen3-8b at batch 8 and 64 with 4k of context; quire serve against bench
#   decode at concurrency 1 and 64 (qwen3-0.6b, 128 and 4k of context, 128 tokens out)
#   ROWS="w2-moe w1-moe prefill-moe serve-moe startup-moe" ...  # the mixture-of-experts issue's rows (qwen3-30b-a3b,
#   61 GB of bf16 on disk: made alone, not beside the 8b model on a 64 GiB disk)
#   ROWS="w2-hybrid w2-hybrid-32k w1-hybrid prefill-hybrid prefix-hybrid startup-hybrid" ...  # the hybrid issue's rows
#   (qwen3.5-27b, 54 GB under /dev/shm: not beside qwen3-30b-a3b there)
#   ROWS="spec-draft spec-self" ...  # the speculative-decoding issue's rows: a 208M target trained here (~3 minutes,
#   tools/train-demo with the demo model's tokenizer) and a draft of DRAFT_LAYERS (2) layers trained on the target's
#   greedy continuations (~2 minutes; DRAFT_LAYERS=demo: the demo model instead), on held-out text; K=5 proposals a step
#   ROWS="spec-ngram" ...  # n-gram speculation on a rewriting workload: "Rewrite this passage:" and a held-out passage
#   (~2,000 characters) as a chat, the answer copying it; the trained target (its corpus has 1,000 such chats of other
#   passages: train.py --rewrite-docs), NGRAM_K=5 proposals a step
#   ROWS="spec-eagle3" ...  # an EAGLE-3 head trained here for the trained target (tools/train-demo/train_eagle3.py,
#   ~60 s on the target's greedy text), on held-out text; K=5 proposals a step
#   ROWS="spec-mtp" ...  # the MTP head of qwen3.5-27b (random weights: proposals all but never accepted, so what this
#   measures is the head's cost): decode off, k = 1 and k = 3, batch 1 and 8 (a /dev/shm/m35 made before the head
#   was written by make-test-model lacks mtp.*: remove it first)
# QUIRE=... runs another build's CLI (an A/B against the same models in the same call).
# QUANT=fp8: the same rows on block-FP8 models (make-test-model --quantization fp8; beside the bars, not in their place).
set -uo pipefail
Q="${QUIRE:-node dist/src/cli/main.js}"
OUTDIR="${OUT:-/tmp/bars}"
mkdir -p "$OUTDIR"
ROWS="${ROWS:-w2 w1 w2-8b w1-8b prefill startup peer}"
QUANT="${QUANT:-}"
M06=/tmp/m06${QUANT:+-$QUANT}
M8=/tmp/m8${QUANT:+-$QUANT}
M30=${M30:-/dev/shm/m30${QUANT:+-$QUANT}}  # tmpfs: the host disk writes ~120 MB/s, 8 minutes for 58 GB
M35=${M35:-/dev/shm/m35${QUANT:+-$QUANT}}
quant=(${QUANT:+--quantization $QUANT --fast})  # quantizing real-valued random weights in JS takes minutes
common=(--backend cuda --force --max-model-len 4096)

make_model() { # dir shape [--fast]
  [[ -f "$1/config.json" ]] || node dist/src/cli/main.js make-test-model --shape "$2" --out "$1" "${@:3}" >/dev/null
}
want() { [[ " $ROWS " == *" $1 "* ]]; }
# one line of a bench offline JSON: its figures and their share of the floor / peak
summary() {
  node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    for (const x of r.results) console.log([
      x.workload === "prefill" ? `prefill: ${x.wallS.toFixed(2)} s` : `${x.workload}: ${x.outputTokensPerS.toFixed(1)} output tok/s in ${x.wallS.toFixed(2)} s`,
      x.shareOfBandwidthFloor !== undefined ? `${(100 * x.shareOfBandwidthFloor).toFixed(1)}% of its bandwidth floor` : null,
      x.modelTflopPerS !== undefined ? `${x.promptTokensPerS.toFixed(0)} prompt tok/s, ${x.modelTflopPerS.toFixed(1)} model TFLOP/s` : null,
      x.shareOfGemmPeak !== undefined ? `${(100 * x.shareOfGemmPeak).toFixed(1)}% of the ${x.gemmPeakTflopPerS.toFixed(1)} TFLOP/s GEMM peak` : null,
      `commit ${r.provenance.git?.commit?.slice(0, 7)}${r.provenance.git?.dirty ? " (dirty)" : ""}`,
    ].filter(Boolean).join(", "));' "$1"
}

if want w2 || want w1 || want peer || want w2-ctx || want serve-ctx; then make_model "$M06" qwen3-0.6b "${quant[@]}"; fi
if want w2-8b || want w2-8b-ctx || want batch-8b-ctx || want w1-8b || want prefill || want startup; then make_model "$M8" qwen3-8b --fast "${quant[@]}"; fi

if want w2-moe || want w1-moe || want prefill-moe || want serve-moe || want startup-moe; then
  make_model "$M30" qwen3-30b-a3b --fast "${quant[@]}"
fi

if want w2-hybrid || want w2-hybrid-32k || want w1-hybrid || want prefill-hybrid || want prefix-hybrid \
  || want startup-hybrid || want spec-mtp; then
  make_model "$M35" qwen3.5-27b --fast "${quant[@]}"
fi

# start-up row: `quire serve` of model $1 on port $2 (log $OUTDIR/$3.log) until /health answers, at most $4 s
startup_row() {
  local t0 t1 pid ms
  t0=$(date +%s%N)
  $Q serve --model "$1" --port "$2" --max-model-len 4096 >"$OUTDIR/$3.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 $(( $4 * 20 ))); do curl -sf "http://127.0.0.1:$2/health" >/dev/null 2>&1 && break; sleep 0.05; done
  t1=$(date +%s%N)
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  ms=$(( (t1 - t0) / 1000000 ))
  printf 'start-up: /health answered %d.%02d s after quire serve started\n' $((ms / 1000)) $((ms % 1000 / 10))
}

if want w2; then
  echo "== W2 qwen3-0.6b (bar 1,500 tok/s)"
  $Q bench decode --model "$M06" "${common[@]}" --batch-sizes 1 2>&1 | grep -E "roofline|tokens/s"
fi
if want w1; then
  echo "== W1 qwen3-0.6b (bar 20,000 output tok/s)"
  $Q bench offline --workload w1 --model "$M06" "${common[@]}" --max-num-seqs 256 --json "$OUTDIR/w1-06.json" >"$OUTDIR/w1-06.log" 2>&1; summary "$OUTDIR/w1-06.json"
fi
for row in w2-ctx w2-8b-ctx; do
  want $row || continue
  m=$([[ $row == w2-ctx ]] && echo "$M06" || echo "$M8")
  echo "== W2 $([[ $row == w2-ctx ]] && echo qwen3-0.6b || echo qwen3-8b), batch 1 by context (bar 80% of the roofline of weights + K/V at 4k, 16k, 32k)"
  $Q bench decode --model "$m" --backend cuda --force --max-model-len 33000 --context-lens 128,4096,16384,32000 --batch-sizes 1 2>&1 \
    | grep -E "roofline|tokens/s"
done
if want batch-8b-ctx; then
  echo "== qwen3-8b, batch 8 and 64 at 4k of context (bar 80% of the roofline of weights + K/V)"
  $Q bench decode --model "$M8" --backend cuda --force --max-model-len 4600 --context-lens 4096 --batch-sizes 8,64 2>&1 \
    | grep -E "roofline|tokens/s"
fi
if want serve-ctx; then
  echo "== qwen3-0.6b served (bench serve) against bench decode, concurrency 1 and 64, 128 tokens out (bar: serving costs <= 5%)"
  $Q bench decode --model "$M06" --backend cuda --force --max-model-len 4600 --context-lens 128,4096 \
    --batch-sizes 1,64 2>&1 | grep -E "tokens/s"
  port=18126
  $Q serve --model "$M06" --port "$port" --max-model-len 4600 --served-model-name m06 >"$OUTDIR/serve-ctx-server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
  for len in 128 4096; do
    for c in 1 64; do
      echo "-- served: prompt $len, concurrency $c"
      node dist/src/cli/main.js bench serve --force --target "quire=http://127.0.0.1:$port" --model m06 --workload custom \
        --prompt-len "$len" --output-len 128 --prompt-format ids --vocab-size 400 --concurrency "$c" \
        --num-requests $((c * 2)) --rounds 1 --warmup 1 --out "$OUTDIR/serve-ctx-$len-$c" >"$OUTDIR/serve-ctx-$len-$c.log" 2>&1
      grep -iE "tpot|output tok" "$OUTDIR/serve-ctx-$len-$c.log" | head -4
    done
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
fi
if want w2-8b; then
  echo "== W2 qwen3-8b (bar 165 tok/s)"
  $Q bench decode --model "$M8" "${common[@]}" --batch-sizes 1 2>&1 | grep -E "roofline|tokens/s"
fi
if want w1-8b; then
  echo "== W1 qwen3-8b (bar 6,000 output tok/s)"
  $Q bench offline --workload w1 --model "$M8" "${common[@]}" --max-num-seqs 256 --json "$OUTDIR/w1-8.json" >"$OUTDIR/w1-8.log" 2>&1; summary "$OUTDIR/w1-8.json"
fi
if want prefill; then
  echo "== prefill qwen3-8b, 32 x 2048 (bar 50% of the GEMM peak)"
  $Q bench offline --workload prefill --model "$M8" "${common[@]}" --json "$OUTDIR/prefill-8.json" >"$OUTDIR/prefill-8.log" 2>&1; summary "$OUTDIR/prefill-8.json"
fi
if want startup; then
  echo "== start-up qwen3-8b to /health (bar 15 s)"
  startup_row "$M8" 18123 startup 30
fi
if want w2-moe; then
  echo "== W2 qwen3-30b-a3b (bar 60% of the roofline of the bytes a token reads: router, 8 of 128 experts, attention, lm head)"
  $Q bench decode --model "$M30" "${common[@]}" --batch-sizes 1 2>&1 | grep -E "roofline|tokens/s"
fi
if want w1-moe; then
  echo "== W1 qwen3-30b-a3b (bar 6,000 output tok/s)"
  $Q bench offline --workload w1 --model "$M30" "${common[@]}" --max-num-seqs 256 --json "$OUTDIR/w1-30.json" >"$OUTDIR/w1-30.log" 2>&1; summary "$OUTDIR/w1-30.json"
fi
if want prefill-moe; then
  echo "== prefill qwen3-30b-a3b, 32 x 2048 (bar 35% of the GEMM peak, active-parameter FLOPs)"
  $Q bench offline --workload prefill --model "$M30" "${common[@]}" --json "$OUTDIR/prefill-30.json" >"$OUTDIR/prefill-30.log" 2>&1; summary "$OUTDIR/prefill-30.json"
fi
if want serve-moe; then
  echo "== serving qwen3-30b-a3b, 2,048 in / 1,024 out, concurrency 10 (bars TPOT <= 8 ms, >= 1,200 output tok/s)"
  port=18124
  $Q serve --model "$M30" --port "$port" --max-model-len 4096 --served-model-name m30 >"$OUTDIR/serve-30-server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 1200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
  node dist/src/cli/main.js bench serve --force --target "quire=http://127.0.0.1:$port" --model m30 --workload custom \
    --prompt-len 2048 --output-len 1024 --concurrency 10 --num-requests 30 --rounds 1 --warmup 2 \
    --out "$OUTDIR/serve-30" >"$OUTDIR/serve-30.log" 2>&1
  grep -iE "tpot|output tok|ttft|throughput" "$OUTDIR/serve-30.log" | head -12
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
fi
if want startup-moe; then
  echo "== start-up qwen3-30b-a3b to /health (bar 20 s, warm page cache)"
  cat "$M30"/*.safetensors >/dev/null
  startup_row "$M30" 18125 startup-30 60
fi
if want startup-hybrid; then
  echo "== start-up qwen3.5-27b to /health (no bar; warm page cache)"
  cat "$M35"/*.safetensors >/dev/null
  startup_row "$M35" 18126 startup-35 120
fi
if want w2-hybrid; then
  echo "== W2 qwen3.5-27b at 1k of context (bar 85% of the weight-bandwidth roofline)"
  $Q bench decode --model "$M35" "${common[@]}" --prompt-len 1000 --batch-sizes 1 2>&1 | grep -E "roofline|tokens/s"
fi
if want w2-hybrid-32k; then
  echo "== W2 qwen3.5-27b at 32k of context (bar 90% of its W2 at 1k)"
  $Q bench decode --model "$M35" --backend cuda --force --max-model-len 33000 --prompt-len 32000 --batch-sizes 1 2>&1 | grep -E "roofline|tokens/s"
fi
if want w1-hybrid; then
  echo "== W1 qwen3.5-27b (bar 50% of its bandwidth floor)"
  $Q bench offline --workload w1 --model "$M35" "${common[@]}" --max-num-seqs 256 --json "$OUTDIR/w1-35.json" >"$OUTDIR/w1-35.log" 2>&1; summary "$OUTDIR/w1-35.json"
fi
if want prefill-hybrid; then
  echo "== prefill qwen3.5-27b, 32 x 2048 (bar 45% of the GEMM peak)"
  $Q bench offline --workload prefill --model "$M35" "${common[@]}" --json "$OUTDIR/prefill-35.json" >"$OUTDIR/prefill-35.log" 2>&1; summary "$OUTDIR/prefill-35.json"
fi
if want prefix-hybrid; then
  echo "== prefix-cache hit vs miss on a 4k shared prompt, qwen3.5-27b, one request at a time (bar TTFT of a hit <= 25% of a miss)"
  $Q bench offline --workload w5 --model "$M35" --backend cuda --force --max-model-len 8192 --prefix-len 4000 --suffix-len 100 \
    --concurrency 1 --num-requests 8 --output-len 1 >"$OUTDIR/prefix-35.log" 2>&1; grep -iE "ttft|prefix" "$OUTDIR/prefix-35.log" | tail -3
fi
if want spec-mtp; then
  echo "== the MTP head's cost, qwen3.5-27b at 1k of context (random weights: nothing accepted): off, k = 1, k = 3"
  for spec in '' '{"method":"mtp","num_speculative_tokens":1}' '{"method":"mtp","num_speculative_tokens":3}'; do
    echo "-- ${spec:-off}"
    $Q bench decode --model "$M35" "${common[@]}" --prompt-len 1000 --batch-sizes 1,8 ${spec:+--speculative-config "$spec"} 2>&1 \
      | grep -E "roofline|tokens/s|acceptance"
  done
fi
if want peer; then
  echo "== peer: W1 first 64 x 128, qwen3-0.6b, Quire vs transformers continuous batching"
  node dist/src/cli/main.js bench offline --workload w1 --model "$M06" --num-requests 64 --output-len 128 \
    --dump-prompts "$OUTDIR/w1-64-prompts.json" >/dev/null 2>&1
  $Q bench offline --workload w1 --model "$M06" "${common[@]}" --num-requests 64 --output-len 128 \
    --json "$OUTDIR/peer-quire.json" >"$OUTDIR/peer-quire.log" 2>&1; summary "$OUTDIR/peer-quire.json"
  py=/opt/torch/.venv/bin/python
  [[ -x "$py" ]] || py=python3
  timeout -k 5 300 "$py" tools/reference/peer_generate_batch.py --model "$M06" --prompts "$OUTDIR/w1-64-prompts.json" \
    --json "$OUTDIR/peer-transformers.json" >"$OUTDIR/peer-transformers.log" 2>&1; summary "$OUTDIR/peer-transformers.json"
fi

if want spec-draft || want spec-self || want spec-ngram || want spec-eagle3; then
  TARGET=${TARGET:-/dev/shm/spec-target}
  py=/opt/torch/.venv/bin/python
  [[ -x "$py" ]] || py=python3
  [[ -f "$TARGET/config.json" ]] || PYTHON="$py" bash tools/train-demo/run.sh "$TARGET" --tokenizer-from models/quire-demo \
    --hidden-size 1024 --num-layers 16 --num-heads 16 --num-kv-heads 8 --intermediate-size 3072 --lr 1e-3 --time-budget-s 100 --rewrite-docs 1000 \
    >"$OUTDIR/spec-train.log" 2>&1
fi
if want spec-draft || want spec-self || want spec-eagle3; then
  # the draft: DRAFT_LAYERS layers trained on the target's own greedy continuations (session 33 call F: the recipe
  # that first paid on held-out text); DRAFT_LAYERS=demo takes the bundled demo model as it is
  DRAFT_LAYERS=${DRAFT_LAYERS:-2}
  DRAFT=models/quire-demo
  if [[ "$DRAFT_LAYERS" != demo ]] && (want spec-draft || want spec-self); then
    DRAFT=/dev/shm/spec-draft-$DRAFT_LAYERS
    [[ -f "$DRAFT/config.json" ]] || PYTHON="$py" bash tools/train-demo/run.sh "$DRAFT" --tokenizer-from models/quire-demo \
      --num-layers "$DRAFT_LAYERS" --distill-from "$TARGET" --distill-generate 2048 --seq-len 256 --steps 1000 \
      --time-budget-s 40 >"$OUTDIR/spec-train-draft.log" 2>&1
  fi
  # prompts the models were not trained on: the held-out documents' openings
  node -e '
    const docs = require("fs").readFileSync("tools/train-demo/data/heldout.txt", "utf8").split("<|endoftext|>\n");
    for (const d of docs) if (d.trim() && !d.includes("<|im_start|>")) console.log(JSON.stringify({ prompt: d.trim() }));' \
    >"$OUTDIR/heldout.jsonl"
  spec=(--backend cuda --force --max-model-len 2048 --prompt-file "$OUTDIR/heldout.jsonl" --prompt-len 64 --batch-sizes 1,64)
  draft() { echo "{\"method\": \"draft_model\", \"model\": \"$1\", \"num_speculative_tokens\": ${K:-5}}"; }
  echo "== W2 the trained target alone (the speculative rows' baseline)"
  $Q bench decode --model "$TARGET" "${spec[@]}" 2>&1 | grep -E "tokens/s"
fi
if want spec-draft; then
  echo "== W2 with $DRAFT as its draft, k = ${K:-5} (bars: >= 2.0x at batch 1, no slower at 64)"
  $Q bench decode --model "$TARGET" "${spec[@]}" --speculative-config "$(draft "$DRAFT")" 2>&1 | grep -E "tokens/s"
fi
if want spec-ngram; then
  # a rewriting request: a held-out passage (whole sentences, up to ~2,000 characters) in the chat template, whose
  # answer copies it (the target learned the task from train.py --rewrite-docs, on other passages)
  node -e '
    const docs = require("fs").readFileSync("tools/train-demo/data/heldout.txt", "utf8").split("<|endoftext|>\n");
    for (const d of docs) {
      if (d.includes("<|im_start|>")) continue;
      const text = d.split(/\s+/).join(" ").trim(), cut = text.slice(0, 2000), end = cut.lastIndexOf(". ");
      if (text.length < 1500) continue;
      const passage = end > 1000 ? cut.slice(0, end + 1) : cut;
      console.log(JSON.stringify({ prompt: `<|im_start|>user\nRewrite this passage:\n${passage}<|im_end|>\n<|im_start|>assistant\n` }));
    }' >"$OUTDIR/rewrite.jsonl"
  rw=(--backend cuda --force --max-model-len 2048 --prompt-file "$OUTDIR/rewrite.jsonl" --prompt-len 1024 --batch-sizes 1)
  echo "== W2 rewriting, the trained target alone"
  $Q bench decode --model "$TARGET" "${rw[@]}" 2>&1 | grep -E "tokens/s"
  echo "== W2 rewriting, n-gram k = ${NGRAM_K:-5} (bar: >= 2.0x)"
  $Q bench decode --model "$TARGET" "${rw[@]}" --speculative-config \
    "{\"method\": \"ngram\", \"num_speculative_tokens\": ${NGRAM_K:-5}, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}" \
    2>&1 | grep -E "tokens/s"
fi
if want spec-eagle3; then
  HEAD=${HEAD:-/dev/shm/spec-eagle3}
  [[ -f "$HEAD/config.json" ]] || "$py" tools/train-demo/train_eagle3.py --target "$TARGET" --out "$HEAD" \
    --time-budget-s 60 >"$OUTDIR/spec-train-eagle3.log" 2>&1
  grep -E "^step|^wrote" "$OUTDIR/spec-train-eagle3.log" | tail -3
  echo "== W2 with an EAGLE-3 head trained for it, k = ${K:-5} (bar: >= 2.3x at batch 1)"
  $Q bench decode --model "$TARGET" "${spec[@]}" --speculative-config \
    "{\"method\": \"eagle3\", \"model\": \"$HEAD\", \"num_speculative_tokens\": ${K:-5}}" 2>&1 | grep -E "tokens/s"
fi
if want spec-self; then
  echo "== W2 with the target as its own draft, k = ${K:-5} (acceptance ~100%: the machinery's cost)"
  $Q bench decode --model "$TARGET" "${spec[@]}" --speculative-config "$(draft "$TARGET")" 2>&1 | grep -E "tokens/s"
fi
