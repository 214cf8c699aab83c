"""W1 offline throughput on Hugging Face transformers' continuous batching: the peer to
`quire bench offline --workload w1`, printing the same JSON result shape
(bench/offline-result.schema.json, checked before printing).

Runs on the GPU host (torch + transformers 5.x, no network). Give it the prompts quire
itself runs, so both engines see the same token ids:

  quire bench offline --workload w1 --model DIR --dump-prompts out/w1-prompts.json
  /opt/torch/.venv/bin/python tools/reference/peer_generate_batch.py --model DIR --prompts out/w1-prompts.json

--prompts may also be bench/offline-256.json itself (ids are then folded into the model's
vocabulary as quire does). Greedy, EOS ignored, bf16 on cuda by default; 4 warm-up requests
of 4 tokens run first and are not timed, as in quire. --api manager (default) submits each
request with its own max_new_tokens through init_continuous_batching(); --api generate-batch
calls model.generate_batch(), which takes one max_new_tokens for all (use --output-len) and
builds a fresh manager per call, so its wall time includes that set-up.

--self-check needs no torch: it loads the prompts, shapes a result as the real run would and
checks it against the schema (used by quire's test suite).
"""
import argparse
import datetime
import inspect
import json
import os
import platform
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
SCHEMA_PATH = os.path.join(REPO_ROOT, "bench", "offline-result.schema.json")
DEFAULT_PROMPTS = os.path.join(REPO_ROOT, "bench", "offline-256.json")
ENGINE_NAME = "transformers-cb"
NUM_WARMUP_REQUESTS = 4
WARMUP_TOKENS = 4


def parse_args(argv):
    ap = argparse.ArgumentParser(description="W1 offline throughput on transformers continuous batching")
    ap.add_argument("--model", help="Hugging Face model directory")
    ap.add_argument("--prompts", default=DEFAULT_PROMPTS,
                    help="quire's --dump-prompts file, or an offline-256.json-shaped file")
    ap.add_argument("--num-requests", type=int, help="first n requests")
    ap.add_argument("--output-len", type=int, help="one output length for every request")
    ap.add_argument("--workload", default="w1", help="workload name in the result")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    ap.add_argument("--attn-implementation", default="paged|sdpa", help="transformers 5.17 names: paged|sdpa, paged|flash_attention_2, ...")
    ap.add_argument("--api", choices=["manager", "generate-batch"], default="manager")
    ap.add_argument("--vocab-size", type=int, help="--self-check: vocabulary to fold raw prompt ids into")
    ap.add_argument("--json", help="also write {provenance, results: [result]} here, as quire bench offline --json does")
    ap.add_argument("--self-check", action="store_true", help="no torch: load, shape and validate only")
    args = ap.parse_args(argv)
    if not args.self_check and not args.model:
        ap.error("--model is required (unless --self-check)")
    for name in ("num_requests", "output_len", "vocab_size"):
        v = getattr(args, name)
        if v is not None and v <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    return args


def load_prompts(path, vocab_size, num_requests=None, output_len=None):
    """[(prompt ids, max tokens)] as quire's loadW1 builds them.

    A quire dump carries the vocabSize it folded into, which must be the model's; a raw
    offline-256.json is folded here (id % vocab_size)."""
    with open(path) as f:
        obj = json.load(f)
    reqs = obj.get("requests") if isinstance(obj, dict) else None
    if not isinstance(reqs, list) or not reqs:
        raise ValueError(f'{path}: expected {{"requests": [...]}}')
    dumped_vocab = obj.get("vocabSize")
    if dumped_vocab is not None and vocab_size is not None and dumped_vocab != vocab_size:
        raise ValueError(f"{path}: prompts were folded into a vocabulary of {dumped_vocab}, the model has {vocab_size}")
    fold = vocab_size if dumped_vocab is None else None
    out = []
    for i, r in enumerate(reqs[:num_requests] if num_requests else reqs):
        ids, n = r.get("prompt_token_ids"), r.get("max_tokens")
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids) \
                or not isinstance(n, int) or isinstance(n, bool):
            raise ValueError(f"{path}: request {i} needs prompt_token_ids (ints) and max_tokens (int)")
        if fold is not None:
            ids = [t % fold for t in ids]
        limit = vocab_size if vocab_size is not None else dumped_vocab
        if limit is not None and any(t < 0 or t >= limit for t in ids):
            raise ValueError(f"{path}: request {i} has a token id outside [0, {limit})")
        out.append((ids, output_len if output_len is not None else n))
    return out


