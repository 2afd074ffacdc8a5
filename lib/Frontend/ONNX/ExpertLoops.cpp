//===- ExpertLoops.cpp - transformers' eager expert loops -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "ExpertLoops.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <limits>
#include <map>

using namespace mlir;
using namespace mlir::partita::onnx_import;

bool mlir::partita::onnx_import::isExpertLoop(const onnx::NodeProto &node) {
  return node.domain() == kInternalDomain &&
         node.op_type() == kExpertLoopOpType;
}

namespace {

/// The graph's def-use links and constants, for matching.
class GraphIndex {
public:
  GraphIndex(const onnx::GraphProto &graph, const ConstantReader &reader)
      : graph(graph), reader(reader) {
    for (int i = 0; i < graph.node_size(); ++i) {
      for (const std::string &out : graph.node(i).output())
        if (!out.empty())
          producers[out] = i;
      for (const std::string &in : graph.node(i).input())
        if (!in.empty())
          consumers[in].push_back(i);
    }
    for (const onnx::TensorProto &init : graph.initializer())
      initializers.insert(init.name());
    for (const onnx::ValueInfoProto &output : graph.output())
      graphOutputs.insert(output.name());
  }

  const onnx::NodeProto &node(int i) const { return graph.node(i); }
  int numNodes() const { return graph.node_size(); }
  std::optional<int> producerIndex(const std::string &value) const {
    auto it = producers.find(value);
    if (it == producers.end())
      return std::nullopt;
    return it->second;
  }
  /// The node that defines `value` when it is a default-domain `opType`.
  const onnx::NodeProto *def(const std::string &value,
                             llvm::StringRef opType) const {
    std::optional<int> i = producerIndex(value);
    if (!i)
      return nullptr;
    const onnx::NodeProto &n = graph.node(*i);
    bool defaultDomain = n.domain().empty() || n.domain() == "ai.onnx";
    return defaultDomain && n.op_type() == opType ? &n : nullptr;
  }
  /// The default-domain `opType` nodes that read `value`.
  llvm::SmallVector<const onnx::NodeProto *>
  uses(const std::string &value, llvm::StringRef opType) const {
    llvm::SmallVector<const onnx::NodeProto *> found;
    auto it = consumers.find(value);
    if (it == consumers.end())
      return found;
    for (int i : it->second) {
      const onnx::NodeProto &n = graph.node(i);
      if ((n.domain().empty() || n.domain() == "ai.onnx") &&
          n.op_type() == opType && llvm::find(found, &n) == found.end())
        found.push_back(&n);
    }
    return found;
  }
  /// The only `opType` node that reads `value`, if it is the only reader.
  const onnx::NodeProto *onlyUse(const std::string &value,
                                 llvm::StringRef opType) const {
    auto it = consumers.find(value);
    if (it == consumers.end() || it->second.size() != 1)
      return nullptr;
    llvm::SmallVector<const onnx::NodeProto *> found = uses(value, opType);
    return found.size() == 1 ? found.front() : nullptr;
  }
  llvm::ArrayRef<int> readers(const std::string &value) const {
    auto it = consumers.find(value);
    return it == consumers.end() ? llvm::ArrayRef<int>() : it->second;
  }

  /// The elements of a constant value: a Constant's, a ConstantOfShape's
  /// fill, or an initializer's.
  std::optional<std::vector<double>> constant(const std::string &value) const {
    if (initializers.contains(value))
      return reader.initializer(value);
    if (const onnx::NodeProto *c = def(value, "Constant")) {
      for (const onnx::AttributeProto &a : c->attribute()) {
        if (a.name() == "value")
          return reader.tensor(a.t());
        if (a.name() == "value_int")
          return std::vector<double>{static_cast<double>(a.i())};
        if (a.name() == "value_ints")
          return std::vector<double>(a.ints().begin(), a.ints().end());
        if (a.name() == "value_float")
          return std::vector<double>{a.f()};
        if (a.name() == "value_floats")
          return std::vector<double>(a.floats().begin(), a.floats().end());
      }
    }
    return std::nullopt;
  }
  bool isConstant(const std::string &value,
                  std::initializer_list<double> want) const {
    std::optional<std::vector<double>> got = constant(value);
    return got && llvm::equal(*got, want);
  }
  /// A tensor of zeros (Constant or ConstantOfShape).
  bool isZeros(const std::string &value) const {
    std::optional<std::vector<double>> elements;
    if (const onnx::NodeProto *fill = def(value, "ConstantOfShape")) {
      elements = std::vector<double>{0.0};
      for (const onnx::AttributeProto &a : fill->attribute())
        if (a.name() == "value")
          elements = reader.tensor(a.t());
    } else if (def(value, "Constant")) {
      elements = constant(value);
    }
    return elements && llvm::all_of(*elements, [](double v) { return v == 0; });
  }

