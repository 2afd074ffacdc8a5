//===- Cluster.cpp - The machine a program is planned for -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Analysis/Cluster.h"

#include "mlir/IR/BuiltinOps.h"
#include "partita/runtime/JsonDepth.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::partita;

LinkModel ClusterModel::linkFor(ArrayRef<std::string> names,
                                dist::MeshOp mesh) const {
  LinkModel slowest{0, 0};
  bool any = false;
  for (const std::string &axis : names) {
    dist::AxisRole role = dist::getDefaultAxisRole(axis);
    if (mesh)
      role = mesh.getAxisRole(axis).value_or(role);
    LinkModel link = role == dist::AxisRole::Tensor ||
                             role == dist::AxisRole::Sequence ||
                             role == dist::AxisRole::Expert
                         ? intraNode
                         : interNode;
    if (auto it = axes.find(axis); it != axes.end()) {
      link.latencySeconds =
          it->second.latencySeconds.value_or(link.latencySeconds);
      link.bytesPerSecond =
          it->second.bytesPerSecond.value_or(link.bytesPerSecond);
    }
    if (!any || link.bytesPerSecond < slowest.bytesPerSecond)
      slowest.bytesPerSecond = link.bytesPerSecond;
    slowest.latencySeconds =
        std::max(slowest.latencySeconds, link.latencySeconds);
    any = true;
  }
  return any ? slowest : intraNode;
}

double ClusterModel::collectiveSeconds(StringRef kind, int64_t n, int64_t bytes,
                                       ArrayRef<std::string> names,
                                       dist::MeshOp mesh) const {
  if (n <= 1)
    return 0;
  LinkModel link = linkFor(names, mesh);
  int64_t steps = kind == "all_reduce"           ? 2 * (n - 1)
                  : kind == "collective_permute" ? 1
                                                 : n - 1;
  return steps * link.latencySeconds +
         static_cast<double>(bytes) / link.bytesPerSecond;
}

/// Refuses a key of `object` that is not among `known` (a misspelled field
/// would otherwise be ignored, and its default used).
static llvm::Error checkKeys(const llvm::json::Object &object,
                             ArrayRef<StringRef> known, StringRef where) {
  for (const auto &entry : object) {
    StringRef key = entry.first;
    if (!llvm::is_contained(known, key))
      return llvm::createStringError((where + ": unknown field '" + key +
                                      "'; expected " + llvm::join(known, ", "))
                                         .str());
  }
  return llvm::Error::success();
}

/// The number `key` of `object`, if given: finite, and positive (or with
/// `orZero`, not negative); anything else is an error naming the field.
static llvm::Expected<std::optional<double>>
readNumber(const llvm::json::Object &object, StringRef key, StringRef where,
           bool orZero = false) {
  const llvm::json::Value *value = object.get(key);
  if (!value)
    return std::nullopt;
  std::optional<double> number = value->getAsNumber();
  if (!number || !std::isfinite(*number))
    return llvm::createStringError(
        (where + ": " + key + " must be a finite number").str());
  if (orZero ? *number < 0 : *number <= 0)
    return llvm::createStringError(
        (where + ": " + key +
         (orZero ? " must not be negative" : " must be positive"))
            .str());
  return number;
}

/// Reads the fields `object` gives (none when it is null).
static llvm::Error readLink(const llvm::json::Object *object, AxisLink &link,
                            StringRef where) {
  if (!object)
    return llvm::Error::success();
  if (llvm::Error e =
          checkKeys(*object, {"latency_us", "bandwidth_gb_per_s"}, where))
    return e;
  llvm::Expected<std::optional<double>> latency =
      readNumber(*object, "latency_us", where, /*orZero=*/true);
  if (!latency)
    return latency.takeError();
  if (*latency)
    link.latencySeconds = **latency * 1e-6;
  llvm::Expected<std::optional<double>> bandwidth =
      readNumber(*object, "bandwidth_gb_per_s", where);
  if (!bandwidth)
    return bandwidth.takeError();
  if (*bandwidth)
    link.bytesPerSecond = **bandwidth * 1e9;
  return llvm::Error::success();
}

