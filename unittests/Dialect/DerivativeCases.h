//===- DerivativeCases.h - the functions the vjp rules are checked on -----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The cases both numerical checks of NNDerivatives.cpp run: the f32 one on
// the runtime (DerivativesTest.cpp) and the fp64 one on a reference
// interpreter (DerivativesF64Test.cpp). A case is a small nn function
// y = f(parameters, inputs) whose loss is sum(y * u) for a cotangent u.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_UNITTESTS_DIALECT_DERIVATIVECASES_H
#define PARTITA_UNITTESTS_DIALECT_DERIVATIVECASES_H

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace mlir::partita::test {

struct Arg {
  std::string name, type;
  bool parameter;
  /// Values drawn uniformly from [low, high].
  double low = -1.5, high = 1.5;
};

struct Case {
  std::string name;
  std::vector<Arg> args;
  /// The body: defines %y of `resultType` from the arguments.
  std::string body, resultType;
  /// The step of the f32 central difference: larger where the function is
  /// linear and rounds (a cast to f16), so that rounding does not swamp it.
  double h = 1e-2;
};

std::ostream &operator<<(std::ostream &os, const Case &c);

/// The shape of `type`, written tensor<2x3xf32> or tensor<f32>.
std::vector<int64_t> shapeOf(const std::string &type);

int64_t countOf(const std::vector<int64_t> &shape);

/// The case as a module's text: @main takes the arguments (parameters
/// marked `partita.parameter`) and the cotangent %u, and returns the loss
/// (marked `partita.loss`).
std::string functionText(const Case &c);

/// Every case.
const std::vector<Case> &cases();

/// A context with every Partita dialect loaded.
struct AllDialectsContext : MLIRContext {
  AllDialectsContext();
  static DialectRegistry registry();
};

} // namespace mlir::partita::test

#endif // PARTITA_UNITTESTS_DIALECT_DERIVATIVECASES_H
