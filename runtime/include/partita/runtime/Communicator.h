//===- Communicator.h - collectives between ranks ---------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What the executor needs from a communication library: the collectives of
// the dist dialect and tagged point-to-point transfers, each on local
// tensors and a group of global ranks. Implementations: HostWorld (ranks as
// threads of one process, HostCommunicator.h); NCCL comes with the CUDA
// backend.
//
// Every call blocks until this rank's part is complete, and every wait has
// a deadline: a peer that never arrives makes the call fail with a message
// naming it, never hang. The calls of one rank must be issued in one order
// (one thread at a time), the same order on every member of a group.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_COMMUNICATOR_H
#define PARTITA_RUNTIME_COMMUNICATOR_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace partita::runtime {

enum class Reduction { Sum, Max, Min };

/// `sum`, `max`, `min` as programs spell them; false for anything else.
bool parseReduction(const std::string &name, Reduction &reduction);
std::string reductionName(Reduction reduction);

/// Global ranks in group order; the calling rank is one of them.
using Group = std::vector<int32_t>;

class Communicator {
public:
  virtual ~Communicator();

  virtual int32_t rank() const = 0;
  virtual int32_t worldSize() const = 0;

  /// out = in reduced elementwise over the group, summed in group order so
  /// every member gets the same bits. f16/bf16 reduce in fp32. `in` and
  /// `out` have the same type and may be the same memory.
  virtual Status allReduce(const Tensor &in, const Tensor &out,
                           const Group &group, Reduction reduction) = 0;
  /// out = the members' `in` concatenated along `dim` in group order.
  virtual Status allGather(const Tensor &in, const Tensor &out,
                           const Group &group, int64_t dim) = 0;
  /// out = this member's piece (by group index) of the reduction of `in`
  /// split evenly along `dim`.
  virtual Status reduceScatter(const Tensor &in, const Tensor &out,
                               const Group &group, int64_t dim,
                               Reduction reduction) = 0;
  /// Member j's piece i of `in` (split along `splitDim`) becomes piece j of
  /// member i's `out` (concatenated along `concatDim`).
  virtual Status allToAll(const Tensor &in, const Tensor &out,
                          const Group &group, int64_t splitDim,
                          int64_t concatDim) = 0;
  /// The member at group index i sends `in` to index (i + shift) mod n and
  /// receives into `out` from index (i - shift) mod n.
  virtual Status collectivePermute(const Tensor &in, const Tensor &out,
                                   const Group &group, int64_t shift) = 0;
  /// Sends `tensor` to global rank `peer`; the matching recv names this rank
  /// and the same tag. Transfers between two ranks with one tag arrive in
  /// order.
  virtual Status send(const Tensor &tensor, int32_t peer, int64_t tag) = 0;
  /// Receives into `tensor` (whose dtype and shape must match the send).
  virtual Status recv(const Tensor &tensor, int32_t peer, int64_t tag) = 0;
  virtual Status barrier(const Group &group) = 0;
  /// Row i of `in` (its dimension 0) goes to the member at group index
  /// `destinations[i]` (i64; outside [0, n): nowhere). `out` gets the rows
  /// received, the sender at index 0's first in their send order, then
  /// index 1's, and so on, then zeros; `counts` (i64 [n]) how many came
  /// from each. The members exchange their counts first, so only the rows
  /// sent move. Fails, and fails the other members, when more rows arrive
  /// than `out` holds.
  ///
  /// The default refuses: a transport that can move rows overrides it (the
  /// host's, with dispatchBySendRecv). CUDA ranks do not dispatch.
  virtual Status dispatch(const Tensor &in, const Tensor &destinations,
                          const Tensor &out, const Tensor &counts,
                          const Group &group);
  /// Undoes a dispatch: `in` holds `counts[j]` rows for the member at group
  /// index j (in order of j), which go back to it; `out` row i gets the
  /// row that came back for row i of that dispatch's operand (whose
  /// `destinations` these are), or zeros where it was sent nowhere.
  virtual Status dispatchReturn(const Tensor &in, const Tensor &counts,
                                const Tensor &destinations, const Tensor &out,
                                const Group &group);

  /// Says that this rank has issued everything of the current run. A
  /// transport that can tell fails a peer still waiting for this rank (a
  /// receive it will never send, a collective it will never join) at once
  /// instead of at the deadline, and once every rank has ended, fails if a
  /// message was sent that no receive took; messages name the ranks. The
  /// default checks nothing.
  virtual Status endRun();

  /// Tells every rank that this one failed and will not take part in
  /// anything more: their pending and later calls fail with `reason`
  /// instead of waiting for their deadline.
  virtual void abort(const std::string &reason) = 0;
};

/// Communicator::dispatch and dispatchReturn over `communicator`'s
/// allToAll (the counts), send and recv (the rows, with tags no program
/// uses): for a transport whose sends do not wait for their receives and
/// whose tensors the host reads (the host communicator's).
Status dispatchBySendRecv(Communicator &communicator, const Tensor &in,
                          const Tensor &destinations, const Tensor &out,
                          const Tensor &counts, const Group &group);
Status dispatchReturnBySendRecv(Communicator &communicator, const Tensor &in,
                                const Tensor &counts,
                                const Tensor &destinations, const Tensor &out,
                                const Group &group);

/// `[0, 1, 2]`, for messages.
std::string groupString(const Group &group);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_COMMUNICATOR_H
