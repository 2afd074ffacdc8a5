//===- ModelReader.cpp - ONNX files into ModelProto -----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "ModelReader.h"

#include "onnx/defs/parser.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
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

bool partita::onnx_reader::readModelFile(const std::string &path,
                                         onnx::ModelProto &model,
                                         std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open '" + path + "': " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    error = "'" + path + "' is not a regular file";
    return false;
  }
  // Sniff the format from the first bytes, then stream the rest: a binary
  // model is parsed without holding a second copy of the file in memory.
  char head[4096];
  ssize_t n = ::pread(fd, head, sizeof(head), 0);
  if (n < 0) {
    ::close(fd);
    error = "cannot read '" + path + "': " + std::strerror(errno);
    return false;
  }
  bool ok;
  try {
    if (startsAsText(head, static_cast<size_t>(n))) {
      std::string text(static_cast<size_t>(st.st_size), '\0');
      ssize_t got = ::pread(fd, text.data(), text.size(), 0);
      ok = got == static_cast<ssize_t>(text.size());
      if (!ok)
        error = "cannot read '" + path + "'";
      else
        ok = parseText(text, model, error);
    } else {
      google::protobuf::io::FileInputStream stream(fd);
      ok = parseBinary(stream, model, error);
    }
  } catch (const std::exception &e) {
    ok = false;
    error = std::string("cannot parse the model: ") + e.what();
  }
  ::close(fd);
  return ok && checkModel(model, error);
}

MappedFile::~MappedFile() {
  if (data_ && size_)
    ::munmap(const_cast<char *>(data_), size_);
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
  int fd = ::open(resolvedFile, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    error = "cannot open external data file '" + location +
            "': " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    error = "cannot stat external data file '" + location + "'";
    return false;
  }
  file.reset(new MappedFile());
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (st.st_size > 0) {
    void *addr = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                        MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      ::close(fd);
      file.reset();
      error = "cannot map external data file '" + location +
              "': " + std::strerror(errno);
      return false;
    }
    file->data_ = static_cast<const char *>(addr);
  }
  ::close(fd);
  return true;
}
