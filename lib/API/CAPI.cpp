//===- CAPI.cpp - Partita's C API over the C++ API ------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Each handle wraps the C++ object it stands for; every entry point checks
// its pointers first, so that misuse from C is an error status, not a crash.
//
//===----------------------------------------------------------------------===//

#include "partita-c/partita.h"

#include "partita/Analysis/Cluster.h"
#include "partita/Partita.h"

#include <cmath>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

// The C enums are the C++ ones by value.
static_assert(PARTITA_DTYPE_F32 == static_cast<int>(partita::DType::F32) &&
                  PARTITA_DTYPE_F16 == static_cast<int>(partita::DType::F16) &&
                  PARTITA_DTYPE_BF16 ==
                      static_cast<int>(partita::DType::BF16) &&
                  PARTITA_DTYPE_I64 == static_cast<int>(partita::DType::I64) &&
                  PARTITA_DTYPE_I32 == static_cast<int>(partita::DType::I32) &&
                  PARTITA_DTYPE_I8 == static_cast<int>(partita::DType::I8) &&
                  PARTITA_DTYPE_BOOL == static_cast<int>(partita::DType::Bool),
              "partita_dtype differs from partita::DType");
static_assert(
    PARTITA_SEVERITY_ERROR ==
            static_cast<int>(partita::Diagnostic::Severity::Error) &&
        PARTITA_SEVERITY_WARNING ==
            static_cast<int>(partita::Diagnostic::Severity::Warning) &&
        PARTITA_SEVERITY_NOTE ==
            static_cast<int>(partita::Diagnostic::Severity::Note) &&
        PARTITA_SEVERITY_REMARK ==
            static_cast<int>(partita::Diagnostic::Severity::Remark),
    "partita_severity differs from partita::Diagnostic::Severity");

struct partita_status {
  std::string message;
};

struct partita_compile_options {
  partita::CompileOptions options;
};

struct partita_compile_result {
  partita::CompileResult result;
  std::string errorText;
};

struct partita_plan_result {
  partita::PlanResult result;
  std::string errorText;
};

struct partita_artifact {
  std::shared_ptr<const partita::Artifact> artifact;
  // files() sorted by path, for access by index.
  std::vector<const std::pair<const std::string, std::string> *> files;
};

struct partita_session_options {
  partita::SessionOptions options;
};

struct partita_session {
  std::unique_ptr<partita::Session> session;
};

