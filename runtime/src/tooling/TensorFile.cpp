//===- TensorFile.cpp - tensors in .npy and ONNX .pb files ----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/tooling/TensorFile.h"

#include "partita/runtime/FileUtil.h"
#include "partita/runtime/Float16.h"

#include "onnx/onnx_pb.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>
#include <unistd.h>
#include <zlib.h>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicBytes = 6;

/// The dtype a NumPy `descr` string stands for, or an error saying why it
/// has no Partita equivalent.
Status npyDType(const std::string &descr, DType &dtype) {
  if (descr.size() < 2)
    return Status::error("unknown dtype '" + descr + "'");
  char order = descr[0];
  std::string kind = descr.substr(1);
  if (order == '>' && kind != "i1" && kind != "b1" && kind != "u1")
    return Status::error("big-endian data ('" + descr +
                         "') is not supported; save it little-endian");
  if (order != '<' && order != '|' && order != '=')
    return Status::error("unknown dtype '" + descr + "'");
  if (kind == "f4")
    dtype = program::F32;
  else if (kind == "f2")
    dtype = program::F16;
  else if (kind == "i8")
    dtype = program::I64;
  else if (kind == "i4")
    dtype = program::I32;
  else if (kind == "i1")
    dtype = program::I8;
  else if (kind == "b1")
    dtype = program::BOOL;
  else if (kind == "f8")
    return Status::error("float64 ('" + descr +
                         "') is not a Partita dtype; save it as float32");
  else if (kind == "V2")
    return Status::error("2-byte void dtype ('" + descr +
                         "', bfloat16 saved by ml_dtypes?) is not "
                         "supported; save bfloat16 as float32");
  else
    return Status::error("dtype '" + descr +
                         "' has no Partita equivalent (float32, float16, "
                         "int64, int32, int8 and bool do)");
  return Status::ok();
}

/// The few parts of a Python dict literal that NumPy headers use.
class NpyHeaderParser {
public:
  explicit NpyHeaderParser(const std::string &text) : text(text) {}

  Status parse(std::string &descr, bool &fortranOrder,
               std::vector<int64_t> &shape) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    if (!consume('{'))
      return error("expected '{'");
    while (!consume('}')) {
      std::string key;
      if (!parseString(key) || !consume(':'))
        return error("expected 'key':");
      if (key == "descr") {
        if (!parseString(descr))
          return error("'descr' is not a string (structured arrays are not "
                       "supported)");
        haveDescr = true;
      } else if (key == "fortran_order") {
        if (consumeWord("True"))
          fortranOrder = true;
        else if (consumeWord("False"))
          fortranOrder = false;
        else
          return error("'fortran_order' is not True or False");
        haveOrder = true;
      } else if (key == "shape") {
        PARTITA_RETURN_IF_ERROR(parseShape(shape));
        haveShape = true;
      } else {
        return error("unexpected key '" + key + "'");
      }
      if (!consume(',') && !peek('}'))
        return error("expected ',' or '}'");
    }
    if (!haveDescr || !haveOrder || !haveShape)
      return error("'descr', 'fortran_order' or 'shape' is missing");
    return Status::ok();
  }

private:
  Status error(const std::string &what) const {
    return Status::error("malformed .npy header (" + what + " at offset " +
                         std::to_string(position) + ")");
  }
  void skipSpace() {
    while (position < text.size() &&
           std::isspace(static_cast<unsigned char>(text[position])))
      ++position;
  }
  bool peek(char c) {
    skipSpace();
    return position < text.size() && text[position] == c;
  }
  bool consume(char c) {
    if (!peek(c))
      return false;
    ++position;
    return true;
  }
  bool consumeWord(const char *word) {
    skipSpace();
    size_t length = std::strlen(word);
    if (text.compare(position, length, word) != 0)
      return false;
    position += length;
    return true;
  }
  bool parseString(std::string &out) {
    skipSpace();
    if (position >= text.size() ||
        (text[position] != '\'' && text[position] != '"'))
      return false;
    char quote = text[position++];
    size_t end = text.find(quote, position);
    if (end == std::string::npos)
      return false;
    out = text.substr(position, end - position);
    position = end + 1;
    return true;
  }
  Status parseShape(std::vector<int64_t> &shape) {
    if (!consume('('))
      return error("'shape' is not a tuple");
    while (!consume(')')) {
      skipSpace();
      size_t start = position;
      int64_t value = 0;
      while (position < text.size() &&
             std::isdigit(static_cast<unsigned char>(text[position]))) {
        if (__builtin_mul_overflow(value, int64_t(10), &value) ||
            __builtin_add_overflow(value, int64_t(text[position] - '0'),
                                   &value))
          return error("dimension too large");
        ++position;
      }
      // Python 2 era files spell dimensions like `3L`.
      if (position < text.size() && text[position] == 'L')
        ++position;
      if (position == start)
        return error("'shape' holds something other than sizes");
      shape.push_back(value);
      if (!consume(',') && !peek(')'))
        return error("expected ',' or ')' in 'shape'");
    }
    return Status::ok();
  }

  const std::string &text;
  size_t position = 0;
};

