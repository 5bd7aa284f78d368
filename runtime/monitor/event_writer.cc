#include "runtime/monitor/event_writer.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "runtime/base/crc32c.h"

namespace ds::monitor {

uint32_t MaskedCrc32c(const void* data, size_t size) {
  const uint32_t c = Crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Protobuf wire format: varints, tags, fixed 32 / 64-bit and length-delimited fields.
void Varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void Fixed(const void* p, size_t n, std::string* out) {
  out->append(static_cast<const char*>(p), n);  // little-endian hosts (x86-64, aarch64)
}
void Bytes(int field, const std::string& b, std::string* out) {
  Varint((static_cast<uint64_t>(field) << 3) | 2, out);
  Varint(b.size(), out);
  out->append(b);
}

void Header(std::string* event, double wall_time) {
  event->push_back(0x09);  // Event.wall_time (1, fixed64)
  Fixed(&wall_time, 8, event);
}

std::atomic<int> g_uid{0};

}  // namespace

std::string ScalarEvent(const std::string& tag, float value, int64_t step, double wall_time) {
  std::string v;  // Summary.Value
  Bytes(1, tag, &v);
  v.push_back(0x15);  // simple_value (2, fixed32)
  Fixed(&value, 4, &v);
  std::string summary;
  Bytes(1, v, &summary);  // Summary.value (1)
  std::string event;
  Header(&event, wall_time);
  event.push_back(0x10);  // Event.step (2, varint)
  Varint(static_cast<uint64_t>(step), &event);
  Bytes(5, summary, &event);  // Event.summary (5)
  return event;
}

StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InternalError("tensorboard: cannot create " + dir + ": " + ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = Now();
  char name[512];
  std::snprintf(name, sizeof(name), "events.out.tfevents.%010lld.%s.%d.%d",
                static_cast<long long>(now), host, static_cast<int>(getpid()), g_uid++);
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return ErrnoToStatus(errno, "tensorboard: open " + path);
  std::unique_ptr<EventFileWriter> w(new EventFileWriter(f, path));
  std::string first;  // Event{wall_time, file_version = "brain.Event:2"}
  Header(&first, now);
  Bytes(3, "brain.Event:2", &first);
  Status s = w->WriteRecord(first);
  if (s.ok()) s = w->Flush();
  if (!s.ok()) return s;
  return w;
}

EventFileWriter::~EventFileWriter() {
  if (f_) std::fclose(f_);
}

Status EventFileWriter::WriteRecord(const std::string& data) {
  const uint64_t len = data.size();
  const uint32_t len_crc = MaskedCrc32c(&len, 8);
  const uint32_t data_crc = MaskedCrc32c(data.data(), data.size());
  std::string rec;
  Fixed(&len, 8, &rec);
  Fixed(&len_crc, 4, &rec);
  rec.append(data);
  Fixed(&data_crc, 4, &rec);
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size())
    return ErrnoToStatus(errno, "tensorboard: write " + path_);
  return OkStatus();
}

Status EventFileWriter::AddScalar(const std::string& tag, float value, int64_t step,
                                  double wall_time) {
  return WriteRecord(ScalarEvent(tag, value, step, wall_time < 0 ? Now() : wall_time));
}

Status EventFileWriter::Flush() {
  if (std::fflush(f_) != 0) return ErrnoToStatus(errno, "tensorboard: flush " + path_);
  return OkStatus();
}

}  // namespace ds::monitor