def percentile(values, p):
    """Linear interpolation between closest ranks, as quire's stats.percentile."""
    if not values:
        return None
    s = sorted(values)
    rank = (len(s) - 1) * p / 100
    lo, hi = int(rank // 1), int(-(-rank // 1))
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def shape_result(workload, requests, num_output_tokens, wall_s, ttfts_ms, provenance=None):
    result = {
        "engine": ENGINE_NAME,
        "workload": workload,
        "numRequests": len(requests),
        "numPromptTokens": sum(len(ids) for ids, _ in requests),
        "numOutputTokens": num_output_tokens,
        "wallS": wall_s,
        "outputTokensPerS": num_output_tokens / wall_s if wall_s > 0 else 0.0,
        "ttftP50Ms": percentile(ttfts_ms, 50),
    }
    if provenance is not None:
        result["provenance"] = provenance
    return result


def _type_of(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def schema_errors(value, schema, path="$"):
    """The same JSON Schema subset as src/lab/result-schema.ts: type, required, properties,
    additionalProperties, minimum."""
    actual = _type_of(value)
    if actual == "number" and (value != value or value in (float("inf"), float("-inf"))):
        return [f"{path}: {value} is not a JSON number"]
    if "type" in schema:
        expected = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(actual == t or (t == "number" and actual == "integer") for t in expected):
            return [f"{path}: expected {' or '.join(expected)}, got {actual}"]
    errors = []
    if "minimum" in schema and actual in ("integer", "number") and value < schema["minimum"]:
        errors.append(f"{path}: {value} is below the minimum {schema['minimum']}")
    if actual == "object":
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f'{path}: missing required key "{key}"')
        props = schema.get("properties", {})
        for key, v in value.items():
            if key in props:
                errors.extend(schema_errors(v, props[key], f"{path}.{key}"))
            elif schema.get("additionalProperties") is False:
                errors.append(f'{path}: unexpected key "{key}"')
    return errors


def load_schema(path=SCHEMA_PATH):
    with open(path) as f:
        return json.load(f)


def checked_json(result, schema):
    errors = schema_errors(result, schema)
    if errors:
        raise ValueError(f"result does not match {os.path.relpath(SCHEMA_PATH, REPO_ROOT)}: " + "; ".join(errors))
    return json.dumps(result, indent=2)


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def parse_nvidia_smi(csv):
    gpus = []
    for line in csv.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 5:
            gpus.append({"index": int(f[0]), "name": f[1], "driverVersion": f[2], "computeCapability": f[3],
                         "memoryTotalMiB": float(f[4].replace("MiB", "").strip())})
    return gpus


def host_info():
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
            mem_gib = round(kib / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return {"hostname": socket.gethostname(), "platform": f"{sys.platform} {platform.machine()}",
            "kernel": platform.release(), "cpuModel": platform.processor() or "unknown",
            "numCpuCores": os.cpu_count(), "memoryTotalGiB": mem_gib}


def provenance(config, libraries):
    smi = _run(["nvidia-smi", "--query-gpu=index,name,driver_version,compute_cap,memory.total",
                "--format=csv,noheader,nounits"])
    commit = _run(["git", "-C", REPO_ROOT, "rev-parse", "HEAD"])
    dirty = _run(["git", "-C", REPO_ROOT, "status", "--porcelain", "--untracked-files=no"]) if commit else None
    return {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "gpus": parse_nvidia_smi(smi) if smi else [],
        "host": host_info(),
        "cudaLibraries": libraries,
        "git": {"commit": commit.strip(), "dirty": bool((dirty or "").strip())} if commit else None,
        "pythonVersion": platform.python_version(),
        "config": config,
    }


def self_check(args):
    requests = load_prompts(args.prompts, args.vocab_size, args.num_requests, args.output_len)
    num_output_tokens = sum(n for _, n in requests)
    result = shape_result(args.workload, requests, num_output_tokens, 1.0, [],
                          provenance({"command": "self-check", **vars(args)}, {}))
    checked_json(result, load_schema())
    print(json.dumps({
        "numRequests": result["numRequests"],
        "numPromptTokens": result["numPromptTokens"],
        "numMaxTokens": num_output_tokens,
        "firstPrompt": requests[0][0],
        "resultKeys": sorted(result),
    }))
    return 0


def _supported(fn, kwargs):
    """The kwargs fn names (not those its **kwargs would swallow): older releases lack some."""
    params = inspect.signature(fn).parameters
    return {k: v for k, v in kwargs.items() if k in params and params[k].kind != params[k].VAR_KEYWORD}


def run_peer(args):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, GenerationConfig

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation=args.attn_implementation,
                                                 device_map=args.device)
    model.eval()
    requests = load_prompts(args.prompts, model.config.vocab_size, args.num_requests, args.output_len)
    lengths = {n for _, n in requests}
    if args.api == "generate-batch" and len(lengths) > 1:
        raise SystemExit("--api generate-batch takes one max_new_tokens for all requests: give --output-len")
    gen = GenerationConfig(max_new_tokens=max(lengths), do_sample=False)
    gen.eos_token_id = -1  # EOS ignored, as quire's W1

    warmup = [(ids, WARMUP_TOKENS) for ids, _ in requests[:NUM_WARMUP_REQUESTS]]
    if args.api == "manager":
        outputs, wall_s = _run_manager(model, gen, warmup, requests)
    else:
        outputs, wall_s = _run_generate_batch(model, gen, warmup, requests)

    ttfts_ms = [(o.timestamps[0] - o.created_time) * 1000 for o in outputs if getattr(o, "timestamps", None)]
    num_output_tokens = sum(len(o.generated_tokens) for o in outputs)
    libraries = {"torch": torch.__version__, "transformers": transformers.__version__,
                 "cuda": torch.version.cuda or "none", "cudnn": str(torch.backends.cudnn.version())}
    if torch.cuda.is_available():
        libraries["device"] = torch.cuda.get_device_name(0)
    config = {"command": "peer_generate_batch", **vars(args), "dtype": args.dtype, "eosIgnored": True, "greedy": True}
    result = shape_result(args.workload, requests, num_output_tokens, wall_s, ttfts_ms, provenance(config, libraries))
    text = checked_json(result, load_schema())
    print(text)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"provenance": result["provenance"], "results": [result]}, f, indent=2)
    return 0


