//===- Passes.td - nn transformation passes ----------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_TRANSFORMS_PASSES_TD
#define PARTITA_DIALECT_NN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrintShardingRulesPass : Pass<"partita-print-sharding-rules"> {
  let summary = "Report the sharding rule of every nn op";
  let description = [{
    Emits a remark on every op that implements `ShardingRuleOpInterface`
    with its factor mapping, after checking the rule against the op's types
    (every dimension's factors multiply to its size; no tensor uses a factor
    twice). A rule that fails the check is an error: it is a compiler bug.

    The notation is einsum-like: one bracket per operand and result, one
    entry per dimension, factors named `i, j, k, ...`; a dimension of several
    factors lists them major to minor (`jk`), one of size 1 prints `1`.
    Braces give each factor's size and, unless it is parallel, its kind:

    ```
    nn.matmul: ([i, j, l], [l, k]) -> ([i, j, k]) {i=2, j=8, k=32, l=16 reduction}
    ```
  }];
  let statistics = [
    Statistic<"numRules", "rules", "Number of sharding rules reported">
  ];
}

def RaisePass : Pass<"partita-raise"> {
  let summary = "Raise decomposed subgraphs to transformer-level nn ops";
  let description = [{
    The ONNX importer translates op for op, so what an exporter decomposed
    arrives as chains of elementwise ops. This pass recognizes them and
    replaces each with the op the rest of the compiler reasons about:

    - `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)`, then `* gamma`
      and `+ beta`, becomes `nn.layer_norm` with scale and bias;
    - `x * rsqrt(mean(x^2) + eps)`, then `* w`, becomes `nn.rms_norm`;
    - `x * 0.5 * (1 + erf(x / sqrt(2)))` and its tanh approximation become
      `nn.gelu`; `x * sigmoid(x)` becomes `nn.silu`;
    - `softmax(scale * q k^T + mask) v` becomes `nn.attention`: a constant
      causal mask becomes `causal`, other masks the `mask` operand, and
      key/value heads repeated for grouped-query attention are un-repeated;
      torch's `where(isnan(p), 0, p)` after the softmax goes (nn.attention
      gives 0 where it would), and rank-3 `[b * h, s, d]` attention
      (MultiheadAttention) is raised on `[b, h, s, d]`;
    - `x * cos + rotate_half(x) * sin` with cos and sin of equal halves
      becomes `nn.rope`;
    - `matmul(a, w) + b` with a vector `b` becomes `nn.matmul` with a bias;
    - transformers' batched experts (each slot's expert weights gathered
      from the stacked `[E, out, in]` weights, multiplied by the token
      repeated k times, activated, weighted by the routing weights and
      summed over the slots) become `nn.moe` on the stacked weights.

    The patterns run with the nn canonicalizations, so transposes the
    rewrites introduce compose with the exporter's and shape arithmetic
    folds away. Subgraphs that only resemble a pattern (a non-scalar
    epsilon, a softmax over another axis, a product with other uses) are
    left as they are.

    ```mlir
    %s = nn.matmul %q, %kt : (tensor<2x12x8x64xf32>, tensor<2x12x64x8xf32>) -> tensor<2x12x8x8xf32>
    %m = nn.where %causal, %s, %min : (tensor<1x1x8x8xi1>, tensor<2x12x8x8xf32>, tensor<f32>) -> tensor<2x12x8x8xf32>
    %p = nn.softmax %m axis = 3 : tensor<2x12x8x8xf32>
    %o = nn.matmul %p, %v : (tensor<2x12x8x8xf32>, tensor<2x12x8x64xf32>) -> tensor<2x12x8x64xf32>
    // becomes
    %o = nn.attention %q, %k, %v {causal, scale = 1.000000e+00 : f32} : (...) -> tensor<2x12x8x64xf32>
    ```
  }];
  let dependentDialects = ["::mlir::partita::nn::NNDialect"];
  let statistics = [
    Statistic<"numLayerNorms", "layer-norms", "Number of nn.layer_norm ops raised">,
    Statistic<"numRmsNorms", "rms-norms", "Number of nn.rms_norm ops raised">,
    Statistic<"numGelus", "gelus", "Number of nn.gelu ops raised">,
    Statistic<"numSilus", "silus", "Number of nn.silu ops raised">,
    Statistic<"numAttentions", "attentions", "Number of nn.attention ops raised">,
    Statistic<"numRopes", "ropes", "Number of nn.rope ops raised">,
    Statistic<"numMatmulBiases", "matmul-biases",
              "Number of bias additions folded into nn.matmul">,
    Statistic<"numMoes", "moes", "Number of nn.moe ops raised">
  ];
}

