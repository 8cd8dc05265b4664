// SFT: conversation tokens equal a ChatCodec episode's, the loss mask is the assistant's tokens
// only (hand-built for the byte and the Qwen3 tokenizer), masked tokens get no gradient (checked
// against the hand-computed softmax gradient), the loss falls, resuming continues bit-exactly, and
// bad data and config name what is wrong.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/model/hf_policy.h"
#include "turnrl/model/hf_tokenizer.h"
#include "turnrl/model/transformer.h"
#include "turnrl/rl/sft_config.h"
#include "turnrl/rl/metrics.h"
#include "turnrl/rl/rollout.h"
#include "turnrl/rl/sft.h"

using namespace turnrl;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("turnrl_test_sft_" + name + "_" + std::to_string(::getpid()));
  remove_tree(dir.string());
  fs::create_directories(dir);
  return dir.string();
}

std::string write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

const std::vector<ChatMessage> kTwoTurns = {{"system", "You write kernels."},
                                            {"user", "Write relu."},
                                            {"assistant", "```cpp\nrelu\n```"},
                                            {"user", "Wrong: output mismatch."},
                                            {"assistant", "```cpp\nfixed relu\n```"}};

// The sequence the chat template defines for kTwoTurns, and its mask, built from the tokenizer's
// own pieces: prompt | a1 + stop | continuation | a2 + stop.
ConversationTokens hand_built(const ChatTokenizer& tok) {
  ConversationTokens out;
  auto add = [&](const TokenIds& ids, uint8_t mask) {
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.assistant.insert(out.assistant.end(), ids.size(), mask);
  };
  const int64_t stop = tok.stop_tokens().front();
  add(tok.render_prompt({kTwoTurns[0], kTwoTurns[1]}), 0);
  add(tok.encode(kTwoTurns[2].text), 1);
  add({stop}, 1);
  add(tok.render_continuation({kTwoTurns[3]}, true), 0);
  add(tok.encode(kTwoTurns[4].text), 1);
  add({stop}, 1);
  return out;
}

// A policy that writes the given responses, one a turn (for B = 1): the rollout, codec and
// environment around it are the real ones.
class ScriptedPolicy : public Policy {
 public:
  explicit ScriptedPolicy(std::vector<TokenIds> responses) : responses_(std::move(responses)) {}
  TokenLogp forward_logp(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) override {
    fail("ScriptedPolicy: not for training");
  }
  Rollout generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask, const SamplingOptions&) override {
    const TokenIds& r = responses_.at(turn_++);
    const int64_t p = prompts.size(1), n = int64_t(r.size());
    Rollout out;
    out.tokens = torch::cat({prompts, torch::tensor(r, torch::kLong).unsqueeze(0)}, 1);
    out.attention_mask = torch::cat({prompt_mask, torch::ones({1, n}, torch::kBool)}, 1);
    out.response_mask = torch::cat({torch::zeros({1, p}, torch::kBool), torch::ones({1, n}, torch::kBool)}, 1);
    out.logp = torch::zeros({1, p + n});
    out.num_generated = torch::tensor({n}, torch::kLong);
    out.prompt_length = p;
    return out;
  }
  std::vector<torch::Tensor> parameters() override { return {}; }
  void save(const std::string&) override {}
  void load(const std::string&) override {}
  void train(bool) override {}
  void to(torch::Device) override {}
  void to(torch::Dtype) override {}
  torch::Device device() const override { return torch::kCPU; }

 private:
  std::vector<TokenIds> responses_;
  size_t turn_ = 0;
};

// Plays kTwoTurns: the system and first user message, then, like KernelEnv, the policy's reply
// echoed as an assistant message followed by the feedback.
class ScriptedEnv : public Environment {
 public:
  Observation reset(const Task&) override {
    messages_ = {kTwoTurns[0], kTwoTurns[1]};
    return {messages_, 0, ""};
  }
  StepResult step(const Action& action) override {
    StepResult out;
    messages_.push_back({"assistant", action.text});
    if (messages_.size() == 3) messages_.push_back(kTwoTurns[3]);
    out.done = messages_.size() > 4;
    out.observation = {messages_, int(messages_.size() / 2), ""};
    return out;
  }

 private:
  std::vector<ChatMessage> messages_;
};

std::string chat_line(const std::vector<ChatMessage>& messages) {
  std::string out = "{\"id\": 7, \"messages\": [";
  for (size_t i = 0; i < messages.size(); ++i)
    out += fmt::format("{}{{\"role\": {}, \"content\": {}}}", i ? ", " : "", json_string(messages[i].role),
                       json_string(messages[i].text));
  return out + "]}\n";
}

