//===- CheckpointJson.cpp - checkpoint.json -------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Checkpoint.h"

#include "ManifestJson.h"
#include "partita/runtime/JsonDepth.h"
#include "partita/runtime/Tensor.h"

#include <nlohmann/json.hpp>

#include <exception>

using namespace partita::runtime;
using json = nlohmann::json;

namespace {

json specsToJson(const std::vector<TensorSpec> &specs) {
  json list = json::array();
  for (const TensorSpec &spec : specs) {
    json item = {
        {"name", spec.name},
        {"dtype", dtypeName(spec.dtype)},
        {"shape", spec.shape},
        {"sharding",
         {{"dims", spec.sharding.dims}, {"partial", spec.sharding.partial}}}};
    if (!spec.onnxShape.empty())
      item["onnx_shape"] = spec.onnxShape;
    list.push_back(std::move(item));
  }
  return list;
}

std::vector<TensorSpec> specsFromJson(const json &list) {
  std::vector<TensorSpec> specs;
  for (const json &item : list) {
    TensorSpec spec;
    spec.name = item.at("name").get<std::string>();
    spec.dtype = dtypeFromName(item.at("dtype").get<std::string>());
    if (spec.dtype == partita::program::DTYPE_UNSPECIFIED)
      throw std::runtime_error("'" + spec.name + "' has an unknown dtype");
    spec.shape = item.at("shape").get<std::vector<int64_t>>();
    spec.sharding.dims = item.at("sharding")
                             .at("dims")
                             .get<std::vector<std::vector<std::string>>>();
    spec.sharding.partial =
        item.at("sharding").at("partial").get<std::vector<std::string>>();
    if (item.contains("onnx_shape"))
      spec.onnxShape = item.at("onnx_shape").get<std::vector<int64_t>>();
    specs.push_back(std::move(spec));
  }
  return specs;
}

} // namespace

Status partita::runtime::checkpointToJson(const CheckpointManifest &checkpoint,
                                          std::string &text) {
  try {
    json axes = json::array();
    for (const MeshAxis &axis : checkpoint.meshAxes)
      axes.push_back(
          {{"name", axis.name}, {"size", axis.size}, {"role", axis.role}});
    json shards = json::array();
    for (const CheckpointShard &shard : checkpoint.shards) {
      json coords = json::object();
      for (const auto &[axis, coord] : shard.coords)
        coords[axis] = coord;
      json slices = json::object();
      for (const auto &[name, ranges] : shard.slices) {
        json list = json::array();
        for (const auto &[start, stop] : ranges)
          list.push_back({start, stop});
        slices[name] = list;
      }
      shards.push_back({{"rank", shard.rank},
                        {"coords", coords},
                        {"file", shard.file},
                        {"sha256", shard.sha256},
                        {"slices", slices}});
    }
    json root = {{"format", kCheckpointFormat},
                 {"step", checkpoint.step},
                 {"mesh", {{"axes", axes}}},
                 {"optimizer", checkpoint.optimizer},
                 {"parameters", specsToJson(checkpoint.parameters)},
                 {"state", specsToJson(checkpoint.state)},
                 {"ranks", shards}};
    text = root.dump(2) + "\n";
  } catch (const std::exception &e) {
    return Status::error(std::string("cannot write checkpoint.json: ") +
                         e.what());
  }
  return Status::ok();
}

Status partita::runtime::checkpointFromJson(const std::string &text,
                                            const std::string &where,
                                            CheckpointManifest &checkpoint) {
  // nlohmann's parser recurses per nesting level.
  if (std::string deep = checkJsonDepth(text, where); !deep.empty())
    return Status::error(deep);
  try {
    json root = json::parse(text);
    if (!root.is_object() || !root.contains("format") ||
        !root["format"].is_string() ||
        root["format"].get<std::string>() != kCheckpointFormat)
      return Status::error(where + ": not a Partita checkpoint (format '" +
                           std::string(kCheckpointFormat) + "' expected)");
    checkpoint = CheckpointManifest();
    checkpoint.step = root.at("step").get<int64_t>();
    if (checkpoint.step < 0)
      return Status::error(where + ": step " + std::to_string(checkpoint.step) +
                           " is negative");
    for (const json &axis : root.at("mesh").at("axes"))
      checkpoint.meshAxes.push_back({axis.at("name").get<std::string>(),
                                     axis.at("size").get<int64_t>(),
                                     axis.at("role").get<std::string>()});
    checkpoint.optimizer = root.at("optimizer").get<std::string>();
    checkpoint.parameters = specsFromJson(root.at("parameters"));
    checkpoint.state = specsFromJson(root.at("state"));
    for (const json &item : root.at("ranks")) {
      CheckpointShard shard;
      shard.rank = item.at("rank").get<int32_t>();
      for (auto it = item.at("coords").begin(); it != item.at("coords").end();
           ++it)
        shard.coords.emplace_back(it.key(), it.value().get<int64_t>());
      shard.file = item.at("file").get<std::string>();
      if (!isSafeRelativePath(shard.file))
        return Status::error(where + ": rank " + std::to_string(shard.rank) +
                             "'s file '" + shard.file +
                             "' is not a path inside the checkpoint");
      shard.sha256 = item.at("sha256").get<std::string>();
      for (auto it = item.at("slices").begin(); it != item.at("slices").end();
           ++it) {
        std::vector<std::pair<int64_t, int64_t>> ranges;
        for (const json &range : it.value())
          ranges.emplace_back(range.at(0).get<int64_t>(),
                              range.at(1).get<int64_t>());
        shard.slices[it.key()] = std::move(ranges);
      }
      checkpoint.shards.push_back(std::move(shard));
    }
  } catch (const std::exception &e) {
    return Status::error(where + ": malformed checkpoint: " + e.what());
  }
  return Status::ok();
}
