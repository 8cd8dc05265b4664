// The stages' options sections: read strictly from YAML and written back by one description each
// (core/config_fields.h), so what is printed reads back to the same options.
#include <catch2/catch.hpp>

#include "turnrl/algo/advantage.h"
#include "turnrl/algo/mismatch.h"
#include "turnrl/algo/policy_loss.h"
#include "turnrl/algo/rejection.h"
#include "turnrl/algo/returns.h"
#include "turnrl/core/config_fields.h"
#include "turnrl/core/error.h"

using namespace turnrl;

namespace {

template <typename T>
std::string written(const T& options) {
  ConfigWriter w(false);
  write_options(w, options);
  return w.str();
}

template <typename T>
T read_back(const std::string& yaml) {
  ConfigReader r(parse_yaml(yaml, "t"), "s");
  T options;
  read_options(r, options);
  r.finish();
  return options;
}

}  // namespace

TEST_CASE("advantage and return options map one-to-one onto YAML", "[config]") {
  ConfigReader r(parse_yaml("singleton: zero\ngrouping: trajectory\nstd_epsilon: 0.001\nmode: outcome\n", "t"), "algo");
  AdvantageOptions a;
  ReturnOptions ro;
  read_options(r, a);
  read_options(r, ro);
  REQUIRE_NOTHROW(r.finish());
  REQUIRE(a.singleton == SingletonAdvantage::zero);
  REQUIRE(a.grouping == Grouping::trajectory);
  REQUIRE(a.std_epsilon == 0.001);
  REQUIRE(ro.mode == ReturnMode::outcome);
  ConfigReader bad(parse_yaml("singleton: none\n", "t"), "algo");
  REQUIRE_THROWS_WITH(read_options(bad, a), Catch::Contains("algo.singleton: 'none' is not allowed; allowed: raw_return, zero"));
}

TEST_CASE("each stage's section is written as it is read", "[config]") {
  ReturnOptions returns;
  returns.mode = ReturnMode::residual;
  returns.gamma = 0.5;
  CHECK(written(returns) == "mode: residual\ngamma: 0.5\nunbiased_shaping: true\n");  // the default
  CHECK(written(read_back<ReturnOptions>(written(returns))) == written(returns));

  MismatchOptions m;
  m.rs_level = MismatchLevel::geometric;
  m.rs_upper = 2.0;
  m.rs_lower = 0.25;
  const MismatchOptions mb = read_back<MismatchOptions>(written(m));
  CHECK(mb.rs_level == MismatchLevel::geometric);
  CHECK(mb.rs_lower == 0.25);  // written explicitly, so not derived from rs_upper
  CHECK(written(mb) == written(m));

  PPOLossOptions p;
  p.agg_mode = LossAggMode::seq_mean_token_sum_norm;
  p.clip_high = 0.28;
  CHECK(written(read_back<PPOLossOptions>(written(p))) == written(p));

  RejectionOptions rj;
  rj.prs.enabled = true;
  rj.prs.threshold = 0.3;
  rj.groups.seed = 42;
  const std::string text = written(rj);
  CHECK(text.find("prs:\n  enabled: true\n") != std::string::npos);  // nested sections indent
  const RejectionOptions rb = read_back<RejectionOptions>(text);
  CHECK(rb.prs.enabled);
  CHECK(rb.prs.threshold == 0.3);
  CHECK(rb.groups.seed == 42);
  CHECK(written(rb) == text);
}

TEST_CASE("an alias is read as its value and written under the value's name", "[config]") {
  const PPOLossOptions p = read_back<PPOLossOptions>("kl_type: k1\n");
  CHECK(p.kl_type == KLType::kl);
  CHECK(written(p).find("kl_type: kl\n") != std::string::npos);
}

TEST_CASE("a nested section's unknown key is an error naming its path", "[config][edge]") {
  REQUIRE_THROWS_WITH(read_back<RejectionOptions>("prs:\n  enabeld: true\n"), Catch::Contains("s.prs.enabeld"));
}
