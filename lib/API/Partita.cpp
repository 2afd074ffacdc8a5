//===- Partita.cpp - Partita's C++ embedding API --------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The API over the compiler driver (lib/Driver) and the runtime's Runner.
// A compile runs in a fresh MLIRContext whose diagnostics are collected as
// data; the artifact is written to a private temporary directory and read
// back into memory. A session runs an artifact from its directory (weights
// are memory-mapped), so one held in memory is saved to a private temporary
// directory first, removed with the session.
//
//===----------------------------------------------------------------------===//

#include "partita/Partita.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/Timing.h"
#include "partita/Driver/Driver.h"
#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/Generation.h"
#include "partita/runtime/LoadedArtifact.h"
#include "partita/runtime/Runner.h"
#include "partita/runtime/Training.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>

using namespace partita;
namespace rt = partita::runtime;
namespace fs = llvm::sys::fs;

namespace {

/// A directory removed (with everything in it) when this goes out of scope.
class TemporaryDirectory {
public:
  TemporaryDirectory() = default;
  TemporaryDirectory(TemporaryDirectory &&other) : path(std::move(other.path)) {
    other.path.clear();
  }
  ~TemporaryDirectory() {
    if (!path.empty())
      fs::remove_directories(path);
  }
  Status create(const llvm::Twine &prefix) {
    llvm::SmallString<128> made;
    if (std::error_code error = fs::createUniqueDirectory(prefix, made))
      return Status::error("cannot create a temporary directory: " +
                           error.message());
    path = std::string(made);
    return Status();
  }
  std::string path;
};

/// Every regular file under `root`, by path relative to it.
Status readTree(const std::string &root,
                std::map<std::string, std::string> &files) {
  std::error_code error;
  for (fs::recursive_directory_iterator it(root, error), end;
       it != end && !error; it.increment(error)) {
    if (it->type() != fs::file_type::regular_file)
      continue;
    auto buffer = llvm::MemoryBuffer::getFile(it->path(), /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return Status::error("cannot read " + it->path() + ": " +
                           buffer.getError().message());
    llvm::StringRef relative =
        llvm::StringRef(it->path()).drop_front(root.size() + 1);
    files[relative.str()] = (*buffer)->getBuffer().str();
  }
  if (error)
    return Status::error("cannot list " + root + ": " + error.message());
  return Status();
}

Status writeFile(const std::string &path, const std::string &contents) {
  std::error_code error =
      fs::create_directories(llvm::sys::path::parent_path(path));
  if (error)
    return Status::error(path + ": " + error.message());
  llvm::raw_fd_ostream os(path, error);
  if (error)
    return Status::error(path + ": " + error.message());
  os << contents;
  os.close();
  if (os.has_error()) {
    os.clear_error();
    return Status::error(path + ": write failed");
  }
  return Status();
}

std::string severityName(Diagnostic::Severity severity) {
  switch (severity) {
  case Diagnostic::Severity::Error:
    return "error";
  case Diagnostic::Severity::Warning:
    return "warning";
  case Diagnostic::Severity::Note:
    return "note";
  case Diagnostic::Severity::Remark:
    return "remark";
  }
  return "error";
}

Diagnostic::Severity severityOf(mlir::DiagnosticSeverity severity) {
  switch (severity) {
  case mlir::DiagnosticSeverity::Error:
    return Diagnostic::Severity::Error;
  case mlir::DiagnosticSeverity::Warning:
    return Diagnostic::Severity::Warning;
  case mlir::DiagnosticSeverity::Note:
    return Diagnostic::Severity::Note;
  case mlir::DiagnosticSeverity::Remark:
    return Diagnostic::Severity::Remark;
  }
  return Diagnostic::Severity::Error;
}

/// The driver's options: the API's, which the driver checks against their
/// declarations as it would the command line's.
void fillDriverOptions(const CompileOptions &options,
                       mlir::partita::DriverOptions &driver) {
  static_cast<CompilerOptions &>(driver) = options;
  // Only partita-compile reads these.
  const CompilerOptions defaults;
  driver.emit = defaults.emit;
  driver.explain = defaults.explain;
  driver.explainPlan = defaults.explainPlan;
  driver.traceFile = defaults.traceFile;
  driver.reportFile = defaults.reportFile;
}

/// Runs the driver in a fresh context, collecting its diagnostics (an
/// error is added when it failed without one).
mlir::LogicalResult runDriver(const mlir::partita::DriverOptions &driver,
                              mlir::partita::DriverResult &driven,
                              std::vector<Diagnostic> &diagnostics) {
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  mlir::partita::loadCompilerDialects(context);
  context.printOpOnDiagnostic(false);
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    auto record = [&](mlir::Diagnostic &one) {
      diagnostics.push_back({severityOf(one.getSeverity()),
                             mlir::partita::formatLocation(one.getLocation()),
                             one.str()});
    };
    record(d);
    for (mlir::Diagnostic &note : d.getNotes())
      record(note);
    return mlir::success();
  });
  mlir::DefaultTimingManager timing;
  mlir::TimingScope root = timing.getRootScope();
  if (succeeded(mlir::partita::runCompiler(context, driver, driven, root)))
    return mlir::success();
  if (llvm::none_of(diagnostics, [](const Diagnostic &d) {
        return d.severity == Diagnostic::Severity::Error;
      }))
    diagnostics.push_back(
        {Diagnostic::Severity::Error, "", "compilation failed"});
  return mlir::failure();
}

