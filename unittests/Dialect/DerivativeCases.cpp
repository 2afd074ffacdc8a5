//===- DerivativeCases.cpp - the functions the vjp rules are checked on ---===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "DerivativeCases.h"

#include "partita/InitAllDialects.h"

using namespace mlir;
using namespace mlir::partita::test;

std::ostream &mlir::partita::test::operator<<(std::ostream &os, const Case &c) {
  return os << c.name;
}

std::vector<int64_t> mlir::partita::test::shapeOf(const std::string &type) {
  // tensor<2x3xf32> or tensor<f32>.
  std::vector<int64_t> shape;
  std::string inner = type.substr(7, type.size() - 8);
  size_t start = 0, x;
  while ((x = inner.find('x', start)) != std::string::npos) {
    shape.push_back(std::stoll(inner.substr(start, x - start)));
    start = x + 1;
  }
  return shape;
}

int64_t mlir::partita::test::countOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string mlir::partita::test::functionText(const Case &c) {
  std::string text = "func.func @main(";
  for (const Arg &a : c.args) {
    text += "%" + a.name + ": " + a.type;
    if (a.parameter)
      text += " {partita.parameter = \"" + a.name + "\"}";
    text += ", ";
  }
  size_t rank = shapeOf(c.resultType).size();
  std::string axes;
  for (size_t d = 0; d < rank; ++d)
    axes += (d ? ", " : "") + std::to_string(d);
  text += "%u: " + c.resultType + ") -> (tensor<f32> {partita.loss}) {\n" +
          c.body + "\n  %weighted = nn.mul %y, %u : (" + c.resultType + ", " +
          c.resultType + ") -> " + c.resultType + "\n";
  if (rank == 0)
    text += "  return %weighted : tensor<f32>\n}\n";
  else
    text += "  %loss = nn.reduce sum %weighted axes = [" + axes +
            "] : " + c.resultType +
            " -> tensor<f32>\n  return %loss : tensor<f32>\n}\n";
  return text;
}

