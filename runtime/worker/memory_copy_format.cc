#include "runtime/worker/memory_copy_format.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/base/crc32c.h"
#include "runtime/base/json.h"
#include "runtime/base/status_macros.h"

namespace ds::worker {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'M', 'E', 'M', 'C', 'P', '1'};

Json HeaderJson(const CopyHeader& h, const std::vector<CopySection>& sections) {
  Json j = Json::Object();
  j.Set("rank", Json::Int(h.rank));
  j.Set("world", Json::Int(h.world));
  j.Set("step", Json::Int(h.step));
  j.Set("optimizer_step", Json::Int(h.optimizer_step));
  j.Set("plan", Json::String(h.plan));
  j.Set("scaler", Json::String(h.scaler));
  j.Set("data", Json::String(h.data));
  j.Set("total", Json::Int(h.total));
  j.Set("layout", Json::String(std::to_string(h.layout)));
  j.Set("master_whole", Json::Bool(h.master_whole));
  j.Set("part", Json::String(h.part));
  Json segs = Json::Array();
  for (const zero::ShardSegment& g : h.segments) {
    Json e = Json::Array();
    e.Append(Json::Int(g.flat_begin));
    e.Append(Json::Int(g.count));
    e.Append(Json::Int(g.shard_offset));
    segs.Append(std::move(e));
  }
  j.Set("segments", std::move(segs));
  Json list = Json::Array();
  for (const CopySection& s : sections) {
    Json e = Json::Object();
    e.Set("name", Json::String(s.name));
    e.Set("bytes", Json::Int(s.bytes));
    list.Append(std::move(e));
  }
  j.Set("sections", std::move(list));
  return j;
}

Status ReadHeader(const Json& j, const std::string& what, CopyHeader* h) {
  for (const char* key : {"rank", "world", "step", "optimizer_step", "plan", "scaler", "data",
                          "total", "layout", "master_whole", "part", "segments", "sections"})
    if (!j.Find(key)) return DataLossError(what + ": the header has no \"" + key + "\"");
  h->rank = static_cast<int>(j.Find("rank")->as_int());
  h->world = static_cast<int>(j.Find("world")->as_int());
  h->step = j.Find("step")->as_int();
  h->optimizer_step = j.Find("optimizer_step")->as_int();
  h->plan = j.Find("plan")->as_string();
  h->scaler = j.Find("scaler")->as_string();
  h->data = j.Find("data")->as_string();
  h->total = j.Find("total")->as_int();
  h->layout = std::strtoull(j.Find("layout")->as_string().c_str(), nullptr, 10);
  h->master_whole = j.Find("master_whole")->as_bool();
  h->part = j.Find("part")->as_string();
  for (const Json& e : j.Find("segments")->items()) {
    if (e.items().size() != 3) return DataLossError(what + ": a malformed segment");
    h->segments.push_back({e.items()[0].as_int(), e.items()[1].as_int(), e.items()[2].as_int()});
  }
  return OkStatus();
}

}  // namespace

uint64_t ParameterLayoutHash(const zero::ParamStore& params) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const unsigned char*>(p)[i];
      h *= 1099511628211ull;
    }
  };
  for (const zero::ParamSlot& s : params.slots()) {
    mix(s.name.data(), s.name.size());
    mix(&s.offset, sizeof(s.offset));
    mix(&s.numel, sizeof(s.numel));
  }
  return h;
}

void WriteCopy(const CopyHeader& header, const std::vector<CopySection>& sections,
               std::string* out) {
  const std::string text = HeaderJson(header, sections).Dump();
  const uint64_t header_len = text.size();
  int64_t total = 0;
  for (const CopySection& s : sections) total += s.bytes;
  out->resize(16 + text.size() + static_cast<size_t>(total));
  char* p = out->data();
  std::memcpy(p, kMagic, 8);
  std::memcpy(p + 8, &header_len, 8);
  std::memcpy(p + 16, text.data(), text.size());
  p += 16 + text.size();
  for (const CopySection& s : sections) {
    std::memcpy(p, s.data, static_cast<size_t>(s.bytes));
    p += s.bytes;
  }
}

namespace {

Status WriteAll(int fd, const char* p, size_t n, uint32_t* crc) {
  *crc = Crc32cExtend(*crc, p, n);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ErrnoToStatus(errno, "writing an in-memory copy");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return OkStatus();
}

}  // namespace

Status WriteCopyTo(const CopyHeader& header, const std::vector<CopySection>& sections, int fd,
                   uint32_t* crc) {
  const std::string text = HeaderJson(header, sections).Dump();
  const uint64_t header_len = text.size();
  char head[16];
  std::memcpy(head, kMagic, 8);
  std::memcpy(head + 8, &header_len, 8);
  *crc = 0;
  DS_RETURN_IF_ERROR(WriteAll(fd, head, sizeof(head), crc));
  DS_RETURN_IF_ERROR(WriteAll(fd, text.data(), text.size(), crc));
  for (const CopySection& s : sections)
    DS_RETURN_IF_ERROR(WriteAll(fd, s.data, static_cast<size_t>(s.bytes), crc));
  return OkStatus();
}

StatusOr<ParsedCopy> ParseCopy(const std::string& blob, const std::string& what) {
  uint64_t header_len = 0;
  if (blob.size() < 16 || std::memcmp(blob.data(), kMagic, 8) != 0)
    return DataLossError(what + ": not a copy (" + std::to_string(blob.size()) + " bytes)");
  std::memcpy(&header_len, blob.data() + 8, 8);
  if (header_len > blob.size() - 16) return DataLossError(what + ": header runs past the end");
  auto j = ParseJson(std::string_view(blob.data() + 16, header_len));
  if (!j.ok()) return DataLossError(what + ": header: " + j.status().message());
  ParsedCopy p;
  DS_RETURN_IF_ERROR(ReadHeader(*j, what, &p.header));
  int64_t at = 16 + static_cast<int64_t>(header_len);
  for (const Json& s : j->Find("sections")->items()) {
    const int64_t bytes = s.Find("bytes") ? s.Find("bytes")->as_int() : -1;
    if (!s.Find("name") || bytes < 0 || bytes > static_cast<int64_t>(blob.size()) - at)
      return DataLossError(what + ": section " + std::to_string(p.sections.size()) +
                           " runs past the end");
    p.sections.push_back({s.Find("name")->as_string(), const_cast<char*>(blob.data()) + at, bytes});
    at += bytes;
  }
  if (at != static_cast<int64_t>(blob.size()))
    return DataLossError(what + ": " + std::to_string(blob.size()) + " bytes, the header says " +
                         std::to_string(at));
  return p;
}

}  // namespace ds::worker
