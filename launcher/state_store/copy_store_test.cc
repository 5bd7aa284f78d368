// CopyDir alone, then CopyServer + CopyClient over 127.0.0.1 (port 0). Malformed requests are
// written by hand on a raw socket, following the wire format of copy_server.h.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <tuple>

#include "launcher/state_store/copy_client.h"
#include "launcher/state_store/copy_dir.h"
#include "launcher/state_store/copy_server.h"
#include "runtime/base/crc32c.h"

namespace ds::launcher {
namespace {

using std::chrono::seconds;
using Keys = std::vector<std::tuple<int, int64_t, int64_t>>;

constexpr char kToken[] = "s3cret-token";

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(&bytes[i], &r, 8);
  }
  for (size_t i = n - n % 8; i < n; ++i) bytes[i] = static_cast<char>(rng());
  return bytes;
}

Keys KeysOf(const std::vector<HeldCopy>& held) {
  Keys keys;
  for (const HeldCopy& c : held) keys.emplace_back(c.rank, c.step, c.bytes);
  return keys;
}

// Every file name in `dir` (parts included).
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (const dirent* e = readdir(d)) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
  }
  closedir(d);
  return names;
}

// Writes `bytes` as rank/step's copy the way a worker does; `crc_xor` spoils the trailer's CRC.
void WriteCopy(const std::string& dir, int rank, int64_t step, const std::string& bytes,
               uint32_t crc_xor = 0) {
  std::string part;
  StatusOr<int> fd = OpenPart(dir, rank, step, &part);
  REQUIRE(fd.ok());
  REQUIRE(part.find(".part.") != std::string::npos);
  REQUIRE(WriteAll(*fd, bytes.data(), bytes.size(), part).ok());
  REQUIRE(WriteTrailer(*fd, Crc32c(bytes.data(), bytes.size()) ^ crc_xor).ok());
  REQUIRE(close(*fd) == 0);
  REQUIRE(CommitPart(dir, part, rank, step).ok());
}

// A fresh CopyDir holding rank 0's steps 10 and 20 and rank 1's step 10, and an open part.
struct DirFixture {
  DirFixture() {
    StatusOr<std::unique_ptr<CopyDir>> created = CopyDir::Create();
    REQUIRE(created.ok());
    dir = std::move(created).value();
    path = dir->path();
    WriteCopy(path, 0, 10, std::string(10, 'a'));
    WriteCopy(path, 1, 10, std::string(100, 'b'));
    WriteCopy(path, 0, 20, std::string(20, 'c'));
    StatusOr<int> fd = OpenPart(path, 0, 40, &open_part);  // being written: not a copy
    REQUIRE(fd.ok());
    part_fd = *fd;
  }
  ~DirFixture() { close(part_fd); }

  std::unique_ptr<CopyDir> dir;
  std::string path;
  std::string open_part;
  int part_fd = -1;
};

TEST_CASE_METHOD(DirFixture, "CopyDir: Held, bytes, and the destructor",
                 "[launcher][state_store]") {
  REQUIRE(CopyFileName(3, 1200) == "r3.s1200.copy");
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  REQUIRE(S_ISDIR(st.st_mode));
  REQUIRE((st.st_mode & 0777) == 0700);
  if (stat("/dev/shm", &st) == 0) REQUIRE(path.rfind("/dev/shm/", 0) == 0);
  REQUIRE(Files(path).size() == 4);
  REQUIRE(KeysOf(dir->Held()) == Keys{{0, 10, 10}, {0, 20, 20}, {1, 10, 100}});
  REQUIRE(dir->bytes() == 130);
  REQUIRE(OpenPart(path, -1, 0, &open_part).status().code() == StatusCode::kInvalidArgument);
  dir.reset();
  REQUIRE(stat(path.c_str(), &st) != 0);  // removed with its files, the open part included
}

