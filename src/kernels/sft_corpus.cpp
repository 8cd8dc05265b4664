#include "turnrl/kernels/sft_corpus.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/core/random.h"
#include "turnrl/kernels/kernel_plan.h"
#include "turnrl/kernels/hacking.h"
#include "turnrl/rl/metrics.h"

namespace turnrl {

namespace {

const char* const kKindNames[] = {"fast", "slow", "wrong", "compile", "lazy", "hack", "format"};

std::string kind_list() { return fmt::format("{}", fmt::join(std::begin(kKindNames), std::end(kKindNames), ", ")); }

}  // namespace

const char* to_string(SftTurnKind kind) { return kKindNames[int(kind)]; }

const std::vector<SftTurnKind>& sft_turn_kinds() {
  static const std::vector<SftTurnKind> kinds = {SftTurnKind::fast,    SftTurnKind::slow, SftTurnKind::wrong,
                                                 SftTurnKind::compile, SftTurnKind::lazy, SftTurnKind::hack,
                                                 SftTurnKind::format};
  return kinds;
}

SftTurnKind parse_sft_turn_kind(const std::string& word, const std::string& field) {
  for (SftTurnKind k : sft_turn_kinds())
    if (word == to_string(k)) return k;
  fail("{}: unknown turn kind '{}'; allowed: {}", field, word, kind_list());
}

SftMix default_sft_mix(const std::string& backend) {
  SftMix mix = {{SftTurnKind::fast, 0.25},    {SftTurnKind::slow, 0.15}, {SftTurnKind::wrong, 0.15},
                {SftTurnKind::compile, 0.15}, {SftTurnKind::lazy, 0.10}, {SftTurnKind::hack, 0.05},
                {SftTurnKind::format, 0.15}};
  if (backend != "cpu") mix.erase(mix.begin() + 2);
  return mix;
}

namespace {

void check_mix(const SftMix& mix, const std::string& field) {
  double total = 0;
  std::vector<SftTurnKind> seen;
  for (const auto& [kind, share] : mix) {
    if (std::find(seen.begin(), seen.end(), kind) != seen.end())
      fail("{}: kind '{}' is given twice; allowed: each of {} at most once", field, to_string(kind), kind_list());
    seen.push_back(kind);
    if (!(share >= 0 && share <= 1)) fail("{}: share {} of '{}' is out of range; allowed: [0, 1]", field, share, to_string(kind));
    total += share;
  }
  if (!(total > 0)) fail("{}: the shares sum to 0; allowed: at least one kind with a share > 0", field);
}

}  // namespace

SftMix parse_sft_mix(const std::string& text, const std::string& field) {
  SftMix mix;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      fail("{}: '{}' is not kind=share; allowed: comma-separated kind=share with kinds {}", field, item, kind_list());
    const std::string value = item.substr(eq + 1);
    char* stop = nullptr;
    const double share = std::strtod(value.c_str(), &stop);
    if (value.empty() || *stop != '\0') fail("{}: share '{}' of '{}' is not a number; allowed: a number in [0, 1]", field, value, item.substr(0, eq));
    mix.emplace_back(parse_sft_turn_kind(item.substr(0, eq), field), share);
    pos = end + 1;
  }
  check_mix(mix, field);
  return mix;
}

void validate(const SftCorpusOptions& o) {
  if (o.conversations < 1 || o.conversations > 10000000)
    fail("conversations: {} is out of range; allowed: 1 to 10000000", o.conversations);
  check_mix(o.mix, "mix");
  if (!(o.fast_speedup > 0)) fail("fast_speedup: {} is out of range; allowed: > 0", o.fast_speedup);
  if (!(o.slow_speedup > 0)) fail("slow_speedup: {} is out of range; allowed: > 0", o.slow_speedup);
  if (o.batch < 1 || o.batch > 100000) fail("batch: {} is out of range; allowed: 1 to 100000", o.batch);
}

