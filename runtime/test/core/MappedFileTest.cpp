//===- MappedFileTest.cpp - a mapped file that changes under its reader ---===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/FileUtil.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace partita::runtime;

namespace {

// A file truncated after it was mapped: reading past its new end raises
// SIGBUS, which installMappedFileFaultHandler turns into an error naming
// the file and exit status 1 (partita-run's contract, docs/runtime.md).
TEST(MappedFileDeathTest, TruncatedWhileMappedIsAnErrorNamingTheFile) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::string path = ::testing::TempDir() + "/mapped-then-truncated.bin";
  {
    std::ofstream out(path, std::ios::binary);
    std::string bytes(1 << 16, 'x');
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  EXPECT_EXIT(
      {
        installMappedFileFaultHandler("tool");
        MappedFile file;
        if (!file.open(path))
          std::_Exit(3);
        if (::truncate(path.c_str(), 0) != 0)
          std::_Exit(4);
        volatile uint8_t byte = file.data()[1 << 15];
        (void)byte;
        std::_Exit(5);
      },
      ::testing::ExitedWithCode(1),
      "tool: error: .*mapped-then-truncated.bin changed while it was mapped");
  std::remove(path.c_str());
}

} // namespace
