//===- NNToExec.cpp - nn functions to exec programs -----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Three steps over the function's ops, in program order:
//  1. fusion: an elementwise op whose operand has no other use and whose
//     result has that operand's type joins the producing kernel's epilogue;
//  2. buffers: inputs and outputs are caller memory, constants are weights
//     or inline data, reshapes are views, everything else is an activation;
//  3. the buffer plan: each activation lives from the instruction that
//     writes it to the last one that reads it (through views too), and
//     activations whose lives do not overlap share arena bytes.
//
// A partitioned (SPMD) function becomes the program of one rank here: its
// dist collectives become collective instructions over the rank's groups,
// dist.axis_index a constant, and dist.all_slice of a constant the rank's
// block of the weight (other slices a slice kernel).
//
//===----------------------------------------------------------------------===//

#include "partita/Conversion/NNToExec/NNToExec.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/SHA256.h"

#include <algorithm>
#include <cstring>
#include <functional>

using namespace mlir;
using namespace mlir::partita;
namespace program = ::partita::program;

program::DType mlir::partita::getExecDType(Type type) {
  if (type.isF32())
    return program::F32;
  if (type.isF16())
    return program::F16;
  if (type.isBF16())
    return program::BF16;
  if (type.isInteger(64))
    return program::I64;
  if (type.isInteger(32))
    return program::I32;
  if (type.isInteger(8))
    return program::I8;
  if (type.isInteger(1))
    return program::BOOL;
  return program::DTYPE_UNSPECIFIED;
}

namespace {

constexpr uint64_t kArenaAlignment = 64;

size_t elementBytes(Type type) {
  return type.isInteger(1) ? 1 : type.getIntOrFloatBitWidth() / 8;
}

/// The largest tensor an exec program holds: 2^48 bytes (256 TiB), what a
/// 64-bit process on x86-64 or AArch64 can address. With it, and with at
/// most 2^62 bytes for all of a rank's tensors together, no size, stride,
/// arena offset or sum that the lowering, the runtime or the CUDA target
/// computes in int64_t can overflow.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 48;
constexpr int64_t kMaxRankBytes = int64_t(1) << 62;

/// Whether the bytes of the static `type`, counting every dimension of 0 as
/// 1 (so that every stride is bounded too), are at most kMaxTensorBytes;
/// its bytes then go to `bytes`.
bool boundedBytes(RankedTensorType type, int64_t &bytes) {
  int64_t bound = static_cast<int64_t>(
      std::max<size_t>(1, elementBytes(type.getElementType())));
  bytes = bound;
  for (int64_t d : type.getShape()) {
    if (d < 0 || llvm::MulOverflow(bound, std::max<int64_t>(d, 1), bound) ||
        bound > kMaxTensorBytes)
      return false;
    bytes *= d; // At most bound.
  }
  return true;
}

int64_t byteSize(const program::TensorType &type) {
  int64_t n = 1;
  for (int64_t d : type.shape())
    n *= d;
  switch (type.dtype()) {
  case program::F32:
  case program::I32:
    return n * 4;
  case program::F16:
  case program::BF16:
    return n * 2;
  case program::I64:
    return n * 8;
  default:
    return n;
  }
}

/// An inline dense value as the little-endian bytes the runtime reads (one
/// byte per bool, splats expanded).
std::vector<char> serialize(DenseElementsAttr attr) {
  Type element = attr.getElementType();
  size_t width = elementBytes(element);
  std::vector<char> bytes(attr.getNumElements() * width);
  int64_t i = 0;
  if (isa<FloatType>(element)) {
    for (const APFloat &v : attr.getValues<APFloat>()) {
      uint64_t bits = v.bitcastToAPInt().getZExtValue();
      std::memcpy(bytes.data() + i++ * width, &bits, width);
    }
  } else {
    for (const APInt &v : attr.getValues<APInt>()) {
      uint64_t bits = width == 1 && element.isInteger(1) ? v.getBoolValue()
                                                         : v.getZExtValue();
      std::memcpy(bytes.data() + i++ * width, &bits, width);
    }
  }
  return bytes;
}

/// The weight name of a constant that has none of its own (one folded or
/// built by the compiler): a hash of its type and bytes. Each rank's program
/// is lowered alone, so a per-program counter gave different constants of
/// two pipeline stages one name; with the hash equal ones share one copy.
std::string constantWeightName(RankedTensorType type, ArrayRef<char> bytes) {
  std::string header;
  llvm::raw_string_ostream(header) << type;
  llvm::SHA256 hash;
  hash.update(header);
  hash.update(ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(bytes.data()),
                                bytes.size()));
  return "constant." +
         llvm::toHex(hash.final(), /*LowerCase=*/true).substr(0, 16);
}

std::string locationString(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (std::string s = locationString(inner); !s.empty())
        return s;
  return "";
}

/// The op name of the kernel an nn op becomes ("matmul" for nn.matmul).
StringRef kernelName(Operation *op) { return op->getName().stripDialect(); }

bool isFusibleElementwise(Operation *op) {
  return isa<nn::AddOp, nn::SubOp, nn::MulOp, nn::DivOp, nn::PowOp, nn::MaxOp,
             nn::MinOp, nn::AndOp, nn::OrOp, nn::XorOp, nn::NegOp, nn::AbsOp,
             nn::ExpOp, nn::LogOp, nn::SqrtOp, nn::RsqrtOp, nn::ReciprocalOp,
             nn::TanhOp, nn::ErfOp, nn::SinOp, nn::CosOp, nn::SigmoidOp,
             nn::ReluOp, nn::SiluOp, nn::NotOp, nn::GeluOp>(op);
}

/// Ops that become a kernel instruction (everything but constants and
/// reshapes, which become buffers).
bool isKernel(Operation *op) {
  return !isa<nn::ConstantOp, nn::ReshapeOp>(op) && op->getDialect() &&
         op->getDialect()->getNamespace() ==
             nn::NNDialect::getDialectNamespace();
}

program::Attribute intAttr(int64_t v) {
  program::Attribute a;
  a.set_i(v);
  return a;
}
program::Attribute floatAttr(double v) {
  program::Attribute a;
  a.set_f(v);
  return a;
}
program::Attribute boolAttr(bool v) {
  program::Attribute a;
  a.set_b(v);
  return a;
}
program::Attribute stringAttr(StringRef v) {
  program::Attribute a;
  a.set_s(v.str());
  return a;
}
program::Attribute intsAttr(ArrayRef<int64_t> v) {
  program::Attribute a;
  for (int64_t x : v)
    a.mutable_ints()->add_values(x);
  return a;
}

