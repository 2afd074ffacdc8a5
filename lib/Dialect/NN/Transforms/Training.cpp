//===- Training.cpp - a training step's loss and optimizer specs ----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Training.h"

#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <cstdlib>

using namespace mlir::partita;

std::optional<LossSpec> mlir::partita::parseLossSpec(llvm::StringRef text,
                                                     std::string &error) {
  auto [kind, output] = text.trim().split(':');
  kind = kind.trim();
  output = output.trim();
  if (kind != "cross_entropy" && kind != "mse") {
    error = "--loss '" + text.str() + "': unknown loss '" + kind.str() +
            "'; expected cross_entropy:OUTPUT or mse:OUTPUT";
    return std::nullopt;
  }
  if (output.empty()) {
    error = "--loss '" + text.str() + "' names no output; expected " +
            kind.str() + ":OUTPUT";
    return std::nullopt;
  }
  return LossSpec{kind.str(), output.str()};
}

llvm::StringRef OptimizerSpec::kindName() const {
  return kind == OptimizerKind::SGD ? "sgd" : "adamw";
}

llvm::SmallVector<llvm::StringRef, 2> OptimizerSpec::stateNames() const {
  if (kind == OptimizerKind::AdamW)
    return {"exp_avg", "exp_avg_sq"};
  if (momentum != 0)
    return {"momentum_buffer"};
  return {};
}

/// A finite real number, all of `text`.
static std::optional<double> parseReal(llvm::StringRef text) {
  std::string copy = text.trim().str();
  if (copy.empty())
    return std::nullopt;
  char *end = nullptr;
  double value = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

std::optional<OptimizerSpec>
mlir::partita::parseOptimizerSpec(llvm::StringRef text, std::string &error) {
  auto [kind, rest] = text.trim().split(':');
  kind = kind.trim();
  OptimizerSpec spec;
  if (kind == "sgd") {
    spec.kind = OptimizerKind::SGD;
  } else if (kind == "adamw") {
    // torch.optim.AdamW's default weight decay.
    spec.kind = OptimizerKind::AdamW;
    spec.weightDecay = 0.01;
  } else {
    error = "--optimizer '" + text.str() + "': unknown optimizer '" +
            kind.str() + "'; expected sgd or adamw";
    return std::nullopt;
  }
  bool haveLr = false;
  llvm::SmallVector<llvm::StringRef> items;
  rest.split(items, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    key = key.trim();
    std::optional<double> number = parseReal(value);
    double *field = nullptr;
    if (key == "lr")
      field = &spec.lr, haveLr = true;
    else if (key == "weight_decay")
      field = &spec.weightDecay;
    else if (key == "momentum" && spec.kind == OptimizerKind::SGD)
      field = &spec.momentum;
    else if (spec.kind == OptimizerKind::AdamW &&
             llvm::is_contained({"beta1", "beta2", "eps"}, key))
      field = key == "beta1"   ? &spec.beta1
              : key == "beta2" ? &spec.beta2
                               : &spec.eps;
    if (!field) {
      error = "--optimizer: " + kind.str() + " has no key '" + key.str() +
              "'; its keys are " +
              (spec.kind == OptimizerKind::SGD
                   ? "lr, momentum and weight_decay"
                   : "lr, beta1, beta2, eps and weight_decay");
      return std::nullopt;
    }
    if (!number) {
      error = "--optimizer: " + key.str() + "='" + value.trim().str() +
              "' is not a finite number";
      return std::nullopt;
    }
    *field = *number;
  }
  if (!haveLr) {
    error = "--optimizer '" + text.str() + "' gives no learning rate (lr=L)";
    return std::nullopt;
  }
  auto fail = [&](llvm::StringRef what) {
    error = "--optimizer: " + what.str();
    return std::nullopt;
  };
  if (spec.lr < 0)
    return fail("lr must be 0 or more");
  if (spec.weightDecay < 0)
    return fail("weight_decay must be 0 or more");
  if (spec.momentum < 0)
    return fail("momentum must be 0 or more");
  if (!(spec.beta1 >= 0 && spec.beta1 < 1) ||
      !(spec.beta2 >= 0 && spec.beta2 < 1))
    return fail("beta1 and beta2 must be in [0, 1)");
  if (spec.eps < 0)
    return fail("eps must be 0 or more");
  return spec;
}
