//===- ProgramBuilder.h - hand-built exec programs for tests ----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TEST_CORE_PROGRAMBUILDER_H
#define PARTITA_RUNTIME_TEST_CORE_PROGRAMBUILDER_H

#include "partita/runtime/Executor.h"
#include "partita/runtime/Tensor.h"

#include <string>
#include <vector>

namespace partita::runtime::test {

using program::Buffer;

/// Builds a Program buffer by buffer and instruction by instruction.
class ProgramBuilder {
public:
  ProgramBuilder(int32_t rank = 0, int32_t worldSize = 1) {
    p.set_format_version(kProgramFormatVersion);
    p.set_rank(rank);
    p.set_world_size(worldSize);
  }

  int32_t buffer(Buffer::Kind kind, DType dtype, std::vector<int64_t> shape) {
    Buffer *b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_kind(kind);
    b->mutable_type()->set_dtype(dtype);
    for (int64_t d : shape)
      b->mutable_type()->add_shape(d);
    return b->id();
  }
  int32_t input(const std::string &name, DType dtype,
                std::vector<int64_t> shape) {
    int32_t id = buffer(Buffer::INPUT, dtype, std::move(shape));
    program::Binding *binding = p.add_inputs();
    binding->set_name(name);
    binding->set_buffer(id);
    return id;
  }
  int32_t output(const std::string &name, DType dtype,
                 std::vector<int64_t> shape) {
    int32_t id = buffer(Buffer::OUTPUT, dtype, std::move(shape));
    program::Binding *binding = p.add_outputs();
    binding->set_name(name);
    binding->set_buffer(id);
    return id;
  }
  /// An activation placed after the previous ones, 64-byte aligned.
  int32_t activation(DType dtype, std::vector<int64_t> shape) {
    int32_t id = buffer(Buffer::ACTIVATION, dtype, shape);
    int64_t bytes = int64_t(dtypeSize(dtype));
    for (int64_t d : shape)
      bytes *= d;
    p.mutable_buffers(id)->set_arena_offset(p.arena_bytes());
    p.set_arena_bytes((p.arena_bytes() + uint64_t(bytes) + 63) / 64 * 64);
    return id;
  }
  int32_t constant(const std::vector<float> &values,
                   std::vector<int64_t> shape) {
    int32_t id = buffer(Buffer::CONSTANT, program::F32, std::move(shape));
    p.mutable_buffers(id)->set_data(values.data(),
                                    values.size() * sizeof(float));
    return id;
  }
  int32_t weight(const std::string &name, DType dtype,
                 std::vector<int64_t> shape) {
    int32_t id = buffer(Buffer::WEIGHT, dtype, std::move(shape));
    p.mutable_buffers(id)->set_weight(name);
    return id;
  }
  /// A view of buffer `of`'s bytes from `offset` on.
  int32_t alias(int32_t of, DType dtype, std::vector<int64_t> shape,
                uint64_t offset = 0) {
    int32_t id = buffer(Buffer::ALIAS, dtype, std::move(shape));
    p.mutable_buffers(id)->set_alias_of(of);
    p.mutable_buffers(id)->set_alias_offset(offset);
    return id;
  }
  program::Kernel *kernel(const std::string &op, std::vector<int32_t> operands,
                          std::vector<int32_t> results,
                          const std::string &location = "") {
    program::Instruction *instruction = p.add_instructions();
    instruction->set_location(location);
    program::Kernel *k = instruction->mutable_kernel();
    k->set_op(op);
    for (int32_t id : operands)
      k->add_operands(id);
    for (int32_t id : results)
      k->add_results(id);
    return k;
  }
  program::Collective *collective(program::Collective::Kind kind,
                                  int32_t operand, int32_t result,
                                  std::vector<int32_t> group) {
    program::Instruction *instruction = p.add_instructions();
    instruction->set_location("collective");
    program::Collective *c = instruction->mutable_collective();
    c->set_kind(kind);
    c->set_operand(operand);
    c->set_result(result);
    for (int32_t rank : group)
      c->add_group(rank);
    return c;
  }
  program::PointToPoint *p2p(program::PointToPoint::Kind kind, int32_t buffer,
                             int32_t peer, int64_t tag = 0) {
    program::Instruction *instruction = p.add_instructions();
    instruction->set_location(kind == program::PointToPoint::SEND ? "send"
                                                                  : "recv");
    program::PointToPoint *t = instruction->mutable_p2p();
    t->set_kind(kind);
    t->set_buffer(buffer);
    t->set_peer(peer);
    t->set_tag(tag);
    return t;
  }
  void wait(int32_t token) {
    p.add_instructions()->mutable_wait()->set_token(token);
  }

  program::Program p;
};

} // namespace partita::runtime::test

#endif // PARTITA_RUNTIME_TEST_CORE_PROGRAMBUILDER_H
