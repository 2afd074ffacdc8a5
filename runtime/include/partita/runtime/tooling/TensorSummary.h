//===- TensorSummary.h - one line about a tensor ----------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What partita-run prints for each output, and what lit tests check:
// `NAME: DTYPE [SHAPE] min A max B mean C` over the elements that are
// numbers, `(no numbers)` when none is, and `nan N` when N are NaN.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TOOLING_TENSORSUMMARY_H
#define PARTITA_RUNTIME_TOOLING_TENSORSUMMARY_H

#include "partita/runtime/Tensor.h"

#include <string>

namespace partita::runtime {

/// The summary line of `tensor`, called `name`.
std::string summarizeTensor(const std::string &name, const Tensor &tensor);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TOOLING_TENSORSUMMARY_H
