//===- VocabularyTest.cpp - the host runs every op of the vocabulary ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "partita/runtime/OpVocabulary.h"

namespace partita::runtime::test {
namespace {

// Every op of OpVocabulary.def has a host kernel: a kernel without operands
// fails on its operand count, never as an unknown op.
TEST(VocabularyTest, EveryOpHasAHostKernel) {
  for (const OpInfo &op : kOps) {
    KernelBuilder k{std::string(op.name)};
    Status s = k.run(testPool());
    ASSERT_FALSE(s.isOk()) << op.name;
    EXPECT_EQ(s.message().find("unknown kernel op"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("operands"), std::string::npos) << s.message();
  }
}

} // namespace
} // namespace partita::runtime::test
