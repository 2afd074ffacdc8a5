//===- Safetensors.cpp - weights files of an artifact ---------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Safetensors.h"

#include "FileUtil.h"
#include "partita/runtime/Sha256.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <exception>
#include <set>
#include <sys/mman.h>
#include <unistd.h>
#include <unordered_map>

using namespace partita::runtime;
namespace program = partita::program;
using json = nlohmann::json;

namespace {

/// Tensor data starts on this boundary in the file; see writeSafetensors.
constexpr size_t kDataAlignment = 64;
/// Larger headers are refused: no honest file needs them, and parsing a
/// huge one costs memory before any check could fail.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
/// The writer's buffer: large enough that write(2) and SHA-256 run at full
/// speed, small enough that a thread per file costs little memory.
constexpr size_t kWriteChunkBytes = 16u << 20;

struct DTypeSpelling {
  DType dtype;
  const char *name;
  size_t bytes;
};

constexpr DTypeSpelling kSpellings[] = {
    {program::F32, "F32", 4},   {program::F16, "F16", 2},
    {program::BF16, "BF16", 2}, {program::I64, "I64", 8},
    {program::I32, "I32", 4},   {program::I8, "I8", 1},
    {program::BOOL, "BOOL", 1}};

size_t elementBytes(DType dtype) {
  for (const DTypeSpelling &spelling : kSpellings)
    if (spelling.dtype == dtype)
      return spelling.bytes;
  return 0;
}

void putLittleEndian64(uint64_t value, uint8_t *out) {
  for (int i = 0; i < 8; ++i)
    out[i] = uint8_t(value >> (8 * i));
}

uint64_t getLittleEndian64(const uint8_t *in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= uint64_t(in[i]) << (8 * i);
  return value;
}

/// Data order: tensors whose size is a multiple of 64 bytes first (each then
/// starts 64-byte aligned), the others by decreasing element size (each then
/// starts aligned to its element size). The data section has no holes, which
/// the reference safetensors implementation requires.
std::vector<size_t> dataOrder(const std::vector<WeightView> &tensors) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    bool aWhole = tensors[a].byteSize() % kDataAlignment == 0;
    bool bWhole = tensors[b].byteSize() % kDataAlignment == 0;
    if (aWhole != bWhole)
      return aWhole;
    if (aWhole)
      return false;
    return elementBytes(tensors[a].dtype()) > elementBytes(tensors[b].dtype());
  });
  return order;
}

/// The view `tensor` writes: its own, or one of its raw bytes. An error
/// names what does not fit together.
Status viewOf(const std::string &path, const SafetensorsInput &tensor,
              WeightView &view) {
  std::string where = path + ": tensor '" + tensor.name + "'";
  if (tensor.name.empty() || tensor.name == "__metadata__")
    return Status::error(path + ": invalid tensor name '" + tensor.name + "'");
  size_t elementSize = elementBytes(tensor.dtype);
  if (elementSize == 0)
    return Status::error(where + " has no safetensors dtype");
  uint64_t elements = 1;
  for (int64_t dim : tensor.shape)
    if (dim < 0 || __builtin_mul_overflow(elements, uint64_t(dim), &elements))
      return Status::error(where + " has an invalid shape " +
                           shapeString(tensor.shape));
  uint64_t needed;
  if (__builtin_mul_overflow(elements, uint64_t(elementSize), &needed) ||
      needed != tensor.bytes)
    return Status::error(where + " has " + std::to_string(tensor.bytes) +
                         " bytes, its shape " + shapeString(tensor.shape) +
                         " needs " + std::to_string(elements * elementSize));
  if (tensor.view.valid()) {
    if (tensor.view.dtype() != tensor.dtype ||
        tensor.view.shape() != tensor.shape)
      return Status::error(where + " is declared " + dtypeName(tensor.dtype) +
                           " " + shapeString(tensor.shape) +
                           ", but its view is " +
                           dtypeName(tensor.view.dtype()) + " " +
                           shapeString(tensor.view.shape()));
    view = tensor.view;
    return Status::ok();
  }
  if (tensor.bytes > 0 && !tensor.data)
    return Status::error(where + " has no data");
  view = WeightView::of(tensor.data, tensor.bytes, tensor.dtype, tensor.shape,
                        nullptr);
  return Status::ok();
}

