//===- partita-run.cpp - runs a Partita artifact --------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// partita-run ART --input NAME=FILE ... [--output-dir DIR] [--ranks N]
//             [--single-gpu] [--repeat N] [--warmup N] [--timeout SECONDS]
//             [--threads N] [--verify]
// partita-run ART --generate N --input input_ids=FILE
//             [--input attention_mask=FILE] [--dump-logits] [--output-dir DIR]
//
// Loads an artifact and runs its ranks, each reading its shard of every
// input, assembles each output from the ranks' shards, writes it as
// DIR/NAME.npy and prints one summary line per output (and the latency with
// --repeat). Exit status: 0 ok, 1 error.
//
// A host artifact runs all its ranks as threads of this process. A cuda
// artifact runs one process per GPU over NCCL: started here, one child per
// rank (this program again, with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR
// and MASTER_PORT set), or joined from a launcher's environment (torchrun,
// mpirun, srun); rank 0 gathers the outputs through the bootstrap store.
// --single-gpu runs every rank of a cuda artifact as threads sharing GPU 0.
// Every run goes through the runtime's Runner (Runner.h): Runner::create
// holds every rank in this process, Runner::join one rank of many; this
// file parses the command line, reads and writes tensor files, prints and
// starts the ranks' processes.
//
// --generate runs a serving artifact (partita-compile --max-seq): the
// prefill of the prompt, then one decode step per token, greedily
// (Generation.h), and prints the time to the first token, the latency of a
// step and the throughput. Without it, a serving artifact's prefill runs
// once, as any artifact's program.
//
//===----------------------------------------------------------------------===//

#include "partita/Support/Version.h"
#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/FileUtil.h"
#include "partita/runtime/Float16.h"
#include "partita/runtime/Generation.h"
#include "partita/runtime/LoadedArtifact.h"
#include "partita/runtime/Runner.h"
#include "partita/runtime/Training.h"
#include "partita/runtime/distributed/Launcher.h"
#include "partita/runtime/tooling/TensorFile.h"
#include "partita/runtime/tooling/TensorSummary.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

constexpr const char *kUsage =
    "usage: partita-run ART --input NAME=FILE ... [--output-dir DIR]\n"
    "                   [--ranks N] [--single-gpu] [--repeat N] [--warmup N]\n"
    "                   [--timeout SECONDS] [--threads N] [--verify]\n"
    "       partita-run ART --generate N --input input_ids=FILE\n"
    "                   [--input attention_mask=FILE] [--dump-logits]\n"
    "                   [--output-dir DIR]\n"
    "       partita-run ART --train-steps N --data DIR [--lr-schedule S]\n"
    "                   [--save DIR] [--load DIR] [--output-dir DIR]\n"
    "\n"
    "Runs the artifact directory ART (written by partita-compile). A host\n"
    "artifact runs its ranks as threads of this process; a cuda artifact\n"
    "one process per GPU (started here, or joined as the rank that RANK,\n"
    "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT or the mpirun and\n"
    "SLURM variables name).\n"
    "  --input NAME=FILE   a model input, from a .npy file or an ONNX\n"
    "                      TensorProto .pb file (once per input)\n"
    "  --output-dir DIR    write each output as DIR/NAME.npy\n"
    "  --ranks N           the number of ranks (default: the artifact's)\n"
    "  --single-gpu        run every rank of a cuda artifact as threads\n"
    "                      sharing GPU 0\n"
    "  --repeat N          time N runs and print the latency\n"
    "  --warmup N          untimed runs before them (default 1 with --repeat)\n"
    "  --timeout SECONDS   deadline of every wait between ranks, and of\n"
    "                      loading, reading inputs and writing outputs\n"
    "                      (default 120)\n"
    "  --threads N         kernel threads per rank (default: cores / ranks)\n"
    "  --verify            also hash every weight byte at load (the manifest\n"
    "                      and programs are always verified, the weights\n"
    "                      files' headers and bounds always checked)\n"
    "  --generate N        generate N tokens greedily with a serving artifact\n"
    "                      (partita-compile --max-seq) from the prompt\n"
    "                      input_ids (and attention_mask, default all ones),\n"
    "                      [batch, at most the compiled prompt length]; write\n"
    "                      DIR/tokens.npy (i64 [batch, N]) and print the time\n"
    "                      to the first token, the per-token latency and the\n"
    "                      throughput\n"
    "  --dump-logits       with --generate: also write DIR/logits.npy (f32\n"
    "                      [N, batch, vocab])\n"
    "  --train-steps N     run N steps of a training artifact "
    "(partita-compile\n"
    "                      --train) on the batches of --data; writes\n"
    "                      DIR/loss.npy (f32 [N], each step's loss before its\n"
    "                      update) and the last step's other outputs\n"
    "  --data DIR          the batches: DIR's .npz files in name order, "
    "cycled,\n"
    "                      each an array per batch input\n"
    "  --lr-schedule S     constant (default), cosine:warmup=N,total=M,min=X "
    "or\n"
    "                      linear:warmup=N,total=M, peaking at the compiled "
    "lr\n"
    "  --version           print the version and exit\n";