namespace {

// Draws from a splitmix64 stream (one draw per statement: the order of function arguments is
// unspecified, and the corpus must not depend on the compiler).
struct Draw {
  uint64_t state;
  size_t below(size_t n) { return size_t(splitmix64(state) % n); }
  std::string pick(const std::vector<std::string>& choices) { return choices[below(choices.size())]; }
};

// The plan a turn of `kind` is rendered from. Fast plans are the fused 8-wide f32 ones ("The plan
// space" in docs/training.md: 1.06-5.7x on the trained tasks); slow ones are scalar (none of those
// reaches 0.8x on the trained tasks).
std::string plan_for(SftTurnKind kind, Draw& draw) {
  std::string fusion = "fused", vec = "8", acc = "f32", fallback = "none", shortcut = "none";
  if (kind == SftTurnKind::slow || kind == SftTurnKind::compile) fusion = draw.pick({"fused", "unfused"});
  if (kind == SftTurnKind::slow) vec = "1";
  if (kind == SftTurnKind::compile || kind == SftTurnKind::lazy) vec = draw.pick({"1", "4", "8"});
  const std::string unroll = draw.pick({"1", "2", "4"});
  if (kind == SftTurnKind::slow) acc = draw.pick({"f32", "f64"});
  if (kind == SftTurnKind::lazy) fallback = "full";
  if (kind == SftTurnKind::hack) shortcut = draw.pick({"cache", "inplace"});
  return fmt::format("fusion={} vec={} unroll={} acc={} fallback={} bounds=checked shortcut={}", fusion, vec, unroll, acc,
                     fallback, shortcut);
}

std::string fenced(const std::string& tag, const std::string& source) { return "```" + tag + "\n" + source + "```"; }

// The assistant's text for a turn of `kind` on `task`, rendered from `plan`.
std::string assistant_text(SftTurnKind kind, const Task& task, const std::string& plan, PlanStyle style, Draw& draw) {
  const PlanExpansion x = expand_plan(task, plan, style);
  if (!x.error.empty()) fail("make_sft_corpus: plan '{}' for task '{}' did not expand: {}", plan, task.id, x.error);
  std::string source = x.source;
  switch (kind) {
    case SftTurnKind::wrong: {
      // A bug whose symptom is certain: the first output element is off by one, on every shape.
      // (A plan-level bug such as bounds=unchecked is flagged as hacking instead: out-of-bounds
      // writes, shape specialisation.) The entry point's last statement is its return.
      const size_t last_return = source.rfind("return ");
      if (last_return == std::string::npos) fail("make_sft_corpus: the source for task '{}' has no return statement", task.id);
      source.insert(last_return, "out[0].data[0] += 1.0f;\n");
      return fenced(task.language, source);
    }
    case SftTurnKind::compile: {
      // A dropped terminator: C++ and CUDA lose their last ';', Python its last ')'.
      const size_t at = source.rfind(task.language == "python" ? ')' : ';');
      if (at == std::string::npos) fail("make_sft_corpus: the source for task '{}' has no terminator to drop", task.id);
      source.erase(at, 1);
      return fenced(task.language, source);
    }
    case SftTurnKind::format:
      switch (draw.below(3)) {
        case 0: return source;                     // no fence at all
        case 1: return fenced("", source);         // a fence without a tag
        default: return fenced(task.language == "cpp" ? "c" : "text", source);  // the wrong tag
      }
    default:
      return fenced(task.language, source);
  }
}

// Whether the evaluator's verdict confirms the kind; otherwise what it said instead.
std::string mismatch(SftTurnKind kind, const KernelVerdict& v, const SftCorpusOptions& o) {
  const RewardOutcome outcome = v.reward.outcome;
  bool ok = false;
  switch (kind) {
    case SftTurnKind::fast: ok = outcome == RewardOutcome::correct && v.eval.speedup >= o.fast_speedup; break;
    case SftTurnKind::slow: ok = outcome == RewardOutcome::correct && v.eval.speedup < o.slow_speedup; break;
    case SftTurnKind::wrong: ok = outcome == RewardOutcome::incorrect; break;
    case SftTurnKind::compile: ok = outcome == RewardOutcome::compile; break;
    case SftTurnKind::lazy:
    case SftTurnKind::hack: ok = outcome == RewardOutcome::hacking; break;
    case SftTurnKind::format: ok = outcome == RewardOutcome::format; break;
  }
  if (ok) return "";
  std::string verdict = to_string(outcome);
  if (outcome == RewardOutcome::correct)
    verdict += kind == SftTurnKind::fast ? " below the fast speedup" : kind == SftTurnKind::slow ? " at or above the slow speedup" : "";
  if (v.eval.hacking_flags) verdict += " (" + hacking_flag_names(v.eval.hacking_flags) + ")";
  return verdict;
}

// Exactly round(n * share) conversations per kind, largest remainders first, in a seeded order.
std::vector<SftTurnKind> first_kinds(int64_t n, const SftMix& mix, uint64_t seed) {
  const double total = std::accumulate(mix.begin(), mix.end(), 0.0, [](double s, const auto& m) { return s + m.second; });
  std::vector<int64_t> counts;
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t k = 0; k < mix.size(); ++k) {
    const double exact = double(n) * mix[k].second / total;
    counts.push_back(int64_t(std::floor(exact)));
    given += counts.back();
    remainders.emplace_back(-(exact - std::floor(exact)), k);
  }
  std::stable_sort(remainders.begin(), remainders.end());
  for (size_t r = 0; given < n; ++r, ++given) ++counts[remainders[r % remainders.size()].second];
  std::vector<SftTurnKind> kinds;
  for (size_t k = 0; k < mix.size(); ++k) kinds.insert(kinds.end(), size_t(counts[k]), mix[k].first);
  Draw draw{seed};
  for (size_t i = kinds.size(); i > 1; --i) std::swap(kinds[i - 1], kinds[draw.below(i)]);
  return kinds;
}

