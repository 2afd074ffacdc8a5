//===- TensorShards.cpp - global tensors and their per-rank shards --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/TensorShards.h"

#include "partita/runtime/BlockCopy.h"

#include <algorithm>
#include <cstring>
#include <set>

using namespace partita::runtime;

namespace {

std::string joined(const std::vector<std::string> &names) {
  std::string text;
  for (const std::string &name : names)
    text += (text.empty() ? "" : ", ") + name;
  return text;
}

std::string rankString(int32_t rank) { return "rank " + std::to_string(rank); }

/// Where a rank's shard lies along each dimension: the dimension is cut
/// into `blocks[d]` blocks and the rank holds block `index[d]`.
struct Placement {
  std::vector<int64_t> blocks;
  std::vector<int64_t> index;
};

/// Places `rank`'s shard of a `numDims`-dimensional tensor; checks every
/// axis the sharding names, partial ones included.
Status place(const TensorSharding &sharding, size_t numDims,
             const Manifest &manifest, int32_t rank, Placement &placement) {
  auto entry = std::find_if(
      manifest.ranks.begin(), manifest.ranks.end(),
      [&](const RankEntry &candidate) { return candidate.rank == rank; });
  if (rank < 0 || rank >= manifest.worldSize || entry == manifest.ranks.end())
    return Status::error(rankString(rank) + " is outside the mesh of " +
                         std::to_string(manifest.worldSize) + " ranks");
  std::string where = "sharding " + shardingString(sharding);
  if (!sharding.dims.empty() && sharding.dims.size() != numDims)
    return Status::error(
        where + " names " + std::to_string(sharding.dims.size()) +
        " dimensions, the tensor has " + std::to_string(numDims));

  std::set<std::string> used;
  // The axis's size and `rank`'s coordinate on it.
  auto lookUp = [&](const std::string &name, int64_t &size,
                    int64_t &coordinate) -> Status {
    auto axis = std::find_if(
        manifest.meshAxes.begin(), manifest.meshAxes.end(),
        [&](const MeshAxis &candidate) { return candidate.name == name; });
    if (axis == manifest.meshAxes.end()) {
      std::vector<std::string> names;
      for (const MeshAxis &known : manifest.meshAxes)
        names.push_back(known.name);
      return Status::error(
          where + " names '" + name +
          "', which is not a mesh axis (the mesh has: " + joined(names) + ")");
    }
    if (!used.insert(name).second)
      return Status::error(where + " uses mesh axis '" + name + "' twice");
    if (axis->size < 1)
      return Status::error("mesh axis '" + name + "' has size " +
                           std::to_string(axis->size));
    auto coord = std::find_if(
        entry->coords.begin(), entry->coords.end(),
        [&](const auto &candidate) { return candidate.first == name; });
    if (coord == entry->coords.end())
      return Status::error(rankString(rank) +
                           " has no coordinate on mesh axis '" + name + "'");
    if (coord->second < 0 || coord->second >= axis->size)
      return Status::error(rankString(rank) + ": coordinate " + name + "=" +
                           std::to_string(coord->second) +
                           " is outside the axis of size " +
                           std::to_string(axis->size));
    size = axis->size;
    coordinate = coord->second;
    return Status::ok();
  };

  placement.blocks.assign(numDims, 1);
  placement.index.assign(numDims, 0);
  for (size_t d = 0; d < sharding.dims.size(); ++d) {
    for (const std::string &name : sharding.dims[d]) {
      int64_t size = 1, coordinate = 0;
      PARTITA_RETURN_IF_ERROR(lookUp(name, size, coordinate));
      // Major first: the first axis picks among the largest blocks.
      placement.index[d] = placement.index[d] * size + coordinate;
      placement.blocks[d] *= size;
    }
  }
  for (const std::string &name : sharding.partial) {
    int64_t size = 1, coordinate = 0;
    PARTITA_RETURN_IF_ERROR(lookUp(name, size, coordinate));
  }
  return Status::ok();
}

/// The shape and offset of `rank`'s block of a tensor of `globalShape`.
Status locate(const std::vector<int64_t> &globalShape,
              const TensorSharding &sharding, const Manifest &manifest,
              int32_t rank, std::vector<int64_t> &shape,
              std::vector<int64_t> &offsets) {
  Placement placement;
  PARTITA_RETURN_IF_ERROR(
      place(sharding, globalShape.size(), manifest, rank, placement));
  shape.assign(globalShape.size(), 0);
  offsets.assign(globalShape.size(), 0);
  for (size_t d = 0; d < globalShape.size(); ++d) {
    int64_t blocks = placement.blocks[d];
    if (globalShape[d] < 0)
      return Status::error("invalid shape " + shapeString(globalShape));
    if (globalShape[d] % blocks != 0)
      return Status::error(
          "sharding " + shardingString(sharding) + " cannot split dimension " +
          std::to_string(d) + " of " + shapeString(globalShape) + " over " +
          joined(sharding.dims[d]) + ": " + std::to_string(globalShape[d]) +
          " is not divisible by " + std::to_string(blocks));
    shape[d] = globalShape[d] / blocks;
    offsets[d] = placement.index[d] * shape[d];
  }
  return Status::ok();
}

Status refusePartial(const TensorSharding &sharding) {
  if (sharding.partial.empty())
    return Status::ok();
  return Status::error("sharding " + shardingString(sharding) +
                       " holds partial sums over " + joined(sharding.partial) +
                       ": a rank's shard is no block of the global tensor");
}

Status checkMemory(const Tensor &tensor, const std::string &what) {
  if (dtypeSize(tensor.dtype) == 0)
    return Status::error(what + " has no element type");
  for (int64_t dim : tensor.shape)
    if (dim < 0)
      return Status::error(what + " has the invalid shape " +
                           shapeString(tensor.shape));
  if (!tensor.data && tensor.numElements() > 0)
    return Status::error(what + " has no memory");
  return Status::ok();
}

} // namespace

