//===- PartitaModule.cpp - partita._partita, the Python extension ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A thin binding of include/partita/Partita.h; the friendly API (keyword
// options, exceptions with diagnostics, dtype conversion) is Python, in
// python/partita/__init__.py. Errors from the library come back as values
// (compile) or as `_partita.Error` (load, run, save), which the Python layer
// turns into its own exception types.
//
//===----------------------------------------------------------------------===//

#include "partita/Partita.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

/// A failure of the library, raised as `_partita.Error`.
struct PartitaFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(const partita::Status &status) {
  if (!status.ok())
    throw PartitaFailure(status.message());
}

const char *severityName(partita::Diagnostic::Severity severity) {
  switch (severity) {
  case partita::Diagnostic::Severity::Error:
    return "error";
  case partita::Diagnostic::Severity::Warning:
    return "warning";
  case partita::Diagnostic::Severity::Note:
    return "note";
  case partita::Diagnostic::Severity::Remark:
    return "remark";
  }
  return "error";
}

partita::DType dtypeFromName(const std::string &name) {
  for (partita::DType dtype :
       {partita::DType::F32, partita::DType::F16, partita::DType::BF16,
        partita::DType::I64, partita::DType::I32, partita::DType::I8,
        partita::DType::Bool})
    if (name == partita::dtypeName(dtype))
      return dtype;
  throw PartitaFailure("unknown dtype '" + name + "'");
}

/// The Python-side description of a tensor: (name, dtype name, shape).
using TensorDescription =
    std::tuple<std::string, std::string, std::vector<int64_t>>;

std::vector<TensorDescription>
describe(const std::vector<partita::TensorInfo> &infos) {
  std::vector<TensorDescription> result;
  for (const partita::TensorInfo &info : infos)
    result.emplace_back(info.name, partita::dtypeName(info.dtype), info.shape);
  return result;
}

/// Inputs may be read-only arrays; outputs are written in place.
using InputArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using OutputArray = nb::ndarray<nb::c_contig, nb::device::cpu>;

/// One tensor of a run: a dense host array reinterpreted as `dtype` (the
/// Python layer chose the array's type; here only the element size must
/// agree, which keeps the library from reading or writing past it).
template <typename Array>
partita::TensorRef toTensorRef(const std::string &name,
                               const std::string &dtypeName,
                               const Array &array) {
  partita::TensorRef ref;
  ref.name = name;
  ref.dtype = dtypeFromName(dtypeName);
  if (array.itemsize() != partita::dtypeSize(ref.dtype))
    throw PartitaFailure("tensor '" + name +
                         "': " + std::to_string(array.itemsize()) +
                         "-byte elements given for " + dtypeName);
  for (size_t i = 0; i < array.ndim(); ++i)
    ref.shape.push_back(array.shape(i));
  // The library only reads inputs; TensorRef has one pointer type for both.
  ref.data = const_cast<void *>(static_cast<const void *>(array.data()));
  return ref;
}

struct PySession {
  std::unique_ptr<partita::Session> session;
};

partita::SessionOptions sessionOptions(unsigned threadsPerRank,
                                       double timeoutSeconds,
                                       bool verifyWeights = false) {
  partita::SessionOptions options;
  options.threadsPerRank = threadsPerRank;
  options.timeoutSeconds = timeoutSeconds;
  options.verifyWeights = verifyWeights;
  return options;
}

/// The compile options from the Python layer's (name, text) pairs, each set
/// through its declaration as the command line would; a value an option
/// does not take is an option error (in `errors`), as partita-compile
/// reports it.
partita::CompileOptions
makeCompileOptions(const std::vector<std::pair<std::string, std::string>> &set,
                   std::vector<partita::Diagnostic> &errors) {
  partita::CompileOptions options;
  for (const auto &[name, text] : set) {
    const partita::OptionInfo *info = partita::findCompilerOption(name);
    std::string error;
    if (!info || !info->has(partita::kEmbedding))
      error = "unknown option '" + name + "'";
    else
      info->set(options, text, error);
    if (!error.empty())
      errors.push_back({partita::Diagnostic::Severity::Error, "", error});
  }
  return options;
}