const std::vector<Case> &mlir::partita::test::cases() {
  static const std::vector<Case> all = {
      {"add_sub_broadcast",
       {{"a", "tensor<3x4xf32>", true}, {"b", "tensor<4xf32>", true}},
       R"(  %s = nn.add %a, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %y = nn.sub %s, %b : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>"},
      {"mul_div_broadcast",
       {{"a", "tensor<3x4xf32>", true},
        {"b", "tensor<3x1xf32>", true, 0.5, 2.0}},
       R"(  %p = nn.mul %a, %b : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
  %y = nn.div %p, %b : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>"},
      {"unary_positive",
       {{"a", "tensor<2x5xf32>", true, 0.5, 2.0}},
       R"(  %l = nn.log %a : tensor<2x5xf32>
  %s = nn.sqrt %a : tensor<2x5xf32>
  %r = nn.rsqrt %a : tensor<2x5xf32>
  %q = nn.reciprocal %a : tensor<2x5xf32>
  %t1 = nn.add %l, %s : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
  %t2 = nn.add %r, %q : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
  %y = nn.add %t1, %t2 : (tensor<2x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>)",
       "tensor<2x5xf32>"},
      {"unary_activations",
       {{"a", "tensor<2x6xf32>", true}},
       R"(  %e = nn.exp %a : tensor<2x6xf32>
  %t = nn.tanh %a : tensor<2x6xf32>
  %s = nn.sigmoid %a : tensor<2x6xf32>
  %n = nn.neg %a : tensor<2x6xf32>
  %si = nn.silu %n : tensor<2x6xf32>
  %g = nn.gelu %a : tensor<2x6xf32>
  %gt = nn.gelu %e approximation = tanh : tensor<2x6xf32>
  %t1 = nn.add %e, %t : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %t2 = nn.add %s, %si : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %t3 = nn.add %g, %gt : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %t4 = nn.add %t1, %t2 : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>
  %y = nn.add %t3, %t4 : (tensor<2x6xf32>, tensor<2x6xf32>) -> tensor<2x6xf32>)",
       "tensor<2x6xf32>"},
      // relu away from its kink: values at least 0.1 from 0.
      {"relu",
       {{"a", "tensor<2x4xf32>", true, 0.1, 1.5},
        {"s", "tensor<2x4xf32>", false}},
       R"(  %z = nn.constant dense<0.0> : tensor<f32>
  %sign = nn.compare gt, %s, %z : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xi1>
  %n = nn.neg %a : tensor<2x4xf32>
  %x = nn.where %sign, %n, %a : (tensor<2x4xi1>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = nn.relu %x : tensor<2x4xf32>)",
       "tensor<2x4xf32>"},
      // Saturated on the way down (as partita-convert-float casts inputs),
      // not on the way up.
      {"cast_round_trip",
       {{"a", "tensor<3x2xf32>", true}},
       R"(  %h = nn.cast %a {saturate} : tensor<3x2xf32> -> tensor<3x2xf16>
  %y = nn.cast %h : tensor<3x2xf16> -> tensor<3x2xf32>)",
       "tensor<3x2xf32>",
       0.25},
      {"shapes",
       {{"a", "tensor<2x3x4xf32>", true}, {"b", "tensor<4xf32>", true}},
       R"(  %r = nn.reshape %a : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %t = nn.transpose %r permutation = [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
  %bb = nn.reshape %b : tensor<4xf32> -> tensor<4x1xf32>
  %bc = nn.broadcast_to %bb : tensor<4x1xf32> -> tensor<4x6xf32>
  %y = nn.mul %t, %bc : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>)",
       "tensor<4x6xf32>"},
      {"reductions",
       {{"a", "tensor<3x4x5xf32>", true}},
       R"(  %s = nn.reduce sum %a axes = [2] : tensor<3x4x5xf32> -> tensor<3x4xf32>
  %m = nn.reduce mean %a axes = [0, 2] keepdims : tensor<3x4x5xf32> -> tensor<1x4x1xf32>
  %mr = nn.reshape %m : tensor<1x4x1xf32> -> tensor<4xf32>
  %y = nn.mul %s, %mr : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>"},
      {"softmaxes",
       {{"a", "tensor<3x5xf32>", true}},
       R"(  %s = nn.softmax %a axis = 1 : tensor<3x5xf32>
  %l = nn.log_softmax %a axis = 0 : tensor<3x5xf32>
  %y = nn.add %s, %l : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>)",
       "tensor<3x5xf32>"},
      {"matmul_batched_bias",
       {{"x", "tensor<2x3x4xf32>", true},
        {"w", "tensor<4x5xf32>", true},
        {"b", "tensor<5xf32>", true}},
       R"(  %y = nn.matmul %x, %w bias %b : (tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>)",
       "tensor<2x3x5xf32>"},
      {"matmul_batch_broadcast",
       {{"x", "tensor<3x4xf32>", true}, {"w", "tensor<2x4x2xf32>", true}},
       R"(  %y = nn.matmul %x, %w : (tensor<3x4xf32>, tensor<2x4x2xf32>) -> tensor<2x3x2xf32>)",
       "tensor<2x3x2xf32>"},
      {"layer_norm",
       {{"x", "tensor<2x3x4xf32>", true},
        {"g", "tensor<4xf32>", true},
        {"b", "tensor<4xf32>", true}},
       R"(  %n = nn.layer_norm %x scale(%g : tensor<4xf32>) bias(%b : tensor<4xf32>) axis = 2 epsilon = 1.0e-05 : tensor<2x3x4xf32>
  %m = nn.layer_norm %x axis = 1 epsilon = 1.0e-05 : tensor<2x3x4xf32>
  %y = nn.add %n, %m : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>)",
       "tensor<2x3x4xf32>"},
      {"rms_norm",
       {{"x", "tensor<3x5xf32>", true}, {"g", "tensor<5xf32>", true}},
       R"(  %n = nn.rms_norm %x scale(%g : tensor<5xf32>) axis = 1 epsilon = 1.0e-06 : tensor<3x5xf32>
  %m = nn.rms_norm %x axis = 0 epsilon = 1.0e-06 : tensor<3x5xf32>
  %y = nn.add %n, %m : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<3x5xf32>)",
       "tensor<3x5xf32>"},
      // max and min away from ties: a ramp of 10 puts each row's extreme
      // where the perturbation cannot move it.
      {"reduce_max_min",
       {{"a", "tensor<3x3xf32>", true}},
       R"(  %ramp = nn.constant dense<[[0.0, 10.0, 0.0], [10.0, 0.0, 0.0], [0.0, 0.0, 10.0]]> : tensor<3x3xf32>
  %up = nn.add %a, %ramp : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %down = nn.sub %a, %ramp : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %mx = nn.reduce max %up axes = [1] : tensor<3x3xf32> -> tensor<3xf32>
  %mn = nn.reduce min %down axes = [1] keepdims : tensor<3x3xf32> -> tensor<3x1xf32>
  %mnr = nn.reshape %mn : tensor<3x1xf32> -> tensor<3xf32>
  %y = nn.mul %mx, %mnr : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>)",
       "tensor<3xf32>"},
      {"cumsum",
       {{"a", "tensor<3x4xf32>", true}},
       R"(  %c = nn.cumsum %a axis = 1 : tensor<3x4xf32>
  %e = nn.cumsum %a axis = 0 exclusive : tensor<3x4xf32>
  %r = nn.cumsum %a axis = 1 exclusive reverse : tensor<3x4xf32>
  %t = nn.mul %c, %e : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %y = nn.add %t, %r : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>"},
      // Rotations of any tables: the rule is the adjoint, exact for any.
      {"rope",
       {{"x", "tensor<2x2x3x6xf32>", true},
        {"c", "tensor<1x3x2xf32>", false},
        {"s", "tensor<1x3x2xf32>", false}},
       R"(  %h = nn.rope %x, %c, %s : (tensor<2x2x3x6xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<2x2x3x6xf32>
  %i = nn.rope %h, %c, %s {interleaved} : (tensor<2x2x3x6xf32>, tensor<1x3x2xf32>, tensor<1x3x2xf32>) -> tensor<2x2x3x6xf32>
  %y = nn.mul %i, %x : (tensor<2x2x3x6xf32>, tensor<2x2x3x6xf32>) -> tensor<2x2x3x6xf32>)",
       "tensor<2x2x3x6xf32>"},
      // Rows used twice, once, and not at all.
      {"embedding",
       {{"t", "tensor<5x3xf32>", true}},
       R"(  %ids = nn.constant dense<[[0, 2], [4, 2]]> : tensor<2x2xi64>
  %e = nn.embedding %t, %ids : (tensor<5x3xf32>, tensor<2x2xi64>) -> tensor<2x2x3xf32>
  %ids32 = nn.constant dense<[1, 2]> : tensor<2xi32>
  %f = nn.embedding %t, %ids32 : (tensor<5x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
  %y = nn.mul %e, %f : (tensor<2x2x3xf32>, tensor<2x3xf32>) -> tensor<2x2x3xf32>)",
       "tensor<2x2x3xf32>"},
      // GPT-2's fused QKV: split, the pieces sliced and put back together.
      {"split_slice_concat",
       {{"a", "tensor<2x6xf32>", true}, {"b", "tensor<2x2xf32>", true}},
       R"(  %q, %k, %v = nn.split %a axis = 1 : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x3xf32>, tensor<2x1xf32>
  %ks = nn.slice %k start = [0, 1] limit = [1, 3] stride = [1, 1] : tensor<2x3xf32> -> tensor<1x2xf32>
  %c = nn.concat %q, %b, %v axis = 1 : (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x1xf32>) -> tensor<2x5xf32>
  %cs = nn.slice %c start = [1, 0] limit = [2, 2] stride = [1, 1] : tensor<2x5xf32> -> tensor<1x2xf32>
  %y = nn.mul %ks, %cs : (tensor<1x2xf32>, tensor<1x2xf32>) -> tensor<1x2xf32>)",
       "tensor<1x2xf32>"},
      // Strided slices: strides 2 and 3 from nonzero starts, one whose
      // last stride runs past the input's end, and a stride of a stride.
      {"strided_slice",
       {{"a", "tensor<3x7xf32>", true}},
       R"(  %s1 = nn.slice %a start = [0, 1] limit = [3, 7] stride = [2, 3] : tensor<3x7xf32> -> tensor<2x2xf32>
  %s2 = nn.slice %a start = [1, 2] limit = [3, 7] stride = [1, 2] : tensor<3x7xf32> -> tensor<2x3xf32>
  %s3 = nn.slice %s2 start = [0, 0] limit = [2, 3] stride = [1, 2] : tensor<2x3xf32> -> tensor<2x2xf32>
  %y = nn.mul %s1, %s3 : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>)",
       "tensor<2x2xf32>"},
      // Along a middle axis with a negative index, and a scalar index.
      {"gather",
       {{"a", "tensor<3x4x2xf32>", true}},
       R"(  %i = nn.constant dense<[[1, -1], [0, 1]]> : tensor<2x2xi64>
  %g = nn.gather %a, %i axis = 1 : (tensor<3x4x2xf32>, tensor<2x2xi64>) -> tensor<3x2x2x2xf32>
  %j = nn.constant dense<2> : tensor<i32>
  %h = nn.gather %a, %j axis = 0 : (tensor<3x4x2xf32>, tensor<i32>) -> tensor<4x2xf32>
  %hs = nn.slice %h start = [0, 0] limit = [2, 2] stride = [1, 1] : tensor<4x2xf32> -> tensor<2x2xf32>
  %y = nn.mul %g, %hs : (tensor<3x2x2x2xf32>, tensor<2x2xf32>) -> tensor<3x2x2x2xf32>)",
       "tensor<3x2x2x2xf32>"},
      {"pow_abs_erf_trig",
       {{"a", "tensor<2x4xf32>", true, 0.5, 2.0},
        {"e", "tensor<4xf32>", true, 0.5, 2.5},
        {"b", "tensor<2x4xf32>", true}},
       // abs of values 0.5 or more from its kink, of both signs.
       R"(  %p = nn.pow %a, %e : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %sign = nn.constant dense<[[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, -1.0, 1.0]]> : tensor<2x4xf32>
  %away = nn.mul %a, %sign : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %ab = nn.abs %away : tensor<2x4xf32>
  %er = nn.erf %b : tensor<2x4xf32>
  %s = nn.sin %b : tensor<2x4xf32>
  %c = nn.cos %a : tensor<2x4xf32>
  %t1 = nn.add %p, %ab : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %t2 = nn.mul %er, %s : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %t3 = nn.add %t1, %t2 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = nn.add %t3, %c : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>)",
       "tensor<2x4xf32>"},
      // Elementwise max and min away from ties (b is a shifted by 0.5 or
      // more either way).
      {"max_min",
       {{"a", "tensor<2x3xf32>", true},
        {"d", "tensor<2x3xf32>", true, 0.5, 1.5}},
       R"(  %up = nn.add %a, %d : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %sign = nn.constant dense<[[1.0, -1.0, 1.0], [-1.0, 1.0, -1.0]]> : tensor<2x3xf32>
  %shift = nn.mul %d, %sign : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = nn.add %a, %shift : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %mx = nn.max %up, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %mn = nn.min %a, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %y = nn.mul %mx, %mn : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>)",
       "tensor<2x3xf32>"},
      // Attention's backward (nn.attention_grad): causal square, grouped
      // heads with a given scale and causal rows aligned at the last key,
      // a bool mask (some rows may see no key: P = 0 there, as the forward
      // gives zeros) and an additive float mask.
      {"attention_causal",
       {{"q", "tensor<2x2x4x4xf32>", true},
        {"k", "tensor<2x2x4x4xf32>", true},
        {"v", "tensor<2x2x4x3xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {causal} : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x3xf32>) -> tensor<2x2x4x3xf32>)",
       "tensor<2x2x4x3xf32>"},
      {"attention_gqa_scale",
       {{"q", "tensor<1x4x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x2xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {causal, scale = 0.6 : f32} : (tensor<1x4x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x2xf32>) -> tensor<1x4x3x2xf32>)",
       "tensor<1x4x3x2xf32>"},
      {"attention_bool_mask",
       {{"q", "tensor<2x2x3x4xf32>", true},
        {"k", "tensor<2x2x5x4xf32>", true},
        {"v", "tensor<2x2x5x3xf32>", true},
        {"s", "tensor<2x1x3x5xf32>", false}},
       R"(  %z = nn.constant dense<-0.5> : tensor<f32>
  %m = nn.compare gt, %s, %z : (tensor<2x1x3x5xf32>, tensor<f32>) -> tensor<2x1x3x5xi1>
  %y = nn.attention %q, %k, %v mask %m : (tensor<2x2x3x4xf32>, tensor<2x2x5x4xf32>, tensor<2x2x5x3xf32>, tensor<2x1x3x5xi1>) -> tensor<2x2x3x3xf32>)",
       "tensor<2x2x3x3xf32>"},
      {"attention_float_mask",
       {{"q", "tensor<1x2x4x4xf32>", true},
        {"k", "tensor<1x1x4x4xf32>", true},
        {"v", "tensor<1x1x4x4xf32>", true},
        {"bias", "tensor<4x4xf32>", false}},
       R"(  %y = nn.attention %q, %k, %v mask %bias : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>)",
       "tensor<1x2x4x4xf32>"},
      {"constant_operand",
       {{"a", "tensor<4xf32>", true}},
       R"(  %c = nn.constant dense<[1.0, -2.0, 0.5, 3.0]> : tensor<4xf32>
  %y = nn.mul %a, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>)",
       "tensor<4xf32>"},
      // What the cases above leave out of the table's attribute classes
      // (DerivativesF64Test's VocabularyIsCovered): each reduce kind with
      // and without keepdims, ...
      {"reduce_kinds_keepdims",
       {{"a", "tensor<3x3xf32>", true}},
       R"(  %ramp = nn.constant dense<[[0.0, 10.0, 0.0], [0.0, 0.0, 10.0], [10.0, 0.0, 0.0]]> : tensor<3x3xf32>
  %up = nn.add %a, %ramp : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %down = nn.sub %a, %ramp : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %mx = nn.reduce max %up axes = [1] keepdims : tensor<3x3xf32> -> tensor<3x1xf32>
  %mn = nn.reduce min %down axes = [1] : tensor<3x3xf32> -> tensor<3xf32>
  %s = nn.reduce sum %a axes = [0] keepdims : tensor<3x3xf32> -> tensor<1x3xf32>
  %m = nn.reduce mean %a axes = [1] : tensor<3x3xf32> -> tensor<3xf32>
  %p = nn.mul %mn, %m : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %pr = nn.reshape %p : tensor<3xf32> -> tensor<3x1xf32>
  %t = nn.mul %mx, %s : (tensor<3x1xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %y = nn.add %t, %pr : (tensor<3x3xf32>, tensor<3x1xf32>) -> tensor<3x3xf32>)",
       "tensor<3x3xf32>"},
      // ... a norm with a scale and no bias, with a bias and no scale, over
      // every dimension and from a middle one ...
      {"layer_norm_scale_or_bias",
       {{"x", "tensor<2x3x4xf32>", true},
        {"g", "tensor<4xf32>", true},
        {"b", "tensor<2x3x4xf32>", true}},
       R"(  %n = nn.layer_norm %x scale(%g : tensor<4xf32>) axis = 2 epsilon = 1.0e-05 : tensor<2x3x4xf32>
  %m = nn.layer_norm %x bias(%b : tensor<2x3x4xf32>) axis = 0 epsilon = 1.0e-05 : tensor<2x3x4xf32>
  %y = nn.mul %n, %m : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>)",
       "tensor<2x3x4xf32>"},
      {"rms_norm_middle",
       {{"x", "tensor<2x3x4xf32>", true}, {"g", "tensor<3x4xf32>", true}},
       R"(  %y = nn.rms_norm %x scale(%g : tensor<3x4xf32>) axis = 1 epsilon = 1.0e-06 : tensor<2x3x4xf32>)",
       "tensor<2x3x4xf32>"},
      // ... a reverse running sum that includes its element, the scans and
      // softmaxes along a first, middle and last axis ...
      {"cumsum_reverse_middle",
       {{"a", "tensor<2x3x4xf32>", true}},
       R"(  %c = nn.cumsum %a axis = 1 reverse : tensor<2x3x4xf32>
  %y = nn.mul %c, %a : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>)",
       "tensor<2x3x4xf32>"},
      {"softmax_axes",
       {{"a", "tensor<2x3x4xf32>", true}},
       R"(  %s0 = nn.softmax %a axis = 0 : tensor<2x3x4xf32>
  %s1 = nn.softmax %a axis = 1 : tensor<2x3x4xf32>
  %l1 = nn.log_softmax %a axis = 1 : tensor<2x3x4xf32>
  %l2 = nn.log_softmax %a axis = 2 : tensor<2x3x4xf32>
  %t1 = nn.mul %s0, %l1 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %t2 = nn.mul %s1, %l2 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %y = nn.add %t1, %t2 : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>)",
       "tensor<2x3x4xf32>"},
      // ... a gather along the last axis, a permutation that is not its own
      // inverse, a slice up to the end ...
      {"gather_transpose_slice",
       {{"a", "tensor<2x3x4xf32>", true}},
       R"(  %i = nn.constant dense<[3, -4, 1]> : tensor<3xi64>
  %g = nn.gather %a, %i axis = 2 : (tensor<2x3x4xf32>, tensor<3xi64>) -> tensor<2x3x3xf32>
  %t = nn.transpose %g permutation = [1, 2, 0] : tensor<2x3x3xf32> -> tensor<3x3x2xf32>
  %s = nn.slice %t start = [1, 0, 0] limit = [3, 3, 2] stride = [1, 1, 1] : tensor<3x3x2xf32> -> tensor<2x3x2xf32>
  %y = nn.mul %s, %s : (tensor<2x3x2xf32>, tensor<2x3x2xf32>) -> tensor<2x3x2xf32>)",
       "tensor<2x3x2xf32>"},
      // ... splits and concatenations along a first and a middle axis ...
      {"concat_split_axes",
       {{"a", "tensor<4x2x3xf32>", true}, {"b", "tensor<4x1x3xf32>", true}},
       R"(  %p, %q = nn.split %a axis = 0 : tensor<4x2x3xf32> -> tensor<1x2x3xf32>, tensor<3x2x3xf32>
  %r, %s = nn.split %a axis = 1 : tensor<4x2x3xf32> -> tensor<4x1x3xf32>, tensor<4x1x3xf32>
  %c = nn.concat %r, %b, %s axis = 1 : (tensor<4x1x3xf32>, tensor<4x1x3xf32>, tensor<4x1x3xf32>) -> tensor<4x3x3xf32>
  %d = nn.concat %q, %p axis = 0 : (tensor<3x2x3xf32>, tensor<1x2x3xf32>) -> tensor<4x2x3xf32>
  %ds = nn.slice %d start = [0, 0, 0] limit = [4, 1, 3] stride = [1, 1, 1] : tensor<4x2x3xf32> -> tensor<4x1x3xf32>
  %y = nn.mul %c, %ds : (tensor<4x3x3xf32>, tensor<4x1x3xf32>) -> tensor<4x3x3xf32>)",
       "tensor<4x3x3xf32>"},
      // ... and attention's other combinations of causal, mask and scale:
      // neither, a scale alone (grouped heads), a per-head float mask with
      // a scale, causal with a bool mask, causal with a float mask and a
      // scale (grouped heads).
      {"attention_plain",
       {{"q", "tensor<1x2x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x3xf32>) -> tensor<1x2x3x3xf32>)",
       "tensor<1x2x3x3xf32>"},
      {"attention_scale",
       {{"q", "tensor<2x4x2x3xf32>", true},
        {"k", "tensor<2x2x3x3xf32>", true},
        {"v", "tensor<2x2x3x2xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {scale = 0.4 : f32} : (tensor<2x4x2x3xf32>, tensor<2x2x3x3xf32>, tensor<2x2x3x2xf32>) -> tensor<2x4x2x2xf32>)",
       "tensor<2x4x2x2xf32>"},
      {"attention_float_mask_scale",
       {{"q", "tensor<1x2x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true},
        {"bias", "tensor<2x1x5xf32>", false}},
       R"(  %y = nn.attention %q, %k, %v mask %bias {scale = 0.8 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x3xf32>, tensor<2x1x5xf32>) -> tensor<1x2x3x3xf32>)",
       "tensor<1x2x3x3xf32>"},
      {"attention_causal_bool_mask",
       {{"q", "tensor<1x2x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true},
        {"s", "tensor<3x5xf32>", false}},
       R"(  %z = nn.constant dense<-0.5> : tensor<f32>
  %m = nn.compare gt, %s, %z : (tensor<3x5xf32>, tensor<f32>) -> tensor<3x5xi1>
  %y = nn.attention %q, %k, %v mask %m {causal} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x3xf32>, tensor<3x5xi1>) -> tensor<1x2x3x3xf32>)",
       "tensor<1x2x3x3xf32>"},
      {"attention_causal_float_mask_scale",
       {{"q", "tensor<1x4x4x2xf32>", true},
        {"k", "tensor<1x2x4x2xf32>", true},
        {"v", "tensor<1x2x4x3xf32>", true},
        {"bias", "tensor<1x4x1x4xf32>", false}},
       R"(  %y = nn.attention %q, %k, %v mask %bias {causal, scale = 0.7 : f32} : (tensor<1x4x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x2x4x3xf32>, tensor<1x4x1x4xf32>) -> tensor<1x4x4x3xf32>)",
       "tensor<1x4x4x3xf32>"},
      // Gemma2's softcap with each combination of causal, scale and mask
      // (a cap of 0.8 to 2 bends the scores of these inputs well into
      // tanh's curve).
      {"attention_softcap",
       {{"q", "tensor<1x2x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {softcap = 0.9 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x3xf32>) -> tensor<1x2x3x3xf32>)",
       "tensor<1x2x3x3xf32>"},
      {"attention_softcap_scale",
       {{"q", "tensor<1x4x3x2xf32>", true},
        {"k", "tensor<1x2x3x2xf32>", true},
        {"v", "tensor<1x2x3x3xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {scale = 0.6 : f32, softcap = 1.5 : f32} : (tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x3xf32>) -> tensor<1x4x3x3xf32>)",
       "tensor<1x4x3x3xf32>"},
      {"attention_softcap_float_mask",
       {{"q", "tensor<1x2x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true},
        {"bias", "tensor<3x5xf32>", false}},
       R"(  %y = nn.attention %q, %k, %v mask %bias {softcap = 0.8 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x3xf32>, tensor<3x5xf32>) -> tensor<1x2x3x3xf32>)",
       "tensor<1x2x3x3xf32>"},
      {"attention_softcap_bool_mask_scale",
       {{"q", "tensor<1x2x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true},
        {"s", "tensor<3x5xf32>", false}},
       R"(  %z = nn.constant dense<-0.5> : tensor<f32>
  %m = nn.compare gt, %s, %z : (tensor<3x5xf32>, tensor<f32>) -> tensor<3x5xi1>
  %y = nn.attention %q, %k, %v mask %m {scale = 0.9 : f32, softcap = 1.2 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x3xf32>, tensor<3x5xi1>) -> tensor<1x2x3x3xf32>)",
       "tensor<1x2x3x3xf32>"},
      {"attention_softcap_causal",
       {{"q", "tensor<1x4x3x2xf32>", true},
        {"k", "tensor<1x2x3x2xf32>", true},
        {"v", "tensor<1x2x3x3xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {causal, softcap = 2.0 : f32} : (tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x3xf32>) -> tensor<1x4x3x3xf32>)",
       "tensor<1x4x3x3xf32>"},
      {"attention_softcap_causal_scale",
       {{"q", "tensor<1x2x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {causal, scale = 0.7 : f32, softcap = 0.8 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x3xf32>) -> tensor<1x2x3x3xf32>)",
       "tensor<1x2x3x3xf32>"},
      {"attention_softcap_causal_bool_mask",
       {{"q", "tensor<1x2x3x4xf32>", true},
        {"k", "tensor<1x2x5x4xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true},
        {"s", "tensor<3x5xf32>", false}},
       R"(  %z = nn.constant dense<-0.5> : tensor<f32>
  %m = nn.compare gt, %s, %z : (tensor<3x5xf32>, tensor<f32>) -> tensor<3x5xi1>
  %y = nn.attention %q, %k, %v mask %m {causal, softcap = 1.1 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x5x4xf32>, tensor<1x2x5x3xf32>, tensor<3x5xi1>) -> tensor<1x2x3x3xf32>)",
       "tensor<1x2x3x3xf32>"},
      {"attention_softcap_causal_float_mask_scale",
       {{"q", "tensor<1x4x3x2xf32>", true},
        {"k", "tensor<1x2x3x2xf32>", true},
        {"v", "tensor<1x2x3x3xf32>", true},
        {"bias", "tensor<3x3xf32>", false}},
       R"(  %y = nn.attention %q, %k, %v mask %bias {causal, scale = 0.5 : f32, softcap = 0.9 : f32} : (tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x3xf32>, tensor<3x3xf32>) -> tensor<1x4x3x3xf32>)",
       "tensor<1x4x3x3xf32>"},
      // A sliding window (Mistral's, Gemma2's local layers): row i sees
      // keys i + (skv - sq) - window < j <= i + (skv - sq).
      {"attention_window",
       {{"q", "tensor<1x2x4x3xf32>", true},
        {"k", "tensor<1x2x6x3xf32>", true},
        {"v", "tensor<1x2x6x2xf32>", true}},
       R"(  %y = nn.attention %q, %k, %v {causal, window = 2 : i64} : (tensor<1x2x4x3xf32>, tensor<1x2x6x3xf32>, tensor<1x2x6x2xf32>) -> tensor<1x2x4x2xf32>)",
       "tensor<1x2x4x2xf32>"},
      {"attention_window_gqa_bool_mask_softcap",
       {{"q", "tensor<1x4x5x2xf32>", true},
        {"k", "tensor<1x2x5x2xf32>", true},
        {"v", "tensor<1x2x5x3xf32>", true},
        {"s", "tensor<1x5xf32>", false}},
       R"(  %z = nn.constant dense<-0.5> : tensor<f32>
  %m = nn.compare gt, %s, %z : (tensor<1x5xf32>, tensor<f32>) -> tensor<1x5xi1>
  %y = nn.attention %q, %k, %v mask %m {causal, window = 3 : i64, softcap = 1.5 : f32} : (tensor<1x4x5x2xf32>, tensor<1x2x5x2xf32>, tensor<1x2x5x3xf32>, tensor<1x5xi1>) -> tensor<1x4x5x3xf32>)",
       "tensor<1x4x5x3xf32>"},
  };
  return all;
}

AllDialectsContext::AllDialectsContext() : MLIRContext(registry()) {
  loadAllAvailableDialects();
}

DialectRegistry AllDialectsContext::registry() {
  DialectRegistry registry;
  mlir::partita::registerAllDialects(registry);
  return registry;
}
