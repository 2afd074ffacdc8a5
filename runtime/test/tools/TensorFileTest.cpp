//===- TensorFileTest.cpp - .npy and ONNX TensorProto files ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/tooling/TensorFile.h"

#include "partita/runtime/Float16.h"

#include "TestUtil.h"

#include "onnx/onnx_pb.h"

#include <cstring>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

TEST(TensorFile, NpyRoundTrip) {
  test::TemporaryDirectory directory;
  struct Case {
    DType dtype;
    std::vector<int64_t> shape;
  };
  for (const Case &c : std::vector<Case>{{program::F32, {2, 3}},
                                         {program::F16, {5}},
                                         {program::I64, {1, 2, 2}},
                                         {program::I32, {}},
                                         {program::I8, {0, 3}},
                                         {program::BOOL, {4}}}) {
    HostTensor original;
    ASSERT_OK(original.allocate(c.dtype, c.shape));
    auto *bytes = static_cast<uint8_t *>(original.data());
    for (size_t i = 0; i < original.byteSize(); ++i)
      bytes[i] = c.dtype == program::BOOL ? uint8_t(i % 2) : uint8_t(i * 13);
    std::string path = directory.path(dtypeName(c.dtype) + ".npy");
    ASSERT_OK(writeNpy(path, original.tensor()));
    // The header is padded so the data starts 64-byte aligned.
    EXPECT_EQ((test::readBytes(path).size() - original.byteSize()) % 64, 0u);
    HostTensor read;
    ASSERT_OK(readTensorFile(path, read));
    EXPECT_EQ(read.dtype(), c.dtype);
    EXPECT_EQ(read.shape(), c.shape);
    ASSERT_EQ(read.byteSize(), original.byteSize());
    EXPECT_EQ(std::memcmp(read.data(), original.data(), read.byteSize()), 0)
        << dtypeName(c.dtype);
  }
}

TEST(TensorFile, Bf16IsWrittenAsFloat32) {
  test::TemporaryDirectory directory;
  HostTensor original;
  ASSERT_OK(original.allocate(program::BF16, {3}));
  for (int i = 0; i < 3; ++i)
    original.tensor().as<uint16_t>()[i] = floatToBf16(1.5f * float(i) - 0.1f);
  ASSERT_OK(writeNpy(directory.path("bf.npy"), original.tensor()));
  HostTensor read;
  ASSERT_OK(readNpy(directory.path("bf.npy"), read));
  EXPECT_EQ(read.dtype(), program::F32);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(read.tensor().as<float>()[i],
              bf16ToFloat(original.tensor().as<uint16_t>()[i]));
}

/// A .npy file with the given header dictionary and data.
std::string npyFile(const std::string &dict, const std::string &data,
                    int major = 1) {
  std::string header = dict + "\n";
  std::string bytes = std::string("\x93NUMPY", 6) + char(major) + '\0';
  if (major == 1) {
    bytes += char(header.size() & 0xff);
    bytes += char(header.size() >> 8);
  } else {
    for (int i = 0; i < 4; ++i)
      bytes += char((header.size() >> (8 * i)) & 0xff);
  }
  return bytes + header + data;
}

TEST(TensorFile, NpyVersion2Headers) {
  test::TemporaryDirectory directory;
  int32_t values[2] = {7, -9};
  std::string data(reinterpret_cast<const char *>(values), sizeof(values));
  test::writeBytes(
      directory.path("v2.npy"),
      npyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", data,
              2));
  HostTensor read;
  ASSERT_OK(readNpy(directory.path("v2.npy"), read));
  EXPECT_EQ(read.dtype(), program::I32);
  EXPECT_EQ(read.tensor().as<int32_t>()[1], -9);
}

TEST(TensorFile, NpyRefusesWhatItCannotMap) {
  test::TemporaryDirectory directory;
  std::string eight(8, '\0');
  struct Case {
    const char *what;
    std::string file;
    const char *message;
  };
  std::vector<Case> cases = {
      {"magic", "PK\x03\x04 not numpy", "not a .npy file"},
      {"f8",
       npyFile("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
               eight),
       "float64 ('<f8') is not a Partita dtype; save it as float32"},
      {"big",
       npyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
               eight),
       "big-endian data ('>f4') is not supported"},
      {"unsigned",
       npyFile("{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }",
               eight),
       "dtype '<u4' has no Partita equivalent"},
      {"fortran",
       npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }",
               eight),
       "Fortran-order arrays are not supported"},
      {"structured",
       npyFile("{'descr': [('a', '<f4')], 'fortran_order': False, "
               "'shape': (2,), }",
               eight),
       "structured arrays are not supported"},
      {"truncated",
       npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
               eight),
       "the data holds 8 bytes, f32 [3] needs 12 (truncated file?)"},
      {"header",
       npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,", eight),
       "malformed .npy header"},
      {"version",
       npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
               eight, 4),
       ".npy format version 4 is not supported"},
  };
  for (const Case &c : cases) {
    std::string path = directory.path(std::string(c.what) + ".npy");
    test::writeBytes(path, c.file);
    HostTensor read;
    Status status = readNpy(path, read);
    EXPECT_FALSE(status.isOk()) << c.what;
    EXPECT_NE(status.message().find(c.message), std::string::npos)
        << c.what << ": " << status.message();
  }
  HostTensor read;
  EXPECT_ERROR_CONTAINS(readTensorFile(directory.path("x.txt"), read),
                        "unknown tensor file type");
}