/// The attributes docs/exec-program.md gives each kernel.
void setAttributes(Operation *op,
                   google::protobuf::Map<std::string, program::Attribute> &m) {
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](nn::CompareOp o) {
        m["direction"] =
            stringAttr(nn::stringifyCompareDirection(o.getDirection()));
      })
      .Case([&](nn::GeluOp o) {
        m["approximation"] =
            stringAttr(nn::stringifyGeluApproximation(o.getApproximation()));
      })
      .Case([&](nn::ReduceOp o) {
        m["kind"] = stringAttr(nn::stringifyReduceKind(o.getKind()));
        m["axes"] = intsAttr(o.getAxes());
        m["keepdims"] = boolAttr(o.getKeepdims());
      })
      .Case<nn::SoftmaxOp, nn::LogSoftmaxOp>(
          [&](auto o) { m["axis"] = intAttr(o.getAxis()); })
      .Case([&](nn::CumsumOp o) {
        m["axis"] = intAttr(o.getAxis());
        m["exclusive"] = boolAttr(o.getExclusive());
        m["reverse"] = boolAttr(o.getReverse());
      })
      .Case([&](nn::LayerNormOp o) {
        m["axis"] = intAttr(o.getAxis());
        m["epsilon"] = floatAttr(o.getEpsilon().convertToDouble());
        m["has_scale"] = boolAttr(static_cast<bool>(o.getScale()));
        m["has_bias"] = boolAttr(static_cast<bool>(o.getBias()));
      })
      .Case([&](nn::RmsNormOp o) {
        m["axis"] = intAttr(o.getAxis());
        m["epsilon"] = floatAttr(o.getEpsilon().convertToDouble());
        m["has_scale"] = boolAttr(static_cast<bool>(o.getScale()));
      })
      .Case([&](nn::MatmulOp o) {
        m["has_bias"] = boolAttr(static_cast<bool>(o.getBias()));
      })
      .Case([&](nn::AttentionOp o) {
        m["causal"] = boolAttr(o.getCausal());
        m["scale"] = floatAttr(o.getEffectiveScale());
        m["has_mask"] = boolAttr(static_cast<bool>(o.getMask()));
      })
      .Case([&](nn::AttentionPartialOp o) {
        m["scale"] = floatAttr(o.getEffectiveScale());
        m["has_mask"] = boolAttr(static_cast<bool>(o.getMask()));
        m["has_positions"] = boolAttr(static_cast<bool>(o.getQueryPositions()));
      })
      .Case([&](nn::RopeOp o) {
        m["interleaved"] = boolAttr(o.getInterleaved());
      })
      .Case([&](nn::GatherOp o) { m["axis"] = intAttr(o.getAxis()); })
      .Case([&](nn::TransposeOp o) {
        m["permutation"] = intsAttr(o.getPermutation());
      })
      .Case([&](nn::SliceOp o) {
        m["start"] = intsAttr(o.getStart());
        m["limit"] = intsAttr(o.getLimit());
        m["stride"] = intsAttr(o.getStride());
      })
      .Case<nn::ConcatOp, nn::SplitOp>(
          [&](auto o) { m["axis"] = intAttr(o.getAxis()); });
}

/// Where a rank sits in the mesh of a partitioned function.
class RankPlace {
public:
  RankPlace() = default;
  RankPlace(dist::MeshOp mesh, int64_t rank) : mesh(mesh) {
    sizes.assign(mesh.getAxisSizes().begin(), mesh.getAxisSizes().end());
    coords.resize(sizes.size());
    for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
      coords[i] = rank % sizes[i];
      rank /= sizes[i];
    }
  }

  /// The rank's coordinate on `axis`; 0 when the mesh has no such axis.
  int64_t coordinate(StringRef axis) const {
    if (!mesh)
      return 0;
    std::optional<unsigned> i = mesh.getAxisIndex(axis);
    return i ? coords[*i] : 0;
  }

  /// The global rank whose coordinate on `axis` is `value`, the others
  /// equal this rank's.
  int32_t peer(StringRef axis, int64_t value) const {
    SmallVector<int64_t> c(coords);
    c[*mesh.getAxisIndex(axis)] = value;
    int64_t r = 0;
    for (size_t i = 0; i < sizes.size(); ++i)
      r = r * sizes[i] + c[i];
    return static_cast<int32_t>(r);
  }

  /// The rank's position in the group spanned by `axes`.
  int64_t position(ArrayRef<StringRef> axes) const {
    int64_t p = 0;
    for (StringRef axis : axes) {
      unsigned i = *mesh.getAxisIndex(axis);
      p = p * sizes[i] + coords[i];
    }
    return p;
  }

  /// The global ranks of the rank's group spanned by `axes`, in group order.
  SmallVector<int32_t> group(ArrayRef<StringRef> axes) const {
    SmallVector<int64_t> c(coords);
    SmallVector<int32_t> ranks;
    std::function<void(unsigned)> visit = [&](unsigned k) {
      if (k == axes.size()) {
        int64_t r = 0;
        for (size_t i = 0; i < sizes.size(); ++i)
          r = r * sizes[i] + c[i];
        ranks.push_back(static_cast<int32_t>(r));
        return;
      }
      unsigned i = *mesh.getAxisIndex(axes[k]);
      for (int64_t v = 0; v < sizes[i]; ++v) {
        c[i] = v;
        visit(k + 1);
      }
    };
    visit(0);
    return ranks;
  }

private:
  // Op accessors are not const; the handle itself is.
  mutable dist::MeshOp mesh;
  SmallVector<int64_t> sizes, coords;
};

class Lowering {
public:
  Lowering(func::FuncOp func, const ExecLoweringOptions &options)
      : func(func), options(options) {}

  LogicalResult run(int rank, int worldSize);
  ExecProgram result;

private:
  /// A constant, or a rank's block of one, kept on the host until an
  /// instruction needs it as a buffer.
  struct HostData {
    std::string name;
    RankedTensorType type;
    ArrayRef<char> bytes;
  };

  LogicalResult deferConstant(nn::ConstantOp op);
  void emitTransfer(Operation *op, bool async = false, int32_t token = 0);
  void deferSlice(dist::AllSliceOp op);
  int32_t materialize(Value value);
  void emitCollective(Operation *op, bool async = false, int32_t token = 0);
  void emitSlice(dist::AllSliceOp op);
  ArrayRef<char> own(std::vector<char> bytes);