TEST_CASE_METHOD(DirFixture, "CopyDir: CommitPart keeps 2 and replaces",
                 "[launcher][state_store]") {
  SECTION("a third copy prunes the rank's oldest") {
    WriteCopy(path, 0, 30, std::string(30, 'd'));
    REQUIRE(KeysOf(dir->Held()) == Keys{{0, 20, 20}, {0, 30, 30}, {1, 10, 100}});
    REQUIRE(dir->bytes() == 150);
    StatusOr<std::string> read = ReadCopyFile(path + "/" + CopyFileName(0, 30));
    REQUIRE(read.ok());
    REQUIRE(*read == std::string(30, 'd'));
  }
  SECTION("a copy older than the 2 held is pruned at once") {
    WriteCopy(path, 0, 5, std::string(5, 'e'));
    REQUIRE(KeysOf(dir->Held()) == Keys{{0, 10, 10}, {0, 20, 20}, {1, 10, 100}});
  }
  SECTION("the same rank and step replaces") {
    WriteCopy(path, 0, 20, std::string(7, 'f'));
    REQUIRE(KeysOf(dir->Held()) == Keys{{0, 10, 10}, {0, 20, 7}, {1, 10, 100}});
  }
}

TEST_CASE_METHOD(DirFixture, "CopyDir: OpenPartReusing writes over the rank's oldest copy",
                 "[launcher][state_store]") {
  // Rank 0 holds 2 (steps 10 and 20): step 10's file becomes the part; what it held beyond the
  // new copy is cut off by WriteTrailer.
  std::string part;
  StatusOr<int> fd = OpenPartReusing(path, 0, 30, /*keep=*/2, &part);
  REQUIRE(fd.ok());
  REQUIRE(KeysOf(dir->Held()) == Keys{{0, 20, 20}, {1, 10, 100}});  // step 10 is the part now
  const std::string bytes(4, 'g');
  REQUIRE(WriteAll(*fd, bytes.data(), bytes.size(), part).ok());
  REQUIRE(WriteTrailer(*fd, Crc32c(bytes.data(), bytes.size())).ok());
  REQUIRE(close(*fd) == 0);
  REQUIRE(CommitPart(path, part, 0, 30).ok());
  REQUIRE(KeysOf(dir->Held()) == Keys{{0, 20, 20}, {0, 30, 4}, {1, 10, 100}});
  StatusOr<std::string> read = ReadCopyFile(path + "/" + CopyFileName(0, 30));
  REQUIRE(read.ok());
  REQUIRE(*read == bytes);
  // Rank 1 holds 1 of keep 2: a fresh part, nothing reused.
  fd = OpenPartReusing(path, 1, 20, /*keep=*/2, &part);
  REQUIRE(fd.ok());
  REQUIRE(close(*fd) == 0);
  REQUIRE(KeysOf(dir->Held()) == Keys{{0, 20, 20}, {0, 30, 4}, {1, 10, 100}});
}

TEST_CASE_METHOD(DirFixture, "CopyDir: DropAfter", "[launcher][state_store]") {
  dir->DropAfter(10);
  REQUIRE(KeysOf(dir->Held()) == Keys{{0, 10, 10}, {1, 10, 100}});
  dir->DropAfter(-1);
  REQUIRE(dir->Held().empty());
  REQUIRE(dir->bytes() == 0);
  REQUIRE(Files(path).size() == 1);  // the part being written stays
}

TEST_CASE_METHOD(DirFixture, "CopyDir: the trailer is checked", "[launcher][state_store]") {
  const std::string file = path + "/" + CopyFileName(1, 10);
  StatusOr<CopyFileInfo> info = StatCopyFile(file);
  REQUIRE(info.ok());
  REQUIRE(info->bytes == 100);
  REQUIRE(info->crc32c == Crc32c(std::string(100, 'b').data(), 100));
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(42);
    f.put('X');  // one flipped byte
  }
  StatusOr<std::string> read = ReadCopyFile(file);
  REQUIRE(read.status().code() == StatusCode::kDataLoss);
  REQUIRE(read.status().message().find(file) != std::string::npos);
  const std::string bare = path + "/" + CopyFileName(2, 1);
  std::ofstream(bare, std::ios::binary) << "no trailer here";
  REQUIRE(StatCopyFile(bare).status().code() == StatusCode::kDataLoss);
  REQUIRE(ReadCopyFile(bare).status().code() == StatusCode::kDataLoss);
  REQUIRE(StatCopyFile(path + "/absent").status().code() == StatusCode::kNotFound);
}

// A raw connection to the server on 127.0.0.1.
int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

