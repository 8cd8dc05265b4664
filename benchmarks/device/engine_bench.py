#!/usr/bin/env python3
"""transformers' generate on the shapes of benchmarks/engine_bench.cpp (random Qwen3-0.6B and
Qwen3-1.7B weights, bf16, sdpa attention, sampling at temperature 1 without top-k/top-p, no EOS, so
every row generates N tokens), with its dynamic cache and with cache_implementation="static".
Reads engine_bench's RESULT lines from $OUT/engine_bench.txt (run_all.sh writes it just before)
and prints the combined table last: turnrl's engine against transformers and the roofline.

    python3 benchmarks/device/engine_bench.py [--device cuda] [--quick] [--turnrl FILE]
"""
import argparse
import os
import re
import time

import torch

SHAPES = {  # Qwen3 config.json values (released models), vocabulary 151,936
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
}


def build(shape, device):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = Qwen3Config(vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000,
                         attn_implementation="sdpa", **SHAPES[shape])
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    return model.eval()


def tokens_per_second(model, batch, prompt, new, device, static):
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device=device)
    mask = torch.ones_like(ids)
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new, min_new_tokens=new,
                  eos_token_id=None, pad_token_id=0)
    if static:
        kwargs["cache_implementation"] = "static"
    # The static cache is compiled for its length, so it is warmed with the timed length (a shorter
    # warm-up would time the recompilation); the dynamic cache compiles nothing, so 8 tokens warm it.
    warm = kwargs if static else dict(kwargs, max_new_tokens=8, min_new_tokens=8)
    with torch.no_grad():
        model.generate(ids, attention_mask=mask, **warm)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, **kwargs)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    assert out.shape[1] == prompt + new, out.shape
    return batch * new / seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--static-only", action="store_true", help="time only the static cache")
    parser.add_argument("--cases", default="", help="shape:B[,shape:B...] to time, e.g. qwen3-1.7b:64 (default: engine_bench's)")
    parser.add_argument("--turnrl", default=os.path.join(os.environ.get("OUT", "/tmp/turnrl-device-out"), "engine_bench.txt"))
    args = parser.parse_args()
    if args.device != "cuda":
        print("engine_bench.py: the transformers baseline runs on cuda only")
        return
    import transformers
    turnrl = {}
    if os.path.exists(args.turnrl):
        for line in open(args.turnrl):
            if line.startswith("RESULT "):
                r = dict(kv.split("=") for kv in line.split()[1:])
                turnrl[(r["shape"], int(r["batch"]), int(r["prompt"]), int(r["new"]))] = r
    cases = sorted(turnrl) or [("qwen3-0.6b", 64, 256, 64 if args.quick else 256)]
    if args.cases:
        wanted = []
        for case in args.cases.split(","):
            shape, _, batch = case.partition(":")
            if shape not in SHAPES or not batch.isdigit():
                parser.error(f"--cases: '{case}' is not shape:B with shape one of {', '.join(SHAPES)}")
            wanted.append((shape, int(batch), 256, 64 if args.quick else 256))
        cases = wanted
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    rows = []
    model, model_shape = None, None
    for shape, batch, prompt, new in cases:
        if shape != model_shape:
            model = None
            torch.cuda.empty_cache()
            model, model_shape = build(shape, args.device), shape
        hf = float("nan") if args.static_only else tokens_per_second(model, batch, prompt, new, args.device, static=False)
        hf_static = tokens_per_second(model, batch, prompt, new, args.device, static=True)
        print(f"{shape} B={batch} P={prompt} N={new}: transformers {hf:.0f} tok/s, static cache {hf_static:.0f} tok/s",
              flush=True)
        rows.append((shape, batch, prompt, new, hf, hf_static, turnrl.get((shape, batch, prompt, new))))
    print()
    print(f"{'shape':<11} {'B':>4} {'P':>4} {'N':>4} | {'turnrl':>8} {'roofline':>9} {'share':>6} | "
          f"{'HF':>7} {'x HF':>6} | {'HF static':>9} {'x static':>8}")
    for shape, batch, prompt, new, hf, hf_static, t in rows:
        if t:
            rate, roof = float(t["engine_tok_s"]), float(t["roofline_tok_s"])
            print(f"{shape:<11} {batch:>4} {prompt:>4} {new:>4} | {rate:>8.0f} {roof:>9.0f} {100 * rate / roof:>5.1f}% | "
                  f"{hf:>7.0f} {rate / hf:>6.2f} | {hf_static:>9.0f} {rate / hf_static:>8.2f}")
        else:
            print(f"{shape:<11} {batch:>4} {prompt:>4} {new:>4} | {'-':>8} {'-':>9} {'-':>6} | {hf:>7.0f} {'-':>6} | "
                  f"{hf_static:>9.0f} {'-':>8}")


if __name__ == "__main__":
    main()
