#pragma once
// The plan words of the plan tests (tests/kernels/test_*_plan*.cpp): the fast honest plan (fused vec=4
// unroll=2 f32, no fallback, checked bounds, no shortcut) with some slots replaced, e.g.
// plan_words("acc=bf16"); and every plan of the grammar.
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "turnrl/kernels/kernel_plan.h"

namespace turnrl::test {

inline std::string plan_words(const std::string& overrides) {
  std::map<std::string, std::string> slots = {{"fusion", "fused"}, {"vec", "4"},         {"unroll", "2"},
                                              {"acc", "f32"},      {"fallback", "none"}, {"bounds", "checked"},
                                              {"shortcut", "none"}};
  std::istringstream in(overrides);
  for (std::string w; in >> w;) slots[w.substr(0, w.find('='))] = w.substr(w.find('=') + 1);
  std::string out;
  for (const PlanSlot& s : plan_slots()) out += (out.empty() ? "" : " ") + s.name + "=" + slots[s.name];
  return out;
}

// Every plan of the grammar: one choice per slot.
inline std::vector<std::string> every_plan() {
  std::vector<std::string> plans = {""};
  for (const PlanSlot& s : plan_slots()) {
    std::vector<std::string> next;
    for (const std::string& p : plans)
      for (const std::string& c : s.choices) next.push_back(p + (p.empty() ? "" : " ") + s.name + "=" + c);
    plans = next;
  }
  return plans;
}

}  // namespace turnrl::test
