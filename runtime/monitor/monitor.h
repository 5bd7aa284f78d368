// DeepSpeed's monitor (its `tensorboard` and `csv_monitor` blocks) for rank 0: each enabled
// target writes every event under output_path/job_name as DeepSpeed lays it out:
//
//   tensorboard   one event file of scalars (event_writer.h), flushed after each batch
//   csv_monitor   one CSV per tag, named after the tag with '/' and ' ' made '_' (e.g.
//                 Train_Samples_train_loss.csv), header "step,<the tag's last part>" written
//                 the first time this process writes the file, then "step,value" rows
//                 appended (a resumed run appends to the same files)
//
//   DS_ASSIGN_OR_RETURN(auto m, Monitor::Create(tensorboard, csv));
//   DS_RETURN_IF_ERROR(m->Write({{"Train/Samples/train_loss", 2.31, 256}}));
//
// Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/monitor/event_writer.h"

namespace ds::monitor {

struct TargetConfig {
  bool enabled = false;
  std::string output_path;                    // "" = the working directory
  std::string job_name = "DeepSpeedJobName";  // DeepSpeed's default
};

struct Event {
  std::string tag;  // "Train/Samples/train_loss"
  double value = 0;
  int64_t step = 0;  // DeepSpeed's x-axis: samples seen
};

// The CSV file name DeepSpeed gives a tag.
std::string CsvFileName(const std::string& tag);

class Monitor {
 public:
  // Null when neither target is enabled.
  static StatusOr<std::unique_ptr<Monitor>> Create(const TargetConfig& tensorboard,
                                                   const TargetConfig& csv);
  Status Write(const std::vector<Event>& events);
  // Where each enabled target writes (for the log).
  std::vector<std::string> Describe() const;

 private:
  Monitor() = default;
  Status WriteCsv(const Event& e);

  std::unique_ptr<EventFileWriter> tb_;
  std::string csv_dir_;                   // "" = no CSV
  std::map<std::string, bool> csv_seen_;  // files this process has written a header to
};

}  // namespace ds::monitor