  bool isGraphOutput(const std::string &v) const {
    return graphOutputs.contains(v);
  }
  bool isInitializer(const std::string &v) const {
    return initializers.contains(v);
  }

private:
  const onnx::GraphProto &graph;
  const ConstantReader &reader;
  llvm::StringMap<int> producers;
  llvm::StringMap<llvm::SmallVector<int, 2>> consumers;
  llvm::StringSet<> initializers, graphOutputs;
};

/// The most experts a loop may have.
constexpr int64_t kMaxExperts = int64_t(1) << 16;

/// What an attribute of another type reads as: no value a match accepts.
constexpr int64_t kMistyped = std::numeric_limits<int64_t>::min();

int64_t intAttr(const onnx::NodeProto &n, llvm::StringRef name,
                int64_t absent) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return a.type() == onnx::AttributeProto_AttributeType_INT ? a.i()
                                                                : kMistyped;
  return absent;
}

std::vector<int64_t> intsAttr(const onnx::NodeProto &n, llvm::StringRef name) {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name) {
      if (a.type() != onnx::AttributeProto_AttributeType_INTS)
        return {kMistyped};
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    }
  return {};
}

std::string stringAttr(const onnx::NodeProto &n, llvm::StringRef name,
                       llvm::StringRef absent = "none") {
  for (const onnx::AttributeProto &a : n.attribute())
    if (a.name() == name)
      return a.type() == onnx::AttributeProto_AttributeType_STRING
                 ? a.s()
                 : std::string("<mistyped>");
  return absent.str();
}

/// Input and output `i` of a node, or "" (no value's name) where it has
/// fewer: the matcher reads models as they come.
const std::string &in(const onnx::NodeProto &n, int i) {
  static const std::string none;
  return i < n.input_size() ? n.input(i) : none;
}
const std::string &out(const onnx::NodeProto &n, int i) {
  static const std::string none;
  return i < n.output_size() ? n.output(i) : none;
}

/// The other input of a binary node one of whose inputs is `known`.
std::optional<std::string> otherInput(const onnx::NodeProto *n,
                                      const std::string &known) {
  if (!n || n->input_size() != 2)
    return std::nullopt;
  if (in(*n, 0) == known)
    return in(*n, 1);
  if (in(*n, 1) == known)
    return in(*n, 0);
  return std::nullopt;
}

/// One traced body's expert module (transformers 4's form): its w1 (gate),
/// w3 (up) and w2 (down) weights, `[in, out]` initializers, and the expert
/// it is, from its nodes' scope (`experts.<j>/`), or -1.
struct Module {
  std::string w1, w3, w2;
  int64_t expert = -1;
};

/// One recognized loop: stacked weights (`fc1`, `fc2`) or a module per
/// body (`modules`).
struct Loop {
  std::string hidden, ids, weights, fc1, fc2, output;
  std::vector<Module> modules;
  int64_t traced = 0, depth = 0;
  /// The node indices the loop's node replaces.
  llvm::DenseSet<int> region;
  int outputNode = -1;
};

class LoopMatcher {
public:
  explicit LoopMatcher(const GraphIndex &g) : g(g) {}

  /// The loop whose one-hot of the router's ids is node `oneHot`.
  std::optional<Loop> match(int oneHot);

private:
  /// The expert id each row of the experts-hit Split selects, in order.
  bool matchHits(const onnx::NodeProto &reduce);
  /// One traced body: the expert id `id`; its scatter's Add.
  const onnx::NodeProto *matchBody(const std::string &id,
                                   const std::string &transposed);
  /// `a` and `b` equal, or `a` set to `b` when empty.
  bool same(std::string &a, const std::string &b) {
    if (b.empty())
      return false;
    if (a.empty())
      a = b;
    return a == b;
  }
  /// Gather(data, ids) on axis 0 whose data is not `exclude`, reading
  /// `ids`, through a Transpose [1, 0]: the stacked weight it reads.
  std::optional<std::string> transposedRows(const std::string &value,
                                            const std::string &id);
  bool collectRegion(Loop &loop);

  const GraphIndex &g;
  Loop loop;
  llvm::SmallVector<std::string> ids;
};

