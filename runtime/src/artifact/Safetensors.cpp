//===- Safetensors.cpp - weights files of an artifact ---------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Safetensors.h"

#include "partita/runtime/FileUtil.h"
#include "partita/runtime/JsonDepth.h"
#include "partita/runtime/Sha256.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
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

/// A file prepared for writing: its tensors' views in data order and the
/// header that names their byte ranges, then the state of its writing.
struct PreparedFile {
  std::string path;
  std::vector<WeightView> views;
  /// Data order: indices into `views`.
  std::vector<size_t> order;
  /// The scheduling window of each position of `order`; never decreasing.
  std::vector<size_t> windowOf;
  /// The length, the header and its padding.
  std::string prefix;

  OutputFile out;
  Sha256 sha;
  /// The first position of `order` not written yet.
  size_t next = 0;
  bool busy = false;
  bool done = false;
  Status status;
  std::string digest;
};

Status prepareFile(const SafetensorsFileSpec &spec, PreparedFile &file) {
  const std::string &path = spec.path;
  file.path = path;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!spec.metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto &[key, value] : spec.metadata)
      meta[key] = value;
    header["__metadata__"] = meta;
  }
  file.views.resize(spec.tensors.size());
  for (size_t i = 0; i < spec.tensors.size(); ++i)
    PARTITA_RETURN_IF_ERROR(viewOf(path, spec.tensors[i], file.views[i]));
  file.order = dataOrder(file.views);
  uint64_t offset = 0;
  for (size_t index : file.order) {
    const SafetensorsInput &tensor = spec.tensors[index];
    if (header.contains(tensor.name))
      return Status::error(path + ": tensor '" + tensor.name +
                           "' appears twice");
    uint64_t bytes = file.views[index].byteSize();
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
  file.prefix.assign(8, '\0');
  putLittleEndian64(text.size(), reinterpret_cast<uint8_t *>(&file.prefix[0]));
  file.prefix += text;
  return Status::ok();
}

/// How many windows past the lowest one still being written a file may
/// start: the sources being read at once stay a few GiB (page cache), while
/// files that read different sources still proceed in parallel.
constexpr size_t kLookaheadWindows = 8;
/// How many windows past the lowest one still being written are prefetched.
constexpr size_t kPrefetchWindows = 2;
/// The prefetcher asks for this much at a time: the kernel reads at most
/// its readahead size (read_ahead_kb) per request.
constexpr uintptr_t kPrefetchChunkBytes = 4u << 20;

/// The file-mapped ranges a window reads.
using Window = std::vector<std::pair<const void *, uint64_t>>;

/// Asks the kernel to read a window's file-mapped sources into the page
/// cache (advice: the copy faults in whatever this did not read).
void prefetch(const Window &window) {
  static const uintptr_t pageBytes = uintptr_t(::sysconf(_SC_PAGESIZE));
  for (auto [data, bytes] : window) {
    uintptr_t begin = reinterpret_cast<uintptr_t>(data) / pageBytes * pageBytes;
    uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
    for (uintptr_t at = begin; at < end; at += kPrefetchChunkBytes)
      (void)::madvise(reinterpret_cast<void *>(at),
                      std::min(kPrefetchChunkBytes, end - at), MADV_WILLNEED);
  }
}

/// Restores read-around on the mappings that `files` read from: the ONNX
/// reader maps a model for random access (import reads its graph, not its
/// weights), where a fault reads one page; the writer reads the weights
/// through, where a fault should read a readahead's worth.
void adviseSequentialReads(const std::vector<PreparedFile> &files) {
  std::set<std::pair<const void *, size_t>> mappings;
  for (const PreparedFile &file : files)
    for (const WeightView &view : file.views) {
      const void *begin;
      size_t bytes;
      if (view.isFileMapped() &&
          fileMappingOf(view.sourceData(), view.sourceBytes(), begin, bytes))
        mappings.insert({begin, bytes});
    }
  for (auto [begin, bytes] : mappings)
    (void)::madvise(const_cast<void *>(begin), bytes, MADV_NORMAL);
}

/// Numbers the distinct sources of every file's views by address, in
/// windows of `windowBytes`, and gives each position of each file's data
/// order its window (the largest so far, so a file's windows never go back).
std::vector<Window> assignWindows(std::vector<PreparedFile> &files,
                                  uint64_t windowBytes) {
  std::vector<std::pair<uintptr_t, const WeightView *>> sources;
  for (const PreparedFile &file : files)
    for (const WeightView &view : file.views)
      sources.push_back(
          {reinterpret_cast<uintptr_t>(view.sourceData()), &view});
  std::sort(sources.begin(), sources.end(),
            [](const auto &a, const auto &b) { return a.first < b.first; });
  std::map<uintptr_t, size_t> windowOfSource;
  std::vector<Window> windows;
  uint64_t offset = 0;
  for (auto [address, view] : sources) {
    if (windowOfSource.count(address))
      continue;
    size_t index = size_t(offset / windowBytes);
    if (windows.size() <= index)
      windows.resize(index + 1);
    windowOfSource[address] = index;
    if (view->isFileMapped())
      windows[index].push_back({view->sourceData(), view->sourceBytes()});
    offset += view->sourceBytes();
  }
  for (PreparedFile &file : files) {
    size_t window = 0;
    for (size_t index : file.order) {
      uintptr_t address =
          reinterpret_cast<uintptr_t>(file.views[index].sourceData());
      window = std::max(window, windowOfSource[address]);
      file.windowOf.push_back(window);
    }
  }
  return windows;
}