namespace {

partita_status *makeError(std::string message) {
  return new (std::nothrow) partita_status{std::move(message)};
}

partita_status *fromStatus(const partita::Status &status) {
  if (status.ok())
    return nullptr;
  return makeError(status.message());
}

partita_status *nullArgument(const char *function, const char *argument) {
  return makeError(std::string(function) + ": '" + argument + "' is null");
}

#define PARTITA_CHECK_ARG(arg)                                                 \
  do {                                                                         \
    if (!(arg))                                                                \
      return nullArgument(__func__, #arg);                                     \
  } while (false)

/// Sets option `name` from `text` through its declaration (what
/// partita_compile_options_set does), the error naming `function`: the
/// typed setters are wrappers of it.
partita_status *setByName(const char *function,
                          partita::CompileOptions &options, const char *name,
                          const std::string &text) {
  std::string error;
  if (!partita::setOption(options, name, text, error))
    return makeError(std::string(function) + ": " + error);
  return nullptr;
}

/// Applies `change` to a copy of the options and keeps it only where the
/// declaration of option `name` accepts the result, as the command line
/// checks the value it parses: the typed setters refuse at once what a
/// compile would refuse later, each with the flag's message.
template <typename Change>
partita_status *setChecked(const char *function,
                           partita::CompileOptions &options, const char *name,
                           Change change) {
  partita::CompileOptions updated = options;
  change(updated);
  std::string error;
  for (const partita::OptionInfo &info : partita::compilerOptionTable())
    if (std::string_view(info.name) == name && !info.check(updated, error))
      return makeError(std::string(function) + ": " + error);
  if (std::string_view(name) == "mesh" && !updated.mesh.check(error))
    return makeError(std::string(function) + ": --mesh " + updated.mesh.str() +
                     ": " + error);
  options = std::move(updated);
  return nullptr;
}

bool validDType(int dtype) {
  return dtype >= PARTITA_DTYPE_F32 && dtype <= PARTITA_DTYPE_BOOL;
}

partita_artifact *wrapArtifact(std::shared_ptr<const partita::Artifact> art) {
  auto *handle = new (std::nothrow) partita_artifact;
  if (!handle)
    return nullptr;
  handle->artifact = std::move(art);
  for (const auto &file : handle->artifact->files())
    handle->files.push_back(&file);
  return handle;
}

partita_status *compiled(partita::CompileResult result,
                         partita_compile_result **out) {
  auto *handle = new (std::nothrow) partita_compile_result;
  if (!handle)
    return makeError("partita: out of memory");
  handle->result = std::move(result);
  handle->errorText = handle->result.errorText();
  *out = handle;
  if (handle->result.ok())
    return nullptr;
  // A failure without diagnostics would give an empty message.
  return makeError(handle->errorText.empty() ? "compilation failed"
                                             : handle->errorText);
}

partita_status *planned(partita::PlanResult result, partita_plan_result **out) {
  auto *handle = new (std::nothrow) partita_plan_result;
  if (!handle)
    return makeError("partita: out of memory");
  handle->result = std::move(result);
  handle->errorText = handle->result.errorText();
  *out = handle;
  if (handle->result.ok())
    return nullptr;
  return makeError(handle->errorText.empty() ? "planning failed"
                                             : handle->errorText);
}

// Converts one caller tensor, checking what C cannot check for us.
partita_status *toTensorRef(const char *function, const char *what,
                            size_t index, const partita_tensor &tensor,
                            partita::TensorRef &ref) {
  std::string where =
      std::string(function) + ": " + what + "[" + std::to_string(index) + "]";
  if (!tensor.name)
    return makeError(where + ".name is null");
  where += " '" + std::string(tensor.name) + "'";
  if (!validDType(tensor.dtype))
    return makeError(where + ": unknown dtype " + std::to_string(tensor.dtype));
  if (tensor.rank < 0 || tensor.rank > 64)
    return makeError(where + ": invalid rank " + std::to_string(tensor.rank));
  if (tensor.rank > 0 && !tensor.shape)
    return makeError(where + ".shape is null");
  ref.name = tensor.name;
  ref.dtype = static_cast<partita::DType>(tensor.dtype);
  ref.shape.assign(tensor.shape, tensor.shape + tensor.rank);
  bool empty = false;
  for (int64_t dim : ref.shape) {
    if (dim < 0)
      return makeError(where + ": negative dimension " + std::to_string(dim));
    empty |= dim == 0;
  }
  if (!tensor.data && !empty)
    return makeError(where + ".data is null");
  ref.data = tensor.data;
  return nullptr;
}

void describe(const partita::TensorInfo &info, partita_tensor *out) {
  out->name = info.name.c_str();
  out->dtype = static_cast<int>(info.dtype);
  out->rank = static_cast<int64_t>(info.shape.size());
  out->shape = info.shape.data();
  out->data = nullptr;
}

} // namespace

extern "C" {

//===----------------------------------------------------------------------===//
// Status
//===----------------------------------------------------------------------===//

int partita_status_ok(const partita_status *status) {
  return status == nullptr;
}

const char *partita_status_message(const partita_status *status) {
  return status ? status->message.c_str() : "";
}

void partita_status_destroy(partita_status *status) { delete status; }

const char *partita_version(void) { return partita::version(); }

const char *partita_dtype_name(int dtype) {
  if (!validDType(dtype))
    return nullptr;
  return partita::dtypeName(static_cast<partita::DType>(dtype));
}

size_t partita_dtype_size(int dtype) {
  if (!validDType(dtype))
    return 0;
  return partita::dtypeSize(static_cast<partita::DType>(dtype));
}

//===----------------------------------------------------------------------===//
// Compile options
//===----------------------------------------------------------------------===//

partita_compile_options *partita_compile_options_create(void) {
  return new (std::nothrow) partita_compile_options;
}

void partita_compile_options_destroy(partita_compile_options *options) {
  delete options;
}

/// The options the APIs set by name (kEmbedding), in declaration order.
const std::vector<const partita::OptionInfo *> &embeddingOptions() {
  static const std::vector<const partita::OptionInfo *> options = [] {
    std::vector<const partita::OptionInfo *> list;
    for (const partita::OptionInfo &info : partita::compilerOptionTable())
      if (info.has(partita::kEmbedding))
        list.push_back(&info);
    return list;
  }();
  return options;
}

partita_status *partita_compile_options_set(partita_compile_options *options,
                                            const char *name,
                                            const char *value) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(name);
  PARTITA_CHECK_ARG(value);
  const partita::OptionInfo *info = partita::findCompilerOption(name);
  if (!info || !info->has(partita::kEmbedding) ||
      info->name != std::string(name))
    return makeError(std::string(__func__) + ": unknown option '" + name +
                     "' (partita_compile_option_name lists them)");
  return setByName(__func__, options->options, name, value);
}

size_t partita_compile_option_count(void) { return embeddingOptions().size(); }

const char *partita_compile_option_name(size_t index) {
  const auto &options = embeddingOptions();
  return index < options.size() ? options[index]->name : nullptr;
}

partita_status *
partita_compile_options_add_mesh_axis(partita_compile_options *options,
                                      const char *name, int64_t size) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(name);
  return setChecked(__func__, options->options, "mesh",
                    [&](partita::CompileOptions &o) {
                      o.mesh.axes.push_back({name, size, ""});
                    });
}