def KvCachePass : Pass<"partita-kv-cache", "::mlir::func::FuncOp"> {
  let summary = "Keep a decoder's keys and values in a preallocated cache (--max-seq)";
  let description = [{
    A decoder exported with past key values returns each layer's keys and
    values as `present = nn.concat(past, new)` along the sequence axis, the
    caller feeding `present` back as the next step's `past`. This pass
    makes the cache state instead: each such `past` argument is replaced by
    a cache argument of `max-seq` slots, and the concatenation by an
    `nn.kv_cache_write` of the new keys or values at slot `cache_position`
    (a new i64 [1] argument). The cache argument and the result that
    returns the written cache are both named after `present` and marked
    `partita.kv_cache`: the runtime binds both to the same memory, which it
    keeps on its rank between runs, and the artifact lists them as its
    cache, not as inputs or outputs.

    Two forms, told apart by the length of `past`:
    - prefill (`past` of length 0): attention reads the new keys, as the
      concatenation did; the cache is written at `[p, p + s)` for the
      result.
    - decode (`past` of length `max-seq - s`): attention reads the written
      cache, all `max-seq` slots, the attention mask marking which are
      filled, as the concatenation's `past + s` slots.

    ```mlir
    func.func @main(%past: tensor<1x2x7x8xf32> {onnx.name = "past_key_values.0.key"}, ...)
        -> (..., tensor<1x2x8x8xf32> {onnx.name = "present.0.key"}) {
      %kv = nn.concat %past, %k axis = 2 : (tensor<1x2x7x8xf32>, tensor<1x2x1x8xf32>) -> tensor<1x2x8x8xf32>
      ...
    // becomes, with max-seq=8
    func.func @main(..., %cache: tensor<1x2x8x8xf32> {onnx.name = "present.0.key", partita.kv_cache},
                    %pos: tensor<1xi64> {onnx.name = "cache_position"})
        -> (..., tensor<1x2x8x8xf32> {onnx.name = "present.0.key", partita.kv_cache}) {
      %kv = nn.kv_cache_write %cache, %k, %pos axis = 2 : (tensor<1x2x8x8xf32>, tensor<1x2x1x8xf32>, tensor<1xi64>) -> tensor<1x2x8x8xf32>
    ```

    A decode step whose rows write at positions of their own
    (onnxruntime's GroupQueryAttention, rows of unequal lengths) is
    imported as `present = nn.kv_cache_write(nn.concat(past, fill), new,
    positions)` with one position per row and a constant `fill` (zeros):
    there the cache argument takes
    the padded past's place and the write keeps its positions
    (`cache_position` is added only where a concatenation needs it).

    A function with no such pair, or with a `past` of another length, is an
    error.
  }];
  let options = [
    Option<"maxSeq", "max-seq", "int64_t", /*default=*/"0",
           "Slots of the cache: the prompt and every generated token">
  ];
  let dependentDialects = ["::mlir::partita::nn::NNDialect"];
}

def ConvertFloatPass : Pass<"partita-convert-float", "::mlir::func::FuncOp"> {
  let summary = "Store fp32 tensors as bf16 or fp16 (--dtype)";
  let description = [{
    Changes the element type of every f32 tensor of the function to the
    type `to` names: op results, constants (their values rounded to nearest,
    ties to even) and the function's f32 arguments, which are cast right
    after entry; f32 results are cast back before the return, so the
    function's signature, and with it the artifact's inputs and outputs,
    stays that of the model. Integer and boolean tensors are left alone.

    Kernels compute in fp32 and round when they store (docs/exec-program.md),
    so the pass decides what is kept in memory and moved between devices,
    not the precision of arithmetic: products and reductions accumulate in
    fp32 on every target. A pass that runs after this one and creates a
    tensor chooses its type itself (ring attention keeps its log-sum-exp in
    fp32).

    ```mlir
    func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
      %w = nn.constant dense<...> : tensor<8x8xf32>
      %y = nn.matmul %x, %w : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
      return %y : tensor<2x8xf32>
    }
    // becomes, with to=bf16
    func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
      %0 = nn.cast %x : tensor<2x8xf32> -> tensor<2x8xbf16>
      %w = nn.constant dense<...> : tensor<8x8xbf16>
      %y = nn.matmul %0, %w : (tensor<2x8xbf16>, tensor<8x8xbf16>) -> tensor<2x8xbf16>
      %1 = nn.cast %y : tensor<2x8xbf16> -> tensor<2x8xf32>
      return %1 : tensor<2x8xf32>
    }
    ```
  }];
  let options = [
    Option<"to", "to", "::mlir::partita::StorageType",
           /*default=*/"::mlir::partita::StorageType::BF16",
           "The storage type of f32 tensors: bf16 or fp16",
           [{::mlir::partita::optionValues({::mlir::partita::StorageType::BF16,
                                           ::mlir::partita::StorageType::FP16})}]>
  ];
  let dependentDialects = ["::mlir::partita::nn::NNDialect"];
}

def AddLossPass : Pass<"partita-add-loss", "::mlir::func::FuncOp"> {
  let summary = "Replace a model's outputs with its training loss";
  let description = [{
    The training step's loss (`--loss KIND:OUTPUT`, docs/training.md): the
    function's result named `output` (its `onnx.name`) becomes the loss,
    the one result left, marked `partita.loss` and named `loss`; the other
    outputs go.

    - `cross_entropy`: the output is `[..., classes]` logits; an argument
      `labels` (i64, the output's shape without its last dimension) is
      added, and the loss is the mean over the positions whose label is
      not -100 of `-log_softmax(logits)[label]`: torch's
      `F.cross_entropy(logits.flatten(0, -2), labels.flatten(),
      ignore_index=-100)` on labels the caller has already shifted. With
      every label -100 it is 0/0, NaN, as torch's. The label's entry is
      picked by comparing it with the class index (a one-hot product),
      which shards with the classes. A label outside `[0, classes)` other
      than -100 picks nothing here: the runtime refuses it before a step
      (planned with the training runtime).
    - `mse`: an argument `target` shaped like the output is added, and the
      loss is the mean of `(output - target)^2`.

    ```mlir
    func.func @main(%x: tensor<2x8xi64> {onnx.name = "input_ids"})
        -> (tensor<2x8x128xf32> {onnx.name = "logits"})
    // with kind=cross_entropy output=logits becomes
    func.func @main(%x: tensor<2x8xi64> {onnx.name = "input_ids"},
                    %labels: tensor<2x8xi64> {onnx.name = "labels"})
        -> (tensor<f32> {onnx.name = "loss", partita.loss})
    ```
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"cross_entropy\"",
           "cross_entropy or mse">,
    Option<"output", "output", "std::string", /*default=*/"\"\"",
           "The ONNX name of the output the loss reads">
  ];
  let dependentDialects = ["::mlir::partita::nn::NNDialect"];
}

def SplitFusedParametersPass
    : Pass<"partita-split-fused-parameters", "::mlir::func::FuncOp"> {
  let summary = "Hold a fused projection's parameter as its segments";
  let description = [{
    A training step's fused projection (GPT-2's query/key/value `c_attn`: a
    matmul by a parameter `[k, S*p]` whose result is only split into `S`
    equal segments along its last dimension) becomes `S` matmuls, one per
    segment, and the parameter is held as `[k, S, p]`: the same elements in
    the same order, so its initializer is read unchanged. A tensor-parallel
    split of the last dimension then gives each rank its part of every
    segment, which a split of `[k, S*p]` cannot express (it would give rank
    0 the query and half the key). A bias `[S*p]` that is a parameter
    becomes `[S, p]` alike. Inference does the same by permuting the
    weight's columns (partita-annotate); a parameter cannot be permuted, as
    checkpoints and gradients are read in the initializer's layout.

    The parameter keeps its ONNX shape in `partita.parameter_shape`: the
    optimizer gives its state that mark and its `NAME.grad` output that
    shape, and checkpoints record it (docs/training.md).

    ```mlir
    %qkv = nn.matmul %x, %w bias %b : (tensor<2x8x32xf32>, tensor<32x96xf32>, tensor<96xf32>) -> tensor<2x8x96xf32>
    %q, %k, %v = nn.split %qkv axis = 2 : ...
    // with %w: tensor<32x3x32xf32> {partita.parameter_shape = array<i64: 32, 96>}
    %ws:3 = nn.split %w axis = 1 : tensor<32x3x32xf32> -> tensor<32x1x32xf32>, ...
    %wq = nn.reshape %ws#0 : tensor<32x1x32xf32> -> tensor<32x32xf32>
    %q = nn.matmul %x, %wq bias %bq : ...
    ```
  }];
  let dependentDialects = ["::mlir::partita::nn::NNDialect"];
}

def DifferentiatePass : Pass<"partita-differentiate", "::mlir::func::FuncOp"> {
  let summary = "Reverse-mode differentiation of the loss by the parameters";
  let description = [{
    Appends to the function the gradient of its loss by each of its
    parameters: the result marked `partita.loss` (a float tensor of one
    element) is differentiated by every argument marked `partita.parameter`
    (its value, a string, names the parameter), and one result per
    parameter, marked `partita.gradient` with the same name and typed as
    the parameter, is added after the existing ones. It runs on global nn
    IR, so that the backward goes through sharding propagation and
    partitioning as the forward does (docs/training.md).

    The reverse sweep visits the ops between a parameter and the loss
    (those whose results depend on a parameter and reach the loss), last
    to first, and builds each one's vector-Jacobian product through its
    `DifferentiableOpInterface` (NNDerivatives.cpp) just before the return;
    the cotangents of a value used several times are added. An op on that
    path without the interface is an error naming it. A parameter the loss
    does not depend on gets a zero gradient.

    ```mlir
    func.func @main(%x: tensor<4x3xf32>,
                    %w: tensor<3x2xf32> {partita.parameter = "w"})
        -> (tensor<f32> {partita.loss}) {
      %y = nn.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
      %l = nn.reduce sum %y axes = [0, 1] : tensor<4x2xf32> -> tensor<f32>
      return %l : tensor<f32>
    }
    // gains a result tensor<3x2xf32> {partita.gradient = "w"}: x^T 1.
    ```
  }];
  let dependentDialects = ["::mlir::partita::nn::NNDialect"];
}

def FuseDequantizePass
    : Pass<"partita-fuse-dequantize", "::mlir::func::FuncOp"> {
  let summary = "Multiply by packed weights without dequantizing them first";
  let description = [{
    An `nn.matmul` whose weight is an `nn.dequantize` read by nothing else
    becomes one `nn.quantized_matmul` of the packed operands, whose kernel
    dequantizes each block of the weight as it multiplies by it: a rank
    holds only the packed bytes, never the float weight. Runs in the exec
    pipeline, after partitioning, on each rank's program, so that the
    sharding passes see a plain matmul by a weight (docs/frontend.md, "int4
    weights").

    ```mlir
    %w = nn.dequantize %q, %s {bits = 4 : i64, block_size = 32 : i64} : (tensor<128x2x16xi8>, tensor<128x2xf32>) -> tensor<64x128xf32>
    %y = nn.matmul %x, %w : (tensor<2x6x64xf32>, tensor<64x128xf32>) -> tensor<2x6x128xf32>
    // becomes
    %y = nn.quantized_matmul %x, %q, %s {bits = 4 : i64, block_size = 32 : i64} : (tensor<2x6x64xf32>, tensor<128x2x16xi8>, tensor<128x2xf32>) -> tensor<2x6x128xf32>
    ```

    A dequantized weight read by anything else (or multiplied with batch
    dimensions of its own) stays an `nn.dequantize`, which the runtime
    computes as a kernel of its own.
  }];
  let statistics = [
    Statistic<"numFused", "fused", "Matmuls fused with their dequantize">
  ];
}

def MoeCapacityPass : Pass<"partita-moe-capacity", "::mlir::func::FuncOp"> {
  let summary = "Bound the tokens each expert of a mixture takes";
  let description = [{
    With `factor` F > 0, each expert of every `nn.moe` takes at most
    `C = ceil(F * T * k / E)` of the (token, expert) pairs routed to it
    (`T` the op's tokens, the whole batch; `k` the experts per token; `E`
    the experts): the first `C` in token order, as Megatron-Core's
    `--moe-expert-capacity-factor` with its `position` drop policy. A
    dropped pair's id becomes -1, which selects no expert: the token gets
    nothing from that expert and its other routing weights are not
    renormalized (its residual connection carries it, as in Megatron and
    GShard). The rewrite is nn ops on the ids (a one-hot of each pair's
    expert, its running count down the pairs, a compare with `C`),
    written before sharding, so every mesh drops the same pairs: the
    bound is the batch's, not each rank's share of it (Megatron bounds
    each rank's tokens, so its drops change with the parallel layout). A
    capacity of `T` or more drops nothing and leaves the op alone. `F`
    0 (the default) is dropless.

    ```mlir
    %y = nn.moe silu %x, %ids, %w experts(%fc1, %fc2) : ...
    // with factor=1.0 over 8 tokens, top 2 of 4 experts (C = 4): becomes
    %hit = nn.cast %{{eq}} : tensor<16x4xi1> -> tensor<16x4xi64>
    %running = nn.cumsum %hit axis = 0 : tensor<16x4xi64>
    ...
    %kept_ids = nn.where %kept, %ids, %none : ...
    %y = nn.moe silu %x, %kept_ids, %w experts(%fc1, %fc2) : ...
    ```
  }];
  let options = [
    Option<"factor", "factor", "double", /*default=*/"0",
           "Each expert takes at most ceil(factor * tokens * k / experts) "
           "pairs (0: no bound)">,
  ];
  let statistics = [
    Statistic<"numBounded", "bounded", "nn.moe ops whose experts are bounded">
  ];
}

def ExpandMoePass : Pass<"partita-expand-moe", "::mlir::func::FuncOp"> {
  let summary = "Write nn.moe densely, for a training step's derivatives";
  let description = [{
    Every `nn.moe` becomes the dense computation it stands for: every
    expert's MLP on every token, as one batched `nn.matmul` per projection
    over the stacked `[E, out, in]` weights (read through a transpose), its
    activation, and each token's sum over its routed experts, weighted by
    their routing weights and selected by `nn.where` (an expert's output on
    a token not routed to it never enters, not even as 0 times inf). That
    is `E / k` times the routed work: a training step runs it before
    differentiation, as `nn.moe` has no vector-Jacobian product of its own
    yet (docs/training.md). Inference runs `nn.moe` itself, on the host and
    in the CUDA generator's grouped kernels.

    ```mlir
    %y = nn.moe silu %x, %ids, %w experts(%fc1, %fc2) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x16x8xf32>, tensor<3x8x16xf32>) -> tensor<4x8xf32>
    // becomes
    %h = nn.matmul %x3, %fc1t : (tensor<1x4x8xf32>, tensor<3x8x16xf32>) -> tensor<3x4x16xf32>
    ...
    %y = nn.reduce sum %kept axes = [0] keepdims : tensor<3x4x8xf32> -> tensor<1x4x8xf32>
    ```
  }];
  let statistics = [
    Statistic<"numExpanded", "expanded", "nn.moe ops written densely">
  ];
}

def OptimizerPass : Pass<"partita-optimizer", "::mlir::func::FuncOp"> {
  let summary = "Append the optimizer's update of every parameter";
  let description = [{
    The last pass of a training step (`--optimizer`, docs/training.md), on
    the function partita-differentiate left: for each argument marked
    `partita.parameter` and its result marked `partita.gradient`, the
    updated parameter is appended as a result named like the parameter
    and marked `partita.update`; the optimizer's state of each parameter
    is an argument marked `partita.optimizer_state` (named
    `NAME/exp_avg`, `NAME/exp_avg_sq` or `NAME/momentum_buffer`, as
    torch's `optimizer.state` keys them) with its update a result marked
    likewise. The runtime keeps both on the ranks between steps, each
    argument and the result of its name in the same memory; the updates
    are built last, after every other use of the old values, so that the
    program may write them in place.

    The learning rate is an argument `lr` (f32 scalar) that the runtime
    gives each step (a schedule is the caller's); AdamW adds
    `bias_correction1` and `bias_correction2`, `1 - beta^t` of the step's
    number t computed in double by the runtime, as torch computes them.
    The update is torch's, elementwise in f32:

    - `sgd`: d = g + weight_decay * p; with momentum, buf = momentum * buf
      + d (the buffer starts at zero, so the first step's is d) and d =
      buf; p -= lr * d.
    - `adamw`: p *= 1 - lr * weight_decay; m = beta1 m + (1 - beta1) g;
      v = beta2 v + (1 - beta2) g^2; p -= lr / bias_correction1 * m /
      (sqrt(v) / sqrt(bias_correction2) + eps).

    With `clip-grad-norm` C > 0 every gradient is first scaled by
    min(1, C / (norm + 1e-6)), norm the 2-norm of all gradients together
    (`torch.nn.utils.clip_grad_norm_`). The gradient results go, unless
    `output-gradients` keeps each (unclipped) as an output `NAME.grad`.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"\"",
           "sgd:lr=L[,momentum=M,weight_decay=W] or adamw:lr=L[,beta1=B1,"
           "beta2=B2,eps=E,weight_decay=W]">,
    Option<"clipGradNorm", "clip-grad-norm", "double", /*default=*/"0",
           "Clip the gradients' global norm to this (0: no clipping)">,
    Option<"outputGradients", "output-gradients", "bool", /*default=*/"false",
           "Keep each gradient as an output NAME.grad">
  ];
  let dependentDialects = ["::mlir::partita::nn::NNDialect"];
}

#endif // PARTITA_DIALECT_NN_TRANSFORMS_PASSES_TD
