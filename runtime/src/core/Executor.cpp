//===- Executor.cpp - runs one rank's exec program ------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Executor.h"

#include "partita/runtime/Device.h"

#include "partita/runtime/Communicator.h"
#include "partita/runtime/HostKernels.h"
#include "partita/runtime/LoadedArtifact.h"
#include "partita/runtime/ViewChain.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

using namespace partita::runtime;
namespace program = partita::program;
using program::Buffer;

namespace {

constexpr size_t kArenaAlignment = 64;

struct FreeDeleter {
  void operator()(void *memory) const { std::free(memory); }
};
using AlignedBytes = std::unique_ptr<uint8_t, FreeDeleter>;

/// 64-byte aligned memory, or null for zero bytes.
AlignedBytes allocateAligned(uint64_t bytes) {
  if (bytes == 0)
    return nullptr;
  uint64_t rounded =
      (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  return AlignedBytes(
      static_cast<uint8_t *>(std::aligned_alloc(kArenaAlignment, rounded)));
}

/// Runs communication in submission order on one thread: the order every
/// rank issues its collectives in, whichever of them are asynchronous.
class CommunicationThread {
public:
  CommunicationThread() : worker([this] { loop(); }) {}
  ~CommunicationThread() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_one();
    worker.join();
  }

  std::future<Status> submit(std::function<Status()> work) {
    std::packaged_task<Status()> task(std::move(work));
    std::future<Status> done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex);
      queue.push_back(std::move(task));
    }
    wake.notify_one();
    return done;
  }

private:
  void loop() {
    while (true) {
      std::packaged_task<Status()> task;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty())
          return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
  }

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::packaged_task<Status()>> queue;
  bool stopping = false;
  std::thread worker;
};

/// How a buffer finds its memory.
struct BufferSlot {
  Buffer::Kind kind = Buffer::KIND_UNSPECIFIED;
  DType dtype = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  /// The buffer whose memory this one uses (itself unless an alias), and
  /// where in it this one starts (a view's offsets along its chain).
  int32_t root = 0;
  uint64_t offset = 0;
  /// Memory fixed at load: arena bytes, a weight, a constant, a resident
  /// binding.
  void *memory = nullptr;
  /// An INPUT or OUTPUT buffer bound to resident memory (never staged).
  bool resident = false;
};

std::string bufferName(int32_t id) { return "buffer " + std::to_string(id); }

const char *kindName(Buffer::Kind kind) {
  return kind == Buffer::INPUT ? "input" : "output";
}

std::string typeString(DType dtype, const std::vector<int64_t> &shape) {
  return dtypeName(dtype) + " " + shapeString(shape);
}

} // namespace

struct Executor::Impl {
  /// Adds a dispatch's or its return's rows to `dispatchStats` (host
  /// memory: only the host communicator dispatches).
  void countDispatch(const program::Collective &collective, const Tensor &in,
                     const Group &group);

  const program::Program *program = nullptr;
  DispatchStats dispatchStats;
  /// The destinations of the run's last dispatch: a dispatch with the same
  /// ones sends more of the same rows' data (the expert ids beside the
  /// hidden states), not more rows.
  int32_t lastDestinations = -1;
  Communicator *communicator = nullptr;
  Device *device = nullptr;
  /// The host device made for the ThreadPool overload of create().
  std::unique_ptr<HostDevice> ownedDevice;
  std::vector<BufferSlot> slots;
  /// The activation arena, in device memory.
  struct ArenaDeleter {
    Device *device;
    void operator()(uint8_t *memory) const { device->deallocate(memory); }
  };
  std::unique_ptr<uint8_t, ArenaDeleter> arena{nullptr, ArenaDeleter{nullptr}};
  /// Constants copied to aligned memory, as kernels read them as arrays.
  std::vector<AlignedBytes> constants;
  /// Caller memory of INPUT/OUTPUT buffers during a run, by buffer id.
  std::vector<void *> bound;
  /// On a device with memory of its own: the weights and constants uploaded
  /// at load (a weight by its mapped address, as names may share a tensor),
  /// and the device copies of inputs and outputs, staged around each run.
  std::vector<void *> deviceMemory;
  std::map<const void *, void *> uploadedWeights;
  std::unique_ptr<CommunicationThread> communication;
  /// Resident bindings (Executor::create), by name.
  std::map<std::string, Tensor> resident;

  ~Impl();
  /// The resident tensor bound to buffer `id`, or null.
  const Tensor *residentOf(int32_t id) const;
  Status upload(const void *host, uint64_t bytes, void *&memory);
  Status allocateOnDevice(uint64_t bytes, void *&memory);

