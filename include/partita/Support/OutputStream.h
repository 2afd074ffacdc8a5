//===- OutputStream.h - finishing what was written ---------------*- C++
//-*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// LLVM's raw_fd_ostream keeps a write error (a full disk, a closed pipe)
// until the stream is destroyed, and then aborts the process with "IO
// failure on output stream", naming no file. Every stream the compiler's
// tools write a user's file or standard output to is finished here instead,
// so that the error becomes a diagnostic naming the file.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_SUPPORT_OUTPUTSTREAM_H
#define PARTITA_SUPPORT_OUTPUTSTREAM_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/Signals.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <unistd.h>

namespace partita {

/// Flushes `os`; where a write failed, returns the error's message and
/// clears it (the stream then no longer aborts when destroyed).
inline std::optional<std::string> finishWriting(llvm::raw_fd_ostream &os) {
  os.flush();
  if (!os.has_error())
    return std::nullopt;
  std::string message = os.error().message();
  os.clear_error();
  return message;
}

/// For tools whose output stream MLIR's main owns (partita-opt,
/// partita-translate: MlirOptMain and mlirTranslateMain open `-o` and print
/// to it): turns the "IO failure on output stream" that the stream raises
/// when it is destroyed after a failed write into "`tool`: error: cannot
/// write FILE: REASON", FILE being the `-o` option's value (standard output
/// for `-` or none), exit 1 with the partial file removed. Any other fatal
/// error is reported as LLVM reports it.
inline void installOutputFailureHandler(const char *tool) {
  static const char *toolName;
  toolName = tool;
  llvm::install_fatal_error_handler(
      [](void *, const char *reason, bool) {
        llvm::StringRef text(reason);
        llvm::StringRef prefix = "IO failure on output stream";
        if (!text.starts_with(prefix)) {
          llvm::errs() << "LLVM ERROR: " << text << "\n";
          return; // LLVM exits or aborts, as without a handler.
        }
        std::string file = "standard output";
        auto &options = llvm::cl::getRegisteredOptions();
        auto it = options.find("o");
        if (it != options.end())
          if (auto *o = dynamic_cast<llvm::cl::opt<std::string> *>(it->second);
              o && !o->getValue().empty() && o->getValue() != "-")
            file = o->getValue();
        llvm::StringRef cause = text.drop_front(prefix.size());
        cause.consume_front(":");
        llvm::errs() << toolName << ": error: cannot write " << file << ":"
                     << (cause.empty() ? " a write failed" : cause) << "\n";
        llvm::errs().flush();
        // The handler runs in a stream's destructor, possibly during
        // exit: remove what ToolOutputFile registered and leave at once.
        llvm::sys::RunInterruptHandlers();
        ::_exit(1);
      },
      nullptr);
}

} // namespace partita

#endif // PARTITA_SUPPORT_OUTPUTSTREAM_H
