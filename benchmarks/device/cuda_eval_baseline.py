#!/usr/bin/env python3
"""KernelGYM-style baseline for the CUDA evaluator benchmark (issue 6).

Evaluates the honest kernel-form candidate of each CUDA task the way a Python, subprocess-per-task
evaluator does (KernelGYM: MAX_TASKS_PER_WORKER=1, a CUDA candidate built with
torch.utils.cpp_extension.load_inline in a fresh build directory): for every task the parent
starts a fresh `python3` that

  1. imports torch and initialises CUDA,
  2. compiles the candidate with load_inline (cuda_sources = the candidate + a small host wrapper
     that launches turnrl_kernel on the grid the TURNRL_* #defines and the dims give) into a fresh
     temporary build directory, so nvcc really runs, as in a fresh KernelGYM worker,
  3. checks correctness on 5 fresh inputs against the PyTorch reference (the tasks' math, main
     shapes of src/kernels/cuda_tasks.cpp, atol = rtol = 1e-2),
  4. times candidate and reference with CUDA events (3 warm-ups, then --trials single-call event
     pairs with a synchronize each, an L2 flush before every trial), optionally (--profile) runs
     KernelGYM's profiler pass (10 calls under torch.profiler, then key_averages()),
  5. exits.

The parent measures each evaluation's wall time from spawn to exit. A second ("warm") evaluation
per task reuses the first one's build directory: load_inline then finds the extension built and
skips nvcc, so the difference is the compile cost. Prints a table and, with --json-out, writes the
figures for benchmarks/eval_bench.cpp to read.

    python3 benchmarks/device/cuda_eval_baseline.py [--tasks relu_bias,softmax_rows] [--trials 100]
        [--correct-trials 5] [--json-out FILE] [--no-warm] [--profile] [--candidates FILE]
        [--timeout 900] [--keep-builds]

Candidates come from tests/kernels/cuda_candidates.h (parsed by export_cuda_candidates.py), or from
benchmarks/device/cuda_candidates.json when the header is not there (or --candidates FILE).
Needs torch with CUDA, nvcc (CUDA_HOME) and ninja; only torch and the standard library.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
HEADER = os.path.join(ROOT, "tests", "kernels", "cuda_candidates.h")
JSON_CANDIDATES = os.path.join(HERE, "cuda_candidates.json")

# The task set of src/kernels/cuda_tasks.cpp (main shape only) with the CPU tasks' input distributions
# (src/kernels/cpu_tasks.cpp): inputs (name, distribution, a, b), shapes, output shape, dims, grid kind.
TASKS = {
    "relu_bias": dict(inputs=[("x", "normal", 0, 1), ("b", "normal", 0, 1)], shapes=[(4096, 4096), (4096,)],
                      out=(4096, 4096), dims=(4096, 4096), grid="elementwise"),
    "gelu_tanh": dict(inputs=[("x", "normal", 0, 2)], shapes=[(1 << 24,)], out=(1 << 24,), dims=(1 << 24,),
                      grid="elementwise"),
    "swiglu": dict(inputs=[("a", "normal", 0, 1), ("g", "normal", 0, 1)], shapes=[(4096, 4096), (4096, 4096)],
                   out=(4096, 4096), dims=(4096, 4096), grid="elementwise"),
    "softmax_rows": dict(inputs=[("x", "normal", 0, 3)], shapes=[(8192, 2048)], out=(8192, 2048), dims=(8192, 2048),
                         grid="rows"),
    "layernorm_rows": dict(inputs=[("x", "normal", 1, 2), ("gamma", "uniform", 0.5, 1.5), ("beta", "normal", 0, 1)],
                           shapes=[(8192, 2048), (2048,), (2048,)], out=(8192, 2048), dims=(8192, 2048), grid="rows"),
    "logsumexp_rows": dict(inputs=[("x", "normal", 0, 4)], shapes=[(16384, 1024)], out=(16384,), dims=(16384, 1024),
                           grid="rows"),
    "matmul_bias_relu": dict(inputs=[("x", "normal", 0, 1), ("w", "normal", 0, 0.1), ("b", "normal", 0, 1)],
                             shapes=[(2048, 1024), (1024, 2048), (2048,)], out=(2048, 2048), dims=(2048, 2048, 1024),
                             grid="matrix"),
    "matmul_softmax": dict(inputs=[("x", "normal", 0, 1), ("w", "normal", 0, 1)], shapes=[(2048, 512), (512, 1024)],
                           out=(2048, 1024), dims=(2048, 1024, 512), grid="rows"),
}
ATOL = RTOL = 1e-2  # the tasks' (and KernelGYM's) correctness tolerance
L2_FLUSH_BYTES = 256 << 20  # larger than the H200's L2
WARMUP = 3


def die(msg, code=2):
    print(f"cuda_eval_baseline: error: {msg}", file=sys.stderr)
    sys.exit(code)


# ------------------------------------------------------------------------------------------ child
def reference(torch, task, ins):
    F = torch.nn.functional
    if task == "relu_bias":
        return torch.relu(ins[0] + ins[1])
    if task == "gelu_tanh":
        x = ins[0]
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    if task == "swiglu":
        return ins[0] * torch.sigmoid(ins[0]) * ins[1]
    if task == "softmax_rows":
        return torch.softmax(ins[0], 1)
    if task == "layernorm_rows":
        return F.layer_norm(ins[0], (ins[0].shape[1],), ins[1], ins[2], 1e-5)
    if task == "logsumexp_rows":
        return torch.logsumexp(ins[0], 1)
    if task == "matmul_bias_relu":
        return torch.relu(torch.mm(ins[0], ins[1]) + ins[2])
    if task == "matmul_softmax":
        return torch.softmax(torch.mm(ins[0], ins[1]) * (1.0 / math.sqrt(ins[0].shape[1])), 1)
    raise ValueError(task)


def wrapper_source(task, candidate_source):
    """cuda_sources for load_inline: torch headers, the candidate, a launcher with the task's grid."""
    spec = TASKS[task]
    n_in, n_dims = len(spec["inputs"]), len(spec["dims"])
    args = [f"inputs[{i}].data_ptr<float>()" for i in range(n_in)] + ["y.data_ptr<float>()"]
    args += [f"(int)dims[{j}]" for j in range(n_dims)]
    if spec["grid"] == "elementwise":
        grid = ("int64_t n = 1; for (int64_t d : dims) n *= d;\n"
                "  const int64_t gx = (n + bx * by * tx * ty - 1) / (bx * by * tx * ty), gy = 1;")
    elif spec["grid"] == "rows":
        grid = "const int64_t gx = (dims[0] + by * ty - 1) / (by * ty), gy = 1;"
    else:
        grid = "const int64_t gx = (dims[1] + bx * tx - 1) / (bx * tx), gy = (dims[0] + by * ty - 1) / (by * ty);"
    return f"""#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

// ---- candidate ({task}) ----
{candidate_source}
// ---- launcher (the evaluator's kernel-form contract) ----
#ifndef TURNRL_BLOCK_X
#define TURNRL_BLOCK_X 256
#endif
#ifndef TURNRL_BLOCK_Y
#define TURNRL_BLOCK_Y 1
#endif
#ifndef TURNRL_TILE_X
#define TURNRL_TILE_X 1
#endif
#ifndef TURNRL_TILE_Y
#define TURNRL_TILE_Y 1
#endif
#ifndef TURNRL_SHARED_BYTES
#define TURNRL_SHARED_BYTES 0
#endif

torch::Tensor turnrl_run(std::vector<torch::Tensor> inputs, torch::Tensor y, std::vector<int64_t> dims) {{
  TORCH_CHECK(inputs.size() == {n_in} && dims.size() == {n_dims}, "turnrl_run: wrong number of inputs or dims");
  const int64_t bx = TURNRL_BLOCK_X, by = TURNRL_BLOCK_Y, tx = TURNRL_TILE_X, ty = TURNRL_TILE_Y;
  {grid}
  if (TURNRL_SHARED_BYTES > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(turnrl_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TURNRL_SHARED_BYTES));
  const dim3 grid_dim((unsigned)(gx > 0 ? gx : 1), (unsigned)(gy > 0 ? gy : 1)), block_dim((unsigned)bx, (unsigned)by);
  turnrl_kernel<<<grid_dim, block_dim, TURNRL_SHARED_BYTES, at::cuda::getCurrentCUDAStream()>>>({", ".join(args)});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}}
"""


