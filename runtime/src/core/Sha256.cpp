//===- Sha256.cpp - SHA-256 (FIPS 180-4) ----------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Sha256.h"

#include "FileUtil.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

using namespace partita::runtime;

namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, unsigned n) {
  return (x >> n) | (x << (32 - n));
}

} // namespace

Sha256::Sha256()
    : state{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
            0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19},
      pending{} {}

void Sha256::compress(const uint8_t *block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t(block[4 * i]) << 24) | (uint32_t(block[4 * i + 1]) << 16) |
           (uint32_t(block[4 * i + 2]) << 8) | uint32_t(block[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + s1 + ch + kRoundConstants[i] + w[i];
    uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void Sha256::update(const void *data, size_t bytes) {
  // memcpy must not see the null pointer that may come with zero bytes.
  if (bytes == 0)
    return;
  const uint8_t *in = static_cast<const uint8_t *>(data);
  totalBytes += bytes;
  if (pendingBytes > 0) {
    size_t take = std::min(bytes, pending.size() - pendingBytes);
    std::memcpy(pending.data() + pendingBytes, in, take);
    pendingBytes += take;
    in += take;
    bytes -= take;
    if (pendingBytes < pending.size())
      return;
    compress(pending.data());
    pendingBytes = 0;
  }
  for (; bytes >= 64; in += 64, bytes -= 64)
    compress(in);
  std::memcpy(pending.data(), in, bytes);
  pendingBytes = bytes;
}

Sha256::Digest Sha256::finish() {
  uint64_t bitLength = totalBytes * 8;
  uint8_t padding[72] = {0x80};
  // Pad to 56 mod 64, then append the length big-endian.
  size_t padBytes = (pendingBytes < 56 ? 56 : 120) - pendingBytes;
  for (int i = 0; i < 8; ++i)
    padding[padBytes + i] = uint8_t(bitLength >> (56 - 8 * i));
  update(padding, padBytes + 8);
  Digest digest;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j)
      digest[4 * i + j] = uint8_t(state[i] >> (24 - 8 * j));
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

std::string Sha256::hexDigest(const void *data, size_t bytes) {
  Sha256 sha;
  sha.update(data, bytes);
  return hex(sha.finish());
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
