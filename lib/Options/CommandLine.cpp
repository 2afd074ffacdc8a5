//===- CommandLine.cpp - the declared options on llvm::cl -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Options/CommandLine.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <functional>

using namespace mlir::partita;
namespace cl = llvm::cl;
using Options = ::partita::CompilerOptions;

/// One flag: the cl::opt (or cl::list) and how to move what it read into
/// a CompilerOptions.
struct CompilerCommandLine::Binding {
  const ::partita::OptionInfo *info;
  /// What cl::opt refers to: the flag's name and help.
  std::string name, help;
  std::unique_ptr<cl::Option> flag;
  /// Copies what the flag read into `options`; called only when given.
  std::function<bool(::partita::CompilerOptions &, std::string &)> apply;
};

namespace {

/// The flag of an option llvm::cl parses itself: an enum or a boolean.
template <typename T>
std::unique_ptr<CompilerCommandLine::Binding>
bindParsed(const ::partita::OptionInfo &info, T Options::*field,
           cl::OptionCategory &category) {
  T defaultValue = Options().*field;
  bool negated = info.has(::partita::kNegatedFlag);
  auto binding = std::make_unique<CompilerCommandLine::Binding>();
  binding->info = &info;
  // cl::opt keeps a reference to its name: the binding owns it.
  binding->name = negated ? std::string("no-") + info.name : info.name;
  // A negated flag turns off what the declaration describes.
  binding->help = info.help;
  if (negated) {
    binding->help[0] = llvm::toLower(binding->help[0]);
    binding->help = "Turn off the default: " + binding->help;
  }
  auto opt = std::make_unique<cl::opt<T>>(
      llvm::StringRef(binding->name), cl::desc(binding->help),
      cl::init(negated ? T() : defaultValue), optionTypeValues<T>(),
      cl::cat(category));
  cl::opt<T> *raw = opt.get();
  binding->apply = [raw, field, negated](::partita::CompilerOptions &options,
                                         std::string &) {
    (void)negated; // read only for booleans
    if constexpr (std::is_same_v<T, bool>)
      options.*field = negated ? !raw->getValue() : raw->getValue();
    else
      options.*field = raw->getValue();
    return true;
  };
  binding->flag = std::move(opt);
  return binding;
}

/// The flag of an option read as text and set through its declaration.
/// --bind may be given several times, its values adding up.
std::unique_ptr<CompilerCommandLine::Binding>
bindText(const ::partita::OptionInfo &info, cl::OptionCategory &category) {
  auto binding = std::make_unique<CompilerCommandLine::Binding>();
  binding->info = &info;
  if (info.kind == ::partita::OptionKind::Bindings) {
    auto list = std::make_unique<cl::list<std::string>>(
        llvm::StringRef(info.name), cl::desc(info.help),
        cl::value_desc(info.valueName), cl::CommaSeparated, cl::cat(category));
    cl::list<std::string> *raw = list.get();
    binding->apply = [raw, &info](::partita::CompilerOptions &options,
                                  std::string &error) {
      return info.set(options, llvm::join(*raw, ","), error);
    };
    binding->flag = std::move(list);
    return binding;
  }
  auto opt = std::make_unique<cl::opt<std::string>>(
      llvm::StringRef(info.name), cl::desc(info.help),
      cl::value_desc(info.valueName), cl::cat(category));
  cl::opt<std::string> *raw = opt.get();
  binding->apply = [raw, &info](::partita::CompilerOptions &options,
                                std::string &error) {
    return info.set(options, raw->getValue(), error);
  };
  binding->flag = std::move(opt);
  return binding;
}

/// The flag of a declared option, as its kind is parsed.
template <::partita::OptionKind Kind, typename T>
std::unique_ptr<CompilerCommandLine::Binding>
bindOption(const ::partita::OptionInfo &info, T Options::*field,
           cl::OptionCategory &category) {
  if constexpr (Kind == ::partita::OptionKind::Choice ||
                Kind == ::partita::OptionKind::Flag)
    return bindParsed(info, field, category);
  else
    return bindText(info, category);
}

} // namespace

CompilerCommandLine::CompilerCommandLine(cl::OptionCategory &category) {
  auto add = [&](std::unique_ptr<Binding> binding) {
    bindings.push_back(std::move(binding));
  };
#define PARTITA_OPTION(FIELD, KIND, TYPE, NAME, DEFAULT, USES, VALUE, HELP)    \
  if (((USES) & ::partita::kCommandLine) != 0)                                 \
    add(bindOption<::partita::OptionKind::KIND>(                               \
        *::partita::findCompilerOption(NAME), &Options::FIELD, category));
  using namespace ::partita;
#include "partita/Options/CompilerOptions.def"
}

CompilerCommandLine::~CompilerCommandLine() = default;

bool CompilerCommandLine::apply(::partita::CompilerOptions &options,
                                std::string &error) const {
  for (const std::unique_ptr<Binding> &binding : bindings)
    if (binding->flag->getNumOccurrences() && !binding->apply(options, error))
      return false;
  return true;
}

unsigned CompilerCommandLine::occurrences(llvm::StringRef name) const {
  for (const std::unique_ptr<Binding> &binding : bindings)
    if (name == binding->info->name)
      return binding->flag->getNumOccurrences();
  return 0;
}

bool cl::parser<::partita::Mesh>::parse(Option &option, StringRef,
                                        StringRef arg, ::partita::Mesh &value) {
  std::string error;
  std::optional<::partita::Mesh> mesh = ::partita::Mesh::parse(arg, error);
  if (!mesh) {
    const std::string &tool = optionErrorTool();
    llvm::errs() << tool << (tool.empty() ? "" : ": ") << "error: --"
                 << option.ArgStr << " " << arg << ": " << error << "\n";
    return true;
  }
  value = std::move(*mesh);
  return false;
}

void cl::parser<::partita::Mesh>::printOptionDiff(
    const Option &option, const ::partita::Mesh &value,
    const OptionValue<::partita::Mesh> &, size_t globalWidth) const {
  printOptionName(option, globalWidth);
  outs() << "= " << value.str() << "\n";
}