/// A field that must be an object, if given.
static llvm::Expected<const llvm::json::Object *>
readObject(const llvm::json::Object &object, StringRef key) {
  const llvm::json::Value *value = object.get(key);
  if (!value)
    return nullptr;
  if (const llvm::json::Object *inner = value->getAsObject())
    return inner;
  return llvm::createStringError(("'" + key + "' must be an object").str());
}

static llvm::Error readLink(const llvm::json::Object *object, LinkModel &link,
                            StringRef where) {
  AxisLink given;
  if (llvm::Error e = readLink(object, given, where))
    return e;
  link.latencySeconds = given.latencySeconds.value_or(link.latencySeconds);
  link.bytesPerSecond = given.bytesPerSecond.value_or(link.bytesPerSecond);
  return llvm::Error::success();
}

namespace {

/// A machine the planner knows by name; docs/planning.md cites each figure.
struct Preset {
  llvm::StringLiteral name;
  double flopsPerSecond;
  double hbmBytesPerSecond;
  double memoryBytes;
  /// Per direction, per device.
  double nvlinkBytesPerSecond;
};

/// Dense bf16 tensor-core peaks, HBM bandwidth, memory as the datasheets
/// state it (10^9 bytes), NVLink per direction. Every preset's nodes are
/// joined by InfiniBand NDR, 400 Gb/s per device.
constexpr Preset kPresets[] = {
    {"a100-80g", 312e12, 2.039e12, 80e9, 300e9},
    {"h100-80g", 989e12, 3.35e12, 80e9, 450e9},
    {"h200-141g", 989e12, 4.8e12, 141e9, 450e9},
};
constexpr double kInfinibandNdrBytesPerSecond = 400e9 / 8;

/// The names in presetNames() order: the machines, then `default`.
constexpr llvm::StringRef kPresetNames[] = {"a100-80g", "h100-80g", "h200-141g",
                                            "default"};

std::string knownPresets() {
  std::string text;
  for (StringRef name : kPresetNames)
    text += (text.empty() ? "" : ", ") + name.str();
  return text;
}

} // namespace

ArrayRef<StringRef> ClusterModel::presetNames() { return kPresetNames; }

llvm::Expected<ClusterModel> ClusterModel::fromPreset(StringRef spec) {
  auto [name, shape] = spec.split(':');
  ClusterModel model;
  model.name = spec.str();
  if (name != "default") {
    const Preset *preset = llvm::find_if(
        kPresets, [&](const Preset &p) { return p.name == name; });
    if (preset == std::end(kPresets))
      return llvm::createStringError("unknown cluster preset '" + name.str() +
                                     "' (known: " + knownPresets() +
                                     "; or give a JSON file)");
    model.device.flopsPerSecond = preset->flopsPerSecond;
    model.device.bytesPerSecond = preset->hbmBytesPerSecond;
    model.deviceMemoryBytes = preset->memoryBytes;
    model.intraNode.bytesPerSecond = preset->nvlinkBytesPerSecond;
    model.interNode.bytesPerSecond = kInfinibandNdrBytesPerSecond;
  }
  if (spec.contains(':')) {
    auto [nodes, gpus] = shape.split('x');
    // Bounded so that nodes * devices never overflows.
    constexpr int64_t kMaxCount = 1 << 20;
    if (nodes.getAsInteger(10, model.nodes) ||
        gpus.getAsInteger(10, model.devicesPerNode) || model.nodes < 1 ||
        model.devicesPerNode < 1 || model.nodes > kMaxCount ||
        model.devicesPerNode > kMaxCount)
      return llvm::createStringError(
          "cluster preset '" + spec.str() +
          "': the suffix must be NODESxGPUS with positive counts, e.g. " +
          name.str() + ":2x8");
  }
  return model;
}