// A small fixed corpus: each conversation asks for an operation and answers with its kernel.
std::string write_corpus(const std::string& dir, const std::string& name, int conversations) {
  const std::vector<std::string> ops = {"relu", "gelu", "add", "mul", "tanh", "silu", "exp", "abs"};
  std::string text;
  for (int i = 0; i < conversations; ++i) {
    const std::string& op = ops[size_t(i) % ops.size()];
    text += chat_line({{"user", "Write " + op + "."},
                       {"assistant", "```cpp\nout[i] = " + op + "(x[i]);\n```"},
                       {"user", "Correct, speedup 1.1x."},
                       {"assistant", "```cpp\n#pragma omp simd\nout[i] = " + op + "(x[i]);\n```"}});
  }
  return write_text(dir + "/" + name, text);
}

SFTParts tiny_parts(const std::string& dir, int64_t steps) {
  fs::create_directories(dir);
  SFTParts parts;
  parts.tokenizer = std::make_shared<const ByteChatTokenizer>();
  torch::manual_seed(5);
  parts.policy = std::make_shared<TransformerPolicy>(
      TransformerOptions().vocab(parts.tokenizer->vocab_size()).d_model(32).layers(1).heads(2).max_seq(256));
  SFTOptions& o = parts.options;
  o.run.dir = dir + "/run";
  o.run.progress = false;
  o.data.train = write_corpus(dir, "train.jsonl", 8);
  o.data.validation = write_corpus(dir, "validation.jsonl", 4);
  o.data.max_length = 256;
  o.sft.steps = steps;
  o.sft.micro_batch_size = 2;
  o.sft.grad_accum = 2;
  o.optimizer.lr = 1e-2;
  o.optimizer.schedule = "cosine";
  o.optimizer.warmup_steps = 2;
  o.checkpoint.every = 0;
  parts.export_model = [](Policy& p, const std::string& folder) { p.save(folder + "/policy.pt"); };
  return parts;
}