bool LoopMatcher::matchHits(const onnx::NodeProto &reduce) {
  if (reduce.input_size() != 2 || intAttr(reduce, "keepdims", 1) != 0)
    return false;
  std::optional<std::vector<double>> axes = g.constant(in(reduce, 1));
  if (!axes || axes->size() != 2)
    return false;
  std::vector<double> sorted = *axes;
  llvm::sort(sorted);
  if (sorted != std::vector<double>{-2, -1} &&
      sorted != std::vector<double>{1, 2})
    return false;
  const onnx::NodeProto *greater = g.onlyUse(out(reduce, 0), "Greater");
  if (!greater || in(*greater, 0) != out(reduce, 0) ||
      !g.isConstant(in(*greater, 1), {0}))
    return false;
  const onnx::NodeProto *nonzero = g.onlyUse(out(*greater, 0), "NonZero");
  if (!nonzero)
    return false;
  const onnx::NodeProto *rows = g.onlyUse(out(*nonzero, 0), "Transpose");
  if (!rows || intsAttr(*rows, "perm") != std::vector<int64_t>{1, 0})
    return false;
  const onnx::NodeProto *split = g.onlyUse(out(*rows, 0), "Split");
  if (!split || intAttr(*split, "axis", 0) != 0 || split->input_size() != 2)
    return false;
  std::optional<std::vector<double>> sizes = g.constant(in(*split, 1));
  if (!sizes || static_cast<int>(sizes->size()) != split->output_size() ||
      llvm::any_of(*sizes, [](double s) { return s != 1; }))
    return false;
  for (const std::string &row : split->output()) {
    const onnx::NodeProto *squeeze = g.onlyUse(row, "Squeeze");
    if (!squeeze || squeeze->input_size() != 2 ||
        !g.isConstant(in(*squeeze, 1), {0}))
      return false;
    // transformers 5 takes the row's element 0 (a scalar id); 4 gathers
    // with the one-element row.
    const onnx::NodeProto *first = g.onlyUse(out(*squeeze, 0), "Gather");
    if (first && in(*first, 0) == out(*squeeze, 0) &&
        intAttr(*first, "axis", 0) == 0 && g.isConstant(in(*first, 1), {0}))
      ids.push_back(out(*first, 0));
    else
      ids.push_back(out(*squeeze, 0));
  }
  return !ids.empty();
}

std::optional<std::string> LoopMatcher::transposedRows(const std::string &value,
                                                       const std::string &id) {
  const onnx::NodeProto *t = g.def(value, "Transpose");
  if (!t || intsAttr(*t, "perm") != std::vector<int64_t>{1, 0})
    return std::nullopt;
  const onnx::NodeProto *rows = g.def(in(*t, 0), "Gather");
  if (!rows || in(*rows, 1) != id || intAttr(*rows, "axis", 0) != 0)
    return std::nullopt;
  return in(*rows, 0);
}