  /// One epilogue step an elementwise op became.
  struct Fused {
    Operation *head; // The kernel whose epilogue holds the step.
    Value input;     // The chain value it applies to.
  };

  void planFusion();
  /// The value of `condition` on this rank when it compares the rank's
  /// axis index with a constant (the guard that adds a bias on one member
  /// of a partial-sum group), else nothing.
  std::optional<bool> rankCondition(Value condition);
  /// Finds the `nn.where` ops this rank can decide (and the compares only
  /// they read): their result is the chosen operand, not a kernel.
  void planDecided(llvm::DenseMap<Value, unsigned> &outputIndex);
  /// The buffer of a decided where: a view of the chosen operand, or the
  /// chosen splat constant broadcast to the result.
  int32_t decideWhere(nn::WhereOp where);
  /// Refuses tensors above kMaxTensorBytes, and a rank whose tensors
  /// together exceed kMaxRankBytes, before any size is computed.
  LogicalResult checkSizes();
  int32_t addBuffer(RankedTensorType type, program::Buffer::Kind kind);
  int32_t addConstant(RankedTensorType type, DenseElementsAttr dense);
  /// Lists a weight of the program once (buffers may share one name).
  void addWeight(StringRef name, RankedTensorType type, ArrayRef<char> bytes);
  LogicalResult lowerConstant(nn::ConstantOp op);
  void emitKernel(Operation *op);
  void planArena();

  func::FuncOp func;
  const ExecLoweringOptions &options;
  program::Program &prog = result.program;
  llvm::DenseMap<Value, int32_t> bufferOf;
  llvm::DenseMap<Operation *, Fused> fused;
  /// Fused ops of each head, in order.
  llvm::DenseMap<Operation *, SmallVector<Operation *>> epilogueOf;
  /// Ops decided at lowering (planDecided): no instruction.
  llvm::DenseSet<Operation *> decided;
  llvm::DenseMap<Operation *, unsigned> position;
  /// Per buffer: the instruction that writes it and the last that reads it.
  std::vector<int64_t> firstWrite, lastRead;
  RankPlace place;
  llvm::DenseMap<Value, HostData> hostData;
  /// The names in result.weights.
  llvm::StringSet<> weightNames;
  /// The timeline: compute and communication clocks, and when each token's
  /// transfer ends.
  ClusterModel defaultCluster;
  double computeClock = 0, commClock = 0;
  llvm::DenseMap<int32_t, double> tokenEnd;
  const ClusterModel &cluster() const {
    return options.cluster ? *options.cluster : defaultCluster;
  }
  void timeCompute(StringRef name, double seconds);
  void timeCommunication(StringRef name, double seconds, bool async,
                         int32_t token);
  void timeWait(int32_t token);

  /// The ops this rank runs, in order: the function's, with the bodies of
  /// the pipeline stages it belongs to inlined and other stages left out.
  SmallVector<Operation *> ops;
  /// A stage result of this rank's stages: the value its body yields.
  llvm::DenseMap<Value, Value> yielded;
};

/// Whether every use of `value` is a dist.all_slice (so the whole tensor
/// need not be a buffer).
bool onlySliced(Value value) {
  return !value.use_empty() && llvm::all_of(value.getUsers(), [](Operation *u) {
    return isa<dist::AllSliceOp>(u);
  });
}

bool isCollective(Operation *op) {
  return isa<dist::AllReduceOp, dist::AllGatherOp, dist::ReduceScatterOp,
             dist::AllToAllOp, dist::CollectivePermuteOp>(op);
}

bool isCollectiveStart(Operation *op) {
  return isa<dist::AllReduceStartOp, dist::AllGatherStartOp,
             dist::ReduceScatterStartOp, dist::AllToAllStartOp,
             dist::CollectivePermuteStartOp>(op);
}

ArrayRef<char> Lowering::own(std::vector<char> bytes) {
  result.ownedBytes.push_back(
      std::make_unique<std::vector<char>>(std::move(bytes)));
  const std::vector<char> &owned = *result.ownedBytes.back();
  return ArrayRef<char>(owned.data(), owned.size());
}

LogicalResult Lowering::deferConstant(nn::ConstantOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  HostData data{"", type, {}};
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(op.getValue())) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return op.emitError() << "weight '" << resource.getRawHandle().getKey()
                            << "' has no data";
    data.name = resource.getRawHandle().getKey().str();
    data.bytes = blob->getData();
  } else if (auto dense = dyn_cast<DenseElementsAttr>(op.getValue())) {
    data.bytes = own(serialize(dense));
    data.name = constantWeightName(type, data.bytes);
  } else {
    return op.emitError() << "constant of an unsupported kind";
  }
  hostData[op.getResult()] = std::move(data);
  return success();
}

void Lowering::deferSlice(dist::AllSliceOp op) {
  const HostData &from = hostData.find(op.getInput())->second;
  auto type = cast<RankedTensorType>(op.getType());
  SmallVector<StringRef> axes = op.getGroupAxes();
  int64_t dim = op.getSliceDim();
  int64_t block = place.position(axes);
  // A block without elements has no bytes to copy, and its size along `dim`
  // may be 0, which divides nothing.
  if (type.getNumElements() == 0) {
    hostData[op.getResult()] =
        HostData{from.name + ".shard" + std::to_string(dim) + "_" +
                     std::to_string(block) + ".empty",
                 type,
                 {}};
    return;
  }
  int64_t parts = from.type.getDimSize(dim) / type.getDimSize(dim);
  // Bytes of one index of `dim` (everything inside it), and how many
  // blocks of the dimensions outside it there are.
  size_t width =
      from.bytes.size() / std::max<int64_t>(from.type.getNumElements(), 1);
  size_t inner = width;
  for (int64_t d = dim + 1; d < type.getRank(); ++d)
    inner *= type.getDimSize(d);
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= type.getDimSize(d);
  size_t chunk = inner * type.getDimSize(dim);
  std::vector<char> bytes(chunk * outer);
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(bytes.data() + o * chunk,
                from.bytes.data() + (o * parts + block) * chunk, chunk);
  HostData data{from.name + ".shard" + std::to_string(dim) + "_" +
                    std::to_string(block) + "of" + std::to_string(parts),
                type, own(std::move(bytes))};
  hostData[op.getResult()] = std::move(data);
}

