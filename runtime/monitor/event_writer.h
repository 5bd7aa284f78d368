// EventFileWriter: a TensorBoard event file of scalars, written as TensorBoard's own writer
// does, so TensorBoard (and its EventAccumulator) reads it: a file
// events.out.tfevents.<time>.<host>.<pid>.<n> of TFRecords (length, masked CRC-32C of the
// length, the serialized Event, its masked CRC), the first Event carrying file_version
// "brain.Event:2", then one Event per scalar with a Summary.Value{tag, simple_value} (the form
// torch's add_scalar writes). The protobuf messages are encoded here by hand (a few fields), so
// nothing depends on TensorBoard's protos.
//
//   DS_ASSIGN_OR_RETURN(auto w, EventFileWriter::Create("runs/tb/job"));
//   w->AddScalar("Train/Samples/train_loss", 2.31f, /*step=*/256);
//   DS_RETURN_IF_ERROR(w->Flush());
//
// Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "runtime/base/status.h"

namespace ds::monitor {

// The masked CRC-32C TFRecord framing stores (rotate right by 15, add 0xA282EAD8).
uint32_t MaskedCrc32c(const void* data, size_t size);

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and the event file in it.
  static StatusOr<std::unique_ptr<EventFileWriter>> Create(const std::string& dir);
  ~EventFileWriter();

  // wall_time < 0: now.
  Status AddScalar(const std::string& tag, float value, int64_t step, double wall_time = -1);
  Status Flush();
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  Status WriteRecord(const std::string& data);

  std::FILE* f_;
  std::string path_;
};

// The serialized Event of one scalar (exposed for tests).
std::string ScalarEvent(const std::string& tag, float value, int64_t step, double wall_time);

}  // namespace ds::monitor
