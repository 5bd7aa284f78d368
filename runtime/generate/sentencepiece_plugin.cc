// libds_sentencepiece.so: Debian's libsentencepiece behind a C interface. The library carries
// its own copy of protobuf-lite and exports it, which breaks a program that also links
// libprotobuf (the copies' symbols interpose each other at load). So nothing links it directly:
// tokenizer.cc dlopens this plugin with RTLD_LOCAL | RTLD_DEEPBIND, which keeps
// libsentencepiece's symbols to itself.
#include <sentencepiece_processor.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

void Error(const std::string& what, char* err, size_t len) {
  if (len == 0) return;
  std::strncpy(err, what.c_str(), len - 1);
  err[len - 1] = '\0';
}

}  // namespace

extern "C" {

// A processor for the model at `path`, or null with the reason in `err`.
void* ds_sp_open(const char* path, char* err, size_t err_len) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto s = sp->Load(path);
  if (!s.ok()) {
    Error(s.ToString(), err, err_len);
    delete sp;
    return nullptr;
  }
  return sp;
}

void ds_sp_close(void* sp) { delete static_cast<sentencepiece::SentencePieceProcessor*>(sp); }

int ds_sp_size(void* sp) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(sp)->GetPieceSize();
}

// The ids of `text` into out[0, cap): their count (more than cap: call again with room), or -1
// with the reason in `err`.
int ds_sp_encode(void* sp, const char* text, size_t len, int* out, int cap, char* err,
                 size_t err_len) {
  std::vector<int> ids;
  const auto s = static_cast<sentencepiece::SentencePieceProcessor*>(sp)->Encode(
      absl::string_view(text, len), &ids);
  if (!s.ok()) {
    Error(s.ToString(), err, err_len);
    return -1;
  }
  for (int i = 0; i < static_cast<int>(ids.size()) && i < cap; ++i) out[i] = ids[i];
  return static_cast<int>(ids.size());
}

// The text of ids[0, n) into out[0, cap): its length (more than cap: call again), or -1.
long ds_sp_decode(void* sp, const int* ids, int n, char* out, size_t cap, char* err,
                  size_t err_len) {
  std::string text;
  const auto s = static_cast<sentencepiece::SentencePieceProcessor*>(sp)->Decode(
      std::vector<int>(ids, ids + n), &text);
  if (!s.ok()) {
    Error(s.ToString(), err, err_len);
    return -1;
  }
  std::memcpy(out, text.data(), std::min(cap, text.size()));
  return static_cast<long>(text.size());
}

}  // extern "C"