CompileResult compile(mlir::partita::DriverOptions driver,
                      const CompileOptions &options) {
  CompileResult result;
  auto failWith = [&](const std::string &message) {
    result.diagnostics.push_back({Diagnostic::Severity::Error, "", message});
    return result;
  };
  fillDriverOptions(options, driver);

  TemporaryDirectory work;
  if (Status made = work.create("partita-compile"); !made)
    return failWith(made.message());
  driver.output = work.path + "/artifact";
  driver.reportFile = work.path + "/report.json";

  mlir::partita::DriverResult driven;
  if (failed(runDriver(driver, driven, result.diagnostics)))
    return result;
  std::map<std::string, std::string> files;
  if (Status read = readTree(driver.output, files); !read)
    return failWith(read.message());
  auto report = llvm::MemoryBuffer::getFile(driver.reportFile);
  if (!report)
    return failWith("cannot read the report: " + report.getError().message());
  result.artifact = std::make_shared<const Artifact>(
      std::move(files), (*report)->getBuffer().str());
  return result;
}

/// The driver's options for a model file, or for one held in memory
/// (`name` stands for its file in diagnostics).
mlir::partita::DriverOptions fileInput(const std::string &path) {
  mlir::partita::DriverOptions driver;
  driver.input = path;
  return driver;
}

mlir::partita::DriverOptions bufferInput(const void *data, size_t size,
                                         const std::string &name) {
  mlir::partita::DriverOptions driver;
  driver.input = name;
  driver.inputBuffer =
      std::string(static_cast<const char *>(data), data ? size : 0);
  return driver;
}

PlanCandidate toApi(const mlir::partita::PlanCandidate &c) {
  PlanCandidate out;
  for (auto [name, size] :
       {std::pair{"dp", c.dp}, std::pair{"pp", c.pp}, std::pair{"ep", c.ep},
        std::pair{"sp", c.sp}, std::pair{"tp", c.tp}})
    if (size > 1)
      out.mesh.push_back({name, size, ""});
  out.spMode = c.spMode;
  out.microbatches = c.microbatches;
  out.virtualStages = c.virtualStages;
  out.collectiveMatmul = c.collectiveMatmul;
  out.flags = c.flags();
  out.feasible = c.feasible;
  out.reason = c.reason;
  out.stepSeconds = c.stepSeconds;
  out.computeSeconds = c.computeSeconds;
  out.communicationSeconds = c.communicationSeconds;
  out.exposedCommunicationSeconds = c.exposedCommunicationSeconds;
  out.bubbleSeconds = c.bubbleSeconds;
  out.weightBytes = c.weightBytes;
  out.activationBytes = c.activationBytes;
  out.keyValueCacheBytes = c.keyValueCacheBytes;
  out.memoryBytes = c.memoryBytes;
  out.tokensPerSecond = c.tokensPerSecond;
  out.batch = c.batch;
  return out;
}

PlanResult plan(mlir::partita::DriverOptions driver,
                const CompileOptions &options) {
  PlanResult result;
  CompileOptions planning = options;
  planning.autoMesh = true;
  fillDriverOptions(planning, driver);
  driver.emit = mlir::partita::EmitStage::Plan;
  std::string table;
  llvm::raw_string_ostream tableStream(table);
  driver.emitStream = &tableStream;
  mlir::partita::DriverResult driven;
  if (failed(runDriver(driver, driven, result.diagnostics)) || !driven.plan)
    return result;
  for (const mlir::partita::PlanCandidate &c : driven.plan->candidates)
    result.candidates.push_back(toApi(c));
  result.rejected = driven.plan->rejected;
  result.table = std::move(driven.planExplanation);
  result.json =
      llvm::formatv("{0:2}", llvm::json::Value(mlir::partita::planToJson(
                                 *driven.plan, /*limit=*/std::nullopt)));
  return result;
}

