#!/usr/bin/env bash
# The training step at LLM size on the GPU machine: builds train_step_bench against
# PyTorch's LibTorch (CUDA), runs it on the Qwen3-1.7B shape in bf16, then the transformers
# baseline of the same shape (train_step_bench.py) in the same call, and prints turnrl /
# transformers for forward+backward and for the RL step, and the peak memory of T=8192 beside
# transformers' with gradient checkpointing.
# Device call:   run(command="benchmarks/device/train_step_bench.sh", carry=[".deps"])
# Extra arguments go to run_all.sh (e.g. --bench-args --profile).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/turnrl-device-out}
mkdir -p "$OUT"
benchmarks/device/run_all.sh --no-tests --targets "train_step_bench" --bench train_step_bench "$@"
cpp="$OUT/train_step_bench.txt" py="$OUT/train_step_bench_py.txt"
python3 - "$cpp" "$py" <<'PY'
import re, sys
cpp, py = (open(p).read() if p else "" for p in sys.argv[1:3])
results = dict((m[0], float(m[1])) for m in re.findall(r"RESULT (\S+) ([0-9.]+)", py))
def turnrl(label):
    m = re.search(re.escape(label) + r"[^|]*\|\s*([0-9.]+)", cpp)
    return float(m.group(1)) if m else None
print("\n== turnrl against transformers (same run)")
for name, label, key in (("fwd+bwd B=8 T=1024", "fwd+bwd forward_logp", "fwd_bwd_tokens_per_s"),
                         ("fwd+bwd, fused kernels", "+ fused kernels", "fwd_bwd_tokens_per_s"),
                         ("fwd+bwd, full logits, fused kernels", "full-vocabulary logits + fused", "fwd_bwd_tokens_per_s"),
                         ("RL step (fp32 master AdamW, clip)", "RL step:", "rl_step_tokens_per_s")):
    t, h = turnrl(label), results.get(key)
    if t and h:
        print("  %-36s turnrl %10.0f tok/s  transformers %10.0f tok/s  ratio %.2f" % (name, t, h, t / h))
    else:
        print("  %-36s missing (turnrl %s, transformers %s)" % (name, t, h))
for key, value in results.items():
    if key.startswith("peak_gib"):
        print("  transformers %s: %.2f GiB (turnrl's rows above)" % (key, value))
PY
