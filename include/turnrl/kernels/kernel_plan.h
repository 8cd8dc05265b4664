#pragma once
// Kernel plans: an action grammar for policies too small to write code. A plan is one choice per
// slot ("fusion=fused vec=4 unroll=2 acc=f32 fallback=none bounds=checked shortcut=none"), and
// expand_plan() turns it into real C++ source for a built-in CPU task, which the evaluator then
// really compiles, checks, times and profiles. The grammar has the traps the paper's methods
// exist for: unchecked bounds with a vector width pass the shown shape and fail others, library
// fallbacks are lazy (little of the time in the candidate's own code), bf16 accumulation loses
// precision, and the shortcuts (a pointer-keyed result cache, computing in the input buffer) are
// hacks the evaluator's checks catch.
//
// Speed is real too: vec=4/8 render explicit SIMD (GCC vector extensions; vec=8 as AVX2+FMA code
// in a `#pragma GCC target` region, chosen at run time when the CPU has both, with the scalar
// rendering of the same plan as the fallback), __restrict__ buffer pointers (never with the
// inplace shortcut, whose pointers alias the input) and a polynomial exp/tanh; vec=1 and
// acc=f64 stay scalar with libm calls. The compile flags are the evaluator's fixed ones. On a
// 2-core AVX2 machine the best plans beat the LibTorch references of the trained tasks by
// 1.4-5.7x and no vec=1 plan reaches 0.8x (docs/training.md, "The plan space").
#include <string>
#include <vector>

namespace turnrl {

struct Task;

struct PlanSlot {
  std::string name;
  std::vector<std::string> choices;  // the first is the default of nothing
  std::string meaning;
};

// The slots, in the order plans are written.
const std::vector<PlanSlot>& plan_slots();

// Every "slot=choice" word: the vocabulary a tokenizer adds for plan actions.
std::vector<std::string> plan_vocabulary();

// The grammar as prompt text, one line per slot.
std::string plan_grammar_text();

// Tasks of an evaluator backend (cpu | cuda | python) that have a plan template (the rest need
// code actions); an unknown backend has none.
std::vector<std::string> plan_task_names(const std::string& backend = "cpu");

// How a cpu plan is written out. `full` is the explicit rendering above (GCC vector types, AVX2
// with a scalar fallback, polynomial exp/tanh): 1-12 KB of C++. `compact` writes the same plan as
// plain scalar loops of a few hundred bytes, short enough for a small model to learn in minutes:
// vec=4/8 becomes `#pragma GCC optimize("O3")` (the evaluator's -O2 does not vectorise loops of
// unknown trip count) and __restrict__ pointers, so the compiler vectorises what it can; unroll is
// left to the compiler, and math is libm's. Loops the compiler cannot vectorise (float reductions,
// libm calls) stay scalar, so a compact vec=8 plan of softmax_rows is no faster than a vec=1 one
// (docs/training.md, "SFT corpus"). cuda and python plans have the full style only.
enum class PlanStyle { full, compact };
const char* to_string(PlanStyle style);
// "full" | "compact"; throws turnrl::Error naming `field`, the word and the allowed styles.
PlanStyle parse_plan_style(const std::string& word, const std::string& field);

struct PlanExpansion {
  std::string source;  // the candidate, when error is empty
  std::string error;   // a format error naming the slot, the word and the allowed choices
};

// Parses the plan in `text` (words separated by spaces or newlines; each slot exactly once) and
// expands it for `task`: C++ for a cpu task, a CUDA kernel for a cuda task, a Triton program for a
// python task (the renderer is chosen by Task::backend), written in `style` (compact: cpu only).
PlanExpansion expand_plan(const Task& task, const std::string& text, PlanStyle style = PlanStyle::full);

}  // namespace turnrl
