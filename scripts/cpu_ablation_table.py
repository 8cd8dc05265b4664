#!/usr/bin/env python3
"""The tables of scripts/cpu_ablation.sh, as markdown on stdout: mean +- sample std over seeds.

RL (OUT/ARM/seedK/metrics.jsonl): reward (critic/score/mean) and kernel/correct averaged over the
first W and the last W steps of each run (W = min(5, steps // 2)), and the per-turn group sizes
the advantage saw (adv/group_size/turn_k/*: valid turns k per task group, averaged over steps).
Evaluation (OUT/eval/NAME_TASK_seedK.json, `turnrl eval --json`): pass@1, fast@1, fast@1.2 (best
over both turns), fast@1.2 of the first turn alone, the
mean turn of the first success (over the episodes with one) and the share of turns a hacking
check flagged, per model (the SFT export, each arm's final checkpoint) and task.
Same samples (OUT/ARM/seedK/samples.jsonl, the episodes each step logs): the share of logged turns
whose sampled answer is the same text as the first arm's at the same seed, step, episode and turn
(the arms share the start and each seed's sampling stream, so this says how far an arm's updates
moved what the policy writes away from the first arm's).
Also writes OUT/ARM/mean_metrics.jsonl, each step's metrics averaged over the seeds, for
`turnrl plot`.

Usage: cpu_ablation_table.py OUT --arms "trloo grpo" --seeds "1 2 3" --held-out gelu_tanh
"""
import argparse
import json
import math
import os
import sys


def mean_std(values):
    """'m ± s' (sample std; 0 for one value), or 'n/a' when there is nothing to average."""
    if not values:
        return "n/a"
    m = sum(values) / len(values)
    s = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return f"{m:.3f} ± {s:.3f}"


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def window_mean(rows, key, first, width):
    """Mean of `key` over the first (or last) `width` steps that log it."""
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    part = values[:width] if first else values[-width:]
    return sum(part) / len(part) if part else None


def step_means(runs):
    """Each step's numeric metrics averaged over the runs that reached it."""
    by_step = {}
    for rows in runs:
        for r in rows:
            step = by_step.setdefault(r["step"], {})
            for k, v in r.items():
                if isinstance(v, (int, float)) and k != "step":
                    step.setdefault(k, []).append(v)
    return [dict({"step": s}, **{k: sum(v) / len(v) for k, v in sorted(m.items())}) for s, m in sorted(by_step.items())]


def rl_table(out, arms, seeds):
    paths = {arm: [os.path.join(out, arm, f"seed{s}", "metrics.jsonl") for s in seeds] for arm in arms}
    # A run that has not logged a step yet (one in progress) is left out.
    runs = {arm: [rows for rows in (read_jsonl(p) for p in arm_paths if os.path.exists(p)) if rows]
            for arm, arm_paths in paths.items()}
    steps = min((len(rows) for arm_runs in runs.values() for rows in arm_runs), default=0)
    width = max(1, min(5, steps // 2))
    lines = [f"RL, {steps} steps a run; first / last {width} steps (mean ± std over seeds):", "",
             f"| arm | seeds | reward, first {width} | reward, last {width} | correct, first {width} | "
             f"correct, last {width} | turn-1 group size | turn-2 group size (min) |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, arm_runs in runs.items():
        if not arm_runs:
            continue
        cells = [mean_std([x for x in (window_mean(rows, key, first, width) for rows in arm_runs) if x is not None])
                 for key, first in (("critic/score/mean", True), ("critic/score/mean", False),
                                    ("kernel/correct", True), ("kernel/correct", False))]
        size = {t: mean_std([x for x in (window_mean(rows, f"adv/group_size/turn_{t}/mean", True, len(rows))
                                         for rows in arm_runs) if x is not None]) for t in (1, 2)}
        smallest = min((r[f"adv/group_size/turn_2/min"] for rows in arm_runs for r in rows
                        if "adv/group_size/turn_2/min" in r), default=None)
        lines.append(f"| {arm} | {len(arm_runs)} | " + " | ".join(cells) +
                     f" | {size[1]} | {size[2]} ({smallest if smallest is not None else 'n/a'}) |")
        with open(os.path.join(out, arm, "mean_metrics.jsonl"), "w") as f:
            for row in step_means(arm_runs):
                f.write(json.dumps(row) + "\n")
    return lines


def same_samples_table(out, arms, seeds):
    def actions(arm, seed):
        path = os.path.join(out, arm, f"seed{seed}", "samples.jsonl")
        if not os.path.exists(path):
            return None
        return {(r["step"], r["episode"], t): turn["action"]
                for r in read_jsonl(path) for t, turn in enumerate(r["turns"])}

    lines = [f"Logged turns whose answer is the same text as {arms[0]}'s (same seed, step, episode and turn):", "",
             "| arm | seeds | same answer |", "|---|---|---|"]
    for arm in arms[1:]:
        shares = []
        for s in seeds:
            mine, first = actions(arm, s), actions(arms[0], s)
            common = [k for k in (mine or {}) if k in (first or {})]
            if common:
                shares.append(sum(mine[k] == first[k] for k in common) / len(common))
        if shares:
            lines.append(f"| {arm} | {len(shares)} | {mean_std(shares)} |")
    return lines


EVAL_COLUMNS = (("pass@1", "eval/pass@1/all"), ("fast@1", "eval/fast@1/all"), ("fast@1.2", "eval/fast@1.2/all"),
                ("fast@1.2, turn 1", "eval/fast@1.2_within_1_turns/all"),
                ("turns to success", "eval/turns_to_success/all"), ("hacked turns", "eval/hacked_turn_share/all"))


def eval_table(out, models, tasks, seeds):
    lines = ["Evaluation of the final policies (mean ± std over seeds; turns to success over the episodes "
             "that succeeded, n/a when none did):", "",
             "| model | task | seeds | " + " | ".join(name for name, _ in EVAL_COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(EVAL_COLUMNS)]
    for task in tasks:
        for model in models:
            reports = []
            for s in seeds:
                path = os.path.join(out, "eval", f"{model}_{task}_seed{s}.json")
                if os.path.exists(path):
                    with open(path) as f:
                        reports.append(json.load(f))
            if not reports:
                continue
            cells = []
            for name, key in EVAL_COLUMNS:
                # A policy that never succeeded has no turn of first success (the report says 0).
                values = [r[key] for r in reports if name != "turns to success" or r["eval/pass@1/all"] > 0]
                cells.append(mean_std(values))
            lines.append(f"| {model} | {task} | {len(reports)} | " + " | ".join(cells) + " |")
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--arms", required=True, help="space-separated arm names")
    parser.add_argument("--seeds", required=True, help="space-separated seeds")
    parser.add_argument("--held-out", default="", help="comma-separated held-out tasks")
    a = parser.parse_args(argv)
    arms, seeds = a.arms.split(), a.seeds.split()
    tasks = ["relu_bias"] + [t for t in a.held_out.split(",") if t]
    lines = (rl_table(a.out, arms, seeds) + [""] + same_samples_table(a.out, arms, seeds) + [""] +
             eval_table(a.out, ["sft"] + arms, tasks, seeds))
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
