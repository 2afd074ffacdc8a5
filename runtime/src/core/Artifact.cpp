//===- Artifact.cpp - the sharded binary on disk --------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Artifact.h"

#include "FileUtil.h"
#include "ManifestJson.h"
#include "partita/runtime/ProgramVerifier.h"
#include "partita/runtime/Safetensors.h"
#include "partita/runtime/Sha256.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <set>
#include <sys/stat.h>
#include <tuple>
#include <unordered_map>

using namespace partita::runtime;
namespace program = partita::program;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kDefaultMaxWeightFileBytes = 2ull << 30;
/// Protobuf refuses messages of 2 GiB or more.
constexpr size_t kMaxProgramBytes = INT_MAX;
constexpr size_t kMaxManifestBytes = 64u << 20;

std::string programPath(int32_t rank) {
  return "programs/rank" + std::to_string(rank) + ".pb";
}

std::string decodeProgramPath(int32_t rank) {
  return "programs/rank" + std::to_string(rank) + ".decode.pb";
}

std::string weightFilePath(size_t index, size_t count) {
  char name[80]; // fits two 20-digit numbers
  std::snprintf(name, sizeof(name), "weights/model-%05zu-of-%05zu.safetensors",
                index + 1, count);
  return name;
}

bool exists(const std::string &path) {
  struct stat info;
  return ::lstat(path.c_str(), &info) == 0;
}

bool isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

/// Runs `work(0)`, ..., `work(count - 1)` on up to one thread per core
/// (each weights file is hashed at load by one thread, so files proceed in
/// parallel) and returns the first error in index order, so the message does
/// not depend on scheduling.
Status forEachInParallel(size_t count,
                         const std::function<Status(size_t)> &work) {
  std::vector<Status> statuses(count);
  std::atomic<size_t> nextIndex{0};
  auto worker = [&] {
    for (size_t i; (i = nextIndex.fetch_add(1)) < count;) {
      try {
        statuses[i] = work(i);
      } catch (const std::exception &e) {
        statuses[i] = Status::error(e.what());
      }
    }
  };
  runOnCores(count, worker);
  for (Status &status : statuses)
    if (!status)
      return status;
  return Status::ok();
}

/// Removes a directory tree on destruction unless released: the temporary
/// directory of a commit that failed halfway.
class RemoveOnExit {
public:
  explicit RemoveOnExit(std::string path) : path(std::move(path)) {}
  ~RemoveOnExit() {
    if (!path.empty()) {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  }
  void release() { path.clear(); }

private:
  std::string path;
};

} // namespace

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
  static const std::vector<TensorSpec> kNoCache;
  const std::vector<TensorSpec> &cache =
      manifest.serving ? manifest.serving->cache : kNoCache;
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
      if (!spec && (spec = specNamed(cache, binding.name()))) {
        kind = "cache";
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
    for (const TensorSpec &spec : cache)
      if (cacheInputs.count(spec.name) != cacheOutputs.count(spec.name))
        return Status::error(
            where + binds + "cache '" + spec.name + "' as an " +
            (cacheInputs.count(spec.name) ? "input" : "output") +
            " only; a cache tensor is bound as both an input and an "
            "output, to one memory");
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!produced[i])
      return Status::error(where + entry + "output '" + outputs[i].name +
                           "' is produced by no rank's " + entry + "program");
  return Status::ok();
}

/// What the writer and the loader check of the manifest against the
/// programs (docs/artifact.md, Loading, 4): the ranks' coordinates and
/// stages, and each entry's bindings. `where` prefixes messages.
Status checkManifestAgainstPrograms(
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

} // namespace

//===----------------------------------------------------------------------===//
// ArtifactWriter
//===----------------------------------------------------------------------===//

struct ArtifactWriter::Impl {
  Manifest manifest;
  std::vector<SafetensorsInput> weights;
  std::unordered_map<std::string, size_t> weightIndex;
  /// Serialized programs by rank, with the world size each was built for.
  std::map<int32_t, std::pair<int32_t, std::string>> programs;
  /// The same for the decode programs of a serving artifact.
  std::map<int32_t, std::pair<int32_t, std::string>> decodePrograms;
  std::map<std::string, std::string> extraFiles;
  uint64_t maxWeightFileBytes = kDefaultMaxWeightFileBytes;