struct Options {
  std::string artifact;
  std::vector<std::pair<std::string, std::string>> inputs;
  std::string outputDirectory;
  int64_t ranks = -1;
  int64_t repeat = 0;
  int64_t warmup = -1;
  double timeoutSeconds = 120;
  int64_t threads = 0;
  bool singleGpu = false;
  bool verifyWeights = false;
  bool version = false;
  /// --generate N; -1 without it.
  int64_t generate = -1;
  bool dumpLogits = false;
  /// --train-steps N; -1 without it.
  int64_t trainSteps = -1;
  std::string data;
  std::string lrSchedule;
  std::string save;
  std::string load;
};

int fail(const std::string &message) {
  std::fprintf(stderr, "partita-run: error: %s\n", message.c_str());
  return 1;
}

bool parseCount(const std::string &text, int64_t &value) {
  char *end = nullptr;
  errno = 0;
  long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || parsed < 0)
    return false;
  value = parsed;
  return true;
}

Status parseOptions(int argc, char **argv, Options &options, bool &help) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-h" || arg == "--help") {
      help = true;
      return Status::ok();
    }
    if (arg == "--version") {
      options.version = true;
      return Status::ok();
    }
    if (arg.rfind("--", 0) != 0) {
      if (!options.artifact.empty())
        return Status::error("unexpected argument '" + arg +
                             "' (the artifact is '" + options.artifact + "')");
      options.artifact = arg;
      continue;
    }
    if (arg == "--single-gpu") {
      options.singleGpu = true;
      continue;
    }
    if (arg == "--verify") {
      options.verifyWeights = true;
      continue;
    }
    if (arg == "--dump-logits") {
      options.dumpLogits = true;
      continue;
    }
    std::string value;
    size_t equals = arg.find('=');
    std::string flag = arg.substr(0, equals);
    // An unknown flag is reported as such, not as one missing its value.
    static const char *const kValueFlags[] = {
        "--input",       "--output-dir", "--ranks",       "--repeat",
        "--warmup",      "--threads",    "--timeout",     "--generate",
        "--train-steps", "--data",       "--lr-schedule", "--save",
        "--load"};
    if (std::find(std::begin(kValueFlags), std::end(kValueFlags), flag) ==
        std::end(kValueFlags))
      return Status::error("unknown option " + flag);
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
    } else {
      if (i + 1 >= args.size())
        return Status::error(flag + " needs a value");
      value = args[++i];
    }
    auto count = [&](int64_t &target) -> Status {
      if (!parseCount(value, target))
        return Status::error(flag + " takes a non-negative integer, not '" +
                             value + "'");
      return Status::ok();
    };
    if (flag == "--input") {
      size_t split = value.find('=');
      if (split == std::string::npos || split == 0 || split + 1 == value.size())
        return Status::error("--input takes NAME=FILE, not '" + value + "'");
      options.inputs.emplace_back(value.substr(0, split),
                                  value.substr(split + 1));
    } else if (flag == "--output-dir") {
      options.outputDirectory = value;
    } else if (flag == "--train-steps") {
      if (!parseCount(value, options.trainSteps) || options.trainSteps < 1)
        return Status::error("--train-steps takes a positive number of "
                             "steps, not '" +
                             value + "'");
    } else if (flag == "--data") {
      options.data = value;
    } else if (flag == "--lr-schedule") {
      options.lrSchedule = value;
    } else if (flag == "--save") {
      options.save = value;
    } else if (flag == "--load") {
      options.load = value;
    } else if (flag == "--ranks") {
      PARTITA_RETURN_IF_ERROR(count(options.ranks));
    } else if (flag == "--repeat") {
      PARTITA_RETURN_IF_ERROR(count(options.repeat));
    } else if (flag == "--warmup") {
      PARTITA_RETURN_IF_ERROR(count(options.warmup));
    } else if (flag == "--threads") {
      PARTITA_RETURN_IF_ERROR(count(options.threads));
      if (options.threads > int64_t(kMaxThreadsPerRank))
        return Status::error("--threads takes at most " +
                             std::to_string(kMaxThreadsPerRank) +
                             " threads per rank, not '" + value + "'");
    } else if (flag == "--generate") {
      if (!parseCount(value, options.generate) || options.generate < 1)
        return Status::error("--generate takes a positive number of tokens, "
                             "not '" +
                             value + "'");
    } else if (flag == "--timeout") {
      char *end = nullptr;
      options.timeoutSeconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(options.timeoutSeconds > 0) ||
          options.timeoutSeconds > 1e6)
        return Status::error("--timeout takes a positive number of seconds, "
                             "not '" +
                             value + "'");
    } else {
      return Status::error("unknown option " + flag);
    }
  }
  if (options.artifact.empty())
    return Status::error("no artifact given");
  if (options.dumpLogits && options.generate < 0)
    return Status::error("--dump-logits writes the logits of --generate; "
                         "give --generate N");
  if (options.dumpLogits && options.outputDirectory.empty())
    return Status::error("--dump-logits writes DIR/logits.npy: give "
                         "--output-dir DIR");
  for (const auto &[given, flag] :
       {std::pair{!options.data.empty(), "--data"},
        {!options.lrSchedule.empty(), "--lr-schedule"},
        {!options.save.empty(), "--save"},
        {!options.load.empty(), "--load"}})
    if (given && options.trainSteps < 0)
      return Status::error(std::string(flag) + " needs --train-steps N");
  if (options.trainSteps >= 0 &&
      (options.generate >= 0 || !options.inputs.empty() || options.repeat > 0 ||
       options.warmup >= 0))
    return Status::error("--train-steps reads its batches from --data; it "
                         "takes neither --input, --generate, --repeat nor "
                         "--warmup");
  if (options.trainSteps >= 0 && options.data.empty())
    return Status::error("--train-steps needs --data DIR, a folder of .npz "
                         "batches");
  if (options.generate >= 0 && (options.repeat > 0 || options.warmup >= 0))
    return Status::error("--repeat and --warmup time runs of the program; "
                         "--generate times its prefill and every step itself");
  return Status::ok();
}