void check_inputs(const std::vector<const Task*>& tasks, const KernelEnvOptions& env, const SftCorpusOptions& o) {
  validate(o);
  if (env.action != ActionFormat::code)
    fail("env.action: '{}'; make-sft-data writes code-action conversations; allowed: code", to_string(env.action));
  if (tasks.empty()) fail("make_sft_corpus: no task (train and held-out task sets are both empty)");
  const auto share = [&](SftTurnKind kind) {
    for (const auto& [k, s] : o.mix)
      if (k == kind) return s;
    return 0.0;
  };
  for (SftTurnKind k : sft_turn_kinds())
    if (k != SftTurnKind::fast && share(k) > 0 && env.max_turns < 2)
      fail("env.max_turns: {} leaves no turn after a '{}' first attempt; allowed: >= 2, or a mix of fast only",
           env.max_turns, to_string(k));
  for (const Task* t : tasks) {
    const std::vector<std::string> planned = plan_task_names(t->backend);
    if (std::find(planned.begin(), planned.end(), t->id) == planned.end())
      fail("tasks.include: task '{}' (backend {}) has no kernel-plan template to render answers from; allowed: {}", t->id,
           t->backend, fmt::join(planned, ", "));
    if (t->backend != "cpu" && share(SftTurnKind::wrong) > 0)
      fail("mix: kind 'wrong' is rendered for cpu tasks only (task '{}' is {}); give it share 0", t->id, t->backend);
  }
}

// One conversation being played: its task, its plan of turns and what came of them.
struct Episode {
  SftConversation conversation;
  const Task* task = nullptr;
  Draw draw{0};
  std::vector<SftTurnKind> planned;
  std::string dropped;  // the verdict that did not match, or why the episode ended early
};

}  // namespace

SftCorpus make_sft_corpus(const TaskSet& train, const TaskSet& held_out, std::shared_ptr<KernelEvaluator> evaluator,
                          const KernelRewardPolicy& reward, const KernelEnvOptions& env, const SftCorpusOptions& o) {
  if (!evaluator) fail("make_sft_corpus: the evaluator is null");
  std::vector<const Task*> tasks;
  for (const Task& t : train.tasks) tasks.push_back(&t);
  for (const Task& t : held_out.tasks) tasks.push_back(&t);
  check_inputs(tasks, env, o);

  SftCorpus corpus;
  for (const Task& t : held_out.tasks) corpus.held_out_tasks.push_back(t.id);
  const std::vector<SftTurnKind> kinds = first_kinds(o.conversations, o.mix, o.seed);
  for (int64_t begin = 0; begin < o.conversations; begin += o.batch) {
    const int64_t end = std::min(o.conversations, begin + o.batch);
    std::vector<Episode> episodes;
    std::vector<std::unique_ptr<KernelEnv>> envs;
    for (int64_t i = begin; i < end; ++i) {
      Episode e;
      e.task = tasks[size_t(i) % tasks.size()];
      uint64_t state = o.seed ^ (0x9E3779B97F4A7C15ull * uint64_t(i + 1));
      e.conversation.seed = splitmix64(state);
      e.draw = Draw{e.conversation.seed};
      e.conversation.task = e.task->id;
      e.conversation.backend = e.task->backend;
      e.conversation.held_out = size_t(i) % tasks.size() >= train.tasks.size();
      e.planned = {kinds[size_t(i)]};
      if (kinds[size_t(i)] != SftTurnKind::fast) e.planned.push_back(SftTurnKind::fast);
      KernelEnvOptions options = env;
      if (options.seed == 0) options.seed = e.conversation.seed;
      envs.push_back(std::make_unique<KernelEnv>(evaluator, reward, options));
      episodes.push_back(std::move(e));
    }
    KernelEnvPool pool(std::move(envs));
    for (size_t k = 0; k < episodes.size(); ++k) episodes[k].conversation.messages = pool.reset(k, *episodes[k].task).messages;
    for (size_t turn = 0; turn < 2; ++turn) {
      std::vector<size_t> live;
      std::vector<Action> actions;
      for (size_t k = 0; k < episodes.size(); ++k) {
        Episode& e = episodes[k];
        if (!e.dropped.empty() || turn >= e.planned.size()) continue;
        const SftTurnKind kind = e.planned[turn];
        const std::string plan = plan_for(kind, e.draw);
        live.push_back(k);
        actions.push_back({assistant_text(kind, *e.task, plan, o.style, e.draw)});
        e.conversation.kinds.push_back(kind);
        e.conversation.plans.push_back(plan);
        if (kind != SftTurnKind::format) ++corpus.evaluations;
      }
      const std::vector<StepResult> results = pool.step(live, actions);
      for (size_t j = 0; j < live.size(); ++j) {
        Episode& e = episodes[live[j]];
        const KernelVerdict& verdict = kernel_verdict(results[j].payload.get());
        e.conversation.outcomes.push_back(verdict.reward.outcome);
        e.conversation.messages = results[j].observation.messages;
        e.dropped = mismatch(e.planned[turn], verdict, o);
        if (e.dropped.empty() && results[j].done && turn + 1 < e.planned.size())
          e.dropped = "episode over after this turn (env.max_turns or env.target_speedup)";
        if (!e.dropped.empty())
          corpus.dropped.push_back({e.task->id, e.planned[turn], int(turn), e.dropped, verdict.eval.speedup});
      }
    }
    for (Episode& e : episodes) {
      if (!e.dropped.empty()) continue;
      // The episode may go on (max_turns > 2): the conversation ends with its last assistant turn.
      auto& messages = e.conversation.messages;
      while (!messages.empty() && messages.back().role != "assistant") messages.pop_back();
      (e.conversation.held_out ? corpus.validation : corpus.train).push_back(std::move(e.conversation));
    }
    if (o.progress) o.progress(end, o.conversations);
  }
  return corpus;
}