partita_status *partita_compile_options_add_mesh_axis_with_role(
    partita_compile_options *options, const char *name, int64_t size,
    const char *role) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(name);
  PARTITA_CHECK_ARG(role);
  return setChecked(__func__, options->options, "mesh",
                    [&](partita::CompileOptions &o) {
                      o.mesh.axes.push_back({name, size, role});
                    });
}

partita_status *
partita_compile_options_clear_mesh(partita_compile_options *options) {
  PARTITA_CHECK_ARG(options);
  options->options.mesh.axes.clear();
  return nullptr;
}

partita_status *
partita_compile_options_set_target(partita_compile_options *options,
                                   const char *target) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(target);
  return setByName(__func__, options->options, "target", target);
}

partita_status *
partita_compile_options_set_bind(partita_compile_options *options,
                                 const char *name, int64_t value) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(name);
  return setChecked(__func__, options->options, "bind",
                    [&](partita::CompileOptions &o) { o.bind[name] = value; });
}

partita_status *
partita_compile_options_set_strategy(partita_compile_options *options,
                                     const char *strategy) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(strategy);
  return setByName(__func__, options->options, "strategy", strategy);
}

partita_status *
partita_compile_options_set_sp_mode(partita_compile_options *options,
                                    const char *sp_mode) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(sp_mode);
  // "" meant none before none had a name.
  return setByName(__func__, options->options, "sp-mode",
                   *sp_mode ? sp_mode : "none");
}

partita_status *
partita_compile_options_set_microbatches(partita_compile_options *options,
                                         int64_t microbatches) {
  PARTITA_CHECK_ARG(options);
  return setChecked(
      __func__, options->options, "microbatches",
      [&](partita::CompileOptions &o) { o.microbatches = microbatches; });
}

partita_status *
partita_compile_options_set_virtual_stages(partita_compile_options *options,
                                           int64_t virtual_stages) {
  PARTITA_CHECK_ARG(options);
  return setChecked(
      __func__, options->options, "virtual-stages",
      [&](partita::CompileOptions &o) { o.virtualStages = virtual_stages; });
}

partita_status *
partita_compile_options_set_dtype(partita_compile_options *options,
                                  const char *dtype) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(dtype);
  return setByName(__func__, options->options, "dtype", dtype);
}

partita_status *
partita_compile_options_set_cuda_archs(partita_compile_options *options,
                                       const char *const *archs, size_t count) {
  PARTITA_CHECK_ARG(options);
  if (count > 0)
    PARTITA_CHECK_ARG(archs);
  std::vector<std::string> list;
  for (size_t i = 0; i < count; ++i) {
    if (!archs[i])
      return makeError(std::string(__func__) + ": archs[" + std::to_string(i) +
                       "] is null");
    list.emplace_back(archs[i]);
  }
  options->options.cudaArchs = std::move(list);
  return nullptr;
}

partita_status *
partita_compile_options_set_overlap(partita_compile_options *options,
                                    int overlap) {
  PARTITA_CHECK_ARG(options);
  options->options.overlap = overlap != 0;
  return nullptr;
}

