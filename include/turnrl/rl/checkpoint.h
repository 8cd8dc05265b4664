#pragma once
// Checkpoint directories written atomically: the files go into a temporary directory next to
// the final one, each is fsync'ed, and one rename() makes the checkpoint appear complete. A run
// killed at any point leaves either the previous checkpoints untouched or a temporary directory
// that list_checkpoints() ignores and remove_incomplete_checkpoints() deletes; never a
// half-written step_* directory.
//
//   <root>/step_00000010/   policy.pt  optimizer.pt  trainer_state.pt
//   (a policy that saves a folder, HFPolicy, writes policy/ in place of policy.pt)
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace turnrl {

class Policy;

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};

// "step_00000010".
std::string checkpoint_name(int64_t step);

// Writes the checkpoint of `step` under `root`: `write(dir)` fills a fresh temporary directory,
// then the directory is renamed to root/checkpoint_name(step) (replacing an older one of the same
// step). Afterwards only the newest `keep_last` complete checkpoints are kept. Returns the final
// path. If `write` throws, the temporary directory is removed and the exception propagates.
std::string write_checkpoint(const std::string& root, int64_t step, const std::function<void(const std::string&)>& write,
                             int64_t keep_last);

// Complete checkpoints under root, oldest first (temporary directories are not listed).
std::vector<CheckpointEntry> list_checkpoints(const std::string& root);
// The newest complete checkpoint, if any.
std::optional<CheckpointEntry> latest_checkpoint(const std::string& root);

// A checkpoint that resuming passed over, and why.
struct SkippedCheckpoint {
  CheckpointEntry entry;
  std::string reason;
};

// Resuming: calls `load(dir)` on the complete checkpoints under root, newest first, until one
// returns without throwing; the ones that threw (corrupt, truncated, unreadable) go to *skipped
// with their error, so the caller can say which one it fell back from. Returns the loaded one, or
// nullopt when root holds none; throws turnrl::Error listing every checkpoint when none loads.
std::optional<CheckpointEntry> load_newest_valid_checkpoint(const std::string& root,
                                                            const std::function<void(const std::string&)>& load,
                                                            std::vector<SkippedCheckpoint>* skipped);

// Writes `file` with `save(path)` (torch::save, an archive's save_to, Policy::save) such that a
// failure is a turnrl::Error naming the file and the system's reason. LibTorch's file writer
// cannot report one: on a full disk its destructor throws during unwinding and the process aborts
// (seen with LibTorch 1.13). So `save` writes into a pipe, which never fills a disk, and the bytes
// are copied to `file` as they come with checked writes (core/checked_write.h); memory stays
// bounded by the pipe. Whatever `save` itself throws becomes a turnrl::Error naming the file too.
void save_checkpoint_file(const std::string& file, const std::function<void(const std::string& path)>& save);
// Writes `folder` with `save(folder)` for a policy that saves a folder (Policy::saves_folder):
// created empty first, every file in it flushed to disk afterwards. Whatever `save` throws becomes a
// turnrl::Error naming the folder. Call it inside write_checkpoint's `write`, whose rename then makes
// the folder appear whole.
void save_checkpoint_folder(const std::string& folder, const std::function<void(const std::string& path)>& save);

// The policy inside a checkpoint directory: "policy.pt", or "policy" for a policy that saves a
// folder (Policy::saves_folder). Shared by the RL trainer and the SFT trainer.
const char* policy_checkpoint_entry(const Policy& policy);
// Writes the policy into checkpoint directory `dir` (save_checkpoint_file / save_checkpoint_folder).
void save_policy_checkpoint(Policy& policy, const std::string& dir);
// Loads the policy from a checkpoint directory, a policy file, or (a folder policy) the folder
// itself (an exported one). Throws turnrl::Error naming what is missing.
void load_policy_checkpoint(Policy& policy, const std::string& path);
// Deletes temporary directories left by killed writers; returns how many.
int remove_incomplete_checkpoints(const std::string& root);

// Flushes a written file (or directory) to disk; throws naming the path on failure.
void fsync_path(const std::string& path);

}  // namespace turnrl
