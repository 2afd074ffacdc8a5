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

#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>

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

} // namespace partita

#endif // PARTITA_SUPPORT_OUTPUTSTREAM_H