/// Writes the positions [file.next, end) of `file`'s data order (creating
/// the file and writing its header first, closing it after its last
/// tensor). Each piece is hashed and written while it is in cache; memory is
/// one piece of `reader`, whatever the tensors' sizes.
Status writeTask(PreparedFile &file, size_t end, WeightViewReader &reader) {
  if (file.next == 0) {
    PARTITA_RETURN_IF_ERROR(file.out.create(file.path));
    file.sha.update(file.prefix.data(), file.prefix.size());
    PARTITA_RETURN_IF_ERROR(
        file.out.write(file.prefix.data(), file.prefix.size()));
  }
  for (size_t position = file.next; position < end; ++position) {
    const WeightView &view = file.views[file.order[position]];
    reader.reset(view);
    size_t bytes;
    while (const void *piece = reader.next(bytes)) {
      file.sha.update(piece, bytes);
      PARTITA_RETURN_IF_ERROR(file.out.write(piece, bytes));
    }
    dropSourcePages(view);
  }
  if (end == file.order.size()) {
    PARTITA_RETURN_IF_ERROR(file.out.close());
    file.digest = Sha256::hex(file.sha.finish());
  }
  return Status::ok();
}

/// Writes every prepared file. A task is one file's tensors of one window;
/// each worker takes the ready task of the lowest window (a file's tasks in
/// order, one at a time), at most kLookaheadWindows past the lowest window
/// any unfinished file is at. Files that read the same sources (the ranks'
/// slices of a weight) therefore read them at about the same time. A
/// prefetcher thread keeps the sources of the next kPrefetchWindows windows
/// coming in from disk while the workers copy.
void writeScheduled(std::vector<PreparedFile> &files,
                    const std::vector<Window> &windows) {
  std::mutex mutex;
  std::condition_variable changed;
  // The lowest window an unfinished file is at; SIZE_MAX once all are done.
  size_t lowest = 0;
  auto updateLowest = [&] {
    size_t now = SIZE_MAX;
    for (const PreparedFile &file : files)
      if (!file.done)
        now = std::min(now, file.windowOf[file.next]);
    if (now != lowest) {
      lowest = now;
      changed.notify_all();
    }
  };
  auto worker = [&] {
    WeightViewReader reader(kWriteChunkBytes);
    std::unique_lock<std::mutex> lock(mutex);
    while (lowest != SIZE_MAX) {
      PreparedFile *pick = nullptr;
      for (PreparedFile &file : files)
        if (!file.done && !file.busy &&
            file.windowOf[file.next] <= lowest + kLookaheadWindows &&
            (!pick || file.windowOf[file.next] < pick->windowOf[pick->next]))
          pick = &file;
      if (!pick) {
        changed.wait(lock);
        continue;
      }
      PreparedFile &file = *pick;
      file.busy = true;
      size_t window = file.windowOf[file.next];
      size_t end = file.next;
      while (end < file.order.size() && file.windowOf[end] == window)
        ++end;
      lock.unlock();
      Status status;
      try {
        status = writeTask(file, end, reader);
      } catch (const std::exception &e) {
        status = Status::error(file.path + ": " + e.what());
      }
      lock.lock();
      file.busy = false;
      file.next = end;
      if (!status)
        file.status = std::move(status);
      file.done = !file.status || end == file.order.size();
      updateLowest();
      changed.notify_all();
    }
  };
  auto prefetcher = [&] {
    for (size_t window = 0; window < windows.size(); ++window) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        changed.wait(lock, [&] {
          return lowest == SIZE_MAX || window <= lowest + kPrefetchWindows;
        });
        if (lowest == SIZE_MAX)
          return;
      }
      prefetch(windows[window]);
    }
  };

  {
    std::lock_guard<std::mutex> lock(mutex);
    lowest = SIZE_MAX;
    updateLowest();
  }
  // Without the prefetcher (no thread for it), the copies fault the sources
  // in themselves.
  runOnCores(files.size(), worker, prefetcher);
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

Status partita::runtime::writeSafetensorsFiles(
    const std::vector<SafetensorsFileSpec> &specs,
    std::vector<std::string> &sha256Hex, uint64_t windowBytes) {
  sha256Hex.clear();
  std::vector<PreparedFile> files(specs.size());
  std::vector<Window> windows;
  for (size_t i = 0; i < specs.size(); ++i) {
    try {
      PARTITA_RETURN_IF_ERROR(prepareFile(specs[i], files[i]));
    } catch (const std::exception &e) {
      return Status::error(specs[i].path + ": " + e.what());
    }
  }
  try {
    windows = assignWindows(files, std::max<uint64_t>(windowBytes, 1));
    adviseSequentialReads(files);
  } catch (const std::exception &e) {
    return Status::error(std::string("cannot order the weights' sources: ") +
                         e.what());
  }
  // An empty file is written whole by its first task.
  for (PreparedFile &file : files)
    if (file.order.empty())
      file.windowOf.push_back(0);
  writeScheduled(files, windows);
  for (PreparedFile &file : files)
    if (!file.status)
      return file.status;
  for (PreparedFile &file : files)
    sha256Hex.push_back(file.digest);
  return Status::ok();
}

Status partita::runtime::writeSafetensors(
    const std::string &path, const std::vector<SafetensorsInput> &tensors,
    const std::map<std::string, std::string> &metadata,
    std::string &sha256Hex) {
  std::vector<std::string> digests;
  PARTITA_RETURN_IF_ERROR(
      writeSafetensorsFiles({{path, tensors, metadata}}, digests));
  sha256Hex = digests.front();
  return Status::ok();
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
  if (std::string deep = checkJsonDepth(
          std::string_view(text, static_cast<size_t>(headerBytes)),
          path + ": the header");
      !deep.empty())
    return Status::error(deep);
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
