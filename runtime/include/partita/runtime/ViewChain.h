//===- ViewChain.h - where a view's bytes live ------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A program's ALIAS buffers view other buffers, possibly other views. The
// executor (to bind memory) and the program verifier (to track which bytes
// an instruction touches) both need the buffer at the end of the chain and
// the offset into it; this is the one walk they share.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_VIEWCHAIN_H
#define PARTITA_RUNTIME_VIEWCHAIN_H

#include "partita/proto/program.pb.h"

#include <cstdint>
#include <optional>

namespace partita::runtime {

/// The buffer that owns a view's memory, and the view's byte offset in it.
struct ViewRoot {
  int32_t buffer = 0;
  uint64_t offset = 0;
};

/// Follows buffer `id` of `program` through its chain of views, adding each
/// view's offset, to the first buffer that is not a view (`id` itself when it
/// is none). std::nullopt when the chain is a cycle or leaves the program.
/// Callers check beforehand that each view lies within what it views, so the
/// summed offset lies within the root.
std::optional<ViewRoot> followViewChain(const program::Program &program,
                                        int32_t id);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_VIEWCHAIN_H
