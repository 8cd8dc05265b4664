#include "turnrl/rl/sft_config.h"

#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"

namespace turnrl {

template <typename V>
static void describe(V& v, SFTDataConfig& o) {
  v.text("train", o.train, "chat JSON Lines file ({\"messages\": [{\"role\", \"content\"}, ...]} a line)");
  v.text("validation", o.validation, "held-out chat JSON Lines file; \"\" = none");
  v.integer("max_length", o.max_length, 2, 1 << 24, "tokens per row; >= 2");
  v.choice("truncation", o.truncation, {"truncate", "drop"}, "longer conversations: truncate | drop");
  v.flag("packing", o.packing, "join whole conversations into rows of up to max_length tokens");
  v.integer("bucket_window", o.bucket_window, 1, 1 << 30, "sort rows by length within windows of the shuffled order; 1 = off");
}

template <typename V>
static void describe(V& v, SFTLoopConfig& o) {
  v.integer("steps", o.steps, 0, int64_t(1) << 40, "optimizer steps; 0 = epochs passes over the data");
  v.integer("epochs", o.epochs, 1, 1 << 20, "passes over the training rows when steps is 0; >= 1");
  v.integer("micro_batch_size", o.micro_batch_size, 1, 1 << 20, "rows per forward/backward; >= 1");
  v.integer("grad_accum", o.grad_accum, 1, 1 << 20, "micro-batches per optimizer step; >= 1");
  v.integer("eval_every", o.eval_every, 0, int64_t(1) << 40, "steps between validation losses; 0 = only at the end");
  v.integer("seed", o.seed, 0, INT64_MAX, "model init and data order");
  v.integer("threads", o.threads, 0, 4096, "LibTorch intra-op threads; 0 = LibTorch default");
}

static void write_options(ConfigWriter& w, const SFTDataConfig& o) { write_described(w, o); }
static void write_options(ConfigWriter& w, const SFTLoopConfig& o) { write_described(w, o); }

SFTConfig parse_sft_config(const YAML::Node& root) {
  SFTConfig c;
  ConfigReader r(root, "");
  r.section("run", [&](ConfigReader& s) { read_options(s, c.run); });
  r.section("model", [&](ConfigReader& s) { read_options(s, c.model); });
  r.section("data", [&](ConfigReader& s) { read_described(s, c.data); });
  r.section("sft", [&](ConfigReader& s) { read_described(s, c.sft); });
  r.section("optimizer", [&](ConfigReader& s) { read_options(s, c.optimizer); });
  r.section("checkpoint", [&](ConfigReader& s) { read_options(s, c.checkpoint); });
  r.finish();
  if (c.model.max_seq > 0 && c.model.max_seq < c.data.max_length)
    fail("model.max_seq: {} is shorter than data.max_length {}; allowed: 0 (the model's own) or >= data.max_length",
         c.model.max_seq, c.data.max_length);
  return c;
}

SFTConfig load_sft_config(const std::string& file, const std::vector<std::string>& overrides) {
  return load_config_file(file, overrides, [](const YAML::Node& root) { return parse_sft_config(root); });
}

std::string sft_config_to_yaml(const SFTConfig& c, bool annotate) {
  ConfigWriter w(annotate);
  if (annotate) w.raw("# turnrl sft config: every key with its default. Reference: docs/configuration.md");
  write_options_section(w, "run", "Where the run writes: resolved config, metrics.jsonl, checkpoints/, export/.", c.run);
  write_options_section(w, "model", kModelSectionHelp, c.model);
  write_options_section(w, "data", "Chat conversations; the loss is on the assistant's tokens only.", c.data);
  write_options_section(w, "sft", "SFT loop sizes.", c.sft);
  write_options_section(w, "optimizer", kOptimizerSectionHelp, c.optimizer);
  write_options_section(w, "checkpoint", kCheckpointSectionHelp, c.checkpoint);
  return w.str();
}

std::string default_sft_config_yaml() { return sft_config_to_yaml(SFTConfig{}, true); }

}  // namespace turnrl
