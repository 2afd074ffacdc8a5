//===- Checkpoint.cpp - a training run's saved state ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Checkpoint.h"

#include "partita/runtime/FileUtil.h"
#include "partita/runtime/Runner.h"
#include "partita/runtime/Safetensors.h"
#include "partita/runtime/Sha256.h"
#include "partita/runtime/TensorShards.h"
#include "partita/runtime/Training.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

using namespace partita::runtime;
namespace fs = std::filesystem;

namespace {

/// The [start, stop) of each dimension that `rank`'s block of `spec`
/// covers: along each split dimension, the rank's position in the group of
/// the axes splitting it (the first axis major).
Status blockSlices(const TensorSpec &spec, const Manifest &manifest,
                   int32_t rank,
                   std::vector<std::pair<int64_t, int64_t>> &slices) {
  slices.clear();
  const RankEntry &entry = manifest.ranks[size_t(rank)];
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    int64_t index = 0, parts = 1;
    if (d < spec.sharding.dims.size())
      for (const std::string &axis : spec.sharding.dims[d]) {
        int64_t size = 0, coord = -1;
        for (const MeshAxis &meshAxis : manifest.meshAxes)
          if (meshAxis.name == axis)
            size = meshAxis.size;
        for (const auto &[name, value] : entry.coords)
          if (name == axis)
            coord = value;
        if (size < 1 || coord < 0)
          return Status::error("'" + spec.name + "' is split over '" + axis +
                               "', which the mesh does not have");
        index = index * size + coord;
        parts *= size;
      }
    int64_t length = spec.shape[d] / parts;
    slices.emplace_back(index * length, (index + 1) * length);
  }
  return Status::ok();
}

std::vector<const TensorSpec *> residentOf(const TrainingSpec &training) {
  std::vector<const TensorSpec *> specs;
  for (const auto *list : {&training.parameters, &training.state})
    for (const TensorSpec &spec : *list)
      specs.push_back(&spec);
  return specs;
}

} // namespace

Status partita::runtime::saveCheckpoint(const Runner &runner,
                                        const Trainer &trainer,
                                        const std::string &path) {
  const Manifest &manifest = runner.manifest();
  if (!manifest.training)
    return Status::error("the artifact is not a training one: it has no "
                         "parameters to save");
  std::error_code error;
  if (fs::exists(path, error))
    return Status::error("--save " + path +
                         " exists; a checkpoint is written to a new directory");
  fs::path target = fs::absolute(path, error);
  std::string staging = (target.parent_path() /
                         ("." + target.filename().string() + ".tmp-XXXXXX"))
                            .string();
  if (!::mkdtemp(staging.data()))
    return errnoStatus(staging);
  auto cleanUp = [&](Status status) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    return status;
  };

  CheckpointManifest checkpoint;
  checkpoint.step = trainer.steps();
  checkpoint.meshAxes = manifest.meshAxes;
  checkpoint.optimizer = manifest.training->optimizer;
  checkpoint.parameters = manifest.training->parameters;
  checkpoint.state = manifest.training->state;
  for (const RankEntry &entry : manifest.ranks) {
    CheckpointShard shard;
    shard.rank = entry.rank;
    shard.coords = entry.coords;
    shard.file = "rank" + std::to_string(entry.rank) + ".safetensors";
    std::vector<HostTensor> blocks;
    std::vector<SafetensorsInput> tensors;
    std::vector<const TensorSpec *> specs = residentOf(*manifest.training);
    blocks.reserve(specs.size());
    for (const TensorSpec *spec : specs) {
      blocks.emplace_back();
      Status read = runner.readResident(entry.rank, spec->name, blocks.back());
      if (!read)
        return cleanUp(read);
      Status sliced =
          blockSlices(*spec, manifest, entry.rank, shard.slices[spec->name]);
      if (!sliced)
        return cleanUp(sliced);
      SafetensorsInput input;
      input.name = spec->name;
      input.dtype = blocks.back().dtype();
      input.shape = blocks.back().shape();
      input.data = blocks.back().data();
      input.bytes = blocks.back().byteSize();
      tensors.push_back(std::move(input));
    }
    std::string digest;
    Status written =
        writeSafetensors(staging + "/" + shard.file, tensors,
                         {{"step", std::to_string(trainer.steps())}}, digest);
    if (!written)
      return cleanUp(written);
    shard.sha256 = "sha256:" + digest;
    checkpoint.shards.push_back(std::move(shard));
  }
  std::string text;
  Status made = checkpointToJson(checkpoint, text);
  if (made)
    made = writeNewFile(staging + "/checkpoint.json", text.data(), text.size());
  if (made)
    made = syncDirectory(staging);
  if (!made)
    return cleanUp(made);
  fs::rename(staging, target, error);
  if (error)
    return cleanUp(Status::error("cannot move the checkpoint to " + path +
                                 ": " + error.message()));
  return syncDirectory(target.parent_path().string());
}

