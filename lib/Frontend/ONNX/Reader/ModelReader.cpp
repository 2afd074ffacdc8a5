//===- ModelReader.cpp - ONNX files into ModelProto -----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "ModelReader.h"

#include "onnx/defs/parser.h"
#include "partita/runtime/WeightView.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace partita::onnx_reader;

namespace {

/// Models up to protobuf's hard limit (2 GiB); larger ones use external data.
constexpr int kMaxProtobufBytes = INT_MAX;

bool parseBinary(google::protobuf::io::ZeroCopyInputStream &stream,
                 onnx::ModelProto &model, std::string &error) {
  google::protobuf::io::CodedInputStream coded(&stream);
  coded.SetTotalBytesLimit(kMaxProtobufBytes);
  if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
    error = "not a valid ONNX model: the protobuf is truncated or corrupt";
    return false;
  }
  return true;
}

bool parseText(const std::string &text, onnx::ModelProto &model,
               std::string &error) {
  try {
    onnx::Status status = onnx::OnnxParser::Parse(model, text.c_str());
    if (!status.IsOK()) {
      error = "invalid ONNX textual syntax: " + status.ErrorMessage();
      return false;
    }
  } catch (const std::exception &e) {
    error = std::string("invalid ONNX textual syntax: ") + e.what();
    return false;
  }
  return true;
}

/// ONNX's textual syntax starts with `<` after blanks and `#` comment
/// lines; a binary ModelProto starts with a field tag, never `<` or `#`.
bool startsAsText(const char *data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    char c = data[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
      continue;
    if (c == '#') {
      while (i < size && data[i] != '\n')
        ++i;
      continue;
    }
    return c == '<';
  }
  return false;
}

bool checkModel(onnx::ModelProto &model, std::string &error) {
  if (!model.has_graph()) {
    error = "not a valid ONNX model: it has no graph";
    return false;
  }
  return true;
}

} // namespace

bool partita::onnx_reader::readModelBuffer(const char *data, size_t size,
                                           onnx::ModelProto &model,
                                           std::string &error) {
  try {
    if (startsAsText(data, size)) {
      if (!parseText(std::string(data, size), model, error))
        return false;
    } else {
      if (size > static_cast<size_t>(kMaxProtobufBytes)) {
        error = "model is larger than 2 GiB; store its weights as external "
                "data";
        return false;
      }
      google::protobuf::io::ArrayInputStream stream(data,
                                                    static_cast<int>(size));
      if (!parseBinary(stream, model, error))
        return false;
    }
  } catch (const std::exception &e) {
    error = std::string("cannot parse the model: ") + e.what();
    return false;
  }
  return checkModel(model, error);
}

namespace {

/// Reads a file forward through a small buffer (pread), so walking the
/// graph between the weights neither maps nor caches the weights in this
/// process. Every read is bounds-checked against `limit`.
class FileCursor {
public:
  FileCursor(int fd, uint64_t size) : fd(fd), size(size) {}

  uint64_t position() const { return pos; }
  bool ok() const { return good; }

  bool byte(uint8_t &out) {
    if (pos >= size || !fill())
      return good = false;
    out = static_cast<uint8_t>(buffer[pos - bufferStart]);
    ++pos;
    return true;
  }

  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!byte(b))
        return 0;
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return value;
    }
    good = false;
    return 0;
  }

  /// Appends the bytes [from, position()) to `out`; they were just read.
  void copySince(uint64_t from, std::string &out) {
    while (from < pos) {
      if (from >= bufferStart && from < bufferStart + buffer.size()) {
        uint64_t n =
            std::min<uint64_t>(pos, bufferStart + buffer.size()) - from;
        out.append(buffer.data() + (from - bufferStart), n);
        from += n;
        continue;
      }
      char chunk[4096];
      uint64_t n = std::min<uint64_t>(sizeof(chunk), pos - from);
      if (::pread(fd, chunk, n, static_cast<off_t>(from)) !=
          static_cast<ssize_t>(n)) {
        good = false;
        return;
      }
      out.append(chunk, n);
      from += n;
    }
  }

  void skip(uint64_t n, uint64_t limit) {
    if (n > limit - pos) {
      good = false;
      pos = limit;
      return;
    }
    pos += n;
  }

