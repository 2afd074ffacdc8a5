//===- ProgramVerifier.cpp - load-time checks of exec programs ------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// verifyProgram walks a rank's instructions once, in order, keeping for
// every byte range that instructions wrote (of the activation arena and of
// each output) which buffer last wrote it: an interval map, where a buffer
// written whole is one interval, so checking a read is one lookup, and a
// view at an offset (a microbatch's rows) is an interval of its own.
// verifyCommunication lines up the ranks' transfers per ordered pair of ranks
// and their collectives per group, then runs the ranks' communication as the
// runtime issues it (program order; sends eager, receives and collectives
// blocking) on counters alone, to find a deadlock before anything waits for
// one.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/ProgramVerifier.h"

#include "partita/runtime/CollectiveCheck.h"
#include "partita/runtime/Executor.h"
#include "partita/runtime/LoadedArtifact.h"
#include "partita/runtime/OpVocabulary.h"
#include "partita/runtime/ViewChain.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>

using namespace partita::runtime;
namespace program = partita::program;
using program::Buffer;
using program::Instruction;

namespace {

std::string ordinal(size_t n) {
  std::string suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    if (n % 10 == 1)
      suffix = "st";
    else if (n % 10 == 2)
      suffix = "nd";
    else if (n % 10 == 3)
      suffix = "rd";
  }
  return std::to_string(n) + suffix;
}

std::string typeString(DType dtype, const std::vector<int64_t> &shape) {
  return dtypeName(dtype) + " " + shapeString(shape);
}

std::vector<int64_t> shapeOf(const program::TensorType &type) {
  return {type.shape().begin(), type.shape().end()};
}

/// The collective kinds of the program schema and the communicator's.
bool collectiveKindOf(program::Collective::Kind kind, CollectiveKind &out) {
  switch (kind) {
  case program::Collective::ALL_REDUCE:
    out = CollectiveKind::AllReduce;
    return true;
  case program::Collective::ALL_GATHER:
    out = CollectiveKind::AllGather;
    return true;
  case program::Collective::REDUCE_SCATTER:
    out = CollectiveKind::ReduceScatter;
    return true;
  case program::Collective::ALL_TO_ALL:
    out = CollectiveKind::AllToAll;
    return true;
  case program::Collective::COLLECTIVE_PERMUTE:
    out = CollectiveKind::CollectivePermute;
    return true;
  case program::Collective::DISPATCH:
    out = CollectiveKind::Dispatch;
    return true;
  case program::Collective::DISPATCH_RETURN:
    out = CollectiveKind::DispatchReturn;
    return true;
  default:
    return false;
  }
}

/// The call a Collective instruction makes (its kind already checked).
CollectiveCall callOf(const program::Collective &collective) {
  CollectiveCall call;
  (void)collectiveKindOf(collective.kind(), call.kind);
  (void)parseReduction(collective.reduction(), call.reduction);
  call.dim = collective.dim();
  call.concatDim = collective.concat_dim();
  call.shift = collective.shift();
  return call;
}

/// What an instruction is, for messages: the kernel's op, the collective,
/// `send`, `recv`, `wait`.
std::string instructionKind(const Instruction &instruction) {
  switch (instruction.op_case()) {
  case Instruction::kKernel:
    return instruction.kernel().op().empty() ? "kernel"
                                             : instruction.kernel().op();
  case Instruction::kCollective: {
    CollectiveKind kind;
    if (collectiveKindOf(instruction.collective().kind(), kind))
      return collectiveName(kind);
    return "collective";
  }
  case Instruction::kP2P:
    return instruction.p2p().kind() == program::PointToPoint::SEND   ? "send"
           : instruction.p2p().kind() == program::PointToPoint::RECV ? "recv"
                                                                     : "p2p";
  case Instruction::kWait:
    return "wait";
  default:
    return "empty";
  }
}

/// `rank 1, instruction 17 (matmul at /h.0/attn/MatMul)`.
std::string instructionString(const program::Program &program, int index) {
  std::string text = "rank " + std::to_string(program.rank()) +
                     ", instruction " + std::to_string(index);
  if (index < 0 || index >= program.instructions_size())
    return text;
  const Instruction &instruction = program.instructions(index);
  text += " (" + instructionKind(instruction);
  if (!instruction.location().empty())
    text += " at " + instruction.location();
  return text + ")";
}

//===----------------------------------------------------------------------===//
// Kernel ops: operand and result counts, attributes
//===----------------------------------------------------------------------===//

/// An op of OpVocabulary.def with its attributes.
struct OpSpec {
  const OpInfo *info;
  std::vector<const OpAttrInfo *> attrs;
};

const std::unordered_map<std::string_view, OpSpec> &opSpecs() {
  static const std::unordered_map<std::string_view, OpSpec> table = [] {
    std::unordered_map<std::string_view, OpSpec> t;
    for (const OpInfo &op : kOps)
      t[op.name] = {&op, {}};
    for (const OpAttrInfo &attr : kOpAttrs)
      t[attr.op].attrs.push_back(&attr);
    return t;
  }();
  return table;
}

/// Ops an epilogue step may apply, and whether the step reads an operand.
bool isEpilogueOp(const std::string &op, bool &binary) {
  const OpInfo *info = lookupOp(op);
  if (!info || !info->isEpilogueStep())
    return false;
  binary = info->stepTakesOperand();
  return true;
}

const char *attrTypeName(OpAttrType type) {
  switch (type) {
  case OpAttrType::Int:
    return "an integer";
  case OpAttrType::Float:
    return "a number";
  case OpAttrType::String:
    return "a string";
  case OpAttrType::Ints:
    return "a list of integers";
  case OpAttrType::Bool:
    return "a bool";
  }
  return "?";
}

bool attrHasType(const program::Attribute &attr, OpAttrType type) {
  switch (type) {
  case OpAttrType::Int:
    return attr.value_case() == program::Attribute::kI;
  case OpAttrType::Float:
    // Kernels read an integer where they expect a number.
    return (attr.value_case() == program::Attribute::kF &&
            std::isfinite(attr.f())) ||
           attr.value_case() == program::Attribute::kI;
  case OpAttrType::String:
    return attr.value_case() == program::Attribute::kS;
  case OpAttrType::Ints:
    return attr.value_case() == program::Attribute::kInts;
  case OpAttrType::Bool:
    return attr.value_case() == program::Attribute::kB;
  }
  return false;
}

using AttributeMap = google::protobuf::Map<std::string, program::Attribute>;

Status checkAttributes(const AttributeMap &attrs,
                       const std::vector<const OpAttrInfo *> &specs) {
  // A key no kernel reads is refused: a renamed required attribute must not
  // run as if it were absent (a `causal` renamed ran non-causal, exit 0).
  // Map order is unspecified: the first unknown key in name order is named.
  std::string unknown;
  for (const auto &[name, value] : attrs)
    if (std::none_of(
            specs.begin(), specs.end(),
            [&](const OpAttrInfo *spec) { return name == spec->name; }) &&
        (unknown.empty() || name < unknown))
      unknown = name;
  if (!unknown.empty())
    return Status::error("unknown attribute '" + unknown + "'");
  for (const OpAttrInfo *specPtr : specs) {
    const OpAttrInfo &spec = *specPtr;
    auto it = attrs.find(spec.name);
    if (it == attrs.end()) {
      if (spec.required)
        return Status::error(std::string("missing attribute '") + spec.name +
                             "'");
      continue;
    }
    if (!attrHasType(it->second, spec.type))
      return Status::error(std::string("attribute '") + spec.name +
                           "' is not " + attrTypeName(spec.type) +
                           (spec.type == OpAttrType::Float ? " (finite)" : ""));
  }
  return Status::ok();
}