/// Ends the process with an error if the phase it guards outlasts
/// --timeout. Files that are not regular (FIFOs, devices) are refused
/// before they are opened, but reading a regular file can still block where
/// no deadline of the runtime reaches (a network file system that stops
/// answering, a /proc file that waits for data). The deadline counts from
/// construction; a phase that ends after it is an error too, even when the
/// watching thread was not scheduled in time to see it run over.
class Watchdog {
public:
  Watchdog(double seconds, std::string what)
      : what(std::move(what)), seconds(seconds),
        deadline(
            std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(seconds))),
        thread([this] { watch(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    finished.notify_all();
    thread.join();
    if (std::chrono::steady_clock::now() > deadline)
      fail();
  }
  Watchdog(const Watchdog &) = delete;
  Watchdog &operator=(const Watchdog &) = delete;

private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex);
    if (!finished.wait_until(lock, deadline, [this] { return done; }))
      fail();
  }

  [[noreturn]] void fail() const {
    std::fprintf(stderr,
                 "partita-run: error: %s did not finish within %g s "
                 "(--timeout)\n",
                 what.c_str(), seconds);
    std::fflush(stderr);
    ::_exit(1);
  }

  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::string what;
  double seconds;
  std::chrono::steady_clock::time_point deadline;
  std::thread thread;
};

/// Reads the --input files and matches them against the manifest's inputs.
Status readInputs(const Manifest &manifest, const Options &options,
                  std::map<std::string, HostTensor> &inputs) {
  for (const auto &input : options.inputs) {
    const std::string &name = input.first, &file = input.second;
    const TensorSpec *spec = findSpec(manifest.inputs, name);
    if (!spec)
      return Status::error("the model has no input '" + name +
                           "'; its inputs are: " + specList(manifest.inputs));
    if (inputs.count(name))
      return Status::error("input '" + name + "' is given twice");
    HostTensor tensor;
    PARTITA_RETURN_IF_ERROR(readTensorFile(file, tensor));
    // NumPy has no bfloat16: a bf16 input comes as float32 and is rounded.
    if (spec->dtype == program::BF16 && tensor.dtype() == program::F32) {
      HostTensor rounded;
      PARTITA_RETURN_IF_ERROR(rounded.allocate(program::BF16, tensor.shape()));
      for (int64_t i = 0; i < tensor.tensor().numElements(); ++i)
        rounded.tensor().as<uint16_t>()[i] =
            floatToBf16(tensor.tensor().as<float>()[i]);
      tensor = std::move(rounded);
    }
    if (tensor.dtype() != spec->dtype || tensor.shape() != spec->shape)
      return Status::error("input '" + name + "' (" + file + "): expected " +
                           specString(*spec) + ", got " +
                           dtypeName(tensor.dtype()) + " " +
                           shapeString(tensor.shape()));
    inputs[name] = std::move(tensor);
  }
  for (const TensorSpec &spec : manifest.inputs)
    if (!inputs.count(spec.name))
      return Status::error("missing input '" + spec.name + "' (" +
                           specString(spec) + "): pass --input " + spec.name +
                           "=FILE");
  return Status::ok();
}