partita_status *
partita_compile_options_set_collective_matmul(partita_compile_options *options,
                                              const char *mode) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(mode);
  return setByName(__func__, options->options, "collective-matmul", mode);
}

partita_status *
partita_compile_options_set_cluster_json(partita_compile_options *options,
                                         const char *json) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(json);
  // Read now as a compile reads it, so that a bad field is this call's
  // error ("" is the default preset).
  if (*json) {
    llvm::Expected<mlir::partita::ClusterModel> cluster =
        mlir::partita::ClusterModel::fromJson(json);
    if (!cluster)
      return makeError(std::string(__func__) + ": " +
                       llvm::toString(cluster.takeError()));
  }
  options->options.clusterJson = json;
  return nullptr;
}

partita_status *
partita_compile_options_set_auto_mesh(partita_compile_options *options,
                                      int64_t devices) {
  PARTITA_CHECK_ARG(options);
  return setChecked(__func__, options->options, "devices",
                    [&](partita::CompileOptions &o) {
                      o.autoMesh = true;
                      o.devices = devices;
                    });
}

partita_status *
partita_compile_options_set_max_seq(partita_compile_options *options,
                                    int64_t max_seq) {
  PARTITA_CHECK_ARG(options);
  return setChecked(__func__, options->options, "max-seq",
                    [&](partita::CompileOptions &o) { o.maxSeq = max_seq; });
}

partita_status *
partita_compile_options_set_objective(partita_compile_options *options,
                                      const char *objective) {
  PARTITA_CHECK_ARG(options);
  PARTITA_CHECK_ARG(objective);
  return setByName(__func__, options->options, "objective", objective);
}

partita_status *
partita_compile_options_set_device_memory(partita_compile_options *options,
                                          double bytes) {
  PARTITA_CHECK_ARG(options);
  return setChecked(
      __func__, options->options, "device-memory",
      [&](partita::CompileOptions &o) { o.deviceMemoryBytes = bytes; });
}

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

partita_status *partita_compile_file(const char *path,
                                     const partita_compile_options *options,
                                     partita_compile_result **result) {
  PARTITA_CHECK_ARG(result);
  *result = nullptr;
  PARTITA_CHECK_ARG(path);
  partita::CompileOptions defaults;
  return compiled(
      partita::compileFile(path, options ? options->options : defaults),
      result);
}

partita_status *partita_compile_buffer(const void *data, size_t size,
                                       const char *name,
                                       const partita_compile_options *options,
                                       partita_compile_result **result) {
  PARTITA_CHECK_ARG(result);
  *result = nullptr;
  if (size > 0)
    PARTITA_CHECK_ARG(data);
  partita::CompileOptions defaults;
  static const char empty = 0;
  return compiled(partita::compileBuffer(data ? data : &empty, size,
                                         options ? options->options : defaults,
                                         name ? name : "model.onnx"),
                  result);
}

//===----------------------------------------------------------------------===//
// Planning
//===----------------------------------------------------------------------===//

partita_status *partita_plan_file(const char *path,
                                  const partita_compile_options *options,
                                  partita_plan_result **result) {
  PARTITA_CHECK_ARG(result);
  *result = nullptr;
  PARTITA_CHECK_ARG(path);
  partita::CompileOptions defaults;
  return planned(partita::planFile(path, options ? options->options : defaults),
                 result);
}

partita_status *partita_plan_buffer(const void *data, size_t size,
                                    const char *name,
                                    const partita_compile_options *options,
                                    partita_plan_result **result) {
  PARTITA_CHECK_ARG(result);
  *result = nullptr;
  if (size > 0)
    PARTITA_CHECK_ARG(data);
  partita::CompileOptions defaults;
  static const char empty = 0;
  return planned(partita::planBuffer(data ? data : &empty, size,
                                     options ? options->options : defaults,
                                     name ? name : "model.onnx"),
                 result);
}

void partita_plan_result_destroy(partita_plan_result *result) { delete result; }

int partita_plan_result_ok(const partita_plan_result *result) {
  return result && result->result.ok();
}

const char *partita_plan_result_error_text(const partita_plan_result *result) {
  return result ? result->errorText.c_str() : "";
}

