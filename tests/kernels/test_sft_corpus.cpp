// The SFT corpus: every written turn's kind is what a fresh evaluator says of its code, the corpus
// is reproducible from its seed, held-out tasks stay out of train.jsonl, the first turn's messages
// are those a code-action RL episode shows, and bad options are errors naming the field.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "turnrl/core/filesystem.h"
#include "turnrl/core/error.h"
#include "turnrl/kernels/builtin_tasks.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/kernels/sft_corpus.h"
#include "turnrl/kernels/cpu_backend.h"
#include "turnrl/rl/chat_codec.h"

using namespace turnrl;

namespace {

KernelEnvOptions code_env() {
  KernelEnvOptions env;
  env.max_turns = 2;
  env.correctness_trials = 1;
  env.timing_trials = 2;
  return env;
}

TaskSet only(const std::string& id) { return TaskSet{{builtin_cpu_tasks().find(id)}}; }

// One conversation of each kind, speed thresholds that any correct turn passes: the test is about
// kinds and verdicts, not about how fast the plans run on a loaded CI machine.
SftCorpusOptions every_kind(int64_t conversations, SftMix mix) {
  return SftCorpusOptions().with_conversations(conversations).with_seed(7).with_mix(std::move(mix)).with_fast_speedup(1e-3)
      .with_slow_speedup(1e6).with_batch(4);
}

SftMix shares(const std::vector<SftTurnKind>& kinds) {
  SftMix mix;
  for (SftTurnKind k : kinds) mix.emplace_back(k, 1.0);
  return mix;
}

std::shared_ptr<KernelEvaluator> evaluator() {
  static auto shared = std::make_shared<CpuEvaluator>(CpuEvalOptions().num_workers(2));
  return shared;
}

// Every kind once, softmax_rows for training and relu_bias held out (made once per process). Seed
// 7 deals the lazy turn to softmax_rows, where the evaluator refuses the library call the task
// asks to replace (calls_reference); relu_bias's lazy plan is caught by its profile instead
// (no_candidate_work), a timing that a loaded machine can blur.
const SftCorpus& corpus_of_every_kind() {
  static const SftCorpus corpus = make_sft_corpus(only("softmax_rows"), only("relu_bias"), evaluator(), KernelRewardPolicy(),
                                                  code_env(), every_kind(7, shares(sft_turn_kinds())));
  return corpus;
}

std::vector<const SftConversation*> all_of(const SftCorpus& c) {
  std::vector<const SftConversation*> out;
  for (const auto* split : {&c.train, &c.validation})
    for (const SftConversation& conv : *split) out.push_back(&conv);
  return out;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// One corpus of every kind (made once: each CTest case is its own process), looked at from
// each side: the evaluator, the RL episode, the split and the counts.
TEST_CASE("a corpus of every kind, checked by a fresh evaluator, against RL episodes, the split and its sizes", "[env][sft]") {
  const SftCorpus& corpus = corpus_of_every_kind();
  for (const SftDrop& d : corpus.dropped) UNSCOPED_INFO("dropped " << d.task << " " << to_string(d.kind) << ": " << d.verdict);
  REQUIRE(corpus.dropped.empty());
  REQUIRE(corpus.train.size() + corpus.validation.size() == 7);

  SECTION("every kind's turns are confirmed by a fresh evaluation of the written code") {
    // Re-evaluate every assistant turn's code through a new evaluator, as KernelEnv extracts it.
    CpuEvaluator fresh(CpuEvalOptions().num_workers(2));
    const KernelRewardPolicy reward;
    std::vector<EvalRequest> requests;
    std::vector<RewardOutcome> written;
    std::vector<std::string> labels;
    std::map<std::string, int> kinds_seen;
    for (const SftConversation* c : all_of(corpus)) {
      std::vector<std::string> assistant;
      for (const ChatMessage& m : c->messages)
        if (m.role == "assistant") assistant.push_back(m.text);
      REQUIRE(assistant.size() == c->kinds.size());
      REQUIRE(c->outcomes.size() == c->kinds.size());
      REQUIRE(c->messages.back().role == "assistant");
      // A failed or slow first attempt is followed by feedback and a fast one; a fast one stands alone.
      CHECK(c->kinds.size() == (c->kinds.front() == SftTurnKind::fast ? 1u : 2u));
      CHECK(c->kinds.back() == SftTurnKind::fast);
      for (size_t t = 0; t < assistant.size(); ++t) {
        ++kinds_seen[to_string(c->kinds[t])];
        const Extraction x = extract_candidate(assistant[t], {"cpp"});
        INFO(c->task << " turn " << t << " kind " << to_string(c->kinds[t]));
        if (c->kinds[t] == SftTurnKind::format) {
          CHECK_FALSE(x.ok);
          CHECK(c->outcomes[t] == RewardOutcome::format);
          continue;
        }
        REQUIRE(x.ok);
        EvalRequest r;
        r.task = c->task;
        r.candidate = x.code;
        r.correctness_trials = 1;
        r.timing_trials = 2;
        requests.push_back(r);
        written.push_back(c->outcomes[t]);
        labels.push_back(c->task + " " + to_string(c->kinds[t]));
      }
    }
    for (SftTurnKind k : sft_turn_kinds()) CHECK(kinds_seen[to_string(k)] >= 1);
    for (const SftConversation* c : all_of(corpus))
      if (c->kinds.front() == SftTurnKind::lazy) CHECK(c->task == "softmax_rows");
    const std::vector<EvalResult> results = fresh.evaluate(requests);
    for (size_t i = 0; i < results.size(); ++i) {
      INFO(labels[i] << ": " << to_string(results[i].error) << " " << results[i].message);
      CHECK(to_string(reward.score(results[i]).outcome) == std::string(to_string(written[i])));
    }
    // The outcome each kind stands for.
    for (const SftConversation* c : all_of(corpus)) {
      const std::map<SftTurnKind, RewardOutcome> expected = {
          {SftTurnKind::fast, RewardOutcome::correct},     {SftTurnKind::slow, RewardOutcome::correct},
          {SftTurnKind::wrong, RewardOutcome::incorrect},  {SftTurnKind::compile, RewardOutcome::compile},
          {SftTurnKind::lazy, RewardOutcome::hacking},     {SftTurnKind::hack, RewardOutcome::hacking},
          {SftTurnKind::format, RewardOutcome::format}};
      for (size_t t = 0; t < c->kinds.size(); ++t) CHECK(c->outcomes[t] == expected.at(c->kinds[t]));
    }
  }

  SECTION("a conversation's messages are those of a code-action episode, token for token") {
    const auto tokenizer = std::make_shared<const ByteChatTokenizer>();
    const ChatCodec codec(tokenizer, 128);
    for (const SftConversation* c : all_of(corpus)) {
      INFO(c->task);
      KernelEnv env(evaluator(), KernelRewardPolicy(), code_env());
      const Observation first = env.reset(builtin_cpu_tasks().find(c->task));
      REQUIRE(c->messages.size() >= 3);
      const std::vector<ChatMessage> opening(c->messages.begin(), c->messages.begin() + 2);
      CHECK(codec.prompt(EpisodeTokens{}, first) == tokenizer->render_prompt(opening));
      for (size_t i = 0; i < 2; ++i) {
        CHECK(opening[i].role == first.messages[i].role);
        CHECK(opening[i].text == first.messages[i].text);
      }
      // Between two attempts: KernelEnv's feedback message, quoting the evaluator's status line.
      if (c->kinds.size() == 2) {
        REQUIRE(c->messages.size() == 5);
        CHECK(c->messages[3].role == "user");
        CHECK(c->messages[3].text.find("Server feedback (status/metrics/errors):\nstatus: ") != std::string::npos);
        // RL's second prompt, token-in/token-out (the first prompt, the policy's reply as sampled up
        // to its stop token, the template's continuation with the feedback), is the template's
        // rendering of the conversation's first four messages: what SFT trains on.
        TokenIds reply = tokenizer->encode(c->messages[2].text);
        reply.push_back(tokenizer->stop_tokens().front());
        const Observation second{{c->messages.begin(), c->messages.begin() + 4}, 1, ""};
        const EpisodeTokens so_far = after_turn(codec.prompt(EpisodeTokens{}, first), reply, first, tokenizer->stop_tokens());
        CHECK(codec.prompt(so_far, second) == tokenizer->render_prompt(second.messages));
      }
    }
  }

  SECTION("held-out tasks are written to validation.jsonl only") {
    const std::string dir = (std::filesystem::temp_directory_path() / "turnrl_test_sft_corpus").string();
    turnrl::remove_tree(dir);
    write_sft_corpus(dir, corpus, every_kind(7, shares(sft_turn_kinds())));
    CHECK(corpus.held_out_tasks == std::vector<std::string>{"relu_bias"});
    for (const auto& [file, split, task] : {std::tuple{"train.jsonl", "train", "softmax_rows"},
                                            {"validation.jsonl", "validation", "relu_bias"}}) {
      std::ifstream in(dir + "/" + file);
      std::string line;
      int lines = 0;
      while (std::getline(in, line)) {
        ++lines;
        const auto j = nlohmann::json::parse(line);
        CHECK(j["meta"]["task"] == task);
        CHECK(j["meta"]["split"] == split);
        CHECK(j["messages"][0]["role"] == "system");
        CHECK(j["messages"][1]["role"] == "user");
        if (std::string(split) == "train") CHECK(line.find("relu_bias") == std::string::npos);
      }
      CHECK(lines > 0);
    }
    const auto stats = nlohmann::json::parse(read(dir + "/stats.json"));
    CHECK(stats["train"]["conversations"].get<int>() + stats["validation"]["conversations"].get<int>() == 7);
    CHECK(stats["held_out_tasks"] == nlohmann::json::array({"relu_bias"}));
    CHECK(stats["dropped"] == 0);
    turnrl::remove_tree(dir);
  }

  SECTION("corpus sizes are counted over every message") {
    const SftCorpusStats stats = sft_corpus_stats(corpus.train);
    int64_t bytes = 0, assistant = 0, turns = 0, longest = 0, messages = 0;
    for (const SftConversation& c : corpus.train) {
      int64_t conversation = 0;
      for (const ChatMessage& m : c.messages) {
        ++messages;
        bytes += int64_t(m.text.size());
        conversation += int64_t(m.text.size());
        if (m.role == "assistant") assistant += int64_t(m.text.size()), ++turns;
      }
      longest = std::max(longest, conversation);
    }
    CHECK(stats.conversations == int64_t(corpus.train.size()));
    CHECK(stats.bytes == bytes);
    CHECK(stats.assistant_bytes == assistant);
    CHECK(stats.assistant_turns == turns);
    // The byte template: one token a byte plus a few role and turn markers per message.
    CHECK(stats.tokens > bytes);
    CHECK(stats.tokens <= bytes + 4 * messages + 4 * int64_t(corpus.train.size()));
    CHECK(stats.longest_tokens > longest);
  }
}

TEST_CASE("the same seed and options give byte-identical files", "[env][sft]") {
  // Kinds whose feedback quotes no timing (slow and lazy feedback quotes measured microseconds).
  const SftCorpusOptions options =
      every_kind(5, shares({SftTurnKind::fast, SftTurnKind::wrong, SftTurnKind::compile, SftTurnKind::hack, SftTurnKind::format}));
  const std::string base = (std::filesystem::temp_directory_path() / "turnrl_test_sft_determinism").string();
  turnrl::remove_tree(base);
  for (const std::string run : {"a", "b"})
    write_sft_corpus(base + "/" + run,
                     make_sft_corpus(only("gelu_tanh"), TaskSet{}, evaluator(), KernelRewardPolicy(), code_env(), options),
                     options);
  for (const std::string file : {"train.jsonl", "validation.jsonl", "stats.json"}) {
    INFO(file);
    CHECK(read(base + "/a/" + file) == read(base + "/b/" + file));
  }
  CHECK_FALSE(read(base + "/a/train.jsonl").empty());
  turnrl::remove_tree(base);
}

TEST_CASE("a conversation whose verdicts do not match its kinds is dropped and counted, never written", "[env][sft]") {
  // No plan reaches a 1e6x speedup: every fast turn (the repair after a format failure) misses.
  const SftCorpusOptions options = every_kind(2, shares({SftTurnKind::format})).with_fast_speedup(1e6);
  const SftCorpus corpus = make_sft_corpus(only("relu_bias"), TaskSet{}, evaluator(), KernelRewardPolicy(), code_env(), options);
  CHECK(corpus.train.empty());
  CHECK(corpus.evaluations == 2);  // the format failures need no evaluation
  REQUIRE(corpus.dropped.size() == 2);
  for (const SftDrop& d : corpus.dropped) {
    CHECK(d.kind == SftTurnKind::fast);
    CHECK(d.turn == 1);
    CHECK(d.verdict == "correct below the fast speedup");
    CHECK(d.speedup > 0);
  }
  CHECK_THAT(sft_corpus_summary(corpus), Catch::Contains("fast -> correct below the fast speedup") && Catch::Contains("   2  relu_bias ("));
}

TEST_CASE("a mix is read from kind=share words in order", "[env][sft]") {
  const SftMix mix = parse_sft_mix("fast=0.5,format=0.3,compile=0.2", "--mix");
  REQUIRE(mix.size() == 3);
  CHECK(mix[1].first == SftTurnKind::format);
  CHECK(mix[1].second == 0.3);
  CHECK(mix[2].first == SftTurnKind::compile);
  CHECK(default_sft_mix().size() == sft_turn_kinds().size());
  // Other backends' default leaves out `wrong` (rendered for cpu tasks only) and keeps the rest.
  for (const std::string backend : {"cuda", "python"}) {
    const SftMix other = default_sft_mix(backend);
    CHECK(other.size() == sft_turn_kinds().size() - 1);
    for (const auto& [kind, share] : other) {
      CHECK(kind != SftTurnKind::wrong);
      for (const auto& [cpu_kind, cpu_share] : default_sft_mix())
        if (cpu_kind == kind) CHECK(share == cpu_share);
    }
  }
}

TEST_CASE("bad options are errors naming the field", "[env][sft]") {
  CHECK_THAT(error_of([] { parse_sft_mix("fast=0.5,quick=0.5", "--mix"); }), Catch::Contains("--mix: unknown turn kind 'quick'"));
  CHECK_THAT(error_of([] { parse_sft_mix("fast=0.5,fast=0.2", "--mix"); }), Catch::Contains("--mix: kind 'fast' is given twice"));
  CHECK_THAT(error_of([] { parse_sft_mix("fast=1.5", "--mix"); }), Catch::Contains("--mix: share 1.5 of 'fast' is out of range"));
  CHECK_THAT(error_of([] { parse_sft_mix("fast=0,slow=0", "--mix"); }), Catch::Contains("--mix: the shares sum to 0"));
  CHECK_THAT(error_of([] { parse_sft_mix("fast", "--mix"); }), Catch::Contains("'fast' is not kind=share"));
  CHECK_THAT(error_of([] { parse_sft_mix("fast=x", "--mix"); }), Catch::Contains("share 'x' of 'fast' is not a number"));
  CHECK_THAT(error_of([] { validate(SftCorpusOptions().with_conversations(0)); }), Catch::Contains("conversations: 0 is out of range"));
  CHECK_THAT(error_of([] { validate(SftCorpusOptions().with_batch(0)); }), Catch::Contains("batch: 0 is out of range"));
  CHECK_THAT(error_of([] { validate(SftCorpusOptions().with_fast_speedup(0)); }), Catch::Contains("fast_speedup: 0"));

  const auto make = [](KernelEnvOptions env, SftMix mix, TaskSet tasks = only("relu_bias")) {
    make_sft_corpus(tasks, TaskSet{}, evaluator(), KernelRewardPolicy(), env, SftCorpusOptions().with_mix(mix));
  };
  CHECK_THAT(error_of([&] { make(code_env().with_action(ActionFormat::plan), default_sft_mix()); }),
             Catch::Contains("env.action: 'plan'"));
  CHECK_THAT(error_of([&] { make(code_env().with_max_turns(1), default_sft_mix()); }),
             Catch::Contains("env.max_turns: 1 leaves no turn after a 'slow' first attempt"));
  Task unplanned;
  unplanned.id = "layer_mystery";
  CHECK_THAT(error_of([&] { make(code_env(), default_sft_mix(), TaskSet{{unplanned}}); }),
             Catch::Contains("task 'layer_mystery' (backend cpu) has no kernel-plan template"));
  unplanned.id = "relu_bias";
  unplanned.backend = "cuda";
  CHECK_THAT(error_of([&] { make(code_env(), default_sft_mix(), TaskSet{{unplanned}}); }),
             Catch::Contains("mix: kind 'wrong' is rendered for cpu tasks only (task 'relu_bias' is cuda)"));
}