Status makeDirectories(const std::string &path) {
  std::string partial;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    partial = path.substr(0, slash);
    if (!partial.empty() && ::mkdir(partial.c_str(), 0755) != 0 &&
        errno != EEXIST)
      return Status::error(partial + ": " + std::strerror(errno));
    if (slash == std::string::npos)
      break;
    start = slash + 1;
  }
  struct stat info;
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    return Status::error(path + ": not a directory");
  return Status::ok();
}

/// Output file names: ONNX names may hold `/` or `:`, which a file name
/// cannot or should not.
std::string fileNameFor(const std::string &name) {
  std::string file = name;
  for (char &c : file)
    if (c == '/' || c == '\\' || c == ':')
      c = '_';
  return file;
}

/// Tokens per run: the product of the first two dimensions (batch x
/// sequence) of the first integer input, else the batch (the first
/// dimension of the first input).
int64_t tokensPerRun(const Manifest &manifest) {
  for (const TensorSpec &spec : manifest.inputs) {
    if (spec.dtype != program::I64 && spec.dtype != program::I32)
      continue;
    int64_t tokens = 1;
    for (size_t d = 0; d < std::min<size_t>(2, spec.shape.size()); ++d)
      tokens *= spec.shape[d];
    return tokens;
  }
  if (!manifest.inputs.empty() && !manifest.inputs[0].shape.empty())
    return manifest.inputs[0].shape[0];
  return 1;
}

/// This program's own path, to start the ranks' processes.
Status selfExecutable(std::string &path) {
  char buffer[4096];
  ssize_t length = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (length <= 0)
    return Status::error(std::string("cannot find this executable: ") +
                         std::strerror(errno));
  path.assign(buffer, size_t(length));
  return Status::ok();
}

/// Reads the --input files of --generate: the prompt's input ids and,
/// optionally, its attention mask, which Generation checks against the
/// serving spec; every other input it computes.
Status readPrompt(const ServingSpec &serving, const Options &options,
                  HostTensor &inputIds, HostTensor &mask, bool &masked) {
  masked = false;
  bool haveIds = false;
  std::string takes =
      "'" + serving.inputIds + "'" +
      (serving.attentionMask.empty() ? std::string(" only")
                                     : " and '" + serving.attentionMask + "'");
  for (const auto &[name, file] : options.inputs) {
    bool ids = name == serving.inputIds;
    if (!ids &&
        (serving.attentionMask.empty() || name != serving.attentionMask))
      return Status::error("--generate takes no input '" + name +
                           "': it reads " + takes +
                           " and computes the model's other inputs");
    bool &seen = ids ? haveIds : masked;
    if (seen)
      return Status::error("input '" + name + "' is given twice");
    seen = true;
    PARTITA_RETURN_IF_ERROR(readTensorFile(file, ids ? inputIds : mask));
  }
  if (!haveIds)
    return Status::error("missing input '" + serving.inputIds + "' (i64 [" +
                         std::to_string(serving.batch) + ", at most " +
                         std::to_string(serving.promptLength) +
                         "]), the prompt: pass --input " + serving.inputIds +
                         "=FILE");
  return Status::ok();
}

/// The `fraction` quantile of `values` (nearest rank), which it sorts.
double quantile(std::vector<double> &values, double fraction) {
  std::sort(values.begin(), values.end());
  size_t rank = size_t(std::ceil(fraction * double(values.size())));
  return values[std::min(values.size(), std::max<size_t>(rank, 1)) - 1];
}

/// The names of the entries of `folder`.
Status listDirectory(const std::string &folder,
                     std::vector<std::string> &names) {
  DIR *dir = ::opendir(folder.c_str());
  if (!dir)
    return Status::error("--data " + folder + ": " + std::strerror(errno));
  while (const dirent *entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..")
      names.push_back(std::move(name));
  }
  ::closedir(dir);
  return Status::ok();
}

