#include "runtime/generate/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <utility>
#include <vector>

#include "runtime/base/status_macros.h"
#include "runtime/generate/bpe_tokenizer.h"

namespace ds::generate {
namespace {

constexpr char kPlugin[] = "libds_sentencepiece.so";

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class Bpe : public Tokenizer {
 public:
  explicit Bpe(BpeTokenizer t) : t_(std::move(t)) {}
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    return t_.Encode(text);
  }
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override {
    return t_.Decode(ids);
  }
  int64_t vocab_size() const override { return t_.vocab_size(); }

 private:
  BpeTokenizer t_;
};

// The SentencePiece plugin (sentencepiece_plugin.cc), loaded once: from $DS_SENTENCEPIECE_PLUGIN,
// beside the executable, or in its runfiles.
struct Plugin {
  void* (*open)(const char*, char*, size_t) = nullptr;
  void (*close)(void*) = nullptr;
  int (*size)(void*) = nullptr;
  int (*encode)(void*, const char*, size_t, int*, int, char*, size_t) = nullptr;
  long (*decode)(void*, const int*, int, char*, size_t, char*, size_t) = nullptr;
};

std::string Executable() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), n) : std::string();
}

StatusOr<const Plugin*> LoadPlugin() {
  static Plugin plugin;
  static std::string error;
  if (plugin.open) return &plugin;
  if (!error.empty()) return UnavailableError(error);
  std::vector<std::string> paths;
  if (const char* p = std::getenv("DS_SENTENCEPIECE_PLUGIN"); p && *p) paths.push_back(p);
  const std::string exe = Executable();
  const size_t slash = exe.rfind('/');
  paths.push_back((slash == std::string::npos ? "." : exe.substr(0, slash)) + "/" + kPlugin);
  std::vector<std::string> runfiles = {exe + ".runfiles"};
  for (const char* env : {"RUNFILES_DIR", "TEST_SRCDIR"})
    if (const char* r = std::getenv(env)) runfiles.push_back(r);
  for (const std::string& r : runfiles)
    paths.push_back(r + "/ds_runtime/runtime/generate/" + kPlugin);
  std::string tried;
  for (const std::string& path : paths) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      tried += "\n  " + path + ": " + dlerror();
      continue;
    }
    plugin.close = reinterpret_cast<decltype(plugin.close)>(dlsym(h, "ds_sp_close"));
    plugin.size = reinterpret_cast<decltype(plugin.size)>(dlsym(h, "ds_sp_size"));
    plugin.encode = reinterpret_cast<decltype(plugin.encode)>(dlsym(h, "ds_sp_encode"));
    plugin.decode = reinterpret_cast<decltype(plugin.decode)>(dlsym(h, "ds_sp_decode"));
    plugin.open = reinterpret_cast<decltype(plugin.open)>(dlsym(h, "ds_sp_open"));
    if (plugin.open && plugin.close && plugin.size && plugin.encode && plugin.decode)
      return &plugin;
    plugin = Plugin();
    tried += "\n  " + path + ": not the SentencePiece plugin";
  }
  error = std::string("SentencePiece models need ") + kPlugin +
          " (built with libsentencepiece-dev; tools/build.sh puts it in bin/); tried:" + tried;
  return UnavailableError(error);
}

// SentencePiece (unigram or BPE models, byte fallback): the library's own encode and decode.
class SentencePiece : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path) {
    DS_ASSIGN_OR_RETURN(const Plugin* p, LoadPlugin());
    char err[512] = "";
    void* sp = p->open(path.c_str(), err, sizeof(err));
    if (!sp) return InvalidArgumentError(path + ": not a SentencePiece model: " + err);
    return std::unique_ptr<Tokenizer>(new SentencePiece(p, sp, path));
  }
  ~SentencePiece() override { p_->close(sp_); }
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int> ids(text.size() + 16);
    char err[512] = "";
    int n = p_->encode(sp_, text.data(), text.size(), ids.data(), static_cast<int>(ids.size()), err,
                       sizeof(err));
    if (n > static_cast<int>(ids.size())) {
      ids.resize(n);
      n = p_->encode(sp_, text.data(), text.size(), ids.data(), n, err, sizeof(err));
    }
    if (n < 0) return InvalidArgumentError(path_ + ": " + err);
    return std::vector<int32_t>(ids.begin(), ids.begin() + n);
  }
  StatusOr<std::string> Decode(const std::vector<int32_t>& ids) const override {
    for (int32_t id : ids)
      if (id < 0 || id >= vocab_size())
        return InvalidArgumentError(path_ + ": id " + std::to_string(id) + " is outside the " +
                                    std::to_string(vocab_size()) + " pieces");
    const std::vector<int> in(ids.begin(), ids.end());
    std::string text(16 * ids.size() + 16, '\0');
    char err[512] = "";
    long n = p_->decode(sp_, in.data(), static_cast<int>(in.size()), text.data(), text.size(), err,
                        sizeof(err));
    if (n > static_cast<long>(text.size())) {
      text.resize(n);
      n = p_->decode(sp_, in.data(), static_cast<int>(in.size()), text.data(), text.size(), err,
                     sizeof(err));
    }
    if (n < 0) return InvalidArgumentError(path_ + ": " + err);
    text.resize(n);
    return text;
  }
  int64_t vocab_size() const override { return p_->size(sp_); }

 private:
  SentencePiece(const Plugin* p, void* sp, std::string path)
      : p_(p), sp_(sp), path_(std::move(path)) {}
  const Plugin* p_;
  void* sp_;
  std::string path_;
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  if (!std::ifstream(path).good()) return NotFoundError(path + ": cannot open");
  if (EndsWith(path, ".json")) {
    DS_ASSIGN_OR_RETURN(BpeTokenizer t, BpeTokenizer::Load(path));
    return std::unique_ptr<Tokenizer>(std::make_unique<Bpe>(std::move(t)));
  }
  if (EndsWith(path, ".model")) return SentencePiece::Load(path);
  return InvalidArgumentError(path +
                              ": unknown tokenizer format (a tokenizer.json or a SentencePiece "
                              ".model)");
}

StatusOr<std::unique_ptr<Tokenizer>> LoadDirTokenizer(const std::string& dir) {
  for (const char* name : {"/tokenizer.json", "/tokenizer.model"})
    if (std::ifstream(dir + name).good()) return LoadTokenizer(dir + name);
  return std::unique_ptr<Tokenizer>();
}

}  // namespace ds::generate
