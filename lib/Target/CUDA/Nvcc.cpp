//===- Nvcc.cpp - Building fatbins of generated CUDA ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Target/CUDA/Nvcc.h"

#include "partita/runtime/Sha256.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

using namespace partita::target::cuda;
using llvm::StringRef;

llvm::Error
partita::target::cuda::parseCudaArchs(StringRef text,
                                      std::vector<std::string> &archs) {
  archs.clear();
  llvm::SmallVector<StringRef> entries;
  text.split(entries, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/true);
  for (StringRef entry : entries) {
    entry = entry.trim();
    StringRef digits = entry;
    bool valid = digits.consume_front("sm_");
    digits.consume_back("a");
    unsigned version;
    if (!valid || digits.getAsInteger(10, version) || version < 70)
      return llvm::createStringError(
          "'" + entry.str() +
          "' is not a CUDA architecture of the form sm_<NN>[a] (sm_70 or "
          "newer), e.g. sm_80 or sm_90a");
    if (!llvm::is_contained(archs, entry.str()))
      archs.push_back(entry.str());
  }
  if (archs.empty())
    return llvm::createStringError("no CUDA architecture given");
  return llvm::Error::success();
}

llvm::Expected<std::string>
partita::target::cuda::findNvcc(const NvccOptions &options) {
  std::string candidate = options.nvcc;
  if (candidate.empty())
    if (const char *env = std::getenv("PARTITA_NVCC"))
      candidate = env;
#ifdef PARTITA_DEFAULT_NVCC
  if (candidate.empty() && llvm::sys::fs::can_execute(PARTITA_DEFAULT_NVCC))
    candidate = PARTITA_DEFAULT_NVCC;
#endif
  if (candidate.empty()) {
    llvm::ErrorOr<std::string> onPath = llvm::sys::findProgramByName("nvcc");
    if (!onPath)
      return llvm::createStringError(
          "--target cuda needs nvcc from the CUDA toolkit, and none was "
          "found (not at the toolkit this build was configured with, nor on "
          "PATH); install the toolkit or name nvcc with PARTITA_NVCC");
    candidate = *onPath;
  }
  if (!llvm::sys::fs::can_execute(candidate))
    return llvm::createStringError("nvcc '" + candidate +
                                   "' is not an executable file");
  return candidate;
}

std::vector<std::string>
partita::target::cuda::nvccArguments(const NvccOptions &options,
                                     StringRef input, StringRef output) {
  std::vector<std::string> args = {"-std=c++17", "-O3", "-fatbin",   "-Xptxas",
                                   "-v",         "-o",  output.str()};
  // SASS for every architecture; PTX of the lowest one without the
  // architecture-specific `a` suffix (whose PTX newer GPUs cannot JIT).
  // Lowest by number: as strings, sm_100 would sort before sm_80.
  std::string portable;
  unsigned portableVersion = 0;
  for (const std::string &arch : options.archs) {
    StringRef number = StringRef(arch).drop_front(3);
    std::string compute = "compute_" + number.str();
    args.push_back("-gencode");
    args.push_back("arch=" + compute + ",code=" + arch);
    unsigned version;
    if (number.ends_with("a") || number.getAsInteger(10, version))
      continue;
    if (portable.empty() || version < portableVersion) {
      portable = arch;
      portableVersion = version;
    }
  }
  if (!portable.empty()) {
    std::string compute = "compute_" + StringRef(portable).drop_front(3).str();
    args.push_back("-gencode");
    args.push_back("arch=" + compute + ",code=" + compute);
  }
  args.push_back(input.str());
  return args;
}

namespace {

std::string cacheDirectory(const NvccOptions &options) {
  std::string chosen = options.cacheDir;
  if (chosen.empty())
    if (const char *env = std::getenv("PARTITA_CACHE_DIR"))
      chosen = env;
  if (!chosen.empty())
    return chosen == "-" ? "" : chosen;
  llvm::SmallString<256> path;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    path = xdg;
  else if (!llvm::sys::path::home_directory(path))
    return "";
  else
    llvm::sys::path::append(path, ".cache");
  llvm::sys::path::append(path, "partita");
  return std::string(path);
}

/// The contents of `path`, or nothing.
std::optional<std::string> readFile(const llvm::Twine &path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!buffer)
    return std::nullopt;
  return (*buffer)->getBuffer().str();
}

/// Writes `contents` to `path` through a temporary file and a rename, so
/// concurrent compilers never read half a file. Failures are ignored: the
/// cache is an optimisation.
void writeAtomically(const llvm::Twine &path, StringRef contents) {
  std::string target = path.str();
  llvm::SmallString<256> temporary;
  int fd;
  if (llvm::sys::fs::createUniqueFile(target + ".tmp-%%%%%%", fd, temporary))
    return;
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << contents;
    if (os.has_error()) {
      os.clear_error();
      llvm::sys::fs::remove(temporary);
      return;
    }
  }
  if (llvm::sys::fs::rename(temporary, target))
    llvm::sys::fs::remove(temporary);
}

