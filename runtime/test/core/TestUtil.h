//===- TestUtil.h - helpers of the runtime core tests -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TEST_CORE_TESTUTIL_H
#define PARTITA_RUNTIME_TEST_CORE_TESTUTIL_H

#include "partita/runtime/Status.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace partita::runtime::test {

/// A fresh directory under the test temporary directory, removed with its
/// contents when the object goes away.
class TemporaryDirectory {
public:
  TemporaryDirectory() {
    std::string pattern =
        (std::filesystem::path(::testing::TempDir()) / "partita-XXXXXX")
            .string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()))
      root = buffer.data();
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    if (!root.empty())
      std::filesystem::remove_all(root, ignored);
  }
  const std::string &path() const { return root; }
  std::string path(const std::string &name) const { return root + "/" + name; }
  /// The names of the entries of the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto &entry : std::filesystem::directory_iterator(root))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

private:
  std::string root;
};

inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

} // namespace partita::runtime::test

/// EXPECT that `status` failed with a message containing `text`.
#define EXPECT_ERROR_CONTAINS(status, text)                                    \
  do {                                                                         \
    ::partita::runtime::Status _s = (status);                                  \
    EXPECT_FALSE(_s.isOk()) << "expected an error containing: " << (text);     \
    EXPECT_NE(_s.message().find(text), std::string::npos)                      \
        << "message: " << _s.message();                                        \
  } while (false)

#define ASSERT_OK(status)                                                      \
  do {                                                                         \
    ::partita::runtime::Status _s = (status);                                  \
    ASSERT_TRUE(_s.isOk()) << _s.message();                                    \
  } while (false)

#define EXPECT_OK(status)                                                      \
  do {                                                                         \
    ::partita::runtime::Status _s = (status);                                  \
    EXPECT_TRUE(_s.isOk()) << _s.message();                                    \
  } while (false)

#endif // PARTITA_RUNTIME_TEST_CORE_TESTUTIL_H