Status partita::runtime::loadCheckpoint(Runner &runner, Trainer &trainer,
                                        const std::string &path) {
  const Manifest &manifest = runner.manifest();
  if (!manifest.training)
    return Status::error("the artifact is not a training one: it has no "
                         "parameters to load");
  std::string text;
  PARTITA_RETURN_IF_ERROR(
      readFile(path + "/checkpoint.json", size_t(64) << 20, text));
  CheckpointManifest checkpoint;
  PARTITA_RETURN_IF_ERROR(
      checkpointFromJson(text, path + "/checkpoint.json", checkpoint));
  auto describe = [](const std::vector<MeshAxis> &axes) {
    std::string mesh;
    for (const MeshAxis &axis : axes)
      mesh += (mesh.empty() ? "" : ",") + axis.name + "=" +
              std::to_string(axis.size);
    return mesh.empty() ? std::string("one device") : mesh;
  };
  bool sameMesh = checkpoint.meshAxes.size() == manifest.meshAxes.size();
  for (size_t i = 0; sameMesh && i < manifest.meshAxes.size(); ++i)
    sameMesh = checkpoint.meshAxes[i].name == manifest.meshAxes[i].name &&
               checkpoint.meshAxes[i].size == manifest.meshAxes[i].size;
  if (!sameMesh)
    return Status::error(
        path + " was saved on mesh " + describe(checkpoint.meshAxes) +
        ", the artifact's is " + describe(manifest.meshAxes) +
        ": loading a checkpoint onto another mesh is not supported yet");
  if (checkpoint.optimizer != manifest.training->optimizer)
    return Status::error(path + " holds " + checkpoint.optimizer +
                         " state; the artifact trains with " +
                         manifest.training->optimizer);
  std::vector<const TensorSpec *> specs = residentOf(*manifest.training);
  for (const TensorSpec *spec : specs) {
    const TensorSpec *saved = findSpec(checkpoint.parameters, spec->name);
    if (!saved)
      saved = findSpec(checkpoint.state, spec->name);
    if (!saved || saved->dtype != spec->dtype || saved->shape != spec->shape ||
        saved->sharding.dims != spec->sharding.dims)
      return Status::error(path + ": '" + spec->name +
                           "' is missing or saved with another type or "
                           "sharding than the artifact's");
  }
  if (checkpoint.shards.size() != manifest.ranks.size())
    return Status::error(
        path + " holds " + std::to_string(checkpoint.shards.size()) +
        " rank files for " + std::to_string(manifest.ranks.size()) + " ranks");
  // Every file is checked before any rank changes.
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (size_t r = 0; r < checkpoint.shards.size(); ++r) {
    const CheckpointShard &shard = checkpoint.shards[r];
    if (shard.rank != int32_t(r))
      return Status::error(path + ": rank files are not in rank order");
    std::string file = path + "/" + shard.file;
    std::string digest;
    PARTITA_RETURN_IF_ERROR(sha256File(file, digest));
    if ("sha256:" + digest != shard.sha256)
      return Status::error(file + " does not match its hash in "
                                  "checkpoint.json (changed or truncated)");
    files.emplace_back();
    PARTITA_RETURN_IF_ERROR(SafetensorsFile::open(file, files.back()));
  }
  // Every block is checked before any is written: a refused load leaves
  // the ranks as they were.
  for (size_t r = 0; r < files.size(); ++r)
    for (const TensorSpec *spec : specs) {
      std::string where = path + "/" + checkpoint.shards[r].file;
      const Tensor *block = files[r]->find(spec->name);
      if (!block)
        return Status::error(where + " holds no '" + spec->name + "'");
      std::vector<int64_t> shape;
      PARTITA_RETURN_IF_ERROR(localShape(*spec, manifest, int32_t(r), shape));
      if (block->dtype != spec->dtype || block->shape != shape)
        return Status::error(
            where + ": '" + spec->name + "' is " + dtypeName(block->dtype) +
            " " + shapeString(block->shape) + ", rank " + std::to_string(r) +
            " holds " + dtypeName(spec->dtype) + " " + shapeString(shape));
    }
  for (size_t r = 0; r < files.size(); ++r)
    for (const TensorSpec *spec : specs)
      PARTITA_RETURN_IF_ERROR(runner.writeResident(
          int32_t(r), spec->name, *files[r]->find(spec->name)));
  trainer.setSteps(checkpoint.step);
  return Status::ok();
}
