// The TLS bundle an agent reads after the token: a round trip, refusals of short or foreign
// input, and the private files' modes.
#include "launcher/tls_bundle.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

namespace ds::launcher {
namespace {

const TlsPems kPems{"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n",
                    "-----BEGIN CERTIFICATE-----\nME\n-----END CERTIFICATE-----\n",
                    "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n"};

std::string Tmp() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

int Mode(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

TEST_CASE("TLS bundle: the PEMs cross stdin after the token and land in private files",
          "[launcher][tls]") {
  std::istringstream in("token\n" + EncodeTlsBundle(kPems) + "more");
  std::string token;
  REQUIRE(std::getline(in, token));
  auto got = ReadTlsBundle(in);
  REQUIRE(got.ok());
  CHECK(got->ca == kPems.ca);
  CHECK(got->cert == kPems.cert);
  CHECK(got->key == kPems.key);
  std::string rest;
  std::getline(in, rest);
  CHECK(rest == "more");  // the bundle reads exactly its bytes

  auto files = WritePrivateTls(*got, Tmp());
  REQUIRE(files.ok());
  CHECK(Mode(files->dir) == 0700);
  for (const std::string& f : {files->ca, files->cert, files->key}) CHECK(Mode(f) == 0600);
  std::ifstream key(files->key);
  std::stringstream text;
  text << key.rdbuf();
  CHECK(text.str() == kPems.key);
  RemovePrivateTls(*files);
  struct stat st {};
  CHECK(stat(files->dir.c_str(), &st) != 0);
}

TEST_CASE("TLS bundle: short or foreign input and non-PEM files are refused by name",
          "[launcher][tls]") {
  const std::string whole = EncodeTlsBundle(kPems);
  std::istringstream cut(whole.substr(0, whole.size() - 5));
  auto short_read = ReadTlsBundle(cut);
  REQUIRE_FALSE(short_read.ok());
  CHECK(short_read.status().message().find("key is cut short") != std::string::npos);
  std::istringstream foreign("hello 1 2 3\nabcdef");
  CHECK_FALSE(ReadTlsBundle(foreign).ok());
  std::istringstream empty("");
  CHECK(ReadTlsBundle(empty).status().message().find("nothing after the token") !=
        std::string::npos);

  const std::string not_pem = Tmp() + "/not.pem";
  std::ofstream(not_pem) << "just text\n";
  auto refused = ReadTlsPems(not_pem, not_pem, not_pem);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("TLS CA " + not_pem + " holds no PEM block") !=
        std::string::npos);
  CHECK(
      ReadTlsPems(Tmp() + "/absent.pem", not_pem, not_pem).status().message().find("absent.pem") !=
      std::string::npos);
}

}  // namespace
}  // namespace ds::launcher
