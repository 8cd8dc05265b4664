#include "scalar_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace turnrl::reference {
namespace {

// Row indices of each trajectory, ordered by turn.
std::map<int64_t, std::map<int64_t, size_t>> by_trajectory(const std::vector<Turn>& rows) {
  std::map<int64_t, std::map<int64_t, size_t>> out;
  for (size_t i = 0; i < rows.size(); ++i) out[rows[i].traj][rows[i].turn] = i;
  return out;
}

double masked_reward(const Turn& t) { return t.valid ? t.reward : 0.0; }

}  // namespace

std::vector<double> returns(const std::vector<Turn>& rows, Returns mode, double gamma, bool unbiased_shaping) {
  std::vector<double> g(rows.size(), 0.0);
  for (const auto& [traj, turns] : by_trajectory(rows)) {
    std::vector<size_t> idx;
    for (const auto& [t, i] : turns) idx.push_back(i);
    const size_t k = idx.size();
    std::vector<double> r(k);
    for (size_t t = 0; t < k; ++t) r[t] = masked_reward(rows[idx[t]]);
    std::vector<double> s(k, 0.0);
    if (mode == Returns::reward_to_go) {
      s = r;
    } else if (mode == Returns::outcome) {
      s[k - 1] = r[k - 1];
    } else {
      if (unbiased_shaping) r[k - 1] *= (1.0 - gamma);
      s[0] = r[0];
      for (size_t t = 1; t < k; ++t) s[t] = r[t] - r[t - 1];
    }
    double running = 0.0;
    for (size_t t = k; t-- > 0;) {
      running = s[t] + gamma * running;
      g[idx[t]] = running;
    }
  }
  return g;
}

namespace {

// Advantages of the members m (row indices) of one baseline group, scored on `score`.
std::vector<double> per_group_rule(const std::string& name, const std::vector<double>& score,
                                   const std::vector<size_t>& m, bool singleton_raw, double eps) {
  const size_t n = m.size();
  std::vector<double> a(n, 0.0);
  double sum = 0.0;
  for (size_t i : m) sum += score[i];
  if (n == 1) {
    if (!singleton_raw) return a;
    a[0] = name == "grpo" ? score[m[0]] / (1.0 + eps) : score[m[0]];
    return a;
  }
  const double mean = sum / double(n);
  double ss = 0.0;
  for (size_t i : m) ss += (score[i] - mean) * (score[i] - mean);
  double std = std::sqrt(ss / double(n - 1));
  if (std < 1e-6) std = 1.0;
  for (size_t j = 0; j < n; ++j) {
    const double x = score[m[j]];
    if (name == "trloo" || name == "rloo") {
      double others = 0.0;
      for (size_t l = 0; l < n; ++l)
        if (l != j) others += score[m[l]];
      a[j] = x - others / double(n - 1);
    } else if (name == "grpo") {
      a[j] = (x - mean) / (std + eps);
    } else {
      a[j] = x - mean;
    }
  }
  return a;
}

}  // namespace

std::vector<double> advantage(const std::string& name, const std::vector<Turn>& rows, const std::vector<double>& g,
                              bool trajectory_grouping, bool singleton_raw, double std_epsilon) {
  std::vector<double> adv(rows.size(), 0.0);
  if (name == "reinforce") {
    for (size_t i = 0; i < rows.size(); ++i) adv[i] = rows[i].valid ? g[i] : 0.0;
    return adv;
  }
  if (name == "reinforce_pp") {
    double sum = 0.0, n = 0.0;
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].valid) sum += g[i], n += 1;
    if (n < 2) return advantage("reinforce", rows, g, false, true, 0.0);
    const double mean = sum / n;
    double ss = 0.0;
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].valid) ss += (g[i] - mean) * (g[i] - mean);
    const double var = ss / (n - 1);
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].valid) adv[i] = (g[i] - mean) / std::sqrt(var + 1e-8);
    return adv;
  }
  if (name != "trloo" && name != "rloo" && name != "grpo" && name != "dr_grpo")
    throw std::invalid_argument("reference::advantage: unknown estimator " + name);
  const bool per_trajectory = name == "rloo" || (name != "trloo" && trajectory_grouping);
  if (!per_trajectory) {
    std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> groups;
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].valid) groups[{rows[i].group, rows[i].turn}].push_back(i);
    for (const auto& [key, m] : groups) {
      const std::vector<double> a = per_group_rule(name, g, m, singleton_raw, std_epsilon);
      for (size_t j = 0; j < m.size(); ++j) adv[m[j]] = a[j];
    }
    return adv;
  }
  // Trajectory level: the head row (turn 0) carries the trajectory's score; a trajectory whose
  // head is masked takes no part and gets 0 everywhere.
  std::map<int64_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].valid && rows[i].turn == 0) groups[rows[i].group].push_back(i);
  std::map<int64_t, double> traj_adv;
  for (const auto& [group, m] : groups) {
    const std::vector<double> a = per_group_rule(name, g, m, singleton_raw, std_epsilon);
    for (size_t j = 0; j < m.size(); ++j) traj_adv[rows[m[j]].traj] = a[j];
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    auto it = traj_adv.find(rows[i].traj);
    adv[i] = rows[i].valid && it != traj_adv.end() ? it->second : 0.0;
  }
  return adv;
}