std::vector<torch::Tensor> parameters_of(Policy& p) {
  std::vector<torch::Tensor> out;
  for (const auto& t : p.parameters()) out.push_back(t.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("conversation tokens of the byte template equal the hand-built sequence and mask", "[sft]") {
  const auto tok = std::make_shared<const ByteChatTokenizer>();
  const ConversationTokens got = conversation_tokens(ChatCodec(tok, 64), kTwoTurns);
  const ConversationTokens want = hand_built(*tok);
  CHECK(got.tokens == want.tokens);
  CHECK(got.assistant == want.assistant);
  // Exactly the two answers' bytes and two stop tokens are the assistant's.
  const int64_t assistant = std::count(got.assistant.begin(), got.assistant.end(), uint8_t(1));
  CHECK(assistant == int64_t(kTwoTurns[2].text.size() + kTwoTurns[4].text.size() + 2));
}

TEST_CASE("conversation tokens of the Qwen3 template equal the hand-built sequence and mask", "[sft]") {
  const auto tok = load_chat_tokenizer(std::string(TURNRL_SOURCE_DIR) + "/.deps/hf-tokenizers/qwen3");
  const ConversationTokens got = conversation_tokens(ChatCodec(tok, 64), kTwoTurns);
  const ConversationTokens want = hand_built(*tok);
  CHECK(got.tokens == want.tokens);
  CHECK(got.assistant == want.assistant);
  // The assistant turns end with <|im_end|>, and the text the mask selects decodes to the answers.
  TokenIds assistant_ids;
  for (size_t i = 0; i < got.tokens.size(); ++i)
    if (got.assistant[i]) assistant_ids.push_back(got.tokens[i]);
  CHECK(tok->decode(assistant_ids, true) == kTwoTurns[2].text + kTwoTurns[4].text);
  CHECK(tok->decode({tok->stop_tokens().front()}, false) == "<|im_end|>");
}

TEST_CASE("conversation tokens equal the last turn of a real ChatCodec episode, masks included", "[sft]") {
  const auto tok = std::make_shared<const ByteChatTokenizer>();
  auto codec = std::make_shared<ChatCodec>(tok, 64);
  const int64_t stop = tok->stop_tokens().front();
  TokenIds a1 = tok->encode(kTwoTurns[2].text), a2 = tok->encode(kTwoTurns[4].text);
  a1.push_back(stop), a2.push_back(stop);
  ScriptedPolicy policy({a1, a2});
  RolloutCollector collector(pool_of([] { return std::make_unique<ScriptedEnv>(); }), codec);
  Task task;
  task.id = "two_turns";
  const RolloutBatch r = collector.collect(policy, {task}, 1, SamplingOptions(), 1);
  REQUIRE(r.batch.size() == 2);
  // Row 1 (the last turn) holds the whole conversation; each row's response mask marks its turn.
  const ConversationTokens want = conversation_tokens(*codec, kTwoTurns);
  const torch::Tensor attention = r.batch.attention_mask[1];
  const torch::Tensor tokens = r.batch.tokens[1].masked_select(attention);
  CHECK(std::vector<int64_t>(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + tokens.numel()) == want.tokens);
  std::vector<uint8_t> mask(want.tokens.size(), 0);
  for (int64_t row = 0; row < 2; ++row) {
    const torch::Tensor m = r.batch.response_mask[row].masked_select(r.batch.attention_mask[row]);
    for (int64_t i = 0; i < m.numel(); ++i) mask[size_t(i)] |= uint8_t(m[i].item<bool>());
  }
  CHECK(mask == want.assistant);
}

TEST_CASE("assistant_nll: masked positions get no gradient, unmasked ones the softmax gradient", "[sft]") {
  // Logits are free parameters per position (independent of the tokens), so the gradient of the
  // mean NLL at position t-1 is (softmax - onehot(token t)) / n exactly when t is in the mask.
  struct PositionLogits : torch::nn::Module {
    torch::Tensor logits;
    PositionLogits() { logits = register_parameter("logits", torch::randn({1, 6, 5}, torch::kDouble)); }
  };
  torch::manual_seed(11);
  auto module = std::make_shared<PositionLogits>();
  ModulePolicy policy(module, [m = module.get()](const torch::Tensor& t, const torch::Tensor&) {
    return m->logits.expand({t.size(0), -1, -1});
  });
  SFTBatch batch;
  batch.tokens = torch::tensor({{0, 1, 2, 3, 4, 1}}, torch::kLong);
  batch.attention_mask = torch::ones({1, 6}, torch::kBool);
  batch.loss_mask = torch::tensor({{0, 0, 1, 1, 0, 1}}, torch::kBool);
  auto loss_and_grad = [&](const SFTBatch& b) {
    module->zero_grad();
    const AssistantNll nll = assistant_nll(policy, b);
    (nll.sum / double(nll.tokens)).backward();
    return std::make_pair(nll.sum.item<double>() / double(nll.tokens), module->logits.grad().clone());
  };
  const auto [loss, grad] = loss_and_grad(batch);
  const torch::Tensor probs = torch::softmax(module->logits.detach(), -1);
  double want_loss = 0;
  for (int64_t t = 1; t < 6; ++t) {
    const bool in_mask = batch.loss_mask[0][t].item<bool>();
    const int64_t target = batch.tokens[0][t].item<int64_t>();
    if (in_mask) want_loss -= std::log(probs[0][t - 1][target].item<double>()) / 3.0;
    for (int64_t v = 0; v < 5; ++v) {
      const double want = in_mask ? (probs[0][t - 1][v].item<double>() - (v == target ? 1.0 : 0.0)) / 3.0 : 0.0;
      CHECK(grad[0][t - 1][v].item<double>() == Approx(want).margin(1e-12));
    }
  }
  CHECK(loss == Approx(want_loss).epsilon(1e-6));  // log-probs are computed in float32
  CHECK(grad[0][5].abs().sum().item<double>() == 0.0);  // the last position predicts nothing
  // A masked position's target changed: the same loss and gradients.
  SFTBatch perturbed = batch;
  perturbed.tokens = batch.tokens.clone();
  perturbed.tokens[0][4] = 0;
  perturbed.tokens[0][1] = 3;
  const auto [loss2, grad2] = loss_and_grad(perturbed);
  CHECK(loss2 == loss);
  CHECK(torch::equal(grad2, grad));
}

TEST_CASE("read_chat_jsonl reads messages, ignores other keys and names file:line and the field of bad lines", "[sft]") {
  const std::string dir = temp_dir("read");
  const auto examples = read_chat_jsonl(write_text(dir + "/ok.jsonl", chat_line(kTwoTurns) + "\n" + chat_line(kTwoTurns)));
  REQUIRE(examples.size() == 2);
  CHECK(examples[1].messages.size() == kTwoTurns.size());
  CHECK(examples[1].messages[4].text == kTwoTurns[4].text);
  CHECK(examples[1].source == dir + "/ok.jsonl:3");
  const std::string ok = chat_line(kTwoTurns);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[1, 2]", ":2: expected a JSON object"},
      {"{\"msgs\": []}", ":2: missing \"messages\""},
      {"{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", ":2: messages[0].role 'tool' is not allowed"},
      {"{\"messages\": [{\"role\": \"user\"}]}", ":2: messages[0].content is missing"},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", ":2: \"messages\" has no assistant message"},
      {"{\"messages\": ", ":2: not a JSON object"}};
  for (const auto& [line, message] : bad) {
    INFO(line);
    const std::string file = write_text(dir + "/bad.jsonl", ok + line + "\n");
    CHECK_THROWS_WITH(read_chat_jsonl(file), Catch::Contains(file + message));
  }
  CHECK_THROWS_WITH(read_chat_jsonl(dir + "/missing.jsonl"), Catch::Contains("cannot open"));
  remove_tree(dir);
}

