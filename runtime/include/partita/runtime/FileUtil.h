//===- FileUtil.h - POSIX file helpers of the runtime -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Small wrappers over POSIX calls that report errors as Status with the path
// and errno text, shared by the runtime's libraries (the artifact writer
// and loader, safetensors, tensor files); not an interface for embedders.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_FILEUTIL_H
#define PARTITA_RUNTIME_FILEUTIL_H

#include "partita/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <sys/stat.h>

namespace partita::runtime {

/// "path: <strerror(errno)>".
Status errnoStatus(const std::string &path);

/// A new file, written sequentially. On failure the caller removes the
/// temporary directory that holds it, so no partial file is left behind.
class OutputFile {
public:
  OutputFile() = default;
  ~OutputFile();
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;

  /// Creates `path`, which must not exist yet.
  Status create(const std::string &path);
  Status write(const void *data, size_t bytes);
  /// Flushes to stable storage and closes.
  Status close();

private:
  /// Written bytes are handed to the disk in runs of this size.
  static constexpr uint64_t kWritebackBytes = 64ull << 20;
  std::string path;
  int fd = -1;
  uint64_t written = 0;
  uint64_t submitted = 0;
};

/// Runs `worker` on min(tasks, cores) threads, this one included, and
/// `helper` (if set) on one more, and returns when all have returned; with
/// fewer threads where the system starts no more (so `worker` must finish
/// the work however many run it). How files are read, hashed and written in
/// parallel.
void runOnCores(size_t tasks, const std::function<void()> &worker,
                const std::function<void()> &helper = {});

/// Writes `bytes` to a new file at `path` and fsyncs it.
Status writeNewFile(const std::string &path, const void *data, size_t bytes);

/// Opens `path` for reading if it is a regular file, without blocking on
/// anything else: a FIFO, a device, a socket or a directory is refused (a
/// FIFO would block the open until a writer comes, and a device may never
/// end). `info` receives the file's status.
Status openRegularFile(const std::string &path, int &fd, struct stat &info);

/// Reads a whole regular file of at most `maxBytes` bytes.
Status readFile(const std::string &path, size_t maxBytes, std::string &out);

/// fsync of a directory, so the entries created in it are durable.
Status syncDirectory(const std::string &path);

/// Whether anything (a dangling symbolic link included) is at `path`.
bool pathExists(const std::string &path);
/// Whether `path` is a directory or a symbolic link to one.
bool isDirectory(const std::string &path);

/// A read-only, private memory map of a whole file.
/// Makes a SIGBUS on a file a MappedFile has mapped (the file truncated or
/// replaced after it was opened, its pages then gone) end the process with
/// `TOOL: error: FILE changed while it was mapped ...` on stderr and exit
/// status 1, instead of a crash; any other SIGBUS stays the crash it is.
/// partita-run calls it. The library installs no handler by itself: a
/// process that embeds it keeps its own.
void installMappedFileFaultHandler(const char *tool);

class MappedFile {
public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  Status open(const std::string &path);
  const uint8_t *data() const { return base; }
  size_t size() const { return length; }

private:
  const uint8_t *base = nullptr;
  size_t length = 0;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_FILEUTIL_H