std::vector<double> gae(const std::vector<Turn>& rows, const std::vector<double>& values, double gamma, double lambda,
                        bool whiten) {
  std::vector<double> adv(rows.size(), 0.0);
  for (const auto& [traj, turns] : by_trajectory(rows)) {
    double next_value = 0.0, next_adv = 0.0;
    for (auto it = turns.rbegin(); it != turns.rend(); ++it) {
      const size_t i = it->second;
      const double delta = masked_reward(rows[i]) + gamma * next_value - values[i];
      next_adv = delta + gamma * lambda * next_adv;
      next_value = values[i];
      adv[i] = next_adv;
    }
  }
  if (whiten) return advantage("reinforce_pp", rows, adv, false, true, 0.0);
  for (size_t i = 0; i < rows.size(); ++i)
    if (!rows[i].valid) adv[i] = 0.0;
  return adv;
}

namespace {

constexpr double kSafetyBound = 20.0;      // exponents are clamped to ±20 before exp
constexpr double kLogRatioLimit = 1e4;     // per-token log ratios are clamped to ±1e4

double bounded_exp(double x) { return std::exp(std::min(std::max(x, -kSafetyBound), kSafetyBound)); }

// Σ over the row, its mean, Σ over the trajectory, or its mean, by level name.
double level_aggregate(const std::string& level, double row_sum, double row_count, double traj_sum, double traj_count) {
  if (level == "turn") return row_sum;
  if (level == "turn_geo") return row_count > 0 ? row_sum / row_count : 0.0;
  if (level == "sequence") return traj_sum;
  if (level == "geometric") return traj_count > 0 ? traj_sum / traj_count : 0.0;
  throw std::invalid_argument("no row-level aggregate for level " + level);
}

bool is_row_level(const std::string& level) { return level != "off" && level != "token"; }

double fraction(double part, double whole) { return whole > 0 ? part / whole : 0.0; }

}  // namespace