  Status load(const WeightStore &weights);
  Status loadBuffer(int32_t id, const Buffer &buffer,
                    const WeightStore &weights);
  Status resolveAliases();
  Status checkInstructions() const;
  Status checkResidentOrder() const;
  Status checkBindings() const;
  Status
  bind(const std::vector<NamedTensor> &tensors,
       const google::protobuf::RepeatedPtrField<program::Binding> &bindings,
       const char *kind);
  Status execute();
  /// execute() on a device with memory of its own: inputs are copied in
  /// before, outputs out after, and the run ends when the device is idle.
  Status executeStaged();
  Status communicate(const program::Instruction &instruction);

  std::string where(size_t index) const;
  Tensor resolve(int32_t id) const {
    if (id < 0 || size_t(id) >= slots.size())
      return Tensor();
    const BufferSlot &slot = slots[size_t(id)];
    const BufferSlot &root = slots[size_t(slot.root)];
    void *memory = root.memory ? root.memory : bound[size_t(slot.root)];
    if (memory)
      memory = static_cast<char *>(memory) + slot.offset;
    return Tensor{memory, slot.dtype, slot.shape};
  }
};

Executor::Impl::~Impl() {
  // Pending communication references this executor's buffers, and queued
  // device work its memory: drain both before releasing anything.
  communication.reset();
  if (device) {
    (void)device->synchronize();
    for (void *memory : deviceMemory)
      device->deallocate(memory);
  }
}

const Tensor *Executor::Impl::residentOf(int32_t id) const {
  for (const auto *bindings : {&program->inputs(), &program->outputs()})
    for (const program::Binding &binding : *bindings)
      if (binding.buffer() == id) {
        auto it = resident.find(binding.name());
        return it == resident.end() ? nullptr : &it->second;
      }
  return nullptr;
}

Status Executor::Impl::allocateOnDevice(uint64_t bytes, void *&memory) {
  memory = nullptr;
  if (bytes == 0)
    return Status::ok();
  PARTITA_RETURN_IF_ERROR(
      device->allocate(size_t(bytes), kArenaAlignment, &memory));
  deviceMemory.push_back(memory);
  return Status::ok();
}

Status Executor::Impl::upload(const void *host, uint64_t bytes, void *&memory) {
  PARTITA_RETURN_IF_ERROR(allocateOnDevice(bytes, memory));
  if (bytes > 0)
    PARTITA_RETURN_IF_ERROR(device->copyToDevice(memory, host, size_t(bytes)));
  return Status::ok();
}

std::string Executor::Impl::where(size_t index) const {
  const program::Instruction &instruction = program->instructions(int(index));
  if (!instruction.location().empty())
    return instruction.location();
  return "instruction " + std::to_string(index);
}

