//===- ModelReader.h - ONNX files into ModelProto ---------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Reads an ONNX model, binary protobuf or ONNX textual syntax, into a
// ModelProto, and maps the external data files its tensors refer to. This is
// the only code that calls into protobuf's and libonnx's parsers, which may
// throw: it is compiled with exceptions and turns every failure into an
// error string. It does not depend on MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_FRONTEND_ONNX_MODELREADER_H
#define PARTITA_LIB_FRONTEND_ONNX_MODELREADER_H

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <memory>
#include <string>

namespace partita::onnx_reader {

class MappedFile;

/// Where the raw bytes of each graph initializer lie in a memory-mapped
/// model file, for the initializers whose bytes were left there instead of
/// being copied into the ModelProto.
struct MappedInitializers {
  struct Span {
    uint64_t offset = 0;
    uint64_t length = 0;
    bool present = false;
  };
  std::shared_ptr<MappedFile> file;
  /// Indexed like graph.initializer.
  std::vector<Span> rawData;
};

/// Parses a model file. Binary protobuf unless the file's first non-blank
/// character is `<`, which starts ONNX's textual syntax. A binary model is
/// memory-mapped and its initializers' raw bytes stay in the mapping
/// (`mapped`): they are neither copied nor read, so a model costs its graph,
/// not its weights, to import. Returns false and sets `error` on failure.
bool readModelFile(const std::string &path, onnx::ModelProto &model,
                   MappedInitializers &mapped, std::string &error);

/// Parses a model held in memory (same format detection).
bool readModelBuffer(const char *data, size_t size, onnx::ModelProto &model,
                     std::string &error);

/// A read-only memory mapping of a file, unmapped on destruction.
class MappedFile {
public:
  ~MappedFile();
  const char *data() const { return data_; }
  uint64_t size() const { return size_; }

  /// Maps the regular file open as `fd`.
  static bool map(int fd, const std::string &name,
                  std::shared_ptr<MappedFile> &file, std::string &error);

private:
  const char *data_ = nullptr;
  uint64_t size_ = 0;
};

/// Maps the external data file `location` of a model in `modelDir`. Refuses
/// (returns false with `error`) a location that is absolute, contains `..`,
/// resolves outside `modelDir`, or names a symbolic or hard link.
bool mapExternalFile(const std::string &modelDir, const std::string &location,
                     std::shared_ptr<MappedFile> &file, std::string &error);

} // namespace partita::onnx_reader

#endif // PARTITA_LIB_FRONTEND_ONNX_MODELREADER_H