bool boolAttr(const AttributeMap &attrs, const char *name) {
  auto it = attrs.find(name);
  return it != attrs.end() && it->second.b();
}

Status checkOneOf(const AttributeMap &attrs, const char *name,
                  std::initializer_list<const char *> values) {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return Status::ok();
  std::string known;
  for (const char *value : values) {
    if (it->second.s() == value)
      return Status::ok();
    known += (known.empty() ? "" : ", ") + std::string(value);
  }
  return Status::error(std::string("attribute '") + name + "' is '" +
                       it->second.s() + "', not one of " + known);
}

/// `axis` in [-rank, rank).
Status checkAxis(int64_t axis, size_t rank, const char *what) {
  int64_t r = int64_t(rank);
  if (axis < -r || axis >= r)
    return Status::error(std::string(what) + " " + std::to_string(axis) +
                         " is out of range for rank " + std::to_string(r));
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// One rank
//===----------------------------------------------------------------------===//

/// Where a buffer's bytes are: the activation arena (space 0) or memory of
/// its own (space root + 1), [begin, end).
struct Region {
  int64_t space = 0;
  uint64_t begin = 0, end = 0;

  bool overlaps(const Region &other) const {
    return space == other.space && begin < other.end && other.begin < end;
  }
  bool operator==(const Region &other) const {
    return space == other.space && begin == other.begin && end == other.end;
  }
};

struct BufferInfo {
  Buffer::Kind kind = Buffer::KIND_UNSPECIFIED;
  DType dtype = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  /// The buffer that owns the memory (itself unless an alias).
  int32_t root = 0;
  Region region;
};

/// An asynchronous transfer between its start and its Wait.
struct InFlight {
  int32_t token = 0;
  int start = 0;
  /// The buffer it reads (collectives, sends) and the buffer it writes
  /// (collectives, receives), -1 if none.
  int32_t reading = -1, writing = -1;
};

class RankVerifier {
public:
  /// Without `dataFlow`, only the structure: buffers, bindings and each
  /// instruction alone.
  RankVerifier(const program::Program &program, const WeightStore *weights,
               bool dataFlow)
      : program(program), weights(weights), dataFlow(dataFlow) {}

  Status run();

private:
  Status checkHeader() const;
  Status checkBuffers();
  Status checkBindings() const;
  Status checkInstruction(int index);
  Status checkKernel(int index, const program::Kernel &kernel);
  Status checkKernelShapes(const program::Kernel &kernel,
                           const OpSpec &spec) const;
  Status checkCudaSteps(const program::Kernel &kernel) const;
  Status checkCollective(int index, const program::Collective &collective);
  Status checkPointToPoint(int index, const program::PointToPoint &p2p);
  Status checkWait(int index, const program::Wait &wait);
  Status checkNewToken(int32_t token) const;
  Status checkEnd() const;

  /// `buffer 7` or `buffer 7 (a view of buffer 3)`.
  std::string bufferString(int32_t id) const;
  bool validId(int32_t id) const {
    return id >= 0 && size_t(id) < buffers.size();
  }
  Status requireId(int32_t id, const char *role) const;
  /// The data flow: a read needs a value there, a write must not clobber
  /// bytes in flight; commit records a write.
  Status read(int32_t id) const;
  Status checkWritable(int32_t id) const;
  void commit(int32_t id, int index);
  /// The in-flight transfer whose buffers overlap `region`, if any;
  /// `writingOnly` considers only those that write.
  const InFlight *inFlightOver(const Region &region, bool writingOnly) const;
  std::string inFlightString(const InFlight &transfer) const;

  /// The bytes of `region` now hold buffer `root`, written by `index`.
  void assign(const Region &region, int32_t root, int index);
  /// Whether instructions wrote every byte of `region` with buffer `root`'s
  /// value; otherwise why not, with `what` naming the reader's buffer.
  Status checkHolds(const Region &region, int32_t root,
                    const std::string &what) const;

  const program::Program &program;
  const WeightStore *weights;
  bool dataFlow;
  std::vector<BufferInfo> buffers;
  /// For each root buffer, the instruction that last wrote it (-1: none;
  /// inputs, weights and constants hold their value from the start).
  std::vector<int> writtenBy;
  struct Segment {
    uint64_t end;
    int32_t root;
    int index;
  };
  /// Written bytes by (space, begin).
  std::map<std::pair<int64_t, uint64_t>, Segment> written;
  std::vector<InFlight> inFlight;
};

std::string RankVerifier::bufferString(int32_t id) const {
  std::string text = "buffer " + std::to_string(id);
  if (validId(id) && buffers[size_t(id)].root != id)
    text +=
        " (a view of buffer " + std::to_string(buffers[size_t(id)].root) + ")";
  return text;
}

Status RankVerifier::requireId(int32_t id, const char *role) const {
  if (!validId(id))
    return Status::error(std::string(role) + " buffer " + std::to_string(id) +
                         " is not a buffer of the program (it has " +
                         std::to_string(buffers.size()) + ")");
  return Status::ok();
}

Status RankVerifier::checkHeader() const {
  if (program.format_version() != kProgramFormatVersion)
    return Status::error("program format version " +
                         std::to_string(program.format_version()) +
                         " is not supported (this runtime reads version " +
                         std::to_string(kProgramFormatVersion) + ")");
  if (program.world_size() < 1 || program.rank() < 0 ||
      program.rank() >= program.world_size())
    return Status::error("the program is for rank " +
                         std::to_string(program.rank()) + " of a world of " +
                         std::to_string(program.world_size()));
  return Status::ok();
}

Status RankVerifier::checkBuffers() {
  buffers.resize(size_t(program.buffers_size()));
  writtenBy.assign(buffers.size(), -1);
  for (int32_t id = 0; id < program.buffers_size(); ++id) {
    const Buffer &buffer = program.buffers(id);
    BufferInfo &info = buffers[size_t(id)];
    std::string name = "buffer " + std::to_string(id);
    if (buffer.id() != id)
      return Status::error(name + " has id " + std::to_string(buffer.id()));
    info.kind = buffer.kind();
    info.dtype = buffer.type().dtype();
    info.shape = shapeOf(buffer.type());
    info.root = id;
    PARTITA_RETURN_IF_ERROR(
        bufferBytes(name, info.dtype, info.shape, info.bytes));
    size_t elementSize = dtypeSize(info.dtype);
    info.region = {int64_t(id) + 1, 0, info.bytes};
    switch (buffer.kind()) {
    case Buffer::ACTIVATION: {
      uint64_t end;
      if (__builtin_add_overflow(buffer.arena_offset(), info.bytes, &end) ||
          end > program.arena_bytes())
        return Status::error(name + " (" + typeString(info.dtype, info.shape) +
                             " at arena offset " +
                             std::to_string(buffer.arena_offset()) +
                             ") lies outside the arena of " +
                             std::to_string(program.arena_bytes()) + " bytes");
      if (buffer.arena_offset() % elementSize != 0)
        return Status::error(name + ": arena offset " +
                             std::to_string(buffer.arena_offset()) +
                             " is not aligned to its elements");
      info.region = {0, buffer.arena_offset(), end};
      break;
    }
    case Buffer::INPUT:
    case Buffer::OUTPUT:
      break;
    case Buffer::WEIGHT: {
      if (buffer.weight().empty())
        return Status::error(name + " is a weight without a name");
      if (!weights)
        break;
      const Tensor *weight;
      PARTITA_RETURN_IF_ERROR(
          weights->find(buffer.weight(), info.dtype, info.shape, name, weight));
      break;
    }
    case Buffer::CONSTANT:
      if (buffer.data().size() != info.bytes)
        return Status::error(name + ": the constant holds " +
                             std::to_string(buffer.data().size()) + " bytes, " +
                             typeString(info.dtype, info.shape) + " needs " +
                             std::to_string(info.bytes));
      break;
    case Buffer::ALIAS:
      if (buffer.alias_of() < 0 ||
          buffer.alias_of() >= program.buffers_size() ||
          buffer.alias_of() == id)
        return Status::error(name + " is a view of buffer " +
                             std::to_string(buffer.alias_of()) +
                             ", which is not another buffer of the program");
      if (buffer.alias_offset() % elementSize != 0)
        return Status::error(name + ": view offset " +
                             std::to_string(buffer.alias_offset()) +
                             " is not aligned to its elements");
      info.root = buffer.alias_of();
      break;
    default:
      return Status::error(name + " has an unknown kind " +
                           std::to_string(int(buffer.kind())));
    }
  }
  // Views: within the bytes of what they view, and chains that end.
  for (size_t id = 0; id < buffers.size(); ++id) {
    BufferInfo &info = buffers[id];
    if (info.kind != Buffer::ALIAS)
      continue;
    const BufferInfo &target = buffers[size_t(info.root)];
    uint64_t offset = program.buffers(int(id)).alias_offset(), end;
    if (__builtin_add_overflow(offset, info.bytes, &end) || end > target.bytes)
      return Status::error("buffer " + std::to_string(id) + " (" +
                           typeString(info.dtype, info.shape) + " at offset " +
                           std::to_string(offset) + ") is a view of buffer " +
                           std::to_string(info.root) + " (" +
                           typeString(target.dtype, target.shape) +
                           "), which does not hold its bytes");
    // Each view lies within the next, so the offsets add up to a place
    // within the root.
    std::optional<ViewRoot> root = followViewChain(program, int32_t(id));
    if (!root)
      return Status::error("buffer " + std::to_string(id) +
                           " is part of a cycle of views");
    info.root = root->buffer;
    offset = root->offset;
    const Region &bytes = buffers[size_t(info.root)].region;
    info.region = {bytes.space, bytes.begin + offset,
                   bytes.begin + offset + info.bytes};
  }
  return Status::ok();
}

Status RankVerifier::checkBindings() const {
  std::vector<int> bindingCount(buffers.size(), 0);
  auto check =
      [&](const google::protobuf::RepeatedPtrField<program::Binding> &bindings,
          Buffer::Kind kind, const char *what) -> Status {
    std::set<std::string> names;
    for (const program::Binding &binding : bindings) {
      int32_t id = binding.buffer();
      if (binding.name().empty())
        return Status::error(std::string("an ") + what + " has no name");
      if (!names.insert(binding.name()).second)
        return Status::error(std::string(what) + " '" + binding.name() +
                             "' is bound twice");
      if (!validId(id) || buffers[size_t(id)].kind != kind)
        return Status::error(std::string(what) + " '" + binding.name() +
                             "' is bound to buffer " + std::to_string(id) +
                             ", which is not an " + what + " buffer");
      ++bindingCount[size_t(id)];
    }
    return Status::ok();
  };
  PARTITA_RETURN_IF_ERROR(check(program.inputs(), Buffer::INPUT, "input"));
  PARTITA_RETURN_IF_ERROR(check(program.outputs(), Buffer::OUTPUT, "output"));
  for (size_t id = 0; id < buffers.size(); ++id) {
    Buffer::Kind kind = buffers[id].kind;
    if ((kind == Buffer::INPUT || kind == Buffer::OUTPUT) &&
        bindingCount[id] != 1)
      return Status::error("buffer " + std::to_string(id) + " is an " +
                           (kind == Buffer::INPUT ? "input" : "output") +
                           " buffer bound " + std::to_string(bindingCount[id]) +
                           " times; it needs exactly one binding");
  }
  return Status::ok();
}

std::string RankVerifier::inFlightString(const InFlight &transfer) const {
  return "the asynchronous " +
         instructionKind(program.instructions(transfer.start)) +
         " started at instruction " + std::to_string(transfer.start) +
         " (token " + std::to_string(transfer.token) + ")";
}

const InFlight *RankVerifier::inFlightOver(const Region &region,
                                           bool writingOnly) const {
  for (const InFlight &transfer : inFlight) {
    if (transfer.writing >= 0 &&
        buffers[size_t(transfer.writing)].region.overlaps(region))
      return &transfer;
    if (!writingOnly && transfer.reading >= 0 &&
        buffers[size_t(transfer.reading)].region.overlaps(region))
      return &transfer;
  }
  return nullptr;
}

Status RankVerifier::read(int32_t id) const {
  const BufferInfo &info = buffers[size_t(id)];
  int32_t root = info.root;
  Buffer::Kind kind = buffers[size_t(root)].kind;
  if (kind == Buffer::INPUT || kind == Buffer::WEIGHT ||
      kind == Buffer::CONSTANT)
    return Status::ok();
  if (const InFlight *transfer = inFlightOver(info.region, true))
    return Status::error("reads " + bufferString(id) + " while " +
                         inFlightString(*transfer) +
                         " still writes its bytes (before its wait)");
  if (writtenBy[size_t(root)] < 0)
    return Status::error("reads " + bufferString(id) +
                         " before any instruction writes it");
  return checkHolds(info.region, root, "reads " + bufferString(id));
}

Status RankVerifier::checkHolds(const Region &region, int32_t root,
                                const std::string &what) const {
  // Every byte, in order: written with this root's value, and not since
  // overwritten with another buffer's (arena bytes are shared). An empty
  // buffer holds no bytes to lose.
  if (region.begin >= region.end)
    return Status::ok();
  uint64_t next = region.begin;
  auto it = written.upper_bound({region.space, region.begin});
  if (it != written.begin() && std::prev(it)->first.first == region.space)
    --it;
  for (; it != written.end() && it->first.first == region.space &&
         it->first.second < region.end;
       ++it) {
    const Segment &segment = it->second;
    if (segment.end <= region.begin)
      continue;
    if (segment.root != root)
      return Status::error(
          what + ", written by instruction " +
          std::to_string(writtenBy[size_t(root)]) + ", but instruction " +
          std::to_string(segment.index) + " has since overwritten its bytes " +
          "with " + bufferString(segment.root) + " (they share arena bytes)");
    if (it->first.second > next)
      break;
    next = std::max(next, segment.end);
  }
  if (next >= region.end)
    return Status::ok();
  return Status::error(what + ", but no instruction has written its bytes " +
                       std::to_string(next - region.begin) + " to " +
                       std::to_string(region.end - region.begin) +
                       " (views wrote only part of " + bufferString(root) +
                       ")");
}

Status RankVerifier::checkWritable(int32_t id) const {
  const BufferInfo &info = buffers[size_t(id)];
  Buffer::Kind kind = buffers[size_t(info.root)].kind;
  if (kind != Buffer::ACTIVATION && kind != Buffer::OUTPUT)
    return Status::error("writes " + bufferString(id) +
                         ", which is read-only (an input, weight or constant)");
  if (const InFlight *transfer = inFlightOver(info.region, false))
    return Status::error("writes " + bufferString(id) + " while " +
                         inFlightString(*transfer) +
                         " still uses its bytes (before its wait)");
  return Status::ok();
}

void RankVerifier::assign(const Region &region, int32_t root, int index) {
  uint64_t begin = region.begin, end = region.end;
  int64_t space = region.space;
  if (begin >= end)
    return;
  auto it = written.lower_bound({space, begin});
  if (it != written.begin()) {
    auto previous = std::prev(it);
    if (previous->first.first == space && previous->second.end > begin) {
      Segment tail = previous->second;
      previous->second.end = begin;
      if (tail.end > end)
        written.emplace(std::make_pair(space, end), tail);
    }
  }
  while (it != written.end() && it->first.first == space &&
         it->first.second < end) {
    if (it->second.end > end) {
      Segment tail = it->second;
      written.erase(it);
      written.emplace(std::make_pair(space, end), tail);
      break;
    }
    it = written.erase(it);
  }
  written.emplace(std::make_pair(space, begin), Segment{end, root, index});
}

void RankVerifier::commit(int32_t id, int index) {
  const BufferInfo &info = buffers[size_t(id)];
  writtenBy[size_t(info.root)] = index;
  assign(info.region, info.root, index);
}

Status RankVerifier::checkKernelShapes(const program::Kernel &kernel,
                                       const OpSpec &spec) const {
  const AttributeMap &attrs = kernel.attributes();
  const std::string &op = kernel.op();
  const BufferInfo &result = buffers[size_t(kernel.results(0))];
  const BufferInfo &input = buffers[size_t(kernel.operands(0))];
  auto intAttr = [&](const char *name) { return attrs.at(name).i(); };
  auto intsAttr = [&](const char *name) {
    const auto &values = attrs.at(name).ints().values();
    return std::vector<int64_t>(values.begin(), values.end());
  };
  if (spec.info->isElementwise()) {
    for (int i = 0; i < kernel.operands_size(); ++i) {
      const BufferInfo &operand = buffers[size_t(kernel.operands(i))];
      if (!broadcastsTo(operand.shape, result.shape))
        return Status::error(
            "operand " + std::to_string(i) + " (" + shapeString(operand.shape) +
            ") does not broadcast to the result " + shapeString(result.shape));
    }
    if (spec.info->minOperands == 1 && input.shape != result.shape)
      return Status::error("the result " + shapeString(result.shape) +
                           " differs from the input " +
                           shapeString(input.shape));
    if (op == "compare")
      return checkOneOf(attrs, "direction",
                        {"eq", "ne", "lt", "le", "gt", "ge"});
    if (op == "gelu")
      return checkOneOf(attrs, "approximation", {"none", "tanh"});
    return Status::ok();
  }
  // Operand counts that attributes decide: a base count, plus each flag
  // set times its operands.
  struct FlagRule {
    const char *op;
    int base;
    const char *flags[2];
    int weights[2];
  };
  static const FlagRule kFlagRules[] = {
      {"layer_norm", 1, {"has_scale", "has_bias"}, {1, 1}},
      {"rms_norm", 1, {"has_scale", nullptr}, {1, 0}},
      {"matmul", 2, {"has_bias", nullptr}, {1, 0}},
      {"attention", 3, {"has_mask", nullptr}, {1, 0}},
      {"attention_partial", 3, {"has_mask", "has_positions"}, {1, 2}},
      {"attention_grad", 5, {"has_mask", nullptr}, {1, 0}},
  };
  for (const FlagRule &rule : kFlagRules) {
    if (op != rule.op)
      continue;
    int expected = rule.base;
    std::string flags;
    for (int f = 0; f < 2 && rule.flags[f]; ++f)
      expected += rule.weights[f] * int(boolAttr(attrs, rule.flags[f]));
    if (kernel.operands_size() == expected)
      break;
    for (int f = 0; f < 2 && rule.flags[f]; ++f)
      flags += (f ? ", " : "") + std::string(rule.flags[f]) + " = " +
               (boolAttr(attrs, rule.flags[f]) ? "true" : "false");
    return Status::error("expected " + std::to_string(expected) +
                         " operands for " + flags + ", got " +
                         std::to_string(kernel.operands_size()));
  }

  if (op == "reduce") {
    PARTITA_RETURN_IF_ERROR(
        checkOneOf(attrs, "kind", {"sum", "mean", "max", "min"}));
    std::vector<int64_t> axes = intsAttr("axes");
    if (axes.empty())
      return Status::error("attribute 'axes' is empty");
    int64_t previous = -1;
    for (int64_t axis : axes) {
      PARTITA_RETURN_IF_ERROR(checkAxis(axis, input.shape.size(), "axis"));
      int64_t normalized = axis < 0 ? axis + int64_t(input.shape.size()) : axis;
      if (normalized <= previous)
        return Status::error("attribute 'axes' " + shapeString(axes) +
                             " is not strictly increasing");
      previous = normalized;
    }
  } else if (op == "softmax" || op == "log_softmax" || op == "layer_norm" ||
             op == "rms_norm" || op == "gather" || op == "split") {
    PARTITA_RETURN_IF_ERROR(
        checkAxis(intAttr("axis"), input.shape.size(), "axis"));
  } else if (op == "cumsum") {
    PARTITA_RETURN_IF_ERROR(
        checkAxis(intAttr("axis"), input.shape.size(), "axis"));
    if (input.shape != result.shape || input.dtype != result.dtype)
      return Status::error(
          "the result " + typeString(result.dtype, result.shape) +
          " differs from the input " + typeString(input.dtype, input.shape));
  } else if (op == "concat") {
    PARTITA_RETURN_IF_ERROR(
        checkAxis(intAttr("axis"), result.shape.size(), "axis"));
  } else if (op == "transpose") {
    std::vector<int64_t> permutation = intsAttr("permutation");
    std::vector<bool> seen(input.shape.size(), false);
    bool valid = permutation.size() == input.shape.size();
    std::vector<int64_t> expectedShape;
    for (int64_t p : permutation) {
      if (!valid || p < 0 || p >= int64_t(seen.size()) || seen[size_t(p)]) {
        valid = false;
        break;
      }
      seen[size_t(p)] = true;
      expectedShape.push_back(input.shape[size_t(p)]);
    }
    if (!valid)
      return Status::error("attribute 'permutation' " +
                           shapeString(permutation) +
                           " is not a permutation of the input's " +
                           std::to_string(input.shape.size()) + " dimensions");
    if (expectedShape != result.shape)
      return Status::error("the result " + shapeString(result.shape) +
                           " is not the input " + shapeString(input.shape) +
                           " permuted by " + shapeString(permutation));
  } else if (op == "slice") {
    std::vector<int64_t> start = intsAttr("start"), limit = intsAttr("limit"),
                         stride = intsAttr("stride");
    size_t rank = input.shape.size();
    if (start.size() != rank || limit.size() != rank || stride.size() != rank)
      return Status::error("start, limit and stride need one entry per "
                           "dimension of the input " +
                           shapeString(input.shape));
    std::vector<int64_t> expectedShape(rank);
    for (size_t d = 0; d < rank; ++d) {
      if (start[d] < 0 || start[d] > limit[d] || limit[d] > input.shape[d] ||
          stride[d] < 1)
        return Status::error("bad bounds in dimension " + std::to_string(d) +
                             ": start " + std::to_string(start[d]) +
                             ", limit " + std::to_string(limit[d]) +
                             ", stride " + std::to_string(stride[d]) +
                             ", size " + std::to_string(input.shape[d]));
      expectedShape[d] = (limit[d] - start[d] + stride[d] - 1) / stride[d];
    }
    if (expectedShape != result.shape)
      return Status::error("the result " + shapeString(result.shape) +
                           " is not the slice's " + shapeString(expectedShape));
  } else if (op == "copy") {
    if (input.bytes != result.bytes || input.dtype != result.dtype)
      return Status::error("the result " +
                           typeString(result.dtype, result.shape) +
                           " is not a copy of the input " +
                           typeString(input.dtype, input.shape));
  } else if (op == "broadcast_to") {
    if (!broadcastsTo(input.shape, result.shape))
      return Status::error("the input " + shapeString(input.shape) +
                           " does not broadcast to the result " +
                           shapeString(result.shape));
  } else if (op == "kv_cache_write") {
    PARTITA_RETURN_IF_ERROR(
        checkAxis(intAttr("axis"), input.shape.size(), "axis"));
    int64_t axis = intAttr("axis");
    if (axis < 0)
      axis += int64_t(input.shape.size());
    const BufferInfo &update = buffers[size_t(kernel.operands(1))];
    const BufferInfo &position = buffers[size_t(kernel.operands(2))];
    if (result.shape != input.shape || result.dtype != input.dtype)
      return Status::error(
          "the result " + typeString(result.dtype, result.shape) +
          " differs from the cache " + typeString(input.dtype, input.shape));
    if (update.dtype != input.dtype)
      return Status::error("the update is " + dtypeName(update.dtype) +
                           ", the cache " + dtypeName(input.dtype));
    bool fits = update.shape.size() == input.shape.size();
    for (size_t d = 0; fits && d < input.shape.size(); ++d)
      fits = int64_t(d) == axis ? update.shape[d] <= input.shape[d]
                                : update.shape[d] == input.shape[d];
    if (!fits)
      return Status::error("the update " + shapeString(update.shape) +
                           " does not fit the cache " +
                           shapeString(input.shape) + " along axis " +
                           std::to_string(axis));
    bool perRow = axis != 0 && position.shape.size() == 1 &&
                  position.shape[0] == input.shape[0];
    if (position.dtype != program::I64 || (position.bytes != 8 && !perRow))
      return Status::error("the position is " +
                           typeString(position.dtype, position.shape) +
                           ", expected i64 with one element or one per row "
                           "of the batch");
    if (kernel.epilogue_size() != 0)
      return Status::error("kv_cache_write takes no epilogue (it writes one "
                           "slice of its result)");
  } else if (op == "embedding" || op == "gather") {
    DType indices = buffers[size_t(kernel.operands(1))].dtype;
    if (indices != program::I64 && indices != program::I32 &&
        indices != program::I8)
      return Status::error("the indices are " + dtypeName(indices) +
                           ", not integers");
  }
  return Status::ok();
}

Status RankVerifier::checkCudaSteps(const program::Kernel &kernel) const {
  if (kernel.cuda_size() == 0)
    return Status::ok();
  std::set<int32_t> operands(kernel.operands().begin(),
                             kernel.operands().end());
  std::set<int32_t> results(kernel.results().begin(), kernel.results().end());
  std::set<int32_t> epilogue;
  for (const program::ElementwiseStep &step : kernel.epilogue())
    if (step.operand() >= 0)
      epilogue.insert(step.operand());
  auto isKernelBuffer = [&](int32_t id) {
    return operands.count(id) || results.count(id) || epilogue.count(id);
  };
  for (int s = 0; s < kernel.cuda_size(); ++s) {
    const program::CudaStep &step = kernel.cuda(s);
    std::string what = "CUDA step " + std::to_string(s);
    if (step.has_launch()) {
      const program::CudaLaunch &launch = step.launch();
      if (launch.function().empty())
        return Status::error(what + " launches no function");
      if (launch.grid_size() != 3 || launch.block_size() != 3)
        return Status::error(what + " (" + launch.function() +
                             ") needs 3 grid and 3 block dimensions");
      for (uint32_t d : launch.grid())
        if (d == 0)
          return Status::error(what + " (" + launch.function() +
                               ") has an empty grid");
      for (uint32_t d : launch.block())
        if (d == 0)
          return Status::error(what + " (" + launch.function() +
                               ") has an empty block");
      for (int32_t id : launch.arguments())
        if (!isKernelBuffer(id))
          return Status::error(what + " (" + launch.function() +
                               ") passes buffer " + std::to_string(id) +
                               ", which is not an operand or result of the "
                               "kernel");
      continue;
    }
    if (!step.has_matmul())
      return Status::error(what + " is empty");
    const program::CublasLtMatmul &mm = step.matmul();
    if (!operands.count(mm.a()) || !operands.count(mm.b()) ||
        !results.count(mm.d()) ||
        (mm.bias() != -1 && !operands.count(mm.bias())) ||
        (mm.c() != -1 && !operands.count(mm.c()) && !epilogue.count(mm.c())))
      return Status::error(what + " (cuBLASLt matmul) names a buffer that is "
                                  "not an operand or result of the kernel in "
                                  "its role");
    if (mm.m() < 1 || mm.n() < 1 || mm.k() < 1 || mm.batch() < 1 ||
        mm.stride_a() < 0 || mm.stride_b() < 0 || mm.stride_d() < 0)
      return Status::error(what + " (cuBLASLt matmul) has invalid sizes or "
                                  "strides");
    auto covers = [&](int32_t id, int64_t stride, int64_t rows, int64_t columns,
                      const char *name) -> Status {
      const BufferInfo &info = buffers[size_t(id)];
      int64_t matrix, last, extent;
      uint64_t elements = info.bytes / dtypeSize(info.dtype);
      if (__builtin_mul_overflow(rows, columns, &matrix) ||
          __builtin_mul_overflow(mm.batch() - 1, stride, &last) ||
          __builtin_add_overflow(last, matrix, &extent) ||
          uint64_t(extent) > elements)
        return Status::error(what + " (cuBLASLt matmul): " + name + " (" +
                             typeString(info.dtype, info.shape) +
                             ") is smaller than the call reads or writes");
      return Status::ok();
    };
    PARTITA_RETURN_IF_ERROR(covers(mm.a(), mm.stride_a(), mm.m(), mm.k(), "a"));
    PARTITA_RETURN_IF_ERROR(covers(mm.b(), mm.stride_b(), mm.k(), mm.n(), "b"));
    PARTITA_RETURN_IF_ERROR(covers(mm.d(), mm.stride_d(), mm.m(), mm.n(), "d"));
    if (mm.c() != -1)
      PARTITA_RETURN_IF_ERROR(
          covers(mm.c(), mm.stride_d(), mm.m(), mm.n(), "c"));
    if (mm.bias() != -1)
      PARTITA_RETURN_IF_ERROR(covers(mm.bias(), 0, 1, mm.n(), "the bias"));
  }
  return Status::ok();
}

Status RankVerifier::checkKernel(int index, const program::Kernel &kernel) {
  const auto &specs = opSpecs();
  auto found = specs.find(kernel.op());
  if (found == specs.end())
    return Status::error("unknown kernel op '" + kernel.op() + "'");
  const OpSpec &spec = found->second;
  const OpInfo &info = *spec.info;
  int operands = kernel.operands_size(), results = kernel.results_size();
  if (operands < info.minOperands ||
      (info.maxOperands >= 0 && operands > info.maxOperands))
    return Status::error("expected " +
                         countRange(info.minOperands, info.maxOperands) +
                         " operands, got " + std::to_string(operands));
  if (results < info.minResults ||
      (info.maxResults >= 0 && results > info.maxResults))
    return Status::error("expected " +
                         countRange(info.minResults, info.maxResults) +
                         " results, got " + std::to_string(results));
  for (int32_t id : kernel.operands())
    PARTITA_RETURN_IF_ERROR(requireId(id, "operand"));
  for (int32_t id : kernel.results())
    PARTITA_RETURN_IF_ERROR(requireId(id, "result"));
  PARTITA_RETURN_IF_ERROR(checkAttributes(kernel.attributes(), spec.attrs));
  PARTITA_RETURN_IF_ERROR(checkKernelShapes(kernel, spec));

  const BufferInfo &first = buffers[size_t(kernel.results(0))];
  for (int s = 0; s < kernel.epilogue_size(); ++s) {
    const program::ElementwiseStep &step = kernel.epilogue(s);
    std::string what =
        "epilogue step " + std::to_string(s) + " (" + step.op() + ")";
    bool binary = false;
    if (!isEpilogueOp(step.op(), binary))
      return Status::error(what + ": not an elementwise op an epilogue can "
                                  "apply");
    if (!binary && step.operand() != -1)
      return Status::error(what + ": a unary step has operand buffer " +
                           std::to_string(step.operand()) + ", expected -1");
    if (binary) {
      PARTITA_RETURN_IF_ERROR(requireId(step.operand(), "the step's operand"));
      const BufferInfo &operand = buffers[size_t(step.operand())];
      if (!broadcastsTo(operand.shape, first.shape))
        return Status::error(
            what + ": its operand " + shapeString(operand.shape) +
            " does not broadcast to the result " + shapeString(first.shape));
    }
    Status attrs =
        checkAttributes(step.attributes(), opSpecs().at(step.op()).attrs);
    if (!attrs)
      return Status::error(what + ": " + attrs.message());
    if (step.op() == "compare")
      attrs = checkOneOf(step.attributes(), "direction",
                         {"eq", "ne", "lt", "le", "gt", "ge"});
    else if (step.op() == "gelu")
      attrs = checkOneOf(step.attributes(), "approximation", {"none", "tanh"});
    if (attrs && step.op() == "compare" &&
        !step.attributes().count("direction"))
      attrs = Status::error("missing attribute 'direction'");
    if (!attrs)
      return Status::error(what + ": " + attrs.message());
  }
  PARTITA_RETURN_IF_ERROR(checkCudaSteps(kernel));
  if (!dataFlow)
    return Status::ok();

  // Data flow: every operand holds a value, no result shares bytes with an
  // operand or another result (but kv_cache_write's result may be its cache
  // operand's bytes exactly: it writes the cache in place), and the results
  // are written.
  std::vector<int32_t> reads(kernel.operands().begin(),
                             kernel.operands().end());
  for (const program::ElementwiseStep &step : kernel.epilogue())
    if (step.operand() >= 0)
      reads.push_back(step.operand());
  for (int32_t id : reads)
    PARTITA_RETURN_IF_ERROR(read(id));
  for (int r = 0; r < results; ++r) {
    int32_t id = kernel.results(r);
    PARTITA_RETURN_IF_ERROR(checkWritable(id));
    const Region &region = buffers[size_t(id)].region;
    for (size_t i = 0; i < reads.size(); ++i) {
      int32_t operand = reads[i];
      const Region &read = buffers[size_t(operand)].region;
      if (kernel.op() == "kv_cache_write" && i == 0 && region == read)
        continue;
      if (region.overlaps(read))
        return Status::error("result " + bufferString(id) +
                             " shares bytes with operand " +
                             bufferString(operand));
    }
    for (int other = 0; other < r; ++other)
      if (region.overlaps(buffers[size_t(kernel.results(other))].region))
        return Status::error("results " + bufferString(kernel.results(other)) +
                             " and " + bufferString(id) + " share bytes");
  }
  for (int32_t id : kernel.results())
    commit(id, index);
  return Status::ok();
}

Status RankVerifier::checkCollective(int index,
                                     const program::Collective &collective) {
  CollectiveKind kind;
  if (!collectiveKindOf(collective.kind(), kind))
    return Status::error("unknown collective kind " +
                         std::to_string(int(collective.kind())));
  Reduction reduction;
  if ((kind == CollectiveKind::AllReduce ||
       kind == CollectiveKind::ReduceScatter) &&
      !parseReduction(collective.reduction(), reduction))
    return Status::error("unknown reduction '" + collective.reduction() + "'");
  PARTITA_RETURN_IF_ERROR(requireId(collective.operand(), "operand"));
  PARTITA_RETURN_IF_ERROR(requireId(collective.result(), "result"));
  const BufferInfo &in = buffers[size_t(collective.operand())];
  const BufferInfo &out = buffers[size_t(collective.result())];
  Group group(collective.group().begin(), collective.group().end());
  size_t position;
  PARTITA_RETURN_IF_ERROR(
      checkCollectiveShapes(callOf(collective), {nullptr, in.dtype, in.shape},
                            {nullptr, out.dtype, out.shape}, group,
                            program.rank(), program.world_size(), position));
  bool dispatch = kind == CollectiveKind::Dispatch ||
                  kind == CollectiveKind::DispatchReturn;
  if (dispatch) {
    if (collective.async())
      return Status::error("a dispatch has no asynchronous form");
    PARTITA_RETURN_IF_ERROR(
        requireId(collective.destinations(), "the destinations"));
    PARTITA_RETURN_IF_ERROR(requireId(collective.counts(), "the counts"));
    const BufferInfo &destinations = buffers[size_t(collective.destinations())];
    const BufferInfo &counts = buffers[size_t(collective.counts())];
    PARTITA_RETURN_IF_ERROR(checkDispatchBuffers(
        callOf(collective), {nullptr, in.dtype, in.shape},
        {nullptr, out.dtype, out.shape},
        {nullptr, destinations.dtype, destinations.shape},
        {nullptr, counts.dtype, counts.shape}, group, program.rank()));
  }
  if (!dataFlow)
    return Status::ok();

  if (collective.async())
    PARTITA_RETURN_IF_ERROR(checkNewToken(collective.token()));
  PARTITA_RETURN_IF_ERROR(read(collective.operand()));
  PARTITA_RETURN_IF_ERROR(checkWritable(collective.result()));
  if (dispatch) {
    PARTITA_RETURN_IF_ERROR(read(collective.destinations()));
    if (kind == CollectiveKind::Dispatch) {
      PARTITA_RETURN_IF_ERROR(checkWritable(collective.counts()));
      commit(collective.counts(), index);
    } else {
      PARTITA_RETURN_IF_ERROR(read(collective.counts()));
    }
  }
  if (!collective.async()) {
    commit(collective.result(), index);
    return Status::ok();
  }
  inFlight.push_back(
      {collective.token(), index, collective.operand(), collective.result()});
  return Status::ok();
}

Status RankVerifier::checkPointToPoint(int index,
                                       const program::PointToPoint &p2p) {
  bool send = p2p.kind() == program::PointToPoint::SEND;
  if (!send && p2p.kind() != program::PointToPoint::RECV)
    return Status::error("unknown point-to-point kind " +
                         std::to_string(int(p2p.kind())));
  PARTITA_RETURN_IF_ERROR(requireId(p2p.buffer(), send ? "the sent"
                                                       : "the "
                                                         "received"));
  if (p2p.peer() < 0 || p2p.peer() >= program.world_size())
    return Status::error("peer " + std::to_string(p2p.peer()) +
                         " is not a rank of the world of " +
                         std::to_string(program.world_size()));
  if (p2p.peer() == program.rank())
    return Status::error(std::string(send ? "sends to" : "receives from") +
                         " itself");
  if (!dataFlow)
    return Status::ok();
  if (p2p.async())
    PARTITA_RETURN_IF_ERROR(checkNewToken(p2p.token()));
  if (send)
    PARTITA_RETURN_IF_ERROR(read(p2p.buffer()));
  else
    PARTITA_RETURN_IF_ERROR(checkWritable(p2p.buffer()));
  if (!p2p.async()) {
    if (!send)
      commit(p2p.buffer(), index);
    return Status::ok();
  }
  inFlight.push_back(
      {p2p.token(), index, send ? p2p.buffer() : -1, send ? -1 : p2p.buffer()});
  return Status::ok();
}

Status RankVerifier::checkNewToken(int32_t token) const {
  for (const InFlight &transfer : inFlight)
    if (transfer.token == token)
      return Status::error("starts token " + std::to_string(token) +
                           " again before its wait");
  return Status::ok();
}

Status RankVerifier::checkWait(int index, const program::Wait &wait) {
  auto it = std::find_if(
      inFlight.begin(), inFlight.end(),
      [&](const InFlight &transfer) { return transfer.token == wait.token(); });
  if (it == inFlight.end())
    return Status::error("waits for token " + std::to_string(wait.token()) +
                         ", which no pending asynchronous instruction "
                         "started");
  InFlight done = *it;
  inFlight.erase(it);
  if (done.writing >= 0)
    commit(done.writing, index);
  return Status::ok();
}

Status RankVerifier::checkInstruction(int index) {
  const Instruction &instruction = program.instructions(index);
  switch (instruction.op_case()) {
  case Instruction::kKernel:
    return checkKernel(index, instruction.kernel());
  case Instruction::kCollective:
    return checkCollective(index, instruction.collective());
  case Instruction::kP2P:
    return checkPointToPoint(index, instruction.p2p());
  case Instruction::kWait:
    return dataFlow ? checkWait(index, instruction.wait()) : Status::ok();
  default:
    return Status::error("empty instruction");
  }
}

Status RankVerifier::checkEnd() const {
  if (!inFlight.empty())
    return Status::error(inFlightString(inFlight.front()) +
                         " is never waited for");
  for (const program::Binding &binding : program.outputs()) {
    const BufferInfo &output = buffers[size_t(binding.buffer())];
    std::string what = "output '" + binding.name() + "' (" +
                       bufferString(binding.buffer()) + ")";
    if (writtenBy[size_t(output.root)] < 0)
      return Status::error(what + " is never written");
    PARTITA_RETURN_IF_ERROR(
        checkHolds(output.region, output.root, "returns " + what));
  }
  return Status::ok();
}

Status RankVerifier::run() {
  std::string rank = "rank " + std::to_string(program.rank()) + ": ";
  auto prefixed = [&](Status status) {
    return status ? status : Status::error(rank + status.message());
  };
  PARTITA_RETURN_IF_ERROR(prefixed(checkHeader()));
  PARTITA_RETURN_IF_ERROR(prefixed(checkBuffers()));
  PARTITA_RETURN_IF_ERROR(prefixed(checkBindings()));
  for (int index = 0; index < program.instructions_size(); ++index) {
    Status status = checkInstruction(index);
    if (!status)
      return Status::error(instructionString(program, index) + ": " +
                           status.message());
  }
  return dataFlow ? prefixed(checkEnd()) : Status::ok();
}

//===----------------------------------------------------------------------===//
// All ranks
//===----------------------------------------------------------------------===//

/// A communication instruction of one rank, in program order.
struct Event {
  int32_t rank;
  int index;
  const Instruction *instruction;
  /// Point to point: the peer; collectives: the group.
  int32_t peer = -1;
  const Group *group = nullptr;
  /// The buffer's type (p2p), the operand's and the result's (collectives).
  DType dtype = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape, resultShape;
};

const program::TensorType &bufferType(const program::Program &program,
                                      int32_t id) {
  return program.buffers(id).type();
}

class WorldVerifier {
public:
  explicit WorldVerifier(const std::vector<const program::Program *> &programs)
      : programs(programs) {}
  Status run();

private:
  void collect();
  Status matchTransfers() const;
  Status matchCollectives() const;
  Status simulate() const;

  std::string at(const Event &event) const {
    return instructionString(*programs[size_t(event.rank)], event.index);
  }
  std::string transferString(const Event &event) const;
  std::string collectiveString(const Event &event) const;

  const std::vector<const program::Program *> &programs;
  /// Every rank's communication, in program order.
  std::vector<std::vector<Event>> events;
  /// The groups of the world, each once: events point into this set.
  std::set<Group> groups;
  /// (sender, receiver) -> the sender's sends, and the receiver's receives.
  std::map<std::pair<int32_t, int32_t>, std::vector<const Event *>> sends,
      recvs;
  /// group -> member -> its collectives over the group.
  std::map<Group, std::map<int32_t, std::vector<const Event *>>> collectives;
};

void WorldVerifier::collect() {
  events.resize(programs.size());
  for (size_t r = 0; r < programs.size(); ++r) {
    const program::Program &program = *programs[r];
    for (int index = 0; index < program.instructions_size(); ++index) {
      const Instruction &instruction = program.instructions(index);
      Event event{int32_t(r), index, &instruction};
      if (instruction.has_p2p()) {
        const program::PointToPoint &p2p = instruction.p2p();
        event.peer = p2p.peer();
        event.dtype = bufferType(program, p2p.buffer()).dtype();
        event.shape = shapeOf(bufferType(program, p2p.buffer()));
      } else if (instruction.has_collective()) {
        const program::Collective &collective = instruction.collective();
        event.group = &*groups
                            .insert(Group(collective.group().begin(),
                                          collective.group().end()))
                            .first;
        event.dtype = bufferType(program, collective.operand()).dtype();
        event.shape = shapeOf(bufferType(program, collective.operand()));
        event.resultShape = shapeOf(bufferType(program, collective.result()));
      } else {
        continue;
      }
      events[r].push_back(std::move(event));
    }
  }
  for (const std::vector<Event> &rankEvents : events)
    for (const Event &event : rankEvents) {
      if (event.group) {
        collectives[*event.group][event.rank].push_back(&event);
        continue;
      }
      bool send =
          event.instruction->p2p().kind() == program::PointToPoint::SEND;
      if (send)
        sends[{event.rank, event.peer}].push_back(&event);
      else
        recvs[{event.peer, event.rank}].push_back(&event);
    }
}

std::string WorldVerifier::transferString(const Event &event) const {
  const program::PointToPoint &p2p = event.instruction->p2p();
  bool send = p2p.kind() == program::PointToPoint::SEND;
  return at(event) + (send ? " sends " : " receives ") +
         typeString(event.dtype, event.shape) + (send ? " to" : " from") +
         " rank " + std::to_string(event.peer) + " with tag " +
         std::to_string(p2p.tag());
}

std::string WorldVerifier::collectiveString(const Event &event) const {
  return at(event) + " calls " +
         callOf(event.instruction->collective())
             .describe({nullptr, event.dtype, event.shape},
                       {nullptr, event.dtype, event.resultShape}, *event.group);
}

Status WorldVerifier::matchTransfers() const {
  static const std::vector<const Event *> none;
  std::set<std::pair<int32_t, int32_t>> pairs;
  for (const auto &entry : sends)
    pairs.insert(entry.first);
  for (const auto &entry : recvs)
    pairs.insert(entry.first);
  auto matches = [](const Event &a, const Event &b) {
    return a.instruction->p2p().tag() == b.instruction->p2p().tag() &&
           a.dtype == b.dtype && a.shape == b.shape;
  };
  // Pairs whose counts differ first: they say most plainly what is wrong
  // (a receive turned into a send leaves one over on each side).
  for (bool counts : {true, false}) {
    for (const auto &pair : pairs) {
      auto s = sends.find(pair), r = recvs.find(pair);
      const std::vector<const Event *> &sent =
          s == sends.end() ? none : s->second;
      const std::vector<const Event *> &received =
          r == recvs.end() ? none : r->second;
      if (counts == (sent.size() == received.size()))
        continue;
      size_t i = 0;
      while (i < sent.size() && i < received.size() &&
             matches(*sent[i], *received[i]))
        ++i;
      if (i == sent.size() && i == received.size())
        continue;
      std::string sender = "rank " + std::to_string(pair.first);
      std::string receiver = "rank " + std::to_string(pair.second);
      auto plural = [](size_t n) {
        return std::to_string(n) + (n == 1 ? " message" : " messages");
      };
      std::string text = counts ? sender + " sends " + plural(sent.size()) +
                                      " to " + receiver + ", but " + receiver +
                                      " receives " + plural(received.size()) +
                                      " from " + sender
                                : "the messages from " + sender + " to " +
                                      receiver + " do not match";
      text += ": the " + ordinal(i + 1) + " ";
      if (i < sent.size() && i < received.size())
        return Status::error(text +
                             "does not match: " + transferString(*sent[i]) +
                             "; " + transferString(*received[i]));
      if (i < sent.size())
        return Status::error(text +
                             "has no receive: " + transferString(*sent[i]));
      return Status::error(text +
                           "has no send: " + transferString(*received[i]));
    }
  }
  return Status::ok();
}

Status WorldVerifier::matchCollectives() const {
  static const std::vector<const Event *> none;
  auto matches = [](const Event &a, const Event &b) {
    CollectiveCall x = callOf(a.instruction->collective());
    CollectiveCall y = callOf(b.instruction->collective());
    bool reduces = x.kind == CollectiveKind::AllReduce ||
                   x.kind == CollectiveKind::ReduceScatter;
    bool dims = x.kind == CollectiveKind::AllGather ||
                x.kind == CollectiveKind::ReduceScatter ||
                x.kind == CollectiveKind::AllToAll;
    return x.kind == y.kind && (!reduces || x.reduction == y.reduction) &&
           (!dims || x.dim == y.dim) &&
           (x.kind != CollectiveKind::AllToAll || x.concatDim == y.concatDim) &&
           (x.kind != CollectiveKind::CollectivePermute ||
            x.shift == y.shift) &&
           a.dtype == b.dtype && a.shape == b.shape &&
           a.resultShape == b.resultShape;
  };
  // As for transfers: members whose counts differ first. Every member is
  // compared with the group's first.
  for (bool counts : {true, false}) {
    for (const auto &[group, byMember] : collectives) {
      int32_t first = group[0];
      auto found = byMember.find(first);
      const std::vector<const Event *> &reference =
          found == byMember.end() ? none : found->second;
      std::string where = " over group " + groupString(group);
      for (int32_t member : group) {
        auto it = byMember.find(member);
        const std::vector<const Event *> &calls =
            it == byMember.end() ? none : it->second;
        if (counts == (calls.size() == reference.size()))
          continue;
        size_t i = 0;
        while (i < calls.size() && i < reference.size() &&
               matches(*reference[i], *calls[i]))
          ++i;
        if (i == calls.size() && i == reference.size())
          continue;
        std::string a = "rank " + std::to_string(first);
        std::string b = "rank " + std::to_string(member);
        std::string text = counts ? a + " makes " +
                                        std::to_string(reference.size()) +
                                        " collectives" + where + ", but " + b +
                                        " makes " + std::to_string(calls.size())
                                  : "the collectives" + where + " do not match";
        text += ": the " + ordinal(i + 1) + " ";
        if (i < calls.size() && i < reference.size())
          return Status::error(
              text + "does not match: " + collectiveString(*reference[i]) +
              "; " + collectiveString(*calls[i]));
        if (i < reference.size())
          return Status::error(text + "has no counterpart on " + b + ": " +
                               collectiveString(*reference[i]));
        return Status::error(text + "has no counterpart on " + a + ": " +
                             collectiveString(*calls[i]));
      }
    }
  }
  return Status::ok();
}

Status WorldVerifier::simulate() const {
  size_t world = programs.size();
  std::vector<size_t> next(world, 0);
  // Messages sent and received so far per (sender, receiver).
  std::map<std::pair<int32_t, int32_t>, size_t> sent, received;
  // Members waiting at the current collective of each group.
  std::map<const Group *, size_t> arrived;
  std::deque<int32_t> runnable;
  std::vector<bool> queued(world, true), waiting(world, false);
  for (size_t r = 0; r < world; ++r)
    runnable.push_back(int32_t(r));
  auto wake = [&](int32_t rank) {
    if (!queued[size_t(rank)]) {
      queued[size_t(rank)] = true;
      runnable.push_back(rank);
    }
  };
  while (!runnable.empty()) {
    int32_t rank = runnable.front();
    runnable.pop_front();
    queued[size_t(rank)] = false;
    const std::vector<Event> &mine = events[size_t(rank)];
    while (next[size_t(rank)] < mine.size()) {
      const Event &event = mine[next[size_t(rank)]];
      if (event.group) {
        // Arrive once; the last member to arrive moves everyone on.
        if (waiting[size_t(rank)])
          break;
        size_t &count = arrived[event.group];
        if (++count < event.group->size()) {
          waiting[size_t(rank)] = true;
          break;
        }
        count = 0;
        for (int32_t member : *event.group) {
          waiting[size_t(member)] = false;
          ++next[size_t(member)];
          if (member != rank)
            wake(member);
        }
        continue;
      }
      bool send =
          event.instruction->p2p().kind() == program::PointToPoint::SEND;
      if (send) {
        ++sent[{rank, event.peer}];
        wake(event.peer);
        ++next[size_t(rank)];
        continue;
      }
      auto key = std::make_pair(event.peer, rank);
      if (sent[key] <= received[key])
        break;
      ++received[key];
      ++next[size_t(rank)];
    }
  }
  std::string stuck;
  int shown = 0;
  for (size_t r = 0; r < world; ++r) {
    if (next[r] >= events[r].size())
      continue;
    if (shown++ == 4) {
      stuck += "; ...";
      break;
    }
    const Event &event = events[r][next[r]];
    stuck += (stuck.empty() ? "" : "; ") +
             (event.group ? collectiveString(event) : transferString(event));
  }
  if (!stuck.empty())
    return Status::error("the ranks' communication deadlocks: each of these "
                         "waits for another: " +
                         stuck);
  return Status::ok();
}

Status WorldVerifier::run() {
  for (size_t r = 0; r < programs.size(); ++r)
    if (programs[r]->rank() != int32_t(r) ||
        programs[r]->world_size() != int32_t(programs.size()))
      return Status::error("program " + std::to_string(r) + " is for rank " +
                           std::to_string(programs[r]->rank()) + " of " +
                           std::to_string(programs[r]->world_size()) +
                           ", not rank " + std::to_string(r) + " of " +
                           std::to_string(programs.size()));
  collect();
  PARTITA_RETURN_IF_ERROR(matchTransfers());
  PARTITA_RETURN_IF_ERROR(matchCollectives());
  return simulate();
}

} // namespace

Status partita::runtime::verifyProgram(const program::Program &program,
                                       const WeightStore *weights) {
  RankVerifier verifier(program, weights, /*dataFlow=*/true);
  return verifier.run();
}

Status partita::runtime::verifyPrograms(
    const std::vector<const program::Program *> &programs,
    const WeightStore *weights) {
  // Structure first, everywhere: the communication check reads buffer ids,
  // peers and groups. Then the ranks together, so that a transfer turned
  // around is reported with both of its ranks rather than as the data-flow
  // error it also is on one of them. Then each rank's data flow.
  for (const program::Program *program : programs) {
    RankVerifier structure(*program, weights, /*dataFlow=*/false);
    PARTITA_RETURN_IF_ERROR(structure.run());
  }
  PARTITA_RETURN_IF_ERROR(verifyCommunication(programs));
  for (const program::Program *program : programs)
    PARTITA_RETURN_IF_ERROR(verifyProgram(*program, weights));
  return Status::ok();
}

Status partita::runtime::verifyCommunication(
    const std::vector<const program::Program *> &programs) {
  WorldVerifier verifier(programs);
  return verifier.run();
}