Status Executor::Impl::loadBuffer(int32_t id, const Buffer &buffer,
                                  const WeightStore &weights) {
  std::string name = bufferName(id);
  if (buffer.id() != id)
    return Status::error(name + " has id " + std::to_string(buffer.id()));
  BufferSlot &slot = slots[size_t(id)];
  slot.kind = buffer.kind();
  slot.dtype = buffer.type().dtype();
  slot.root = id;
  slot.shape.assign(buffer.type().shape().begin(), buffer.type().shape().end());
  PARTITA_RETURN_IF_ERROR(
      bufferBytes(name, slot.dtype, slot.shape, slot.bytes));
  size_t elementSize = dtypeSize(slot.dtype);

  switch (buffer.kind()) {
  case Buffer::ACTIVATION: {
    uint64_t end;
    if (__builtin_add_overflow(buffer.arena_offset(), slot.bytes, &end) ||
        end > program->arena_bytes())
      return Status::error(name + " (" + typeString(slot.dtype, slot.shape) +
                           " at arena offset " +
                           std::to_string(buffer.arena_offset()) +
                           ") lies outside the arena of " +
                           std::to_string(program->arena_bytes()) + " bytes");
    if (buffer.arena_offset() % elementSize != 0)
      return Status::error(name + ": arena offset " +
                           std::to_string(buffer.arena_offset()) +
                           " is not aligned to its elements");
    slot.memory = arena.get() + buffer.arena_offset();
    return Status::ok();
  }
  case Buffer::INPUT:
  case Buffer::OUTPUT:
    if (const Tensor *fixed = residentOf(id)) {
      if (fixed->dtype != slot.dtype || fixed->shape != slot.shape)
        return Status::error(name + " (" + kindName(buffer.kind()) +
                             "): its resident memory is " +
                             typeString(fixed->dtype, fixed->shape) +
                             ", the buffer " +
                             typeString(slot.dtype, slot.shape));
      if (!fixed->data && slot.bytes > 0)
        return Status::error(name + ": resident memory is missing");
      slot.memory = fixed->data;
      slot.resident = true;
      return Status::ok();
    }
    // Caller memory on a host device; staged through device memory of the
    // executor's on others.
    if (!device->sharesHostMemory()) {
      Status allocated = allocateOnDevice(slot.bytes, slot.memory);
      if (!allocated)
        return Status::error(name + ": " + allocated.message());
    }
    return Status::ok();
  case Buffer::WEIGHT: {
    const Tensor *weight;
    PARTITA_RETURN_IF_ERROR(
        weights.find(buffer.weight(), slot.dtype, slot.shape, name, weight));
    slot.memory = weight->data;
    if (device->sharesHostMemory())
      return Status::ok();
    auto uploaded = uploadedWeights.find(weight->data);
    if (uploaded != uploadedWeights.end()) {
      slot.memory = uploaded->second;
      return Status::ok();
    }
    Status copied = upload(weight->data, slot.bytes, slot.memory);
    if (!copied)
      return Status::error(name + ": weight '" + buffer.weight() +
                           "': " + copied.message());
    uploadedWeights[weight->data] = slot.memory;
    return Status::ok();
  }
  case Buffer::CONSTANT: {
    if (buffer.data().size() != slot.bytes)
      return Status::error(name + ": the constant holds " +
                           std::to_string(buffer.data().size()) + " bytes, " +
                           typeString(slot.dtype, slot.shape) + " needs " +
                           std::to_string(slot.bytes));
    if (!device->sharesHostMemory()) {
      Status copied = upload(buffer.data().data(), slot.bytes, slot.memory);
      if (!copied)
        return Status::error(name + ": " + copied.message());
      return Status::ok();
    }
    AlignedBytes copy = allocateAligned(slot.bytes);
    if (slot.bytes > 0 && !copy)
      return Status::error(name + ": out of memory");
    if (slot.bytes > 0)
      std::memcpy(copy.get(), buffer.data().data(), slot.bytes);
    slot.memory = copy.get();
    constants.push_back(std::move(copy));
    return Status::ok();
  }
  case Buffer::ALIAS: {
    int32_t target = buffer.alias_of();
    if (target < 0 || size_t(target) >= slots.size() || target == id)
      return Status::error(name + ": aliases " + bufferName(target) +
                           ", which is not another buffer of the program");
    if (buffer.alias_offset() % elementSize != 0)
      return Status::error(name + ": view offset " +
                           std::to_string(buffer.alias_offset()) +
                           " is not aligned to its elements");
    slot.root = target;
    slot.offset = buffer.alias_offset();
    return Status::ok();
  }
  default:
    return Status::error(name + " has an unknown kind " +
                         std::to_string(int(buffer.kind())));
  }
}

Status Executor::Impl::resolveAliases() {
  for (size_t id = 0; id < slots.size(); ++id) {
    BufferSlot &slot = slots[id];
    if (slot.kind != Buffer::ALIAS)
      continue;
    const BufferSlot &target = slots[size_t(slot.root)];
    uint64_t end;
    if (__builtin_add_overflow(slot.offset, slot.bytes, &end) ||
        end > target.bytes)
      return Status::error(bufferName(int32_t(id)) + " (" +
                           typeString(slot.dtype, slot.shape) + " at offset " +
                           std::to_string(slot.offset) + ") aliases " +
                           bufferName(slot.root) + " (" +
                           typeString(target.dtype, target.shape) +
                           "), which does not hold its bytes");
    // The buffer that owns the memory, and the offset within it (each view
    // lies within the next, so the sum does too).
    std::optional<ViewRoot> root = followViewChain(*program, int32_t(id));
    if (!root)
      return Status::error(bufferName(int32_t(id)) +
                           " is part of a cycle of aliases");
    slot.root = root->buffer;
    slot.offset = root->offset;
  }
  return Status::ok();
}