const char *partita_plan_result_json(const partita_plan_result *result) {
  return result ? result->result.json.c_str() : "";
}

const char *partita_plan_result_table(const partita_plan_result *result) {
  return result ? result->result.table.c_str() : "";
}

void partita_compile_result_destroy(partita_compile_result *result) {
  delete result;
}

int partita_compile_result_ok(const partita_compile_result *result) {
  return result && result->result.ok();
}

const char *
partita_compile_result_error_text(const partita_compile_result *result) {
  return result ? result->errorText.c_str() : "";
}

size_t
partita_compile_result_diagnostic_count(const partita_compile_result *result) {
  return result ? result->result.diagnostics.size() : 0;
}

partita_status *
partita_compile_result_diagnostic(const partita_compile_result *result,
                                  size_t index, partita_severity *severity,
                                  const char **location, const char **message) {
  PARTITA_CHECK_ARG(result);
  const auto &diagnostics = result->result.diagnostics;
  if (index >= diagnostics.size())
    return makeError(std::string(__func__) + ": index " +
                     std::to_string(index) + " out of range (" +
                     std::to_string(diagnostics.size()) + " diagnostics)");
  const partita::Diagnostic &diagnostic = diagnostics[index];
  if (severity)
    *severity = static_cast<partita_severity>(diagnostic.severity);
  if (location)
    *location = diagnostic.location.c_str();
  if (message)
    *message = diagnostic.message.c_str();
  return nullptr;
}

partita_status *
partita_compile_result_artifact(const partita_compile_result *result,
                                partita_artifact **artifact) {
  PARTITA_CHECK_ARG(artifact);
  *artifact = nullptr;
  PARTITA_CHECK_ARG(result);
  if (!result->result.ok())
    return makeError(std::string(__func__) +
                     ": compilation failed, there is no artifact");
  *artifact = wrapArtifact(result->result.artifact);
  return *artifact ? nullptr : makeError("partita: out of memory");
}

//===----------------------------------------------------------------------===//
// Artifacts
//===----------------------------------------------------------------------===//

void partita_artifact_destroy(partita_artifact *artifact) { delete artifact; }

const char *partita_artifact_report(const partita_artifact *artifact) {
  return artifact ? artifact->artifact->report().c_str() : "";
}

partita_status *partita_artifact_save(const partita_artifact *artifact,
                                      const char *path) {
  PARTITA_CHECK_ARG(artifact);
  PARTITA_CHECK_ARG(path);
  return fromStatus(artifact->artifact->save(path));
}

size_t partita_artifact_file_count(const partita_artifact *artifact) {
  return artifact ? artifact->files.size() : 0;
}

