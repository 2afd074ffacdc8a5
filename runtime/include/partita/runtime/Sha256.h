//===- Sha256.h - SHA-256 digests of artifact files -------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// FIPS 180-4 SHA-256, written here so the runtime needs no crypto library.
// The artifact records the digest of every file so the loader can refuse a
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

namespace partita::runtime {

/// An incremental SHA-256: update() any number of times, then finish() once.
class Sha256 {
public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void update(const void *data, size_t bytes);
  Digest finish();

  /// Lower-case hexadecimal, as the manifest spells digests.
  static std::string hex(const Digest &digest);
  /// The digest of `bytes` bytes at `data`, in hexadecimal.
  static std::string hexDigest(const void *data, size_t bytes);

private:
  void compress(const uint8_t *block);

  std::array<uint32_t, 8> state;
  std::array<uint8_t, 64> pending;
  size_t pendingBytes = 0;
  uint64_t totalBytes = 0;
};

/// The hexadecimal digest of the file at `path`, read in chunks.
Status sha256File(const std::string &path, std::string &hexDigest);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_SHA256_H
