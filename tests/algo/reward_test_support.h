#pragma once
// Helpers shared by the reward tests: options read from YAML text as a config section, and a
// check that an error message names a field.
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include "turnrl/core/config_reader.h"
#include "turnrl/core/error.h"

namespace turnrl::testing {

// Reads `text` as the config section `section` into default Options, finishing the reader.
template <typename Options>
Options options_from_yaml(const std::string& text, const std::string& section) {
  ConfigReader reader(parse_yaml(text, "test"), section);
  Options options;
  read_options(reader, options);
  reader.finish();
  return options;
}

inline void require_error_naming(const std::function<void()>& f, const std::string& field) {
  try {
    f();
    FAIL("no error; expected one naming " << field);
  } catch (const Error& e) {
    INFO(e.what());
    REQUIRE(std::string(e.what()).find(field) != std::string::npos);
  }
}

}  // namespace turnrl::testing