  Status validate() const;
  Status writeInto(const std::string &directory, Manifest &written) const;
};

ArtifactWriter::ArtifactWriter() : impl(std::make_unique<Impl>()) {}
ArtifactWriter::~ArtifactWriter() = default;

Manifest &ArtifactWriter::manifest() { return impl->manifest; }

void ArtifactWriter::setMaxWeightFileBytes(uint64_t bytes) {
  impl->maxWeightFileBytes = bytes;
}

Status ArtifactWriter::addWeight(const std::string &name, DType dtype,
                                 const std::vector<int64_t> &shape,
                                 const void *data, size_t bytes) {
  if (name.empty() || name == "__metadata__")
    return Status::error("invalid weight name '" + name + "'");
  if (safetensorsDTypeName(dtype).empty())
    return Status::error("weight '" + name + "' has no valid dtype");
  uint64_t elements = 1;
  for (int64_t dim : shape)
    if (dim < 0 || __builtin_mul_overflow(elements, uint64_t(dim), &elements))
      return Status::error("weight '" + name + "' has an invalid shape " +
                           shapeString(shape));
  uint64_t expected;
  if (__builtin_mul_overflow(elements, uint64_t(dtypeSize(dtype)), &expected) ||
      expected != bytes)
    return Status::error("weight '" + name + "' is given " +
                         std::to_string(bytes) + " bytes; " + dtypeName(dtype) +
                         " " + shapeString(shape) + " needs " +
                         std::to_string(elements * dtypeSize(dtype)));
  if (bytes > 0 && !data)
    return Status::error("weight '" + name + "' has no data");
  return addWeight(name, WeightView::of(data, bytes, dtype, shape, nullptr));
}

namespace {

/// Whether two views of the same dtype and shape hold the same bytes,
/// compared a piece at a time (readers cut equal shapes at equal rows), so
/// that neither is materialized.
bool sameBytes(const WeightView &a, const WeightView &b) {
  constexpr size_t kCompareChunkBytes = 1u << 20;
  WeightViewReader left(kCompareChunkBytes), right(kCompareChunkBytes);
  left.reset(a);
  right.reset(b);
  size_t leftBytes, rightBytes;
  while (const void *piece = left.next(leftBytes)) {
    const void *other = right.next(rightBytes);
    if (!other || leftBytes != rightBytes ||
        std::memcmp(piece, other, leftBytes) != 0)
      return false;
  }
  return !right.next(rightBytes);
}

} // namespace

Status ArtifactWriter::addWeight(const std::string &name,
                                 const WeightView &view) {
  if (name.empty() || name == "__metadata__")
    return Status::error("invalid weight name '" + name + "'");
  if (!view.valid())
    return Status::error("weight '" + name +
                         "' is an invalid view (no data, or a slice, block, "
                         "permutation or conversion that does not apply)");
  if (safetensorsDTypeName(view.dtype()).empty())
    return Status::error("weight '" + name + "' has no valid dtype");
  auto known = impl->weightIndex.find(name);
  if (known != impl->weightIndex.end()) {
    const WeightView &first = impl->weights[known->second].view;
    // Equal views are the same tensor; replicated shards the compiler
    // described differently are still stored once when their bytes agree.
    if (first == view ||
        (first.dtype() == view.dtype() && first.shape() == view.shape() &&
         sameBytes(first, view)))
      return Status::ok();
    return Status::error(
        "weight '" + name + "' is added twice with different contents (" +
        dtypeName(first.dtype()) + " " + shapeString(first.shape()) +
        ", then " + dtypeName(view.dtype()) + " " + shapeString(view.shape()) +
        "): distinct shards need distinct names");
  }
  impl->weightIndex[name] = impl->weights.size();
  impl->weights.push_back(SafetensorsInput::of(name, view));
  return Status::ok();
}