const onnx::NodeProto *LoopMatcher::matchBody(const std::string &id,
                                              const std::string &transposed) {
  // The slots that chose the expert: NonZero of its [k, T] one-hot rows.
  const onnx::NodeProto *mask = nullptr;
  for (const onnx::NodeProto *n : g.uses(id, "Gather"))
    if (in(*n, 0) == transposed && in(*n, 1) == id &&
        intAttr(*n, "axis", 0) == 0)
      mask = n;
  if (!mask)
    return nullptr;
  std::string rows = out(*mask, 0);
  // A one-element id leaves a leading 1 to squeeze.
  if (const onnx::NodeProto *squeeze = g.onlyUse(rows, "Squeeze")) {
    if (squeeze->input_size() != 2 || !g.isConstant(in(*squeeze, 1), {0}))
      return nullptr;
    rows = out(*squeeze, 0);
  }
  const onnx::NodeProto *cast = g.onlyUse(rows, "Cast");
  if (!cast || intAttr(*cast, "to", 0) != onnx::TensorProto_DataType_BOOL)
    return nullptr;
  const onnx::NodeProto *nonzero = g.onlyUse(out(*cast, 0), "NonZero");
  if (!nonzero)
    return nullptr;
  const onnx::NodeProto *pairs = g.onlyUse(out(*nonzero, 0), "Transpose");
  if (!pairs || intsAttr(*pairs, "perm") != std::vector<int64_t>{1, 0})
    return nullptr;
  const onnx::NodeProto *split = g.onlyUse(out(*pairs, 0), "Split");
  if (!split || intAttr(*split, "axis", 0) != 1 || split->output_size() != 2 ||
      split->input_size() != 2 || !g.isConstant(in(*split, 1), {1, 1}))
    return nullptr;
  std::string slot[2];
  for (int i = 0; i < 2; ++i) {
    const onnx::NodeProto *squeeze = g.onlyUse(out(*split, i), "Squeeze");
    if (!squeeze || squeeze->input_size() != 2 ||
        !g.isConstant(in(*squeeze, 1), {1}))
      return nullptr;
    slot[i] = out(*squeeze, 0);
  }
  const std::string &pos = slot[0], &tok = slot[1];

  // hidden[tok]: a Gather of the tokens' rows (transformers 4: of
  // hidden[None], on axis 1, reshaped to rows).
  std::string x;
  for (const onnx::NodeProto *n : g.uses(tok, "Gather")) {
    if (in(*n, 1) != tok)
      continue;
    if (intAttr(*n, "axis", 0) == 0) {
      if (!same(loop.hidden, in(*n, 0)))
        return nullptr;
      x = out(*n, 0);
    } else if (intAttr(*n, "axis", 0) == 1) {
      const onnx::NodeProto *batch = g.def(in(*n, 0), "Unsqueeze");
      const onnx::NodeProto *flat = g.onlyUse(out(*n, 0), "Reshape");
      if (!batch || batch->input_size() != 2 ||
          !g.isConstant(in(*batch, 1), {0}) || !flat ||
          !same(loop.hidden, in(*batch, 0)))
        return nullptr;
      x = out(*flat, 0);
    }
  }
  if (x.empty())
    return nullptr;
  llvm::SmallVector<const onnx::NodeProto *> products;
  for (const onnx::NodeProto *n : g.uses(x, "MatMul"))
    if (in(*n, 0) == x)
      products.push_back(n);
  std::string gate, up;
  Module module;
  if (products.size() == 1) {
    // transformers 5: x @ gate_up_proj[e]^T, chunked in two along the last
    // axis.
    const onnx::NodeProto *fc1 = products.front();
    std::optional<std::string> w1 = transposedRows(in(*fc1, 1), id);
    if (!w1 || !same(loop.fc1, *w1) || !loop.modules.empty())
      return nullptr;
    const onnx::NodeProto *gateSlice = nullptr, *upSlice = nullptr;
    llvm::SmallVector<const onnx::NodeProto *> slices =
        g.uses(out(*fc1, 0), "Slice");
    for (const onnx::NodeProto *s : slices)
      if (s->input_size() == 4 && in(*s, 0) == out(*fc1, 0) &&
          g.isConstant(in(*s, 1), {0}))
        gateSlice = s;
    for (const onnx::NodeProto *s : slices)
      if (gateSlice && s->input_size() == 4 && in(*s, 0) == out(*fc1, 0) &&
          in(*s, 1) == in(*gateSlice, 2))
        upSlice = s;
    if (!gateSlice || !upSlice || slices.size() != 2 ||
        !g.isConstant(in(*gateSlice, 3), {-1}) ||
        !g.isConstant(in(*upSlice, 3), {-1}))
      return nullptr;
    // torch.chunk(2): ends d * 1 and d * 2, d = (last + 1) / 2 of the
    // product's own shape.
    const onnx::NodeProto *half = g.def(in(*gateSlice, 2), "Mul");
    const onnx::NodeProto *whole = g.def(in(*upSlice, 2), "Mul");
    if (!half || !whole || in(*half, 0) != in(*whole, 0) ||
        !g.isConstant(in(*half, 1), {1}) || !g.isConstant(in(*whole, 1), {2}))
      return nullptr;
    const onnx::NodeProto *div = g.def(in(*half, 0), "Div");
    const onnx::NodeProto *plus = div ? g.def(in(*div, 0), "Add") : nullptr;
    const onnx::NodeProto *last =
        plus ? g.def(in(*plus, 0), "Gather") : nullptr;
    const onnx::NodeProto *shape =
        last ? g.def(in(*last, 0), "Shape") : nullptr;
    if (!div || !g.isConstant(in(*div, 1), {2}) || !plus ||
        !g.isConstant(in(*plus, 1), {1}) || !last || !shape ||
        in(*shape, 0) != out(*fc1, 0) || !g.isConstant(in(*last, 1), {-1}))
      return nullptr;
    gate = out(*gateSlice, 0);
    up = out(*upSlice, 0);
  } else if (products.size() == 2) {
    // transformers 4: the expert module's own w1 (gate) and w3 (up),
    // constants [in, out].
    if (!loop.fc1.empty())
      return nullptr;
    const onnx::NodeProto *w1 = products[0], *w3 = products[1];
    if (g.uses(out(*w1, 0), "Sigmoid").empty())
      std::swap(w1, w3);
    if (!g.isInitializer(in(*w1, 1)) || !g.isInitializer(in(*w3, 1)))
      return nullptr;
    module.w1 = in(*w1, 1);
    module.w3 = in(*w3, 1);
    // The module's number, from the scope its nodes are named in.
    llvm::StringRef name = w1->name();
    size_t at = name.find("experts.");
    unsigned long long expert;
    if (at != llvm::StringRef::npos &&
        !name.substr(at + 8)
             .take_while([](char c) { return llvm::isDigit(c); })
             .getAsInteger(10, expert))
      module.expert = static_cast<int64_t>(expert);
    gate = out(*w1, 0);
    up = out(*w3, 0);
  } else {
    return nullptr;
  }

  // silu(gate) * up.
  llvm::SmallVector<const onnx::NodeProto *> sigmoids = g.uses(gate, "Sigmoid");
  if (sigmoids.size() != 1)
    return nullptr;
  const onnx::NodeProto *sigmoid = sigmoids.front();
  const onnx::NodeProto *silu = nullptr;
  for (const onnx::NodeProto *n : g.uses(out(*sigmoid, 0), "Mul"))
    if (otherInput(n, out(*sigmoid, 0)) == gate)
      silu = n;
  if (!silu)
    return nullptr;
  const onnx::NodeProto *act = g.onlyUse(out(*silu, 0), "Mul");
  if (!act || otherInput(act, out(*silu, 0)) != up)
    return nullptr;

  // @ down_proj[e]^T (or the module's w2), times the slot's routing
  // weight.
  const onnx::NodeProto *fc2 = g.onlyUse(out(*act, 0), "MatMul");
  if (!fc2 || in(*fc2, 0) != out(*act, 0))
    return nullptr;
  if (module.w1.empty()) {
    std::optional<std::string> w2 = transposedRows(in(*fc2, 1), id);
    if (!w2 || !same(loop.fc2, *w2))
      return nullptr;
  } else {
    if (!g.isInitializer(in(*fc2, 1)))
      return nullptr;
    module.w2 = in(*fc2, 1);
  }
  const onnx::NodeProto *weighted = g.onlyUse(out(*fc2, 0), "Mul");
  std::optional<std::string> routing = otherInput(weighted, out(*fc2, 0));
  if (!routing)
    return nullptr;
  std::string r = *routing;
  while (const onnx::NodeProto *reshape = g.def(r, "Reshape"))
    r = in(*reshape, 0);
  // weights.flatten()[tok * k + pos]: the Gather of a [T * k, 1] view.
  const onnx::NodeProto *pick = g.def(r, "Gather");
  if (!pick || intAttr(*pick, "axis", 0) != 0)
    return nullptr;
  const onnx::NodeProto *flat = g.def(in(*pick, 0), "Flatten");
  const onnx::NodeProto *column =
      flat ? g.def(in(*flat, 0), "Unsqueeze") : nullptr;
  if (!flat || intAttr(*flat, "axis", 1) != 2 || !column ||
      column->input_size() != 2 ||
      !(g.isConstant(in(*column, 1), {-1}) ||
        g.isConstant(in(*column, 1), {2})) ||
      !same(loop.weights, in(*column, 0)))
    return nullptr;
  const onnx::NodeProto *index = g.def(in(*pick, 1), "Add");
  if (!index || in(*index, 0) != pos)
    return nullptr;
  const onnx::NodeProto *stride = g.def(in(*index, 1), "Mul");
  if (!stride || in(*stride, 0) != tok)
    return nullptr;
  const onnx::NodeProto *k = g.def(in(*stride, 1), "Gather");
  const onnx::NodeProto *kShape = k ? g.def(in(*k, 0), "Shape") : nullptr;
  if (!k || !kShape || in(*kShape, 0) != out(*column, 0) ||
      !g.isConstant(in(*k, 1), {1}))
    return nullptr;
  std::string update = out(*weighted, 0);
  if (const onnx::NodeProto *back = g.onlyUse(update, "Cast")) {
    if (intAttr(*back, "to", 0) != onnx::TensorProto_DataType_FLOAT)
      return nullptr;
    update = out(*back, 0);
  }

  // index_add_: ScatterElements of the rows into zeros at tok, added.
  const onnx::NodeProto *expand = g.onlyUse(update, "Expand");
  if (!expand)
    return nullptr;
  // (The indices' Expand reads the rows' shape too.)
  llvm::SmallVector<const onnx::NodeProto *> scatters =
      g.uses(out(*expand, 0), "ScatterElements");
  const onnx::NodeProto *scatter =
      scatters.size() == 1 ? scatters.front() : nullptr;
  if (!scatter || in(*scatter, 2) != out(*expand, 0) ||
      intAttr(*scatter, "axis", 0) != 0 ||
      stringAttr(*scatter, "reduction") != "none" ||
      !g.isZeros(in(*scatter, 0)))
    return nullptr;
  const onnx::NodeProto *at = g.def(in(*scatter, 1), "Expand");
  const onnx::NodeProto *atColumn =
      at ? g.def(in(*at, 0), "Unsqueeze") : nullptr;
  if (!at || !atColumn || in(*atColumn, 0) != tok ||
      atColumn->input_size() != 2 || !g.isConstant(in(*atColumn, 1), {1}))
    return nullptr;
  const onnx::NodeProto *add = g.onlyUse(out(*scatter, 0), "Add");
  if (add && !module.w1.empty())
    loop.modules.push_back(module);
  return add;
}

