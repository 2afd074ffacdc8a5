//===- Moe.cpp - mixtures of experts as a grouped product -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// nn.moe as the host kernel computes it (runtime/src/kernels/Moe.cpp), in
// four launches of one generated function's entry points (Prelude: moe_*):
// route sorts the (token, slot) pairs by expert and cuts each expert's rows
// into tiles of 16; fc1 (with the activation) and fc2 are grouped products,
// a 16x16 block of one expert's rows and features per CUDA block, over the
// routed rows only; combine weights and adds each token's slots. The entry
// points share the function's scratch (`__device__` statics sized by the
// shapes): the routing tables and the fp32 rows of fc1's activation
// [S, F] and of fc2 [S, H], S = T * k. Launches run in order on the
// compute stream, so one mixture's scratch serves every launch of it.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include "llvm/ADT/StringSwitch.h"

#include <algorithm>
#include <optional>

namespace partita::target::cuda {

namespace {

/// The Prelude's activation code of a program's activation name, or none
/// for swiglu (a gate/up layout instead).
std::optional<int> activationCode(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<int>>(name)
      .Case("relu", 0)
      .Case("gelu", 1)
      .Case("gelu_tanh", 2)
      .Case("silu", 3)
      .Case("identity", 4)
      .Default(std::nullopt);
}

/// The most experts the routing block counts in shared memory.
constexpr int64_t kMaxExperts = 4096;

} // namespace

llvm::Expected<LoweredKernel> emitMoe(const KernelContext &ctx) {
  auto activation = ctx.getString("activation");
  if (!activation)
    return activation.takeError();
  bool swiglu = *activation == "swiglu";
  std::optional<int> code = activationCode(*activation);
  if (!swiglu && !code)
    return ctx.error("unknown activation '" + *activation + "'");
  bool flags[5];
  const char *flagNames[5] = {"interleaved", "has_fc3", "has_fc1_bias",
                              "has_fc2_bias", "has_fc3_bias"};
  for (int i = 0; i < 5; ++i) {
    auto value = ctx.getBool(flagNames[i]);
    if (!value)
      return value.takeError();
    flags[i] = *value;
  }
  auto [interleaved, hasFc3, hasBias1, hasBias2, hasBias3] = flags;
  std::optional<double> limit;
  double alpha = 1.0, beta = 0.0;
  for (auto [name, field] :
       {std::pair("alpha", &alpha), std::pair("beta", &beta)}) {
    if (!ctx.getKernel().attributes().contains(name))
      continue;
    auto value = ctx.getFloat(name);
    if (!value)
      return value.takeError();
    *field = *value;
  }
  if (ctx.getKernel().attributes().contains("limit")) {
    auto value = ctx.getFloat("limit");
    if (!value)
      return value.takeError();
    if (!(*value > 0))
      return ctx.error("the swiglu limit must be positive");
    limit = *value;
  }
  if ((hasFc3 || interleaved || limit) && !swiglu)
    return ctx.error("fc3, interleaved and limit belong to a swiglu");
  if (hasFc3 && interleaved)
    return ctx.error("interleaved is fc1's layout, not fc3's");
  if (hasBias3 && !hasFc3)
    return ctx.error("fc3_bias needs fc3");
  if (auto err =
          ctx.expectCounts(5 + hasFc3 + hasBias1 + hasBias2 + hasBias3, 1))
    return std::move(err);

  llvm::SmallVector<BufferView, 9> views;
  for (int i = 0, e = ctx.getKernel().operands_size(); i < e; ++i) {
    auto view = ctx.operand(i);
    if (!view)
      return view.takeError();
    views.push_back(*view);
  }
  auto result = ctx.result(0);
  if (!result)
    return result.takeError();
  const BufferView &x = views[0], &ids = views[1], &weights = views[2],
                   &fc1 = views[3], &fc2 = views[4];
  size_t next = 5;
  const BufferView *fc3 = hasFc3 ? &views[next++] : nullptr;
  const BufferView *bias[3] = {nullptr, nullptr, nullptr};
  for (int i = 0; i < 3; ++i)
    if (flags[2 + i])
      bias[i] = &views[next++];

  if (!isFloat(x.dtype) || x.rank() != 2 || ids.rank() != 2 ||
      ids.shape[0] != x.shape[0] || ids.shape[1] < 1)
    return ctx.error("the input " + shapeString(x.shape) +
                     " must be float [tokens, hidden] and the expert ids " +
                     shapeString(ids.shape) + " [tokens, k]");
  if (ids.dtype != program::I64 && ids.dtype != program::I32)
    return ctx.error("the expert ids must be i32 or i64, got " +
                     dtypeName(ids.dtype));
  int64_t tokens = x.shape[0], hidden = x.shape[1], k = ids.shape[1];
  if (fc1.rank() != 3 || fc2.rank() != 3)
    return ctx.error("fc1 " + shapeString(fc1.shape) + " and fc2 " +
                     shapeString(fc2.shape) + " must be [E, out, in]");
  int64_t experts = fc1.shape[0], ffn = fc2.shape[2];
  int64_t fused = swiglu && !hasFc3 ? 2 * ffn : ffn;
  struct Expected {
    const BufferView *view;
    llvm::SmallVector<int64_t, 3> shape;
    const char *what;
  };
  Expected checks[] = {{&weights, {tokens, k}, "the routing weights"},
                       {&*result, {tokens, hidden}, "the result"},
                       {&fc1, {experts, fused, hidden}, "fc1"},
                       {&fc2, {experts, hidden, ffn}, "fc2"},
                       {fc3, {experts, ffn, hidden}, "fc3"},
                       {bias[0], {experts, fused}, "fc1_bias"},
                       {bias[1], {experts, hidden}, "fc2_bias"},
                       {bias[2], {experts, ffn}, "fc3_bias"}};
  for (const Expected &c : checks)
    if (c.view && (c.view->dtype != x.dtype ||
                   llvm::ArrayRef(c.view->shape) != llvm::ArrayRef(c.shape)))
      return ctx.error(std::string(c.what) + " must be " + dtypeName(x.dtype) +
                       " " + shapeString(c.shape) + ", got " +
                       dtypeName(c.view->dtype) + " " +
                       shapeString(c.view->shape));
  int64_t slots = tokens * k;
  if (tokens == 0 || hidden == 0 || ffn == 0 || experts == 0)
    return ctx.error("empty mixtures are not supported");
  if (experts > kMaxExperts)
    return ctx.error("more than " + llvm::Twine(kMaxExperts) +
                     " experts are not supported (the routing block counts "
                     "them in shared memory)");
  // Rows and tiles are ints; the scratch is indexed in 64 bits.
  int64_t maxTiles = (slots + 15) / 16 + experts;
  if (maxTiles >= (int64_t(1) << 31) ||
      slots * std::max(ffn, hidden) >= (int64_t(1) << 31) ||
      (std::max(ffn, hidden) + 15) / 16 > 65535)
    return ctx.error("mixtures this large are not supported by the "
                     "generated kernels");

  Signature sig;
  std::string a[9];
  const char *names[9] = {"x", "ids", "w", "w1", "w2", "w3", "b1", "b2", "b3"};
  a[0] = sig.addInput(x, names[0]);
  a[1] = sig.addInput(ids, names[1]);
  a[2] = sig.addInput(weights, names[2]);
  a[3] = sig.addInput(fc1, names[3]);
  a[4] = sig.addInput(fc2, names[4]);
  std::string type = cudaType(x.dtype);
  std::string null = "(const " + type + " *)nullptr";
  a[5] = fc3 ? sig.addInput(*fc3, names[5]) : null;
  for (int i = 0; i < 3; ++i)
    a[6 + i] = bias[i] ? sig.addInput(*bias[i], names[6 + i]) : null;
  std::string init;
  auto sink = emitFloatSink(ctx, *result, sig, init);
  if (!sink)
    return sink.takeError();

  int glu = !swiglu ? 0 : hasFc3 ? 1 : interleaved ? 2 : 3;
  auto b = [](bool value) { return value ? "true" : "false"; };
  std::string text = *sink;
  auto scratch = [&](const char *type, const char *name, int64_t count) {
    text += "__device__ " + std::string(type) + " @NAME@_" + name + "[" +
            std::to_string(count) + "];\n";
  };
  scratch("int", "first", experts + 1);
  scratch("int", "slot", slots);
  scratch("int", "row_of", slots);
  scratch("int", "tile_expert", maxTiles);
  scratch("int", "tile_row", maxTiles);
  scratch("int", "tiles", 1);
  scratch("float", "act", slots * ffn);
  scratch("float", "out", slots * hidden);
  text +=
      "static __device__ __forceinline__ pt::MoeScratch @NAME@_scratch() {\n"
      "  return {@NAME@_first, @NAME@_slot, @NAME@_row_of, "
      "@NAME@_tile_expert,\n          @NAME@_tile_row, @NAME@_tiles, "
      "@NAME@_act, @NAME@_out};\n}\n";
  auto entry = [&](const char *suffix, const std::string &call) {
    text += "extern \"C\" __global__ void __launch_bounds__(256) @NAME@_" +
            std::string(suffix) + "(" + sig.parameters() + ") {\n  " + call +
            ";\n}\n";
  };
  entry("route", "pt::moe_route<" + std::string(cudaType(ids.dtype)) + ", " +
                     literal(slots) + ", " + literal(experts) + ">(" + a[1] +
                     ", @NAME@_scratch())");
  entry("fc1", "pt::moe_fc1<" + type + ", " + literal(k) + ", " +
                   literal(hidden) + ", " + literal(ffn) + ", " +
                   literal(experts) + ", " + std::to_string(code.value_or(4)) +
                   ", " + std::to_string(glu) + ", " + b(bias[0]) + ", " +
                   b(bias[2]) + ">(" + a[0] + ", " + a[3] + ", " + a[5] + ", " +
                   a[6] + ", " + a[8] + ", " + floatLiteral(alpha) + ", " +
                   floatLiteral(beta) + ", " +
                   floatLiteral(limit.value_or(-1.0)) + ", @NAME@_scratch())");
  entry("fc2", "pt::moe_fc2<" + type + ", " + literal(hidden) + ", " +
                   literal(ffn) + ", " + b(bias[1]) + ">(" + a[4] + ", " +
                   a[7] + ", @NAME@_scratch())");
  entry("combine", "pt::moe_combine<" + type + ", " + literal(tokens) + ", " +
                       literal(k) + ", " + literal(hidden) + ">(" + a[2] +
                       ", @NAME@_scratch(), " + init + ")");

  LoweredKernel lowered;
  auto launch = [&](const char *suffix, const std::string &what,
                    std::array<uint32_t, 3> grid) {
    GeneratedKernel g;
    g.label = "moe";
    g.entry = std::string("_") + suffix;
    g.summary = ctx.summary() + " (" + what + ")";
    g.text = text;
    g.grid = grid;
    g.block = {256, 1, 1};
    g.arguments = sig.arguments();
    lowered.launches.push_back(std::move(g));
  };
  auto tiles = static_cast<uint32_t>(maxTiles);
  launch("route",
         "route " + std::to_string(slots) + " slots over " +
             std::to_string(experts) + " experts",
         {1, 1, 1});
  launch("fc1",
         std::string(swiglu ? "fc1 and swiglu" : "fc1 and activation") +
             ", grouped",
         {tiles, static_cast<uint32_t>((ffn + 15) / 16), 1});
  launch("fc2", "fc2, grouped",
         {tiles, static_cast<uint32_t>((hidden + 15) / 16), 1});
  int64_t outputs = tokens * hidden;
  launch("combine", "combine",
         {static_cast<uint32_t>(
              std::clamp<int64_t>((outputs + 255) / 256, 1, 65535)),
          1, 1});
  return lowered;
}

} // namespace partita::target::cuda
