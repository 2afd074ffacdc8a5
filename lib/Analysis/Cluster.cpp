//===- Cluster.cpp - The machine a program is planned for -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Analysis/Cluster.h"

#include "llvm/Support/JSON.h"

#include <algorithm>

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
    LinkModel link =
        role == dist::AxisRole::Tensor || role == dist::AxisRole::Sequence
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

/// Reads the fields `object` gives (none when it is null).
static llvm::Error readLink(const llvm::json::Object *object, AxisLink &link,
                            StringRef where) {
  if (!object)
    return llvm::Error::success();
  if (auto latency = object->getNumber("latency_us"))
    link.latencySeconds = *latency * 1e-6;
  if (auto bandwidth = object->getNumber("bandwidth_gb_per_s")) {
    if (*bandwidth <= 0)
      return llvm::createStringError(
          (where + ": bandwidth_gb_per_s must be positive").str());
    link.bytesPerSecond = *bandwidth * 1e9;
  }
  return llvm::Error::success();
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

llvm::Expected<ClusterModel> ClusterModel::fromJson(StringRef text) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return parsed.takeError();
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return llvm::createStringError("the cluster file is not a JSON object");
  ClusterModel model;
  if (const llvm::json::Object *device = root->getObject("device")) {
    if (auto flops = device->getNumber("flops_per_second"))
      model.device.flopsPerSecond = *flops;
    if (auto bytes = device->getNumber("bytes_per_second"))
      model.device.bytesPerSecond = *bytes;
  }
  if (llvm::Error e = readLink(root->getObject("intra_node"), model.intraNode,
                               "intra_node"))
    return std::move(e);
  if (llvm::Error e = readLink(root->getObject("inter_node"), model.interNode,
                               "inter_node"))
    return std::move(e);
  if (const llvm::json::Object *axes = root->getObject("axes"))
    for (const auto &[name, value] : *axes) {
      AxisLink link;
      if (llvm::Error e = readLink(value.getAsObject(), link, name))
        return std::move(e);
      model.axes[name.str()] = link;
    }
  return model;
}
