//===- ManifestCheck.cpp - a manifest against its programs ----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "ManifestCheck.h"

#include <set>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

std::string coordsString(const std::vector<MeshAxis> &axes,
                         const std::vector<int64_t> &coords) {
  std::string text = "{";
  for (size_t a = 0; a < axes.size(); ++a)
    text += (a ? ", " : "") + axes[a].name + ": " + std::to_string(coords[a]);
  return text + "}";
}

/// The shape of `rank`'s block of `spec` (whose sharding validateManifest
/// checked): each dimension divided by the sizes of the axes that split it.
Status blockShape(const Manifest &manifest, const TensorSpec &spec,
                  std::vector<int64_t> &shape) {
  shape = spec.shape;
  for (size_t d = 0; d < spec.sharding.dims.size() && d < shape.size(); ++d) {
    int64_t blocks = 1;
    for (const std::string &name : spec.sharding.dims[d])
      for (const MeshAxis &axis : manifest.meshAxes)
        if (axis.name == name)
          blocks *= axis.size;
    if (shape[d] % blocks != 0)
      return Status::error("dimension " + std::to_string(d) + " of " +
                           shapeString(spec.shape) + " does not split into " +
                           std::to_string(blocks) + " blocks");
    shape[d] /= blocks;
  }
  return Status::ok();
}

const TensorSpec *specNamed(const std::vector<TensorSpec> &specs,
                            const std::string &name) {
  for (const TensorSpec &spec : specs)
    if (spec.name == name)
      return &spec;
  return nullptr;
}

/// One entry's programs (`entry`: "" for the prefill's or only ones,
/// "decode " for a serving artifact's decode programs) against the
/// manifest: every binding an input or output of the entry, or a cache
/// tensor bound as both an input and an output, with the dtype and shape
/// of the rank's block; every output produced by some rank.
Status checkEntryBindings(const Manifest &manifest,
                          const std::vector<const program::Program *> &programs,
                          const std::vector<TensorSpec> &inputs,
                          const std::vector<TensorSpec> &outputs,
                          const std::string &where, const std::string &entry) {
  const std::vector<const TensorSpec *> cache = residentSpecs(manifest);
  auto residentNamed = [&](const std::string &name) -> const TensorSpec * {
    for (const TensorSpec *spec : cache)
      if (spec->name == name)
        return spec;
    return nullptr;
  };
  const std::string residentKind =
      manifest.training ? "training state" : "cache";
  if (outputs.empty())
    return Status::error(where + (entry.empty() ? "the model has no outputs"
                                                : "the decode step has no "
                                                  "outputs"));
  std::vector<bool> produced(outputs.size(), false);
  for (size_t r = 0; r < programs.size(); ++r) {
    const program::Program &program = *programs[r];
    std::string rank = "rank " + std::to_string(r);
    std::string binds = rank + "'s " + entry + "program binds ";
    std::set<std::string> cacheInputs, cacheOutputs;
    auto check = [&](const program::Binding &binding, bool input) -> Status {
      std::string kind = entry + (input ? "input" : "output");
      const TensorSpec *spec =
          specNamed(input ? inputs : outputs, binding.name());
      if (spec && !input)
        produced[size_t(spec - outputs.data())] = true;
      if (!spec && (spec = residentNamed(binding.name()))) {
        kind = residentKind;
        (input ? cacheInputs : cacheOutputs).insert(spec->name);
      }
      if (!spec)
        return Status::error(where + binds + kind + " '" + binding.name() +
                             "', which the manifest does not list");
      if (binding.buffer() < 0 || binding.buffer() >= program.buffers_size())
        return Status::error(where + binds + kind + " '" + binding.name() +
                             "' to buffer " + std::to_string(binding.buffer()) +
                             ", which it does not have");
      std::vector<int64_t> shape;
      Status split = blockShape(manifest, *spec, shape);
      if (!split)
        return Status::error(where + kind + " '" + spec->name +
                             "': " + split.message());
      const program::TensorType &type =
          program.buffers(binding.buffer()).type();
      std::vector<int64_t> bound(type.shape().begin(), type.shape().end());
      if (type.dtype() != spec->dtype || bound != shape)
        return Status::error(
            where + kind + " '" + spec->name + "' is " +
            dtypeName(spec->dtype) + " " + shapeString(spec->shape) +
            (spec->sharding.isReplicated()
                 ? ""
                 : " split over the mesh, so " + rank + "'s block is " +
                       shapeString(shape)) +
            ", but " + rank + "'s " + entry + "program binds " +
            dtypeName(type.dtype()) + " " + shapeString(bound));
      return Status::ok();
    };
    for (const program::Binding &binding : program.inputs())
      PARTITA_RETURN_IF_ERROR(check(binding, true));
    for (const program::Binding &binding : program.outputs())
      PARTITA_RETURN_IF_ERROR(check(binding, false));
    // The runtime binds a cache tensor's one memory as both, so that the
    // program updates it in place.
    for (const TensorSpec *resident : cache) {
      const std::string &name = resident->name;
      if (cacheInputs.count(name) != cacheOutputs.count(name))
        return Status::error(
            where + binds + residentKind + " '" + name + "' as an " +
            (cacheInputs.count(name) ? "input" : "output") +
            " only; it is bound as both an input and an output, to one "
            "memory");
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!produced[i])
      return Status::error(where + entry + "output '" + outputs[i].name +
                           "' is produced by no rank's " + entry + "program");
  return Status::ok();
}

} // namespace

Status partita::runtime::checkManifestAgainstPrograms(
    const Manifest &manifest,
    const std::vector<const program::Program *> &programs,
    const std::vector<const program::Program *> &decodePrograms,
    const std::string &where) {
  // Rank r sits at r written in the mixed radix of the axis sizes, first
  // axis major (docs/artifact.md), and its stage is its coordinate on the
  // axis of role pp: the compiler placed each program there, so a manifest
  // that says otherwise would hand ranks the wrong shards.
  for (const RankEntry &entry : manifest.ranks) {
    std::vector<int64_t> expected(manifest.meshAxes.size()), actual;
    int64_t rest = entry.rank, stage = 0;
    for (size_t a = manifest.meshAxes.size(); a-- > 0;) {
      expected[a] = rest % manifest.meshAxes[a].size;
      rest /= manifest.meshAxes[a].size;
      if (manifest.meshAxes[a].role == "pp")
        stage = expected[a];
    }
    for (const auto &coord : entry.coords)
      actual.push_back(coord.second);
    std::string rank = "rank " + std::to_string(entry.rank);
    if (actual != expected)
      return Status::error(where + rank + " has coordinates " +
                           coordsString(manifest.meshAxes, actual) +
                           ", but rank " + std::to_string(entry.rank) +
                           " of this mesh is at " +
                           coordsString(manifest.meshAxes, expected));
    if (entry.stage != stage)
      return Status::error(
          where + rank + " has stage " + std::to_string(entry.stage) +
          ", but its pp coordinate is " + std::to_string(stage));
  }
  PARTITA_RETURN_IF_ERROR(checkEntryBindings(
      manifest, programs, manifest.inputs, manifest.outputs, where, ""));
  if (!manifest.serving)
    return Status::ok();
  return checkEntryBindings(manifest, decodePrograms,
                            manifest.serving->decodeInputs,
                            manifest.serving->decodeOutputs, where, "decode ");
}