partita_status *partita_artifact_file(const partita_artifact *artifact,
                                      size_t index, const char **path,
                                      const void **data, size_t *size) {
  PARTITA_CHECK_ARG(artifact);
  if (index >= artifact->files.size())
    return makeError(std::string(__func__) + ": index " +
                     std::to_string(index) + " out of range (" +
                     std::to_string(artifact->files.size()) + " files)");
  const auto &file = *artifact->files[index];
  if (path)
    *path = file.first.c_str();
  if (data)
    *data = file.second.data();
  if (size)
    *size = file.second.size();
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Sessions
//===----------------------------------------------------------------------===//

partita_session_options *partita_session_options_create(void) {
  return new (std::nothrow) partita_session_options;
}

void partita_session_options_destroy(partita_session_options *options) {
  delete options;
}

partita_status *
partita_session_options_set_threads_per_rank(partita_session_options *options,
                                             unsigned threads) {
  PARTITA_CHECK_ARG(options);
  options->options.threadsPerRank = threads;
  return nullptr;
}

partita_status *
partita_session_options_set_timeout_seconds(partita_session_options *options,
                                            double seconds) {
  PARTITA_CHECK_ARG(options);
  if (!(seconds > 0))
    return makeError(std::string(__func__) + ": the timeout must be positive");
  options->options.timeoutSeconds = seconds;
  return nullptr;
}

partita_status *
partita_session_options_set_verify_weights(partita_session_options *options,
                                           int verify) {
  PARTITA_CHECK_ARG(options);
  options->options.verifyWeights = verify != 0;
  return nullptr;
}

partita_status *
partita_session_load_path(const char *path,
                          const partita_session_options *options,
                          partita_session **session) {
  PARTITA_CHECK_ARG(session);
  *session = nullptr;
  PARTITA_CHECK_ARG(path);
  auto handle = std::make_unique<partita_session>();
  partita::SessionOptions defaults;
  if (partita_status *error = fromStatus(partita::Session::load(
          path, options ? options->options : defaults, handle->session)))
    return error;
  *session = handle.release();
  return nullptr;
}

partita_status *
partita_session_load_artifact(const partita_artifact *artifact,
                              const partita_session_options *options,
                              partita_session **session) {
  PARTITA_CHECK_ARG(session);
  *session = nullptr;
  PARTITA_CHECK_ARG(artifact);
  auto handle = std::make_unique<partita_session>();
  partita::SessionOptions defaults;
  if (partita_status *error = fromStatus(partita::Session::load(
          *artifact->artifact, options ? options->options : defaults,
          handle->session)))
    return error;
  *session = handle.release();
  return nullptr;
}

void partita_session_destroy(partita_session *session) { delete session; }

const char *partita_session_target(const partita_session *session) {
  return session ? session->session->target().c_str() : "";
}

size_t partita_session_input_count(const partita_session *session) {
  return session ? session->session->inputs().size() : 0;
}

size_t partita_session_output_count(const partita_session *session) {
  return session ? session->session->outputs().size() : 0;
}

partita_status *partita_session_input(const partita_session *session,
                                      size_t index, partita_tensor *info) {
  PARTITA_CHECK_ARG(session);
  PARTITA_CHECK_ARG(info);
  const auto &inputs = session->session->inputs();
  if (index >= inputs.size())
    return makeError(std::string(__func__) + ": index " +
                     std::to_string(index) + " out of range (" +
                     std::to_string(inputs.size()) + " inputs)");
  describe(inputs[index], info);
  return nullptr;
}

partita_status *partita_session_output(const partita_session *session,
                                       size_t index, partita_tensor *info) {
  PARTITA_CHECK_ARG(session);
  PARTITA_CHECK_ARG(info);
  const auto &outputs = session->session->outputs();
  if (index >= outputs.size())
    return makeError(std::string(__func__) + ": index " +
                     std::to_string(index) + " out of range (" +
                     std::to_string(outputs.size()) + " outputs)");
  describe(outputs[index], info);
  return nullptr;
}

partita_status *partita_session_run(partita_session *session,
                                    const partita_tensor *inputs,
                                    size_t num_inputs,
                                    const partita_tensor *outputs,
                                    size_t num_outputs) {
  PARTITA_CHECK_ARG(session);
  if (num_inputs > 0)
    PARTITA_CHECK_ARG(inputs);
  if (num_outputs > 0)
    PARTITA_CHECK_ARG(outputs);
  // The counts say how many tensors the arrays hold; beyond the model's
  // they are a caller's mistake, refused before anything is sized by them.
  size_t modelInputs = session->session->inputs().size();
  size_t modelOutputs = session->session->outputs().size();
  if (num_inputs > modelInputs || num_outputs > modelOutputs)
    return makeError(std::string(__func__) + ": " + std::to_string(num_inputs) +
                     " inputs and " + std::to_string(num_outputs) +
                     " outputs given; the model has " +
                     std::to_string(modelInputs) + " and " +
                     std::to_string(modelOutputs));
  std::vector<partita::TensorRef> inputRefs(num_inputs),
      outputRefs(num_outputs);
  for (size_t i = 0; i < num_inputs; ++i)
    if (partita_status *error =
            toTensorRef(__func__, "inputs", i, inputs[i], inputRefs[i]))
      return error;
  for (size_t i = 0; i < num_outputs; ++i)
    if (partita_status *error =
            toTensorRef(__func__, "outputs", i, outputs[i], outputRefs[i]))
      return error;
  return fromStatus(session->session->run(inputRefs, outputRefs));
}

namespace {

/// A prompt's ids and optional mask as the C++ API takes them.
partita_status *toPrompt(const char *function, const partita_tensor &ids,
                         const partita_tensor *mask, partita::TensorRef &idsRef,
                         partita::TensorRef &maskRef) {
  if (partita_status *error =
          toTensorRef(function, "input_ids", 0, ids, idsRef))
    return error;
  if (mask)
    return toTensorRef(function, "attention_mask", 0, *mask, maskRef);
  return nullptr;
}

} // namespace

partita_status *partita_session_generate(partita_session *session,
                                         const partita_tensor *input_ids,
                                         const partita_tensor *attention_mask,
                                         int64_t max_new_tokens,
                                         int64_t *tokens, size_t capacity) {
  PARTITA_CHECK_ARG(session);
  PARTITA_CHECK_ARG(input_ids);
  PARTITA_CHECK_ARG(tokens);
  partita::TensorRef ids, mask;
  if (partita_status *error =
          toPrompt(__func__, *input_ids, attention_mask, ids, mask))
    return error;
  partita::Session::Generated out;
  if (partita_status *error = fromStatus(session->session->generate(
          ids, attention_mask ? &mask : nullptr, max_new_tokens,
          /*keepLogits=*/false, out)))
    return error;
  if (out.tokens.size() > capacity)
    return makeError(
        std::string(__func__) + ": " + std::to_string(out.tokens.size()) +
        " tokens do not fit the capacity of " + std::to_string(capacity));
  std::copy(out.tokens.begin(), out.tokens.end(), tokens);
  return nullptr;
}

partita_status *partita_session_prefill(partita_session *session,
                                        const partita_tensor *input_ids,
                                        const partita_tensor *attention_mask,
                                        const partita_tensor *logits) {
  PARTITA_CHECK_ARG(session);
  PARTITA_CHECK_ARG(input_ids);
  PARTITA_CHECK_ARG(logits);
  partita::TensorRef ids, mask, out;
  if (partita_status *error =
          toPrompt(__func__, *input_ids, attention_mask, ids, mask))
    return error;
  if (partita_status *error = toTensorRef(__func__, "logits", 0, *logits, out))
    return error;
  return fromStatus(
      session->session->prefill(ids, attention_mask ? &mask : nullptr, out));
}

partita_status *partita_session_step(partita_session *session,
                                     const partita_tensor *tokens,
                                     const partita_tensor *logits) {
  PARTITA_CHECK_ARG(session);
  PARTITA_CHECK_ARG(tokens);
  PARTITA_CHECK_ARG(logits);
  partita::TensorRef in, out;
  if (partita_status *error = toTensorRef(__func__, "tokens", 0, *tokens, in))
    return error;
  if (partita_status *error = toTensorRef(__func__, "logits", 0, *logits, out))
    return error;
  return fromStatus(session->session->step(in, out));
}

partita_status *partita_session_train_step(partita_session *session,
                                           const partita_tensor *batch,
                                           size_t num_batch, double lr,
                                           float *loss) {
  PARTITA_CHECK_ARG(session);
  PARTITA_CHECK_ARG(loss);
  if (num_batch > 0)
    PARTITA_CHECK_ARG(batch);
  size_t inputs = session->session->inputs().size();
  if (num_batch > inputs)
    return makeError(std::string(__func__) + ": " + std::to_string(num_batch) +
                     " tensors given; the step has " + std::to_string(inputs) +
                     " inputs");
  if (!std::isnan(lr) && !(std::isfinite(lr) && lr >= 0))
    return makeError(std::string(__func__) +
                     ": lr must be a finite number of 0 or more, or NaN for "
                     "the compiled one");
  std::vector<partita::TensorRef> refs(num_batch);
  for (size_t i = 0; i < num_batch; ++i)
    if (partita_status *error =
            toTensorRef(__func__, "batch", i, batch[i], refs[i]))
      return error;
  return fromStatus(session->session->trainStep(refs, lr, *loss));
}

int64_t partita_session_training_steps(const partita_session *session) {
  return session ? session->session->trainingSteps() : 0;
}

partita_status *partita_session_save_checkpoint(const partita_session *session,
                                                const char *path) {
  PARTITA_CHECK_ARG(session);
  PARTITA_CHECK_ARG(path);
  return fromStatus(session->session->saveCheckpoint(path));
}

partita_status *partita_session_load_checkpoint(partita_session *session,
                                                const char *path) {
  PARTITA_CHECK_ARG(session);
  PARTITA_CHECK_ARG(path);
  return fromStatus(session->session->loadCheckpoint(path));
}

} // extern "C"
