//===- LoadedArtifact.cpp - an artifact opened from disk ------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/LoadedArtifact.h"

#include "ManifestCheck.h"
#include "ManifestJson.h"
#include "partita/runtime/FileUtil.h"
#include "partita/runtime/ProgramVerifier.h"
#include "partita/runtime/Safetensors.h"
#include "partita/runtime/Sha256.h"

#include <atomic>
#include <climits>
#include <exception>
#include <functional>
#include <unordered_map>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

/// Protobuf refuses messages of 2 GiB or more.
constexpr size_t kMaxProgramBytes = INT_MAX;
constexpr size_t kMaxManifestBytes = 64u << 20;

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

} // namespace

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
// LoadedArtifact
//===----------------------------------------------------------------------===//

struct LoadedArtifact::Impl {
  std::string path;
  Manifest manifest;
  std::vector<program::Program> programs;
  WeightStore weights;
  /// A serving artifact's decode programs while it loads; then they move
  /// into `decode`, the decode entry, which reads these weights.
  std::vector<program::Program> decodePrograms;
  std::unique_ptr<LoadedArtifact> decode;
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

Status LoadedArtifact::Impl::verifyFiles(bool verifyWeights) const {
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
    if (!pathExists(path + "/" + relative))
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

Status LoadedArtifact::Impl::loadProgram(const RankEntry &entry,
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

Status LoadedArtifact::Impl::loadPrograms() {
  for (const RankEntry &entry : manifest.ranks) {
    PARTITA_RETURN_IF_ERROR(
        loadProgram(entry, entry.program, programs.emplace_back()));
    if (manifest.serving)
      PARTITA_RETURN_IF_ERROR(loadProgram(entry, entry.decodeProgram,
                                          decodePrograms.emplace_back()));
  }
  return Status::ok();
}

Status LoadedArtifact::Impl::verifyPrograms() const {
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

void LoadedArtifact::Impl::makeDecodeEntry() {
  decode.reset(new LoadedArtifact());
  Impl &entry = *decode->impl;
  entry.path = path;
  entry.manifest = manifest;
  entry.manifest.inputs = manifest.serving->decodeInputs;
  entry.manifest.outputs = manifest.serving->decodeOutputs;
  entry.programs = std::move(decodePrograms);
  decodePrograms.clear();
  entry.sharedWeights = &weights;
}

Status LoadedArtifact::Impl::load(const ArtifactOpenOptions &options) {
  if (!isDirectory(path))
    return Status::error(
        path + ": " +
        (pathExists(path) ? "not a directory" : "no such artifact directory"));
  std::string manifestPath = path + "/manifest.json";
  if (!pathExists(manifestPath))
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

LoadedArtifact::LoadedArtifact() : impl(std::make_unique<Impl>()) {}
LoadedArtifact::~LoadedArtifact() = default;

Status LoadedArtifact::open(const std::string &path,
                            std::unique_ptr<LoadedArtifact> &artifact,
                            const ArtifactOpenOptions &options) {
  std::unique_ptr<LoadedArtifact> opened(new LoadedArtifact());
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

const std::string &LoadedArtifact::path() const { return impl->path; }
const Manifest &LoadedArtifact::manifest() const { return impl->manifest; }

const program::Program &LoadedArtifact::program(int32_t rank) const {
  return impl->programs[size_t(rank)];
}

const program::Program *LoadedArtifact::decodeProgram(int32_t rank) const {
  if (!impl->decode)
    return nullptr;
  return &impl->decode->impl->programs[size_t(rank)];
}

const LoadedArtifact *LoadedArtifact::decodeEntry() const {
  return impl->decode.get();
}

const WeightStore &LoadedArtifact::weights() const {
  return impl->sharedWeights ? *impl->sharedWeights : impl->weights;
}