DType fromRuntime(rt::DType dtype) {
  switch (dtype) {
  case program::F16:
    return DType::F16;
  case program::BF16:
    return DType::BF16;
  case program::I64:
    return DType::I64;
  case program::I32:
    return DType::I32;
  case program::I8:
    return DType::I8;
  case program::BOOL:
    return DType::Bool;
  default:
    return DType::F32;
  }
}

rt::DType toRuntime(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return program::F32;
  case DType::F16:
    return program::F16;
  case DType::BF16:
    return program::BF16;
  case DType::I64:
    return program::I64;
  case DType::I32:
    return program::I32;
  case DType::I8:
    return program::I8;
  case DType::Bool:
    return program::BOOL;
  }
  return program::DTYPE_UNSPECIFIED;
}

std::vector<TensorInfo> infos(const std::vector<rt::TensorSpec> &specs) {
  std::vector<TensorInfo> result;
  for (const rt::TensorSpec &spec : specs)
    result.push_back({spec.name, fromRuntime(spec.dtype), spec.shape});
  return result;
}

} // namespace

std::string Diagnostic::str() const {
  return (location.empty() ? std::string("partita") : location) + ": " +
         severityName(severity) + ": " + message;
}

static std::string diagnosticLines(const std::vector<Diagnostic> &all) {
  std::string text;
  for (const Diagnostic &d : all)
    text += d.str() + "\n";
  return text;
}

std::string CompileResult::errorText() const {
  return diagnosticLines(diagnostics);
}

std::string PlanResult::errorText() const {
  return diagnosticLines(diagnostics);
}

Artifact::Artifact(std::map<std::string, std::string> files, std::string report)
    : contents(std::move(files)), reportJson(std::move(report)) {}

Status Artifact::save(const std::string &path) const {
  if (path.empty())
    return Status::error("save: no path given");
  bool existing = fs::exists(path);
  if (existing && !fs::exists(path + "/manifest.json"))
    return Status::error(path +
                         ": exists and is not a Partita artifact; refusing "
                         "to replace it");
  // Written beside the destination, then renamed over it: a reader sees the
  // old artifact or the new one, never half of one.
  llvm::SmallString<256> staging;
  llvm::SmallString<256> absolute(path);
  fs::make_absolute(absolute);
  if (std::error_code error = fs::createUniqueDirectory(
          llvm::Twine(absolute) + ".partial", staging))
    return Status::error(path + ": " + error.message());
  std::map<std::string, std::string> all = contents;
  if (!reportJson.empty())
    all.emplace("report.json", reportJson);
  for (const auto &[relative, bytes] : all)
    if (Status written =
            writeFile(std::string(staging) + "/" + relative, bytes);
        !written) {
      fs::remove_directories(staging);
      return written;
    }
  if (existing)
    fs::remove_directories(path);
  if (std::error_code error = fs::rename(staging, path)) {
    fs::remove_directories(staging);
    return Status::error(path + ": " + error.message());
  }
  return Status();
}

Status Artifact::load(const std::string &path,
                      std::shared_ptr<const Artifact> &artifact) {
  if (!fs::exists(path + "/manifest.json"))
    return Status::error(path + ": not a Partita artifact (no manifest.json)");
  std::map<std::string, std::string> files;
  if (Status read = readTree(path, files); !read)
    return read;
  std::string report;
  if (auto found = files.find("report.json"); found != files.end()) {
    report = std::move(found->second);
    files.erase(found);
  }
  artifact =
      std::make_shared<const Artifact>(std::move(files), std::move(report));
  return Status();
}

CompileResult partita::compileFile(const std::string &path,
                                   const CompileOptions &options) {
  return compile(fileInput(path), options);
}

PlanResult partita::planFile(const std::string &path,
                             const CompileOptions &options) {
  return plan(fileInput(path), options);
}

PlanResult partita::planBuffer(const void *data, size_t size,
                               const CompileOptions &options,
                               const std::string &name) {
  return plan(bufferInput(data, size, name), options);
}