Status parseNpy(const std::string &bytes, HostTensor &tensor) {
  if (bytes.size() < 10 || bytes.compare(0, kNpyMagicBytes, kNpyMagic) != 0)
    return Status::error("not a .npy file (no \\x93NUMPY magic)");
  unsigned major = static_cast<unsigned char>(bytes[6]);
  size_t headerBytes, headerStart;
  const auto *raw = reinterpret_cast<const uint8_t *>(bytes.data());
  if (major == 1) {
    headerBytes = size_t(raw[8]) | size_t(raw[9]) << 8;
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      return Status::error("truncated .npy header");
    headerBytes = size_t(raw[8]) | size_t(raw[9]) << 8 | size_t(raw[10]) << 16 |
                  size_t(raw[11]) << 24;
    headerStart = 12;
  } else {
    return Status::error(".npy format version " + std::to_string(major) +
                         " is not supported (1 to 3 are)");
  }
  if (headerBytes > bytes.size() - headerStart)
    return Status::error("truncated .npy header");
  std::string header = bytes.substr(headerStart, headerBytes);
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
  PARTITA_RETURN_IF_ERROR(
      NpyHeaderParser(header).parse(descr, fortranOrder, shape));
  if (fortranOrder && shape.size() > 1)
    return Status::error("Fortran-order arrays are not supported; save a "
                         "C-contiguous array");
  DType dtype = program::DTYPE_UNSPECIFIED;
  PARTITA_RETURN_IF_ERROR(npyDType(descr, dtype));
  PARTITA_RETURN_IF_ERROR(tensor.allocate(dtype, shape));
  size_t dataStart = headerStart + headerBytes;
  size_t available = bytes.size() - dataStart;
  if (available != tensor.byteSize())
    return Status::error(
        "the data holds " + std::to_string(available) + " bytes, " +
        dtypeName(dtype) + " " + shapeString(shape) + " needs " +
        std::to_string(tensor.byteSize()) + " (truncated file?)");
  std::memcpy(tensor.data(), bytes.data() + dataStart, available);
  return Status::ok();
}

std::string npyDescr(DType dtype) {
  switch (dtype) {
  case program::F32:
  case program::BF16: // Widened to float32 by writeNpy.
    return "<f4";
  case program::F16:
    return "<f2";
  case program::I64:
    return "<i8";
  case program::I32:
    return "<i4";
  case program::I8:
    return "|i1";
  case program::BOOL:
    return "|b1";
  default:
    return "";
  }
}

Status parseOnnxTensor(const std::string &bytes, HostTensor &tensor) {
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes))
    return Status::error("not a valid ONNX TensorProto");
  if (proto.data_location() == onnx::TensorProto::EXTERNAL)
    return Status::error("tensors with external data are not supported");
  DType dtype = program::DTYPE_UNSPECIFIED;
  switch (proto.data_type()) {
  case onnx::TensorProto::FLOAT:
    dtype = program::F32;
    break;
  case onnx::TensorProto::FLOAT16:
    dtype = program::F16;
    break;
  case onnx::TensorProto::BFLOAT16:
  // ONNX before 1.13 wrote bfloat16 tensors (its backend test data among
  // them) as uint16 bit patterns; Partita has no uint16, so read them so.
  case onnx::TensorProto::UINT16:
    dtype = program::BF16;
    break;
  case onnx::TensorProto::INT64:
    dtype = program::I64;
    break;
  case onnx::TensorProto::INT32:
    dtype = program::I32;
    break;
  case onnx::TensorProto::INT8:
    dtype = program::I8;
    break;
  case onnx::TensorProto::BOOL:
    dtype = program::BOOL;
    break;
  default:
    return Status::error("ONNX data type " + std::to_string(proto.data_type()) +
                         " (" +
                         onnx::TensorProto::DataType_Name(
                             onnx::TensorProto::DataType(proto.data_type())) +
                         ") has no Partita equivalent");
  }
  std::vector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  PARTITA_RETURN_IF_ERROR(tensor.allocate(dtype, shape));
  size_t elements = size_t(tensor.tensor().numElements());
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != tensor.byteSize())
      return Status::error(
          "raw_data holds " + std::to_string(proto.raw_data().size()) +
          " bytes, " + dtypeName(dtype) + " " + shapeString(shape) + " needs " +
          std::to_string(tensor.byteSize()));
    std::memcpy(tensor.data(), proto.raw_data().data(), tensor.byteSize());
    return Status::ok();
  }
  auto countError = [&](int count, const char *field) {
    return Status::error(
        std::string(field) + " holds " + std::to_string(count) + " values, " +
        shapeString(shape) + " needs " + std::to_string(elements));
  };
  switch (dtype) {
  case program::F32:
    if (size_t(proto.float_data_size()) != elements)
      return countError(proto.float_data_size(), "float_data");
    std::memcpy(tensor.data(), proto.float_data().data(), elements * 4);
    return Status::ok();
  case program::I64:
    if (size_t(proto.int64_data_size()) != elements)
      return countError(proto.int64_data_size(), "int64_data");
    std::memcpy(tensor.data(), proto.int64_data().data(), elements * 8);
    return Status::ok();
  default:
    break;
  }
  // The remaining types keep one value (or, for f16/bf16, the bits) per
  // int32_data entry.
  if (size_t(proto.int32_data_size()) != elements)
    return countError(proto.int32_data_size(), "int32_data");
  for (size_t i = 0; i < elements; ++i) {
    int32_t value = proto.int32_data(int(i));
    switch (dtype) {
    case program::I32:
      tensor.tensor().as<int32_t>()[i] = value;
      break;
    case program::I8:
      tensor.tensor().as<int8_t>()[i] = int8_t(value);
      break;
    case program::BOOL:
      tensor.tensor().as<uint8_t>()[i] = value != 0;
      break;
    default: // F16, BF16.
      tensor.tensor().as<uint16_t>()[i] = uint16_t(value);
      break;
    }
  }
  return Status::ok();
}

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

