//===- TestSupport.h - what the emulation tests share ----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The emulation tests drive the built tools (partita-compile, nvcc) as
// subprocesses: their paths, overridable from the environment, and a way to
// run a command and read what it printed.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TEST_CUDA_EMULATION_TESTSUPPORT_H
#define PARTITA_RUNTIME_TEST_CUDA_EMULATION_TESTSUPPORT_H

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace partita::runtime {

/// The environment variable `name`, or `fallback` when it is unset or empty.
inline std::string envOr(const char *name, const std::string &fallback) {
  const char *value = std::getenv(name);
  return value && *value ? value : fallback;
}

inline bool exists(const std::string &path) {
  return access(path.c_str(), F_OK) == 0;
}

/// Runs `command`; returns its exit status and puts stdout and stderr in
/// `output`.
inline int runCommand(const std::string &command, std::string &output) {
  output.clear();
  FILE *pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe)
    return -1;
  char chunk[4096];
  size_t got;
  while ((got = fread(chunk, 1, sizeof(chunk), pipe)) > 0)
    output.append(chunk, got);
  return pclose(pipe);
}

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TEST_CUDA_EMULATION_TESTSUPPORT_H
