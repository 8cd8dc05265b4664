// Masked and segment reductions against hand values and plain loops, NaN-safety included.
#include <catch2/catch.hpp>

#include <cmath>

#include "support/batches.h"
#include "turnrl/core/error.h"
#include "turnrl/core/masked.h"
#include "turnrl/core/segment.h"

using namespace turnrl;
using turnrl::testing::to_vector;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
torch::Tensor bools(std::vector<int64_t> v) { return at::tensor(v).to(at::kBool); }
}  // namespace

TEST_CASE("masked reductions ignore masked-out NaN and give 0 for an empty mask", "[masked]") {
  const torch::Tensor x = at::tensor({1.0, 2.0, kNaN, 4.0});
  const torch::Tensor m = bools({1, 1, 0, 1});
  REQUIRE(masked_sum(x, m).item<double>() == Approx(7.0));
  REQUIRE(masked_mean(x, m).item<double>() == Approx(7.0 / 3.0));
  REQUIRE(masked_var(x, m).item<double>() == Approx(2.3333333333));        // unbiased
  REQUIRE(masked_var(x, m, false).item<double>() == Approx(1.5555555556)); // biased
  REQUIRE(masked_mean(x, bools({0, 0, 0, 0})).item<double>() == 0.0);
  REQUIRE_THROWS_WITH(masked_var(x, bools({0, 0, 0, 1})), Catch::Contains("needs at least 2"));
  const auto w = to_vector(masked_whiten(x, m));
  REQUIRE(w[2] == 0.0);
  REQUIRE(w[0] == Approx((1.0 - 7.0 / 3.0) / std::sqrt(2.3333333333 + 1e-8)));
  const auto rows = to_vector(masked_mean(at::tensor({1.0, 3.0, 5.0, 7.0}).view({2, 2}), bools({1, 0, 1, 1}).view({2, 2}), 1));
  REQUIRE(rows[0] == Approx(1.0));
  REQUIRE(rows[1] == Approx(6.0));
}

TEST_CASE("segment reductions match plain loops", "[segment]") {
  const std::vector<double> v = {1, 2, 3, 4, 10, kNaN, 7};
  const std::vector<int64_t> s = {0, 0, 1, 1, 1, 2, 3};
  const std::vector<int64_t> keep = {1, 1, 1, 1, 1, 0, 1};
  const torch::Tensor vt = at::tensor(v), st = at::tensor(s), mt = bools(keep);
  const SegmentSums sums = segment_sums(vt, st, 5, mt);
  REQUIRE(to_vector(sums.sum) == std::vector<double>{3, 17, 0, 7, 0});
  REQUIRE(to_vector(sums.count) == std::vector<double>{2, 3, 0, 1, 0});
  const auto mean = to_vector(segment_mean(vt, st, 5, mt));
  REQUIRE(mean[1] == Approx(17.0 / 3));
  REQUIRE(mean[4] == 0.0);
  const auto sd = to_vector(segment_std(vt, st, 5, true, mt));
  REQUIRE(sd[0] == Approx(std::sqrt(0.5)));
  REQUIRE(sd[1] == Approx(std::sqrt(((3 - 17.0 / 3) * (3 - 17.0 / 3) + (4 - 17.0 / 3) * (4 - 17.0 / 3) +
                                     (10 - 17.0 / 3) * (10 - 17.0 / 3)) / 2)));
  REQUIRE(std::isnan(sd[3]));  // unbiased std of one value is undefined
  REQUIRE(to_vector(segment_std(vt, st, 5, false, mt))[3] == 0.0);
  const auto wh = to_vector(segment_whiten(vt, st, 5, true, 1e-6, mt));
  REQUIRE(wh[0] == Approx(-0.5 / (std::sqrt(0.5) + 1e-6)));
  REQUIRE(wh[5] == 0.0);
  REQUIRE(to_vector(gather_segments(sums.count, st)) == std::vector<double>{2, 2, 3, 3, 3, 0, 1});
}
