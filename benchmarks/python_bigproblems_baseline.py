"""The baseline of benchmarks/python_bigproblems_bench.cpp: one problem evaluated the way
KernelBench's own eval does it, the reference itself as the candidate. Inputs come from get_inputs()
on the host and move with .to(device); each correctness trial seeds torch, builds inputs, runs both
models and compares with torch.allclose; then `timed` calls per side, timed with CUDA events (the
monotonic clock on CPU). Prints one JSON line: {"seconds", "correct", "input_seconds"}.

Usage: python3 python_bigproblems_baseline.py TASKS_JSONL TASK_ID DEVICE TRIALS TIMED
"""
import json
import sys
import time
import types

import torch


def load(task):
    module = types.ModuleType("reference")
    exec(compile(task["reference"], "reference.py", "exec"), module.__dict__)
    return module


def timed_calls(model, inputs, n, device):
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(n):
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        return samples
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        model(*inputs)
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def main(path, task_id, device_name, trials, timed):
    task = next(t for t in map(json.loads, open(path, encoding="utf-8")) if t["id"] == task_id)
    device = torch.device(device_name)
    torch.set_grad_enabled(False)
    module = load(task)
    started = time.perf_counter()
    input_seconds = 0.0
    init = module.get_init_inputs()
    torch.manual_seed(42)
    reference = module.Model(*init).to(device)
    torch.manual_seed(42)
    candidate = module.Model(*init).to(device)  # the reference as the candidate
    correct = True
    for trial in range(trials):
        t0 = time.perf_counter()
        torch.manual_seed(trial)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
        if device.type == "cuda":
            torch.cuda.synchronize()
        input_seconds += time.perf_counter() - t0
        expected, got = reference(*inputs), candidate(*inputs)
        correct = correct and got.shape == expected.shape and bool(torch.allclose(got, expected, atol=1e-2, rtol=1e-2))
        del expected, got
    timed_calls(reference, inputs, timed, device)
    timed_calls(candidate, inputs, timed, device)
    print(json.dumps({"seconds": time.perf_counter() - started, "correct": correct, "input_seconds": input_seconds}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