Status partita::runtime::readNpy(const std::string &path, HostTensor &tensor) {
  std::string bytes;
  PARTITA_RETURN_IF_ERROR(readFile(path, SIZE_MAX, bytes));
  Status status = parseNpy(bytes, tensor);
  if (!status)
    return Status::error(path + ": " + status.message());
  return Status::ok();
}

Status partita::runtime::writeNpy(const std::string &path,
                                  const Tensor &tensor) {
  std::string descr = npyDescr(tensor.dtype);
  if (descr.empty())
    return Status::error(path + ": cannot write dtype " +
                         dtypeName(tensor.dtype) + " to .npy");
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape.size(); ++i)
    shape +=
        std::to_string(tensor.shape[i]) + (tensor.shape.size() == 1      ? ","
                                           : i + 1 < tensor.shape.size() ? ", "
                                                                         : "");
  shape += ")";
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // NumPy pads the header with spaces and a newline so the data starts
  // 64-byte aligned.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xffff)
    return Status::error(path + ": the shape is too long for a .npy header");
  std::string bytes(kNpyMagic, kNpyMagicBytes);
  bytes += '\x01';
  bytes += '\x00';
  bytes += char(header.size() & 0xff);
  bytes += char(header.size() >> 8);
  bytes += header;
  size_t elements = size_t(tensor.numElements());
  if (tensor.dtype == program::BF16) {
    std::vector<float> widened(elements);
    for (size_t i = 0; i < elements; ++i)
      widened[i] = bf16ToFloat(tensor.as<uint16_t>()[i]);
    bytes.append(reinterpret_cast<const char *>(widened.data()),
                 elements * sizeof(float));
  } else {
    bytes.append(static_cast<const char *>(tensor.data), tensor.byteSize());
  }
  // Replace an existing file: outputs of a previous run are overwritten.
  std::string temporary = path + ".tmp";
  ::unlink(temporary.c_str());
  PARTITA_RETURN_IF_ERROR(writeNewFile(temporary, bytes.data(), bytes.size()));
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    Status status = errnoStatus(path);
    ::unlink(temporary.c_str());
    return status;
  }
  return Status::ok();
}

Status partita::runtime::readOnnxTensor(const std::string &path,
                                        HostTensor &tensor) {
  std::string bytes;
  PARTITA_RETURN_IF_ERROR(readFile(path, SIZE_MAX, bytes));
  Status status = Status::ok();
  try {
    status = parseOnnxTensor(bytes, tensor);
  } catch (const std::exception &e) {
    status = Status::error(e.what());
  }
  if (!status)
    return Status::error(path + ": " + status.message());
  return Status::ok();
}

Status partita::runtime::readTensorFile(const std::string &path,
                                        HostTensor &tensor) {
  if (endsWith(path, ".npy"))
    return readNpy(path, tensor);
  if (endsWith(path, ".pb"))
    return readOnnxTensor(path, tensor);
  return Status::error(path + ": unknown tensor file type (expected .npy or "
                              "an ONNX TensorProto .pb)");
}

