//===- LauncherTest.cpp - one process per rank ----------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/distributed/Launcher.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace partita::runtime;
using namespace std::chrono_literals;

namespace {

std::string temporaryDirectory() {
  char pattern[] = "/tmp/partita-launcher-XXXXXX";
  const char *made = ::mkdtemp(pattern);
  return made ? made : "";
}

TEST(LauncherTest, EveryRankGetsItsEnvironment) {
  std::string dir = temporaryDirectory();
  ASSERT_FALSE(dir.empty());
  LaunchOptions options;
  options.executable = "/bin/sh";
  options.arguments = {
      "-c", "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $MASTER_PORT\" "
            "> " +
                dir + "/rank$RANK"};
  options.ranks = 3;
  Status launched = launchRanks(options);
  ASSERT_TRUE(launched.isOk()) << launched.message();
  std::string port;
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream file(dir + "/rank" + std::to_string(rank));
    std::string r, size, local, address, portHere;
    file >> r >> size >> local >> address >> portHere;
    EXPECT_EQ(r, std::to_string(rank));
    EXPECT_EQ(size, "3");
    EXPECT_EQ(local, std::to_string(rank));
    EXPECT_EQ(address, "127.0.0.1");
    EXPECT_FALSE(portHere.empty());
    if (rank == 0)
      port = portHere;
    EXPECT_EQ(portHere, port);
    std::remove((dir + "/rank" + std::to_string(rank)).c_str());
  }
  ::rmdir(dir.c_str());
}

TEST(LauncherTest, AFailingRankStopsTheOthers) {
  LaunchOptions options;
  options.executable = "/bin/sh";
  // Rank 1 fails at once; rank 0 would run for a minute, and ignores
  // SIGTERM so that the launcher has to SIGKILL it.
  options.arguments = {
      "-c", "if [ \"$RANK\" = 1 ]; then echo 'partita-run: error: rank 1: "
            "boom' >&2; exit 3; fi; trap '' TERM; sleep 60"};
  options.ranks = 2;
  options.killGrace = 300ms;
  auto start = std::chrono::steady_clock::now();
  Status launched = launchRanks(options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  ASSERT_FALSE(launched.isOk());
  EXPECT_NE(launched.message().find("rank 1 failed (exit status 3): rank 1: "
                                    "boom; the other ranks were stopped"),
            std::string::npos)
      << launched.message();
}

TEST(LauncherTest, AKilledRankIsReported) {
  LaunchOptions options;
  options.executable = "/bin/sh";
  options.arguments = {"-c", "if [ \"$RANK\" = 0 ]; then kill -KILL $$; fi; "
                             "sleep 60"};
  options.ranks = 2;
  options.killGrace = 1s;
  Status launched = launchRanks(options);
  ASSERT_FALSE(launched.isOk());
  EXPECT_NE(launched.message().find("rank 0 failed (signal Killed)"),
            std::string::npos)
      << launched.message();
}

TEST(LauncherTest, ReadsTheTorchrunEnvironment) {
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "0", 1);
  ::setenv("MASTER_ADDR", "node0", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  RankEnvironment environment;
  bool found = false;
  Status read = readRankEnvironment(environment, found);
  ASSERT_TRUE(read.isOk()) << read.message();
  EXPECT_TRUE(found);
  EXPECT_EQ(environment.rank, 2);
  EXPECT_EQ(environment.worldSize, 4);
  EXPECT_EQ(environment.localRank, 0);
  EXPECT_EQ(environment.masterAddress, "node0");
  EXPECT_EQ(environment.masterPort, 29500);
  EXPECT_EQ(environment.source, "torchrun");

  ::unsetenv("MASTER_PORT");
  read = readRankEnvironment(environment, found);
  ASSERT_FALSE(read.isOk());
  EXPECT_NE(read.message().find("MASTER_ADDR and MASTER_PORT"),
            std::string::npos)
      << read.message();
  for (const char *name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"})
    ::unsetenv(name);
}

TEST(LauncherTest, ReadsTheSlurmEnvironment) {
  ::setenv("SLURM_PROCID", "1", 1);
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
  ::setenv("MASTER_ADDR", "10.0.0.1", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  RankEnvironment environment;
  bool found = false;
  ASSERT_TRUE(readRankEnvironment(environment, found).isOk());
  EXPECT_TRUE(found);
  EXPECT_EQ(environment.rank, 1);
  EXPECT_EQ(environment.localRank, 1);
  EXPECT_EQ(environment.source, "slurm");
  for (const char *name : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                           "MASTER_ADDR", "MASTER_PORT"})
    ::unsetenv(name);
  ASSERT_TRUE(readRankEnvironment(environment, found).isOk());
  EXPECT_FALSE(found);
}

} // namespace