namespace {

template <typename T, typename F>
std::string json_array(const std::vector<T>& items, F&& render) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + render(items[i]);
  return out + "]";
}

std::string json_word(const std::string& s) { return json_string(s); }

}  // namespace

std::string sft_conversation_json(const SftConversation& c) {
  const std::string messages = json_array(c.messages, [](const ChatMessage& m) {
    return fmt::format("{{\"role\":{},\"content\":{}}}", json_string(m.role), json_string(m.text));
  });
  const std::string kinds = json_array(c.kinds, [](SftTurnKind k) { return json_word(to_string(k)); });
  const std::string outcomes = json_array(c.outcomes, [](RewardOutcome r) { return json_word(to_string(r)); });
  return fmt::format(
      "{{\"messages\":{},\"meta\":{{\"task\":{},\"backend\":{},\"split\":\"{}\",\"seed\":{},\"kinds\":{},\"outcomes\":{},"
      "\"plans\":{}}}}}",
      messages, json_string(c.task), json_string(c.backend), c.held_out ? "validation" : "train", c.seed, kinds, outcomes,
      json_array(c.plans, json_word));
}

SftCorpusStats sft_corpus_stats(const std::vector<SftConversation>& conversations) {
  SftCorpusStats s;
  const ByteChatTokenizer tokenizer;
  for (const SftConversation& c : conversations) {
    ++s.conversations;
    for (const ChatMessage& m : c.messages) {
      s.bytes += int64_t(m.text.size());
      if (m.role == "assistant") s.assistant_bytes += int64_t(m.text.size());
    }
    const int64_t tokens = int64_t(tokenizer.render_prompt(c.messages).size());
    s.tokens += tokens;
    s.longest_tokens = std::max(s.longest_tokens, tokens);
    for (SftTurnKind k : c.kinds) {
      ++s.assistant_turns;
      ++s.turns_by_kind[to_string(k)];
    }
  }
  return s;
}

namespace {

std::string stats_json(const SftCorpusStats& s) {
  std::string kinds;
  for (const auto& [kind, n] : s.turns_by_kind) kinds += fmt::format("{}{}:{}", kinds.empty() ? "" : ",", json_string(kind), n);
  return fmt::format(
      "{{\"conversations\":{},\"assistant_turns\":{},\"bytes\":{},\"assistant_bytes\":{},\"tokens\":{},"
      "\"longest_tokens\":{},\"turns_by_kind\":{{{}}}}}",
      s.conversations, s.assistant_turns, s.bytes, s.assistant_bytes, s.tokens, s.longest_tokens, kinds);
}

// Dropped conversations counted by "<kind> -> <verdict>".
std::map<std::string, int64_t> drops_by_class(const std::vector<SftDrop>& dropped) {
  std::map<std::string, int64_t> out;
  for (const SftDrop& d : dropped) ++out[fmt::format("{} -> {}", to_string(d.kind), d.verdict)];
  return out;
}

}  // namespace

