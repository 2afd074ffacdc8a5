// RUN: partita-opt %s -split-input-file -verify-diagnostics --partita-annotate="mesh=tp=4"
// RUN: not partita-opt %s --partita-annotate="mesh=tp=0" 2>&1 | FileCheck %s --check-prefix=SIZE
// RUN: not partita-opt %s --partita-annotate="mesh=tp" 2>&1 | FileCheck %s --check-prefix=FORM
// RUN: not partita-opt %s --partita-annotate="mesh=tp=2,tp=2" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not partita-opt %s --partita-annotate="mesh=tp=2 strategy=alpa" 2>&1 | FileCheck %s --check-prefix=STRATEGY
// RUN: not partita-opt %s --partita-annotate="mesh=dp=1,ep=2" 2>&1 | FileCheck %s --check-prefix=AXIS
// RUN: not partita-opt %s --partita-annotate="mesh=model=2" 2>&1 | FileCheck %s --check-prefix=NOROLE
// RUN: not partita-opt %s --partita-annotate="mesh=model=2:xp" 2>&1 | FileCheck %s --check-prefix=ROLE
// RUN: not partita-opt %s --partita-annotate="mesh=model=2:tp,tp=2" 2>&1 | FileCheck %s --check-prefix=ROLETWICE
// RUN: not partita-opt %s -split-input-file --partita-annotate="mesh=tp=2 sp-mode=megatron" 2>&1 | FileCheck %s --check-prefix=FLAT

// SIZE: error: --mesh tp=0: axis 'tp' has size 0; sizes are at least 1
// FORM: error: --mesh tp: 'tp' is not of the form axis=size
// TWICE: error: --mesh tp=2,tp=2: axis 'tp' is given twice
// STRATEGY: partita-opt: error: --strategy expects megatron or none, got 'alpa'
// AXIS: error: axis 'ep' (size 2) splits the experts of a mixture of experts (nn.moe), and the model has none: it would only replicate the model
// An axis that is not named dp, tp, pp or sp has no role unless given one.
// NOROLE: error: the megatron strategy splits over dp and tp; axis 'model' (size 2) would only replicate the model
// ROLE: error: --mesh model=2:xp: 'model=2:xp': unknown role 'xp'; expected dp, tp, pp, sp, ep or none
// ROLETWICE: error: --mesh model=2:tp,tp=2: axes 'model' and 'tp' both have role tp

// The weight a strategy splits must divide evenly; the error names it, its
// role, the dimension and the axis.
func.func @uneven(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %w1 = nn.constant dense<0.5> : tensor<16x6xf32>
  %w2 = nn.constant dense<0.5> : tensor<6x16xf32>
  %h = nn.matmul %x, %w1 : (tensor<2x8x16xf32>, tensor<16x6xf32>) -> tensor<2x8x6xf32>
  %g = nn.relu %h : tensor<2x8x6xf32>
  // expected-error @+1 {{cannot split operand 1 of nn.matmul (MLP down projection) over tp=4: dimension 0 has size 6, which tp does not divide}}
  %d = nn.matmul %g, %w2 : (tensor<2x8x6xf32>, tensor<6x16xf32>) -> tensor<2x8x16xf32>
  return %d : tensor<2x8x16xf32>
}

// -----

// A module that declares its mesh keeps it; --mesh may not replace it.
// expected-error @below {{--mesh tp=4 given, but the module declares @mine}}
module {
  dist.mesh @mine [tp = 2]
}

// -----

// Sequence parallelism splits the residual stream where it enters a norm,
// [batch, sequence, hidden]; a model whose norms all see flattened tokens
// has no sequence dimension to split, and says so.
// FLAT: error: --sp-mode splits the residual stream on the sequence, the [batch, sequence, hidden] input of a norm over hidden, but no norm has such an input; this one's is 'tensor<16x8xf32>'
func.func @flattened(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
  %n = nn.layer_norm %x axis = 1 epsilon = 1.0E-5 : tensor<16x8xf32>
  return %n : tensor<16x8xf32>
}
