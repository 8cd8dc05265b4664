#!/usr/bin/env bash
# On the GPU machine, after run_all.sh has built build-device: turnrl's HF models and tokenizers
# against transformers and tokenizers on the same weights and text (issue 23's proofs).
#  1. Regenerates the tiny fixtures of tests/data/hf with transformers (save_pretrained, forward,
#     generate) on the same seeded weights; prints the largest logit difference to the pure-torch
#     reference that wrote the committed files; $OUT/hf_fixtures.tgz brings them back.
#  2. Re-checks the tokenizer fixtures with `tokenizers` and transformers' apply_chat_template.
#  3. Full-size bf16 models (Qwen3-0.6B, Qwen2.5-1.5B, Llama-3.2-1B shapes): logits and 128 greedy
#     tokens of turnrl's decoder on the GPU against transformers (test_model_cuda).
#  4. Folders that turnrl writes (init-model, save_pretrained) load in transformers with no
#     missing, unexpected or mis-shaped tensor, and transformers' logits equal turnrl's.
#  5. LoRA adapters saved by turnrl (peft layout) load with PeftModel.from_pretrained and give
#     turnrl's logits (check_peft.py).
# Then run ctest as usual: the tiny-fixture tests read the regenerated files.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/turnrl-device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
echo "== 1. tiny fixtures from transformers"
python3 benchmarks/device/make_hf_fixtures.py --require-transformers 2>&1 | tee "$OUT/hf_fixtures.txt"
tar czf "$OUT/hf_fixtures.tgz" tests/data/hf
echo "== 2. tokenizer fixtures against tokenizers / transformers"
python3 benchmarks/device/check_tokenizers.py 2>&1 | tail -n 25 | tee "$OUT/tokenizers.txt"
echo "== 3. full-size bf16 models against transformers"
python3 benchmarks/device/make_hf_fixtures.py --full-size /tmp/hf-full 2>&1 | tee -a "$OUT/hf_fixtures.txt"
TURNRL_HF_FULL_FIXTURES=/tmp/hf-full build-device/bin/test_model_cuda --success > "$OUT/hf_full_log.txt" 2>&1
grep -E "max \||greedy tokens|teacher-forced|test cases|FAILED|failed" "$OUT/hf_full_log.txt" | tee "$OUT/hf_full.txt"
echo "== 4. turnrl-written folders in transformers"
for preset in qwen3-0.6b llama3.2-1b; do
  build-device/bin/turnrl init-model --out "/tmp/init-$preset" --preset "$preset" --dtype bfloat16 --seed 3
done
python3 benchmarks/device/load_in_transformers.py /tmp/init-qwen3-0.6b /tmp/init-llama3.2-1b 2>&1 \
  | tee "$OUT/load_in_transformers.txt"
echo "== 5. LoRA adapters that turnrl saves, loaded by peft over the same base"
TURNRL_PEFT_EXPORT=/tmp/peft-export build-device/bin/test_model "lora: peft names*" > /dev/null 2>&1
python3 benchmarks/device/check_peft.py tests/data/hf/llama /tmp/peft-export/llama-lora /tmp/peft-export/llama-rslora \
  2>&1 | grep -E "max \||Error|error" | tee "$OUT/peft.txt"