Status Executor::Impl::checkInstructions() const {
  auto valid = [&](int32_t id) { return id >= 0 && size_t(id) < slots.size(); };
  // Results are written: they must own writable memory, never a weight
  // (mapped read-only), a constant or an input.
  auto writable = [&](int32_t id) {
    Buffer::Kind kind = slots[size_t(slots[size_t(id)].root)].kind;
    return kind == Buffer::ACTIVATION || kind == Buffer::OUTPUT;
  };
  std::set<int32_t> pending;
  for (int index = 0; index < program->instructions_size(); ++index) {
    const program::Instruction &instruction = program->instructions(index);
    std::string at = where(size_t(index));
    auto checkRead = [&](int32_t id) -> Status {
      if (!valid(id))
        return Status::error(at + ": reads " + bufferName(id) +
                             ", which the program does not have");
      return Status::ok();
    };
    auto checkWrite = [&](int32_t id) -> Status {
      if (!valid(id))
        return Status::error(at + ": writes " + bufferName(id) +
                             ", which the program does not have");
      if (!writable(id))
        return Status::error(at + ": writes " + bufferName(id) +
                             ", which is read-only (an input, weight or "
                             "constant)");
      return Status::ok();
    };
    auto start = [&](bool async, int32_t token) -> Status {
      if (async && !pending.insert(token).second)
        return Status::error(at + ": starts token " + std::to_string(token) +
                             " again before its wait");
      return Status::ok();
    };
    switch (instruction.op_case()) {
    case program::Instruction::kKernel: {
      const program::Kernel &kernel = instruction.kernel();
      for (int32_t id : kernel.operands())
        PARTITA_RETURN_IF_ERROR(checkRead(id));
      for (int32_t id : kernel.results())
        PARTITA_RETURN_IF_ERROR(checkWrite(id));
      for (const program::ElementwiseStep &step : kernel.epilogue())
        if (step.operand() != -1)
          PARTITA_RETURN_IF_ERROR(checkRead(step.operand()));
      break;
    }
    case program::Instruction::kCollective: {
      const program::Collective &collective = instruction.collective();
      if (collective.kind() < program::Collective::ALL_REDUCE ||
          collective.kind() > program::Collective::DISPATCH_RETURN)
        return Status::error(at + ": unknown collective kind " +
                             std::to_string(int(collective.kind())));
      Reduction reduction;
      if ((collective.kind() == program::Collective::ALL_REDUCE ||
           collective.kind() == program::Collective::REDUCE_SCATTER) &&
          !parseReduction(collective.reduction(), reduction))
        return Status::error(at + ": unknown reduction '" +
                             collective.reduction() + "'");
      PARTITA_RETURN_IF_ERROR(checkRead(collective.operand()));
      PARTITA_RETURN_IF_ERROR(checkWrite(collective.result()));
      bool dispatch = collective.kind() == program::Collective::DISPATCH;
      if (dispatch ||
          collective.kind() == program::Collective::DISPATCH_RETURN) {
        if (collective.async())
          return Status::error(at + ": a dispatch has no asynchronous form");
        PARTITA_RETURN_IF_ERROR(checkRead(collective.destinations()));
        PARTITA_RETURN_IF_ERROR(dispatch ? checkWrite(collective.counts())
                                         : checkRead(collective.counts()));
      }
      PARTITA_RETURN_IF_ERROR(start(collective.async(), collective.token()));
      break;
    }
    case program::Instruction::kP2P: {
      const program::PointToPoint &p2p = instruction.p2p();
      if (p2p.kind() == program::PointToPoint::SEND)
        PARTITA_RETURN_IF_ERROR(checkRead(p2p.buffer()));
      else if (p2p.kind() == program::PointToPoint::RECV)
        PARTITA_RETURN_IF_ERROR(checkWrite(p2p.buffer()));
      else
        return Status::error(at + ": unknown point-to-point kind " +
                             std::to_string(int(p2p.kind())));
      PARTITA_RETURN_IF_ERROR(start(p2p.async(), p2p.token()));
      break;
    }
    case program::Instruction::kWait:
      if (!pending.erase(instruction.wait().token()))
        return Status::error(at + ": waits for token " +
                             std::to_string(instruction.wait().token()) +
                             ", which no pending asynchronous instruction "
                             "started");
      break;
    default:
      return Status::error(at + ": empty instruction");
    }
  }
  if (!pending.empty())
    return Status::error("token " + std::to_string(*pending.begin()) +
                         " is started but never waited for");
  return Status::ok();
}

