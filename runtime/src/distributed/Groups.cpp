//===- Groups.cpp - the groups of a world's programs ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/distributed/Groups.h"

#include "partita/proto/program.pb.h"

#include <set>

using namespace partita::runtime;

std::vector<Group> partita::runtime::collectGroups(
    const std::vector<const program::Program *> &programs) {
  std::set<Group> groups;
  for (const program::Program *program : programs)
    for (const program::Instruction &instruction : program->instructions())
      if (instruction.has_collective())
        groups.insert(Group(instruction.collective().group().begin(),
                            instruction.collective().group().end()));
  return {groups.begin(), groups.end()};
}
