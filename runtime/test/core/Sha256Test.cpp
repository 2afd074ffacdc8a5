//===- Sha256Test.cpp - SHA-256 against FIPS 180-4 vectors ----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Sha256.h"

#include "TestUtil.h"

using namespace partita::runtime;

namespace {

std::string digestOf(const std::string &text) {
  return Sha256::hexDigest(text.data(), text.size());
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(digestOf(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(digestOf("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      digestOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      digestOf("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
               "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, MillionAs) {
  EXPECT_EQ(digestOf(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// A 1 MiB buffer (byte i is (7i + 3) mod 256; digest from Python's
// hashlib), one-shot and fed in 4097-byte pieces.
TEST(Sha256, OneMebibyte) {
  std::string bytes(size_t(1) << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = char((i * 7 + 3) % 256);
  const char *expected =
      "172c15dc2e12b50e523d8e657cbe7fbb11c1053252bbf1e1431077d57d8128fd";
  EXPECT_EQ(digestOf(bytes), expected);
  Sha256 sha;
  for (size_t done = 0; done < bytes.size(); done += 4097)
    sha.update(bytes.data() + done,
               std::min<size_t>(4097, bytes.size() - done));
  EXPECT_EQ(Sha256::hex(sha.finish()), expected);
}

// Lengths around the 55/56/64-byte padding boundaries, fed in uneven pieces,
// give the digest of the whole.
TEST(Sha256, IncrementalEqualsOneShot) {
  for (size_t length : {55, 56, 63, 64, 65, 119, 120, 1000}) {
    std::string text;
    for (size_t i = 0; i < length; ++i)
      text.push_back(char('a' + i % 26));
    Sha256 sha;
    for (size_t done = 0, piece = 1; done < length; done += piece, ++piece)
      sha.update(text.data() + done, std::min(piece, length - done));
    EXPECT_EQ(Sha256::hex(sha.finish()), digestOf(text)) << length;
  }
}

TEST(Sha256, File) {
  test::TemporaryDirectory directory;
  test::writeBytes(directory.path("abc"), "abc");
  std::string digest;
  ASSERT_OK(sha256File(directory.path("abc"), digest));
  EXPECT_EQ(digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_ERROR_CONTAINS(sha256File(directory.path("absent"), digest),
                        "No such file");
}

} // namespace