/// The batches of --data: the folder's .npz files in name order, each
/// holding exactly the batch inputs of `trainer`.
Status readBatches(
    const Manifest &manifest, const Trainer &trainer, const std::string &folder,
    std::vector<std::vector<std::pair<std::string, HostTensor>>> &batches) {
  std::vector<std::string> files;
  PARTITA_RETURN_IF_ERROR(listDirectory(folder, files));
  std::sort(files.begin(), files.end());
  for (const std::string &file : files) {
    if (file.size() < 4 || file.compare(file.size() - 4, 4, ".npz") != 0)
      continue;
    std::string path = folder + "/" + file;
    std::vector<std::pair<std::string, HostTensor>> arrays;
    PARTITA_RETURN_IF_ERROR(readNpz(path, arrays));
    for (const std::string &name : trainer.batchInputs()) {
      auto found = std::find_if(arrays.begin(), arrays.end(),
                                [&](const auto &a) { return a.first == name; });
      const TensorSpec *spec = findSpec(manifest.inputs, name);
      if (found == arrays.end())
        return Status::error(path + " has no array '" + name +
                             "'; a batch holds " + specList([&] {
                               std::vector<TensorSpec> specs;
                               for (const std::string &n :
                                    trainer.batchInputs())
                                 specs.push_back(*findSpec(manifest.inputs, n));
                               return specs;
                             }()));
      if (found->second.dtype() != spec->dtype ||
          found->second.shape() != spec->shape)
        return Status::error(path + ": '" + name + "' is " +
                             dtypeName(found->second.dtype()) + " " +
                             shapeString(found->second.shape()) +
                             "; the step takes " + specString(*spec));
    }
    for (const auto &[name, tensor] : arrays)
      if (!findSpec(manifest.inputs, name) ||
          std::find(trainer.batchInputs().begin(), trainer.batchInputs().end(),
                    name) == trainer.batchInputs().end())
        return Status::error(path + " holds '" + name +
                             "', which is not an input of the step");
    batches.push_back(std::move(arrays));
  }
  if (batches.empty())
    return Status::error("--data " + folder + " holds no .npz file");
  return Status::ok();
}

/// partita-run --train-steps: Trainer::step over an in-process runner.
int runTraining(const LoadedArtifact &artifact, const Options &options,
                const RunnerOptions &runnerOptions) {
  const Manifest &manifest = artifact.manifest();
  if (!manifest.training)
    return fail(options.artifact +
                " was not compiled with --train: --train-steps needs a "
                "training artifact (partita-compile --train)");
  LrSchedule schedule;
  if (!options.lrSchedule.empty()) {
    Status parsed = LrSchedule::parse(options.lrSchedule, schedule);
    if (!parsed)
      return fail(parsed.message());
  }
  std::unique_ptr<Runner> runner;
  std::unique_ptr<Trainer> trainer;
  Status created = Runner::create(artifact, runnerOptions, runner);
  if (created)
    created = Trainer::create(*runner, trainer);
  if (!created)
    return fail(created.message());
  std::vector<std::vector<std::pair<std::string, HostTensor>>> batches;
  Status read = Status::ok();
  {
    Watchdog watchdog(options.timeoutSeconds, "reading the batches");
    read = readBatches(manifest, *trainer, options.data, batches);
  }
  if (!read)
    return fail(read.message());

  if (!options.load.empty()) {
    Status loaded = loadCheckpoint(*runner, *trainer, options.load);
    if (!loaded)
      return fail("--load: " + loaded.message());
    if (trainer->steps() >= options.trainSteps)
      return fail("--load " + options.load + " is at step " +
                  std::to_string(trainer->steps()) + ": --train-steps " +
                  std::to_string(options.trainSteps) +
                  " counts the run's steps in total, so none is left");
  }
  std::vector<float> losses;
  for (int64_t step = trainer->steps(); step < options.trainSteps; ++step) {
    const auto &arrays = batches[size_t(step) % batches.size()];
    std::vector<NamedTensor> batch;
    // Tokens: the labels' positions, or the target's rows (its last
    // dimension is the features), or the input ids'.
    int64_t tokens = 0;
    for (const auto &[name, tensor] : arrays) {
      batch.push_back({name, tensor.tensor()});
      const std::vector<int64_t> &shape = tensor.shape();
      if (name == "labels" || (tokens == 0 && name == "input_ids"))
        tokens = tensor.tensor().numElements();
      else if (name == "target" && !shape.empty() && shape.back() > 0)
        tokens = tensor.tensor().numElements() / shape.back();
    }
    auto start = std::chrono::steady_clock::now();
    float loss = 0;
    Status stepped =
        trainer->step(batch, schedule.at(trainer->baseLr(), step), loss);
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    if (!stepped)
      return fail("step " + std::to_string(step + 1) + ": " +
                  stepped.message());
    losses.push_back(loss);
    std::printf("step %lld/%lld loss %.6g  (%.1f ms, %.0f tokens/s)\n",
                static_cast<long long>(step + 1),
                static_cast<long long>(options.trainSteps), double(loss), ms,
                double(tokens) * 1000.0 / std::max(ms, 1e-9));
    std::fflush(stdout);
  }

  if (!options.save.empty()) {
    Status saved = saveCheckpoint(*runner, *trainer, options.save);
    if (!saved)
      return fail("--save: " + saved.message());
  }
  Watchdog watchdog(options.timeoutSeconds, "writing the outputs");
  if (options.outputDirectory.empty())
    return 0;
  Status made = makeDirectories(options.outputDirectory);
  if (!made)
    return fail(made.message());
  Tensor lossTensor{
      losses.data(), program::F32, {static_cast<int64_t>(losses.size())}};
  Status written = writeNpy(options.outputDirectory + "/loss.npy", lossTensor);
  for (const auto &[name, tensor] : trainer->lastOutputs())
    if (written && name != manifest.training->loss)
      written =
          writeNpy(options.outputDirectory + "/" + fileNameFor(name) + ".npy",
                   tensor.tensor());
  if (!written)
    return fail(written.message());
  return 0;
}

