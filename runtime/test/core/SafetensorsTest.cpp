//===- SafetensorsTest.cpp - weights files --------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Safetensors.h"
#include "partita/runtime/Sha256.h"

#include "TestUtil.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <numeric>
#include <sstream>
#include <sys/mman.h>
#include <unistd.h>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

struct Owned {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

Owned makeTensor(const std::string &name, DType dtype,
                 std::vector<int64_t> shape, uint8_t seed) {
  int64_t elements = 1;
  for (int64_t dim : shape)
    elements *= dim;
  std::vector<uint8_t> bytes(size_t(elements) * dtypeSize(dtype));
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = uint8_t(seed + i * 7);
  return {name, dtype, std::move(shape), std::move(bytes)};
}

std::vector<SafetensorsInput> inputsOf(const std::vector<Owned> &tensors) {
  std::vector<SafetensorsInput> inputs;
  for (const Owned &t : tensors)
    inputs.push_back(
        {t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  return inputs;
}

/// A file with header `json` (padded so the data starts 64-byte aligned)
/// and `dataBytes` bytes of data.
std::string rawFile(std::string json, size_t dataBytes) {
  json.append((64 - (8 + json.size()) % 64) % 64, ' ');
  std::string bytes(8, '\0');
  uint64_t length = json.size();
  std::memcpy(&bytes[0], &length, 8);
  return bytes + json + std::string(dataBytes, '\x01');
}

TEST(Safetensors, RoundTrip) {
  test::TemporaryDirectory directory;
  // Sizes that are and are not multiples of 64 bytes, of every dtype.
  std::vector<Owned> tensors = {makeTensor("bytes", program::I8, {3}, 1),
                                makeTensor("half", program::F16, {5}, 2),
                                makeTensor("matrix", program::F32, {4, 16}, 3),
                                makeTensor("ids", program::I64, {3}, 4),
                                makeTensor("flags", program::BOOL, {2, 1}, 5),
                                makeTensor("bf", program::BF16, {32}, 6),
                                makeTensor("ints", program::I32, {7}, 7),
                                makeTensor("empty", program::F32, {0, 4}, 8),
                                makeTensor("scalar", program::F32, {}, 9)};
  std::string path = directory.path("w.safetensors");
  std::string digest;
  ASSERT_OK(writeSafetensors(path, inputsOf(tensors), {{"producer", "test"}},
                             digest));
  std::string bytes = test::readBytes(path);
  EXPECT_EQ(digest, Sha256::hexDigest(bytes.data(), bytes.size()));

  std::unique_ptr<SafetensorsFile> file;
  ASSERT_OK(SafetensorsFile::open(path, file));
  EXPECT_EQ(file->metadata().at("producer"), "test");
  EXPECT_EQ(file->tensors().size(), tensors.size());
  for (const Owned &expected : tensors) {
    const Tensor *tensor = file->find(expected.name);
    ASSERT_NE(tensor, nullptr) << expected.name;
    EXPECT_EQ(tensor->dtype, expected.dtype);
    EXPECT_EQ(tensor->shape, expected.shape);
    ASSERT_EQ(tensor->byteSize(), expected.bytes.size());
    const auto *data = static_cast<const uint8_t *>(tensor->data);
    EXPECT_EQ(std::vector<uint8_t>(data, data + tensor->byteSize()),
              expected.bytes)
        << expected.name;
    auto address = reinterpret_cast<uintptr_t>(tensor->data);
    EXPECT_EQ(address % dtypeSize(expected.dtype), 0u) << expected.name;
    if (expected.bytes.size() % 64 == 0) {
      EXPECT_EQ(address % 64, 0u) << expected.name;
    }
  }
  EXPECT_EQ(file->find("absent"), nullptr);

  // The header is standard: data starts 64-byte aligned and the tensors
  // cover the data section without holes.
  uint64_t headerBytes;
  std::memcpy(&headerBytes, bytes.data(), 8);
  EXPECT_EQ((8 + headerBytes) % 64, 0u);
  auto header = nlohmann::json::parse(bytes.substr(8, headerBytes));
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__")
      ranges.emplace_back(it.value()["data_offsets"][0].get<uint64_t>(),
                          it.value()["data_offsets"][1].get<uint64_t>());
  std::sort(ranges.begin(), ranges.end());
  uint64_t next = 0;
  for (const auto &[begin, end] : ranges) {
    EXPECT_EQ(begin, next);
    next = end;
  }
  EXPECT_EQ(next, bytes.size() - 8 - headerBytes);
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
  test::TemporaryDirectory directory;
  std::string digest;
  float data[4] = {};
  EXPECT_ERROR_CONTAINS(
      writeSafetensors(directory.path("a"),
                       {{"x", program::F32, {2, 3}, data, sizeof(data)}}, {},
                       digest),
      "needs 24");
  EXPECT_ERROR_CONTAINS(
      writeSafetensors(directory.path("b"),
                       {{"x", program::F32, {4}, data, sizeof(data)},
                        {"x", program::F32, {4}, data, sizeof(data)}},
                       {}, digest),
      "appears twice");
}

/// Views written as views give the very file their materialized bytes give:
/// same header, same order, same bytes, same digest. One of them is larger
/// than the writer's 16 MiB buffer, so it is written in several pieces.
TEST(Safetensors, ViewsWriteWhatTheirCopiesWrite) {
  test::TemporaryDirectory directory;
  std::vector<float> matrix(2202 * 2048);
  for (size_t i = 0; i < matrix.size(); ++i)
    matrix[i] = float(i % 9973) * 0.25f - 7.0f;
  auto owner = std::make_shared<std::vector<float>>(std::move(matrix));
  WeightView whole =
      WeightView::of(owner->data(), owner->size() * 4, program::F32,
                     {2202, 2048}, std::shared_ptr<const void>(owner));
  std::vector<int64_t> swap(2048);
  for (int64_t j = 0; j < 2048; ++j)
    swap[size_t(j)] = (j + 1024) % 2048;
  int64_t ids[5] = {3, 1, 4, 1, 5};
  std::vector<std::pair<std::string, WeightView>> views = {
      {"whole", whole},
      {"columns", whole.block(1, 8, 3)},
      {"swapped", whole.permute(1, swap)},
      {"bf16", whole.slice(0, 7, 1000).convert(program::BF16)},
      {"f16", whole.block(0, 3, 2).block(1, 4, 1).convert(program::F16)},
      {"odd", whole.slice(0, 1, 3).slice(1, 5, 3).convert(program::BF16)},
      {"ids", WeightView::of(ids, sizeof(ids), program::I64, {5}, nullptr)},
      {"empty", whole.slice(1, 9, 0)},
      {"scalar", WeightView::of(ids, 8, program::I64, {}, nullptr)}};
  std::vector<SafetensorsInput> asViews, asBytes;
  std::vector<std::vector<uint8_t>> copies;
  for (const auto &[name, view] : views) {
    ASSERT_TRUE(view.valid()) << name;
    asViews.push_back(SafetensorsInput::of(name, view));
    copies.emplace_back(view.byteSize());
    view.copyTo(copies.back().data());
  }
  EXPECT_GT(asViews[2].bytes, size_t(16) << 20);
  for (size_t i = 0; i < views.size(); ++i)
    asBytes.push_back({views[i].first, views[i].second.dtype(),
                       views[i].second.shape(), copies[i].data(),
                       copies[i].size()});
  std::string viewDigest, byteDigest;
  ASSERT_OK(writeSafetensors(directory.path("views"), asViews,
                             {{"producer", "test"}}, viewDigest));
  ASSERT_OK(writeSafetensors(directory.path("bytes"), asBytes,
                             {{"producer", "test"}}, byteDigest));
  std::string written = test::readBytes(directory.path("views"));
  EXPECT_TRUE(written == test::readBytes(directory.path("bytes")));
  EXPECT_EQ(viewDigest, byteDigest);
  EXPECT_EQ(viewDigest, Sha256::hexDigest(written.data(), written.size()));

  std::unique_ptr<SafetensorsFile> file;
  ASSERT_OK(SafetensorsFile::open(directory.path("views"), file));
  for (size_t i = 0; i < views.size(); ++i) {
    const Tensor *tensor = file->find(views[i].first);
    ASSERT_NE(tensor, nullptr);
    EXPECT_EQ(tensor->shape, views[i].second.shape());
    EXPECT_EQ(tensor->dtype, views[i].second.dtype());
    ASSERT_EQ(tensor->byteSize(), copies[i].size());
    // An empty tensor may have no data pointer, which memcmp must not get.
    if (!copies[i].empty()) {
      EXPECT_EQ(std::memcmp(tensor->data, copies[i].data(), copies[i].size()),
                0)
          << views[i].first;
    }
  }
}

TEST(Safetensors, WriterRefusesViewsThatDisagreeWithTheirDeclaration) {
  test::TemporaryDirectory directory;
  float data[6] = {};
  WeightView view =
      WeightView::of(data, sizeof(data), program::F32, {2, 3}, nullptr);
  SafetensorsInput input = SafetensorsInput::of("x", view);
  input.shape = {3, 2};
  std::string digest;
  EXPECT_ERROR_CONTAINS(
      writeSafetensors(directory.path("a"), {input}, {}, digest),
      "tensor 'x' is declared f32 [3, 2], but its view is f32 [2, 3]");
  input = SafetensorsInput::of("x", view.convert(program::BF16));
  input.bytes = 24;
  EXPECT_ERROR_CONTAINS(
      writeSafetensors(directory.path("b"), {input}, {}, digest),
      "has 24 bytes, its shape [2, 3] needs 12");
  EXPECT_ERROR_CONTAINS(writeSafetensors(directory.path("c"),
                                         {{"x", program::F32, {2}, nullptr, 8}},
                                         {}, digest),
                        "tensor 'x' has no data");
}

/// Resident kilobytes of the mapping that holds `address`
/// (/proc/self/smaps), or -1 when there is none.
long residentKiB(const void *address) {
  std::ifstream smaps("/proc/self/smaps");
  uintptr_t at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin, end;
    char dash;
    std::istringstream fields(line);
    if (line.find(':') > line.find(' ') &&
        fields >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
      continue;
    }
    if (inside && line.rfind("Rss:", 0) == 0)
      return std::stol(line.substr(4));
  }
  return -1;
}

/// Writes `bytes` to a new file at `path` and maps it read-only, registered
/// as a file mapping (as the ONNX reader maps a model's data); null on
/// failure.
std::shared_ptr<const void> mapNewFile(const std::string &path,
                                       const std::string &bytes) {
  test::writeBytes(path, bytes);
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return nullptr;
  size_t size = bytes.size();
  void *mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED)
    return nullptr;
  registerFileMapping(mapped, size);
  return std::shared_ptr<const void>(mapped, [size](const void *p) {
    unregisterFileMapping(p);
    ::munmap(const_cast<void *>(p), size);
  });
}

/// After a view of a file mapping is written, the mapping's pages are no
/// longer resident in this process (the writer drops them, so writing a
/// model does not make it resident); its bytes still read back intact.
TEST(Safetensors, WritingDropsFileMappedSourcePages) {
  test::TemporaryDirectory directory;
  constexpr size_t kBytes = 8u << 20;
  std::string bytes(kBytes, '\0');
  for (size_t i = 0; i < kBytes; ++i)
    bytes[i] = char(i * 31 + i / 4096);
  std::shared_ptr<const void> mapping =
      mapNewFile(directory.path("source"), bytes);
  ASSERT_NE(mapping, nullptr);
  const void *mapped = mapping.get();
  // Touch every page: all of it resident.
  EXPECT_EQ(std::memcmp(mapped, bytes.data(), kBytes), 0);
  ASSERT_GE(residentKiB(mapped), long(kBytes >> 10));

  WeightView view =
      WeightView::of(mapped, kBytes, program::F32, {1024, 2048}, mapping);
  ASSERT_TRUE(view.isFileMapped());
  std::string digest;
  ASSERT_OK(
      writeSafetensors(directory.path("out"),
                       {SafetensorsInput::of("block", view.block(1, 2, 1)),
                        SafetensorsInput::of("whole", view)},
                       {}, digest));
  EXPECT_LE(residentKiB(mapped), 8);

  std::unique_ptr<SafetensorsFile> file;
  ASSERT_OK(SafetensorsFile::open(directory.path("out"), file));
  EXPECT_EQ(std::memcmp(file->find("whole")->data, bytes.data(), kBytes), 0);
  std::vector<uint8_t> block(kBytes / 2);
  view.block(1, 2, 1).copyTo(block.data());
  EXPECT_EQ(std::memcmp(file->find("block")->data, block.data(), block.size()),
            0);
  // Dropped pages read again from the file.
  EXPECT_EQ(std::memcmp(mapped, bytes.data(), kBytes), 0);
}

/// Several files written in one sweep (as an artifact's ranks are), in
/// windows small enough that the sweep takes many steps and files wait on
/// each other, are byte for byte the files writeSafetensors writes alone:
/// ranks' column blocks of shared file-mapped sources, a pipeline-like file
/// of its own sources, heap tensors, an empty file, and tensors whose data
/// order differs from their sources' order.
TEST(Safetensors, FilesWrittenInOneSweepEqualFilesWrittenAlone) {
  test::TemporaryDirectory directory;
  constexpr int64_t kRows = 64, kColumns = 1024;
  constexpr size_t kMatrixBytes = kRows * kColumns * 4;
  std::string bytes(6 * kMatrixBytes, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = char(i * 29 + i / 4093);
  std::shared_ptr<const void> mapping =
      mapNewFile(directory.path("model.data"), bytes);
  ASSERT_NE(mapping, nullptr);
  auto matrix = [&](int index) {
    return WeightView::of(
        static_cast<const char *>(mapping.get()) + index * kMatrixBytes,
        kMatrixBytes, program::F32, {kRows, kColumns}, mapping);
  };
  std::vector<Owned> heap = {makeTensor("bias", program::F32, {3}, 5)};

  std::vector<SafetensorsFileSpec> specs;
  for (int rank = 0; rank < 4; ++rank) {
    SafetensorsFileSpec spec{directory.path("rank" + std::to_string(rank)),
                             {},
                             {{"producer", "test"}}};
    // Listed last to first: the sweep still reads sources in address order.
    for (int m = 3; m >= 0; --m)
      spec.tensors.push_back(SafetensorsInput::of(
          "m" + std::to_string(m),
          matrix(m)
              .block(1, 4, rank)
              .convert(rank % 2 ? program::BF16 : program::F32)));
    spec.tensors.push_back(inputsOf(heap).front());
    specs.push_back(std::move(spec));
  }
  specs.push_back({directory.path("stage"),
                   {SafetensorsInput::of("m4", matrix(4)),
                    SafetensorsInput::of("m5", matrix(5).block(0, 2, 1))},
                   {}});
  specs.push_back({directory.path("empty"), {}, {}});

  std::vector<std::string> digests;
  ASSERT_OK(writeSafetensorsFiles(specs, digests, /*windowBytes=*/40000));
  ASSERT_EQ(digests.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string alone = directory.path("alone" + std::to_string(i));
    std::string digest;
    ASSERT_OK(
        writeSafetensors(alone, specs[i].tensors, specs[i].metadata, digest));
    std::string written = test::readBytes(specs[i].path);
    EXPECT_TRUE(written == test::readBytes(alone)) << specs[i].path;
    EXPECT_EQ(digests[i], digest) << specs[i].path;
    EXPECT_EQ(digests[i], Sha256::hexDigest(written.data(), written.size()));
  }
  std::unique_ptr<SafetensorsFile> file;
  ASSERT_OK(SafetensorsFile::open(specs[2].path, file));
  std::vector<uint8_t> expected(kMatrixBytes / 4);
  matrix(1).block(1, 4, 2).copyTo(expected.data());
  ASSERT_NE(file->find("m1"), nullptr);
  EXPECT_EQ(
      std::memcmp(file->find("m1")->data, expected.data(), expected.size()), 0);
}

/// The first error in file order is returned, whichever file a thread
/// reached first.
TEST(Safetensors, FilesWrittenInOneSweepReportTheFirstFailingFile) {
  test::TemporaryDirectory directory;
  Owned a = makeTensor("a", program::F32, {4096}, 1);
  test::writeBytes(directory.path("second"), "taken");
  test::writeBytes(directory.path("third"), "taken");
  std::vector<std::string> digests;
  Status status =
      writeSafetensorsFiles({{directory.path("first"), inputsOf({a}), {}},
                             {directory.path("second"), inputsOf({a}), {}},
                             {directory.path("third"), inputsOf({a}), {}}},
                            digests, /*windowBytes=*/1024);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find(directory.path("second")), std::string::npos)
      << status.message();
  EXPECT_TRUE(digests.empty());
}

/// Heap memory is never dropped: there, madvise(MADV_DONTNEED) would zero
/// the bytes.
TEST(Safetensors, WritingKeepsHeapSources) {
  test::TemporaryDirectory directory;
  std::vector<uint8_t> heap(4u << 20);
  for (size_t i = 0; i < heap.size(); ++i)
    heap[i] = uint8_t(i * 13 + 1);
  std::vector<uint8_t> expected = heap;
  WeightView view = WeightView::of(heap.data(), heap.size(), program::I8,
                                   {int64_t(heap.size())}, nullptr);
  std::string digest;
  ASSERT_OK(writeSafetensors(
      directory.path("out"),
      {SafetensorsInput::of("heap", view),
       SafetensorsInput::of("part", view.slice(0, 4096, 1 << 20))},
      {}, digest));
  EXPECT_TRUE(heap == expected);
}

struct MalformedCase {
  const char *what;
  std::string file;
  const char *message;
};

TEST(Safetensors, RefusesMalformedFiles) {
  const std::string f32 = R"("dtype":"F32","shape":[2],"data_offsets":)";
  std::vector<MalformedCase> cases = {
      {"short", "abc", "truncated safetensors file"},
      {"length", std::string("\xff\xff\xff\xff\x00\x00\x00\x00{}", 10),
       "exceeds the file"},
      {"json", rawFile("{not json", 0), "not a JSON object"},
      {"array", rawFile("[1, 2]", 0), "not a JSON object"},
      {"entry", rawFile(R"({"t": 3})", 0), "tensor 't': not a JSON object"},
      {"dtype", rawFile(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8),
       "no 'dtype'"},
      {"f64",
       rawFile(R"({"t":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8),
       "dtype 'F64' is not one Partita reads"},
      {"shape",
       rawFile(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "'shape' is not a list of sizes"},
      {"overflow",
       rawFile(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],)"
               R"("data_offsets":[0,8]}})",
               8),
       "not a list of sizes"},
      {"offsets", rawFile("{\"t\":{" + f32 + "[0]}}", 8),
       "no 'data_offsets' pair"},
      {"bounds", rawFile("{\"t\":{" + f32 + "[8,16]}}", 8),
       "lie outside the data section (8 bytes)"},
      {"reversed", rawFile("{\"t\":{" + f32 + "[8,0]}}", 8),
       "lie outside the data section"},
      {"size", rawFile("{\"t\":{" + f32 + "[0,4]}}", 8), "f32 [2] needs 8"},
      {"aligned",
       rawFile("{\"t\":{" + f32 +
                   "[1,9]}, \"pad\":{\"dtype\":\"I8\","
                   "\"shape\":[1],\"data_offsets\":[0,1]}}",
               9),
       "not aligned"},
      {"metadata", rawFile(R"({"__metadata__":{"k":1}})", 0),
       "'__metadata__' value 'k' is not a string"},
      {"utf8", rawFile("{\"\xff\":{}}", 0), "not a JSON object"},
      // The tensors tile the data section: one weight must not read
      // another's bytes, and no byte belongs to none.
      {"overlap",
       rawFile("{\"t\":{" + f32 + "[0,8]},\"u\":{" + f32 + "[4,12]}}", 12),
       "the data_offsets of tensors 't' [0, 8] and 'u' [4, 12] overlap"},
      {"same",
       rawFile("{\"t\":{" + f32 + "[0,8]},\"u\":{" + f32 + "[0,8]}}", 8),
       "the data_offsets of tensors 't' [0, 8] and 'u' [0, 8] overlap"},
      {"hole",
       rawFile("{\"t\":{" + f32 + "[0,8]},\"u\":{" + f32 + "[16,24]}}", 24),
       "bytes [8, 16) of the data section belong to no tensor (before 'u' "
       "[16, 24])"},
      {"trailing", rawFile("{\"t\":{" + f32 + "[0,8]}}", 16),
       "bytes [8, 16) of the data section belong to no tensor"},
      // JSON keeps the last of two equal keys; the first must not vanish.
      {"twice",
       rawFile("{\"t\":{" + f32 + "[0,8]},\"t\":{" + f32 + "[8,16]}}", 16),
       "tensor 't' appears twice in the header"},
  };
  test::TemporaryDirectory directory;
  for (const MalformedCase &c : cases) {
    std::string path = directory.path(c.what);
    test::writeBytes(path, c.file);
    std::unique_ptr<SafetensorsFile> file;
    Status status = SafetensorsFile::open(path, file);
    EXPECT_FALSE(status.isOk()) << c.what;
    EXPECT_NE(status.message().find(c.message), std::string::npos)
        << c.what << ": " << status.message();
    EXPECT_NE(status.message().find(path), std::string::npos) << c.what;
  }
}

} // namespace
