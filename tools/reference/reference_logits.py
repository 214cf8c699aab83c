"""Reference logits and greedy tokens from Hugging Face transformers.

Runs on the GPU host (torch + transformers, no network). For a model directory
and fixed prompts (token id lists), writes one JSON file with, per prompt:
  - greedy: the first N greedy token ids (no EOS stop),
  - steps[k].logits: the full next-token logits (float32) after the prompt and
    after each of the first K greedy tokens,
computed in float32 on the CPU (default) so that they are an exact-as-possible
reference for Quire's CPU backend.

The model must load whole: a checkpoint tensor the model does not find, or a model
weight the checkpoint lacks or gives another shape (which transformers would fill
with random values, a warning at most), stops the script instead of writing a
reference of other weights than Quire's.

usage: python3 tools/reference/reference_logits.py MODEL_DIR OUT.json
         [--prompts prompts.json] [--greedy 32] [--logit-steps 4] [--device cpu]
"""
import argparse
import json
import sys
import time

DEFAULT_PROMPTS = [
    [1, 2, 3, 4, 5, 6, 7, 8],
    [100, 37, 250, 11, 9, 301, 77, 5, 64, 128, 3, 200, 17, 42, 99, 150, 310, 8, 20, 33],
    [7],
]


def check_loading_info(info: dict) -> None:
    """Raises unless from_pretrained(output_loading_info=True) read every weight of the model, and only those."""
    problems = [f"{what}: {', '.join(str(k) for k in keys)}" for what, keys in (
        ("model weights the checkpoint lacks", info.get("missing_keys") or []),
        ("checkpoint tensors the model does not take", info.get("unexpected_keys") or []),
        ("weights of another shape", info.get("mismatched_keys") or []),
    ) if len(keys) > 0]
    if problems:
        raise ValueError("the checkpoint does not load whole; " + "; ".join(problems))


def main() -> int:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--prompts", help="JSON file: list of token id lists")
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--logit-steps", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    prompts = DEFAULT_PROMPTS
    if args.prompts:
        with open(args.prompts) as f:
            prompts = json.load(f)

    torch.manual_seed(0)
    model, info = AutoModelForCausalLM.from_pretrained(args.model_dir, torch_dtype=torch.float32, output_loading_info=True)
    check_loading_info(info)
    model.to(args.device).eval()
    vocab = model.config.vocab_size
    prompts = [[t % vocab for t in p] for p in prompts]

    results = []
    t0 = time.time()
    with torch.no_grad():
        for ids in prompts:
            seq = list(ids)
            greedy, steps = [], []
            for k in range(args.greedy):
                x = torch.tensor([seq], device=args.device)
                logits = model(input_ids=x).logits[0, -1].float().cpu()
                if k <= args.logit_steps:
                    steps.append({"position": len(seq), "logits": [round(v, 6) for v in logits.tolist()]})
                nxt = int(torch.argmax(logits).item())
                greedy.append(nxt)
                seq.append(nxt)
            results.append({"prompt": ids, "greedy": greedy, "steps": steps})

    out = {
        "model_dir": args.model_dir,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "dtype": "float32",
        "device": args.device,
        "seconds": round(time.time() - t0, 3),
        "prompts": results,
    }
    with open(args.out, "w") as f:
        json.dump(out, f)
    print(f"wrote {args.out}: {len(results)} prompts, {args.greedy} greedy tokens each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