/// Where the artifact dispatches tokens to their experts (a mixture of
/// experts over ep): one line on the rows each rank's experts received,
/// their balance, and the bytes sent between ranks, over every run.
void printDispatch(const Runner &runner) {
  std::vector<std::pair<int32_t, Executor::DispatchStats>> stats =
      runner.dispatchStats();
  if (stats.empty())
    return;
  int64_t total = 0, most = 0, least = stats.front().second.rowsReceived,
          bytes = 0;
  std::string listed;
  for (const auto &[rank, s] : stats) {
    total += s.rowsReceived;
    most = std::max(most, s.rowsReceived);
    least = std::min(least, s.rowsReceived);
    bytes += s.bytesSent;
    listed += (listed.empty() ? "rank " : ", rank ") + std::to_string(rank) +
              " " + std::to_string(s.rowsReceived);
  }
  if (stats.size() > 8)
    listed = "min " + std::to_string(least) + ", max " + std::to_string(most);
  double mean = double(total) / double(stats.size());
  int64_t exchanges = stats.front().second.exchanges;
  std::printf("dispatch: rows received per rank: %s (max/mean %.2f) over %lld "
              "exchange%s; %lld bytes sent between ranks\n",
              listed.c_str(), mean > 0 ? double(most) / mean : 1.0,
              static_cast<long long>(exchanges), exchanges == 1 ? "" : "s",
              static_cast<long long>(bytes));
}

/// partita-run --generate: Generation::generate over an in-process runner.
int runGenerate(const LoadedArtifact &artifact, const Options &options,
                const RunnerOptions &runnerOptions) {
  const Manifest &manifest = artifact.manifest();
  if (!manifest.serving)
    return fail(options.artifact +
                " was not compiled with --max-seq: --generate needs a "
                "serving artifact (partita-compile --max-seq L), which has "
                "a decode program and a KV cache");
  Status target = checkDecodeTarget(manifest);
  if (!target)
    return fail("--generate: " + target.message());
  HostTensor inputIds, mask;
  bool masked = false;
  Status read = Status::ok();
  {
    Watchdog watchdog(options.timeoutSeconds, "reading the inputs");
    read = readPrompt(*manifest.serving, options, inputIds, mask, masked);
  }
  if (!read)
    return fail(read.message());

  std::unique_ptr<Runner> runner;
  std::unique_ptr<Generation> generation;
  Status created = Runner::create(artifact, runnerOptions, runner);
  if (created)
    created = Generation::create(*runner, generation);
  if (!created)
    return fail(created.message());
  GenerateOptions generateOptions;
  generateOptions.maxNewTokens = options.generate;
  generateOptions.keepLogits = options.dumpLogits;
  GenerateResult result;
  Status generated =
      generation->generate(inputIds.tensor(), masked ? &mask.tensor() : nullptr,
                           generateOptions, result);
  if (!generated)
    return fail(generated.message());

  Watchdog watchdog(options.timeoutSeconds, "writing the outputs");
  if (!options.outputDirectory.empty()) {
    Status made = makeDirectories(options.outputDirectory);
    if (!made)
      return fail(made.message());
  }
  Tensor tokens{
      result.tokens.data(), program::I64, {result.batch, result.generated}};
  Tensor logits{result.logits.data(),
                program::F32,
                {result.generated, result.batch, result.vocab}};
  std::vector<std::pair<std::string, Tensor>> written = {{"tokens", tokens}};
  if (options.dumpLogits)
    written.emplace_back("logits", logits);
  for (const auto &[name, tensor] : written) {
    std::string line = summarizeTensor(name, tensor);
    if (!options.outputDirectory.empty()) {
      std::string path = options.outputDirectory + "/" + name + ".npy";
      Status saved = writeNpy(path, tensor);
      if (!saved)
        return fail(saved.message());
      line += " -> " + path;
    }
    std::printf("%s\n", line.c_str());
  }

  std::printf("time to first token: %.3f ms\n", result.prefillSeconds * 1e3);
  std::vector<double> steps;
  double decodeSeconds = 0;
  for (double seconds : result.stepSeconds) {
    steps.push_back(seconds * 1e3);
    decodeSeconds += seconds;
  }
  if (steps.empty()) {
    std::printf("per-token latency: no decode steps (--generate 1 takes its "
                "token from the prefill)\n");
  } else {
    double mean = decodeSeconds * 1e3 / double(steps.size());
    double p50 = quantile(steps, 0.5), p99 = quantile(steps, 0.99);
    std::printf("per-token latency: mean %.3f ms, p50 %.3f ms, p99 %.3f ms "
                "over %zu decode steps\n",
                mean, p50, p99, steps.size());
    std::printf("decode throughput: %.1f tokens/s (batch %lld x %zu steps in "
                "%.3f ms)\n",
                double(result.batch) * double(steps.size()) / decodeSeconds,
                static_cast<long long>(result.batch), steps.size(),
                decodeSeconds * 1e3);
  }
  std::printf("kv cache: %llu bytes\n",
              static_cast<unsigned long long>(runner->cacheBytes()));
  printDispatch(*runner);
  return 0;
}

