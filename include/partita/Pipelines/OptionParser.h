//===- OptionParser.h - command-line parsing of the enum options -*- C++
//-*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// LLVM's command-line parser for the enums of partita/Pipelines/Options.h,
// used by partita-compile's flags and by every pass and pipeline option of
// those types (ODS `Option<..., "::mlir::partita::Strategy", ...,
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

#ifndef PARTITA_PIPELINES_OPTIONPARSER_H
#define PARTITA_PIPELINES_OPTIONPARSER_H

#include "partita/Pipelines/Options.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <initializer_list>
#include <string>

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

} // namespace mlir::partita

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
#undef PARTITA_ENUM_OPTION_PARSER
} // namespace llvm::cl

#endif // PARTITA_PIPELINES_OPTIONPARSER_H
