//===- OptionsFuzzer.cpp - libFuzzer target for the declared options ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Every interface (the command line, the C API, Python) sets options
// through partita::setOption, and the C++ API through checkOptions. The
// input is `name=value` lines; each is set, then the options are checked
// and recorded as a manifest would. Any value must be refused with a
// message or accepted; a refused value leaves its field as it was.
//
//===----------------------------------------------------------------------===//

#include "partita/Options/Options.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

/// Every field as its declaration prints it.
static std::string fields(const partita::CompilerOptions &options) {
  std::string text;
  for (const partita::OptionInfo &info : partita::compilerOptionTable())
    text += info.get(options) + '\n';
  return text + (options.autoMesh ? "auto" : "");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view input(reinterpret_cast<const char *>(data), size);
  partita::CompilerOptions options;
  while (!input.empty()) {
    size_t end = input.find('\n');
    std::string_view line = input.substr(0, end);
    input = end == std::string_view::npos ? "" : input.substr(end + 1);
    size_t equals = line.find('=');
    std::string_view name = line.substr(0, equals);
    std::string_view value =
        equals == std::string_view::npos ? "" : line.substr(equals + 1);
    // The cluster reads files: only presets and JSON text here.
    if (name == "cluster" && (value.find('/') != std::string_view::npos ||
                              value.find(".json") != std::string_view::npos))
      continue;
    std::string before = fields(options);
    std::string error;
    if (!partita::setOption(options, name, value, error)) {
      if (error.empty())
        std::abort(); // a refusal must say why
      if (fields(options) != before)
        std::abort(); // a refused value changed the options
    }
  }
  std::string error;
  if (!partita::checkOptions(options, error) && error.empty())
    std::abort();
  (void)partita::recordedOptions(options);
  return 0;
}