CompileResult partita::compileBuffer(const void *data, size_t size,
                                     const CompileOptions &options,
                                     const std::string &name) {
  return compile(bufferInput(data, size, name), options);
}

const char *partita::dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::I8:
    return "i8";
  case DType::Bool:
    return "bool";
  }
  return "?";
}

size_t partita::dtypeSize(DType dtype) {
  return rt::dtypeSize(toRuntime(dtype));
}

const char *partita::version() { return PARTITA_VERSION; }

struct Session::Impl {
  /// The artifact's directory when the session made it (removed last).
  TemporaryDirectory owned;
  std::unique_ptr<rt::LoadedArtifact> artifact;
  std::unique_ptr<rt::Runner> runner;
  /// Serving artifacts: the generation over `runner`.
  std::unique_ptr<rt::Generation> generation;
  /// Training artifacts: the steps over `runner`.
  std::unique_ptr<rt::Trainer> trainer;
  std::vector<TensorInfo> inputs, outputs;
};

Session::Session() : impl(std::make_unique<Impl>()) {}
Session::~Session() {
  // The runner reads the artifact, which reads the directory.
  if (impl) {
    impl->trainer.reset();
    impl->generation.reset();
    impl->runner.reset();
    impl->artifact.reset();
  }
}

Status Session::open(const std::string &path, const SessionOptions &options) {
  Impl &impl = *this->impl;
  rt::ArtifactOpenOptions openOptions;
  openOptions.verifyWeights = options.verifyWeights;
  if (rt::Status opened =
          rt::LoadedArtifact::open(path, impl.artifact, openOptions);
      !opened)
    return Status::error(opened.message());
  rt::RunnerOptions runnerOptions;
  runnerOptions.threadsPerRank = options.threadsPerRank;
  runnerOptions.timeoutSeconds = options.timeoutSeconds;
  // Every rank of a cuda artifact shares GPU 0 in this process.
  runnerOptions.singleGpu = impl.artifact->manifest().target == "cuda";
  if (rt::Status created =
          rt::Runner::create(*impl.artifact, runnerOptions, impl.runner);
      !created)
    return Status::error(created.message());
  if (impl.artifact->manifest().serving)
    if (rt::Status made = rt::Generation::create(*impl.runner, impl.generation);
        !made)
      return Status::error(made.message());
  if (impl.artifact->manifest().training)
    if (rt::Status made = rt::Trainer::create(*impl.runner, impl.trainer);
        !made)
      return Status::error(made.message());
  impl.inputs = infos(impl.artifact->manifest().inputs);
  impl.outputs = infos(impl.artifact->manifest().outputs);
  return Status();
}

Status Session::load(const std::string &path, const SessionOptions &options,
                     std::unique_ptr<Session> &session) {
  std::unique_ptr<Session> made(new Session());
  if (Status opened = made->open(path, options); !opened)
    return opened;
  session = std::move(made);
  return Status();
}

Status Session::load(const Artifact &artifact, const SessionOptions &options,
                     std::unique_ptr<Session> &session) {
  std::unique_ptr<Session> made(new Session());
  if (Status created = made->impl->owned.create("partita-session"); !created)
    return created;
  std::string path = made->impl->owned.path + "/artifact";
  if (Status saved = artifact.save(path); !saved)
    return saved;
  if (Status opened = made->open(path, options); !opened)
    return opened;
  session = std::move(made);
  return Status();
}

const std::vector<TensorInfo> &Session::inputs() const { return impl->inputs; }
const std::vector<TensorInfo> &Session::outputs() const {
  return impl->outputs;
}
const std::string &Session::target() const {
  return impl->artifact->manifest().target;
}

Status Session::run(const std::vector<TensorRef> &inputs,
                    const std::vector<TensorRef> &outputs) {
  auto convert = [](const std::vector<TensorRef> &refs) {
    std::vector<rt::NamedTensor> named;
    for (const TensorRef &ref : refs) {
      rt::Tensor tensor;
      tensor.data = ref.data;
      tensor.dtype = toRuntime(ref.dtype);
      tensor.shape = ref.shape;
      named.push_back({ref.name, tensor});
    }
    return named;
  };
  if (impl->trainer)
    return Status::error("a training artifact runs one step at a time: "
                         "call trainStep with a batch");
  for (const auto *refs : {&inputs, &outputs})
    for (const TensorRef &ref : *refs)
      if (!ref.data &&
          rt::Tensor{nullptr, toRuntime(ref.dtype), ref.shape}.numElements() !=
              0)
        return Status::error("tensor '" + ref.name + "' has no memory");
  if (rt::Status ran = impl->runner->run(convert(inputs), convert(outputs));
      !ran)
    return Status::error(ran.message());
  return Status();
}

