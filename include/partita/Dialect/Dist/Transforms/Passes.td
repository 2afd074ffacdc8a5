//===- Passes.td - sharding passes -------------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_TD
#define PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PlanMeshPass : Pass<"partita-plan-mesh", "::mlir::ModuleOp"> {
  let summary = "Choose the mesh and the parallel options for a number of "
                "devices (--mesh auto)";
  let description = [{
    Searches the meshes and strategies of `devices` devices on the module's
    cluster (`partita.cluster`, else the default preset) with the cost model
    (docs/planning.md), reading the shapes of `main` only, and writes its
    choice as IR: a `dist.mesh @mesh` of the chosen axes (none for one
    device), and the module attribute `partita.plan`, a dictionary of what
    the later phases compile with (`mesh`, `sp_mode`, `microbatches`,
    `virtual_stages`, `collective_matmul`), what the cost model predicts
    (`step_seconds`, `memory_bytes`) and why the other families lost
    (`rejected`). partita-compile --mesh auto runs it between the raise and
    the shard phases and compiles with what it chose, so `--dump-pipeline`
    replays planning like every other phase. A module that declares a mesh
    already is refused, and so is one no plan fits (unless
    `require-fit=false`, as `--emit plan` prints the candidates of a model
    that fits nowhere). When more devices are asked for than the cluster
    has, the cluster grows by nodes of its kind and `partita.cluster` says
    so.

    ```mlir
    module attributes {partita.plan = {collective_matmul = false,
        mesh = "tp=2", microbatches = 1 : i64, sp_mode = "none", ...}} {
      dist.mesh @mesh [tp = 2]
      ...
    }
    ```
  }];
  let options = [
    Option<"devices", "devices", "int64_t", /*default=*/"0",
           "How many devices (0: the cluster's)">,
    Option<"objective", "objective", "::mlir::partita::PlanObjective",
           /*default=*/"::mlir::partita::PlanObjective::Latency",
           "What the plan minimizes",
           "::mlir::partita::optionValues<::mlir::partita::PlanObjective>()">,
    Option<"deviceMemory", "device-memory", "double", /*default=*/"0",
           "The memory of one device in bytes (0: the cluster's)">,
    Option<"requireFit", "require-fit", "bool", /*default=*/"true",
           "Refuse the module when no plan fits">,
    Option<"expertDispatch", "expert-dispatch", "bool", /*default=*/"true",
           "Plan ep as the annotation's expert-dispatch builds it: the "
           "batch split over ep where dp times ep divides it, the tokens "
           "dispatched to their experts">,
  ];
  let dependentDialects = ["::mlir::partita::dist::DistDialect"];
}

