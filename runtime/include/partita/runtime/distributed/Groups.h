//===- Groups.h - the collective groups of a world --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_DISTRIBUTED_GROUPS_H
#define PARTITA_RUNTIME_DISTRIBUTED_GROUPS_H

#include "partita/runtime/Communicator.h"

#include <vector>

namespace partita::program {
class Program;
} // namespace partita::program

namespace partita::runtime {

/// Every distinct group of the programs' collectives, sorted: the list each
/// rank passes to NcclCommunicator::create (communicator splits are
/// collective over the whole world, so every rank needs all groups, not
/// only its own).
std::vector<Group>
collectGroups(const std::vector<const program::Program *> &programs);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_DISTRIBUTED_GROUPS_H
