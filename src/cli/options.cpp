// Options and validators the subcommands share: --set, CONFIG lookup among the shipped configs,
// integer ranges reported in turnrl's words (the value and what is allowed).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.h"
#include "turnrl/core/error.h"
#include "turnrl/core/install_paths.h"

namespace turnrl::cli {

CLI::Validator shipped_config() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        if (path.empty() || ::access(path.c_str(), R_OK) == 0) return "";
        std::string name = std::filesystem::path(path).filename().string();
        if (name.find('.') == std::string::npos) name += ".yaml";
        try {
          path = find_turnrl_file(TurnrlFiles::data, "configs/" + name);
          return "";
        } catch (const Error& e) {
          return fmt::format("'{}' is not a readable file, nor a shipped config: {}", path, e.what());
        }
      },
      "", "CONFIG");
}

void add_config_overrides(CLI::App& command, std::vector<std::string>& sets) {
  // One value per --set, repeatable: a vector option would otherwise swallow the positional CONFIG.
  command
      .add_option("--set", sets, "Override one config key: key.path=value (value read as YAML); repeatable")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name("KEY=VALUE");
}

CLI::Validator integer_in(long lo, long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const long v = std::strtol(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || v < lo || v > hi)
          return fmt::format("'{}' is not allowed; allowed: an integer in [{}, {}]", text, lo, hi);
        return "";
      },
      fmt::format("[{}, {}]", lo, hi), "integer_in");
}

}  // namespace turnrl::cli