namespace {

/// Serializes `program` of `rank` into `programs` (`kind`: "program" or
/// "decode program", for messages).
Status
addSerialized(std::map<int32_t, std::pair<int32_t, std::string>> &programs,
              int32_t rank, const program::Program &program,
              const std::string &kind) {
  if (rank < 0)
    return Status::error(kind + " for negative rank " + std::to_string(rank));
  if (program.rank() != rank)
    return Status::error("the " + kind + " added for rank " +
                         std::to_string(rank) + " says it is rank " +
                         std::to_string(program.rank()));
  if (programs.count(rank))
    return Status::error("a " + kind + " for rank " + std::to_string(rank) +
                         " was already added");
  std::string bytes;
  if (!program.SerializeToString(&bytes))
    return Status::error("the " + kind + " of rank " + std::to_string(rank) +
                         " cannot be serialized (2 GiB or more?)");
  programs[rank] = {program.world_size(), std::move(bytes)};
  return Status::ok();
}

} // namespace

Status ArtifactWriter::addProgram(int32_t rank,
                                  const program::Program &program) {
  return addSerialized(impl->programs, rank, program, "program");
}

Status ArtifactWriter::addDecodeProgram(int32_t rank,
                                        const program::Program &program) {
  return addSerialized(impl->decodePrograms, rank, program, "decode program");
}

Status ArtifactWriter::addFile(const std::string &relativePath,
                               std::string contents) {
  if (!isSafeRelativePath(relativePath))
    return Status::error("'" + relativePath +
                         "' is not a relative path inside the artifact");
  if (relativePath == "manifest.json" ||
      relativePath.rfind("programs/", 0) == 0 ||
      relativePath.rfind("weights/", 0) == 0)
    return Status::error("'" + relativePath +
                         "' is reserved for the artifact's own files");
  if (!impl->extraFiles.emplace(relativePath, std::move(contents)).second)
    return Status::error("file '" + relativePath + "' was already added");
  return Status::ok();
}

Status ArtifactWriter::Impl::validate() const {
  PARTITA_RETURN_IF_ERROR(validateManifest(manifest));
  for (int32_t rank = 0; rank < manifest.worldSize; ++rank)
    if (!programs.count(rank))
      return Status::error("no program was added for rank " +
                           std::to_string(rank));
  if (!manifest.serving && !decodePrograms.empty())
    return Status::error("decode programs were added, but the manifest has "
                         "no serving spec");
  for (int32_t rank = 0; manifest.serving && rank < manifest.worldSize; ++rank)
    if (!decodePrograms.count(rank))
      return Status::error("no decode program was added for rank " +
                           std::to_string(rank) +
                           " (a serving artifact has one per rank)");
  std::vector<program::Program> parsed, parsedDecode;
  for (const auto &[serialized, kind, out] :
       {std::tuple(&programs, "program", &parsed),
        std::tuple(&decodePrograms, "decode program", &parsedDecode)}) {
    for (const auto &[rank, program] : *serialized) {
      if (rank >= manifest.worldSize)
        return Status::error(std::string("a ") + kind + " was added for rank " +
                             std::to_string(rank) + " of a world of " +
                             std::to_string(manifest.worldSize));
      // The loader refuses such a program; refusing it here tells the
      // compiler which one is wrong.
      if (program.first != manifest.worldSize)
        return Status::error(
            std::string("the ") + kind + " of rank " + std::to_string(rank) +
            " is for a world of " + std::to_string(program.first) +
            ", the manifest's is " + std::to_string(manifest.worldSize));
      out->emplace_back();
      if (!out->back().ParseFromString(program.second))
        return Status::error(std::string("the ") + kind + " of rank " +
                             std::to_string(rank) + " does not parse back");
    }
  }
  std::vector<const program::Program *> all, allDecode;
  for (const program::Program &program : parsed)
    all.push_back(&program);
  for (const program::Program &program : parsedDecode)
    allDecode.push_back(&program);
  return checkManifestAgainstPrograms(manifest, all, allDecode, "");
}