std::optional<Loop> LoopMatcher::match(int oneHotIndex) {
  const onnx::NodeProto &oneHot = g.node(oneHotIndex);
  loop = Loop();
  ids.clear();
  std::optional<std::vector<double>> depth = g.constant(in(oneHot, 1));
  if (intAttr(oneHot, "axis", -1) != -1 || !depth || depth->size() != 1 ||
      !g.isConstant(in(oneHot, 2), {0, 1}))
    return std::nullopt;
  // The experts, as many as a one-hot imports (the module form builds a
  // weight per expert).
  double classes = (*depth)[0];
  if (!(classes >= 1 && classes <= kMaxExperts) || classes != int64_t(classes))
    return std::nullopt;
  loop.ids = in(oneHot, 0);
  loop.depth = static_cast<int64_t>(classes);
  const onnx::NodeProto *transpose = g.onlyUse(out(oneHot, 0), "Transpose");
  if (!transpose ||
      intsAttr(*transpose, "perm") != std::vector<int64_t>{2, 1, 0})
    return std::nullopt;
  const std::string &transposed = out(*transpose, 0);
  llvm::SmallVector<const onnx::NodeProto *> reduces =
      g.uses(transposed, "ReduceSum");
  if (reduces.size() != 1 || !matchHits(*reduces.front()))
    return std::nullopt;
  // Every other reader of the transposed one-hot is a body's mask.
  if (g.readers(transposed).size() != ids.size() + 1)
    return std::nullopt;

  // Each body's Add; then the chain of Adds, from zeros, in some order.
  std::map<std::string, const onnx::NodeProto *> addsByAccumulator;
  llvm::DenseSet<const onnx::NodeProto *> adds;
  for (const std::string &id : ids) {
    const onnx::NodeProto *add = matchBody(id, transposed);
    if (!add || !adds.insert(add).second)
      return std::nullopt;
  }
  const onnx::NodeProto *first = nullptr;
  for (const onnx::NodeProto *add : adds) {
    // The accumulator is the input that is not the scatter.
    const std::string &a = in(*add, 0), &b = in(*add, 1);
    std::string accumulator = g.def(b, "ScatterElements") ? a : b;
    if (g.isZeros(accumulator)) {
      if (first)
        return std::nullopt;
      first = add;
    } else if (!addsByAccumulator.emplace(accumulator, add).second) {
      return std::nullopt;
    }
  }
  if (!first)
    return std::nullopt;
  const onnx::NodeProto *last = first;
  for (size_t n = 1; n < adds.size(); ++n) {
    auto next = addsByAccumulator.find(out(*last, 0));
    if (next == addsByAccumulator.end())
      return std::nullopt;
    last = next->second;
  }
  loop.output = out(*last, 0);
  loop.outputNode = *g.producerIndex(loop.output);
  loop.traced = static_cast<int64_t>(ids.size());
  if (!loop.modules.empty()) {
    // Each body's module: named in order (ascending, as the loop ran over
    // the experts reached), or, unnamed, every expert's in order.
    if (static_cast<int64_t>(loop.modules.size()) != loop.traced ||
        loop.traced > loop.depth)
      return std::nullopt;
    for (auto [i, module] : llvm::enumerate(loop.modules)) {
      if (module.expert < 0 && loop.traced == loop.depth)
        module.expert = static_cast<int64_t>(i);
      bool ascending = i == 0 || module.expert > loop.modules[i - 1].expert;
      if (module.expert < 0 || module.expert >= loop.depth || !ascending ||
          (loop.traced == loop.depth &&
           module.expert != static_cast<int64_t>(i)))
        return std::nullopt;
    }
  }
  if (!collectRegion(loop))
    return std::nullopt;
  return loop;
}