TEST_CASE("tokenize_conversations truncates, drops and packs, and counts each", "[sft]") {
  const auto tok = std::make_shared<const ByteChatTokenizer>();
  const ChatCodec codec(tok, 64);
  const std::vector<ChatExample> examples(3, ChatExample{kTwoTurns, "x:1"});
  const size_t full = conversation_tokens(codec, kTwoTurns).tokens.size();
  SFTDataConfig data;
  data.max_length = int64_t(full) - 3;
  const SFTRows cut = tokenize_conversations(examples, codec, data);
  CHECK(cut.size() == 3);
  CHECK(cut.truncated == 3);
  CHECK(cut.tokens[0].size() == full - 3);
  data.truncation = "drop";
  const SFTRows dropped = tokenize_conversations(examples, codec, data);
  CHECK(dropped.size() == 0);
  CHECK(dropped.dropped == 3);
  // Two conversations fit a row of 2 x full tokens: 3 conversations pack into 2 rows, every token kept.
  data.max_length = int64_t(2 * full);
  data.packing = true;
  const SFTRows packed = tokenize_conversations(examples, codec, data);
  CHECK(packed.size() == 2);
  CHECK(packed.packed_rows == 2);
  CHECK(packed.tokens[0].size() == 2 * full);
  CHECK(packed.loss_tokens(0) == 2 * tokenize_conversations({examples[0]}, codec, SFTDataConfig()).loss_tokens(0));
}

TEST_CASE("epoch_micro_batches covers every row once, buckets by length and is seeded", "[sft]") {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < 23; ++i) lengths.push_back((i * 7) % 23 + 1);  // distinct lengths 1..23
  const auto plan = epoch_micro_batches(lengths, 4, 23, 9, 0);
  REQUIRE(plan.size() == 6);
  std::vector<int64_t> all;
  for (const auto& mb : plan) all.insert(all.end(), mb.begin(), mb.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 23; ++i) CHECK(all[size_t(i)] == i);
  // One window over all rows: each micro-batch is a run of consecutive lengths in sorted order.
  for (const auto& mb : plan) {
    std::vector<int64_t> l;
    for (int64_t i : mb) l.push_back(lengths[size_t(i)]);
    CHECK(std::is_sorted(l.begin(), l.end()));
    CHECK(l.back() - l.front() == int64_t(l.size()) - 1);
    CHECK((l.front() - 1) % 4 == 0);
  }
  CHECK(epoch_micro_batches(lengths, 4, 23, 9, 0) == plan);
  CHECK(epoch_micro_batches(lengths, 4, 23, 9, 1) != plan);
  CHECK(epoch_micro_batches(lengths, 4, 1, 9, 0) != plan);
}

TEST_CASE("collate right-pads rows and never marks column 0", "[sft]") {
  SFTRows rows;
  rows.tokens = {{5, 6, 7}, {8, 9}};
  rows.loss_mask = {{0, 1, 1}, {0, 1}};
  const SFTBatch b = collate(rows, {1, 0}, 3);
  CHECK(torch::equal(b.tokens, torch::tensor({{8, 9, 3}, {5, 6, 7}}, torch::kLong)));
  CHECK(torch::equal(b.attention_mask, torch::tensor({{true, true, false}, {true, true, true}})));
  CHECK(torch::equal(b.loss_mask, torch::tensor({{false, true, false}, {false, true, true}})));
  CHECK_THROWS_WITH(collate(rows, {2}, 3), Catch::Contains("row 2 is out of range"));
}