CPP_DECL = "torch::Tensor turnrl_run(std::vector<torch::Tensor> inputs, torch::Tensor y, std::vector<int64_t> dims);"


def make_inputs(torch, task, gen):
    out = []
    for (name, dist, a, b), shape in zip(TASKS[task]["inputs"], TASKS[task]["shapes"]):
        t = torch.empty(shape, device="cuda", dtype=torch.float32)
        if dist == "normal":
            t.normal_(a, b, generator=gen)
        else:
            t.uniform_(a, b, generator=gen)
        out.append(t)
    return out


def time_calls(torch, fn, trials, flush):
    """KernelGYM's loop (one event pair + synchronize per call) plus an L2 flush before each trial."""
    for _ in range(WARMUP):
        fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return {"mean_ms": statistics.fmean(times), "median_ms": statistics.median(times), "min_ms": min(times)}


def child(args):
    t0 = time.perf_counter()
    phases = {}
    result = {"task": args.task, "ok": False}
    try:
        import torch  # noqa: E402 (the import is part of what is measured)
        import torch.utils.cpp_extension as cpp_extension
        phases["import_s"] = time.perf_counter() - t0

        t = time.perf_counter()
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False: no GPU visible to this process")
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        torch.backends.cuda.matmul.allow_tf32 = False  # the reference in full FP32, as in the C++ tasks
        torch.backends.cudnn.allow_tf32 = False
        phases["cuda_init_s"] = time.perf_counter() - t
        result["torch"] = torch.__version__
        result["gpu"] = torch.cuda.get_device_name()

        with open(args.source_file, encoding="utf-8") as f:
            source = f.read()
        t = time.perf_counter()
        if cpp_extension.CUDA_HOME is None:
            raise RuntimeError("torch.utils.cpp_extension.CUDA_HOME is None: nvcc not found (set CUDA_HOME)")
        module = cpp_extension.load_inline(
            name=f"turnrl_kgym_{args.task}", cpp_sources=CPP_DECL, cuda_sources=wrapper_source(args.task, source),
            functions=["turnrl_run"], extra_cuda_cflags=["-O3"], build_directory=args.build_dir, verbose=False)
        phases["compile_s"] = time.perf_counter() - t

        spec = TASKS[args.task]
        dims = list(spec["dims"])

        def candidate(ins):  # a ModelNew.forward: allocates its output, launches the kernel
            return module.turnrl_run(ins, torch.empty(spec["out"], device="cuda", dtype=torch.float32), dims)

        t = time.perf_counter()
        gen = torch.Generator(device="cuda")
        trials, max_diff, correct = [], 0.0, True
        for trial in range(args.correct_trials):
            gen.manual_seed(1000 + trial)
            ins = make_inputs(torch, args.task, gen)
            ref = reference(torch, args.task, ins)
            torch.cuda.synchronize()
            y = module.turnrl_run(ins, torch.full(spec["out"], float("nan"), device="cuda"), dims)
            torch.cuda.synchronize()
            ok = bool(torch.allclose(ref, y, atol=ATOL, rtol=RTOL))
            diff = float((ref - y).abs().max()) if torch.isfinite(y).all() else float("inf")
            max_diff = max(max_diff, diff)
            correct = correct and ok
            trials.append(ok)
        phases["correctness_s"] = time.perf_counter() - t
        result.update(correct=correct, trials_passed=sum(trials), max_abs_diff=max_diff)

        t = time.perf_counter()
        gen.manual_seed(42)
        ins = make_inputs(torch, args.task, gen)
        flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda", dtype=torch.float32)
        result["candidate"] = time_calls(torch, lambda: candidate(ins), args.trials, flush)
        result["reference"] = time_calls(torch, lambda: reference(torch, args.task, ins), args.trials, flush)
        phases["timing_s"] = time.perf_counter() - t

        if args.profile:  # KernelGYM: 10 more calls under torch.profiler, then key_averages()
            t = time.perf_counter()
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                         profile_memory=True) as prof:
                for _ in range(min(10, args.trials)):
                    candidate(ins)
                torch.cuda.synchronize()
            events = [e for e in prof.key_averages() if getattr(e, "device_time_total", 0) > 0]
            result["profiled_entries"] = len(events)
            phases["profile_s"] = time.perf_counter() - t

        result["ok"] = True
    except Exception as e:  # noqa: BLE001: report everything to the parent
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()
    phases["child_total_s"] = time.perf_counter() - t0
    result["phases"] = phases
    with open(args.result_file, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0 if result["ok"] else 1


# ----------------------------------------------------------------------------------------- parent
def load_candidates(path):
    if path:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["candidates"], path
    if os.path.exists(HEADER):
        sys.path.insert(0, HERE)
        from export_cuda_candidates import load_candidates as parse_header
        return parse_header(HEADER), os.path.relpath(HEADER, ROOT)
    if os.path.exists(JSON_CANDIDATES):
        with open(JSON_CANDIDATES, encoding="utf-8") as f:
            return json.load(f)["candidates"], os.path.relpath(JSON_CANDIDATES, ROOT)
    die(f"no candidates: neither {HEADER} nor {JSON_CANDIDATES} exists (or pass --candidates FILE)")


def evaluate(task, source_file, build_dir, args):
    """One evaluation in a fresh interpreter; returns (wall seconds, the child's result dict)."""
    fd, result_file = tempfile.mkstemp(prefix=f"turnrl_kgym_{task}_", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--task", task, "--source-file", source_file,
           "--build-dir", build_dir, "--result-file", result_file, "--trials", str(args.trials),
           "--correct-trials", str(args.correct_trials)] + (["--profile"] if args.profile else [])
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=build_dir)  # as KernelGYM sets it per evaluation
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        wall = time.perf_counter() - start
        output = proc.stdout + proc.stderr
        rc = proc.returncode
    except subprocess.TimeoutExpired as e:
        wall = time.perf_counter() - start
        output = (e.stdout or "") if isinstance(e.stdout, str) else ""
        rc = "timeout"
    try:
        with open(result_file, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"task": task, "ok": False, "error": f"the child wrote no result (exit {rc})"}
    finally:
        if os.path.exists(result_file):
            os.remove(result_file)
    if rc != 0:
        result["ok"] = False
        result.setdefault("error", f"exit {rc}")
        result["output_tail"] = output[-3000:]
    return wall, result


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated task names (default: all eight)")
    ap.add_argument("--trials", type=int, default=100, help="timed calls per side (KernelGYM: 100)")
    ap.add_argument("--correct-trials", type=int, default=5, help="correctness trials (KernelGYM: 5)")
    ap.add_argument("--json-out", help="write the figures here as JSON")
    ap.add_argument("--no-warm", action="store_true", help="skip the second, warm-cache evaluation per task")
    ap.add_argument("--profile", action="store_true", help="add KernelGYM's torch.profiler pass (10 calls)")
    ap.add_argument("--candidates", help="candidates JSON (default: parse tests/kernels/cuda_candidates.h)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per evaluation before it is killed")
    ap.add_argument("--keep-builds", action="store_true", help="keep the temporary build directories")
    # child mode (internal)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--task", help=argparse.SUPPRESS)
    ap.add_argument("--source-file", help=argparse.SUPPRESS)
    ap.add_argument("--build-dir", help=argparse.SUPPRESS)
    ap.add_argument("--result-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        die(f"unknown task(s) {', '.join(unknown)}; known: {', '.join(TASKS)}")
    if args.trials < 1 or args.correct_trials < 1:
        die("--trials and --correct-trials must be at least 1")
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        die(f"{sys.executable} cannot import torch; run with the Python that has PyTorch (CUDA build)")
    if shutil.which("ninja") is None and importlib.util.find_spec("ninja") is None:
        die("ninja not found: torch.utils.cpp_extension.load_inline needs it (apt-get install ninja-build)")

    candidates, origin = load_candidates(args.candidates)
    honest = {}
    for c in candidates:
        if c["expect"] == "correct" and c["form"] == "kernel" and c["task"] not in honest:
            honest[c["task"]] = c
    missing = [t for t in tasks if t not in honest]
    if missing:
        die(f"{origin}: no honest kernel-form candidate for {', '.join(missing)}")

    print(f"KernelGYM-style baseline: one fresh python3 + load_inline per evaluation; candidates from {origin}")
    print(f"{args.correct_trials} correctness trials, {args.trials} timed trials per side (L2 flushed), "
          f"profiler pass {'on' if args.profile else 'off'}\n", flush=True)
    rows, failures = [], 0
    scratch = tempfile.mkdtemp(prefix="turnrl_kgym_sources_")
    try:
        for task in tasks:
            source_file = os.path.join(scratch, f"{task}.cu")
            with open(source_file, "w", encoding="utf-8") as f:
                f.write(honest[task]["source"])
            build_dir = tempfile.mkdtemp(prefix=f"turnrl_kgym_build_{task}_")  # fresh: nvcc really runs
            cold_wall, cold = evaluate(task, source_file, build_dir, args)
            warm_wall, warm = (None, None)
            if not args.no_warm and cold.get("ok"):
                warm_wall, warm = evaluate(task, source_file, build_dir, args)
            if not args.keep_builds:
                shutil.rmtree(build_dir, ignore_errors=True)
            row = {"task": task, "kind": honest[task]["kind"], "cold_wall_s": cold_wall, "warm_wall_s": warm_wall,
                   "cold": cold, "warm": warm, "build_dir": build_dir if args.keep_builds else None}
            rows.append(row)
            for label, r in (("cold", cold), ("warm", warm)):
                if r is not None and not r.get("ok"):
                    failures += 1
                    print(f"!! {task} ({label}) failed: {r.get('error')}", file=sys.stderr)
                    for key in ("traceback", "output_tail"):
                        if r.get(key):
                            print(r[key].rstrip(), file=sys.stderr)
                elif r is not None and not r.get("correct"):
                    failures += 1
                    print(f"!! {task} ({label}): the honest candidate is NOT correct "
                          f"({r.get('trials_passed')}/{args.correct_trials} trials, max |diff| "
                          f"{r.get('max_abs_diff')})", file=sys.stderr)
            p = cold.get("phases", {})
            print(f"{task:17s} cold {cold_wall:6.2f} s  warm {fmt(warm_wall)} s  (import {fmt(p.get('import_s'))}, "
                  f"cuda {fmt(p.get('cuda_init_s'))}, compile {fmt(p.get('compile_s'))}, "
                  f"correctness {fmt(p.get('correctness_s'))}, timing {fmt(p.get('timing_s'))})", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    # Table.
    print()
    head = (f"{'task':17s} {'cold s/eval':>11s} {'warm s/eval':>11s} {'compile s':>9s} {'correct':>7s} "
            f"{'cand ms':>8s} {'ref ms':>8s} {'speedup':>7s}")
    print(head)
    print("-" * len(head))
    for r in rows:
        c = r["cold"]
        cand = c.get("candidate", {}).get("median_ms")
        ref = c.get("reference", {}).get("median_ms")
        speed = ref / cand if cand and ref and c.get("correct") else None
        print(f"{r['task']:17s} {r['cold_wall_s']:11.2f} {fmt(r['warm_wall_s']):>11s} "
              f"{fmt(c.get('phases', {}).get('compile_s')):>9s} {str(c.get('correct', '-')):>7s} "
              f"{fmt(cand, '.4f'):>8s} {fmt(ref, '.4f'):>8s} {fmt(speed):>7s}")
    total_cold = sum(r["cold_wall_s"] for r in rows)
    warm_rows = [r["warm_wall_s"] for r in rows if r["warm_wall_s"] is not None]
    total_warm = sum(warm_rows) if len(warm_rows) == len(rows) else None
    print("-" * len(head))
    print(f"{'sum':17s} {total_cold:11.2f} {fmt(total_warm):>11s}")
    mean_cold = total_cold / len(rows)
    print(f"\nmean {mean_cold:.2f} s per evaluation (cold) = {3600 / mean_cold:.0f} evaluations per GPU-hour "
          f"per serial worker" + (f"; warm cache {total_warm / len(rows):.2f} s = "
                                  f"{3600 * len(rows) / total_warm:.0f} per GPU-hour" if total_warm else ""))

    if args.json_out:
        first = next((r["cold"] for r in rows if r["cold"].get("torch")), {})
        doc = {
            "baseline": "kernelgym-style: fresh python3 subprocess per evaluation, load_inline in a fresh build dir, "
                        "5 correctness trials, CUDA-event timing with L2 flush",
            "candidates_from": origin, "torch": first.get("torch"), "gpu": first.get("gpu"),
            "trials": args.trials, "correct_trials": args.correct_trials, "profile": args.profile,
            "tasks": [{
                "task": r["task"], "kind": r["kind"], "cold_wall_s": r["cold_wall_s"], "warm_wall_s": r["warm_wall_s"],
                "ok": bool(r["cold"].get("ok")), "correct": r["cold"].get("correct"),
                "max_abs_diff": r["cold"].get("max_abs_diff"), "phases_cold": r["cold"].get("phases"),
                "phases_warm": (r["warm"] or {}).get("phases"), "candidate": r["cold"].get("candidate"),
                "reference": r["cold"].get("reference"), "error": r["cold"].get("error"),
            } for r in rows],
            "total_cold_s": total_cold, "total_warm_s": total_warm, "mean_cold_s": mean_cold,
            "evals_per_hour_cold": 3600 / mean_cold,
            "evals_per_hour_warm": 3600 * len(rows) / total_warm if total_warm else None,
        }
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json_out}")
    if failures:
        print(f"\n{failures} evaluation(s) failed or were incorrect (see above)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
