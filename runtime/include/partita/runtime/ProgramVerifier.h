//===- ProgramVerifier.h - load-time checks of exec programs ----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What the loader proves about an artifact's programs before any of them
// runs, so that a tampered or corrupted program is refused instead of
// running to a wrong answer or waiting for a peer that never comes:
//
// - verifyProgram, each rank alone: every buffer well formed (dtype, shape,
//   arena bounds and alignment, alias targets, constant sizes, weights
//   present with their dtype and shape), every instruction well formed
//   (known op, operand and result counts, attributes of the right type and
//   in range, CUDA steps naming the kernel's own buffers), and the program's
//   data flow: every buffer is written before it is read, no instruction
//   reads bytes that another buffer sharing them (the buffer plan) has
//   overwritten since, no result shares bytes with an operand of its
//   instruction, nothing touches a buffer an asynchronous transfer is still
//   reading or writing before its Wait, and every output is written.
// - verifyCommunication, all ranks together: the sends from rank a to rank
//   b match b's receives from a one for one, in order, by tag, dtype and
//   shape; the members of every group make the same collectives over it in
//   the same order, with equal kinds, parameters, dtypes and shapes; and
//   the ranks' communication, issued in program order, cannot deadlock.
//
// Every check is linear in the size of the programs (up to logarithmic
// factors, and the number of transfers in flight at once). Messages name
// the rank, the instruction (index, op and ONNX location) and the buffer.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_PROGRAMVERIFIER_H
#define PARTITA_RUNTIME_PROGRAMVERIFIER_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <vector>

namespace partita::runtime {

class WeightStore;

/// Checks one rank's program alone (see above). With `weights`, each WEIGHT
/// buffer must name a tensor of the store with the buffer's dtype and
/// shape. Messages start with `rank <N>`.
Status verifyProgram(const program::Program &program,
                     const WeightStore *weights = nullptr);

/// Checks that the programs of one world agree on their communication:
/// `programs[r]` is rank r's program, each structurally sound (verifyProgram
/// would accept it, or at least its buffers and instructions).
Status
verifyCommunication(const std::vector<const program::Program *> &programs);

/// Everything above for the programs of one world (`programs[r]` is rank
/// r's): each program's structure, then the communication across ranks,
/// then each program's data flow. This is what LoadedArtifact::open runs.
Status verifyPrograms(const std::vector<const program::Program *> &programs,
                      const WeightStore *weights = nullptr);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_PROGRAMVERIFIER_H