/// The first `lines` lines of `text`.
std::string head(StringRef text, int lines) {
  std::string result;
  for (int i = 0; i < lines && !text.empty(); ++i) {
    auto [line, rest] = text.split('\n');
    result += "  " + line.str() + "\n";
    text = rest;
  }
  return result;
}

} // namespace

llvm::Expected<Fatbin>
partita::target::cuda::buildFatbin(StringRef source,
                                   const NvccOptions &options) {
  llvm::Expected<std::string> nvcc = findNvcc(options);
  if (!nvcc)
    return nvcc.takeError();
  for (const std::string &arch : options.archs) {
    std::vector<std::string> checked;
    if (llvm::Error error = parseCudaArchs(arch, checked))
      return std::move(error);
  }

  // The key: the source, the flags and the nvcc that builds it (its
  // version banner), so a toolkit upgrade misses the cache.
  std::vector<std::string> keyArgs = nvccArguments(options, "in.cu", "out");
  std::string version;
  {
    llvm::SmallString<128> versionFile;
    if (!llvm::sys::fs::createTemporaryFile("partita-nvcc", "txt",
                                            versionFile)) {
      std::optional<StringRef> redirects[] = {
          std::nullopt, StringRef(versionFile), StringRef(versionFile)};
      llvm::sys::ExecuteAndWait(*nvcc, {*nvcc, "--version"}, std::nullopt,
                                redirects);
      version = readFile(versionFile).value_or("");
      llvm::sys::fs::remove(versionFile);
    }
  }
  ::partita::runtime::Sha256 hasher;
  hasher.update(version.data(), version.size());
  for (const std::string &arg : keyArgs)
    hasher.update(arg.c_str(), arg.size() + 1); // With its NUL separator.
  hasher.update(source.data(), source.size());
  std::string key = ::partita::runtime::Sha256::hex(hasher.finish());

  std::string cache = cacheDirectory(options);
  llvm::SmallString<256> cached;
  if (!cache.empty()) {
    cached = cache;
    llvm::sys::path::append(cached, "cuda", key);
    std::optional<std::string> bytes = readFile(cached + ".fatbin");
    std::optional<std::string> log = readFile(cached + ".ptxas.txt");
    if (bytes && log && !bytes->empty())
      return Fatbin{std::move(*bytes), std::move(*log), /*cached=*/true};
  }

  llvm::SmallString<128> directory;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory("partita-cuda", directory))
    return llvm::createStringError("cannot create a directory for nvcc: " +
                                   error.message());
  llvm::SmallString<128> input(directory), output(directory), log(directory);
  llvm::sys::path::append(input, "module.cu");
  llvm::sys::path::append(output, "module.fatbin");
  llvm::sys::path::append(log, "nvcc.log");
  {
    std::error_code error;
    llvm::raw_fd_ostream os(input, error);
    if (error)
      return llvm::createStringError("cannot write " + input.str().str() +
                                     ": " + error.message());
    os << source;
  }
  std::vector<std::string> args = nvccArguments(options, input, output);
  std::vector<StringRef> argv = {*nvcc};
  for (const std::string &arg : args)
    argv.push_back(arg);
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(log),
                                          StringRef(log)};
  std::string message;
  int status = llvm::sys::ExecuteAndWait(*nvcc, argv, std::nullopt, redirects,
                                         /*SecondsToWait=*/0,
                                         /*MemoryLimit=*/0, &message);
  std::string nvccLog = readFile(log).value_or("");
  if (status != 0 &&
      StringRef(nvccLog).contains("Unsupported gpu architecture")) {
    // The user's --cuda-arch, not the generated code: nothing to report,
    // nothing kept.
    for (StringRef file : {input.str(), output.str(), log.str()})
      llvm::sys::fs::remove(file);
    llvm::sys::fs::remove(directory);
    std::string archs;
    for (const std::string &arch : options.archs)
      archs += (archs.empty() ? "" : ",") + arch;
    return llvm::createStringError(
        "--cuda-arch " + archs + ": this nvcc (" + *nvcc +
        ") does not build for it (`nvcc --list-gpu-arch` lists what it "
        "does):\n" +
        head(nvccLog, 5));
  }
  if (status != 0) {
    // Keep the source for the bug report; remove the rest.
    llvm::sys::fs::remove(output);
    llvm::sys::fs::remove(log);
    return llvm::createStringError(
        "nvcc failed on the generated CUDA (a bug in Partita's code "
        "generator; please report it with the source kept at " +
        input.str().str() + ")" + (message.empty() ? "" : ": " + message) +
        ":\n" + head(nvccLog, 20));
  }
  std::optional<std::string> bytes = readFile(output);
  llvm::sys::fs::remove(input);
  llvm::sys::fs::remove(output);
  llvm::sys::fs::remove(log);
  llvm::sys::fs::remove(directory);
  if (!bytes || bytes->empty())
    return llvm::createStringError("nvcc succeeded but wrote no fatbin");

  if (!cache.empty() && !llvm::sys::fs::create_directories(
                            llvm::sys::path::parent_path(cached))) {
    writeAtomically(cached + ".ptxas.txt", nvccLog);
    writeAtomically(cached + ".fatbin", *bytes);
  }
  return Fatbin{std::move(*bytes), std::move(nvccLog), /*cached=*/false};
}