int32_t Lowering::materialize(Value value) {
  if (auto it = bufferOf.find(value); it != bufferOf.end())
    return it->second;
  const HostData &data = hostData.find(value)->second;
  bool inline_ = data.bytes.size() <= options.maxInlineConstantBytes;
  int32_t id = addBuffer(data.type, inline_ ? program::Buffer::CONSTANT
                                            : program::Buffer::WEIGHT);
  bufferOf[value] = id;
  if (inline_) {
    prog.mutable_buffers(id)->set_data(data.bytes.data(), data.bytes.size());
    return id;
  }
  prog.mutable_buffers(id)->set_weight(data.name);
  addWeight(data.name, data.type, data.bytes);
  return id;
}

void Lowering::emitCollective(Operation *op, bool async, int32_t token) {
  program::Instruction *inst = prog.add_instructions();
  inst->set_location(locationString(op->getLoc()));
  program::Collective *c = inst->mutable_collective();
  if (async) {
    c->set_async(true);
    c->set_token(token);
  }
  auto axes = dist::getStringRefs(op->getAttrOfType<ArrayAttr>("axes"));
  for (int32_t r : place.group(axes))
    c->add_group(r);
  int32_t in = bufferOf.lookup(op->getOperand(0));
  int32_t out = bufferOf.lookup(op->getResult(0));
  c->set_operand(in);
  c->set_result(out);
  int64_t index = prog.instructions_size() - 1;
  lastRead[in] = std::max(lastRead[in], index);
  if (firstWrite[out] < 0)
    firstWrite[out] = index;

  // The report's payload (the unsharded side's buffer) and the bytes a
  // rank sends under the ring algorithm.
  auto bytesOf = [&](Value v) {
    return byteSize(prog.buffers(bufferOf.lookup(v)).type());
  };
  int64_t n = static_cast<int64_t>(c->group_size());
  ExecCollectiveStat stat;
  for (StringRef axis : axes)
    stat.axes.push_back(axis.str());
  stat.count = 1;
  // The sync form and its `_start` form carry the same attributes.
  StringRef kind = op->getName().stripDialect();
  kind.consume_back("_start");
  stat.kind = kind.str();
  int64_t operandBytes = bytesOf(op->getOperand(0));
  int64_t resultBytes = bytesOf(op->getResult(0));
  auto dimAttr = [&](StringRef name) {
    return op->getAttrOfType<IntegerAttr>(name).getInt();
  };
  auto reduction = [&] {
    return dist::stringifyReductionKind(
               op->getAttrOfType<dist::ReductionKindAttr>("reduction")
                   .getValue())
        .str();
  };
  if (kind == "all_reduce") {
    c->set_kind(program::Collective::ALL_REDUCE);
    c->set_reduction(reduction());
    stat.payload = operandBytes;
    stat.bytes = 2 * (n - 1) * stat.payload / n;
  } else if (kind == "all_gather") {
    c->set_kind(program::Collective::ALL_GATHER);
    c->set_dim(dimAttr("gather_dim"));
    stat.payload = resultBytes;
    stat.bytes = (n - 1) * stat.payload / n;
  } else if (kind == "reduce_scatter") {
    c->set_kind(program::Collective::REDUCE_SCATTER);
    c->set_reduction(reduction());
    c->set_dim(dimAttr("scatter_dim"));
    stat.payload = operandBytes;
    stat.bytes = (n - 1) * stat.payload / n;
  } else if (kind == "all_to_all") {
    c->set_kind(program::Collective::ALL_TO_ALL);
    c->set_dim(dimAttr("split_dim"));
    c->set_concat_dim(dimAttr("concat_dim"));
    stat.payload = operandBytes;
    stat.bytes = (n - 1) * stat.payload / n;
  } else {
    c->set_kind(program::Collective::COLLECTIVE_PERMUTE);
    c->set_shift(dimAttr("shift"));
    stat.payload = operandBytes;
    stat.bytes = stat.payload;
  }
  timeCommunication(
      stat.kind,
      cluster().collectiveSeconds(stat.kind, n, stat.bytes, stat.axes), async,
      token);
  if (auto reason = op->getAttrOfType<StringAttr>("dist.reason"))
    stat.reason = reason.str();
  result.collectives.push_back(std::move(stat));
}

void Lowering::timeCompute(StringRef name, double seconds) {
  ExecTimeline &t = result.timeline;
  t.events.push_back({name.str(), false, computeClock, computeClock + seconds});
  computeClock += seconds;
  t.computeSeconds += seconds;
}

void Lowering::timeCommunication(StringRef name, double seconds, bool async,
                                 int32_t token) {
  ExecTimeline &t = result.timeline;
  double start = std::max(computeClock, commClock);
  double end = start + seconds;
  t.events.push_back({name.str(), true, start, end});
  t.communicationSeconds += seconds;
  commClock = end;
  if (async) {
    tokenEnd[token] = end;
    return;
  }
  // A synchronous transfer holds compute until it is done.
  t.exposedSeconds += end - computeClock;
  computeClock = end;
}

void Lowering::timeWait(int32_t token) {
  double end = tokenEnd.lookup(token);
  if (end > computeClock) {
    result.timeline.exposedSeconds += end - computeClock;
    computeClock = end;
  }
}

void Lowering::emitTransfer(Operation *op, bool async, int32_t token) {
  program::Instruction *inst = prog.add_instructions();
  inst->set_location(locationString(op->getLoc()));
  program::PointToPoint *p2p = inst->mutable_p2p();
  if (async) {
    p2p->set_async(true);
    p2p->set_token(token);
  }
  int64_t index = prog.instructions_size() - 1;
  ExecTransferStat stat;
  if (auto send = dyn_cast<dist::SendOp>(op)) {
    int32_t id = bufferOf.lookup(send.getInput());
    p2p->set_kind(program::PointToPoint::SEND);
    p2p->set_buffer(id);
    p2p->set_peer(place.peer(send.getAxis(), send.getPeer()));
    p2p->set_tag(send.getTag());
    lastRead[id] = std::max(lastRead[id], index);
    stat.send = true;
    stat.peer = p2p->peer();
    stat.bytes = byteSize(prog.buffers(id).type());
  } else {
    auto recv = cast<dist::RecvOp>(op);
    int32_t id = bufferOf.lookup(recv.getResult());
    p2p->set_kind(program::PointToPoint::RECV);
    p2p->set_buffer(id);
    p2p->set_peer(place.peer(recv.getAxis(), recv.getPeer()));
    p2p->set_tag(recv.getTag());
    if (firstWrite[id] < 0)
      firstWrite[id] = index;
    stat.peer = p2p->peer();
    stat.bytes = byteSize(prog.buffers(id).type());
  }
  result.transfers.push_back(stat);
  std::vector<std::string> axis = {
      cast<StringAttr>(op->getAttr("axis")).getValue().str()};
  timeCommunication(
      stat.send ? "send" : "recv",
      cluster().collectiveSeconds("collective_permute", 2, stat.bytes, axis),
      async || stat.send, async ? token : -1 - int32_t(index));
}