private:
  bool fill() {
    if (pos >= bufferStart && pos < bufferStart + buffer.size())
      return true;
    buffer.resize(std::min<uint64_t>(kChunk, size - pos));
    ssize_t got =
        ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(pos));
    if (got != static_cast<ssize_t>(buffer.size()))
      return good = false;
    bufferStart = pos;
    return true;
  }

  static constexpr uint64_t kChunk = 1 << 16;
  int fd;
  uint64_t size;
  uint64_t pos = 0;
  uint64_t bufferStart = 0;
  std::string buffer;
  bool good = true;
};

void putVarint(std::string &out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

/// ModelProto.graph, GraphProto.initializer, TensorProto.raw_data.
constexpr unsigned kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;

/// Raw data up to this size is copied into the ModelProto, not mapped.
constexpr uint64_t kMappedMinBytes = 4096;

/// Copies the message ending at `limit` of nesting `level` (0 model, 1
/// graph, 2 initializer) into `out`, leaving out the initializers' raw_data
/// and recording where it lies in the file.
bool strip(FileCursor &in, uint64_t limit, int level, std::string &out,
           MappedInitializers &mapped) {
  while (in.ok() && in.position() < limit) {
    uint64_t fieldStart = in.position();
    uint64_t tag = in.varint();
    unsigned field = tag >> 3, wireType = tag & 7;
    uint64_t length = 0;
    switch (wireType) {
    case 0:
      in.varint();
      break;
    case 1:
      in.skip(8, limit);
      break;
    case 2:
      length = in.varint();
      break;
    case 5:
      in.skip(4, limit);
      break;
    default:
      return false; // Groups are not used by ONNX.
    }
    if (!in.ok() || in.position() > limit)
      return false;
    if (wireType != 2) {
      in.copySince(fieldStart, out);
      continue;
    }
    uint64_t valueStart = in.position();
    if (length > limit - valueStart)
      return false;
    // Small tensors (shape values, scalars) are read now, through the
    // cursor: touching them in the mapping would map the weights beside
    // them too (page cache folios are mapped whole).
    if (level == 2 && field == kTensorRawData && length > kMappedMinBytes) {
      MappedInitializers::Span &span = mapped.rawData.back();
      span.offset = valueStart;
      span.length = length;
      span.present = true;
      in.skip(length, limit);
      continue;
    }
    bool descend = (level == 0 && field == kModelGraph) ||
                   (level == 1 && field == kGraphInitializer);
    if (!descend) {
      in.skip(length, limit);
      in.copySince(fieldStart, out);
      continue;
    }
    if (level == 1)
      mapped.rawData.emplace_back();
    std::string inner;
    if (!strip(in, valueStart + length, level + 1, inner, mapped))
      return false;
    putVarint(out, tag);
    putVarint(out, inner.size());
    out += inner;
  }
  return in.ok();
}

} // namespace

bool MappedFile::map(int fd, const std::string &name,
                     std::shared_ptr<MappedFile> &file, std::string &error) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "'" + name + "' is not a regular file";
    return false;
  }
  file.reset(new MappedFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (st.st_size > 0) {
    void *addr = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                        MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      file.reset();
      error = "cannot map '" + name + "': " + std::strerror(errno);
      return false;
    }
    file->data_ = static_cast<const char *>(addr);
    // Import reads the graph between the weights and leaves the weights
    // alone: without read-around, touching a tensor's header does not map
    // the weights beside it.
    ::madvise(addr, static_cast<size_t>(st.st_size), MADV_RANDOM);
    // The artifact writer may drop a weight's pages once it has copied them.
    partita::runtime::registerFileMapping(addr,
                                          static_cast<size_t>(st.st_size));
  }
  return true;
}

