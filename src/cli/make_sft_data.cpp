// `turnrl make-sft-data`: the SFT corpus (env/sft_corpus.h) for a config's tasks, held-out tasks
// split off as the trainer splits them, written as chat JSON Lines with a summary.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/sft_corpus.h"
#include "turnrl/kernels/config.h"
#include "turnrl/kernels/kernel_recipe.h"
#include "turnrl/rl/progress.h"

namespace turnrl::cli {
namespace {

struct MakeSftDataArgs {
  std::string config = "cpu_code_actions";
  std::string out;
  std::vector<std::string> sets;
  std::vector<std::string> holdout;
  std::string mix;
  std::string style = "full";
  SftCorpusOptions options;
};

// The config's tasks split as load_task_sets splits them (the tasks RL and `turnrl eval` hold
// out), or with `holdout` as the held-out ids instead.
std::pair<TaskSet, TaskSet> corpus_tasks(const TrainConfig& config, const std::vector<std::string>& holdout) {
  auto [train, validation] = load_task_sets(config);
  if (holdout.empty()) return {train, validation};
  TaskSet all = train;
  all.tasks.insert(all.tasks.end(), validation.tasks.begin(), validation.tasks.end());
  TaskSet kept, held;
  for (const std::string& id : holdout) {
    const auto it = std::find_if(all.tasks.begin(), all.tasks.end(), [&](const Task& t) { return t.id == id; });
    if (it == all.tasks.end()) {
      std::vector<std::string> ids;
      for (const Task& t : all.tasks) ids.push_back(t.id);
      fail("--holdout: task '{}' is not among the config's tasks; allowed: {}", id, fmt::join(ids, ", "));
    }
  }
  for (const Task& t : all.tasks)
    (std::find(holdout.begin(), holdout.end(), t.id) != holdout.end() ? held : kept).tasks.push_back(t);
  if (kept.tasks.empty()) fail("--holdout: holds out every task ({}); allowed: leave at least one for training", all.size());
  return {kept, held};
}

void run_make_sft_data(MakeSftDataArgs& a) {
  // CLI11 transforms only what was given; the default CONFIG names a shipped config too.
  if (const std::string error = shipped_config()(a.config); !error.empty()) fail("CONFIG: {}", error);
  const TrainConfig config = load_config(a.config, a.sets);
  if (!a.mix.empty()) a.options.mix = parse_sft_mix(a.mix, "--mix");
  a.options.style = parse_plan_style(a.style, "--style");
  const auto [train, held_out] = corpus_tasks(config, a.holdout);
  // The default mix of the tasks' backend: a wrong first attempt is rendered for cpu tasks only.
  if (a.mix.empty())
    for (const TaskSet* set : {&train, &held_out})
      for (const Task& t : set->tasks)
        if (t.backend != "cpu") a.options.mix = default_sft_mix(t.backend);
  validate(a.options);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  a.options.progress = [&](int64_t done, int64_t total) {
    const double seconds = elapsed();
    fmt::print(stderr, "make-sft-data: {}/{} conversations | {:.2f} conversations/s | ETA {}\n", done, total,
               double(done) / seconds, format_duration(seconds * double(total - done) / double(done)));
  };
  const SftCorpus corpus = make_sft_corpus(train, held_out, make_evaluator(config), KernelRewardPolicy(config.reward),
                                           config.env, a.options);
  write_sft_corpus(a.out, corpus, a.options);
  fmt::print("{}wrote {}/train.jsonl, {}/validation.jsonl, {}/stats.json in {}\n", sft_corpus_summary(corpus), a.out, a.out, a.out,
             format_duration(elapsed()));
}

}  // namespace

void add_make_sft_data_command(CLI::App& app) {
  auto a = std::make_shared<MakeSftDataArgs>();
  CLI::App* c = app.add_subcommand(
      "make-sft-data", "Write multi-turn SFT conversations for a config's tasks, every turn checked by the evaluator");
  c->add_option("CONFIG", a->config, "YAML config: tasks.*, env.* (action: code), evaluator.*, reward.*")
      ->capture_default_str()->transform(shipped_config());
  c->add_option("--out", a->out, "Directory for train.jsonl, validation.jsonl and stats.json")->required();
  add_config_overrides(*c, a->sets);
  c->add_option("--conversations", a->options.conversations, "Conversations to play, over every task (round robin)")
      ->capture_default_str()->check(integer_in(1, 10000000));
  c->add_option("--seed", a->options.seed, "Seed of kinds, plans, failure variants and evaluation inputs")->capture_default_str();
  c->add_option("--mix", a->mix,
                "Share of first attempts per kind: fast,slow,wrong,compile,lazy,hack,format "
                "(default fast=0.25,slow=0.15,wrong=0.15,compile=0.15,lazy=0.1,hack=0.05,format=0.15; without wrong for "
                "cuda and python tasks)")
      ->type_name("KIND=SHARE,...");
  c->add_option("--holdout", a->holdout, "Held-out task ids (default: tasks.validation_fraction and tasks.split_seed)")
      ->delimiter(',')->type_name("ID,...");
  c->add_option("--fast-speedup", a->options.fast_speedup, "A fast turn must reach this speedup")->capture_default_str();
  c->add_option("--slow-speedup", a->options.slow_speedup, "A slow turn must stay under this speedup")->capture_default_str();
  c->add_option("--style", a->style,
                "How cpu plans are written: full (explicit SIMD, AVX2 with a scalar fallback; 1-12 KB) or compact "
                "(plain loops the compiler vectorises; a few hundred bytes)")
      ->capture_default_str();
  c->footer(
      "Each conversation is a real env.action: code episode: KernelEnv's system and task messages, a first\n"
      "attempt of some kind (rendered from a kernel plan, or a deliberate failure), and unless it was fast,\n"
      "the evaluator's feedback and a fast attempt. A conversation whose evaluations do not match its kinds\n"
      "is dropped and counted. Held-out tasks go to validation.jsonl only. Same seed and options, same\n"
      "files, up to the timings quoted in feedback after slow and lazy attempts (docs/training.md, \"SFT corpus\").\n\n"
      "Examples:\n"
      "  turnrl make-sft-data --out runs/sft_cpu\n"
      "  turnrl make-sft-data configs/cpu_code_actions.yaml --out runs/sft_cpu --conversations 600 --seed 2\n"
      "  turnrl make-sft-data --out runs/sft_cpu --set tasks.validation_fraction=0.3 --mix fast=0.5,wrong=0.5\n"
      "  turnrl make-sft-data --out runs/sft_compact --style compact --set 'tasks.include=[relu_bias,matmul_bias_relu]'");
  c->callback([a] { run_make_sft_data(*a); });
}

}  // namespace turnrl::cli
