//===- JsonDepth.h - how deep a JSON text nests --------------------*- C++
//-*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The JSON parsers Partita uses (nlohmann's in the runtime, LLVM's in the
// compiler) recurse once per nested array or object, so a text nested tens
// of thousands deep overflows the stack before any check of its contents.
// Every JSON a user can hand in (a manifest, a safetensors header, a
// cluster file or text) is measured here first and refused past
// kMaxJsonDepth, far beyond what any of those formats nests (a manifest
// nests 5 deep). Header-only, so that the compiler and the runtime share it
// without a library between them.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_JSONDEPTH_H
#define PARTITA_RUNTIME_JSONDEPTH_H

#include <cstddef>
#include <string>
#include <string_view>

namespace partita::runtime {

/// The nesting the JSON readers accept.
inline constexpr size_t kMaxJsonDepth = 256;

/// The deepest nesting of arrays and objects in `text` read as JSON (what
/// lies in strings does not count), or `limit + 1` once it passes `limit`.
/// Malformed text is measured as far as it goes; the parser refuses it.
inline size_t jsonNestingDepth(std::string_view text,
                               size_t limit = kMaxJsonDepth) {
  size_t depth = 0, deepest = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit)
        return limit + 1;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// The message refusing `text` as too deep for `what`, or empty.
inline std::string checkJsonDepth(std::string_view text,
                                  const std::string &what) {
  if (jsonNestingDepth(text) <= kMaxJsonDepth)
    return "";
  return what + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
         " levels";
}

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_JSONDEPTH_H