bool partita::onnx_reader::readModelFile(const std::string &path,
                                         onnx::ModelProto &model,
                                         MappedInitializers &mapped,
                                         std::string &error) {
  // Opening a FIFO blocks until a writer comes; look before opening, and
  // open without blocking (MappedFile::map checks again what was opened).
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    error = "'" + path + "' is not a regular file";
    return false;
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = "cannot open '" + path + "': " + std::strerror(errno);
    return false;
  }
  std::shared_ptr<MappedFile> file;
  if (!MappedFile::map(fd, path, file, error)) {
    ::close(fd);
    return false;
  }
  uint64_t size = file->size();
  char head[4096];
  ssize_t n = ::pread(fd, head, sizeof(head), 0);
  if (n < 0 || startsAsText(head, static_cast<size_t>(n))) {
    ::close(fd);
    return readModelBuffer(file->data(), static_cast<size_t>(size), model,
                           error);
  }
  // Parse a copy of the model without the initializers' bytes, read through
  // a buffer; the bytes stay in the mapping, untouched until used.
  std::string stripped;
  mapped = MappedInitializers();
  FileCursor cursor(fd, size);
  bool ok = strip(cursor, size, 0, stripped, mapped);
  ::close(fd);
  if (!ok) {
    error = "not a valid ONNX model: the protobuf is truncated or corrupt";
    return false;
  }
  mapped.file = std::move(file);
  return readModelBuffer(stripped.data(), stripped.size(), model, error);
}

MappedFile::~MappedFile() {
  if (data_ && size_) {
    partita::runtime::unregisterFileMapping(data_);
    ::munmap(const_cast<char *>(data_), size_);
  }
}

bool partita::onnx_reader::mapExternalFile(const std::string &modelDir,
                                           const std::string &location,
                                           std::shared_ptr<MappedFile> &file,
                                           std::string &error) {
  if (location.empty() || location.front() == '/') {
    error = "external data location '" + location +
            "' must be a path relative to the model's folder";
    return false;
  }
  for (size_t start = 0; start <= location.size();) {
    size_t end = location.find('/', start);
    if (end == std::string::npos)
      end = location.size();
    if (location.compare(start, end - start, "..") == 0) {
      error =
          "external data location '" + location + "' leaves the model's folder";
      return false;
    }
    start = end + 1;
  }
  std::string path = modelDir + "/" + location;
  struct stat lst;
  if (::lstat(path.c_str(), &lst) != 0) {
    error =
        "cannot find external data file '" + location + "' next to the model";
    return false;
  }
  if (S_ISLNK(lst.st_mode) || !S_ISREG(lst.st_mode) || lst.st_nlink != 1) {
    error = "external data file '" + location +
            "' is a link or not a regular file; refusing to read it";
    return false;
  }
  // The folders on the way may be links too: the resolved file must still
  // lie inside the resolved model folder.
  char resolvedDir[PATH_MAX], resolvedFile[PATH_MAX];
  if (!::realpath(modelDir.c_str(), resolvedDir) ||
      !::realpath(path.c_str(), resolvedFile)) {
    error = "cannot resolve external data file '" + location + "'";
    return false;
  }
  std::string dir(resolvedDir);
  if (dir != "/")
    dir += "/";
  if (std::strncmp(resolvedFile, dir.c_str(), dir.size()) != 0) {
    error = "external data location '" + location +
            "' resolves outside the model's folder";
    return false;
  }
  int fd = ::open(resolvedFile, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    error = "cannot open external data file '" + location +
            "': " + std::strerror(errno);
    return false;
  }
  bool ok = MappedFile::map(fd, location, file, error);
  ::close(fd);
  return ok;
}