void Lowering::emitSlice(dist::AllSliceOp op) {
  program::Instruction *inst = prog.add_instructions();
  inst->set_location(locationString(op->getLoc()));
  program::Kernel *kernel = inst->mutable_kernel();
  kernel->set_op("slice");
  int32_t in = bufferOf.lookup(op.getInput());
  int32_t out = bufferOf.lookup(op.getResult());
  kernel->add_operands(in);
  kernel->add_results(out);
  auto type = cast<RankedTensorType>(op.getType());
  int64_t dim = op.getSliceDim();
  int64_t block = place.position(op.getGroupAxes());
  SmallVector<int64_t> start(type.getRank(), 0), limit(type.getShape()),
      stride(type.getRank(), 1);
  start[dim] = block * type.getDimSize(dim);
  limit[dim] = start[dim] + type.getDimSize(dim);
  auto &attrs = *kernel->mutable_attributes();
  attrs["start"] = intsAttr(start);
  attrs["limit"] = intsAttr(limit);
  attrs["stride"] = intsAttr(stride);
  int64_t index = prog.instructions_size() - 1;
  lastRead[in] = std::max(lastRead[in], index);
  if (firstWrite[out] < 0)
    firstWrite[out] = index;
  ++result.numKernels;
}

LogicalResult Lowering::checkSizes() {
  int64_t total = 0;
  auto check =
      [&](Type type,
          llvm::function_ref<InFlightDiagnostic()> error) -> LogicalResult {
    if (auto token = dyn_cast<dist::TokenType>(type))
      type = token.getPayload();
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || !tensor.getElementType().isIntOrFloat())
      return success(); // Not a buffer, or refused with its dtype.
    if (!tensor.hasStaticShape())
      return error() << tensor
                     << " has a dynamic shape (give its size with --bind)";
    int64_t bytes;
    if (!boundedBytes(tensor, bytes))
      return error() << tensor
                     << " is larger than a tensor can be (2^48 bytes, what "
                        "a 64-bit process can address)";
    total += bytes;
    if (total > kMaxRankBytes)
      return func.emitError()
             << "the tensors of this rank need more than 2^62 bytes together";
    return success();
  };
  for (BlockArgument arg : func.getBody().front().getArguments())
    if (failed(check(arg.getType(), [&] {
          auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        "onnx.name");
          return func.emitError()
                 << "input '"
                 << (name ? name.str()
                          : "input" + std::to_string(arg.getArgNumber()))
                 << "': ";
        })))
      return failure();
  for (Operation *op : ops)
    for (OpResult value : op->getResults())
      if (failed(check(value.getType(), [&] { return op->emitError(); })))
        return failure();
  return success();
}

int32_t Lowering::addBuffer(RankedTensorType type, program::Buffer::Kind kind) {
  program::Buffer *buffer = prog.add_buffers();
  buffer->set_id(prog.buffers_size() - 1);
  buffer->mutable_type()->set_dtype(getExecDType(type.getElementType()));
  for (int64_t d : type.getShape())
    buffer->mutable_type()->add_shape(d);
  buffer->set_kind(kind);
  firstWrite.push_back(-1);
  lastRead.push_back(-1);
  return buffer->id();
}

void Lowering::planFusion() {
  if (!options.fuseElementwise)
    return;
  // The kernel whose result currently holds `value`, if any.
  auto headOf = [&](Value value) -> Operation * {
    Operation *def = value.getDefiningOp();
    if (!def)
      return nullptr;
    if (auto it = fused.find(def); it != fused.end())
      return it->second.head;
    if (!isKernel(def) || def->getNumResults() != 1)
      return nullptr;
    return def;
  };
  // Whether `value` exists before `head` runs (so the epilogue may read it).
  auto availableBefore = [&](Value value, Operation *head) {
    Operation *def = value.getDefiningOp();
    return !def || isa<nn::ConstantOp>(def) || position[def] < position[head];
  };
  for (Operation *opPtr : ops) {
    Operation &op = *opPtr;
    if (!isFusibleElementwise(&op))
      continue;
    Type resultType = op.getResult(0).getType();
    for (Value input : op.getOperands()) {
      Operation *head = headOf(input);
      if (!head || !input.hasOneUse() || input.getType() != resultType)
        continue;
      if (op.getNumOperands() == 2) {
        Value other =
            op.getOperand(0) == input ? op.getOperand(1) : op.getOperand(0);
        if (other == input || !availableBefore(other, head))
          continue;
      }
      fused[&op] = {head, input};
      epilogueOf[head].push_back(&op);
      ++result.numFusedOps;
      break;
    }
  }
}

LogicalResult Lowering::lowerConstant(nn::ConstantOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  if (auto resource = dyn_cast<DenseResourceElementsAttr>(op.getValue())) {
    AsmResourceBlob *blob = resource.getRawHandle().getBlob();
    if (!blob)
      return op.emitError() << "weight '" << resource.getRawHandle().getKey()
                            << "' has no data";
    int32_t id = addBuffer(type, program::Buffer::WEIGHT);
    std::string name = resource.getRawHandle().getKey().str();
    prog.mutable_buffers(id)->set_weight(name);
    bufferOf[op] = id;
    addWeight(name, type, blob->getData());
    return success();
  }
  auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense)
    return op.emitError() << "constant of an unsupported kind";
  bufferOf[op] = addConstant(type, dense);
  return success();
}

int32_t Lowering::addConstant(RankedTensorType type, DenseElementsAttr dense) {
  std::vector<char> bytes = serialize(dense);
  if (bytes.size() <= options.maxInlineConstantBytes) {
    int32_t id = addBuffer(type, program::Buffer::CONSTANT);
    prog.mutable_buffers(id)->set_data(bytes.data(), bytes.size());
    return id;
  }
  int32_t id = addBuffer(type, program::Buffer::WEIGHT);
  std::string name = constantWeightName(type, bytes);
  prog.mutable_buffers(id)->set_weight(name);
  if (!weightNames.contains(name))
    addWeight(name, type, own(std::move(bytes)));
  return id;
}

