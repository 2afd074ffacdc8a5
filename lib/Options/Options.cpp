//===- Options.cpp - the compiler's options, declared once ----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The table of CompilerOptions.def and the one parser of each option kind.
// The command line, the C API and Python all end in setOption, so a value
// is refused with the same message whichever way it came. Standard library
// only, like the header.
//
//===----------------------------------------------------------------------===//

#include "partita/Options/Options.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <type_traits>

using namespace partita;

namespace {

std::string_view trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\n\r");
  if (begin == std::string_view::npos)
    return {};
  size_t end = text.find_last_not_of(" \t\n\r");
  return text.substr(begin, end - begin + 1);
}

/// The comma-separated parts of `text` (one empty part for empty text).
std::vector<std::string_view> splitCommas(std::string_view text) {
  std::vector<std::string_view> parts;
  for (;;) {
    size_t comma = text.find(',');
    parts.push_back(text.substr(0, comma));
    if (comma == std::string_view::npos)
      return parts;
    text.remove_prefix(comma + 1);
  }
}

std::optional<int64_t> parseInteger(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+')
    text.remove_prefix(1);
  int64_t value = 0;
  auto [end, error] =
      std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

std::optional<double> parseReal(std::string_view text) {
  std::string owned(trim(text));
  if (owned.empty())
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(owned.c_str(), &end);
  if (errno != 0 || end != owned.c_str() + owned.size() ||
      !std::isfinite(value))
    return std::nullopt;
  return value;
}

std::string formatReal(double value) {
  std::ostringstream os;
  os.precision(17);
  os << value;
  return os.str();
}

std::string flag(const OptionInfo &info) {
  return std::string("--") + info.name;
}

//===----------------------------------------------------------------------===//
// One parser and printer per kind
//===----------------------------------------------------------------------===//

/// KindTraits<Kind>::parse(options, text, value, info, error) and
/// ::print(value): `options` is there for the kinds that set a companion
/// field (mesh auto, the cluster's source).
template <OptionKind Kind> struct KindTraits;

template <> struct KindTraits<OptionKind::Flag> {
  static bool parse(CompilerOptions &, std::string_view text, bool &value,
                    const OptionInfo &info, std::string &error) {
    text = trim(text);
    if (text == "true" || text == "1" || text.empty()) {
      value = true;
      return true;
    }
    if (text == "false" || text == "0") {
      value = false;
      return true;
    }
    error =
        flag(info) + " expects true or false, got '" + std::string(text) + "'";
    return false;
  }
  static std::string print(bool value) { return value ? "true" : "false"; }
};

template <> struct KindTraits<OptionKind::Integer> {
  static bool parse(CompilerOptions &, std::string_view text, int64_t &value,
                    const OptionInfo &info, std::string &error) {
    std::optional<int64_t> parsed = parseInteger(text);
    if (!parsed) {
      error =
          flag(info) + " expects an integer, got '" + std::string(text) + "'";
      return false;
    }
    value = *parsed;
    return true;
  }
  static std::string print(int64_t value) { return std::to_string(value); }
};

template <> struct KindTraits<OptionKind::Real> {
  static bool parse(CompilerOptions &, std::string_view text, double &value,
                    const OptionInfo &info, std::string &error) {
    std::optional<double> parsed = parseReal(text);
    if (!parsed) {
      error = flag(info) + " expects a number, got '" + std::string(text) + "'";
      return false;
    }
    value = *parsed;
    return true;
  }
  static std::string print(double value) { return formatReal(value); }
};

template <> struct KindTraits<OptionKind::Text> {
  static bool parse(CompilerOptions &, std::string_view text,
                    std::string &value, const OptionInfo &, std::string &) {
    value = std::string(text);
    return true;
  }
  static std::string print(const std::string &value) { return value; }
};

template <> struct KindTraits<OptionKind::Choice> {
  template <typename Enum>
  static bool parse(CompilerOptions &, std::string_view text, Enum &value,
                    const OptionInfo &, std::string &error) {
    std::optional<Enum> parsed = parseOption<Enum>(trim(text));
    if (!parsed) {
      error = badOptionMessage<Enum>(text);
      return false;
    }
    value = *parsed;
    return true;
  }
  template <typename Enum> static std::string print(Enum value) {
    return optionName(value);
  }
};

template <> struct KindTraits<OptionKind::MeshAxes> {
  static bool parse(CompilerOptions &options, std::string_view text,
                    Mesh &value, const OptionInfo &info, std::string &error) {
    if (trim(text) == "auto") {
      options.autoMesh = true;
      value = Mesh();
      return true;
    }
    std::optional<Mesh> parsed = Mesh::parse(text, error);
    if (!parsed) {
      error = flag(info) + " " + std::string(text) + ": " + error;
      return false;
    }
    value = std::move(*parsed);
    options.autoMesh = false;
    return true;
  }
  static std::string print(const Mesh &value) { return value.str(); }
};

template <> struct KindTraits<OptionKind::Bindings> {
  static bool parse(CompilerOptions &, std::string_view text, Bindings &value,
                    const OptionInfo &info, std::string &error) {
    Bindings parsed;
    if (!trim(text).empty()) {
      for (std::string_view entry : splitCommas(text)) {
        size_t equals = entry.find('=');
        std::string_view name = trim(entry.substr(0, equals));
        std::optional<int64_t> size;
        if (equals != std::string_view::npos)
          size = parseInteger(entry.substr(equals + 1));
        if (name.empty() || !size || *size < 0) {
          error = flag(info) +
                  " expects name=value with a non-negative integer "
                  "value, got '" +
                  std::string(trim(entry)) + "'";
          return false;
        }
        if (!parsed.emplace(std::string(name), *size).second) {
          error = flag(info) + " gives '" + std::string(name) + "' twice";
          return false;
        }
      }
    }
    value = std::move(parsed);
    return true;
  }
  static std::string print(const Bindings &value) {
    std::string text;
    for (const auto &[name, size] : value)
      text += (text.empty() ? "" : ",") + name + "=" + std::to_string(size);
    return text;
  }
};

template <> struct KindTraits<OptionKind::List> {
  static bool parse(CompilerOptions &, std::string_view text,
                    std::vector<std::string> &value, const OptionInfo &,
                    std::string &) {
    value.clear();
    if (!trim(text).empty())
      for (std::string_view item : splitCommas(text))
        value.emplace_back(trim(item));
    return true;
  }
  static std::string print(const std::vector<std::string> &value) {
    std::string text;
    for (const std::string &item : value)
      text += (text.empty() ? "" : ",") + item;
    return text;
  }
};

template <> struct KindTraits<OptionKind::Bytes> {
  static bool parse(CompilerOptions &, std::string_view text, double &value,
                    const OptionInfo &info, std::string &error) {
    // Empty: unset (the cluster's memory).
    if (trim(text).empty()) {
      value = 0;
      return true;
    }
    std::optional<double> bytes = parseByteCount(text);
    if (!bytes) {
      error = flag(info) +
              " expects a positive byte count such as 80e9, "
              "80GB or 80GiB, got '" +
              std::string(text) + "'";
      return false;
    }
    value = *bytes;
    return true;
  }
  static std::string print(double value) {
    return value == 0 ? "" : formatReal(value);
  }
};

/// --cluster names a preset unless it names a file: an existing path, or
/// anything spelled like one (a '/' or a .json suffix), which is then read
/// and its error reported as a file's. Text that starts with `{` is the
/// JSON itself (the APIs pass it so).
template <> struct KindTraits<OptionKind::Cluster> {
  static bool isPreset(const std::string &text) {
    struct stat info;
    bool exists = ::stat(text.c_str(), &info) == 0;
    return !exists && text.find('/') == std::string::npos &&
           !(text.size() >= 5 &&
             text.compare(text.size() - 5, 5, ".json") == 0);
  }
  static bool parse(CompilerOptions &options, std::string_view given,
                    std::string &value, const OptionInfo &info,
                    std::string &error) {
    std::string text(given);
    options.clusterSource.clear();
    if (trim(text).empty()) {
      value.clear();
      return true;
    }
    if (trim(text).front() == '{') {
      value = text;
      return true;
    }
    options.clusterSource = text;
    if (isPreset(text)) {
      // A preset is a cluster file of one field.
      std::string quoted;
      for (char c : text) {
        if (c == '"' || c == '\\')
          quoted += '\\';
        quoted += c;
      }
      value = "{\"preset\":\"" + quoted + "\"}";
      return true;
    }
    struct stat status;
    if (::stat(text.c_str(), &status) != 0 || !S_ISREG(status.st_mode)) {
      error = "cannot read " + flag(info) + " " + text + ": " +
              (::stat(text.c_str(), &status) != 0
                   ? std::string("No such file or directory")
                   : std::string("not a regular file"));
      return false;
    }
    // A cluster file is a few hundred bytes; a larger one is no cluster.
    constexpr off_t kMaxClusterBytes = 16 << 20;
    if (status.st_size > kMaxClusterBytes) {
      error = "cannot read " + flag(info) + " " + text + ": larger than " +
              std::to_string(kMaxClusterBytes >> 20) + " MiB";
      return false;
    }
    std::ifstream in(text, std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    if (!in && !in.eof()) {
      error = "cannot read " + flag(info) + " " + text;
      return false;
    }
    value = contents.str();
    return true;
  }
  static std::string print(const std::string &value) { return value; }
};

/// The range check of an Integer option; Python, C and the command line
/// share its message.
bool checkRange(const OptionInfo &info, int64_t value, std::string &error) {
  if (value < info.min) {
    error = flag(info) +
            (info.min == 1 ? " must be positive, got "
             : info.min == 0
                 ? " must be 0 or more, got "
                 : " must be at least " + std::to_string(info.min) + ", got ") +
            std::to_string(value);
    return false;
  }
  if (value > info.max) {
    error = flag(info) + " must be at most " + std::to_string(info.max) +
            ", got " + std::to_string(value);
    return false;
  }
  return true;
}

template <typename T>
bool checkValue(const OptionInfo &, const T &, std::string &) {
  return true;
}
bool checkValue(const OptionInfo &info, const int64_t &value,
                std::string &error) {
  return info.kind != OptionKind::Integer || checkRange(info, value, error);
}
bool checkValue(const OptionInfo &info, const double &value,
                std::string &error) {
  if (info.kind == OptionKind::Bytes && !(value >= 0 && std::isfinite(value))) {
    error = flag(info) + " must be positive";
    return false;
  }
  return true;
}

/// Bindings set as fields (the embedding API) are checked as --bind parses
/// them.
bool checkValue(const OptionInfo &info, const Bindings &value,
                std::string &error) {
  for (const auto &[name, size] : value)
    if (name.empty() || size < 0) {
      error = flag(info) +
              " expects name=value with a non-negative integer "
              "value, got '" +
              name + "=" + std::to_string(size) + "'";
      return false;
    }
  return true;
}

/// The spellings of an enum option's values; none for other kinds.
template <typename T> std::vector<std::string> choicesOf(const T &) {
  std::vector<std::string> names;
  if constexpr (std::is_enum_v<T>)
    for (const OptionCase<T> &c : OptionSpelling<T>::cases)
      names.push_back(c.name);
  return names;
}

std::vector<OptionInfo> makeTable() {
  std::vector<OptionInfo> table;
  const CompilerOptions defaults;
#define PARTITA_INT_OPTION(FIELD, NAME, DEFAULT, MIN, MAX, USES, VALUE, HELP)  \
  PARTITA_DECLARE(FIELD, Integer, NAME, MIN, MAX, USES, VALUE, HELP)
#define PARTITA_OPTION(FIELD, KIND, TYPE, NAME, DEFAULT, USES, VALUE, HELP)    \
  PARTITA_DECLARE(FIELD, KIND, NAME, 0, 0, USES, VALUE, HELP)
#define PARTITA_DECLARE(FIELD, KIND, NAME, MIN, MAX, USES, VALUE, HELP)        \
  table.push_back(OptionInfo{                                                  \
      NAME, OptionKind::KIND, USES, VALUE, HELP, choicesOf(defaults.FIELD),    \
      MIN, MAX,                                                                \
      [](CompilerOptions &options, std::string_view text,                      \
         std::string &error) {                                                 \
        const OptionInfo &info = *findCompilerOption(NAME);                    \
        auto value = options.FIELD;                                            \
        if (!KindTraits<OptionKind::KIND>::parse(options, text, value, info,   \
                                                 error) ||                     \
            !checkValue(info, value, error))                                   \
          return false;                                                        \
        options.FIELD = std::move(value);                                      \
        return true;                                                           \
      },                                                                       \
      [](const CompilerOptions &options) {                                     \
        return KindTraits<OptionKind::KIND>::print(options.FIELD);             \
      },                                                                       \
      [](const CompilerOptions &options) {                                     \
        return KindTraits<OptionKind::KIND>::print(options.FIELD) ==           \
               KindTraits<OptionKind::KIND>::print(CompilerOptions().FIELD);   \
      },                                                                       \
      [](const CompilerOptions &options, std::string &error) {                 \
        return checkValue(*findCompilerOption(NAME), options.FIELD, error);    \
      }});
#include "partita/Options/CompilerOptions.def"
#undef PARTITA_DECLARE
  return table;
}

} // namespace

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

std::string_view partita::impliedAxisRole(std::string_view name) {
  for (std::string_view role : {"dp", "tp", "pp", "sp", "ep"})
    if (name == role)
      return role;
  return "none";
}

int64_t Mesh::deviceCount() const {
  int64_t count = 1;
  for (const MeshAxis &axis : axes)
    count *= axis.size;
  return count;
}

int64_t Mesh::roleSize(std::string_view role) const {
  for (const MeshAxis &axis : axes)
    if ((axis.role.empty() ? impliedAxisRole(axis.name)
                           : std::string_view(axis.role)) == role)
      return axis.size;
  return 1;
}

std::string Mesh::str() const {
  std::string text;
  for (const MeshAxis &axis : axes) {
    text +=
        (text.empty() ? "" : ",") + axis.name + "=" + std::to_string(axis.size);
    if (!axis.role.empty() && axis.role != impliedAxisRole(axis.name))
      text += ":" + axis.role;
  }
  return text;
}

bool partita::operator==(const Mesh &a, const Mesh &b) {
  return a.str() == b.str();
}

bool Mesh::check(std::string &error) {
  std::set<std::string> names;
  // As many devices as --devices takes at most; a product beyond it would
  // overflow before it fits any machine.
  constexpr int64_t kMaxDevices = int64_t(1) << 20;
  int64_t devices = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    MeshAxis &axis = axes[i];
    if (axis.name.empty()) {
      error = "an axis has no name";
      return false;
    }
    if (axis.size < 1) {
      error = "axis '" + axis.name + "' has size " + std::to_string(axis.size) +
              "; sizes are at least 1";
      return false;
    }
    if (axis.size > kMaxDevices / devices) {
      error =
          "the mesh has more than " + std::to_string(kMaxDevices) + " devices";
      return false;
    }
    devices *= axis.size;
    if (!names.insert(axis.name).second) {
      error = "axis '" + axis.name + "' is given twice";
      return false;
    }
    if (axis.role.empty())
      axis.role = impliedAxisRole(axis.name);
    static const std::set<std::string_view> roles = {"dp", "tp", "pp",
                                                     "sp", "ep", "none"};
    if (!roles.count(axis.role)) {
      error = "'" + axis.name + "=" + std::to_string(axis.size) + ":" +
              axis.role + "': unknown role '" + axis.role +
              "'; expected dp, tp, pp, sp, ep or none";
      return false;
    }
    if (axis.role == "none")
      continue;
    for (size_t j = 0; j < i; ++j)
      if (axes[j].role == axis.role) {
        error = "axes '" + axes[j].name + "' and '" + axis.name +
                "' both have role " + axis.role;
        return false;
      }
  }
  return true;
}