/// Starts a cuda artifact's ranks: every rank in this process on GPU 0
/// (`runner` from Runner::create), one process per GPU started here
/// (`launched` once they are done), or this process as the rank its
/// environment names (`runner` from Runner::join).
Status startCuda(const LoadedArtifact &artifact, const Options &options,
                 const RunnerOptions &runnerOptions, int argc, char **argv,
                 std::unique_ptr<Runner> &runner, bool &launched) {
  RankEnvironment environment;
  bool joined = false;
  PARTITA_RETURN_IF_ERROR(readRankEnvironment(environment, joined));
  if (joined && options.singleGpu)
    return Status::error("--single-gpu runs every rank in this process, but "
                         "the environment (" +
                         environment.source + ") makes it rank " +
                         std::to_string(environment.rank) + " of " +
                         std::to_string(environment.worldSize));
  if (joined)
    return Runner::join(artifact, runnerOptions, environment, runner);
  int32_t worldSize = artifact.manifest().worldSize;
  if (options.singleGpu || worldSize == 1)
    return Runner::create(artifact, runnerOptions, runner);

  // One process per GPU on this node: this program again, once per rank.
  int32_t gpus = 0;
  PARTITA_RETURN_IF_ERROR(countGpus(artifact, gpus));
  if (gpus < worldSize)
    return Status::error(
        options.artifact + " was compiled for --target cuda with " +
        std::to_string(worldSize) +
        " ranks, one per GPU, but this machine has " + std::to_string(gpus) +
        " GPU" + (gpus == 1 ? "" : "s") +
        "; run it across nodes with a launcher, or pass --single-gpu to run "
        "every rank on one GPU");
  LaunchOptions launch;
  PARTITA_RETURN_IF_ERROR(selfExecutable(launch.executable));
  launch.arguments.assign(argv + 1, argv + argc);
  launch.ranks = worldSize;
  launched = true;
  return launchRanks(launch);
}