/// A FIFO would block the open until a writer comes, and a device may never
/// end: anything but a regular file is refused before it is read.
TEST(TensorFile, RefusesFilesThatAreNotRegular) {
  test::TemporaryDirectory directory;
  HostTensor tensor;
  std::string fifo = directory.path("fifo.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_ERROR_CONTAINS(readTensorFile(fifo, tensor),
                        fifo + ": a FIFO, not a regular file");
  std::string pb = directory.path("fifo.pb");
  ASSERT_EQ(::mkfifo(pb.c_str(), 0600), 0);
  EXPECT_ERROR_CONTAINS(readTensorFile(pb, tensor),
                        pb + ": a FIFO, not a regular file");
  std::string folder = directory.path("folder.npy");
  std::filesystem::create_directory(folder);
  EXPECT_ERROR_CONTAINS(readTensorFile(folder, tensor),
                        folder + ": a directory, not a regular file");
  std::string zero = directory.path("zero.npy");
  ASSERT_EQ(::symlink("/dev/zero", zero.c_str()), 0);
  EXPECT_ERROR_CONTAINS(readTensorFile(zero, tensor),
                        zero + ": a character device, not a regular file");
}

TEST(TensorFile, OnnxTensorProto) {
  test::TemporaryDirectory directory;
  onnx::TensorProto raw;
  raw.set_data_type(onnx::TensorProto::FLOAT);
  raw.add_dims(2);
  float values[2] = {1.5f, -2};
  raw.set_raw_data(values, sizeof(values));
  test::writeBytes(directory.path("raw.pb"), raw.SerializeAsString());
  HostTensor read;
  ASSERT_OK(readTensorFile(directory.path("raw.pb"), read));
  EXPECT_EQ(read.dtype(), program::F32);
  EXPECT_EQ(read.shape(), std::vector<int64_t>{2});
  EXPECT_EQ(read.tensor().as<float>()[1], -2);

  onnx::TensorProto ids;
  ids.set_data_type(onnx::TensorProto::INT64);
  ids.add_dims(1);
  ids.add_dims(3);
  for (int64_t v : {5, 6, 7})
    ids.add_int64_data(v);
  test::writeBytes(directory.path("ids.pb"), ids.SerializeAsString());
  ASSERT_OK(readOnnxTensor(directory.path("ids.pb"), read));
  EXPECT_EQ(read.shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(read.tensor().as<int64_t>()[2], 7);

  onnx::TensorProto mask;
  mask.set_data_type(onnx::TensorProto::BOOL);
  mask.add_dims(3);
  for (int32_t v : {1, 0, 1})
    mask.add_int32_data(v);
  test::writeBytes(directory.path("mask.pb"), mask.SerializeAsString());
  ASSERT_OK(readOnnxTensor(directory.path("mask.pb"), read));
  EXPECT_EQ(read.dtype(), program::BOOL);
  EXPECT_EQ(read.tensor().as<uint8_t>()[1], 0);
  EXPECT_EQ(read.tensor().as<uint8_t>()[2], 1);

  onnx::TensorProto doubles;
  doubles.set_data_type(onnx::TensorProto::DOUBLE);
  doubles.add_dims(1);
  doubles.add_double_data(1.0);
  test::writeBytes(directory.path("double.pb"), doubles.SerializeAsString());
  EXPECT_ERROR_CONTAINS(readOnnxTensor(directory.path("double.pb"), read),
                        "ONNX data type 11 (DOUBLE) has no Partita equivalent");

  ids.add_int64_data(8);
  test::writeBytes(directory.path("count.pb"), ids.SerializeAsString());
  EXPECT_ERROR_CONTAINS(readOnnxTensor(directory.path("count.pb"), read),
                        "int64_data holds 4 values, [1, 3] needs 3");

  test::writeBytes(directory.path("junk.pb"), "\xff\xff\xff\xff");
  EXPECT_ERROR_CONTAINS(readOnnxTensor(directory.path("junk.pb"), read),
                        "not a valid ONNX TensorProto");
}

} // namespace
