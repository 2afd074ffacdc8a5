//===- Sha256.cpp - SHA-256 over OpenSSL's libcrypto ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Sha256.h"

#include "partita/runtime/FileUtil.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

using namespace partita::runtime;

namespace {

/// libcrypto's SHA-256 fails only when it cannot allocate its context,
/// which no caller could recover from more usefully than by stopping here.
[[noreturn]] void fatal(const char *what) {
  std::fprintf(stderr, "partita: OpenSSL SHA-256 %s failed (out of memory)\n",
               what);
  std::abort();
}

} // namespace

Sha256::Sha256() : context(EVP_MD_CTX_new()) {
  if (!context || EVP_DigestInit_ex(context, EVP_sha256(), nullptr) != 1)
    fatal("init");
}

Sha256::~Sha256() { EVP_MD_CTX_free(context); }

void Sha256::update(const void *data, size_t bytes) {
  if (bytes != 0 && EVP_DigestUpdate(context, data, bytes) != 1)
    fatal("update");
}

Sha256::Digest Sha256::finish() {
  Digest digest;
  unsigned length = 0;
  if (EVP_DigestFinal_ex(context, digest.data(), &length) != 1 ||
      length != digest.size())
    fatal("final");
  return digest;
}

std::string Sha256::hex(const Digest &digest) {
  static const char kDigits[] = "0123456789abcdef";
  std::string text;
  text.reserve(64);
  for (uint8_t byte : digest) {
    text.push_back(kDigits[byte >> 4]);
    text.push_back(kDigits[byte & 15]);
  }
  return text;
}

Sha256::Digest Sha256::digest(const void *data, size_t bytes) {
  Digest digest;
  unsigned length = 0;
  if (EVP_Digest(data, bytes, digest.data(), &length, EVP_sha256(), nullptr) !=
          1 ||
      length != digest.size())
    fatal("digest");
  return digest;
}

std::string Sha256::hexDigest(const void *data, size_t bytes) {
  return hex(digest(data, bytes));
}

Status partita::runtime::sha256File(const std::string &path,
                                    std::string &hexDigest) {
  int fd = -1;
  struct stat info;
  PARTITA_RETURN_IF_ERROR(openRegularFile(path, fd, info));
  Sha256 sha;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      int error = errno;
      ::close(fd);
      return Status::error(path + ": " + std::strerror(error));
    }
    if (got == 0)
      break;
    sha.update(chunk.data(), size_t(got));
  }
  ::close(fd);
  hexDigest = Sha256::hex(sha.finish());
  return Status::ok();
}