/// A resident tensor's input and output bindings share one memory, which
/// the program updates (a training parameter): it must read the input for
/// the last time no later than the instruction that first writes the
/// output, or it would read the new value as the old one. An asynchronous
/// instruction reads its operand until its wait. A KV cache's
/// kv_cache_write updates it in place by definition, and what follows
/// reads the written cache.
Status Executor::Impl::checkResidentOrder() const {
  for (const auto &[name, tensor] : resident) {
    std::optional<int32_t> in, out;
    for (const program::Binding &binding : program->inputs())
      if (binding.name() == name)
        in = slots[size_t(binding.buffer())].root;
    for (const program::Binding &binding : program->outputs())
      if (binding.name() == name)
        out = slots[size_t(binding.buffer())].root;
    if (!in || !out)
      continue;
    auto rootOf = [&](int32_t id) { return slots[size_t(id)].root; };
    int lastRead = -1, firstWrite = -1;
    // kv_cache_write declares the update in place: the program reads the
    // written cache through either binding afterwards, by design.
    bool inPlace = false;
    std::set<int32_t> readingTokens;
    auto read = [&](int32_t id, int index) {
      if (rootOf(id) == *in)
        lastRead = std::max(lastRead, index);
    };
    auto write = [&](int32_t id, int index) {
      if (rootOf(id) == *out && firstWrite < 0)
        firstWrite = index;
    };
    for (int index = 0; index < program->instructions_size(); ++index) {
      const program::Instruction &instruction = program->instructions(index);
      switch (instruction.op_case()) {
      case program::Instruction::kKernel:
        for (int32_t id : instruction.kernel().operands())
          read(id, index);
        for (const program::ElementwiseStep &step :
             instruction.kernel().epilogue())
          if (step.operand() != -1)
            read(step.operand(), index);
        for (int32_t id : instruction.kernel().results()) {
          if (rootOf(id) == *out && firstWrite < 0)
            inPlace = instruction.kernel().op() == "kv_cache_write";
          write(id, index);
        }
        break;
      case program::Instruction::kCollective: {
        const program::Collective &collective = instruction.collective();
        read(collective.operand(), index);
        if (collective.async() && rootOf(collective.operand()) == *in)
          readingTokens.insert(collective.token());
        write(collective.result(), index);
        if (collective.kind() == program::Collective::DISPATCH) {
          read(collective.destinations(), index);
          write(collective.counts(), index);
        } else if (collective.kind() == program::Collective::DISPATCH_RETURN) {
          read(collective.destinations(), index);
          read(collective.counts(), index);
        }
        break;
      }
      case program::Instruction::kP2P: {
        const program::PointToPoint &p2p = instruction.p2p();
        if (p2p.kind() == program::PointToPoint::SEND) {
          read(p2p.buffer(), index);
          if (p2p.async() && rootOf(p2p.buffer()) == *in)
            readingTokens.insert(p2p.token());
        } else {
          write(p2p.buffer(), index);
        }
        break;
      }
      case program::Instruction::kWait:
        if (readingTokens.erase(instruction.wait().token()))
          lastRead = std::max(lastRead, index);
        break;
      default:
        break;
      }
    }
    if (!inPlace && firstWrite >= 0 && lastRead > firstWrite)
      return Status::error(where(size_t(lastRead)) + " reads '" + name +
                           "' after " + where(size_t(firstWrite)) +
                           " wrote its new value over it (the input and "
                           "output of a resident tensor share memory): a "
                           "compiler bug");
  }
  return Status::ok();
}

Status Executor::Impl::checkBindings() const {
  std::vector<int> bindingCount(slots.size(), 0);
  auto check =
      [&](const google::protobuf::RepeatedPtrField<program::Binding> &bindings,
          Buffer::Kind kind, const char *what) -> Status {
    std::set<std::string> names;
    for (const program::Binding &binding : bindings) {
      int32_t id = binding.buffer();
      if (!names.insert(binding.name()).second)
        return Status::error(std::string(what) + " '" + binding.name() +
                             "' is bound twice");
      if (id < 0 || size_t(id) >= slots.size() ||
          slots[size_t(id)].kind != kind)
        return Status::error(std::string(what) + " '" + binding.name() +
                             "' is bound to " + bufferName(id) +
                             ", which is not an " + what + " buffer");
      ++bindingCount[size_t(id)];
    }
    return Status::ok();
  };
  PARTITA_RETURN_IF_ERROR(check(program->inputs(), Buffer::INPUT, "input"));
  PARTITA_RETURN_IF_ERROR(check(program->outputs(), Buffer::OUTPUT, "output"));
  for (size_t id = 0; id < slots.size(); ++id) {
    Buffer::Kind kind = slots[id].kind;
    if ((kind == Buffer::INPUT || kind == Buffer::OUTPUT) &&
        bindingCount[id] != 1)
      return Status::error(bufferName(int32_t(id)) + " is an " +
                           (kind == Buffer::INPUT ? "input" : "output") +
                           " buffer bound " + std::to_string(bindingCount[id]) +
                           " times; it needs exactly one binding");
  }
  return Status::ok();
}