Status ArtifactWriter::Impl::writeInto(const std::string &directory,
                                       Manifest &written) const {
  written = manifest;
  written.weightFiles.clear();
  written.files.clear();

  std::string programDirectory = directory + "/programs";
  if (::mkdir(programDirectory.c_str(), 0755) != 0)
    return errnoStatus(programDirectory);
  for (const auto &[rank, program] : programs) {
    const std::string &bytes = program.second;
    std::string relative = programPath(rank);
    PARTITA_RETURN_IF_ERROR(
        writeNewFile(directory + "/" + relative, bytes.data(), bytes.size()));
    written.files[relative] =
        "sha256:" + Sha256::hexDigest(bytes.data(), bytes.size());
    written.ranks[size_t(rank)].program = relative;
  }
  for (const auto &[rank, program] : decodePrograms) {
    const std::string &bytes = program.second;
    std::string relative = decodeProgramPath(rank);
    PARTITA_RETURN_IF_ERROR(
        writeNewFile(directory + "/" + relative, bytes.data(), bytes.size()));
    written.files[relative] =
        "sha256:" + Sha256::hexDigest(bytes.data(), bytes.size());
    written.ranks[size_t(rank)].decodeProgram = relative;
  }
  PARTITA_RETURN_IF_ERROR(syncDirectory(programDirectory));

  // Group the weights into files of at most maxWeightFileBytes of data.
  std::vector<std::vector<SafetensorsInput>> groups;
  uint64_t groupBytes = 0;
  for (const SafetensorsInput &weight : weights) {
    if (groups.empty() || (!groups.back().empty() &&
                           groupBytes + weight.bytes > maxWeightFileBytes)) {
      groups.emplace_back();
      groupBytes = 0;
    }
    groups.back().push_back(weight);
    groupBytes += weight.bytes;
  }
  std::string weightDirectory = directory + "/weights";
  if (::mkdir(weightDirectory.c_str(), 0755) != 0)
    return errnoStatus(weightDirectory);
  std::vector<std::string> relatives(groups.size()), digests;
  std::vector<SafetensorsFileSpec> specs(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    relatives[i] = weightFilePath(i, groups.size());
    specs[i] = {directory + "/" + relatives[i],
                std::move(groups[i]),
                {{"producer", "partita"}}};
  }
  PARTITA_RETURN_IF_ERROR(writeSafetensorsFiles(specs, digests));
  for (size_t i = 0; i < groups.size(); ++i) {
    written.weightFiles.push_back(relatives[i]);
    written.files[relatives[i]] = "sha256:" + digests[i];
  }
  PARTITA_RETURN_IF_ERROR(syncDirectory(weightDirectory));

  for (const auto &[relative, contents] : extraFiles) {
    std::string path = directory + "/" + relative;
    std::error_code error;
    fs::create_directories(fs::path(path).parent_path(), error);
    if (error)
      return Status::error(path + ": " + error.message());
    PARTITA_RETURN_IF_ERROR(
        writeNewFile(path, contents.data(), contents.size()));
    written.files[relative] =
        "sha256:" + Sha256::hexDigest(contents.data(), contents.size());
  }

  for (const RankEntry &entry : written.ranks)
    for (const std::string *file :
         {&entry.cudaSource, &entry.cudaFatbin, &entry.decodeCudaSource,
          &entry.decodeCudaFatbin})
      if (!file->empty() && !written.files.count(*file))
        return Status::error("rank " + std::to_string(entry.rank) + " names '" +
                             *file + "', which was not added to the artifact");

  std::string text;
  PARTITA_RETURN_IF_ERROR(manifestToJson(written, text));
  PARTITA_RETURN_IF_ERROR(
      writeNewFile(directory + "/manifest.json", text.data(), text.size()));
  return syncDirectory(directory);
}