def _collect(manager, ids):
    pending, done = set(ids), {}
    while pending:
        out = manager.get_result(timeout=1)
        if out is None:
            if not manager.is_running():
                raise RuntimeError(f"the generation thread stopped with {len(pending)} requests unfinished")
            continue
        if out.request_id in pending and out.is_finished():
            if getattr(out, "error", None):
                raise RuntimeError(f"{out.request_id}: {out.error}")
            pending.discard(out.request_id)
            done[out.request_id] = out
    return [done[i] for i in ids]


def _submit(manager, prefix, requests):
    ids = []
    for i, (prompt, n) in enumerate(requests):
        request_id = f"{prefix}{i}"
        kwargs = _supported(manager.add_request, {"max_new_tokens": n, "record_timestamps": True, "eos_token_id": -1})
        manager.add_request(prompt, request_id=request_id, **kwargs)
        ids.append(request_id)
    return ids


def _run_manager(model, gen, warmup, requests):
    import torch

    manager = model.init_continuous_batching(generation_config=gen)
    if hasattr(manager, "warmup"):
        manager.warmup()
    manager.start()
    try:
        _collect(manager, _submit(manager, "warmup_", warmup))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outputs = _collect(manager, _submit(manager, "req_", requests))
        wall_s = time.perf_counter() - t0
    finally:
        manager.stop(block=True)
    return outputs, wall_s


def _run_generate_batch(model, gen, warmup, requests):
    """Each generate_batch call builds its own manager: the timed call includes its cache allocation and warm-up."""
    import torch

    kwargs = _supported(model.generate_batch, {"record_timestamps": True, "progress_bar": False})
    model.generate_batch([ids for ids, _ in warmup], generation_config=gen, **kwargs)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate_batch([ids for ids, _ in requests], generation_config=gen, **kwargs)
    wall_s = time.perf_counter() - t0
    if len(out) != len(requests):
        raise RuntimeError(f"generate_batch returned {len(out)} of {len(requests)} requests")
    return list(out.values()), wall_s


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return self_check(args) if args.self_check else run_peer(args)


if __name__ == "__main__":
    sys.exit(main())