namespace {

rt::Tensor toTensor(const TensorRef &ref) {
  rt::Tensor tensor;
  tensor.data = ref.data;
  tensor.dtype = toRuntime(ref.dtype);
  tensor.shape = ref.shape;
  return tensor;
}

Status notServing() {
  return Status::error("the artifact was not compiled with --max-seq "
                       "(CompileOptions::maxSeq): it has no decode program "
                       "or KV cache to generate with");
}

Status fromRuntime(const rt::Status &status) {
  return status ? Status() : Status::error(status.message());
}

} // namespace

bool Session::serving() const { return impl->generation != nullptr; }

int64_t Session::maxSeq() const {
  const auto &serving = impl->artifact->manifest().serving;
  return serving ? serving->maxSeq : 0;
}

int64_t Session::cachePosition() const {
  return impl->generation ? impl->generation->position() : 0;
}

Status Session::generate(const TensorRef &inputIds,
                         const TensorRef *attentionMask, int64_t maxNewTokens,
                         bool keepLogits, Generated &out) {
  if (!impl->generation)
    return notServing();
  rt::Tensor ids = toTensor(inputIds), mask;
  if (attentionMask)
    mask = toTensor(*attentionMask);
  rt::GenerateOptions options;
  options.maxNewTokens = maxNewTokens;
  options.keepLogits = keepLogits;
  rt::GenerateResult result;
  if (Status status = fromRuntime(impl->generation->generate(
          ids, attentionMask ? &mask : nullptr, options, result));
      !status)
    return status;
  out.tokens = std::move(result.tokens);
  out.batch = result.batch;
  out.generated = result.generated;
  out.logits = std::move(result.logits);
  out.vocab = result.vocab;
  out.prefillSeconds = result.prefillSeconds;
  out.stepSeconds = std::move(result.stepSeconds);
  return Status();
}

Status Session::prefill(const TensorRef &inputIds,
                        const TensorRef *attentionMask,
                        const TensorRef &logits) {
  if (!impl->generation)
    return notServing();
  rt::Tensor mask;
  if (attentionMask)
    mask = toTensor(*attentionMask);
  return fromRuntime(impl->generation->prefill(
      toTensor(inputIds), attentionMask ? &mask : nullptr, toTensor(logits)));
}

Status Session::step(const TensorRef &tokens, const TensorRef &logits) {
  if (!impl->generation)
    return notServing();
  return fromRuntime(
      impl->generation->step(toTensor(tokens), toTensor(logits)));
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

namespace {

Status notTraining() {
  return Status::error("the artifact was not compiled with --train "
                       "(CompileOptions::train): it has no training step");
}

} // namespace

bool Session::training() const { return impl->trainer != nullptr; }

int64_t Session::trainingSteps() const {
  return impl->trainer ? impl->trainer->steps() : 0;
}

std::vector<TensorInfo> Session::batchInputs() const {
  std::vector<TensorInfo> batch;
  if (!impl->trainer)
    return batch;
  for (const std::string &name : impl->trainer->batchInputs())
    for (const TensorInfo &info : impl->inputs)
      if (info.name == name)
        batch.push_back(info);
  return batch;
}

Status Session::trainStep(const std::vector<TensorRef> &batch, double lr,
                          float &loss) {
  if (!impl->trainer)
    return notTraining();
  std::vector<rt::NamedTensor> named;
  for (const TensorRef &ref : batch) {
    if (!ref.data &&
        rt::Tensor{nullptr, toRuntime(ref.dtype), ref.shape}.numElements() != 0)
      return Status::error("tensor '" + ref.name + "' has no memory");
    named.push_back({ref.name, toTensor(ref)});
  }
  std::optional<double> rate;
  if (!std::isnan(lr))
    rate = lr;
  return fromRuntime(impl->trainer->step(named, rate, loss));
}

Status Session::saveCheckpoint(const std::string &path) const {
  if (!impl->trainer)
    return notTraining();
  return fromRuntime(rt::saveCheckpoint(*impl->runner, *impl->trainer, path));
}

Status Session::loadCheckpoint(const std::string &path) {
  if (!impl->trainer)
    return notTraining();
  return fromRuntime(rt::loadCheckpoint(*impl->runner, *impl->trainer, path));
}