Status ArtifactWriter::commit(const std::string &path) {
  try {
    PARTITA_RETURN_IF_ERROR(impl->validate());
    fs::path target(path);
    if (!target.has_filename())
      target = target.parent_path();
    if (target.empty())
      return Status::error("no artifact path given");
    std::string targetPath = target.string();
    bool replacing = exists(targetPath);
    if (replacing &&
        (!isDirectory(targetPath) || !exists(targetPath + "/manifest.json")))
      return Status::error("refusing to replace '" + targetPath +
                           "': it exists and is not a Partita artifact (no "
                           "manifest.json)");

    fs::path parent = target.parent_path();
    std::string parentPath = parent.empty() ? "." : parent.string();
    std::string pattern =
        parentPath + "/." + target.filename().string() + ".tmp-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!::mkdtemp(buffer.data()))
      return errnoStatus(pattern);
    std::string temporary(buffer.data());
    RemoveOnExit cleanup(temporary);
    if (::chmod(temporary.c_str(), 0755) != 0)
      return errnoStatus(temporary);

    Manifest written;
    PARTITA_RETURN_IF_ERROR(impl->writeInto(temporary, written));

    if (!replacing) {
      if (::rename(temporary.c_str(), targetPath.c_str()) != 0)
        return errnoStatus(targetPath);
    } else if (::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD,
                           targetPath.c_str(), RENAME_EXCHANGE) != 0) {
      // Filesystems without an atomic exchange: move the old artifact
      // aside, then the new one in, restoring the old one on failure.
      if (errno != EINVAL && errno != ENOSYS)
        return errnoStatus(targetPath);
      std::string aside = temporary + ".old";
      if (::rename(targetPath.c_str(), aside.c_str()) != 0)
        return errnoStatus(targetPath);
      if (::rename(temporary.c_str(), targetPath.c_str()) != 0) {
        Status status = errnoStatus(targetPath);
        if (::rename(aside.c_str(), targetPath.c_str()) != 0)
          return Status::error(status.message() +
                               "; the previous artifact is left at " + aside);
        return status;
      }
      std::error_code ignored;
      fs::remove_all(aside, ignored);
    }
    // After an exchange the temporary name holds the previous artifact, which
    // the cleanup removes; after a plain rename it names nothing.
    impl->manifest = std::move(written);
    return syncDirectory(parentPath);
  } catch (const std::exception &e) {
    return Status::error(path + ": " + e.what());
  }
}

//===----------------------------------------------------------------------===//
// WeightStore
//===----------------------------------------------------------------------===//

struct WeightStore::Impl {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<std::string> fileNames;
  /// Tensor name -> (file index, tensor).
  std::unordered_map<std::string, std::pair<size_t, const Tensor *>> tensors;
};

WeightStore::WeightStore() : impl(std::make_unique<Impl>()) {}
WeightStore::~WeightStore() = default;
WeightStore::WeightStore(WeightStore &&) = default;
WeightStore &WeightStore::operator=(WeightStore &&) = default;

Status WeightStore::addFile(const std::string &path,
                            const std::string &displayName) {
  std::unique_ptr<SafetensorsFile> file;
  Status opened = SafetensorsFile::open(path, file);
  if (!opened) {
    // Messages name the path as opened; show the name the caller chose.
    std::string message = opened.message();
    if (message.rfind(path, 0) == 0)
      message = displayName + message.substr(path.size());
    return Status::error(message);
  }
  size_t index = impl->files.size();
  for (const auto &[name, tensor] : file->tensors()) {
    auto [it, inserted] =
        impl->tensors.emplace(name, std::pair(index, &tensor));
    if (!inserted)
      return Status::error(displayName + ": tensor '" + name + "' is also in " +
                           impl->fileNames[it->second.first]);
  }
  impl->files.push_back(std::move(file));
  impl->fileNames.push_back(displayName);
  return Status::ok();
}

const Tensor *WeightStore::find(const std::string &name) const {
  auto it = impl->tensors.find(name);
  return it == impl->tensors.end() ? nullptr : it->second.second;
}

Status WeightStore::find(const std::string &name, DType dtype,
                         const std::vector<int64_t> &shape,
                         const std::string &what, const Tensor *&tensor) const {
  tensor = find(name);
  if (!tensor)
    return Status::error(what + ": weight '" + name +
                         "' is not in the artifact's weights");
  if (tensor->dtype != dtype || tensor->shape != shape)
    return Status::error(
        what + ": weight '" + name + "' is " + dtypeName(tensor->dtype) + " " +
        shapeString(tensor->shape) + " in the artifact, the program expects " +
        dtypeName(dtype) + " " + shapeString(shape));
  return Status::ok();
}

size_t WeightStore::size() const { return impl->tensors.size(); }

//===----------------------------------------------------------------------===//
// Artifact
//===----------------------------------------------------------------------===//

struct Artifact::Impl {
  std::string path;
  Manifest manifest;
  std::vector<program::Program> programs;
  WeightStore weights;
  /// A serving artifact's decode programs while it loads; then they move
  /// into `decode`, the decode entry, which reads these weights.
  std::vector<program::Program> decodePrograms;
  std::unique_ptr<Artifact> decode;
  /// Set in a decode entry: the weights of the artifact it belongs to.
  const WeightStore *sharedWeights = nullptr;

