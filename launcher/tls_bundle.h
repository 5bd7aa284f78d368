// Mutual TLS material for a job's clients (agents, workers, ds-launch status / stop): the CA
// that signed the coordinator's and the clients' certificates, and the client certificate and
// key. ds-launch reads the PEM files once and hands them to every agent on its stdin after the
// job token (ssh and srun carry stdin over their own channels), so a remote node needs no copy
// on disk beforehand and nothing appears on a command line; the agent keeps them in a private
// directory (0700, files 0600) that it removes when it exits, and its workers read them there.
//
//   DS_ASSIGN_OR_RETURN(TlsPems pems, ReadTlsPems(ca, cert, key));
//   write(agent_stdin, token + "\n" + EncodeTlsBundle(pems));
//   ...                                     // in the agent:
//   DS_ASSIGN_OR_RETURN(TlsPems got, ReadTlsBundle(std::cin));
//   DS_ASSIGN_OR_RETURN(TlsPaths files, WritePrivateTls(got));
#pragma once

#include <istream>
#include <string>

#include "runtime/base/status.h"

namespace ds::launcher {

struct TlsPems {
  std::string ca, cert, key;
};

// The three PEM files, each refused by name when unreadable, empty or not PEM.
StatusOr<TlsPems> ReadTlsPems(const std::string& ca_path, const std::string& cert_path,
                              const std::string& key_path);

// "ds-tls <ca bytes> <cert bytes> <key bytes>\n", then the three PEMs as they are.
std::string EncodeTlsBundle(const TlsPems& pems);
// InvalidArgument when the stream does not hold one bundle (a missing or short part).
StatusOr<TlsPems> ReadTlsBundle(std::istream& in);

struct TlsPaths {
  std::string dir, ca, cert, key;
};
// A new directory `parent`/ds-tls-XXXXXX (0700) holding ca.pem, cert.pem and key.pem (0600).
StatusOr<TlsPaths> WritePrivateTls(const TlsPems& pems, const std::string& parent = "/tmp");
// Removes what WritePrivateTls made (best effort).
void RemovePrivateTls(const TlsPaths& paths);

}  // namespace ds::launcher
