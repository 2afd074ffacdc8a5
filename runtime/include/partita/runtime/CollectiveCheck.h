//===- CollectiveCheck.h - what every member checks alone -------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The checks every communicator (host, NCCL, single-GPU) makes on its own
// rank before it takes part in a collective, with one set of messages: the
// group lists distinct ranks including this one, operand and result share a
// dtype, and the result has the shape the collective gives.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_COLLECTIVECHECK_H
#define PARTITA_RUNTIME_COLLECTIVECHECK_H

#include "partita/runtime/Communicator.h"

namespace partita::runtime {

enum class CollectiveKind {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  CollectivePermute,
  /// dist.dispatch and dist.dispatch_return: rows in variable numbers.
  Dispatch,
  DispatchReturn
};

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::AllReduce;
  Reduction reduction = Reduction::Sum;
  int64_t dim = 0, concatDim = 0, shift = 0;

  /// `all_gather(dim 1) f32 [2, 4] -> [2, 8] over group [0, 1]`.
  std::string describe(const Tensor &in, const Tensor &out,
                       const Group &group) const;
};

/// The name of a collective, `all_gather`, ...
const char *collectiveName(CollectiveKind kind);

/// Checks that `group` lists distinct ranks of 0..worldSize-1 including
/// `rank`, whose position in it becomes `index`; `what` prefixes errors.
Status checkGroup(const std::string &what, const Group &group, int32_t rank,
                  int32_t worldSize, size_t &index);

/// Checks `call` on `rank` of a world of `worldSize` as far as types tell:
/// the group, the dtypes, the result's shape; `index` is the rank's position
/// in the group. The tensors' memory is not looked at (the program verifier
/// checks calls before any memory exists).
Status checkCollectiveShapes(const CollectiveCall &call, const Tensor &in,
                             const Tensor &out, const Group &group,
                             int32_t rank, int32_t worldSize, size_t &index);

/// checkCollectiveShapes, and that both tensors have memory.
Status checkCollective(const CollectiveCall &call, const Tensor &in,
                       const Tensor &out, const Group &group, int32_t rank,
                       int32_t worldSize, size_t &index);

/// The checks of a dispatch (`call.kind` Dispatch or DispatchReturn) beyond
/// checkCollectiveShapes': `destinations` is an i64 vector with a row of
/// the sending side each (dispatch's operand, dispatch_return's result),
/// `counts` an i64 vector with a member of the group each.
Status checkDispatchBuffers(const CollectiveCall &call, const Tensor &in,
                            const Tensor &out, const Tensor &destinations,
                            const Tensor &counts, const Group &group,
                            int32_t rank);

/// Whether two tensors' bytes overlap.
bool overlaps(const Tensor &a, const Tensor &b);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_COLLECTIVECHECK_H
