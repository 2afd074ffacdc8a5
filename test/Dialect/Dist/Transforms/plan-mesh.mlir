// partita-plan-mesh (--mesh auto) writes the plan it chooses as IR: the
// mesh, and what the later phases compile with in partita.plan.
// RUN: partita-compile %partita_src_root/test/models/gpt2.onnx --emit nn | partita-opt --partita-plan-mesh="devices=2" | FileCheck %s --check-prefix=TWO
// TWO: module attributes {
// TWO-SAME: partita.plan = {collective_matmul = false, devices = 2 : i64, flags = "--mesh dp=2", memory_bytes = {{.*}}, mesh = "dp=2", microbatches = 1 : i64, objective = "latency", rejected = [
// TWO-SAME: sp_mode = "none", step_seconds = {{.*}}, virtual_stages = 1 : i64}
// TWO: dist.mesh @mesh [dp = 2]

// More devices than the cluster has: it grows by nodes of its kind, and
// partita.cluster says so (the default preset has 8 devices a node).
// RUN: partita-compile %partita_src_root/test/models/gpt2.onnx --emit nn | partita-opt --partita-plan-mesh="devices=16" | FileCheck %s --check-prefix=GROWN
// GROWN: partita.cluster = "{\22nodes\22:2,\22preset\22:\22default\22}"

// One device: no mesh; the plan says so.
// RUN: partita-compile %partita_src_root/test/models/gpt2.onnx --emit nn | partita-opt --partita-plan-mesh="devices=1" | FileCheck %s --check-prefix=ONE
// ONE: partita.plan = {{{.*}}mesh = ""
// ONE-NOT: dist.mesh

// No plan fits: refused with each family's reason, unless require-fit=false.
// RUN: partita-compile %partita_src_root/test/models/gpt2.onnx --emit nn | not partita-opt --partita-plan-mesh="devices=24" 2>&1 | FileCheck %s --check-prefix=NOFIT
// NOFIT: error: --mesh auto: no plan for 24 devices fits on default:
// NOFIT-NEXT: dp: divisibility: batch 2 over dp=24
// RUN: partita-compile %partita_src_root/test/models/gpt2.onnx --emit nn | partita-opt --partita-plan-mesh="devices=24 require-fit=false" | FileCheck %s --check-prefix=KEPT
// KEPT-NOT: partita.plan
// KEPT-NOT: dist.mesh

// RUN: partita-opt %s -split-input-file -verify-diagnostics --partita-plan-mesh="devices=2"

// A module with a mesh has been planned already.
// expected-error @below {{--mesh auto plans a module without a mesh, but it declares @mine}}
module {
  dist.mesh @mine [tp = 2]
}

// -----

// expected-error @below {{--mesh auto plans @main, which the module lacks}}
module {
}
