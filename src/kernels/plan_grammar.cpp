#include <algorithm>
#include <map>
#include <sstream>

#include "plan_grammar.h"
#include "turnrl/core/error.h"

namespace turnrl {

std::string parse_plan(const std::string& text, PlanChoices& plan) {
  std::map<std::string, std::string> chosen;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos) return fmt::format("'{}' is not a slot=choice word; the slots are:\n{}", w, plan_grammar_text());
    const std::string slot = w.substr(0, eq), choice = w.substr(eq + 1);
    const PlanSlot* s = nullptr;
    for (const PlanSlot& candidate : plan_slots())
      if (candidate.name == slot) s = &candidate;
    if (!s) return fmt::format("unknown slot '{}' in '{}'; slots: fusion, vec, unroll, acc, fallback, bounds, shortcut", slot, w);
    if (std::find(s->choices.begin(), s->choices.end(), choice) == s->choices.end())
      return fmt::format("slot '{}': '{}' is not allowed; allowed: {}", slot, choice, fmt::join(s->choices, ", "));
    if (chosen.count(slot)) return fmt::format("slot '{}' is chosen twice", slot);
    chosen[slot] = choice;
  }
  for (const PlanSlot& s : plan_slots())
    if (!chosen.count(s.name))
      return fmt::format("slot '{}' is missing; choose one of {}", s.name, fmt::join(s.choices, ", "));
  plan.fused = chosen["fusion"] == "fused";
  plan.vec = std::stoi(chosen["vec"]);
  plan.unroll = std::stoi(chosen["unroll"]);
  plan.acc = chosen["acc"];
  plan.fallback = chosen["fallback"];
  plan.checked = chosen["bounds"] == "checked";
  plan.shortcut = chosen["shortcut"];
  return {};
}

}  // namespace turnrl
