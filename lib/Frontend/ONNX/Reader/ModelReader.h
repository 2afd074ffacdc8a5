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

/// Parses a model file. Binary protobuf unless the file's first non-blank
/// character is `<`, which starts ONNX's textual syntax. Returns false and
/// sets `error` on failure.
bool readModelFile(const std::string &path, onnx::ModelProto &model,
                   std::string &error);

/// Parses a model held in memory (same format detection).
bool readModelBuffer(const char *data, size_t size, onnx::ModelProto &model,
                     std::string &error);

/// A read-only memory mapping of a file, unmapped on destruction.
class MappedFile {
public:
  ~MappedFile();
  const char *data() const { return data_; }
  uint64_t size() const { return size_; }

private:
  friend bool mapExternalFile(const std::string &, const std::string &,
                              std::shared_ptr<MappedFile> &, std::string &);
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
