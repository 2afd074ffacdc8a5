//===- ArtifactWriter.cpp - writing an artifact to disk -------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/ArtifactWriter.h"

#include "ManifestCheck.h"
#include "ManifestJson.h"
#include "partita/runtime/FileUtil.h"
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
    bool replacing = pathExists(targetPath);
    if (replacing && (!isDirectory(targetPath) ||
                      !pathExists(targetPath + "/manifest.json")))
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