/// Drops the pages of `view`'s source from this process's resident set once
/// they have been copied: the mapping is a read-only map of a file, so a
/// later read faults them in again from the page cache, and nothing is lost.
/// Only whole pages inside the source are dropped; a neighbouring tensor's
/// bytes on its edge pages stay.
void dropSourcePages(const WeightView &view) {
  if (!view.isFileMapped() || view.sourceBytes() == 0)
    return;
  static const uintptr_t pageBytes = uintptr_t(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(view.sourceData());
  uintptr_t end = begin + view.sourceBytes();
  begin = (begin + pageBytes - 1) / pageBytes * pageBytes;
  end = end / pageBytes * pageBytes;
  // Advice only: a failure costs memory, not correctness.
  if (begin < end)
    (void)::madvise(reinterpret_cast<void *>(begin), end - begin,
                    MADV_DONTNEED);
}

Status
writeSafetensorsOrThrow(const std::string &path,
                        const std::vector<SafetensorsInput> &tensors,
                        const std::map<std::string, std::string> &metadata,
                        std::string &sha256Hex) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto &[key, value] : metadata)
      meta[key] = value;
    header["__metadata__"] = meta;
  }
  std::vector<WeightView> views(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    PARTITA_RETURN_IF_ERROR(viewOf(path, tensors[i], views[i]));
  std::vector<size_t> order = dataOrder(views);
  uint64_t offset = 0;
  for (size_t index : order) {
    const SafetensorsInput &tensor = tensors[index];
    if (header.contains(tensor.name))
      return Status::error(path + ": tensor '" + tensor.name +
                           "' appears twice");
    uint64_t bytes = views[index].byteSize();
    header[tensor.name] = {{"dtype", safetensorsDTypeName(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }

  // Spaces after the JSON text are valid JSON whitespace: they pad the header
  // so the data section starts 64-byte aligned in the file.
  std::string text = header.dump();
  size_t unaligned = (8 + text.size()) % kDataAlignment;
  if (unaligned != 0)
    text.append(kDataAlignment - unaligned, ' ');
  std::string prefix(8, '\0');
  putLittleEndian64(text.size(), reinterpret_cast<uint8_t *>(&prefix[0]));
  prefix += text;

  Sha256 sha;
  OutputFile file;
  PARTITA_RETURN_IF_ERROR(file.create(path));
  sha.update(prefix.data(), prefix.size());
  PARTITA_RETURN_IF_ERROR(file.write(prefix.data(), prefix.size()));
  // Each piece is hashed and written while it is in cache; memory stays one
  // piece, whatever the tensors' sizes.
  WeightViewReader reader(kWriteChunkBytes);
  for (size_t index : order) {
    const WeightView &view = views[index];
    reader.reset(view);
    size_t bytes;
    while (const void *piece = reader.next(bytes)) {
      sha.update(piece, bytes);
      PARTITA_RETURN_IF_ERROR(file.write(piece, bytes));
    }
    dropSourcePages(view);
  }
  PARTITA_RETURN_IF_ERROR(file.close());
  sha256Hex = Sha256::hex(sha.finish());
  return Status::ok();
}

} // namespace

std::string partita::runtime::safetensorsDTypeName(DType dtype) {
  for (const DTypeSpelling &spelling : kSpellings)
    if (spelling.dtype == dtype)
      return spelling.name;
  return "";
}

DType partita::runtime::dtypeFromSafetensorsName(const std::string &name) {
  for (const DTypeSpelling &spelling : kSpellings)
    if (name == spelling.name)
      return spelling.dtype;
  return program::DTYPE_UNSPECIFIED;
}

SafetensorsInput SafetensorsInput::of(std::string name, WeightView view) {
  SafetensorsInput input;
  input.name = std::move(name);
  input.dtype = view.dtype();
  input.shape = view.shape();
  input.bytes = view.byteSize();
  input.view = std::move(view);
  return input;
}

Status partita::runtime::writeSafetensors(
    const std::string &path, const std::vector<SafetensorsInput> &tensors,
    const std::map<std::string, std::string> &metadata,
    std::string &sha256Hex) {
  try {
    return writeSafetensorsOrThrow(path, tensors, metadata, sha256Hex);
  } catch (const std::exception &e) {
    return Status::error(path + ": " + e.what());
  }
}

//===----------------------------------------------------------------------===//
// SafetensorsFile
//===----------------------------------------------------------------------===//

struct SafetensorsFile::Impl {
  MappedFile mapping;
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::unordered_map<std::string, size_t> byName;
  std::map<std::string, std::string> metadata;

  Status parse(const std::string &path);
  Status checkLayout(const std::string &path, uint64_t dataBytes) const;
  Status parseEntry(const std::string &path, const std::string &name,
                    const json &entry, const uint8_t *dataStart,
                    uint64_t dataBytes);
};

Status SafetensorsFile::Impl::parseEntry(const std::string &path,
                                         const std::string &name,
                                         const json &entry,
                                         const uint8_t *dataStart,
                                         uint64_t dataBytes) {
  std::string where = path + ": tensor '" + name + "'";
  if (!entry.is_object())
    return Status::error(where + ": not a JSON object");
  auto dtypeField = entry.find("dtype");
  if (dtypeField == entry.end() || !dtypeField->is_string())
    return Status::error(where + ": no 'dtype' string");
  DType dtype = dtypeFromSafetensorsName(dtypeField->get<std::string>());
  if (dtype == program::DTYPE_UNSPECIFIED)
    return Status::error(where + ": dtype '" + dtypeField->get<std::string>() +
                         "' is not one Partita reads (F32 F16 BF16 I64 I32 I8 "
                         "BOOL)");
  auto shapeField = entry.find("shape");
  if (shapeField == entry.end() || !shapeField->is_array())
    return Status::error(where + ": no 'shape' array");
  std::vector<int64_t> shape;
  uint64_t elements = 1;
  for (const json &dim : *shapeField) {
    if (!dim.is_number_unsigned() ||
        dim.get<uint64_t>() > uint64_t(INT64_MAX) ||
        __builtin_mul_overflow(elements, dim.get<uint64_t>(), &elements))
      return Status::error(where + ": 'shape' is not a list of sizes");
    shape.push_back(int64_t(dim.get<uint64_t>()));
  }
  auto offsetsField = entry.find("data_offsets");
  if (offsetsField == entry.end() || !offsetsField->is_array() ||
      offsetsField->size() != 2 || !(*offsetsField)[0].is_number_unsigned() ||
      !(*offsetsField)[1].is_number_unsigned())
    return Status::error(where + ": no 'data_offsets' pair");
  uint64_t begin = (*offsetsField)[0].get<uint64_t>();
  uint64_t end = (*offsetsField)[1].get<uint64_t>();
  size_t elementSize = elementBytes(dtype);
  uint64_t bytes;
  if (__builtin_mul_overflow(elements, uint64_t(elementSize), &bytes))
    return Status::error(where + ": shape " + shapeString(shape) +
                         " is too large");
  if (begin > end || end > dataBytes)
    return Status::error(where + ": data_offsets [" + std::to_string(begin) +
                         ", " + std::to_string(end) +
                         "] lie outside the data section (" +
                         std::to_string(dataBytes) + " bytes)");
  if (end - begin != bytes)
    return Status::error(where + ": data_offsets [" + std::to_string(begin) +
                         ", " + std::to_string(end) + "] hold " +
                         std::to_string(end - begin) + " bytes, " +
                         dtypeName(dtype) + " " + shapeString(shape) +
                         " needs " + std::to_string(bytes));
  const uint8_t *data = dataStart + begin;
  if (reinterpret_cast<uintptr_t>(data) % elementSize != 0)
    return Status::error(where + ": data is not aligned to its " +
                         std::to_string(elementSize) + "-byte elements");
  Tensor tensor;
  // Read-only mapping: the runtime never writes weights.
  tensor.data = const_cast<uint8_t *>(data);
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  byName[name] = tensors.size();
  tensors.emplace_back(name, std::move(tensor));
  return Status::ok();
}

Status SafetensorsFile::Impl::parse(const std::string &path) {
  PARTITA_RETURN_IF_ERROR(mapping.open(path));
  size_t fileSize = mapping.size();
  if (fileSize < 8)
    return Status::error(path + ": truncated safetensors file (" +
                         std::to_string(fileSize) + " bytes)");
  uint64_t headerBytes = getLittleEndian64(mapping.data());
  if (headerBytes > fileSize - 8)
    return Status::error(path + ": header length " +
                         std::to_string(headerBytes) + " exceeds the file (" +
                         std::to_string(fileSize) + " bytes)");
  if (headerBytes > kMaxHeaderBytes)
    return Status::error(path + ": header length " +
                         std::to_string(headerBytes) + " is implausibly large");
  const char *text = reinterpret_cast<const char *>(mapping.data() + 8);
  // JSON keeps the last of two equal keys: catch a name given twice here,
  // before it silently replaces the first.
  std::set<std::string> names;
  std::string duplicate;
  json::parser_callback_t noteNames = [&](int depth, json::parse_event_t event,
                                          json &parsed) {
    if (depth == 1 && event == json::parse_event_t::key &&
        !names.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header = json::parse(text, text + headerBytes, noteNames,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return Status::error(path + ": the header is not a JSON object");
  if (!duplicate.empty())
    return Status::error(path + ": tensor '" + duplicate +
                         "' appears twice in the header");
  const uint8_t *dataStart = mapping.data() + 8 + headerBytes;
  uint64_t dataBytes = fileSize - 8 - headerBytes;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() != "__metadata__") {
      PARTITA_RETURN_IF_ERROR(
          parseEntry(path, it.key(), it.value(), dataStart, dataBytes));
      continue;
    }
    if (!it.value().is_object())
      return Status::error(path + ": '__metadata__' is not a JSON object");
    for (auto field = it.value().begin(); field != it.value().end(); ++field) {
      if (!field.value().is_string())
        return Status::error(path + ": '__metadata__' value '" + field.key() +
                             "' is not a string");
      metadata[field.key()] = field.value().get<std::string>();
    }
  }
  return checkLayout(path, dataBytes);
}

Status SafetensorsFile::Impl::checkLayout(const std::string &path,
                                          uint64_t dataBytes) const {
  // The tensors tile the data section: no two share a byte (a tampered
  // header could make one weight read another's data), and, as the
  // reference implementation requires, no byte lies outside every tensor.
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, size_t>> ranges;
  const uint8_t *start = mapping.data() + (mapping.size() - dataBytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor &tensor = tensors[i].second;
    uint64_t begin =
        uint64_t(static_cast<const uint8_t *>(tensor.data) - start);
    ranges.push_back({{begin, begin + tensor.byteSize()}, i});
  }
  std::sort(ranges.begin(), ranges.end());
  auto describe = [&](size_t at) {
    const auto &[range, index] = ranges[at];
    return "'" + tensors[index].first + "' [" + std::to_string(range.first) +
           ", " + std::to_string(range.second) + "]";
  };
  uint64_t covered = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    uint64_t begin = ranges[i].first.first, end = ranges[i].first.second;
    if (begin < covered)
      return Status::error(path + ": the data_offsets of tensors " +
                           describe(i - 1) + " and " + describe(i) +
                           " overlap");
    if (begin > covered)
      return Status::error(
          path + ": bytes [" + std::to_string(covered) + ", " +
          std::to_string(begin) +
          ") of the data section belong to no tensor (before " + describe(i) +
          ")");
    covered = end;
  }
  if (covered != dataBytes)
    return Status::error(path + ": bytes [" + std::to_string(covered) + ", " +
                         std::to_string(dataBytes) +
                         ") of the data section belong to no tensor");
  return Status::ok();
}

SafetensorsFile::SafetensorsFile() : impl(std::make_unique<Impl>()) {}
SafetensorsFile::~SafetensorsFile() = default;

Status SafetensorsFile::open(const std::string &path,
                             std::unique_ptr<SafetensorsFile> &file) {
  std::unique_ptr<SafetensorsFile> opened(new SafetensorsFile());
  try {
    PARTITA_RETURN_IF_ERROR(opened->impl->parse(path));
  } catch (const std::exception &e) {
    return Status::error(path + ": malformed header: " + e.what());
  }
  file = std::move(opened);
  return Status::ok();
}

const std::vector<std::pair<std::string, Tensor>> &
SafetensorsFile::tensors() const {
  return impl->tensors;
}

const Tensor *SafetensorsFile::find(const std::string &name) const {
  auto it = impl->byName.find(name);
  return it == impl->byName.end() ? nullptr : &impl->tensors[it->second].second;
}

const std::map<std::string, std::string> &SafetensorsFile::metadata() const {
  return impl->metadata;
}