Status Executor::Impl::load(const WeightStore &weights) {
  if (program->format_version() != kProgramFormatVersion)
    return Status::error("program format version " +
                         std::to_string(program->format_version()) +
                         " is not supported (this runtime reads version " +
                         std::to_string(kProgramFormatVersion) + ")");
  if (program->rank() != communicator->rank() ||
      program->world_size() != communicator->worldSize())
    return Status::error(
        "the program is for rank " + std::to_string(program->rank()) + " of " +
        std::to_string(program->world_size()) + ", the communicator is rank " +
        std::to_string(communicator->rank()) + " of " +
        std::to_string(communicator->worldSize()));
  if (program->arena_bytes() > 0) {
    void *memory = nullptr;
    Status allocated =
        device->allocate(program->arena_bytes(), kArenaAlignment, &memory);
    if (!allocated)
      return Status::error("cannot allocate the activation arena (" +
                           std::to_string(program->arena_bytes()) +
                           " bytes): " + allocated.message());
    arena = std::unique_ptr<uint8_t, ArenaDeleter>(
        static_cast<uint8_t *>(memory), ArenaDeleter{device});
  }
  slots.resize(size_t(program->buffers_size()));
  bound.assign(slots.size(), nullptr);
  for (int32_t id = 0; id < program->buffers_size(); ++id)
    PARTITA_RETURN_IF_ERROR(loadBuffer(id, program->buffers(id), weights));
  PARTITA_RETURN_IF_ERROR(resolveAliases());
  PARTITA_RETURN_IF_ERROR(checkBindings());
  PARTITA_RETURN_IF_ERROR(checkInstructions());
  PARTITA_RETURN_IF_ERROR(checkResidentOrder());
  // Uploads are asynchronous: finish them here, where their errors belong.
  PARTITA_RETURN_IF_ERROR(device->synchronize());
  communication = std::make_unique<CommunicationThread>();
  return Status::ok();
}

Status Executor::Impl::bind(
    const std::vector<NamedTensor> &tensors,
    const google::protobuf::RepeatedPtrField<program::Binding> &bindings,
    const char *kind) {
  std::map<std::string, const Tensor *> given;
  for (const NamedTensor &named : tensors)
    if (!given.emplace(named.name, &named.tensor).second)
      return Status::error(std::string(kind) + " '" + named.name +
                           "' is given twice");
  std::string expected;
  for (const program::Binding &binding : bindings)
    if (!slots[size_t(binding.buffer())].resident)
      expected += (expected.empty() ? "" : ", ") + binding.name();
  for (const auto &[name, tensor] : given) {
    if (resident.count(name))
      return Status::error(std::string(kind) + " '" + name +
                           "' is resident in the executor: a run does not "
                           "bind it");
    bool known = false;
    for (const program::Binding &binding : bindings)
      known |= binding.name() == name;
    if (!known)
      return Status::error(std::string("the program has no ") + kind + " '" +
                           name + "' (its " + kind + "s: " + expected + ")");
  }
  for (const program::Binding &binding : bindings) {
    const BufferSlot &slot = slots[size_t(binding.buffer())];
    if (slot.resident)
      continue;
    std::string what = std::string(kind) + " '" + binding.name() + "'";
    auto it = given.find(binding.name());
    if (it == given.end())
      return Status::error(what + " (" + typeString(slot.dtype, slot.shape) +
                           ") is missing");
    const Tensor &tensor = *it->second;
    if (tensor.dtype != slot.dtype || tensor.shape != slot.shape)
      return Status::error(what + ": expected " +
                           typeString(slot.dtype, slot.shape) + ", got " +
                           typeString(tensor.dtype, tensor.shape));
    if (!tensor.data && slot.bytes > 0)
      return Status::error(what + " has no memory");
    bound[size_t(binding.buffer())] = tensor.data;
  }
  return Status::ok();
}