void Lowering::addWeight(StringRef name, RankedTensorType type,
                         ArrayRef<char> bytes) {
  if (!weightNames.insert(name).second)
    return;
  result.weights.push_back({name.str(), getExecDType(type.getElementType()),
                            SmallVector<int64_t>(type.getShape()), bytes});
}

std::optional<bool> Lowering::rankCondition(Value condition) {
  auto compare = condition.getDefiningOp<nn::CompareOp>();
  if (!compare)
    return std::nullopt;
  auto index = compare.getLhs().getDefiningOp<dist::AxisIndexOp>();
  auto constant = compare.getRhs().getDefiningOp<nn::ConstantOp>();
  auto dense =
      constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
  if (!index || !dense || !dense.isSplat() ||
      !dense.getElementType().isInteger())
    return std::nullopt;
  int64_t lhs = place.position(index.getGroupAxes());
  int64_t rhs = dense.getSplatValue<APInt>().getSExtValue();
  switch (compare.getDirection()) {
  case nn::CompareDirection::EQ:
    return lhs == rhs;
  case nn::CompareDirection::NE:
    return lhs != rhs;
  case nn::CompareDirection::LT:
    return lhs < rhs;
  case nn::CompareDirection::LE:
    return lhs <= rhs;
  case nn::CompareDirection::GT:
    return lhs > rhs;
  case nn::CompareDirection::GE:
    return lhs >= rhs;
  }
  return std::nullopt;
}

void Lowering::planDecided(llvm::DenseMap<Value, unsigned> &outputIndex) {
  for (Operation *op : llvm::make_first_range(position)) {
    auto where = dyn_cast<nn::WhereOp>(op);
    if (!where || fused.count(op) || !epilogueOf.lookup(op).empty() ||
        outputIndex.count(where.getResult()))
      continue;
    std::optional<bool> known = rankCondition(where.getCondition());
    if (!known)
      continue;
    Value chosen = *known ? where.getOnTrue() : where.getOnFalse();
    auto constant = chosen.getDefiningOp<nn::ConstantOp>();
    auto dense =
        constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
    if (chosen.getType() == where.getType() || (dense && dense.isSplat()))
      decided.insert(op);
  }
  for (Operation *op : llvm::make_first_range(position))
    if (auto compare = dyn_cast<nn::CompareOp>(op);
        compare && rankCondition(compare.getResult()) &&
        !compare->use_empty() &&
        llvm::all_of(compare->getUsers(),
                     [&](Operation *user) { return decided.count(user); }))
      decided.insert(op);
}

int32_t Lowering::decideWhere(nn::WhereOp where) {
  Value chosen = *rankCondition(where.getCondition()) ? where.getOnTrue()
                                                      : where.getOnFalse();
  auto type = cast<RankedTensorType>(where.getType());
  if (chosen.getType() == type) {
    int32_t id = addBuffer(type, program::Buffer::ALIAS);
    prog.mutable_buffers(id)->set_alias_of(materialize(chosen));
    return id;
  }
  auto dense = cast<DenseElementsAttr>(
      chosen.getDefiningOp<nn::ConstantOp>().getValue());
  return addConstant(
      type, DenseElementsAttr::get(type, dense.getSplatValue<Attribute>()));
}

void Lowering::emitKernel(Operation *op) {
  OpCost cost = estimateCost(op);
  for (Operation *step : epilogueOf.lookup(op))
    cost += estimateCost(step);
  timeCompute(kernelName(op), estimateSeconds(cost, cluster().device));
  program::Instruction *inst = prog.add_instructions();
  inst->set_location(locationString(op->getLoc()));
  program::Kernel *kernel = inst->mutable_kernel();
  kernel->set_op(kernelName(op).str());
  int64_t index = prog.instructions_size() - 1;
  auto read = [&](int32_t id) { lastRead[id] = std::max(lastRead[id], index); };
  for (Value operand : op->getOperands()) {
    kernel->add_operands(bufferOf.lookup(operand));
    read(bufferOf.lookup(operand));
  }
  for (Value res : op->getResults()) {
    kernel->add_results(bufferOf.lookup(res));
    int32_t id = bufferOf.lookup(res);
    if (firstWrite[id] < 0)
      firstWrite[id] = index;
  }
  setAttributes(op, *kernel->mutable_attributes());
  for (Operation *step : epilogueOf.lookup(op)) {
    program::ElementwiseStep *s = kernel->add_epilogue();
    s->set_op(kernelName(step).str());
    s->set_operand(-1);
    Value input = fused[step].input;
    if (step->getNumOperands() == 2) {
      bool inputFirst = step->getOperand(0) == input;
      Value other = step->getOperand(inputFirst ? 1 : 0);
      s->set_operand(bufferOf.lookup(other));
      s->set_operand_first(!inputFirst);
      read(bufferOf.lookup(other));
    }
    setAttributes(step, *s->mutable_attributes());
  }
  ++result.numKernels;
}

void Lowering::planArena() {
  // Reads through a view keep the viewed activation alive.
  auto root = [&](int32_t id) {
    while (prog.buffers(id).kind() == program::Buffer::ALIAS)
      id = prog.buffers(id).alias_of();
    return id;
  };
  for (int32_t id = prog.buffers_size() - 1; id >= 0; --id) {
    if (prog.buffers(id).kind() != program::Buffer::ALIAS)
      continue;
    int32_t r = root(id);
    lastRead[r] = std::max(lastRead[r], lastRead[id]);
  }
  struct Interval {
    int32_t id;
    int64_t begin, end, size;
  };
  std::vector<Interval> intervals;
  for (const program::Buffer &b : prog.buffers()) {
    if (b.kind() != program::Buffer::ACTIVATION)
      continue;
    int64_t size = byteSize(b.type());
    size = (size + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    int64_t begin = firstWrite[b.id()];
    intervals.push_back({b.id(), begin, std::max(begin, lastRead[b.id()]),
                         std::max<int64_t>(size, kArenaAlignment)});
    result.totalActivationBytes += size;
  }
  // Largest first, each at the lowest offset free for its whole lifetime.
  std::stable_sort(
      intervals.begin(), intervals.end(),
      [](const Interval &a, const Interval &b) { return a.size > b.size; });
  struct Placed {
    int64_t begin, end, offset, size;
  };
  std::vector<Placed> placed;
  uint64_t arena = 0;
  for (const Interval &iv : intervals) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Placed &p : placed)
      if (p.begin <= iv.end && iv.begin <= p.end)
        busy.push_back({p.offset, p.offset + p.size});
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + iv.size <= lo)
        break;
      offset = std::max(offset, hi);
    }
    placed.push_back({iv.begin, iv.end, offset, iv.size});
    prog.mutable_buffers(iv.id)->set_arena_offset(offset);
    arena = std::max<uint64_t>(arena, offset + iv.size);
  }
  prog.set_arena_bytes(arena);
  result.peakActivationBytes = arena;
}