TEST_CASE("SFT of the built-in policy lowers the training and validation loss", "[sft]") {
  const std::string dir = temp_dir("falls");
  SFTTrainer trainer(tiny_parts(dir, 16));
  const double val_before = trainer.mean_loss(trainer.validation_rows());
  const double train_before = trainer.mean_loss(trainer.train_rows());
  trainer.train();
  const double val_after = trainer.mean_loss(trainer.validation_rows());
  const double train_after = trainer.mean_loss(trainer.train_rows());
  CHECK(train_after < 0.5 * train_before);
  CHECK(val_after < 0.5 * val_before);
  const auto lines = read_metrics_jsonl(dir + "/run/metrics.jsonl");
  REQUIRE(lines.size() == 16);
  CHECK(lines.front().at("sft/loss") > 2 * lines.back().at("sft/loss"));
  CHECK(lines.back().at("val/loss") == Approx(val_after).epsilon(1e-6));
  CHECK(lines[0].at("optim/lr") == Approx(0.5e-2));  // warm-up: step 1 of 2
  CHECK(lines.back().at("perf/tokens_per_s") > 0);
  CHECK(fs::exists(dir + "/run/config.yaml") == false);  // no resolved config was given
  // The export loads into a fresh built-in policy with the trained weights.
  auto fresh = TransformerPolicy::from_file(dir + "/run/export/policy.pt");
  const auto a = parameters_of(trainer.policy()), b = parameters_of(*fresh);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
  remove_tree(dir);
}

TEST_CASE("resuming SFT from a checkpoint gives the parameters of an uninterrupted run", "[sft]") {
  const std::string dir = temp_dir("resume");
  SFTTrainer whole(tiny_parts(dir + "/a", 6));
  whole.train();
  {
    SFTTrainer first(tiny_parts(dir + "/b", 6));
    for (int i = 0; i < 3; ++i) first.train_step();
    first.save_checkpoint();
  }
  SFTParts parts = tiny_parts(dir + "/b", 6);
  torch::manual_seed(99);  // other initial weights: the checkpoint must replace them
  parts.policy = std::make_shared<TransformerPolicy>(
      TransformerOptions().vocab(parts.tokenizer->vocab_size()).d_model(32).layers(1).heads(2).max_seq(256));
  SFTTrainer second(std::move(parts));
  second.train(true);
  CHECK(second.step() == 6);
  const auto a = parameters_of(whole.policy()), b = parameters_of(second.policy());
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
  // Starting over in a run directory with checkpoints needs --resume.
  SFTTrainer again(tiny_parts(dir + "/b", 6));
  CHECK_THROWS_WITH(again.train(false), Catch::Contains("already holds checkpoints"));
  remove_tree(dir);
}

TEST_CASE("SFT of a bf16 model steps float32 master weights: updates below bf16's spacing reach the model", "[sft]") {
  // Weights of magnitude in [2^-10, 2^-9) have bf16 spacing 2^-17 (7.6e-6). AdamW at lr 5e-7 moves
  // a weight by at most ~1.6e-6 per step (|m̂| / √v̂ <= 3.2 with the default betas), below half that
  // spacing: stepped in bf16 every update rounds away; through float32 masters 40 steps add up to
  // as much as 2e-5, past the spacing.
  auto band_changes = [](bool master_weights, const std::string& dir) {
    SFTParts parts = tiny_parts(dir, 40);
    parts.policy = load_hf_policy(HFModelOptions().path(std::string(TURNRL_TEST_DATA_DIR) + "/hf/qwen3").dtype(torch::kBFloat16));
    parts.export_model = nullptr;
    parts.options.optimizer.lr = 5e-7;
    parts.options.optimizer.schedule = "constant";
    parts.options.optimizer.warmup_steps = 0;
    parts.options.optimizer.weight_decay = 0;
    parts.options.optimizer.master_weights = master_weights;
    parts.options.data.validation = "";
    SFTTrainer trainer(std::move(parts));
    const auto before = parameters_of(trainer.policy());
    trainer.train();
    const auto after = parameters_of(trainer.policy());
    int64_t in_band = 0, changed = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      REQUIRE(after[i].scalar_type() == torch::kBFloat16);
      const torch::Tensor magnitude = before[i].to(torch::kFloat).abs();
      const torch::Tensor band = (magnitude >= 1.0 / 1024) & (magnitude < 1.0 / 512);
      in_band += band.sum().item<int64_t>();
      changed += (band & (after[i] != before[i])).sum().item<int64_t>();
    }
    REQUIRE(in_band > 100);
    return std::make_pair(changed, in_band);
  };
  const std::string dir = temp_dir("masters");
  const auto [plain, band] = band_changes(false, dir + "/plain");
  CHECK(plain == 0);
  const auto [mastered, band_again] = band_changes(true, dir + "/masters");
  CHECK(band_again == band);
  CHECK(mastered > band / 10);
  // A checkpoint carries the masters: a run resumed after 3 of 6 steps ends with the parameters of
  // an uninterrupted one (restarting from the rounded bf16 weights would not).
  auto bf16_parts = [](const std::string& run_dir) {
    SFTParts parts = tiny_parts(run_dir, 6);
    parts.policy = load_hf_policy(HFModelOptions().path(std::string(TURNRL_TEST_DATA_DIR) + "/hf/qwen3").dtype(torch::kBFloat16));
    parts.export_model = nullptr;
    parts.options.optimizer.lr = 1e-5;
    return parts;
  };
  SFTTrainer whole(bf16_parts(dir + "/whole"));
  whole.train();
  {
    SFTTrainer first(bf16_parts(dir + "/resumed"));
    for (int i = 0; i < 3; ++i) first.train_step();
    CHECK(fs::exists(fs::path(first.save_checkpoint()) / "master_weights.pt"));
  }
  SFTTrainer second(bf16_parts(dir + "/resumed"));
  second.train(true);
  const auto a = parameters_of(whole.policy()), b = parameters_of(second.policy());
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
  remove_tree(dir);
}

