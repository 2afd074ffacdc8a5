//===- OptionsTest.cpp - the declared compiler options --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Every interface sets an option through its declaration
// (partita/Options/CompilerOptions.def): these check that the declaration
// parses, refuses and records each kind of value as the command line
// documents it.
//
//===----------------------------------------------------------------------===//

#include "partita/Options/Options.h"

#include "gtest/gtest.h"

#include <set>

using namespace partita;

namespace {

/// The message setOption gives for `name`=`text`; empty when accepted.
std::string refusal(CompilerOptions &options, const char *name,
                    const char *text) {
  std::string error;
  if (setOption(options, name, text, error))
    return "";
  return error.empty() ? "(no message)" : error;
}

TEST(OptionsTest, TableMatchesTheFields) {
  // Every declaration has a name, help and a unique flag, and prints its
  // default back as setOption reads it.
  std::set<std::string> names;
  const CompilerOptions defaults;
  for (const OptionInfo &info : compilerOptionTable()) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_NE(std::string(info.help), "") << info.name;
    EXPECT_TRUE(info.isDefault(defaults)) << info.name;
    CompilerOptions copy;
    std::string error;
    EXPECT_TRUE(info.set(copy, info.get(defaults), error))
        << info.name << ": " << error;
    EXPECT_TRUE(info.isDefault(copy)) << info.name;
  }
  EXPECT_EQ(findCompilerOption("sp_mode"), findCompilerOption("sp-mode"));
  EXPECT_EQ(findCompilerOption("bogus"), nullptr);
}