LogicalResult Lowering::run(int rank, int worldSize) {
  prog.set_format_version(1);
  prog.set_rank(rank);
  prog.set_world_size(worldSize);
  if (auto module = func->getParentOfType<ModuleOp>()) {
    auto meshes = module.getOps<dist::MeshOp>();
    if (!meshes.empty()) {
      dist::MeshOp mesh = *meshes.begin();
      if (mesh.getNumDevices() != worldSize)
        return func.emitError()
               << "the program is partitioned for " << mesh.getNumDevices()
               << " devices, not " << worldSize;
      place = RankPlace(mesh, rank);
    }
  }
  Block &body = func.getBody().front();
  int64_t stage = place.coordinate("pp");
  for (Operation &op : body.without_terminator()) {
    auto stageOp = dyn_cast<dist::StageOp>(op);
    if (!stageOp) {
      ops.push_back(&op);
      continue;
    }
    if (static_cast<int64_t>(stageOp.getIndex()) != stage)
      continue;
    for (Operation &inner : stageOp.getBody().without_terminator())
      ops.push_back(&inner);
    for (auto [result, value] :
         llvm::zip(stageOp.getResults(),
                   stageOp.getBody().getTerminator()->getOperands()))
      yielded[result] = value;
  }
  if (failed(checkSizes()))
    return failure();
  unsigned index = 0;
  for (Operation *op : ops)
    position[op] = index++;
  planFusion();

  auto ret = cast<func::ReturnOp>(body.getTerminator());
  // What the function returns, as this rank computes it: a stage's result
  // is what its body yields; null for another stage's.
  SmallVector<Value> returned;
  for (Value value : ret.getOperands()) {
    if (auto stageOp = value.getDefiningOp<dist::StageOp>())
      value = yielded.lookup(value);
    returned.push_back(value);
  }
  // Values an output buffer can hold directly: results of kernels (or of
  // chains fused into them), each bound once.
  llvm::DenseMap<Value, unsigned> outputIndex;
  for (auto [i, value] : llvm::enumerate(returned)) {
    if (!value)
      continue;
    Operation *def = value.getDefiningOp();
    bool writes =
        def && (isKernel(def) || isCollective(def) ||
                (isa<dist::AllSliceOp>(def) &&
                 !onlySliced(cast<dist::AllSliceOp>(def).getInput()) &&
                 !isa_and_nonnull<nn::ConstantOp, dist::AllSliceOp>(
                     def->getOperand(0).getDefiningOp())));
    if (writes && !outputIndex.count(value))
      outputIndex[value] = i;
  }
  auto resultName = [&](unsigned i) {
    if (auto name = func.getResultAttrOfType<StringAttr>(i, "onnx.name"))
      return name.str();
    return "output" + std::to_string(i);
  };

  planDecided(outputIndex);

  for (BlockArgument arg : body.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type ||
        getExecDType(type.getElementType()) == program::DTYPE_UNSPECIFIED)
      return func.emitError() << "argument " << arg.getArgNumber()
                              << " has a type the runtime does not support";
    int32_t id = addBuffer(type, program::Buffer::INPUT);
    bufferOf[arg] = id;
    program::Binding *binding = prog.add_inputs();
    auto name =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "onnx.name");
    binding->set_name(name ? name.str()
                           : "input" + std::to_string(arg.getArgNumber()));
    binding->set_buffer(id);
  }

  SmallVector<std::pair<unsigned, int32_t>> boundOutputs;
  for (Operation *opPtr : ops) {
    Operation &op = *opPtr;
    // A result of an earlier region of this rank's stage is the value its
    // body yielded.
    for (Value operand : op.getOperands())
      if (!bufferOf.count(operand))
        if (Value inner = yielded.lookup(operand);
            inner && bufferOf.count(inner))
          bufferOf[operand] = bufferOf.lookup(inner);
    if (auto recv = dyn_cast<dist::RecvOp>(op)) {
      bufferOf[recv.getResult()] = addBuffer(
          cast<RankedTensorType>(recv.getType()), program::Buffer::ACTIVATION);
      continue;
    }
    // An async collective writes its result buffer from its start to its
    // wait; the wait's value is that buffer.
    if (isCollectiveStart(&op)) {
      auto token = cast<dist::TokenType>(op.getResult(0).getType());
      bufferOf[op.getResult(0)] =
          addBuffer(cast<RankedTensorType>(token.getPayload()),
                    program::Buffer::ACTIVATION);
      continue;
    }
    if (auto wait = dyn_cast<dist::WaitOp>(op)) {
      if (wait->getNumResults())
        bufferOf[wait->getResult(0)] = bufferOf.lookup(wait.getToken());
      continue;
    }
    if (isa<dist::SendOp>(op))
      continue;
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
      // A weight only sliced stays on the host: each rank keeps its block.
      if (onlySliced(constant.getResult())) {
        if (failed(deferConstant(constant)))
          return failure();
        continue;
      }
      if (failed(lowerConstant(constant)))
        return failure();
      continue;
    }
    if (auto index = dyn_cast<dist::AxisIndexOp>(op)) {
      int64_t position = place.position(index.getGroupAxes());
      int32_t id = addBuffer(index.getType(), program::Buffer::CONSTANT);
      prog.mutable_buffers(id)->set_data(&position, sizeof(position));
      bufferOf[index.getResult()] = id;
      continue;
    }
    if (auto slice = dyn_cast<dist::AllSliceOp>(op)) {
      if (hostData.count(slice.getInput())) {
        deferSlice(slice);
        if (!onlySliced(slice.getResult()))
          materialize(slice.getResult());
        continue;
      }
    }
    if (decided.count(&op)) {
      if (auto where = dyn_cast<nn::WhereOp>(op))
        bufferOf[where.getResult()] = decideWhere(where);
      continue;
    }
    if (auto reshape = dyn_cast<nn::ReshapeOp>(op)) {
      int32_t id = addBuffer(reshape.getType(), program::Buffer::ALIAS);
      prog.mutable_buffers(id)->set_alias_of(
          bufferOf.lookup(reshape.getInput()));
      bufferOf[reshape.getResult()] = id;
      continue;
    }
    bool instruction =
        isKernel(&op) || isCollective(&op) || isa<dist::AllSliceOp>(op);
    if (!instruction) {
      if (isa<dist::DistDialect>(op.getDialect()))
        return op.emitError()
               << "the exec lowering does not handle this op yet";
      return op.emitError() << "the exec lowering does not handle this op";
    }
    if (auto it = fused.find(&op); it != fused.end()) {
      // The step writes the head's buffer; its result is the chain's value.
      bufferOf[op.getResult(0)] = bufferOf.lookup(it->second.input);
      continue;
    }
    for (Value res : op.getResults()) {
      auto type = cast<RankedTensorType>(res.getType());
      if (getExecDType(type.getElementType()) == program::DTYPE_UNSPECIFIED)
        return op.emitError()
               << "result type " << type << " is not supported by the runtime";
      // The final value of a chain rooted here decides whether the buffer
      // is an output.
      Value last = res;
      for (Operation *step : epilogueOf.lookup(&op))
        if (fused[step].input == last)
          last = step->getResult(0);
      auto it = outputIndex.find(last);
      bool isOutput = it != outputIndex.end();
      int32_t id = addBuffer(type, isOutput ? program::Buffer::OUTPUT
                                            : program::Buffer::ACTIVATION);
      bufferOf[res] = id;
      if (isOutput)
        boundOutputs.push_back({it->second, id});
    }
  }
  // Receives are prefetched one ahead: a receive starts as soon as the one
  // before it has completed, so the next microbatch's activation arrives
  // while this one computes (two receive buffers live, not M).
  // A receive is only started ahead of sends it would pass: transfers run
  // in order on the communication stream, so a receive waiting there would
  // hold back a send its peer needs first.
  SmallVector<dist::RecvOp> receives;
  SmallVector<bool> sendBefore; // A send lies between receive k-1 and k.
  bool sawSend = false;
  for (Operation *op : ops) {
    if (isa<dist::SendOp>(op))
      sawSend = true;
    if (auto recv = dyn_cast<dist::RecvOp>(op)) {
      receives.push_back(recv);
      sendBefore.push_back(sawSend);
      sawSend = false;
    }
  }
  llvm::DenseMap<Operation *, int32_t> recvToken;
  llvm::DenseMap<Value, int32_t> collectiveToken;
  int32_t nextToken = 0;
  auto startRecv = [&](dist::RecvOp recv) {
    recvToken[recv] = nextToken++;
    emitTransfer(recv, /*async=*/true, recvToken[recv]);
  };
  unsigned recvIndex = 0;

  // Emit instructions in program order, now that every buffer exists.
  for (Operation *opPtr : ops) {
    Operation &op = *opPtr;
    if (decided.count(opPtr))
      continue;
    if (auto recv = dyn_cast<dist::RecvOp>(op)) {
      if (!recvToken.count(recv))
        startRecv(recv);
      program::Instruction *inst = prog.add_instructions();
      inst->set_location(locationString(op.getLoc()));
      inst->mutable_wait()->set_token(recvToken[recv]);
      timeWait(recvToken[recv]);
      int32_t id = bufferOf.lookup(recv.getResult());
      firstWrite[id] =
          std::min<int64_t>(firstWrite[id], prog.instructions_size() - 1);
      if (++recvIndex < receives.size() && !sendBefore[recvIndex])
        startRecv(receives[recvIndex]);
    } else if (isa<dist::SendOp>(op)) {
      emitTransfer(&op);
    } else if (isCollectiveStart(&op)) {
      collectiveToken[op.getResult(0)] = nextToken;
      emitCollective(&op, /*async=*/true, nextToken++);
    } else if (auto wait = dyn_cast<dist::WaitOp>(op)) {
      program::Instruction *inst = prog.add_instructions();
      inst->set_location(locationString(op.getLoc()));
      inst->mutable_wait()->set_token(collectiveToken.lookup(wait.getToken()));
      timeWait(collectiveToken.lookup(wait.getToken()));
      // The operand of the collective stays alive until it completes.
      int64_t index = prog.instructions_size() - 1;
      int32_t in =
          bufferOf.lookup(wait.getToken().getDefiningOp()->getOperand(0));
      lastRead[in] = std::max(lastRead[in], index);
      int32_t out = bufferOf.lookup(wait.getToken());
      lastRead[out] = std::max(lastRead[out], index);
    } else if (isKernel(&op) && !fused.count(&op))
      emitKernel(&op);
    else if (isCollective(&op))
      emitCollective(&op);
    else if (auto slice = dyn_cast<dist::AllSliceOp>(op);
             slice && !hostData.count(slice.getResult()))
      emitSlice(slice);
  }

  // Outputs not written by a kernel directly (inputs, weights, views, values
  // returned twice) are copied into caller memory at the end.
  for (auto [i, value] : llvm::enumerate(returned)) {
    if (!value)
      continue; // Another pipeline stage produces this output.
    auto bound =
        llvm::find_if(boundOutputs, [&](auto &b) { return b.first == i; });
    int32_t id;
    if (bound != boundOutputs.end()) {
      id = bound->second;
    } else {
      id = addBuffer(cast<RankedTensorType>(value.getType()),
                     program::Buffer::OUTPUT);
      program::Instruction *inst = prog.add_instructions();
      inst->set_location("return");
      program::Kernel *copy = inst->mutable_kernel();
      copy->set_op("copy");
      copy->add_operands(bufferOf.lookup(value));
      copy->add_results(id);
      int64_t index = prog.instructions_size() - 1;
      int32_t source = bufferOf.lookup(value);
      lastRead[source] = std::max(lastRead[source], index);
      firstWrite[id] = index;
      ++result.numKernels;
    }
    program::Binding *binding = prog.add_outputs();
    binding->set_name(resultName(i));
    binding->set_buffer(id);
  }
  planArena();
  result.timeline.stepSeconds = std::max(computeClock, commClock);
  return success();
}

} // namespace

FailureOr<ExecProgram>
mlir::partita::lowerToExecProgram(func::FuncOp func, int rank, int worldSize,
                                  const ExecLoweringOptions &options) {
  if (!func.getBody().hasOneBlock())
    return func.emitError()
           << "the exec lowering needs a single-block function";
  Lowering lowering(func, options);
  if (failed(lowering.run(rank, worldSize)))
    return failure();
  return std::move(lowering.result);
}