std::optional<Mesh> Mesh::parse(std::string_view text, std::string &error) {
  Mesh mesh;
  if (trim(text).empty())
    return mesh;
  for (std::string_view part : splitCommas(text)) {
    part = trim(part);
    size_t equals = part.find('=');
    std::string_view name = trim(part.substr(0, equals));
    std::string_view rest =
        equals == std::string_view::npos ? "" : part.substr(equals + 1);
    size_t colon = rest.find(':');
    std::optional<int64_t> size = parseInteger(rest.substr(0, colon));
    if (name.empty() || equals == std::string_view::npos || !size) {
      error = "'" + std::string(part) + "' is not of the form axis=size";
      return std::nullopt;
    }
    MeshAxis axis{std::string(name), *size, ""};
    if (colon != std::string_view::npos) {
      axis.role = std::string(trim(rest.substr(colon + 1)));
      if (axis.role != "dp" && axis.role != "tp" && axis.role != "pp" &&
          axis.role != "sp" && axis.role != "ep" && axis.role != "none") {
        error = "'" + std::string(part) + "': unknown role '" + axis.role +
                "'; expected dp, tp, pp, sp, ep or none";
        return std::nullopt;
      }
    }
    mesh.axes.push_back(std::move(axis));
    // Checked axis by axis, so that the message names the first bad one.
    Mesh prefix = mesh;
    if (!prefix.check(error))
      return std::nullopt;
  }
  if (!mesh.check(error))
    return std::nullopt;
  return mesh;
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

std::string OptionInfo::pythonName() const {
  std::string python = name;
  for (char &c : python)
    if (c == '-')
      c = '_';
  return python;
}

const std::vector<OptionInfo> &partita::compilerOptionTable() {
  static const std::vector<OptionInfo> table = makeTable();
  return table;
}

const OptionInfo *partita::findCompilerOption(std::string_view name) {
  for (const OptionInfo &info : compilerOptionTable())
    if (name == info.name || name == info.pythonName())
      return &info;
  return nullptr;
}

bool partita::setOption(CompilerOptions &options, std::string_view name,
                        std::string_view text, std::string &error) {
  const OptionInfo *info = findCompilerOption(name);
  if (!info) {
    error = "unknown option '" + std::string(name) + "'";
    return false;
  }
  return info->set(options, text, error);
}

bool partita::checkOptions(CompilerOptions &options, std::string &error) {
  for (const OptionInfo &info : compilerOptionTable())
    if (!info.check(options, error))
      return false;
  if (!options.autoMesh && !options.mesh.check(error)) {
    error = "--mesh " + options.mesh.str() + ": " + error;
    return false;
  }
  return true;
}

std::map<std::string, std::string>
partita::recordedOptions(const CompilerOptions &options) {
  std::map<std::string, std::string> recorded;
  for (const OptionInfo &info : compilerOptionTable()) {
    if (!info.has(kRecorded | kRecordedAlways))
      continue;
    if (info.has(kRecordedWithMesh) && options.mesh.empty())
      continue;
    if (!info.has(kRecordedAlways) && info.isDefault(options))
      continue;
    if (info.has(kNegatedFlag))
      recorded[std::string("no-") + info.name] = "true";
    else
      recorded[info.name] = info.get(options);
  }
  return recorded;
}

std::optional<double> partita::parseByteCount(std::string_view text) {
  text = trim(text);
  size_t digits = text.find_first_not_of("0123456789.eE+-");
  // An exponent's e must not swallow a suffix: 8e9 is a number, 8EiB is not.
  std::string_view number = text.substr(0, digits);
  std::string_view suffix =
      digits == std::string_view::npos ? "" : text.substr(digits);
  std::optional<double> value = parseReal(number);
  if (!value || *value <= 0)
    return std::nullopt;
  if (!suffix.empty() && suffix.back() == 'B')
    suffix.remove_suffix(1);
  static const std::pair<std::string_view, double> kUnits[] = {
      {"", 1},
      {"k", 1e3},
      {"K", 1e3},
      {"M", 1e6},
      {"G", 1e9},
      {"T", 1e12},
      {"Ki", 1024.0},
      {"Mi", 1048576.0},
      {"Gi", 1073741824.0},
      {"Ti", 1099511627776.0}};
  for (auto [unit, scale] : kUnits)
    if (suffix == unit)
      return *value * scale;
  return std::nullopt;
}
