#pragma once
// TensorBoard event files beside metrics.jsonl, so that `tensorboard --logdir runs/` shows a run
// as it shows verl's, OpenRLHF's and TRL's. The file is TFRecord-framed (length, masked CRC-32C of
// the length, data, masked CRC-32C of the data) tensorflow.Event protobuf messages. The few fields
// a scalar needs (Event.wall_time/step/file_version/summary, Summary.Value.tag/simple_value) are
// encoded by hand, so no protobuf library or generated code is needed.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "turnrl/rl/metrics.h"

namespace turnrl {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's masked form of it.
uint32_t crc32c(const uint8_t* data, size_t size);
uint32_t masked_crc32c(const uint8_t* data, size_t size);

// One TFRecord: 8-byte little-endian length, masked CRC of those 8 bytes, the data, its masked CRC.
std::string tfrecord(const std::string& data);

// A serialized tensorflow.Event: {wall_time, file_version} (the first event of every file).
std::string file_version_event(double wall_time);
// A serialized tensorflow.Event: {wall_time, step, summary{value{tag, simple_value}} per metric}.
// The "step" metric itself is not written as a value; values are narrowed to float as TensorBoard
// stores them.
std::string scalar_event(double wall_time, int64_t step, const Metrics& metrics);

// Appends events to run_dir/events.out.tfevents.<unix seconds>.<hostname> (the name TensorBoard
// globs for), flushed after each step.
class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;
  // Creates the file and writes the file_version event ("brain.Event:2").
  explicit TensorBoardWriter(const std::string& run_dir);
  void write_scalars(int64_t step, const Metrics& metrics);
  bool is_open() const { return out_.is_open(); }
  const std::string& path() const { return path_; }

 private:
  std::ofstream out_;
  std::string path_;
};

// What read_tensorboard_events finds in an event file.
struct TensorBoardEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;                               // set on the first event only
  std::vector<std::pair<std::string, float>> scalars;     // tag, simple_value
};

// Reads an event file back, checking both CRCs of every record. Throws turnrl::Error naming the
// file and the record on a truncated record, a CRC mismatch or a malformed message.
std::vector<TensorBoardEvent> read_tensorboard_events(const std::string& path);

}  // namespace turnrl
