#include "runtime/monitor/monitor.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "runtime/base/status_macros.h"

namespace ds::monitor {
namespace {

std::string LogDir(const TargetConfig& t) {
  return t.output_path.empty() ? t.job_name : t.output_path + "/" + t.job_name;
}

}  // namespace

std::string CsvFileName(const std::string& tag) {
  std::string name = tag;
  for (char& c : name)
    if (c == '/' || c == ' ') c = '_';
  return name + ".csv";
}

StatusOr<std::unique_ptr<Monitor>> Monitor::Create(const TargetConfig& tensorboard,
                                                   const TargetConfig& csv) {
  if (!tensorboard.enabled && !csv.enabled) return std::unique_ptr<Monitor>();
  std::unique_ptr<Monitor> m(new Monitor());
  if (tensorboard.enabled) {
    DS_ASSIGN_OR_RETURN(m->tb_, EventFileWriter::Create(LogDir(tensorboard)));
  }
  if (csv.enabled) {
    m->csv_dir_ = LogDir(csv);
    std::error_code ec;
    std::filesystem::create_directories(m->csv_dir_, ec);
    if (ec) return InternalError("csv_monitor: cannot create " + m->csv_dir_ + ": " + ec.message());
  }
  return m;
}

Status Monitor::WriteCsv(const Event& e) {
  const std::string path = csv_dir_ + "/" + CsvFileName(e.tag);
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) return ErrnoToStatus(errno, "csv_monitor: open " + path);
  if (!csv_seen_[path]) {
    csv_seen_[path] = true;
    std::fprintf(f, "step,%s\n", e.tag.substr(e.tag.rfind('/') + 1).c_str());
  }
  std::fprintf(f, "%lld,%.9g\n", static_cast<long long>(e.step), e.value);
  if (std::fclose(f) != 0) return ErrnoToStatus(errno, "csv_monitor: write " + path);
  return OkStatus();
}

Status Monitor::Write(const std::vector<Event>& events) {
  for (const Event& e : events) {
    if (tb_) DS_RETURN_IF_ERROR(tb_->AddScalar(e.tag, static_cast<float>(e.value), e.step));
    if (!csv_dir_.empty()) DS_RETURN_IF_ERROR(WriteCsv(e));
  }
  return tb_ ? tb_->Flush() : OkStatus();
}

std::vector<std::string> Monitor::Describe() const {
  std::vector<std::string> out;
  if (tb_) out.push_back("tensorboard: " + tb_->path());
  if (!csv_dir_.empty()) out.push_back("csv_monitor: " + csv_dir_ + "/*.csv");
  return out;
}

}  // namespace ds::monitor
