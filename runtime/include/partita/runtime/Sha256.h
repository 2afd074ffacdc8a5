//===- Sha256.h - SHA-256 digests of artifact files -------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// SHA-256 through OpenSSL's libcrypto, which uses the CPU's SHA extensions
// where it has them (several times faster than a portable implementation).
// The one wrapper the artifact writer, the loader and the compiler use. The
// artifact records the digest of every file so the loader can refuse a
// truncated or modified one before it interprets any byte of it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_SHA256_H
#define PARTITA_RUNTIME_SHA256_H

#include "partita/runtime/Status.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

// OpenSSL's context type, so this header does not include OpenSSL's.
struct evp_md_ctx_st;

namespace partita::runtime {

/// An incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  ~Sha256();
  Sha256(const Sha256 &) = delete;
  Sha256 &operator=(const Sha256 &) = delete;

  void update(const void *data, size_t bytes);
  Digest finish();

  /// Lower-case hexadecimal, as the manifest spells digests.
  static std::string hex(const Digest &digest);
  /// The digest of `bytes` bytes at `data`.
  static Digest digest(const void *data, size_t bytes);
  /// The digest of `bytes` bytes at `data`, in hexadecimal.
  static std::string hexDigest(const void *data, size_t bytes);

private:
  evp_md_ctx_st *context;
};

/// The hexadecimal digest of the file at `path`, read in chunks.
Status sha256File(const std::string &path, std::string &hexDigest);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_SHA256_H