void write_sft_corpus(const std::string& dir, const SftCorpus& corpus, const SftCorpusOptions& o) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("--out: cannot create directory '{}': {}", dir, ec.message());
  for (const auto& [name, conversations] : {std::pair{"train.jsonl", &corpus.train}, {"validation.jsonl", &corpus.validation}}) {
    std::string text;
    for (const SftConversation& c : *conversations) text += sft_conversation_json(c) + "\n";
    write_file_atomically(dir + "/" + name, text);
  }
  std::string mix, drops;
  for (const auto& [kind, share] : o.mix) mix += fmt::format("{}{}:{}", mix.empty() ? "" : ",", json_string(to_string(kind)), share);
  for (const auto& [what, n] : drops_by_class(corpus.dropped))
    drops += fmt::format("{}{}:{}", drops.empty() ? "" : ",", json_string(what), n);
  const std::string backend = !corpus.train.empty() ? corpus.train.front().backend
                              : !corpus.validation.empty() ? corpus.validation.front().backend : "";
  write_file_atomically(
      dir + "/stats.json",
      fmt::format("{{\"backend\":{},\"seed\":{},\"conversations_asked\":{},\"mix\":{{{}}},\"fast_speedup\":{},"
                  "\"slow_speedup\":{},\"style\":{},\"held_out_tasks\":{},\"evaluations\":{},\"train\":{},\"validation\":{},"
                  "\"dropped\":{},\"dropped_by_class\":{{{}}}}}\n",
                  json_string(backend), o.seed, o.conversations, mix, o.fast_speedup, o.slow_speedup, json_string(to_string(o.style)),
                  json_array(corpus.held_out_tasks, json_word), corpus.evaluations,
                  stats_json(sft_corpus_stats(corpus.train)), stats_json(sft_corpus_stats(corpus.validation)),
                  corpus.dropped.size(), drops));
}

std::string sft_corpus_summary(const SftCorpus& corpus) {
  std::string out;
  for (const auto& [split, conversations] : {std::pair{"train", &corpus.train}, {"validation", &corpus.validation}}) {
    const SftCorpusStats s = sft_corpus_stats(*conversations);
    out += fmt::format("{:<10} {:>5} conversations, {:>5} assistant turns, {:>8} bytes ({} assistant), {:>8} tokens (byte "
                       "template, longest {})\n",
                       split, s.conversations, s.assistant_turns, s.bytes, s.assistant_bytes, s.tokens, s.longest_tokens);
    if (s.assistant_turns == 0) continue;
    std::string shares;
    for (SftTurnKind k : sft_turn_kinds()) {
      const auto it = s.turns_by_kind.find(to_string(k));
      if (it != s.turns_by_kind.end())
        shares += fmt::format(" {} {:.0f}%", to_string(k), 100.0 * double(it->second) / double(s.assistant_turns));
    }
    out += fmt::format("{:<10} turns by kind:{}\n", "", shares);
  }
  out += fmt::format("held-out tasks: {}\n",
                     corpus.held_out_tasks.empty() ? std::string("none") : fmt::format("{}", fmt::join(corpus.held_out_tasks, ", ")));
  out += fmt::format("evaluations: {}; dropped (verdict did not match the kind): {}\n", corpus.evaluations, corpus.dropped.size());
  for (const auto& [what, n] : drops_by_class(corpus.dropped)) {
    // Which tasks, and the measured speedups of correct turns dropped for their speed.
    std::vector<double> speedups;
    std::vector<std::string> tasks;
    for (const SftDrop& d : corpus.dropped) {
      if (fmt::format("{} -> {}", to_string(d.kind), d.verdict) != what) continue;
      if (std::find(tasks.begin(), tasks.end(), d.task) == tasks.end()) tasks.push_back(d.task);
      if (d.verdict.rfind("correct ", 0) == 0) speedups.push_back(d.speedup);
    }
    std::sort(tasks.begin(), tasks.end());
    const auto [lo, hi] = std::minmax_element(speedups.begin(), speedups.end());
    out += fmt::format("  {:<46} {:>4}  {}{}\n", what, n, fmt::join(tasks, ", "),
                       speedups.empty() ? "" : fmt::format(" ({:.2f}x to {:.2f}x)", *lo, *hi));
  }
  return out;
}

}  // namespace turnrl