/// The loop's nodes: everything the output depends on short of the loop's
/// inputs, which must be constants otherwise (a Shape's input is not a
/// dependence). Counts the ops a loop of
/// `traced` bodies has, so that nothing else computes in it; leaves out
/// the constants other nodes read too.
bool LoopMatcher::collectRegion(Loop &loop) {
  static const llvm::StringSet<> kOps = {"Add",
                                         "Cast",
                                         "Concat",
                                         "Constant",
                                         "ConstantOfShape",
                                         "Div",
                                         "Expand",
                                         "Flatten",
                                         "Gather",
                                         "Greater",
                                         "MatMul",
                                         "Mul",
                                         "NonZero",
                                         "OneHot",
                                         "ReduceSum",
                                         "Reshape",
                                         "ScatterElements",
                                         "Shape",
                                         "Sigmoid",
                                         "Slice",
                                         "Split",
                                         "Squeeze",
                                         "Transpose",
                                         "Unsqueeze"};
  llvm::StringSet<> boundary = {loop.hidden, loop.ids, loop.weights, loop.fc1,
                                loop.fc2};
  llvm::SmallVector<std::string> work = {loop.output};
  llvm::StringSet<> seen;
  llvm::StringMap<int64_t> counts;
  while (!work.empty()) {
    std::string value = work.pop_back_val();
    if (value.empty() || boundary.contains(value) || !seen.insert(value).second)
      continue;
    std::optional<int> producer = g.producerIndex(value);
    if (!producer) {
      if (g.isInitializer(value))
        continue;
      return false; // A graph input other than the loop's.
    }
    if (!loop.region.insert(*producer).second)
      continue;
    const onnx::NodeProto &n = g.node(*producer);
    if ((!n.domain().empty() && n.domain() != "ai.onnx") ||
        !kOps.contains(n.op_type()))
      return false;
    // NonZero and ScatterElements have no schema in the import's table
    // (it checks the others before folding): their signatures here.
    if (n.op_type() == "NonZero" &&
        (n.input_size() != 1 || n.output_size() != 1 || n.attribute_size()))
      return false;
    if (n.op_type() == "ScatterElements" &&
        (n.input_size() != 3 || n.output_size() != 1 ||
         llvm::any_of(n.attribute(), [](const onnx::AttributeProto &a) {
           return a.name() != "axis" && a.name() != "reduction";
         })))
      return false;
    ++counts[n.op_type()];
    // A Shape reads its input's static shape, not its values (transformers
    // 4 reshapes the tokens' rows by the shape of the norm before the
    // loop's input).
    if (n.op_type() == "Shape")
      continue;
    for (const std::string &in : n.input())
      work.push_back(in);
  }
  // What reads the loop's values only for the region, through the Shapes
  // above (transformers 4 slices each running sum to take its shape),
  // belongs to it; never what makes the loop's inputs.
  for (bool grew = true; grew;) {
    grew = false;
    for (int i = 0, e = g.numNodes(); i < e; ++i) {
      const onnx::NodeProto &n = g.node(i);
      if (loop.region.contains(i) || n.output_size() == 0)
        continue;
      bool feedsRegionOnly = llvm::all_of(n.output(), [&](const auto &out) {
        return !out.empty() && !boundary.contains(out) &&
               !g.isGraphOutput(out) && !g.readers(out).empty() &&
               llvm::all_of(g.readers(out),
                            [&](int r) { return loop.region.contains(r); });
      });
      if (!feedsRegionOnly)
        continue;
      if ((!n.domain().empty() && n.domain() != "ai.onnx") ||
          !kOps.contains(n.op_type()))
        return false;
      loop.region.insert(i);
      ++counts[n.op_type()];
      grew = true;
    }
  }
  int64_t t = loop.traced;
  int64_t products = loop.modules.empty() ? 2 : 3;
  if (counts["OneHot"] != 1 || counts["NonZero"] != t + 1 ||
      counts["MatMul"] != products * t || counts["Sigmoid"] != t ||
      counts["ScatterElements"] != t)
    return false;
  // Nodes whose outputs something outside the loop reads stay, with what
  // they read in the loop: constants, fills and shape arithmetic
  // (transformers 4 computes the block's output shape and the loop's zeros
  // from the same Shape), never a node of the loop's computation.
  static const llvm::StringSet<> kLoopOnly = {
      "Expand",    "Flatten",         "Greater", "MatMul", "NonZero",  "OneHot",
      "ReduceSum", "ScatterElements", "Sigmoid", "Split",  "Transpose"};
  llvm::SmallVector<int> keep;
  for (int i : loop.region) {
    if (i == loop.outputNode)
      continue;
    for (const std::string &out : g.node(i).output())
      if (g.isGraphOutput(out) || llvm::any_of(g.readers(out), [&](int r) {
            return !loop.region.contains(r);
          }))
        keep.push_back(i);
  }
  while (!keep.empty()) {
    int i = keep.pop_back_val();
    if (!loop.region.erase(i))
      continue;
    const onnx::NodeProto &n = g.node(i);
    if (kLoopOnly.contains(n.op_type()))
      return false;
    for (const std::string &in : n.input())
      if (std::optional<int> producer = g.producerIndex(in);
          producer && loop.region.contains(*producer))
        keep.push_back(*producer);
  }
  return true;
}

} // namespace

