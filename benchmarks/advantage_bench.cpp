// TRLOO, RLOO and GRPO (returns + advantages, end to end) against the scalar reference
// implementation (tests/support/scalar_reference.cpp: loops, doubles, std::map groups) on ragged
// batches of 1k..1M turns, groups of 8 and 16, 1-5 turns. Prints the speed ratio and the achieved
// bandwidth against the bound measured in the same run (each input read once, each output
// written once), plus the Dr. Kernel recipe's shape (16 prompts x 16 samples x 3 turns). On CUDA,
// TRLOO is measured twice, fused kernels (the default) and the tensor-op path ("trloo/ops"), and
// sizes go up to 64M turns where launch overhead is amortised (no scalar reference past 1M).
#include <cstdio>

#include <fmt/format.h>

#include "bench_util.h"
#include "support/batches.h"
#include "turnrl/algo/advantage.h"
#include "turnrl/algo/returns.h"

using namespace turnrl;

namespace {

// Bytes a perfect implementation moves per turn: group, traj, turn ids (int64), reward (fp32),
// turn_mask (bool) read once; the advantage (fp32) written once.
constexpr double kBytesPerTurn = 3 * 8 + 4 + 1 + 4;

std::vector<reference::Turn> batch_rows(int64_t target_turns, int n, int max_turns, bool full, bool shuffled,
                                        uint64_t seed) {
  const double mean_turns = full ? max_turns : (1 + max_turns) / 2.0;
  const int groups = std::max<int>(1, int(double(target_turns) / (n * mean_turns) + 0.5));
  if (full) {
    std::vector<reference::Turn> rows;
    int64_t traj = 0;
    for (int g = 0; g < groups; ++g)
      for (int i = 0; i < n; ++i, ++traj)
        for (int t = 0; t < max_turns; ++t) rows.push_back({g, traj, t, double((g * 7 + i * 3 + t) % 11) / 4, true});
    return rows;
  }
  return testing::random_rows(seed, groups, n, max_turns, 0.1, shuffled);
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const double bandwidth = bench::copy_bandwidth(args.device);
  std::printf("advantage_bench on %s (%d threads); measured copy bandwidth %.1f GB/s (read+write)\n",
              args.device.str().c_str(), at::get_num_threads(), bandwidth / 1e9);
  std::printf("baseline: scalar reference (loops, doubles, std::map), returns + advantage, same run\n\n");
  std::printf("%-9s %9s %5s %6s | %12s %12s %7s | %9s %11s\n", "estim", "turns", "n", "turns", "scalar ref", "turnrl",
              "speedup", "GB/s", "x of bound");

  // Rows are trajectory-major (as trainers lay them out) unless `shuffled`: random row order
  // turns every segment access into a random one and shows what that costs.
  struct Case { int64_t turns; int n; int max_turns; bool full; bool shuffled = false; };
  std::vector<Case> cases = {{768, 16, 3, true}};  // Dr. Kernel recipe: 16 x 16 x 3
  std::vector<int64_t> sizes = args.quick ? std::vector<int64_t>{1000, 10000}
                                          : std::vector<int64_t>{1000, 10000, 100000, 1000000};
  for (int64_t s : sizes)
    for (int n : {8, 16}) cases.push_back({s, n, 5, false});
  if (args.device.is_cuda() && !args.quick)
    for (int64_t s : {int64_t(16000000), int64_t(48000000)}) cases.push_back({s, 16, 5, false});
  if (!args.quick) cases.push_back({1000000, 16, 5, false, true});
  if (args.device.is_cuda() && !args.quick) cases.push_back({16000000, 16, 5, false, true});

  for (const Case& c : cases) {
    const auto rows = batch_rows(c.turns, c.n, c.max_turns, c.full, c.shuffled, uint64_t(c.turns + c.n));
    TurnBatch cpu = testing::to_batch(rows);
    TurnBatch b = cpu;
    for (torch::Tensor* t : {&b.group, &b.traj, &b.turn, &b.reward, &b.turn_mask}) *t = t->to(args.device);
    std::vector<std::string> names = {"trloo", "rloo", "grpo"};
    if (args.device.is_cuda()) names.insert(names.begin() + 1, "trloo/ops");
    for (const std::string& label : names) {
      const bool ops_only = label == "trloo/ops";
      const std::string name = ops_only ? "trloo" : label;
      const AdvantageEstimator& estimator = advantage_estimator(name);
      const auto ro = ReturnOptions().with_fused_cuda(!ops_only);
      const auto ao = AdvantageOptions().with_fused_cuda(!ops_only);
      torch::Tensor out;
      const double ours = bench::median_seconds([&] { out = estimator(b, compute_returns(b, ro), ao); }, args.device,
                                                args.quick ? 0.05 : 0.3, 2000);
      double scalar = 0;
      if (c.turns <= 1000000)
        scalar = bench::median_seconds(
            [&] {
              const auto g = reference::returns(rows, reference::Returns::reward_to_go, 1.0, true);
              reference::advantage(name, rows, g, false, true, 1e-6);
            },
            torch::kCPU, args.quick ? 0.05 : 0.3, c.turns >= 1000000 ? 3 : 50, 1);
      const double bytes = kBytesPerTurn * double(rows.size());
      const double achieved = bytes / ours;
      std::printf("%-9s %9zu %5d %6s | %12s %12s %7s | %9.2f %10.1fx%s\n", label.c_str(), rows.size(), c.n,
                  c.full ? "3" : "1-5", scalar > 0 ? bench::human_time(scalar).c_str() : "-",
                  bench::human_time(ours).c_str(), scalar > 0 ? fmt::format("{:.1f}x", scalar / ours).c_str() : "-",
                  achieved / 1e9, bandwidth / achieved, c.full ? "  (recipe)" : c.shuffled ? "  (rows shuffled)" : "");
      std::fflush(stdout);
    }
  }
  std::printf("\n'x of bound' = time / (bytes moved by a perfect pass at the measured copy bandwidth); 1.0 is the floor.\n");
  return 0;
}