TEST_CASE("bad SFT configs name the key", "[sft]") {
  auto error_of = [](const std::string& yaml) {
    try {
      parse_sft_config(YAML::Load(yaml));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of("sft: {stepz: 3}"), Catch::StartsWith("sft.stepz: unknown key"));
  CHECK_THAT(error_of("data: {truncation: cut}"), Catch::StartsWith("data.truncation:"));
  CHECK_THAT(error_of("sft: {grad_accum: 0}"), Catch::StartsWith("sft.grad_accum:"));
  CHECK_THAT(error_of("optimizer: {schedule: linear}"), Catch::StartsWith("optimizer.schedule:"));
  CHECK_THAT(error_of("model: {max_seq: 64}\ndata: {max_length: 128}"), Catch::StartsWith("model.max_seq: 64"));
  CHECK(error_of("model: {max_seq: 0}\ndata: {max_length: 128}") == "no error");
  CHECK_THAT(error_of("trainer: {steps: 3}"), Catch::StartsWith("trainer: unknown key"));
  // The resolved config reads back to the same values.
  SFTConfig c = parse_sft_config(YAML::Load("data: {train: t.jsonl, max_length: 48, packing: true}\nsft: {steps: 7}"));
  const SFTConfig back = parse_sft_config(YAML::Load(sft_config_to_yaml(c)));
  CHECK(back.data.train == "t.jsonl");
  CHECK(back.data.max_length == 48);
  CHECK(back.data.packing);
  CHECK(back.sft.steps == 7);
  // Loading names the --set an error is about; the trainer refuses a config without training data.
  CHECK_THROWS_WITH(load_sft_config("", {"sft.epochs=0"}), Catch::StartsWith("--set 'sft.epochs=0': sft.epochs:"));
  SFTParts parts = tiny_parts(temp_dir("nodata"), 1);
  parts.options.data.train = "";
  CHECK_THROWS_WITH(SFTTrainer(parts), Catch::StartsWith("data.train:"));
  parts = tiny_parts(temp_dir("context"), 1);
  parts.max_seq = 128;
  CHECK_THROWS_WITH(SFTTrainer(parts), Catch::StartsWith("data.max_length: 256 is longer than the policy's context of 128"));
}

TEST_CASE("docs/configuration.md shows the sft defaults the code prints", "[sft]") {
  std::ifstream in(std::string(TURNRL_SOURCE_DIR) + "/docs/configuration.md");
  REQUIRE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t section = doc.find("## `turnrl sft`: every key");
  REQUIRE(section != std::string::npos);
  const size_t open = doc.find("```yaml\n", section);
  REQUIRE(open != std::string::npos);
  const size_t start = open + 8, close = doc.find("```", start);
  REQUIRE(close != std::string::npos);
  INFO("regenerate the block with `turnrl config --sft --print-defaults`");
  CHECK(doc.substr(start, close - start) == default_sft_config_yaml());
}
