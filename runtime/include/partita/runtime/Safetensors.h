//===- Safetensors.h - weights files of an artifact -------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Reading and writing the safetensors format (a little-endian u64 header
// length, a JSON header naming each tensor's dtype, shape and byte range,
// then the data). Files are mapped read-only, so a rank's weights cost no
// copy and untouched tensors no memory. docs/artifact.md has the layout the
// writer chooses.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_SAFETENSORS_H
#define PARTITA_RUNTIME_SAFETENSORS_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"
#include "partita/runtime/WeightView.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace partita::runtime {

/// `F32`, `BF16`, `I64`, `BOOL`, ... as safetensors headers spell dtypes.
std::string safetensorsDTypeName(DType dtype);
/// The inverse; DTYPE_UNSPECIFIED for a dtype Partita does not have.
DType dtypeFromSafetensorsName(const std::string &name);

/// One tensor to write: `view`, or when it is unset (the default), `bytes`
/// bytes at `data`, row-major.
struct SafetensorsInput {
  std::string name;
  DType dtype = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  const void *data = nullptr;
  size_t bytes = 0;
  /// When valid, the tensor's elements, and `data` is unused; `dtype`,
  /// `shape` and `bytes` must be the view's (of() fills them so).
  WeightView view;

  static SafetensorsInput of(std::string name, WeightView view);
};

/// Writes a new file at `path` (which must not exist) and fsyncs it. Sets
/// `sha256Hex` to the digest of what was written, computed on the way.
/// Tensors are streamed: a view's bytes go through one reused buffer of at
/// most 16 MiB (or one row, if larger) on their way to the file, except a
/// view whose bytes are its source's, which is written from the source.
/// Once a view of a file-mapped source is written, the source's pages are
/// dropped from this process's resident set (madvise), so writing a model
/// does not make it resident.
Status writeSafetensors(const std::string &path,
                        const std::vector<SafetensorsInput> &tensors,
                        const std::map<std::string, std::string> &metadata,
                        std::string &sha256Hex);

/// One file for writeSafetensorsFiles.
struct SafetensorsFileSpec {
  std::string path;
  std::vector<SafetensorsInput> tensors;
  std::map<std::string, std::string> metadata;
};

/// Writes each of `files` as writeSafetensors does and sets `sha256Hex[i]`
/// to the digest of `files[i]`. Files are written in parallel (a thread per
/// core), and all of them read their sources in one sweep in address order:
/// where several files read the same source (each rank's slice of one
/// weight), they read it at about the same time, so a model larger than
/// memory is read from disk about once, not once per file. The sources next
/// in the sweep are prefetched (madvise WILLNEED) while the current ones are
/// copied. `windowBytes` is the sweep's step: a file's tensors are written
/// a window of sources at a time, and no file gets more than 8 windows
/// ahead of the slowest. Returns the first error in file order.
Status writeSafetensorsFiles(const std::vector<SafetensorsFileSpec> &files,
                             std::vector<std::string> &sha256Hex,
                             uint64_t windowBytes = 512ull << 20);

/// A safetensors file mapped read-only. Every tensor's range has been
/// checked against the file size; tensor data is aligned to its element size.
class SafetensorsFile {
public:
  /// Maps and validates `path`. Errors name `path`.
  static Status open(const std::string &path,
                     std::unique_ptr<SafetensorsFile> &file);
  ~SafetensorsFile();

  /// Tensors in file order. Their memory is read-only: writing it faults.
  const std::vector<std::pair<std::string, Tensor>> &tensors() const;
  /// The tensor named `name`, or null.
  const Tensor *find(const std::string &name) const;
  const std::map<std::string, std::string> &metadata() const;

private:
  SafetensorsFile();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_SAFETENSORS_H
