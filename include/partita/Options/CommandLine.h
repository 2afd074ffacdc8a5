//===- CommandLine.h - the declared options on llvm::cl -------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The declared options (partita/Options/CompilerOptions.def) as llvm::cl
// flags: CompilerCommandLine registers one flag per option the command line
// reads, bound to a CompilerOptions. Also LLVM's command-line parsers for
// the option types that pass and pipeline options share: the enums of
// partita/Options/Options.h and the mesh. They serve partita-compile's
// flags and every pass and pipeline option of those types (ODS `Option<...,
// "::mlir::partita::Strategy", ...,
// "::mlir::partita::optionValues<::mlir::partita::Strategy>()">`). It is
// LLVM's mapping parser, filled from the enum's one table, with an error
// that lists what the option accepts: `--strategy expects megatron or none,
// got 'alpa'`.
//
// Every translation unit that declares a cl::opt of these enums must include
// this header (the generated pass declarations do, through the Passes.h
// headers), so that one parser specialization is seen everywhere.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_OPTIONS_COMMANDLINE_H
#define PARTITA_OPTIONS_COMMANDLINE_H

#include "partita/Options/Options.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace mlir::partita {

/// The tool whose name starts an option parser's error (`partita-compile:
/// error: ...`, like the tool's other errors); empty: `error: ...`.
inline std::string &optionErrorTool() {
  static std::string tool;
  return tool;
}

/// llvm::cl::parser<Enum> for the enums with an OptionSpelling: a mapping
/// table of the values the option accepts, and an error naming them.
template <typename Enum>
class EnumOptionParser : public llvm::cl::generic_parser_base {
protected:
  class OptionInfo : public GenericOptionInfo {
  public:
    OptionInfo(llvm::StringRef name, Enum value, llvm::StringRef help)
        : GenericOptionInfo(name, help), V(value) {}
    llvm::cl::OptionValue<Enum> V;
  };
  // `Values`, as llvm::cl::parser names it: MLIR's pass options read it.
  llvm::SmallVector<OptionInfo, 4> Values;

public:
  using parser_data_type = Enum;

  EnumOptionParser(llvm::cl::Option &option) : generic_parser_base(option) {}

  unsigned getNumOptions() const override { return Values.size(); }
  llvm::StringRef getOption(unsigned n) const override {
    return Values[n].Name;
  }
  llvm::StringRef getDescription(unsigned n) const override {
    return Values[n].HelpStr;
  }
  const llvm::cl::GenericOptionValue &
  getOptionValue(unsigned n) const override {
    return Values[n].V;
  }

  /// Returns true on error, as llvm::cl parsers do.
  bool parse(llvm::cl::Option &option, llvm::StringRef, llvm::StringRef arg,
             Enum &value) {
    llvm::SmallVector<std::string> names;
    for (const OptionInfo &info : Values) {
      if (info.Name == arg) {
        value = info.V.getValue();
        return false;
      }
      names.push_back(info.Name.str());
    }
    const std::string &tool = optionErrorTool();
    llvm::errs() << tool << (tool.empty() ? "" : ": ") << "error: "
                 << ::partita::badChoiceMessage(option.ArgStr.str(),
                                                ::partita::listChoices(names),
                                                arg.str())
                 << "\n";
    return true;
  }

  template <typename T>
  void addLiteralOption(llvm::StringRef name, const T &value,
                        llvm::StringRef help) {
    Values.emplace_back(name, static_cast<Enum>(value), help);
    AddLiteralOption(Owner, name);
  }

  void removeLiteralOption(llvm::StringRef name) {
    Values.erase(Values.begin() + findOption(name));
  }
};