  Status load(const ArtifactOpenOptions &options);
  Status verifyFiles(bool verifyWeights) const;
  Status loadProgram(const RankEntry &entry, const std::string &relative,
                     program::Program &program) const;
  Status loadPrograms();
  Status verifyPrograms() const;
  void makeDecodeEntry();
};

Status Artifact::Impl::verifyFiles(bool verifyWeights) const {
  std::set<std::string> weightFiles(manifest.weightFiles.begin(),
                                    manifest.weightFiles.end());
  std::vector<std::pair<std::string, std::string>> toHash;
  for (const auto &[relative, digest] : manifest.files) {
    if (!isSafeRelativePath(relative))
      return Status::error(path + ": manifest.json lists '" + relative +
                           "', which is not a path inside the artifact");
    if (digest.rfind("sha256:", 0) != 0 || digest.size() != 7 + 64)
      return Status::error(path + ": manifest.json: '" + relative +
                           "' has no sha256 digest");
    if (!exists(path + "/" + relative))
      return Status::error(path + ": " + relative +
                           ": missing (manifest.json lists it)");
    // The weights files' headers and bounds are checked when they are
    // mapped; their bytes are hashed only on request.
    if (verifyWeights || !weightFiles.count(relative))
      toHash.emplace_back(relative, digest);
  }
  // A file a thread: the weights files dominate, each read once.
  return forEachInParallel(toHash.size(), [&](size_t i) -> Status {
    const auto &[relative, digest] = toHash[i];
    std::string actual;
    PARTITA_RETURN_IF_ERROR(sha256File(path + "/" + relative, actual));
    if (digest.compare(7, std::string::npos, actual) != 0)
      return Status::error(path + ": " + relative +
                           ": hash mismatch (tampered or truncated)");
    return Status::ok();
  });
}

Status Artifact::Impl::loadProgram(const RankEntry &entry,
                                   const std::string &relative,
                                   program::Program &program) const {
  std::string file = path + "/" + relative;
  std::string bytes;
  PARTITA_RETURN_IF_ERROR(readFile(file, kMaxProgramBytes, bytes));
  if (!program.ParseFromString(bytes))
    return Status::error(path + ": " + relative + ": not a valid program");
  if (program.rank() != entry.rank ||
      program.world_size() != manifest.worldSize)
    return Status::error(path + ": " + relative + ": the program is for rank " +
                         std::to_string(program.rank()) + " of " +
                         std::to_string(program.world_size()) +
                         ", the manifest says rank " +
                         std::to_string(entry.rank) + " of " +
                         std::to_string(manifest.worldSize));
  return Status::ok();
}

Status Artifact::Impl::loadPrograms() {
  for (const RankEntry &entry : manifest.ranks) {
    PARTITA_RETURN_IF_ERROR(
        loadProgram(entry, entry.program, programs.emplace_back()));
    if (manifest.serving)
      PARTITA_RETURN_IF_ERROR(loadProgram(entry, entry.decodeProgram,
                                          decodePrograms.emplace_back()));
  }
  return Status::ok();
}

Status Artifact::Impl::verifyPrograms() const {
  std::vector<const program::Program *> all, allDecode;
  for (const program::Program &program : programs)
    all.push_back(&program);
  Status verified = partita::runtime::verifyPrograms(all, &weights);
  if (!verified)
    return Status::error(path + ": " + verified.message());
  if (!manifest.serving)
    return Status::ok();
  // The decode programs are a world of their own: their communication
  // matches among them, never with the prefill's.
  for (const program::Program &program : decodePrograms)
    allDecode.push_back(&program);
  verified = partita::runtime::verifyPrograms(allDecode, &weights);
  if (!verified)
    return Status::error(path + ": the decode programs: " + verified.message());
  return Status::ok();
}

void Artifact::Impl::makeDecodeEntry() {
  decode.reset(new Artifact());
  Impl &entry = *decode->impl;
  entry.path = path;
  entry.manifest = manifest;
  entry.manifest.inputs = manifest.serving->decodeInputs;
  entry.manifest.outputs = manifest.serving->decodeOutputs;
  entry.programs = std::move(decodePrograms);
  decodePrograms.clear();
  entry.sharedWeights = &weights;
}

