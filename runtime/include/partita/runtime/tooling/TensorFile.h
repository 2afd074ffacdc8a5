//===- TensorFile.h - tensors in .npy and ONNX .pb files --------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// How partita-run reads inputs and writes outputs: NumPy .npy files
// (format 1.0 to 3.0, little-endian, C order) and ONNX TensorProto .pb
// files (the format of ONNX's test data). Anything that cannot be mapped
// to a Partita dtype exactly is refused with a message saying what it is.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TOOLING_TENSORFILE_H
#define PARTITA_RUNTIME_TOOLING_TENSORFILE_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

/// Reads a .npy file. Refuses big-endian data, Fortran order, object
/// arrays and dtypes with no Partita equivalent (float64, unsigned, ...).
Status readNpy(const std::string &path, HostTensor &tensor);
/// Writes `tensor` as a format 1.0 .npy file. bf16, which NumPy lacks, is
/// widened to float32 (exactly); every other dtype is written as is.
Status writeNpy(const std::string &path, const Tensor &tensor);

/// Reads a serialized onnx.TensorProto (raw_data or the typed fields).
Status readOnnxTensor(const std::string &path, HostTensor &tensor);

/// readNpy for `.npy`, readOnnxTensor for `.pb`; other suffixes are refused.
Status readTensorFile(const std::string &path, HostTensor &tensor);

/// The arrays of a NumPy .npz archive (numpy.savez, stored, or
/// numpy.savez_compressed, deflated), by name without the `.npy` suffix,
/// in the archive's order.
Status readNpz(const std::string &path,
               std::vector<std::pair<std::string, HostTensor>> &arrays);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TOOLING_TENSORFILE_H