Status Executor::Impl::communicate(const program::Instruction &instruction) {
  if (instruction.has_p2p()) {
    const program::PointToPoint &p2p = instruction.p2p();
    Tensor buffer = resolve(p2p.buffer());
    if (p2p.kind() == program::PointToPoint::SEND)
      return communicator->send(buffer, p2p.peer(), p2p.tag());
    return communicator->recv(buffer, p2p.peer(), p2p.tag());
  }
  const program::Collective &collective = instruction.collective();
  Tensor in = resolve(collective.operand());
  Tensor out = resolve(collective.result());
  Group group(collective.group().begin(), collective.group().end());
  Reduction reduction = Reduction::Sum;
  switch (collective.kind()) {
  case program::Collective::ALL_REDUCE:
    (void)parseReduction(collective.reduction(), reduction);
    return communicator->allReduce(in, out, group, reduction);
  case program::Collective::ALL_GATHER:
    return communicator->allGather(in, out, group, collective.dim());
  case program::Collective::REDUCE_SCATTER:
    (void)parseReduction(collective.reduction(), reduction);
    return communicator->reduceScatter(in, out, group, collective.dim(),
                                       reduction);
  case program::Collective::ALL_TO_ALL:
    return communicator->allToAll(in, out, group, collective.dim(),
                                  collective.concat_dim());
  case program::Collective::COLLECTIVE_PERMUTE:
    return communicator->collectivePermute(in, out, group, collective.shift());
  case program::Collective::DISPATCH:
    PARTITA_RETURN_IF_ERROR(
        communicator->dispatch(in, resolve(collective.destinations()), out,
                               resolve(collective.counts()), group));
    countDispatch(collective, in, group);
    return Status::ok();
  case program::Collective::DISPATCH_RETURN:
    PARTITA_RETURN_IF_ERROR(communicator->dispatchReturn(
        in, resolve(collective.counts()), resolve(collective.destinations()),
        out, group));
    countDispatch(collective, in, group);
    return Status::ok();
  default:
    return Status::error("unknown collective kind");
  }
}

void Executor::Impl::countDispatch(const program::Collective &collective,
                                   const Tensor &in, const Group &group) {
  // The rows that leave are the operand's, both ways.
  int64_t rowBytes = in.shape.empty() || in.shape[0] == 0
                         ? 0
                         : int64_t(in.byteSize()) / in.shape[0];
  int64_t self = -1;
  for (size_t j = 0; j < group.size(); ++j)
    if (group[j] == communicator->rank())
      self = int64_t(j);
  const int64_t *counts = resolve(collective.counts()).as<int64_t>();
  int64_t leaving = 0;
  if (collective.kind() == program::Collective::DISPATCH) {
    const int64_t *dest = resolve(collective.destinations()).as<int64_t>();
    for (int64_t i = 0; i < in.shape[0]; ++i)
      leaving +=
          dest[i] >= 0 && dest[i] < int64_t(group.size()) && dest[i] != self;
    if (collective.destinations() != lastDestinations) {
      ++dispatchStats.exchanges;
      for (size_t j = 0; j < group.size(); ++j)
        dispatchStats.rowsReceived += counts[j];
    }
    lastDestinations = collective.destinations();
  } else {
    for (size_t j = 0; j < group.size(); ++j)
      if (int64_t(j) != self)
        leaving += counts[j];
  }
  dispatchStats.bytesSent += leaving * rowBytes;
}

Status Executor::Impl::execute() {
  lastDestinations = -1;
  BufferResolver resolver = [this](int32_t id) { return resolve(id); };
  // Started asynchronous transfers, by token: the instruction that started
  // them (for messages), their completion and the device event that marks
  // it on the communication queue.
  struct Started {
    size_t origin;
    std::future<Status> done;
    std::shared_ptr<std::shared_ptr<DeviceEvent>> finished;
  };
  std::map<int32_t, Started> inFlight;
  Status failure = Status::ok();
  for (int index = 0; index < program->instructions_size(); ++index) {
    const program::Instruction &instruction = program->instructions(index);
    Status status = Status::ok();
    size_t origin = size_t(index);
    switch (instruction.op_case()) {
    case program::Instruction::kKernel:
      status = device->runKernel(instruction.kernel(), resolver);
      break;
    case program::Instruction::kCollective:
    case program::Instruction::kP2P: {
      bool async = instruction.has_collective()
                       ? instruction.collective().async()
                       : instruction.p2p().async();
      int32_t token = instruction.has_collective()
                          ? instruction.collective().token()
                          : instruction.p2p().token();
      // On a device with queues, the communication queue starts after the
      // kernels issued so far (they produce its operands), and the kernels
      // after the wait start after the communication (they read its result).
      std::shared_ptr<DeviceEvent> computed;
      status = device->record(DeviceQueue::Compute, computed);
      if (!status)
        break;
      auto finished = std::make_shared<std::shared_ptr<DeviceEvent>>();
      std::future<Status> done =
          communication->submit([this, &instruction, computed, finished] {
            PARTITA_RETURN_IF_ERROR(
                device->waitFor(DeviceQueue::Communication, computed.get()));
            PARTITA_RETURN_IF_ERROR(communicate(instruction));
            return device->record(DeviceQueue::Communication, *finished);
          });
      if (async) {
        inFlight[token] = {origin, std::move(done), std::move(finished)};
      } else {
        status = done.get();
        if (status)
          status = device->waitFor(DeviceQueue::Compute, finished->get());
      }
      break;
    }
    case program::Instruction::kWait: {
      auto it = inFlight.find(instruction.wait().token());
      // The load-time check pairs every wait with a started token.
      origin = it->second.origin;
      status = it->second.done.get();
      if (status)
        status =
            device->waitFor(DeviceQueue::Compute, it->second.finished->get());
      inFlight.erase(it);
      break;
    }
    default:
      break;
    }
    if (!status) {
      failure = Status::error("rank " + std::to_string(program->rank()) + ": " +
                              where(origin) + ": " + status.message());
      break;
    }
  }
  if (failure) {
    // Everything this rank sends and receives is issued and complete: tell
    // the communicator, which fails a peer still waiting for this rank and,
    // after the last rank, a message nobody received.
    Status ended = communicator->endRun();
    if (!ended)
      failure = Status::error("rank " + std::to_string(program->rank()) +
                              ": at the end of the run: " + ended.message());
    return failure;
  }
  // Peers may be blocked on this rank; release them before draining the
  // transfers in flight, which reference this run's buffers.
  communicator->abort(failure.message());
  for (auto &[token, started] : inFlight)
    (void)started.done.get();
  return failure;
}