llvm::Expected<ClusterModel> ClusterModel::fromJson(StringRef text) {
  // Before the parser, which recurses once per level.
  if (std::string deep = ::partita::runtime::checkJsonDepth(
          std::string_view(text.data(), text.size()), "the cluster");
      !deep.empty())
    return llvm::createStringError(deep);
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return parsed.takeError();
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return llvm::createStringError("the cluster file is not a JSON object");
  ClusterModel model;
  model.name = "custom";
  if (llvm::Error e = checkKeys(*root,
                                {"preset", "name", "nodes", "devices_per_node",
                                 "device", "intra_node", "inter_node", "axes"},
                                "the cluster"))
    return std::move(e);
  if (const llvm::json::Value *preset = root->get("preset")) {
    std::optional<StringRef> spec = preset->getAsString();
    if (!spec)
      return llvm::createStringError(
          "'preset' must be a string such as \"h100-80g:2x8\"");
    llvm::Expected<ClusterModel> base = fromPreset(*spec);
    if (!base)
      return base.takeError();
    model = std::move(*base);
  }
  if (const llvm::json::Value *name = root->get("name")) {
    std::optional<StringRef> text = name->getAsString();
    if (!text)
      return llvm::createStringError("'name' must be a string");
    model.name = text->str();
  }
  for (auto [key, field] :
       {std::pair{"nodes", &model.nodes},
        std::pair{"devices_per_node", &model.devicesPerNode}})
    if (const llvm::json::Value *value = root->get(key)) {
      std::optional<int64_t> count = value->getAsInteger();
      if (!count || *count < 1 || *count > (1 << 20))
        return llvm::createStringError(std::string("'") + key +
                                       "' must be a positive integer");
      *field = *count;
    }
  llvm::Expected<const llvm::json::Object *> device =
      readObject(*root, "device");
  if (!device)
    return device.takeError();
  if (*device) {
    if (llvm::Error e = checkKeys(
            **device, {"flops_per_second", "bytes_per_second", "memory_bytes"},
            "device"))
      return std::move(e);
    for (auto [key, field] :
         {std::pair{"flops_per_second", &model.device.flopsPerSecond},
          std::pair{"bytes_per_second", &model.device.bytesPerSecond},
          std::pair{"memory_bytes", &model.deviceMemoryBytes}}) {
      llvm::Expected<std::optional<double>> number =
          readNumber(**device, key, "device");
      if (!number)
        return number.takeError();
      if (*number)
        *field = **number;
    }
  }
  for (auto [key, link] : {std::pair{"intra_node", &model.intraNode},
                           std::pair{"inter_node", &model.interNode}}) {
    llvm::Expected<const llvm::json::Object *> object = readObject(*root, key);
    if (!object)
      return object.takeError();
    if (llvm::Error e = readLink(*object, *link, key))
      return std::move(e);
  }
  llvm::Expected<const llvm::json::Object *> axes = readObject(*root, "axes");
  if (!axes)
    return axes.takeError();
  if (*axes)
    for (const auto &[name, value] : **axes) {
      const llvm::json::Object *object = value.getAsObject();
      if (!object)
        return llvm::createStringError(
            ("axes: '" + StringRef(name) + "' must be an object").str());
      AxisLink link;
      if (llvm::Error e = readLink(object, link, name))
        return std::move(e);
      model.axes[name.str()] = link;
    }
  return model;
}

FailureOr<ClusterModel> ClusterModel::of(Operation *op) {
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    module = op->getParentOfType<ModuleOp>();
  if (!module)
    return ClusterModel();
  auto text = module->getAttrOfType<StringAttr>(kAttributeName);
  if (!text)
    return ClusterModel();
  llvm::Expected<ClusterModel> parsed = fromJson(text.getValue());
  if (!parsed)
    return module.emitError()
           << kAttributeName << ": " << llvm::toString(parsed.takeError());
  return std::move(*parsed);
}