def AnnotatePass : Pass<"partita-annotate", "::mlir::ModuleOp"> {
  let summary = "Pin the shardings a parallel strategy decides";
  // `}]` ends a TableGen code block, so the example splices it in with `#`.
  let description = [{
    Declares the mesh given by `mesh` as `dist.mesh @mesh` (unless the
    module declares one already) and puts `dist.annotate` ops, marked
    `dist.strategy`, on the few values that decide the plan of `strategy`.
    Propagation fills in the rest; a person's own annotations (unmarked)
    outrank these.

    `megatron` (tensor parallelism on `tp`, data parallelism on `dp`):

    - weights of matmuls that produce attention's queries, keys or values,
      and of the first matmuls of an MLP (whose results reach the next
      matmul through activations and products only), are split on their
      output features over `tp` (column parallel);
    - weights of the matmul after attention and of the MLP's last matmul
      are split on their input features (row parallel), so each layer's
      attention and MLP end in one all-reduce;
    - embedding tables are split on their rows (vocab parallel), and the
      weight of a matmul that produces a function result (the LM head) on
      its output features; a vocabulary that `tp` does not divide, or
      that is not a multiple of `make-vocab-size-divisible-by` times `tp`,
      is padded with zeros to the next multiple first, as Megatron-LM pads
      it: the table and the head's weight (and bias) become views ending
      in a zero run, the head's result is sliced back to the vocabulary
      (padded logits never reach a user), and token ids are remapped so
      that an id outside the vocabulary stays outside the padded table
      (every mesh refuses what one device refuses). A weight that is not
      a constant (a trained parameter) or a quantized one, and a table
      with fewer rows than the multiple, stay whole, with a remark;
    - every function argument and result is split on dimension 0 (the
      batch) over `dp`; results are otherwise whole on every device.

    With an `ep` axis (expert parallelism), every `nn.moe`'s experts are
    split over `ep` (and each expert's features over `tp` where its
    activation allows). With `expert-dispatch`, when `dp` times `ep`
    divides the batch of every argument and result, the batch is split
    over `ep` too: outside the experts `ep` is one more data-parallel axis
    (Megatron's expert parallelism within the data-parallel group), and
    partitioning sends each token to the devices of its experts and back
    (`dist.dispatch`, `dist.dispatch_return`). Otherwise every device of an
    `ep` group runs all of its tokens, and the experts' outputs are summed
    over `ep`; the module's `dist.remarks` says why.

    With `sp-mode` (sequence parallelism):

    - `megatron` (needs `tp`): what enters each norm is split on the
      sequence over `tp` at priority 2, below the weights', so
      tensor-parallel matmuls gather it and their partial results are
      reduce-scattered onto it;
    - `ulysses` (on `sp`): inputs and norm inputs split on the sequence, and
      `dist.reshard`s around each attention to heads split over `sp` (and
      `tp`) and back; heads that `sp` does not divide are an error;
    - `ring` (on `sp`): norm inputs split on the sequence, each attention
      marked `dist.ring` for partitioning to decompose, and for causal
      attention a zigzag layout of the sequence (`dist.sequence_order` on
      the module; inputs permuted on entry, outputs restored on exit).

    The module's `dist.sequence_parallel` records the mode for the report.

    Before annotating, three rewrites keep every rank's share of the model
    its own: a matmul whose result is split into segments that `tp`
    divides (a fused Q/K/V or gate/up weight; a grouped-query projection's
    query, key and value differ in size) gets its weight's columns
    permuted so that a
    contiguous `tp` block holds each rank's part of every segment, and the
    split is rewritten to match; when the key/value heads of grouped
    attention do not divide `tp` (but the query heads do), the key/value
    heads are repeated per query head with `nn.gather`, their projections
    stay replicated, and the module's `dist.remarks` says so; and a KV
    cache (`partita.kv_cache`) of such heads, where `tp` is a multiple of
    them, gets one slot per tp rank holding the key/value head that rank's
    query heads use: the cache write writes the new keys or values
    gathered into slots, and attention reading the cache takes the slots
    as its key/value heads, so each rank holds one head of each cache.

    ```mlir
    %w = nn.constant dense_resource<mlp.up> : tensor<64x256xf32>
    %0 = dist.annotate %w sharding<@mesh, [{}, {tp}] # "}]" # [{> {dist.strategy}
        : tensor<64x256xf32>
    ```
  }];
  let options = [
    Option<"mesh", "mesh", "::partita::Mesh", /*default=*/"",
           "Mesh axes, sizes and roles, e.g. dp=2,tp=4 or model=4:tp "
           "(default: the module's dist.mesh)">,
    Option<"strategy", "strategy", "::mlir::partita::Strategy",
           /*default=*/"::mlir::partita::Strategy::Megatron",
           "The parallel strategy: megatron or none",
           "::mlir::partita::optionValues<::mlir::partita::Strategy>()">,
    Option<"spMode", "sp-mode", "::mlir::partita::SequenceMode",
           /*default=*/"::mlir::partita::SequenceMode::None",
           "Sequence parallelism: none, megatron (over tp), ulysses or ring "
           "(over sp)",
           "::mlir::partita::optionValues<::mlir::partita::SequenceMode>()">,
    Option<"vocabDivisibleBy", "make-vocab-size-divisible-by", "int64_t",
           /*default=*/"1",
           "Pad vocabularies to a multiple of this times tp">,
    Option<"expertDispatch", "expert-dispatch", "bool", /*default=*/"true",
           "With ep: split the batch over ep as well, so that tokens travel "
           "to their experts' devices (dist.dispatch); off, every ep device "
           "runs every token and the experts' outputs are all-reduced">,
  ];
  let dependentDialects = ["::mlir::partita::dist::DistDialect",
                           "::mlir::partita::nn::NNDialect"];
}

def PropagateShardingPass : Pass<"partita-propagate-sharding",
                                 "::mlir::ModuleOp"> {
  let summary = "Give every value a sharding from the annotations";
  let description = [{
    Fills in the sharding of every tensor value from the `dist.annotate`
    ops (and `dist.reshard`s, which fix their result without constraining
    their operand), through each op's sharding rule, forward and backward
    until nothing changes. A value's sharding is projected onto the op's
    factors (which mesh axes split each factor); each factor takes the
    proposal of highest priority (an annotation a person wrote, then one a
    strategy put in, or the annotation's own `dist.priority`; what
    propagation derives keeps its source's priority); proposals of equal
    priority that disagree keep their common prefix; and an axis goes to one
    factor of an op only: higher priority first, then reduction and lookup
    factors, then lower index. A factor that loses an axis that way makes
    the op reshard its operand; the loss is not written back to the
    operand's other users. Factors that must be whole
    (normalization axes, key/value sequence, max/min/mean reductions,
    opaque ones) take no axes. A value nothing reaches is replicated.

    Reshapes are ordinary ops here: their rule maps merged and split
    dimensions onto shared factors, so `[b, s, h*d] -> [b, s, h, d]` carries
    a split of the hidden dimension to the heads and back.

    The result is recorded as attributes: `dist.shardings` on every op with
    tensor results (one `#dist.sharding` per result, with `partial` axes
    where a reduction factor is split), and `dist.sharding` on function
    arguments and results.
  }];
  let dependentDialects = ["::mlir::partita::dist::DistDialect"];
}

def PartitionPass : Pass<"partita-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrite global shapes to each device's local shapes";
  let description = [{
    Turns the propagated global program into the one program every device
    runs (SPMD): each op computes on its local shapes, and where the
    sharding an operand has differs from the one its op needs (from the
    op's factor assignment), the cheapest collectives that move the data
    are inserted: a partial axis becomes `dist.reduce_scatter` when the
    target splits a dimension over it, else `dist.all_reduce`; an axis that
    moves from one dimension to another `dist.all_to_all`; a dimension that
    loses axes `dist.all_gather`; one that gains axes `dist.all_slice`. Any
    subset of a multi-axis mesh works. Each collective records in
    `dist.reason` which op needed which sharding.

    An attention marked `dist.ring` whose query sequence is split becomes
    ring attention: `nn.attention_partial` on the local key/value block,
    then per step the keys, values (and positions or mask block) move one
    rank on with `dist.collective_permute` and the next block merges by
    online softmax.

    A split lookup factor (a vocab-parallel embedding or gather) becomes a
    lookup in the local rows with indices shifted by the rank's block
    offset (`dist.axis_index`) and rows not held zeroed: a partial sum.

    Constants stay global and are sliced with `dist.all_slice`, which the
    per-rank lowering turns into each rank's share of the weight. A split
    that does not divide a dimension is an error naming the value, the
    dimension and the axis.

    Before partitioning, a zigzag layout (`dist.sequence_order`) is checked:
    it is kept only where the program computes the same on the permuted
    rows (docs/sharding.md, "Sequence parallelism"); otherwise the
    permutations are removed, the sequence stays contiguous, and
    `dist.remarks` says which op kept it so.
  }];
  let dependentDialects = ["::mlir::partita::dist::DistDialect",
                           "::mlir::partita::nn::NNDialect"];
}

def CancelCollectivesPass : Pass<"partita-cancel-collectives"> {
  let summary = "Remove collectives that cancel and fuse ones that combine";
  let description = [{
    Cleans up what partitioning leaves where reshards meet:

    - `dist.all_slice` of a `dist.all_gather` over the same axes and
      dimension is the gather's operand; a gather of a slice likewise;
    - `dist.all_slice` of a `dist.all_reduce` (sum) over axes the reduction
      covers becomes one `dist.reduce_scatter` (half the bytes);
    - a `max` or `min` `dist.all_reduce` of a value that is the same on every
      device of the group (produced by a collective over those axes) is
      that value;
    - collectives over a group of one device fold away.
  }];
  let dependentDialects = ["::mlir::partita::dist::DistDialect"];
}

def PipelineSplitPass : Pass<"partita-pipeline-split", "::mlir::ModuleOp"> {
  let summary = "Cut the program into pipeline stages balanced by cost";
  let description = [{
    With a `pp` axis of size P on the module's mesh, cuts the (partitioned)
    program into P `dist.stage`s of consecutive ops. A cut may only fall
    where one activation crosses it (between layers, or between a layer's
    attention and its MLP); among those cuts, the P - 1 that minimise the
    most expensive stage are chosen, with op costs from the roofline cost
    model (`partita/Analysis/CostModel.h`; the embedding and the LM head
    count like any op). The crossing activation is sent by the stage that
    has it (`dist.send`) and received by the next (`dist.recv`); constants
    and cheap values computed from the inputs alone (masks, positions) are
    recomputed by every stage that uses them. The last stage yields the
    function's results.

    With `microbatches` M > 1 every stage runs M microbatches one after the
    other (GPipe: the next stage starts on microbatch 0 while this one
    computes microbatch 1): the batch dimension (dimension 0 of the inputs
    and every dimension sharing its factor through the ops' sharding rules)
    is divided by M, each stage's ops are repeated per microbatch on their
    rows, transfers are tagged per microbatch, and the last stage
    concatenates the results. M must divide the batch.

    With `virtual-stages` V > 1 the program is cut into P·V chunks, chunk
    `c` on rank `c % P` (so each rank holds V non-consecutive chunks), and
    the regions follow Megatron's interleaved order: microbatches in groups
    of P, and within a group chunk by chunk. M must be a multiple of P.

    Too few cut points for P stages is an error that says how many exist.
  }];
  let options = [
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "How many microbatches each stage runs in turn">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"1",
           "Chunks per rank (interleaved schedule): the program is cut into "
           "pp x V chunks and chunk c runs on rank c % pp">,
  ];
  let dependentDialects = ["::mlir::partita::dist::DistDialect",
                           "::mlir::partita::nn::NNDialect"];
}

def VerifyPipelinePass : Pass<"partita-verify-pipeline", "::mlir::ModuleOp"> {
  let summary = "Prove the stages' transfers free of deadlock";
  let description = [{
    Runs the `dist.send`s and `dist.recv`s of every `dist.stage` in program
    order, each stage blocking at a transfer until its peer reaches the
    matching one (same pair of stages, same tag, same type), as a
    rendezvous would. The schedule is accepted if every transfer completes;
    otherwise the pass fails with an error at the transfer each blocked
    stage waits on. A receive that no send matches is an error too.
  }];
}

def BucketCollectivesPass : Pass<"partita-bucket-collectives",
                                 "::mlir::ModuleOp"> {
  let summary = "All-reduce independent sums together, in buckets";
  let description = [{
    Groups the `dist.all_reduce sum`s of each block that reduce the same
    element type over the same axes of the same mesh into buckets of at
    most `bucket-bytes` (a reduction larger than that is a bucket of its
    own), as PyTorch's DistributedDataParallel buckets gradients: the
    members are taken in the order their operands are computed, each
    flattened and concatenated, reduced by one `dist.all_reduce` placed
    right after the last member's operand is computed, and sliced back
    out just before each member's first use. A member joins a bucket only
    if no use of the bucket's earlier members comes before its operand is
    computed, so that no use waits on a later gradient. Each element is
    summed over the same devices as before, so results are unchanged.
    A bucket carries `dist.reason` naming how many reductions it holds.
  }];
  let options = [
    Option<"bucketBytes", "bucket-bytes", "int64_t",
           /*default=*/"int64_t(25) << 20",
           "The most bytes one bucket reduces (0: no buckets)">,
  ];
  let dependentDialects = ["::mlir::partita::dist::DistDialect",
                           "::mlir::partita::nn::NNDialect"];
}

def AsyncCollectivesPass : Pass<"partita-async-collectives",
                                "::mlir::ModuleOp"> {
  let summary = "Start collectives early and wait for them late";
  let description = [{
    Turns every collective into its `_start` form and a `dist.wait`, in the
    same block: the start goes right after its operand is computed, the
    wait right before the first use of the result, so the compute between
    them overlaps the communication. Starts keep their relative order (every
    rank issues collectives in the same order), and a start is not hoisted
    past the point where the bytes of collectives in flight would exceed
    `max-bytes-in-flight`: it then stays where the collective was.
  }];
  let options = [
    Option<"maxBytesInFlight", "max-bytes-in-flight", "int64_t",
           /*default=*/"int64_t(1) << 30",
           "The most bytes of collective results in flight at once">,
  ];
  let dependentDialects = ["::mlir::partita::dist::DistDialect"];
}

def SchedulePass : Pass<"partita-schedule", "::mlir::ModuleOp"> {
  let summary = "Order each block to hide communication behind compute";
  let description = [{
    A latency-hiding list scheduler over every block of the program (the
    function body and each pipeline stage), after
    `--partita-async-collectives`. It simulates one compute stream and one
    communication stream with the roofline cost model for compute and the
    cluster's alpha-beta links for collectives, and at each step issues, in
    this order of preference: a collective start or transfer whose operands
    are ready (communication starts as early as possible, in program order,
    so every rank issues them alike); a `dist.wait` whose transfer has
    already finished (it costs nothing, and what it guards then competes
    with the rest); a compute op whose operands are ready, the one with the
    longest path to the end of the block first (compute and transfers
    weighted by their time); and only when nothing else can run, the
    `dist.wait` whose transfer finishes first. Independent compute (another microbatch's,
    another head's) thus fills the time a collective is in flight. The
    cluster is the module's `partita.cluster` (its cluster JSON, set by
    `partita-compile --cluster`), or the `default` preset.
  }];
  let dependentDialects = ["::mlir::partita::dist::DistDialect"];
}

def CollectiveMatmulPass : Pass<"partita-collective-matmul",
                                "::mlir::ModuleOp"> {
  let summary = "Pipeline tensor-parallel matmuls with their collectives";
  let description = [{
    The windowed-einsum (async tensor parallelism) decomposition, on local
    programs:

    - `dist.all_gather` of the rows of a matmul's input (not its contracted
      dimension) followed by the matmul: each rank multiplies the block it
      holds while passing it on around the ring (`dist.collective_permute`),
      n times; the n partial outputs are laid out in row order with one
      `nn.gather` whose indices follow from `dist.axis_index`.
    - a matmul whose partial-sum result is `dist.reduce_scatter`ed over its
      rows: step t computes the block rank r - t - 1 will own, adds the
      running sum received from the previous rank, and passes it on; after n
      steps each rank holds its block of the sum.

    A decomposition is made only where the cost model says it pays: each
    step's transfer (alpha-beta on the group's link) must be shorter than
    the collective it replaces would be exposed, and the block matmul long
    enough to hide it. With `--partita-async-collectives` and
    `--partita-schedule` after it, every permute overlaps a block matmul.
    The links and the device are the module's `partita.cluster`, as for
    `--partita-schedule`.
  }];
  let options = [
    Option<"force", "force", "bool", /*default=*/"false",
           "Decompose every match, whatever the cost model says">,
  ];
  let dependentDialects = ["::mlir::partita::dist::DistDialect",
                           "::mlir::partita::nn::NNDialect"];
}

#endif // PARTITA_DIALECT_DIST_TRANSFORMS_PASSES_TD
