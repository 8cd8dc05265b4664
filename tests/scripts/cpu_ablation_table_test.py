#!/usr/bin/env python3
"""scripts/cpu_ablation_table.py on a hand-made ablation folder: the table's cells against
means and sample standard deviations worked out by hand, the seed-mean curves, and the
'n/a' of a policy that never succeeded.

Usage: cpu_ablation_table_test.py REPO_DIR
"""
import json
import os
import subprocess
import sys
import tempfile


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def run_rows(scores, correct, turn2_sizes):
    return [{"step": i + 1, "critic/score/mean": s, "kernel/correct": c, "adv/group_size/turn_1/mean": 8.0,
             "adv/group_size/turn_2/mean": t2, "adv/group_size/turn_2/min": t2 - 1}
            for i, (s, c, t2) in enumerate(zip(scores, correct, turn2_sizes))]


def samples(answers):
    # One logged episode a step (episode 3), two turns each.
    return [{"step": i + 1, "task": "relu_bias", "episode": 3, "turns": [{"action": a} for a in pair]}
            for i, pair in enumerate(answers)]


def eval_report(pass1, fast1, fast12, turns, hacked):
    return {"eval/pass@1/all": pass1, "eval/fast@1/all": fast1, "eval/fast@1.2/all": fast12,
            "eval/fast@1.2_within_1_turns/all": fast12 / 2,
            "eval/turns_to_success/all": turns, "eval/hacked_turn_share/all": hacked}


def check(condition, what):
    if not condition:
        sys.exit(f"cpu_ablation_table_test: {what}")


def main(repo):
    with tempfile.TemporaryDirectory() as out:
        # Arm "a", 4 steps (window 2): seed 1 rewards 1,2 | 3,5; seed 2 rewards 2,2 | 4,4.
        write_jsonl(f"{out}/a/seed1/metrics.jsonl", run_rows([1, 2, 3, 5], [0.5, 0.5, 1, 1], [8, 7, 6, 7]))
        write_jsonl(f"{out}/a/seed2/metrics.jsonl", run_rows([2, 2, 4, 4], [0.5, 0.5, 0.5, 0.5], [8, 8, 8, 8]))
        # Arm "b" beside "a": seed 1 shares 3 of 4 answers, seed 2 1 of 2 (its run logged one step).
        write_jsonl(f"{out}/b/seed1/metrics.jsonl", run_rows([1, 2, 3, 5], [0.5, 0.5, 1, 1], [8, 7, 6, 7]))
        write_jsonl(f"{out}/b/seed2/metrics.jsonl", run_rows([2, 2, 4, 4], [0.5, 0.5, 0.5, 0.5], [8, 8, 8, 8]))
        write_jsonl(f"{out}/a/seed1/samples.jsonl", samples([("x", "y"), ("z", "w")]))
        write_jsonl(f"{out}/b/seed1/samples.jsonl", samples([("x", "y"), ("z", "v")]))
        write_jsonl(f"{out}/a/seed2/samples.jsonl", samples([("x", "y"), ("z", "w")]))
        write_jsonl(f"{out}/b/seed2/samples.jsonl", samples([("x", "q")]))
        for seed, report in ((1, eval_report(0.5, 0.25, 0.25, 1.5, 0)), (2, eval_report(1.0, 0.75, 0.5, 1.0, 0.1))):
            write_jsonl(f"{out}/eval/a_relu_bias_seed{seed}.json", [report])
            write_jsonl(f"{out}/eval/a_gelu_tanh_seed{seed}.json", [eval_report(0, 0, 0, 0, 0)])
        table = subprocess.run([sys.executable, f"{repo}/scripts/cpu_ablation_table.py", out, "--arms", "a b",
                                "--seeds", "1 2", "--held-out", "gelu_tanh"],
                               check=True, capture_output=True, text=True).stdout
        # first-2 reward means 1.5 and 2 -> 1.750 ± 0.354; last-2 4 and 4 -> 4.000 ± 0.000;
        # correct 0.5, 0.5 -> 0.500 ± 0.000 and 1, 0.5 -> 0.750 ± 0.354; turn-2 sizes 7 and 8 ->
        # 7.500 ± 0.707, smallest min 5.
        row = "| a | 2 | 1.750 ± 0.354 | 4.000 ± 0.000 | 0.500 ± 0.000 | 0.750 ± 0.354 | 8.000 ± 0.000 | 7.500 ± 0.707 (5) |"
        check(row in table, f"RL row missing; expected\n{row}\nin\n{table}")
        row = ("| a | relu_bias | 2 | 0.750 ± 0.354 | 0.500 ± 0.354 | 0.375 ± 0.177 | 0.188 ± 0.088 | 1.250 ± 0.354 | "
               "0.050 ± 0.071 |")
        check(row in table, f"relu_bias eval row missing; expected\n{row}\nin\n{table}")
        row = "| a | gelu_tanh | 2 | 0.000 ± 0.000 | 0.000 ± 0.000 | 0.000 ± 0.000 | 0.000 ± 0.000 | n/a | 0.000 ± 0.000 |"
        check(row in table, f"gelu_tanh eval row missing; expected\n{row}\nin\n{table}")
        # Shares 0.75 and 0.5 -> 0.625 ± 0.177.
        row = "| b | 2 | 0.625 ± 0.177 |"
        check(row in table, f"same-answer row missing; expected\n{row}\nin\n{table}")
        with open(f"{out}/a/mean_metrics.jsonl") as f:
            curve = [json.loads(line) for line in f]
        check([r["step"] for r in curve] == [1, 2, 3, 4], f"mean_metrics steps: {curve}")
        check([r["critic/score/mean"] for r in curve] == [1.5, 2, 3.5, 4.5], f"mean_metrics rewards: {curve}")
    print("cpu_ablation_table_test: ok")


if __name__ == "__main__":
    main(sys.argv[1])
