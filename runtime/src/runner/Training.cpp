//===- Training.cpp - steps of a training artifact ------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Training.h"

#include "partita/runtime/Manifest.h"
#include "partita/runtime/Runner.h"

#include <cmath>
#include <cstdlib>
#include <map>

using namespace partita::runtime;

namespace {

/// The learning rate and AdamW's bias corrections, which the runtime gives.
const char *const kScalars[] = {"lr", "bias_correction1", "bias_correction2"};

bool isScalar(const std::string &name) {
  for (const char *scalar : kScalars)
    if (name == scalar)
      return true;
  return false;
}

std::optional<double> parseNumber(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

} // namespace

//===----------------------------------------------------------------------===//
// LrSchedule
//===----------------------------------------------------------------------===//

Status LrSchedule::parse(const std::string &text, LrSchedule &schedule) {
  schedule = LrSchedule();
  size_t colon = text.find(':');
  std::string kind = text.substr(0, colon);
  if (kind == "constant" && colon == std::string::npos)
    return Status::ok();
  if (kind == "cosine")
    schedule.kind = Kind::Cosine;
  else if (kind == "linear")
    schedule.kind = Kind::Linear;
  else
    return Status::error("--lr-schedule '" + text +
                         "': expected constant, cosine:warmup=N,total=M,min=X "
                         "or linear:warmup=N,total=M");
  bool haveTotal = false;
  std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  size_t start = 0;
  while (start <= rest.size() && !rest.empty()) {
    size_t comma = rest.find(',', start);
    std::string item = rest.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t equals = item.find('=');
    std::string key = item.substr(0, equals);
    std::optional<double> value = equals == std::string::npos
                                      ? std::nullopt
                                      : parseNumber(item.substr(equals + 1));
    bool integral =
        value && *value == std::floor(*value) && *value >= 0 && *value < 9.0e15;
    if (key == "warmup" || key == "total") {
      if (!integral)
        return Status::error("--lr-schedule: " + key +
                             " takes a number of steps, not '" + item + "'");
      (key == "warmup" ? schedule.warmup : schedule.total) = int64_t(*value);
      haveTotal |= key == "total";
    } else if (key == "min" && schedule.kind == Kind::Cosine) {
      if (!value || *value < 0)
        return Status::error("--lr-schedule: min takes a learning rate of 0 "
                             "or more, not '" +
                             item + "'");
      schedule.min = *value;
    } else {
      return Status::error("--lr-schedule " + kind + " has no key '" + key +
                           "'; its keys are warmup, total" +
                           (schedule.kind == Kind::Cosine ? " and min" : ""));
    }
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (!haveTotal || schedule.total < 1)
    return Status::error("--lr-schedule " + kind +
                         " needs total=M, the steps of the decay (M >= 1)");
  if (schedule.warmup > schedule.total)
    return Status::error("--lr-schedule: warmup " +
                         std::to_string(schedule.warmup) + " exceeds total " +
                         std::to_string(schedule.total));
  return Status::ok();
}

double LrSchedule::at(double peak, int64_t step) const {
  if (kind == Kind::Constant)
    return peak;
  if (step < warmup)
    return peak * double(step + 1) / double(warmup);
  if (step >= total)
    return kind == Kind::Cosine ? min : 0.0;
  double progress =
      double(step - warmup) / double(std::max<int64_t>(total - warmup, 1));
  if (kind == Kind::Linear)
    return peak * (1.0 - progress);
  return min + (peak - min) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

//===----------------------------------------------------------------------===//
// Trainer
//===----------------------------------------------------------------------===//

struct Trainer::Impl {
  Runner *runner = nullptr;
  const Manifest *manifest = nullptr;
  std::vector<std::string> batchInputs;
  std::vector<std::pair<std::string, HostTensor>> outputs;
  int64_t steps = 0;
  double baseLr = 0, beta1 = 0.9, beta2 = 0.999;
  bool adamw = false;
};

Trainer::Trainer() : impl(std::make_unique<Impl>()) {}
Trainer::~Trainer() = default;

Status Trainer::create(Runner &runner, std::unique_ptr<Trainer> &trainer) {
  const Manifest &manifest = runner.manifest();
  if (!manifest.training)
    return Status::error("the artifact was not compiled with --train: it "
                         "has no training step");
  std::unique_ptr<Trainer> made(new Trainer());
  Impl &impl = *made->impl;
  impl.runner = &runner;
  impl.manifest = &manifest;
  const TrainingSpec &spec = *manifest.training;
  auto hyper = [&](const char *name, double fallback) {
    auto it = spec.hyperparameters.find(name);
    return it == spec.hyperparameters.end() ? fallback : it->second;
  };
  impl.baseLr = hyper("lr", 0);
  impl.adamw = spec.optimizer == "adamw";
  impl.beta1 = hyper("beta1", 0.9);
  impl.beta2 = hyper("beta2", 0.999);
  for (const TensorSpec &input : manifest.inputs)
    if (!isScalar(input.name))
      impl.batchInputs.push_back(input.name);
  for (const TensorSpec &output : manifest.outputs) {
    HostTensor memory;
    PARTITA_RETURN_IF_ERROR(memory.allocate(output.dtype, output.shape));
    impl.outputs.emplace_back(output.name, std::move(memory));
  }
  trainer = std::move(made);
  return Status::ok();
}

const std::vector<std::string> &Trainer::batchInputs() const {
  return impl->batchInputs;
}

Status Trainer::step(const std::vector<NamedTensor> &batch,
                     std::optional<double> lr, float &loss) {
  const Manifest &manifest = *impl->manifest;
  const TrainingSpec &spec = *manifest.training;
  for (const NamedTensor &given : batch) {
    if (isScalar(given.name))
      return Status::error("'" + given.name +
                           "' is computed by the runtime each step, not "
                           "given with the batch");
    if (given.name != "labels" || spec.classes == 0 ||
        given.tensor.dtype != program::I64 || !given.tensor.data)
      continue;
    // torch refuses a label outside [0, classes) other than -100 (the
    // one-hot of the loss would silently pick nothing).
    const auto *labels = static_cast<const int64_t *>(given.tensor.data);
    for (int64_t i = 0, n = given.tensor.numElements(); i < n; ++i)
      if (labels[i] != -100 && (labels[i] < 0 || labels[i] >= spec.classes))
        return Status::error("labels: label " + std::to_string(labels[i]) +
                             " at element " + std::to_string(i) +
                             " is outside [0, " + std::to_string(spec.classes) +
                             ") and not -100 (ignored)");
  }
  double rate = lr.value_or(impl->baseLr);
  if (!std::isfinite(rate) || rate < 0)
    return Status::error("the learning rate " + std::to_string(rate) +
                         " is not a finite number of 0 or more");
  double t = double(impl->steps + 1);
  float scalars[3] = {float(rate), float(1.0 - std::pow(impl->beta1, t)),
                      float(1.0 - std::pow(impl->beta2, t))};
  std::vector<NamedTensor> inputs(batch);
  for (int i = 0; i < (impl->adamw ? 3 : 1); ++i)
    inputs.push_back({kScalars[i], Tensor{&scalars[i], program::F32, {}}});
  std::vector<NamedTensor> outputs;
  for (auto &[name, memory] : impl->outputs)
    outputs.push_back({name, memory.tensor()});
  PARTITA_RETURN_IF_ERROR(impl->runner->run(inputs, outputs));
  ++impl->steps;
  for (auto &[name, memory] : impl->outputs)
    if (name == spec.loss)
      loss = *static_cast<const float *>(memory.tensor().data);
  return Status::ok();
}

const std::vector<std::pair<std::string, HostTensor>> &
Trainer::lastOutputs() const {
  return impl->outputs;
}

int64_t Trainer::steps() const { return impl->steps; }
void Trainer::setSteps(int64_t steps) { impl->steps = steps; }
double Trainer::baseLr() const { return impl->baseLr; }