Status Artifact::Impl::load(const ArtifactOpenOptions &options) {
  if (!isDirectory(path))
    return Status::error(
        path + ": " +
        (exists(path) ? "not a directory" : "no such artifact directory"));
  std::string manifestPath = path + "/manifest.json";
  if (!exists(manifestPath))
    return Status::error(path + ": not a Partita artifact (no manifest.json)");
  std::string text;
  PARTITA_RETURN_IF_ERROR(readFile(manifestPath, kMaxManifestBytes, text));
  PARTITA_RETURN_IF_ERROR(manifestFromJson(text, manifestPath, manifest));

  // Every file the runtime reads must be covered by a digest, so none can
  // be changed without the manifest noticing.
  auto covered = [&](const std::string &relative) -> Status {
    if (!manifest.files.count(relative))
      return Status::error(manifestPath + ": '" + relative +
                           "' has no entry in 'files'");
    return Status::ok();
  };
  for (const RankEntry &entry : manifest.ranks) {
    PARTITA_RETURN_IF_ERROR(covered(entry.program));
    if (manifest.serving)
      PARTITA_RETURN_IF_ERROR(covered(entry.decodeProgram));
    if (manifest.target == "cuda") {
      PARTITA_RETURN_IF_ERROR(covered(entry.cudaSource));
      PARTITA_RETURN_IF_ERROR(covered(entry.cudaFatbin));
      if (manifest.serving) {
        PARTITA_RETURN_IF_ERROR(covered(entry.decodeCudaSource));
        PARTITA_RETURN_IF_ERROR(covered(entry.decodeCudaFatbin));
      }
    }
  }
  for (const std::string &relative : manifest.weightFiles)
    PARTITA_RETURN_IF_ERROR(covered(relative));
  PARTITA_RETURN_IF_ERROR(verifyFiles(options.verifyWeights));
  PARTITA_RETURN_IF_ERROR(loadPrograms());
  for (const std::string &relative : manifest.weightFiles)
    PARTITA_RETURN_IF_ERROR(
        weights.addFile(path + "/" + relative, path + ": " + relative));
  PARTITA_RETURN_IF_ERROR(verifyPrograms());
  std::vector<const program::Program *> all, allDecode;
  for (const program::Program &program : programs)
    all.push_back(&program);
  for (const program::Program &program : decodePrograms)
    allDecode.push_back(&program);
  PARTITA_RETURN_IF_ERROR(checkManifestAgainstPrograms(
      manifest, all, allDecode, path + ": manifest.json: "));
  if (manifest.serving)
    makeDecodeEntry();
  return Status::ok();
}

Artifact::Artifact() : impl(std::make_unique<Impl>()) {}
Artifact::~Artifact() = default;

Status Artifact::open(const std::string &path,
                      std::unique_ptr<Artifact> &artifact,
                      const ArtifactOpenOptions &options) {
  std::unique_ptr<Artifact> opened(new Artifact());
  opened->impl->path = path;
  // Paths with a trailing slash name the same directory; drop it so
  // messages and file paths read naturally.
  while (opened->impl->path.size() > 1 && opened->impl->path.back() == '/')
    opened->impl->path.pop_back();
  try {
    PARTITA_RETURN_IF_ERROR(opened->impl->load(options));
  } catch (const std::exception &e) {
    return Status::error(path + ": " + e.what());
  }
  artifact = std::move(opened);
  return Status::ok();
}

const std::string &Artifact::path() const { return impl->path; }
const Manifest &Artifact::manifest() const { return impl->manifest; }

const program::Program &Artifact::program(int32_t rank) const {
  return impl->programs[size_t(rank)];
}

const program::Program *Artifact::decodeProgram(int32_t rank) const {
  if (!impl->decode)
    return nullptr;
  return &impl->decode->impl->programs[size_t(rank)];
}

const Artifact *Artifact::decodeEntry() const { return impl->decode.get(); }

const WeightStore &Artifact::weights() const {
  return impl->sharedWeights ? *impl->sharedWeights : impl->weights;
}