LogicalResult mlir::partita::onnx_import::foldExpertLoops(
    onnx::GraphProto &graph, const ConstantReader &constants,
    const NodeChecker &check, Location loc) {
  for (const onnx::NodeProto &node : graph.node())
    if (node.domain() == kInternalDomain)
      return emitError(loc)
             << "node '" << node.name() << "' uses the domain "
             << kInternalDomain << ", which is Partita's own; a model may not";
  std::vector<Loop> loops;
  {
    GraphIndex index(graph, constants);
    LoopMatcher matcher(index);
    llvm::DenseSet<int> claimed;
    for (int i = 0; i < graph.node_size(); ++i) {
      const onnx::NodeProto &n = graph.node(i);
      if (n.op_type() != "OneHot" ||
          (!n.domain().empty() && n.domain() != "ai.onnx") ||
          n.input_size() != 3)
        continue;
      std::optional<Loop> loop = matcher.match(i);
      if (!loop || llvm::any_of(loop->region,
                                [&](int r) { return claimed.contains(r); }))
        continue;
      // The nodes the loop's node replaces are checked as every node is:
      // a malformed one is refused, not folded away.
      for (int r : loop->region)
        if (failed(check(graph.node(r), r)))
          return failure();
      claimed.insert(loop->region.begin(), loop->region.end());
      loops.push_back(std::move(*loop));
    }
  }
  if (loops.empty())
    return success();

  // Rebuild the node list: each loop's node where its output was made.
  std::map<int, const Loop *> byOutput;
  llvm::DenseSet<int> removed;
  for (const Loop &loop : loops) {
    byOutput[loop.outputNode] = &loop;
    removed.insert(loop.region.begin(), loop.region.end());
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < graph.node_size(); ++i) {
    auto it = byOutput.find(i);
    if (it != byOutput.end()) {
      const Loop &loop = *it->second;
      onnx::NodeProto *node = nodes.Add();
      // Named after the loop's module: the experts' scope.
      std::string name = graph.node(i).name();
      node->set_name(name.substr(0, name.rfind('/') + 1) +
                     kExpertLoopOpType.str());
      node->set_domain(kInternalDomain.str());
      node->set_op_type(kExpertLoopOpType.str());
      for (const std::string *in : {&loop.hidden, &loop.ids, &loop.weights})
        node->add_input(*in);
      if (loop.modules.empty()) {
        node->add_input(loop.fc1);
        node->add_input(loop.fc2);
      } else {
        onnx::AttributeProto *experts = node->add_attribute();
        experts->set_name("experts");
        experts->set_type(onnx::AttributeProto_AttributeType_INTS);
        for (const Module &module : loop.modules) {
          for (const std::string *w : {&module.w1, &module.w3, &module.w2})
            node->add_input(*w);
          experts->add_ints(module.expert);
        }
      }
      node->add_output(loop.output);
      for (auto [attrName, value] :
           {std::pair("traced", loop.traced), std::pair("depth", loop.depth)}) {
        onnx::AttributeProto *a = node->add_attribute();
        a->set_name(attrName);
        a->set_type(onnx::AttributeProto_AttributeType_INT);
        a->set_i(value);
      }
      continue;
    }
    if (!removed.contains(i))
      *nodes.Add() = graph.node(i);
  }
  graph.mutable_node()->Swap(&nodes);
  return success();
}