MismatchOutcome mismatch(const std::vector<std::vector<double>>& old_logp,
                         const std::vector<std::vector<double>>& rollout_logp,
                         const std::vector<std::vector<bool>>& mask, const std::vector<int64_t>& traj,
                         const MismatchSpec& spec) {
  const size_t n = mask.size();
  const auto traj_of = [&](size_t r) { return traj.empty() ? int64_t(r) : traj[r]; };
  std::vector<std::vector<double>> lr(n);
  std::vector<double> row_lr(n, 0.0), row_k3(n, 0.0), row_count(n, 0.0);
  std::vector<bool> veto(n, false);
  std::map<int64_t, double> traj_lr, traj_k3, traj_count;
  for (size_t r = 0; r < n; ++r) {
    lr[r].assign(mask[r].size(), 0.0);
    for (size_t k = 0; k < mask[r].size(); ++k) {
      if (!mask[r][k]) continue;
      double d = old_logp[r][k] - rollout_logp[r][k];
      if (std::isnan(d)) d = 0.0;  // −inf − −inf
      lr[r][k] = std::min(std::max(d, -kLogRatioLimit), kLogRatioLimit);
      row_lr[r] += lr[r][k];
      row_k3[r] += bounded_exp(lr[r][k]) - lr[r][k] - 1;
      row_count[r] += 1;
      if (spec.veto_threshold > 0 && lr[r][k] < std::log(spec.veto_threshold)) veto[r] = true;
    }
    traj_lr[traj_of(r)] += row_lr[r];
    traj_k3[traj_of(r)] += row_k3[r];
    traj_count[traj_of(r)] += row_count[r];
  }

  MismatchOutcome out;
  out.keep.resize(n);
  out.weights.resize(n);
  double tokens = 0, abs_sum = 0, abs_max = 0, k3_sum = 0, lr_sum = 0, rho2_sum = 0, kept_tokens = 0;
  double w_sum = 0, w2_sum = 0, rows = 0, rows_rejected = 0, rows_vetoed = 0, train_ppl = 0, rollout_ppl = 0;
  std::map<int64_t, double> traj_kept;
  for (size_t r = 0; r < n; ++r) {
    const int64_t t = traj_of(r);
    const auto aggregate = [&](const std::string& level, bool k3) {
      return k3 ? level_aggregate(level, row_k3[r], row_count[r], traj_k3[t], traj_count[t])
                : level_aggregate(level, row_lr[r], row_count[r], traj_lr[t], traj_count[t]);
    };
    bool keep_row = !veto[r];
    if (is_row_level(spec.rs_level)) {
      const double rho = bounded_exp(aggregate(spec.rs_level, false));
      keep_row = keep_row && rho >= spec.rs_lower && rho <= spec.rs_upper;
    }
    if (is_row_level(spec.k3_level)) keep_row = keep_row && aggregate(spec.k3_level, true) <= spec.k3_upper;
    double kept = 0, old_sum = 0, rollout_sum = 0;
    out.keep[r].assign(mask[r].size(), false);
    out.weights[r].assign(mask[r].size(), 0.0);
    for (size_t k = 0; k < mask[r].size(); ++k) {
      if (!mask[r][k]) continue;
      const double x = lr[r][k], rho = bounded_exp(x);
      bool keep = keep_row;
      if (spec.rs_level == "token") keep = keep && rho >= spec.rs_lower && rho <= spec.rs_upper;
      if (spec.k3_level == "token") keep = keep && rho - x - 1 <= spec.k3_upper;
      const double ratio = is_row_level(spec.is_level) ? bounded_exp(aggregate(spec.is_level, false)) : rho;
      const double w = std::min(ratio, spec.is_cap);
      out.keep[r][k] = keep;
      out.weights[r][k] = keep ? (spec.is_level == "off" ? 1.0 : w) : 0.0;
      kept += keep ? 1 : 0;
      tokens += 1;
      abs_sum += std::abs(x);
      abs_max = std::max(abs_max, std::abs(x));
      k3_sum += rho - x - 1;
      lr_sum += x;
      rho2_sum += rho * rho;
      w_sum += w;
      w2_sum += w * w;
      old_sum += old_logp[r][k];
      rollout_sum += rollout_logp[r][k];
    }
    kept_tokens += kept;
    traj_kept[t] += kept;
    if (row_count[r] > 0) {
      rows += 1;
      rows_rejected += kept == 0 ? 1 : 0;
      rows_vetoed += veto[r] ? 1 : 0;
      train_ppl += std::exp(std::min(-old_sum / row_count[r], 80.0));
      rollout_ppl += std::exp(std::min(-rollout_sum / row_count[r], 80.0));
    }
  }
  double trajectories = 0, trajectories_rejected = 0, rho2_seq = 0;
  for (const auto& [t, count] : traj_count) {
    if (count == 0) continue;
    trajectories += 1;
    trajectories_rejected += traj_kept[t] == 0 ? 1 : 0;
    rho2_seq += bounded_exp(traj_lr[t]) * bounded_exp(traj_lr[t]);
  }
  auto& d = out.diagnostics;
  d["log_ratio_abs_mean"] = fraction(abs_sum, tokens);
  d["log_ratio_abs_max"] = abs_max;
  d["k3_kl"] = fraction(k3_sum, tokens);
  d["mismatch_kl"] = -fraction(lr_sum, tokens);
  d["chi2_token"] = tokens > 0 ? rho2_sum / tokens - 1 : 0.0;
  d["chi2_sequence"] = trajectories > 0 ? rho2_seq / trajectories - 1 : 0.0;
  d["training_ppl"] = fraction(train_ppl, rows);
  d["rollout_ppl"] = fraction(rollout_ppl, rows);
  d["ess"] = w2_sum > 0 ? w_sum * w_sum / (tokens * w2_sum) : 1.0;
  d["rejected_token_fraction"] = fraction(tokens - kept_tokens, tokens);
  d["rejected_row_fraction"] = fraction(rows_rejected, rows);
  d["rejected_trajectory_fraction"] = fraction(trajectories_rejected, trajectories);
  d["vetoed_row_fraction"] = fraction(rows_vetoed, rows);
  return out;
}