//===----------------------------------------------------------------------===//
// .npz
//===----------------------------------------------------------------------===//

namespace {

uint32_t readLe(const std::string &bytes, size_t at, int width) {
  uint32_t value = 0;
  for (int i = 0; i < width; ++i)
    value |= uint32_t(static_cast<unsigned char>(bytes[at + size_t(i)]))
             << (8 * i);
  return value;
}

/// Inflates `size` raw-deflate bytes at `data` into exactly `expected`
/// bytes.
Status inflateRaw(const char *data, size_t size, size_t expected,
                  std::string &out) {
  out.assign(expected, '\0');
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK)
    return Status::error("cannot start inflating");
  stream.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(data));
  stream.avail_in = static_cast<uInt>(size);
  stream.next_out = reinterpret_cast<Bytef *>(out.data());
  stream.avail_out = static_cast<uInt>(expected);
  int result = inflate(&stream, Z_FINISH);
  size_t produced = stream.total_out;
  inflateEnd(&stream);
  if (result != Z_STREAM_END || produced != expected)
    return Status::error("corrupt deflated data");
  return Status::ok();
}

} // namespace

Status partita::runtime::readNpz(
    const std::string &path,
    std::vector<std::pair<std::string, HostTensor>> &arrays) {
  arrays.clear();
  std::string bytes;
  PARTITA_RETURN_IF_ERROR(readFile(path, SIZE_MAX, bytes));
  auto fail = [&](const std::string &message) {
    return Status::error(path + ": " + message);
  };
  // The central directory, from the end-of-directory record (ZIP64 and
  // archive comments are not written by numpy).
  constexpr size_t kEndBytes = 22;
  if (bytes.size() < kEndBytes)
    return fail("not a .npz archive (too short)");
  size_t end = bytes.size() - kEndBytes;
  if (readLe(bytes, end, 4) != 0x06054b50)
    return fail("not a .npz archive (no zip end record)");
  size_t entries = readLe(bytes, end + 10, 2);
  size_t directory = readLe(bytes, end + 16, 4);
  if (directory > end)
    return fail("corrupt zip directory");
  size_t at = directory;
  for (size_t i = 0; i < entries; ++i) {
    if (at + 46 > end || readLe(bytes, at, 4) != 0x02014b50)
      return fail("corrupt zip directory entry");
    uint32_t method = readLe(bytes, at + 10, 2);
    size_t compressed = readLe(bytes, at + 20, 4);
    size_t size = readLe(bytes, at + 24, 4);
    size_t nameBytes = readLe(bytes, at + 28, 2);
    size_t extraBytes = readLe(bytes, at + 30, 2);
    size_t commentBytes = readLe(bytes, at + 32, 2);
    size_t local = readLe(bytes, at + 42, 4);
    if (at + 46 + nameBytes > end)
      return fail("corrupt zip directory entry");
    std::string name = bytes.substr(at + 46, nameBytes);
    at += 46 + nameBytes + extraBytes + commentBytes;
    if (compressed == 0xffffffffu || size == 0xffffffffu)
      return fail("'" + name + "' is too large (ZIP64 is not supported)");
    if (local + 30 > bytes.size() || readLe(bytes, local, 4) != 0x04034b50)
      return fail("'" + name + "': corrupt local header");
    size_t data = local + 30 + readLe(bytes, local + 26, 2) +
                  readLe(bytes, local + 28, 2);
    if (data > bytes.size() || compressed > bytes.size() - data)
      return fail("'" + name + "' is truncated");
    std::string npy;
    if (method == 0) {
      if (compressed != size)
        return fail("'" + name + "': stored sizes differ");
      npy = bytes.substr(data, size);
    } else if (method == 8) {
      Status inflated = inflateRaw(bytes.data() + data, compressed, size, npy);
      if (!inflated)
        return fail("'" + name + "': " + inflated.message());
    } else {
      return fail("'" + name + "' is compressed with zip method " +
                  std::to_string(method) +
                  " (numpy writes stored or deflated entries)");
    }
    constexpr std::string_view kSuffix = ".npy";
    if (name.size() <= kSuffix.size() ||
        name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix))
      return fail("'" + name + "' is not a .npy entry");
    name.resize(name.size() - kSuffix.size());
    for (const auto &[other, tensor] : arrays)
      if (other == name)
        return fail("'" + name + "' is stored twice");
    HostTensor tensor;
    Status parsed = parseNpy(npy, tensor);
    if (!parsed)
      return fail("'" + name + "': " + parsed.message());
    arrays.emplace_back(std::move(name), std::move(tensor));
  }
  return Status::ok();
}
