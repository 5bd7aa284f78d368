#include "zero/aio/io_rates.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "runtime/base/status_macros.h"
#include "zero/aio/io_file.h"

namespace ds::zero {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

StatusOr<IoResult> MeasureIoDirection(const IoOptions& o, const std::string& path,
                                      AlignedBuffer& buf, int64_t size, bool write, int loops) {
  DS_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> e, IoEngine::Create(o));
  StatusOr<IoFile> f = IoFile::Open(path, write ? IoFile::kReadWrite : IoFile::kRead);
  const bool created = !f.ok() && write;  // its first pass lays the blocks out, untimed
  if (created) f = IoFile::Open(path, IoFile::kCreate);
  if (!f.ok()) return f.status();
  if (write) DS_RETURN_IF_ERROR(f->Preallocate(size));
  IoResult r;
  std::vector<double> gbps, task, e2e;
  for (int i = created ? -1 : 0; i < loops; ++i) {
    const Clock::time_point t0 = Clock::now();
    DS_ASSIGN_OR_RETURN(
        IoTicket t, write ? e->Write(*f, 0, buf.data(), size) : e->Read(*f, 0, buf.data(), size));
    DS_RETURN_IF_ERROR(e->Wait(t));
    const Clock::time_point t1 = Clock::now();
    if (write) DS_RETURN_IF_ERROR(f->Sync());
    const double end_to_end = Seconds(Clock::now() - t0);
    if (i < 0) {
      e->TakeLatencies();
      continue;
    }
    task.push_back(Seconds(t1 - t0));
    e2e.push_back(end_to_end);
    gbps.push_back(static_cast<double>(size) / end_to_end / 1e9);
    std::vector<int64_t> lat = e->TakeLatencies();
    r.latencies.insert(r.latencies.end(), lat.begin(), lat.end());
  }
  r.gbps = Median(gbps);
  r.task_s = Median(task);
  r.e2e_s = Median(e2e);
  return r;
}

StatusOr<IoRates> MeasureIoRates(const std::string& dir, int64_t size, const IoOptions& o) {
  const std::string path = dir + "/ds_io_rates." + std::to_string(::getpid()) + ".dat";
  DS_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(size));
  std::fill_n(static_cast<char*>(buf.data()), size, 1);
  IoRates rates;
  auto measure = [&]() -> Status {
    DS_ASSIGN_OR_RETURN(IoResult w, MeasureIoDirection(o, path, buf, size, true, 1));
    DS_ASSIGN_OR_RETURN(IoResult r, MeasureIoDirection(o, path, buf, size, false, 1));
    rates.write_gbps = w.gbps;
    rates.read_gbps = r.gbps;
    return OkStatus();
  };
  const Status s = measure();
  ::unlink(path.c_str());
  if (!s.ok()) return s.WithPrefix("measuring the I/O rates of " + dir);
  return rates;
}

}  // namespace ds::zero