/// A cl modifier, like llvm::cl::values, that gives an option of `Enum`
/// its values from the enum's table: all of them, or those in `only`.
template <typename Enum> class OptionValues {
public:
  explicit OptionValues(llvm::ArrayRef<Enum> only) : only(only) {}

  template <typename Opt> void apply(Opt &option) const {
    for (const ::partita::OptionCase<Enum> &c :
         ::partita::OptionSpelling<Enum>::cases)
      if (only.empty() || llvm::is_contained(only, c.value))
        option.getParser().addLiteralOption(c.name, c.value, c.description);
  }

private:
  llvm::SmallVector<Enum, 4> only;
};

template <typename Enum>
OptionValues<Enum> optionValues(std::initializer_list<Enum> only = {}) {
  return OptionValues<Enum>(llvm::ArrayRef<Enum>(only.begin(), only.size()));
}

/// A cl modifier that does nothing (for options whose type needs none).
struct NoModifier {
  template <typename Opt> void apply(Opt &) const {}
};

/// The modifier that lists an option type's values in --help: an enum's
/// spellings, nothing for other types.
template <typename T> auto optionTypeValues() {
  if constexpr (std::is_enum_v<T>)
    return optionValues<T>();
  else
    return NoModifier();
}

/// partita-compile's flags: one per declared option the command line reads
/// (kCommandLine), registered in `category`. Enums and booleans are
/// parsed by llvm::cl (so --help lists the values); every other value is
/// read as text and set through the declaration (partita::setOption) by
/// `apply`, after cl::ParseCommandLineOptions. Keep it alive while the
/// command line is parsed.
class CompilerCommandLine {
public:
  explicit CompilerCommandLine(llvm::cl::OptionCategory &category);
  ~CompilerCommandLine();
  /// Fills `options` with the flags given; an error names the flag.
  bool apply(CompilerOptions &options, std::string &error) const;
  /// How often the flag of option `name` was given.
  unsigned occurrences(llvm::StringRef name) const;

  /// One flag and how it fills the options (CommandLine.cpp).
  struct Binding;

private:
  std::vector<std::unique_ptr<Binding>> bindings;
};

} // namespace mlir::partita

/// Parses `--mesh` (and the `mesh` option of passes and pipelines) into a
/// Mesh, printing Mesh::parse's message on error as the enum options do.
template <>
class llvm::cl::parser<::partita::Mesh>
    : public llvm::cl::basic_parser<::partita::Mesh> {
public:
  parser(Option &option) : basic_parser(option) {}
  /// Returns true on error, as llvm::cl parsers do.
  bool parse(Option &option, StringRef argName, StringRef arg,
             ::partita::Mesh &value);
  StringRef getValueName() const override { return "axis=size[:role],..."; }
  void printOptionDiff(const Option &option, const ::partita::Mesh &value,
                       const OptionValue<::partita::Mesh> &,
                       size_t globalWidth) const;
};

namespace partita {
/// The mesh as --mesh spells it (pass options print their values so).
inline llvm::raw_ostream &operator<<(llvm::raw_ostream &os, const Mesh &mesh) {
  return os << mesh.str();
}
} // namespace partita

namespace llvm::cl {
#define PARTITA_ENUM_OPTION_PARSER(Enum)                                       \
  template <>                                                                  \
  class parser<::partita::Enum>                                                \
      : public ::mlir::partita::EnumOptionParser<::partita::Enum> {            \
  public:                                                                      \
    using EnumOptionParser::EnumOptionParser;                                  \
  };
PARTITA_ENUM_OPTION_PARSER(Target)
PARTITA_ENUM_OPTION_PARSER(Strategy)
PARTITA_ENUM_OPTION_PARSER(SequenceMode)
PARTITA_ENUM_OPTION_PARSER(StorageType)
PARTITA_ENUM_OPTION_PARSER(CollectiveMatmulMode)
PARTITA_ENUM_OPTION_PARSER(PlanObjective)
PARTITA_ENUM_OPTION_PARSER(EmitStage)
#undef PARTITA_ENUM_OPTION_PARSER
} // namespace llvm::cl

#endif // PARTITA_OPTIONS_COMMANDLINE_H
