//===- compile_and_run.cpp - Partita's C++ API, end to end ----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Compiles an ONNX transformer twice, for one device and for tensor
// parallelism over two (host ranks), runs both on the same token ids and
// checks that they agree. Uses nothing but include/partita/Partita.h.
//
//   partita-example-cpp MODEL.onnx [DIR]
//
// With DIR, the tp=2 artifact is also saved there, read back and run from
// the directory.
//
//===----------------------------------------------------------------------===//

#include "partita/Partita.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

namespace {

int64_t elements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Runs `session` on `ids`; fills `logits` with the first output (f32).
/// False, with the reason printed, on error.
bool run(partita::Session &session, const std::vector<int64_t> &ids,
         std::vector<float> &logits) {
  const partita::TensorInfo &input = session.inputs().front();
  const partita::TensorInfo &output = session.outputs().front();
  if (input.dtype != partita::DType::I64 ||
      elements(input.shape) != int64_t(ids.size()) ||
      output.dtype != partita::DType::F32) {
    std::fprintf(stderr, "unexpected model interface\n");
    return false;
  }
  logits.assign(size_t(elements(output.shape)), 0.0f);
  partita::Status ran =
      session.run({{input.name, input.dtype, input.shape,
                    const_cast<int64_t *>(ids.data())}},
                  {{output.name, output.dtype, output.shape, logits.data()}});
  if (!ran) {
    std::fprintf(stderr, "run failed: %s\n", ran.message().c_str());
    return false;
  }
  return true;
}

/// Compiles `model` with `options` into `artifact` and runs it on `ids`.
bool compileAndRun(const char *model, const partita::CompileOptions &options,
                   const std::vector<int64_t> &ids, std::vector<float> &logits,
                   std::shared_ptr<const partita::Artifact> &artifact) {
  partita::CompileResult compiled = partita::compileFile(model, options);
  if (!compiled.ok()) {
    std::fprintf(stderr, "compile failed:\n%s", compiled.errorText().c_str());
    return false;
  }
  artifact = compiled.artifact;
  std::unique_ptr<partita::Session> session;
  if (partita::Status loaded = partita::Session::load(*artifact, {}, session);
      !loaded) {
    std::fprintf(stderr, "load failed: %s\n", loaded.message().c_str());
    return false;
  }
  if (!run(*session, ids, logits))
    return false;
  const partita::TensorInfo &output = session->outputs().front();
  std::printf("%zu ranks: %s %s [",
              options.mesh.empty() ? size_t(1) : size_t(2), output.name.c_str(),
              partita::dtypeName(output.dtype));
  for (size_t i = 0; i < output.shape.size(); ++i)
    std::printf("%s%lld", i ? ", " : "", (long long)output.shape[i]);
  std::printf("], report %zu bytes\n", compiled.artifact->report().size());
  return true;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [DIR]\n", argv[0]);
    return 2;
  }
  std::printf("libpartita %s\n", partita::version());

  // Token ids for the committed GPT-2 export: batch 2, sequence 16.
  std::vector<int64_t> ids(2 * 16);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = int64_t((i * 37 + 11) % 128);

  std::vector<float> single, sharded;
  std::shared_ptr<const partita::Artifact> artifact;
  partita::CompileOptions options;
  if (!compileAndRun(argv[1], options, ids, single, artifact))
    return 1;
  options.mesh = {{"tp", 2}};
  if (!compileAndRun(argv[1], options, ids, sharded, artifact))
    return 1;

  // Equal within fp32 rtol 1e-4 (atol 1e-5), numpy's allclose.
  double worst = 0, largest = 0;
  bool close = true;
  for (size_t i = 0; i < single.size(); ++i) {
    double difference = std::abs(double(single[i]) - sharded[i]);
    worst = std::max(worst, difference);
    largest = std::max(largest, std::abs(double(single[i])));
    close &= difference <= 1e-5 + 1e-4 * std::abs(double(single[i]));
  }
  std::printf("tp=2 against one device: max difference %.2e (largest logit "
              "%.2f)\n",
              worst, largest);
  if (!close) {
    std::fprintf(stderr, "tp=2 differs from one device\n");
    return 1;
  }

  // Saved, read back, and run from the directory: the same bits (the same
  // programs on as many threads per rank make the same calls in order).
  if (argc == 3) {
    std::shared_ptr<const partita::Artifact> reloaded;
    std::unique_ptr<partita::Session> session;
    std::vector<float> again;
    partita::Status status = artifact->save(argv[2]);
    if (status)
      status = partita::Artifact::load(argv[2], reloaded);
    if (status)
      status = partita::Session::load(argv[2], {}, session);
    if (!status) {
      std::fprintf(stderr, "save/load failed: %s\n", status.message().c_str());
      return 1;
    }
    if (!run(*session, ids, again) || again != sharded ||
        reloaded->report() != artifact->report() ||
        reloaded->files() != artifact->files()) {
      std::fprintf(stderr, "the saved artifact differs\n");
      return 1;
    }
    std::printf("saved to %s, read back and run: identical\n", argv[2]);
  }

  // Errors are values: a mesh the model cannot use.
  options.mesh = {{"tp", 3}};
  partita::CompileResult refused = partita::compileFile(argv[1], options);
  if (refused.ok() || refused.diagnostics.empty()) {
    std::fprintf(stderr, "tp=3 should have been refused\n");
    return 1;
  }
  std::printf("tp=3 refused: %s\n", refused.diagnostics.front().str().c_str());
  return 0;
}
