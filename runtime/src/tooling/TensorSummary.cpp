//===- TensorSummary.cpp - one line about a tensor ------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/tooling/TensorSummary.h"

#include "partita/runtime/Float16.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace partita::runtime;
namespace program = partita::program;

static double elementAt(const Tensor &tensor, int64_t i) {
  switch (tensor.dtype) {
  case program::F32:
    return tensor.as<float>()[i];
  case program::F16:
    return f16ToFloat(tensor.as<uint16_t>()[i]);
  case program::BF16:
    return bf16ToFloat(tensor.as<uint16_t>()[i]);
  case program::I64:
    return double(tensor.as<int64_t>()[i]);
  case program::I32:
    return tensor.as<int32_t>()[i];
  case program::I8:
    return tensor.as<int8_t>()[i];
  case program::BOOL:
    return tensor.as<uint8_t>()[i] != 0;
  default:
    return 0;
  }
}

std::string partita::runtime::summarizeTensor(const std::string &name,
                                              const Tensor &tensor) {
  double low = INFINITY, high = -INFINITY, sum = 0;
  int64_t nans = 0, count = tensor.numElements();
  for (int64_t i = 0; i < count; ++i) {
    double value = elementAt(tensor, i);
    if (std::isnan(value)) {
      ++nans;
      continue;
    }
    low = std::min(low, value);
    high = std::max(high, value);
    sum += value;
  }
  char line[256];
  if (count == nans)
    std::snprintf(line, sizeof(line), " (no numbers)");
  else
    std::snprintf(line, sizeof(line), " min %.6g max %.6g mean %.6g", low, high,
                  sum / double(count - nans));
  std::string text = name + ": " + dtypeName(tensor.dtype) + " " +
                     shapeString(tensor.shape) + line;
  if (nans)
    text += " nan " + std::to_string(nans);
  return text;
}