Status Executor::Impl::executeStaged() {
  std::string rank = "rank " + std::to_string(program->rank()) + ": ";
  auto staged = [&](Status status, const std::string &what) {
    if (status)
      return status;
    std::string message = rank + what + ": " + status.message();
    communicator->abort(message);
    return Status::error(message);
  };
  for (const program::Binding &binding : program->inputs()) {
    const BufferSlot &slot = slots[size_t(binding.buffer())];
    if (slot.bytes > 0 && !slot.resident)
      PARTITA_RETURN_IF_ERROR(staged(
          device->copyToDevice(slot.memory, bound[size_t(binding.buffer())],
                               size_t(slot.bytes)),
          "input '" + binding.name() + "'"));
  }
  PARTITA_RETURN_IF_ERROR(execute());
  for (const program::Binding &binding : program->outputs()) {
    const BufferSlot &slot = slots[size_t(binding.buffer())];
    if (slot.bytes > 0 && !slot.resident)
      PARTITA_RETURN_IF_ERROR(
          staged(device->copyToHost(bound[size_t(binding.buffer())],
                                    slot.memory, size_t(slot.bytes)),
                 "output '" + binding.name() + "'"));
  }
  return staged(device->synchronize(), device->name());
}

Executor::Executor() : impl(std::make_unique<Impl>()) {}
Executor::~Executor() = default;

Status Executor::create(const program::Program &program,
                        const WeightStore &weights, Communicator &communicator,
                        ThreadPool &pool, std::unique_ptr<Executor> &executor,
                        const std::vector<NamedTensor> &resident) {
  auto device = std::make_unique<HostDevice>(pool);
  Device &ref = *device;
  PARTITA_RETURN_IF_ERROR(
      create(program, weights, communicator, ref, executor, resident));
  executor->impl->ownedDevice = std::move(device);
  return Status::ok();
}

Status Executor::create(const program::Program &program,
                        const WeightStore &weights, Communicator &communicator,
                        Device &device, std::unique_ptr<Executor> &executor,
                        const std::vector<NamedTensor> &resident) {
  std::unique_ptr<Executor> created(new Executor());
  for (const NamedTensor &named : resident)
    if (!created->impl->resident.emplace(named.name, named.tensor).second)
      return Status::error("rank " + std::to_string(program.rank()) +
                           ": resident '" + named.name + "' is given twice");
  created->impl->program = &program;
  created->impl->communicator = &communicator;
  created->impl->device = &device;
  Status loaded = Status::ok();
  try {
    loaded = created->impl->load(weights);
  } catch (const std::exception &e) {
    loaded = Status::error(e.what());
  }
  if (!loaded)
    return Status::error("rank " + std::to_string(program.rank()) + ": " +
                         loaded.message());
  executor = std::move(created);
  return Status::ok();
}

const Executor::DispatchStats &Executor::dispatchStats() const {
  return impl->dispatchStats;
}

Status Executor::run(const std::vector<NamedTensor> &inputs,
                     const std::vector<NamedTensor> &outputs) {
  std::string rank = "rank " + std::to_string(impl->program->rank()) + ": ";
  try {
    Status bound = impl->bind(inputs, impl->program->inputs(), "input");
    if (bound)
      bound = impl->bind(outputs, impl->program->outputs(), "output");
    if (!bound)
      return Status::error(rank + bound.message());
    if (impl->device->sharesHostMemory())
      return impl->execute();
    return impl->executeStaged();
  } catch (const std::exception &e) {
    std::string message = rank + e.what();
    impl->communicator->abort(message);
    return Status::error(message);
  }
}
