//===- ViewChain.cpp - where a view's bytes live --------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/ViewChain.h"

namespace partita::runtime {

std::optional<ViewRoot> followViewChain(const program::Program &program,
                                        int32_t id) {
  auto valid = [&](int32_t buffer) {
    return buffer >= 0 && buffer < program.buffers_size();
  };
  if (!valid(id))
    return std::nullopt;
  ViewRoot root{id, 0};
  // A chain longer than the buffer count revisits a buffer: a cycle.
  for (int steps = 0;
       program.buffers(root.buffer).kind() == program::Buffer::ALIAS; ++steps) {
    const program::Buffer &view = program.buffers(root.buffer);
    if (steps > program.buffers_size() || !valid(view.alias_of()))
      return std::nullopt;
    root.offset += view.alias_offset();
    root.buffer = view.alias_of();
  }
  return root;
}

} // namespace partita::runtime