const char *kindName(partita::OptionKind kind) {
  switch (kind) {
  case partita::OptionKind::Flag:
    return "flag";
  case partita::OptionKind::Integer:
    return "integer";
  case partita::OptionKind::Real:
    return "real";
  case partita::OptionKind::Text:
    return "text";
  case partita::OptionKind::Choice:
    return "choice";
  case partita::OptionKind::MeshAxes:
    return "mesh";
  case partita::OptionKind::Bindings:
    return "bindings";
  case partita::OptionKind::List:
    return "list";
  case partita::OptionKind::Bytes:
    return "bytes";
  case partita::OptionKind::Cluster:
    return "cluster";
  }
  return "text";
}

} // namespace

NB_MODULE(_partita, m) {
  m.doc() = "Partita's C++ embedding API (include/partita/Partita.h); use "
            "the `partita` package rather than this module.";
  nb::exception<PartitaFailure>(m, "Error", PyExc_RuntimeError);

  m.def("version", &partita::version, "The library's version.");

  nb::class_<partita::Diagnostic>(m, "Diagnostic",
                                  "A compiler diagnostic, as data.")
      .def_prop_ro("severity",
                   [](const partita::Diagnostic &diagnostic) {
                     return severityName(diagnostic.severity);
                   })
      .def_ro("location", &partita::Diagnostic::location)
      .def_ro("message", &partita::Diagnostic::message)
      .def("__str__", &partita::Diagnostic::str)
      .def("__repr__", [](const partita::Diagnostic &diagnostic) {
        return "<Diagnostic " + diagnostic.str() + ">";
      });

  nb::class_<partita::Artifact>(m, "Artifact",
                                "A compiled model, held in memory.")
      .def(
          "__init__",
          [](partita::Artifact *self, std::map<std::string, nb::bytes> files,
             std::string report) {
            std::map<std::string, std::string> contents;
            for (auto &[path, data] : files)
              contents[path] = std::string(data.c_str(), data.size());
            new (self)
                partita::Artifact(std::move(contents), std::move(report));
          },
          "files"_a, "report"_a)
      .def_prop_ro("report", &partita::Artifact::report)
      .def("file_names",
           [](const partita::Artifact &artifact) {
             std::vector<std::string> names;
             for (const auto &file : artifact.files())
               names.push_back(file.first);
             return names;
           })
      .def("file",
           [](const partita::Artifact &artifact, const std::string &path) {
             auto it = artifact.files().find(path);
             if (it == artifact.files().end())
               throw nb::key_error(path.c_str());
             return nb::bytes(it->second.data(), it->second.size());
           })
      .def(
          "save",
          [](const partita::Artifact &artifact, const std::string &path) {
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = artifact.save(path);
            }
            check(status);
          },
          "path"_a);

  // option_table() -> [(name, python name, kind, default, choices, min, max,
  // nullable, help)]: the declared options the APIs set by name
  // (partita/Options/CompilerOptions.def), from which the Python layer makes
  // and checks its keyword arguments.
  m.def("option_table", []() {
    std::vector<std::tuple<std::string, std::string, std::string, std::string,
                           std::vector<std::string>, int64_t, int64_t, bool,
                           std::string>>
        table;
    const partita::CompilerOptions defaults;
    for (const partita::OptionInfo &info : partita::compilerOptionTable())
      if (info.has(partita::kEmbedding))
        table.emplace_back(info.name, info.pythonName(), kindName(info.kind),
                           info.get(defaults), info.choices, info.min, info.max,
                           info.has(partita::kNullable), info.help);
    return table;
  });

  // compile(model, is_path, name, [(option, text)]) -> (artifact | None,
  // diagnostics, options refused): a failed compilation is a value, so that
  // the Python layer can raise CompileError (OptionError when an option's
  // value was refused) with the diagnostics attached.
  m.def(
      "compile",
      [](nb::bytes model, bool isPath, const std::string &name,
         const std::vector<std::pair<std::string, std::string>> &set) {
        partita::CompileResult result;
        partita::CompileOptions options =
            makeCompileOptions(set, result.diagnostics);
        std::string bytes(model.c_str(), model.size());
        if (!result.diagnostics.empty())
          return std::make_tuple(std::shared_ptr<partita::Artifact>(),
                                 result.diagnostics, true);
        {
          nb::gil_scoped_release released;
          result = isPath ? partita::compileFile(bytes, options)
                          : partita::compileBuffer(bytes.data(), bytes.size(),
                                                   options, name);
        }
        // nanobind shares ownership through shared_ptr<T>, not <const T>;
        // the Python side never mutates an Artifact.
        return std::make_tuple(
            std::const_pointer_cast<partita::Artifact>(result.artifact),
            result.diagnostics, false);
      },
      "model"_a, "is_path"_a, "name"_a, "options"_a);

  // plan(model, is_path, name, [(option, text)]) -> (plan JSON | None,
  // table, diagnostics, options refused).
  m.def(
      "plan",
      [](nb::bytes model, bool isPath, const std::string &name,
         const std::vector<std::pair<std::string, std::string>> &set) {
        partita::PlanResult result;
        partita::CompileOptions options =
            makeCompileOptions(set, result.diagnostics);
        std::string bytes(model.c_str(), model.size());
        bool refused = !result.diagnostics.empty();
        if (!refused) {
          nb::gil_scoped_release released;
          result = isPath ? partita::planFile(bytes, options)
                          : partita::planBuffer(bytes.data(), bytes.size(),
                                                options, name);
        }
        std::optional<std::string> json;
        if (result.ok())
          json = result.json;
        return std::make_tuple(json, result.table, result.diagnostics, refused);
      },
      "model"_a, "is_path"_a, "name"_a, "options"_a);

  nb::class_<PySession>(m, "Session", "A loaded artifact, ready to run.")
      .def_static(
          "load_path",
          [](const std::string &path, unsigned threadsPerRank,
             double timeoutSeconds, bool verifyWeights) {
            auto session = std::make_unique<PySession>();
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = partita::Session::load(
                  path,
                  sessionOptions(threadsPerRank, timeoutSeconds, verifyWeights),
                  session->session);
            }
            check(status);
            return session.release();
          },
          "path"_a, "threads_per_rank"_a = 0, "timeout_seconds"_a = 120.0,
          "verify_weights"_a = false, nb::rv_policy::take_ownership)
      .def_static(
          "load_artifact",
          [](const partita::Artifact &artifact, unsigned threadsPerRank,
             double timeoutSeconds) {
            auto session = std::make_unique<PySession>();
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = partita::Session::load(
                  artifact, sessionOptions(threadsPerRank, timeoutSeconds),
                  session->session);
            }
            check(status);
            return session.release();
          },
          "artifact"_a, "threads_per_rank"_a = 0, "timeout_seconds"_a = 120.0,
          nb::rv_policy::take_ownership)
      .def_prop_ro("target",
                   [](const PySession &self) { return self.session->target(); })
      .def_prop_ro("inputs",
                   [](const PySession &self) {
                     return describe(self.session->inputs());
                   })
      .def_prop_ro("outputs",
                   [](const PySession &self) {
                     return describe(self.session->outputs());
                   })
      // run([(name, dtype, array)], [(name, dtype, array)]): the outputs
      // are preallocated by the caller and filled in place.
      .def(
          "run",
          [](PySession &self,
             std::vector<std::tuple<std::string, std::string, InputArray>>
                 inputs,
             std::vector<std::tuple<std::string, std::string, OutputArray>>
                 outputs) {
            std::vector<partita::TensorRef> inputRefs, outputRefs;
            for (auto &[name, dtype, array] : inputs)
              inputRefs.push_back(toTensorRef(name, dtype, array));
            for (auto &[name, dtype, array] : outputs)
              outputRefs.push_back(toTensorRef(name, dtype, array));
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = self.session->run(inputRefs, outputRefs);
            }
            check(status);
          },
          "inputs"_a, "outputs"_a)
      .def_prop_ro(
          "serving",
          [](const PySession &self) { return self.session->serving(); })
      .def_prop_ro("max_seq",
                   [](const PySession &self) { return self.session->maxSeq(); })
      .def_prop_ro(
          "cache_position",
          [](const PySession &self) { return self.session->cachePosition(); })
      // generate(ids, mask or None, n, keep_logits) -> (tokens, batch,
      // generated, logits, vocab, prefill_seconds, step_seconds)
      .def(
          "generate",
          [](PySession &self, InputArray ids, std::optional<InputArray> mask,
             int64_t maxNewTokens, bool keepLogits) {
            partita::TensorRef idsRef = toTensorRef("input_ids", "i64", ids);
            std::optional<partita::TensorRef> maskRef;
            if (mask)
              maskRef = toTensorRef("attention_mask", "i64", *mask);
            partita::Session::Generated out;
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status =
                  self.session->generate(idsRef, maskRef ? &*maskRef : nullptr,
                                         maxNewTokens, keepLogits, out);
            }
            check(status);
            return std::make_tuple(std::move(out.tokens), out.batch,
                                   out.generated, std::move(out.logits),
                                   out.vocab, out.prefillSeconds,
                                   std::move(out.stepSeconds));
          },
          "input_ids"_a, "attention_mask"_a.none(), "max_new_tokens"_a,
          "keep_logits"_a)
      .def(
          "prefill",
          [](PySession &self, InputArray ids, std::optional<InputArray> mask,
             OutputArray logits) {
            partita::TensorRef idsRef = toTensorRef("input_ids", "i64", ids);
            std::optional<partita::TensorRef> maskRef;
            if (mask)
              maskRef = toTensorRef("attention_mask", "i64", *mask);
            partita::TensorRef logitsRef = toTensorRef("logits", "f32", logits);
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = self.session->prefill(
                  idsRef, maskRef ? &*maskRef : nullptr, logitsRef);
            }
            check(status);
          },
          "input_ids"_a, "attention_mask"_a.none(), "logits"_a)
      .def(
          "step",
          [](PySession &self, InputArray tokens, OutputArray logits) {
            partita::TensorRef tokensRef = toTensorRef("tokens", "i64", tokens);
            partita::TensorRef logitsRef = toTensorRef("logits", "f32", logits);
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = self.session->step(tokensRef, logitsRef);
            }
            check(status);
          },
          "tokens"_a, "logits"_a)
      .def_prop_ro(
          "training",
          [](const PySession &self) { return self.session->training(); })
      .def_prop_ro(
          "training_steps",
          [](const PySession &self) { return self.session->trainingSteps(); })
      .def_prop_ro("batch_inputs",
                   [](const PySession &self) {
                     return describe(self.session->batchInputs());
                   })
      // train_step([(name, dtype, array)], lr or NaN) -> loss
      .def(
          "train_step",
          [](PySession &self,
             std::vector<std::tuple<std::string, std::string, InputArray>>
                 batch,
             double lr) {
            std::vector<partita::TensorRef> refs;
            for (auto &[name, dtype, array] : batch)
              refs.push_back(toTensorRef(name, dtype, array));
            float loss = 0;
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = self.session->trainStep(refs, lr, loss);
            }
            check(status);
            return loss;
          },
          "batch"_a, "lr"_a)
      .def(
          "save_checkpoint",
          [](const PySession &self, const std::string &path) {
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = self.session->saveCheckpoint(path);
            }
            check(status);
          },
          "path"_a)
      .def(
          "load_checkpoint",
          [](PySession &self, const std::string &path) {
            partita::Status status;
            {
              nb::gil_scoped_release released;
              status = self.session->loadCheckpoint(path);
            }
            check(status);
          },
          "path"_a);
}
