//===- FileUtil.cpp - POSIX file helpers of the runtime -------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/FileUtil.h"

#include "partita/runtime/WeightView.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace partita::runtime;

bool partita::runtime::pathExists(const std::string &path) {
  struct stat info;
  return ::lstat(path.c_str(), &info) == 0;
}

bool partita::runtime::isDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

Status partita::runtime::errnoStatus(const std::string &path) {
  return Status::error(path + ": " + std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (fd >= 0)
    ::close(fd);
}

Status OutputFile::create(const std::string &filePath) {
  path = filePath;
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return errnoStatus(path);
  return Status::ok();
}

Status OutputFile::write(const void *data, size_t bytes) {
  const char *next = static_cast<const char *>(data);
  while (bytes > 0) {
    // Linux writes at most 2 GiB per call; write the rest in the next turn.
    ssize_t wrote = ::write(fd, next, bytes);
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote < 0)
      return errnoStatus(path);
    next += wrote;
    bytes -= size_t(wrote);
    written += uint64_t(wrote);
  }
  // Start the disk on what was written so far instead of leaving it dirty
  // until the kernel's background threshold (a tenth of memory) or close():
  // writing then overlaps with producing the next bytes. Advice only: the
  // fsync in close() reports any error.
  if (written - submitted >= kWritebackBytes) {
    (void)::sync_file_range(fd, off64_t(submitted),
                            off64_t(written - submitted),
                            SYNC_FILE_RANGE_WRITE);
    submitted = written;
  }
  return Status::ok();
}

Status OutputFile::close() {
  if (::fsync(fd) != 0)
    return errnoStatus(path);
  int closing = fd;
  fd = -1;
  if (::close(closing) != 0)
    return errnoStatus(path);
  return Status::ok();
}

void partita::runtime::runOnCores(size_t tasks,
                                  const std::function<void()> &worker,
                                  const std::function<void()> &helper) {
  size_t threads = std::min<size_t>(
      tasks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  if (helper) {
    try {
      pool.emplace_back(helper);
    } catch (const std::exception &) {
      // The workers do without it.
    }
  }
  // This thread is one of the workers; the others are extra threads.
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::exception &) {
      // Fewer threads still finish the work.
      break;
    }
  }
  if (threads > 0)
    worker();
  for (std::thread &thread : pool)
    thread.join();
}

Status partita::runtime::writeNewFile(const std::string &path, const void *data,
                                      size_t bytes) {
  OutputFile file;
  PARTITA_RETURN_IF_ERROR(file.create(path));
  PARTITA_RETURN_IF_ERROR(file.write(data, bytes));
  return file.close();
}

namespace {

const char *fileTypeName(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

} // namespace

Status partita::runtime::openRegularFile(const std::string &path, int &fd,
                                         struct stat &info) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer. It is cleared again once the file is known to be regular.
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    return errnoStatus(path);
  Status status = Status::ok();
  if (::fstat(fd, &info) != 0)
    status = errnoStatus(path);
  else if (!S_ISREG(info.st_mode))
    status = Status::error(path + ": " + fileTypeName(info.st_mode) +
                           ", not a regular file");
  else if (int flags = ::fcntl(fd, F_GETFL);
           flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    status = errnoStatus(path);
  if (!status) {
    ::close(fd);
    fd = -1;
  }
  return status;
}

Status partita::runtime::readFile(const std::string &path, size_t maxBytes,
                                  std::string &out) {
  int fd = -1;
  struct stat info;
  PARTITA_RETURN_IF_ERROR(openRegularFile(path, fd, info));
  if (uint64_t(info.st_size) > maxBytes) {
    ::close(fd);
    return Status::error(path + ": " + std::to_string(info.st_size) +
                         " bytes, more than the " + std::to_string(maxBytes) +
                         " this reader accepts");
  }
  out.assign(size_t(info.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t got = ::read(fd, &out[done], out.size() - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      Status status = errnoStatus(path);
      ::close(fd);
      return status;
    }
    if (got == 0)
      break;
    done += size_t(got);
  }
  ::close(fd);
  // A file that shrank while being read is reported as what it now is.
  out.resize(done);
  return Status::ok();
}

Status partita::runtime::syncDirectory(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return errnoStatus(path);
  int result = ::fsync(fd);
  Status status = result == 0 ? Status::ok() : errnoStatus(path);
  ::close(fd);
  return status;
}

namespace {

/// The files MappedFile has mapped, for the SIGBUS handler: a fixed table
/// it can read without a lock or an allocation (async-signal-safe). A slot
/// is claimed by setting `start` from 0 to 1, filled, then published with
/// the mapping's address; 0 frees it.
struct FaultSlot {
  std::atomic<uintptr_t> start{0};
  uintptr_t end = 0;
  char path[512] = {};
};
constexpr size_t kFaultSlots = 4096;
FaultSlot faultSlots[kFaultSlots];
const char *faultTool = "partita";

void publishMapping(const uint8_t *base, size_t length,
                    const std::string &path) {
  for (FaultSlot &slot : faultSlots) {
    uintptr_t expected = 0;
    if (!slot.start.compare_exchange_strong(expected, 1))
      continue;
    slot.end = reinterpret_cast<uintptr_t>(base) + length;
    size_t n = std::min(path.size(), sizeof(slot.path) - 1);
    std::memcpy(slot.path, path.data(), n);
    slot.path[n] = '\0';
    slot.start.store(reinterpret_cast<uintptr_t>(base));
    return;
  }
  // A full table only loses the file's name in a SIGBUS message.
}

void retractMapping(const uint8_t *base) {
  for (FaultSlot &slot : faultSlots)
    if (slot.start.load() == reinterpret_cast<uintptr_t>(base)) {
      slot.start.store(0);
      return;
    }
}

void writeAll(const char *text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    ssize_t written = ::write(STDERR_FILENO, text, length);
    if (written <= 0)
      return;
    text += written;
    length -= size_t(written);
  }
}

void onBusError(int signal, siginfo_t *info, void *) {
  uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (FaultSlot &slot : faultSlots) {
    uintptr_t start = slot.start.load();
    if (start > 1 && address >= start && address < slot.end) {
      writeAll(faultTool);
      writeAll(": error: ");
      writeAll(slot.path);
      writeAll(" changed while it was mapped (a read past its end: the file "
               "was truncated or replaced); an artifact's files must not "
               "change while it runs\n");
      ::_exit(1);
    }
  }
  // Not a mapped file's fault: the crash it is.
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

} // namespace

void partita::runtime::installMappedFileFaultHandler(const char *tool) {
  faultTool = tool;
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = onBusError;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

MappedFile::~MappedFile() {
  if (base && length > 0) {
    retractMapping(base);
    unregisterFileMapping(base);
    ::munmap(const_cast<uint8_t *>(base), length);
  }
}

Status MappedFile::open(const std::string &path) {
  int fd = -1;
  struct stat info;
  PARTITA_RETURN_IF_ERROR(openRegularFile(path, fd, info));
  length = size_t(info.st_size);
  if (length == 0) {
    ::close(fd);
    static const uint8_t kEmpty = 0;
    base = &kEmpty;
    return Status::ok();
  }
  void *mapped = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapped == MAP_FAILED) {
    length = 0;
    return errnoStatus(path);
  }
  base = static_cast<const uint8_t *>(mapped);
  registerFileMapping(base, length);
  publishMapping(base, length, path);
  return Status::ok();
}