TEST(OptionsTest, SetsEachKind) {
  CompilerOptions options;
  EXPECT_EQ(refusal(options, "target", "cuda"), "");
  EXPECT_EQ(options.target, Target::CUDA);
  EXPECT_EQ(refusal(options, "microbatches", "4"), "");
  EXPECT_EQ(options.microbatches, 4);
  EXPECT_EQ(refusal(options, "overlap", "false"), "");
  EXPECT_FALSE(options.overlap);
  EXPECT_EQ(refusal(options, "bind", "batch=2, seq=16"), "");
  EXPECT_EQ(options.bind, (Bindings{{"batch", 2}, {"seq", 16}}));
  EXPECT_EQ(refusal(options, "cuda-arch", "sm_90a, sm_100"), "");
  EXPECT_EQ(options.cudaArchs, (std::vector<std::string>{"sm_90a", "sm_100"}));
  EXPECT_EQ(refusal(options, "device-memory", "80GiB"), "");
  EXPECT_EQ(options.deviceMemoryBytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(refusal(options, "cluster", "h100-80g:2x8"), "");
  EXPECT_EQ(options.clusterJson, "{\"preset\":\"h100-80g:2x8\"}");
  EXPECT_EQ(options.clusterSource, "h100-80g:2x8");
  EXPECT_EQ(refusal(options, "mesh", "model=4:tp,dp=2"), "");
  ASSERT_EQ(options.mesh.axes.size(), 2u);
  EXPECT_EQ(options.mesh.axes[0].role, "tp");
  EXPECT_EQ(options.mesh.axes[1].role, "dp");
  EXPECT_EQ(options.mesh.str(), "model=4:tp,dp=2");
  EXPECT_EQ(options.mesh.deviceCount(), 8);
  EXPECT_FALSE(options.autoMesh);
  EXPECT_EQ(refusal(options, "mesh", "auto"), "");
  EXPECT_TRUE(options.autoMesh);
  EXPECT_TRUE(options.mesh.empty());
}

TEST(OptionsTest, RefusesNamingTheFlag) {
  CompilerOptions options;
  EXPECT_EQ(refusal(options, "strategy", "alpa"),
            "--strategy expects megatron or none, got 'alpa'");
  EXPECT_EQ(refusal(options, "microbatches", "2.5"),
            "--microbatches expects an integer, got '2.5'");
  EXPECT_EQ(refusal(options, "microbatches", "0"),
            "--microbatches must be positive, got 0");
  EXPECT_EQ(refusal(options, "devices", "-2"),
            "--devices must be 0 or more, got -2");
  EXPECT_EQ(refusal(options, "virtual-stages", "1000000"),
            "--virtual-stages must be at most 1024, got 1000000");
  EXPECT_EQ(refusal(options, "microbatches", "99999999999999999999"),
            "--microbatches expects an integer, got '99999999999999999999'");
  EXPECT_EQ(refusal(options, "overlap", "maybe"),
            "--overlap expects true or false, got 'maybe'");
  EXPECT_EQ(refusal(options, "bind", "batch=two"),
            "--bind expects name=value with a non-negative integer value, got "
            "'batch=two'");
  EXPECT_EQ(refusal(options, "bind", "a=1,a=2"), "--bind gives 'a' twice");
  EXPECT_EQ(refusal(options, "device-memory", "12zb"),
            "--device-memory expects a positive byte count such as 80e9, "
            "80GB or 80GiB, got '12zb'");
  EXPECT_EQ(refusal(options, "mesh", "tp=0"),
            "--mesh tp=0: axis 'tp' has size 0; sizes are at least 1");
  EXPECT_EQ(refusal(options, "cluster", "/nonexistent/cluster.json"),
            "cannot read --cluster /nonexistent/cluster.json: No such file "
            "or directory");
  EXPECT_EQ(refusal(options, "mesh", "tp=4611686018427387904,dp=4"),
            "--mesh tp=4611686018427387904,dp=4: the mesh has more than "
            "1048576 devices");
  EXPECT_EQ(refusal(options, "bogus", "1"), "unknown option 'bogus'");
  // A refused value leaves the field as it was.
  EXPECT_EQ(options.microbatches, 1);
  EXPECT_TRUE(options.bind.empty());
}

TEST(OptionsTest, ChecksTypedFields) {
  // The embedding API fills fields without a parser; checkOptions applies
  // the same declarations.
  std::string error;
  CompilerOptions options;
  options.mesh = {{"model", 2, "tp"}, {"dp", 2}};
  EXPECT_TRUE(checkOptions(options, error)) << error;
  EXPECT_EQ(options.mesh.axes[1].role, "dp");
  options.microbatches = 0;
  EXPECT_FALSE(checkOptions(options, error));
  EXPECT_EQ(error, "--microbatches must be positive, got 0");
  options.microbatches = 1;
  options.bind["batch"] = -1;
  EXPECT_FALSE(checkOptions(options, error));
  EXPECT_EQ(error,
            "--bind expects name=value with a non-negative integer value, "
            "got 'batch=-1'");
  options.bind.clear();
  options.mesh = {{"tp", 2}, {"tp", 2}};
  EXPECT_FALSE(checkOptions(options, error));
  EXPECT_EQ(error, "--mesh tp=2,tp=2: axis 'tp' is given twice");
}

TEST(OptionsTest, RecordsForTheManifest) {
  CompilerOptions options;
  EXPECT_EQ(recordedOptions(options),
            (std::map<std::string, std::string>{{"target", "host"}}));
  std::string error;
  ASSERT_TRUE(setOption(options, "mesh", "tp=2", error));
  ASSERT_TRUE(setOption(options, "overlap", "false", error));
  ASSERT_TRUE(setOption(options, "raise", "false", error));
  ASSERT_TRUE(setOption(options, "bind", "batch=2", error));
  EXPECT_EQ(recordedOptions(options),
            (std::map<std::string, std::string>{{"target", "host"},
                                                {"mesh", "tp=2"},
                                                {"strategy", "megatron"},
                                                {"no-overlap", "true"},
                                                {"no-raise", "true"},
                                                {"bind", "batch=2"}}));
}

} // namespace

#include "partita/runtime/JsonDepth.h"

namespace {

TEST(JsonDepthTest, CountsArraysAndObjectsOutsideStrings) {
  using partita::runtime::jsonNestingDepth;
  EXPECT_EQ(jsonNestingDepth("1"), 0u);
  EXPECT_EQ(jsonNestingDepth("{\"a\": [1, {\"b\": []}]}"), 4u);
  // Brackets in strings, escaped quotes among them, do not nest.
  EXPECT_EQ(jsonNestingDepth("{\"a\": \"[[[\\\"[[\"}"), 1u);
  // Past the limit the scan stops: limit + 1.
  std::string deep(100000, '[');
  EXPECT_EQ(jsonNestingDepth(deep, 256), 257u);
  EXPECT_EQ(partita::runtime::checkJsonDepth(deep, "x"),
            "x: JSON nested deeper than 256 levels");
  EXPECT_EQ(partita::runtime::checkJsonDepth(std::string(256, '['), "x"), "");
}

} // namespace