MismatchCase random_mismatch_case(uint64_t seed, size_t rows, size_t len, size_t trajectories, bool sorted,
                                  double noise) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> logp(-6.0, -0.1), unit(0.0, 1.0);
  std::normal_distribution<double> gap(0.0, noise);
  const double junk[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                         -std::numeric_limits<double>::infinity(), 1e30, -1e30};
  const auto as_float = [](double x) { return double(float(x)); };
  MismatchCase c;
  c.old_logp.assign(rows, std::vector<double>(len));
  c.rollout_logp.assign(rows, std::vector<double>(len));
  c.mask.assign(rows, std::vector<bool>(len));
  for (size_t r = 0; r < rows; ++r) {
    const double u = unit(rng);
    const size_t length = u < 0.1 ? 0 : (u < 0.3 ? len : size_t(unit(rng) * double(len + 1)) % (len + 1));
    const double offset = unit(rng) < 0.1 ? 0.05 : 0.0;
    for (size_t k = 0; k < len; ++k) {
      c.mask[r][k] = k < length;
      const double rollout = as_float(logp(rng));
      c.rollout_logp[r][k] = rollout;
      c.old_logp[r][k] = as_float(rollout + offset + gap(rng));
      if (!c.mask[r][k]) {
        c.old_logp[r][k] = junk[(r + k) % 5];
        if ((r + k) % 3 == 0) c.rollout_logp[r][k] = junk[(r + 2 * k) % 5];
      }
    }
  }
  if (rows > 1 && len > 0) {
    const size_t r = rows / 2;
    c.mask[r][0] = true;
    c.rollout_logp[r][0] = -1.0;
    c.old_logp[r][0] = -13.0;
  }
  for (size_t r = 0; r < rows; ++r) c.traj.push_back(int64_t(r * trajectories / std::max<size_t>(rows, 1)));
  if (!sorted) std::shuffle(c.traj.begin(), c.traj.end(), rng);
  return c;
}

std::vector<MismatchSpec> mismatch_sweep() {
  const auto spec = [](const std::string& rs, const std::string& k3, const std::string& is) {
    const bool sum_rs = rs == "turn" || rs == "sequence", sum_k3 = k3 == "turn" || k3 == "sequence";
    MismatchSpec s;
    s.rs_level = rs, s.k3_level = k3, s.is_level = is;
    s.rs_upper = rs == "token" ? 1.004 : (sum_rs ? 1.02 : 1.002);
    s.rs_lower = 1 / s.rs_upper;
    s.k3_upper = k3 == "token" ? 8e-6 : (sum_k3 ? 2e-4 : 3e-6);
    s.is_cap = 1.003;
    s.veto_threshold = 1e-4;
    return s;
  };
  std::vector<MismatchSpec> out = {spec("off", "off", "off")};
  for (const char* level : {"token", "turn", "turn_geo", "sequence", "geometric"}) {
    out.push_back(spec(level, "off", level));
    out.push_back(spec("off", level, "off"));
    out.push_back(spec("geometric", level, "token"));
  }
  return out;
}

std::string mismatch_difference(const MismatchOutcome& got, const MismatchOutcome& want, double tol) {
  std::ostringstream out;
  out.precision(12);
  if (got.keep.size() != want.keep.size()) return "row counts differ";
  for (size_t r = 0; r < want.keep.size(); ++r)
    for (size_t k = 0; k < want.keep[r].size(); ++k) {
      if (got.keep[r][k] != want.keep[r][k]) out << "keep " << got.keep[r][k];
      else if (std::abs(got.weights[r][k] - want.weights[r][k]) > tol * (1 + std::abs(want.weights[r][k])))
        out << "weight " << got.weights[r][k] << " instead of " << want.weights[r][k];
      else continue;
      out << " at row " << r << ", token " << k;
      return out.str();
    }
  for (const auto& [name, value] : want.diagnostics) {
    const auto it = got.diagnostics.find(name);
    if (it == got.diagnostics.end()) return name + " missing";
    if (std::abs(it->second - value) <= 1e-5 * std::abs(value) + 1e-9) continue;
    out << name << ": " << it->second << " instead of " << value;
    return out.str();
  }
  return "";
}

}  // namespace turnrl::reference