template <typename T>
void PutLe(std::string* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A PUT request's header and token, by hand.
std::string PutHeader(int32_t rank, int64_t step, int64_t bytes, uint32_t crc,
                      const std::string& token) {
  std::string out = "DSCOPY01";
  PutLe<uint32_t>(&out, 1);
  PutLe<uint32_t>(&out, static_cast<uint32_t>(rank));
  PutLe<uint64_t>(&out, static_cast<uint64_t>(step));
  PutLe<uint64_t>(&out, static_cast<uint64_t>(bytes));
  PutLe<uint32_t>(&out, crc);
  PutLe<uint32_t>(&out, static_cast<uint32_t>(token.size()));
  return out + token;
}

void SendRaw(int fd, const std::string& data) {
  REQUIRE(send(fd, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size()));
}

// The status code of the server's reply on a raw connection.
uint32_t ReplyCode(int fd) {
  char header[8];
  REQUIRE(recv(fd, header, sizeof(header), MSG_WAITALL) == 8);
  uint32_t code = 0;
  for (int i = 0; i < 4; ++i)
    code |= static_cast<uint32_t>(static_cast<unsigned char>(header[i])) << (8 * i);
  return code;
}

template <typename Pred>
bool WaitFor(Pred pred) {
  for (int i = 0; i < 500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// A CopyServer on 127.0.0.1 over its own CopyDir, and a client with its own CopyDir.
struct ServerFixture {
  ServerFixture() {
    server_dir = std::move(CopyDir::Create()).value();
    client_dir = std::move(CopyDir::Create()).value();
    StatusOr<std::unique_ptr<CopyServer>> started =
        CopyServer::Start("127.0.0.1", 0, kToken, server_dir->path());
    REQUIRE(started.ok());
    server = std::move(started).value();
    REQUIRE(server->port() > 0);
    address = "127.0.0.1:" + std::to_string(server->port());
    sdir = server_dir->path();
  }
  // Writes a copy into the client's directory; its path.
  std::string ClientCopy(int rank, int64_t step, const std::string& bytes, uint32_t crc_xor = 0) {
    WriteCopy(client_dir->path(), rank, step, bytes, crc_xor);
    return client_dir->path() + "/" + CopyFileName(rank, step);
  }

  std::unique_ptr<CopyDir> server_dir;
  std::unique_ptr<CopyDir> client_dir;
  std::unique_ptr<CopyServer> server;  // destroyed before the directories
  std::string address;
  std::string sdir;
};

TEST_CASE_METHOD(ServerFixture, "CopyClient: PutFile then Get returns the same bytes",
                 "[launcher][state_store]") {
  CopyClient client(address, kToken);
  const std::string bytes = RandomBytes(size_t{20} << 20, 7);
  const Status put = client.PutFile(3, 100, ClientCopy(3, 100, bytes), seconds(30));
  INFO(put.ToString());
  REQUIRE(put.ok());
  REQUIRE(KeysOf(server_dir->Held()) == Keys{{3, 100, int64_t{20} << 20}});
  REQUIRE(Files(sdir).size() == 1);
  StatusOr<std::string> got = client.Get(3, 100, seconds(30));
  INFO(got.status().ToString());
  REQUIRE(got.ok());
  REQUIRE(got->size() == bytes.size());
  REQUIRE(*got == bytes);
  REQUIRE(*ReadCopyFile(sdir + "/" + CopyFileName(3, 100)) == bytes);

  REQUIRE(client.PutFile(0, 1, ClientCopy(0, 1, ""), seconds(10)).ok());  // an empty copy
  got = client.Get(0, 1, seconds(10));
  REQUIRE(got.ok());
  REQUIRE(got->empty());
}

TEST_CASE_METHOD(ServerFixture, "CopyClient: Get of a copy not held is NOT_FOUND",
                 "[launcher][state_store]") {
  CopyClient client(address, kToken);
  StatusOr<std::string> got = client.Get(3, 7, seconds(10));
  REQUIRE(got.status().code() == StatusCode::kNotFound);
  const std::string& message = got.status().message();
  REQUIRE(message.find("rank 3") != std::string::npos);
  REQUIRE(message.find("step 7") != std::string::npos);
  REQUIRE(message.find(address) != std::string::npos);
}

TEST_CASE_METHOD(ServerFixture, "CopyClient: Probe measures the link, stores nothing",
                 "[launcher][state_store]") {
  CopyClient client(address, kToken);
  ProbeBudget budget;
  budget.bulk_time = std::chrono::milliseconds(100);
  budget.max_bytes = int64_t{64} << 20;
  StatusOr<LinkSample> s = client.Probe(budget, seconds(30));
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  INFO(DescribeLinkSample(*s));
  // Loopback: a round trip well under a second, at least 1 MiB sunk at a positive rate, the
  // rate being what the timed bytes say.
  REQUIRE(s->latency_us > 0);
  REQUIRE(s->latency_us < 1e6);
  REQUIRE(s->bytes >= (int64_t{1} << 20));
  REQUIRE(s->bytes <= budget.max_bytes);
  REQUIRE(s->gbps == Approx(s->bytes / s->seconds / 1e9));
  REQUIRE(Files(sdir).empty());
  REQUIRE(server_dir->Held().empty());
  // The server is still there for the next request.
  REQUIRE(client.Probe(budget, seconds(30)).ok());
  CopyClient intruder(address, "wrong-token");
  StatusOr<LinkSample> refused = intruder.Probe(budget, seconds(10));
  REQUIRE(refused.status().code() == StatusCode::kUnauthenticated);
  REQUIRE(refused.status().message().find("PROBE") != std::string::npos);
}

TEST_CASE_METHOD(ServerFixture, "CopyServer: a wrong token is UNAUTHENTICATED, nothing stored",
                 "[launcher][state_store]") {
  CopyClient intruder(address, "wrong-token");
  const Status put =
      intruder.PutFile(1, 5, ClientCopy(1, 5, RandomBytes(size_t{8} << 20, 1)), seconds(30));
  INFO(put.ToString());
  REQUIRE(put.code() == StatusCode::kUnauthenticated);
  REQUIRE(put.message().find(address) != std::string::npos);
  REQUIRE(Files(sdir).empty());
  REQUIRE(intruder.Get(1, 5, seconds(10)).status().code() == StatusCode::kUnauthenticated);
}

TEST_CASE_METHOD(ServerFixture, "CopyServer: a PUT with a wrong CRC is refused, nothing stored",
                 "[launcher][state_store]") {
  CopyClient client(address, kToken);
  const std::string file = ClientCopy(2, 9, RandomBytes(size_t{1} << 20, 2), /*crc_xor=*/1);
  const Status put = client.PutFile(2, 9, file, seconds(30));
  REQUIRE(put.code() == StatusCode::kDataLoss);
  REQUIRE(Files(sdir).empty());
}

TEST_CASE_METHOD(ServerFixture, "CopyServer: a PUT whose sender stops early leaves nothing",
                 "[launcher][state_store]") {
  int fd = RawConnect(server->port());
  SendRaw(fd, PutHeader(4, 50, 1 << 20, 0, kToken) + std::string(1000, 'x'));
  REQUIRE(WaitFor([&] { return Files(sdir).size() == 1; }));  // the part being written
  REQUIRE(Files(sdir)[0].find(".part.") != std::string::npos);
  SECTION("half-closed: the server replies UNAVAILABLE") {
    REQUIRE(shutdown(fd, SHUT_WR) == 0);
    REQUIRE(ReplyCode(fd) == static_cast<uint32_t>(StatusCode::kUnavailable));
    REQUIRE(Files(sdir).empty());
  }
  SECTION("closed") {
    close(fd);
    fd = -1;
    REQUIRE(WaitFor([&] { return Files(sdir).empty(); }));
  }
  if (fd >= 0) close(fd);
  REQUIRE(server_dir->Held().empty());
}

TEST_CASE_METHOD(ServerFixture, "CopyServer: malformed requests, Shutdown",
                 "[launcher][state_store]") {
  const int fd = RawConnect(server->port());
  SendRaw(fd, std::string(40, 'z'));  // no magic
  REQUIRE(ReplyCode(fd) == static_cast<uint32_t>(StatusCode::kInvalidArgument));
  close(fd);

  const int port = server->port();
  server->Shutdown();
  server->Shutdown();  // idempotent
  CopyClient gone("127.0.0.1:" + std::to_string(port), kToken);
  const Status status = gone.Get(0, 0, seconds(5)).status();
  REQUIRE(status.code() == StatusCode::kUnavailable);
  REQUIRE(status.message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
}

TEST_CASE("CopyServer: bad arguments", "[launcher][state_store]") {
  REQUIRE(CopyServer::Start("127.0.0.1", 0, kToken, "/nonexistent/dir").status().code() ==
          StatusCode::kFailedPrecondition);
  REQUIRE(CopyServer::Start("127.0.0.1", 70000, kToken, "/tmp").status().code() ==
          StatusCode::kInvalidArgument);
  CopyClient malformed("no-port", kToken);
  REQUIRE(malformed.Get(0, 0, seconds(1)).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds::launcher
