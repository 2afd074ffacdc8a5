//===- Status.h - errors of the runtime -------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The runtime reports failures as values: a Status carries a message meant
// for the user (what failed, on which rank, with which file or tensor).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_STATUS_H
#define PARTITA_RUNTIME_STATUS_H

#include <string>
#include <utility>

namespace partita::runtime {

class [[nodiscard]] Status {
public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed = true;
    s.text = std::move(message);
    return s;
  }

  bool isOk() const { return !failed; }
  explicit operator bool() const { return !failed; }
  const std::string &message() const { return text; }

private:
  bool failed = false;
  std::string text;
};

/// Returns from the enclosing function when `expr` is an error.
#define PARTITA_RETURN_IF_ERROR(expr)                                          \
  do {                                                                         \
    ::partita::runtime::Status _status = (expr);                               \
    if (!_status.isOk())                                                       \
      return _status;                                                          \
  } while (false)

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_STATUS_H