int runMain(int argc, char **argv) {
  Options options;
  bool help = false;
  Status parsed = parseOptions(argc, argv, options, help);
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (options.version) {
    std::printf("partita-run %s (git %s)\n", PARTITA_VERSION,
                ::partita::gitRevision());
    return 0;
  }
  if (!parsed)
    return fail(parsed.message() + " (partita-run --help shows the usage)");

  std::unique_ptr<LoadedArtifact> artifact;
  Status opened = Status::ok();
  {
    Watchdog watchdog(options.timeoutSeconds,
                      "loading the artifact " + options.artifact);
    ArtifactOpenOptions openOptions;
    openOptions.verifyWeights = options.verifyWeights;
    opened = LoadedArtifact::open(options.artifact, artifact, openOptions);
  }
  if (!opened)
    return fail(opened.message());
  const Manifest &manifest = artifact->manifest();
  bool cuda = manifest.target == "cuda";
  if (!cuda && manifest.target != "host")
    return fail(options.artifact + " was compiled for an unknown target '" +
                manifest.target + "'");
  if (!cuda && options.singleGpu)
    return fail("--single-gpu runs cuda artifacts; " + options.artifact +
                " was compiled for --target host");
  int32_t worldSize = manifest.worldSize;
  if (options.ranks >= 0 && options.ranks != worldSize)
    return fail("--ranks " + std::to_string(options.ranks) +
                " does not match the artifact: its mesh has " +
                std::to_string(worldSize) +
                " ranks, and every one of them must run; compile with "
                "another --mesh for another count");
  Status assemblable = checkOutputsAssemblable(manifest);
  if (!assemblable)
    return fail(assemblable.message());

  RunnerOptions runnerOptions;
  runnerOptions.threadsPerRank = unsigned(options.threads);
  runnerOptions.timeoutSeconds = options.timeoutSeconds;
  runnerOptions.singleGpu = options.singleGpu;
  if (options.generate >= 0)
    return runGenerate(*artifact, options, runnerOptions);
  if (options.trainSteps >= 0) {
    if (cuda && worldSize > 1 && !options.singleGpu)
      return fail("--train-steps runs a multi-rank cuda artifact with "
                  "--single-gpu only, for now");
    return runTraining(*artifact, options, runnerOptions);
  }
  if (manifest.training)
    return fail(options.artifact +
                " is a training artifact: run its steps with --train-steps N "
                "--data DIR");

  std::map<std::string, HostTensor> inputs;
  Status read = Status::ok();
  {
    Watchdog watchdog(options.timeoutSeconds, "reading the inputs");
    read = readInputs(manifest, options, inputs);
  }
  if (!read)
    return fail(read.message());

  std::vector<NamedTensor> globalInputs;
  for (const auto &[name, tensor] : inputs)
    globalInputs.push_back({name, tensor.tensor()});

  std::unique_ptr<Runner> runner;
  if (cuda) {
    bool launched = false;
    Status started = startCuda(*artifact, options, runnerOptions, argc, argv,
                               runner, launched);
    if (!started)
      return fail(started.message());
    if (launched)
      return 0;
  } else {
    Status created = Runner::create(*artifact, runnerOptions, runner);
    if (!created)
      return fail(created.message());
  }

  // The timed runs leave the outputs in the ranks; they are assembled (on
  // rank 0 of a multi-process run) once, after the last.
  int64_t warmup = options.warmup >= 0  ? options.warmup
                   : options.repeat > 0 ? 1
                                        : 0;
  int64_t timed = std::max<int64_t>(options.repeat, 1);
  std::vector<double> latencies;
  for (int64_t iteration = 0; iteration < warmup + timed; ++iteration) {
    auto start = std::chrono::steady_clock::now();
    Status ran = runner->execute(globalInputs);
    auto end = std::chrono::steady_clock::now();
    if (!ran)
      return fail(ran.message());
    if (iteration >= warmup)
      latencies.push_back(
          std::chrono::duration<double, std::milli>(end - start).count());
  }
  // A rank other than 0 of a multi-process run sends its outputs to rank 0.
  std::vector<HostTensor> outputMemory(manifest.outputs.size());
  std::vector<NamedTensor> globalOutputs;
  for (size_t i = 0; runner->holdsOutputs() && i < manifest.outputs.size();
       ++i) {
    const TensorSpec &spec = manifest.outputs[i];
    Status allocated = outputMemory[i].allocate(spec.dtype, spec.shape);
    if (!allocated)
      return fail("output '" + spec.name + "': " + allocated.message());
    globalOutputs.push_back({spec.name, outputMemory[i].tensor()});
  }
  Status gathered = runner->gatherOutputs(globalOutputs);
  if (!gathered)
    return fail(gathered.message());
  if (!runner->holdsOutputs())
    return 0;

  Watchdog watchdog(options.timeoutSeconds, "writing the outputs");
  if (!options.outputDirectory.empty()) {
    Status made = makeDirectories(options.outputDirectory);
    if (!made)
      return fail(made.message());
  }
  for (size_t i = 0; i < manifest.outputs.size(); ++i) {
    const std::string &name = manifest.outputs[i].name;
    const Tensor &tensor = globalOutputs[i].tensor;
    std::string line = summarizeTensor(name, tensor);
    if (!options.outputDirectory.empty()) {
      std::string path =
          options.outputDirectory + "/" + fileNameFor(name) + ".npy";
      Status written = writeNpy(path, tensor);
      if (!written)
        return fail(written.message());
      line += " -> " + path;
    }
    std::printf("%s\n", line.c_str());
  }
  if (options.repeat > 0) {
    double sum = 0, best = latencies[0];
    for (double latency : latencies) {
      sum += latency;
      best = std::min(best, latency);
    }
    double mean = sum / double(latencies.size());
    std::printf("latency: mean %.3f ms, min %.3f ms over %lld runs (%lld "
                "warmup); %.1f tokens/s\n",
                mean, best, static_cast<long long>(latencies.size()),
                static_cast<long long>(warmup),
                double(tokensPerRun(manifest)) * 1000.0 / mean);
  }
  printDispatch(*runner);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // An artifact file truncated while its weights are mapped: an error
  // naming the file, not a crash (docs/runtime.md).
  installMappedFileFaultHandler("partita-run");
  int status = runMain(argc, argv);
  // What was printed (the summary, --help, --version) must have reached
  // standard output: a full device or a closed pipe is an error, not exit 0.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr,
                 "partita-run: error: cannot write standard output: "
                 "%s\n",
                 std::strerror(errno));
    return 1;
  }
  return status;
}
