// PPO policy loss with mismatch correction, forward + backward, the setting of research anchors
// §5.4: dual clip, token TIS (cap 2), per-turn geometric-mean rejection in [0.999, 1.001], token
// veto 1e-4, seq-mean-token-sum / 1000. Compared in the same run against a plain LibTorch
// composition written the obvious way (separate ops, autograd through everything), and against
// turnrl's own unfused path. Prints the ratio and the achieved bandwidth against the bound: a
// perfect pass reads logp, old_logp, rollout_logp (fp32) and the mask (bool) once and writes the
// gradient (fp32) once, 17 bytes per token slot. A second table isolates compute_mismatch against
// the baseline's own mismatch ops (bound: read old_logp, rollout_logp, mask, write the new mask
// and the weights, 14 bytes per slot). On CUDA, turnrl runs its fused kernels (fused = true).
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <torch/csrc/autograd/autograd.h>

#include "bench_util.h"
#include "turnrl/algo/mismatch.h"
#include "turnrl/algo/policy_loss.h"

using namespace turnrl;

namespace {

constexpr double kBytesPerToken = 3 * 4 + 1 + 4;
constexpr double kMismatchBytesPerToken = 2 * 4 + 1 + 1 + 4;

struct Inputs {
  torch::Tensor logp, old_logp, rollout_logp, mask, adv, traj;
  int64_t num_traj;
};

// Rows are turns of 3-turn trajectories; response lengths uniform in [L/8, L]; the rollout engine
// differs from the trainer by ~1e-3 per token (nearly everything passes the tight band).
Inputs make_inputs(int64_t n, int64_t len, const torch::Device& device) {
  at::manual_seed(0);
  const auto f = at::TensorOptions(at::kFloat).device(device);
  Inputs in;
  in.old_logp = -2 * at::rand({n, len}, f);
  in.rollout_logp = in.old_logp + 1e-3 * at::randn({n, len}, f);
  in.logp = in.old_logp + 0.1 * at::randn({n, len}, f);
  const torch::Tensor lengths = at::randint(len / 8, len + 1, {n}, at::TensorOptions(at::kLong).device(device));
  in.mask = at::arange(len, lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);
  in.adv = at::randn({n}, f);
  in.traj = at::arange(n, lengths.options()).div(3, "floor");
  in.num_traj = (n + 2) / 3;
  return in;
}

// The benchmark's correction: token TIS cap 2, per-turn geometric rejection, veto 1e-4.
MismatchOptions mismatch_options() {
  return MismatchOptions()
      .with_is(MismatchLevel::token, 2.0)
      .with_rs(MismatchLevel::turn_geo, 0.999, 1.001)
      .with_veto_threshold(1e-4);
}

// The obvious composition of the same correction: keep mask and weights (float), no diagnostics.
struct PlainMismatch {
  torch::Tensor keep, w;
};
PlainMismatch baseline_mismatch(const Inputs& in) {
  const at::NoGradGuard no_grad;
  const torch::Tensor m = in.mask.to(at::kFloat);
  const torch::Tensor lr = (in.old_logp - in.rollout_logp) * m;
  const torch::Tensor token_w = lr.clamp(-20, 20).exp().clamp_max(2.0);
  const torch::Tensor geo = (lr.sum(1) / (m.sum(1) + 1e-8)).clamp(-20, 20).exp();
  torch::Tensor keep = ((geo >= 0.999) & (geo <= 1.001)).unsqueeze(1).to(at::kFloat) * m;
  const torch::Tensor veto = ((lr < std::log(1e-4)) & in.mask).any(1, true);
  keep = keep * (~veto).to(at::kFloat);
  return {keep, token_w * keep};
}

// The obvious composition: mismatch weights and the PPO loss as separate tensor ops, gradient by
// autograd through all of them.
torch::Tensor baseline_step(const Inputs& in, const torch::Tensor& logp) {
  const PlainMismatch mm = baseline_mismatch(in);
  const torch::Tensor &keep = mm.keep, &w = mm.w;
  const torch::Tensor a = in.adv.unsqueeze(1);
  const torch::Tensor ratio = (logp - in.old_logp).clamp(-20, 20).exp();
  const torch::Tensor l1 = -a * ratio;
  const torch::Tensor l2 = -a * ratio.clamp(0.8, 1.28);
  const torch::Tensor clip = at::max(l1, l2);
  const torch::Tensor l3 = -a * 3.0;
  const torch::Tensor pg = at::where(a < 0, at::min(l3, clip), clip) * w;
  const torch::Tensor rows = (keep.sum(1) > 0).to(at::kFloat).sum();
  const torch::Tensor loss = (pg * keep).sum(1).sum() / (rows + 1e-8) / 1000.0;
  return torch::autograd::grad({loss}, {logp})[0];
}

torch::Tensor turnrl_step(const Inputs& in, const torch::Tensor& logp, bool fused, MismatchResult* mismatch_out) {
  MismatchResult mr = compute_mismatch(in.old_logp, in.rollout_logp, in.mask, in.traj, in.num_traj,
                                       mismatch_options().with_fused(fused));
  PolicyLossInputs li;
  li.logp = logp;
  li.old_logp = in.old_logp;
  li.advantages = in.adv;
  li.response_mask = mr.response_mask;
  li.weights = mr.weights;
  const PolicyLossResult r = policy_loss(li, PPOLossOptions().with_fused(fused));
  torch::Tensor g = torch::autograd::grad({r.loss}, {logp})[0];
  if (mismatch_out) *mismatch_out = std::move(mr);
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const double bandwidth = bench::copy_bandwidth(args.device);
#ifdef TURNRL_WITH_CUDA
  const char* kernels = "this build has turnrl's CUDA kernels";
#else
  const char* kernels = "this build has no CUDA kernels";
#endif
  std::printf("loss_bench on %s (%d threads; %s); measured copy bandwidth %.1f GB/s (read+write)\n",
              args.device.str().c_str(), at::get_num_threads(), kernels, bandwidth / 1e9);
  std::printf("PPO dual-clip + token TIS cap 2 + turn_geo RS [0.999, 1.001] + veto 1e-4, seq-mean-token-sum/1000;\n"
              "forward + backward; baseline = plain LibTorch composition (separate ops, autograd), same run\n\n");
  std::printf("%6s %6s %9s | %11s %11s %11s | %8s | %11s %11s | %8s %10s\n", "rows", "L", "slots", "baseline",
              "unfused", "turnrl", "speedup", "mismatch", "loss f+b", "GB/s", "x of bound");

  const std::vector<std::pair<int64_t, int64_t>> shapes =
      args.quick ? std::vector<std::pair<int64_t, int64_t>>{{64, 2048}, {256, 2048}}
                 : std::vector<std::pair<int64_t, int64_t>>{{256, 8192}, {768, 8192}, {1024, 16384}};
  const double min_s = args.quick ? 0.05 : 0.5;
  const auto time = [&](const std::function<void()>& fn) { return bench::median_seconds(fn, args.device, min_s, 200, 2); };
  std::vector<std::string> mismatch_rows;
  for (const auto& shape : shapes) {
    const Inputs in = make_inputs(shape.first, shape.second, args.device);
    torch::Tensor logp = in.logp.clone().requires_grad_(true);

    // Same gradient from all three (up to float rounding).
    MismatchResult mr;
    const torch::Tensor g_turnrl = turnrl_step(in, logp, true, &mr);
    const double err = (g_turnrl - baseline_step(in, logp)).abs().max().item<double>();
    const double scale = g_turnrl.abs().max().item<double>();
    const double mask_diff = (mr.response_mask.to(at::kFloat) - baseline_mismatch(in).keep).abs().sum().item<double>();

    const double t_base = time([&] { baseline_step(in, logp); });
    const double t_unfused = time([&] { turnrl_step(in, logp, false, nullptr); });
    const double t_fused = time([&] { turnrl_step(in, logp, true, nullptr); });
    const auto mismatch = [&](bool fused) {
      compute_mismatch(in.old_logp, in.rollout_logp, in.mask, in.traj, in.num_traj, mismatch_options().with_fused(fused));
    };
    const double t_mismatch = time([&] { mismatch(true); });
    const double t_mismatch_unfused = time([&] { mismatch(false); });
    const double t_mismatch_base = time([&] { baseline_mismatch(in); });
    PolicyLossInputs li;
    li.logp = logp;
    li.old_logp = in.old_logp;
    li.advantages = in.adv;
    li.response_mask = mr.response_mask;
    li.weights = mr.weights;
    const double t_loss = time([&] { torch::autograd::grad({policy_loss(li).loss}, {logp}); });

    const double slots = double(shape.first * shape.second);
    const double achieved = kBytesPerToken * slots / t_fused;
    std::printf("%6lld %6lld %8.1fM | %11s %11s %11s | %7.2fx | %11s %11s | %8.1f %9.1fx   (max |dgrad| %.1e of %.1e)\n",
                (long long)shape.first, (long long)shape.second, slots / 1e6, bench::human_time(t_base).c_str(),
                bench::human_time(t_unfused).c_str(), bench::human_time(t_fused).c_str(), t_base / t_fused,
                bench::human_time(t_mismatch).c_str(), bench::human_time(t_loss).c_str(), achieved / 1e9,
                bandwidth / achieved, err, scale);
    std::fflush(stdout);
    const double mismatch_achieved = kMismatchBytesPerToken * slots / t_mismatch;
    mismatch_rows.push_back(fmt::format(
        "{:>6} {:>6} {:>8.1f}M | {:>11} {:>11} {:>11} | {:>7.2f}x | {:>8.1f} {:>9.1f}x   (masks differ on {} slots)",
        shape.first, shape.second, slots / 1e6, bench::human_time(t_mismatch_base), bench::human_time(t_mismatch_unfused),
        bench::human_time(t_mismatch), t_mismatch_base / t_mismatch, mismatch_achieved / 1e9,
        bandwidth / mismatch_achieved, mask_diff));
  }
  std::printf("\nturnrl = compute_mismatch (with its diagnostics and NaN check) + policy_loss (fused) + backward;\n"
              "unfused = the same with MismatchOptions::fused and PPOLossOptions::fused false (whole-tensor ops);\n"
              "mismatch and loss f+b are turnrl's two parts.\n"
              "'x of bound' = turnrl time / (17 bytes per slot at the measured copy bandwidth); 1.0 is the floor.\n\n");

  std::printf("compute_mismatch alone; plain = the baseline's mismatch ops (mask and weights only: no diagnostics, no\n"
              "NaN check); 'x of bound' against 14 bytes per slot (read old, rollout, mask; write mask, weights)\n\n");
  std::printf("%6s %6s %9s | %11s %11s %11s | %8s | %8s %10s\n", "rows", "L", "slots", "plain", "unfused", "turnrl",
              "speedup", "GB/s", "x of bound");
  for (const std::string& row : mismatch_rows) std::printf("%s\n", row.c_str());
  return 0;
}