std::string partita::runtime::shardingString(const TensorSharding &sharding) {
  std::string text = "dims [";
  for (size_t d = 0; d < sharding.dims.size(); ++d)
    text += (d ? ", [" : "[") + joined(sharding.dims[d]) + "]";
  return text + "], partial [" + joined(sharding.partial) + "]";
}

Status partita::runtime::localShape(const TensorSpec &spec,
                                    const Manifest &manifest, int32_t rank,
                                    std::vector<int64_t> &shape) {
  std::vector<int64_t> offsets;
  return locate(spec.shape, spec.sharding, manifest, rank, shape, offsets);
}

Status partita::runtime::shardIndex(const TensorSharding &sharding,
                                    const Manifest &manifest, int32_t rank,
                                    int64_t &index, int64_t &count) {
  Placement placement;
  PARTITA_RETURN_IF_ERROR(
      place(sharding, sharding.dims.size(), manifest, rank, placement));
  index = 0;
  count = 1;
  for (size_t d = 0; d < placement.blocks.size(); ++d) {
    index = index * placement.blocks[d] + placement.index[d];
    count *= placement.blocks[d];
  }
  return Status::ok();
}

Status partita::runtime::extractShard(const Tensor &global,
                                      const TensorSharding &sharding,
                                      const Manifest &manifest, int32_t rank,
                                      HostTensor &local) {
  PARTITA_RETURN_IF_ERROR(refusePartial(sharding));
  PARTITA_RETURN_IF_ERROR(checkMemory(global, "the global tensor"));
  std::vector<int64_t> shape, offsets;
  PARTITA_RETURN_IF_ERROR(
      locate(global.shape, sharding, manifest, rank, shape, offsets));
  Status allocated = local.allocate(global.dtype, shape);
  if (!allocated)
    return Status::error(rankString(rank) + "'s shard " + shapeString(shape) +
                         ": " + allocated.message());
  std::vector<int64_t> origin(shape.size(), 0);
  copyBlock(global.data, global.shape, offsets, local.data(), shape, origin,
            shape, dtypeSize(global.dtype));
  return Status::ok();
}

Status partita::runtime::insertShard(const Tensor &local,
                                     const TensorSharding &sharding,
                                     const Manifest &manifest, int32_t rank,
                                     Tensor &global) {
  PARTITA_RETURN_IF_ERROR(refusePartial(sharding));
  PARTITA_RETURN_IF_ERROR(checkMemory(global, "the global tensor"));
  std::vector<int64_t> shape, offsets;
  PARTITA_RETURN_IF_ERROR(
      locate(global.shape, sharding, manifest, rank, shape, offsets));
  if (local.dtype != global.dtype || local.shape != shape)
    return Status::error(
        rankString(rank) + "'s shard of " + dtypeName(global.dtype) + " " +
        shapeString(global.shape) + " under sharding " +
        shardingString(sharding) + " is " + dtypeName(global.dtype) + " " +
        shapeString(shape) + ", not " + dtypeName(local.dtype) + " " +
        shapeString(local.shape));
  PARTITA_RETURN_IF_ERROR(checkMemory(local, rankString(rank) + "'s shard"));
  std::vector<int64_t> origin(shape.size(), 0);
  copyBlock(local.data, shape, origin, global.data, global.shape, offsets,
            shape, dtypeSize(global.dtype));
  return Status::ok();
}
