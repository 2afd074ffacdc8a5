//===- CollectiveCheck.cpp - what every member checks alone ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CollectiveCheck.h"

#include <algorithm>
#include <set>

using namespace partita::runtime;
namespace program = partita::program;

bool partita::runtime::parseReduction(const std::string &name,
                                      Reduction &reduction) {
  if (name == "sum")
    reduction = Reduction::Sum;
  else if (name == "max")
    reduction = Reduction::Max;
  else if (name == "min")
    reduction = Reduction::Min;
  else
    return false;
  return true;
}

std::string partita::runtime::reductionName(Reduction reduction) {
  switch (reduction) {
  case Reduction::Sum:
    return "sum";
  case Reduction::Max:
    return "max";
  case Reduction::Min:
    return "min";
  }
  return "?";
}

std::string partita::runtime::groupString(const Group &group) {
  std::string text = "[";
  for (size_t i = 0; i < group.size(); ++i)
    text += (i ? ", " : "") + std::to_string(group[i]);
  return text + "]";
}

const char *partita::runtime::collectiveName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduce:
    return "all_reduce";
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::ReduceScatter:
    return "reduce_scatter";
  case CollectiveKind::AllToAll:
    return "all_to_all";
  case CollectiveKind::CollectivePermute:
    return "collective_permute";
  case CollectiveKind::Dispatch:
    return "dispatch";
  case CollectiveKind::DispatchReturn:
    return "dispatch_return";
  }
  return "?";
}

std::string CollectiveCall::describe(const Tensor &in, const Tensor &out,
                                     const Group &group) const {
  std::string text = collectiveName(kind);
  switch (kind) {
  case CollectiveKind::AllReduce:
    text += "(" + reductionName(reduction) + ")";
    break;
  case CollectiveKind::AllGather:
    text += "(dim " + std::to_string(dim) + ")";
    break;
  case CollectiveKind::ReduceScatter:
    text +=
        "(" + reductionName(reduction) + ", dim " + std::to_string(dim) + ")";
    break;
  case CollectiveKind::AllToAll:
    text += "(split " + std::to_string(dim) + ", concat " +
            std::to_string(concatDim) + ")";
    break;
  case CollectiveKind::CollectivePermute:
    text += "(shift " + std::to_string(shift) + ")";
    break;
  case CollectiveKind::Dispatch:
  case CollectiveKind::DispatchReturn:
    break;
  }
  return text + " " + dtypeName(in.dtype) + " " + shapeString(in.shape) +
         " -> " + shapeString(out.shape) + " over group " + groupString(group);
}

bool partita::runtime::overlaps(const Tensor &a, const Tensor &b) {
  if (!a.data || !b.data || a.byteSize() == 0 || b.byteSize() == 0)
    return false;
  const char *aBegin = static_cast<const char *>(a.data);
  const char *bBegin = static_cast<const char *>(b.data);
  return aBegin < bBegin + b.byteSize() && bBegin < aBegin + a.byteSize();
}

Status partita::runtime::checkGroup(const std::string &what, const Group &group,
                                    int32_t rank, int32_t worldSize,
                                    size_t &index) {
  if (group.empty())
    return Status::error(what + ": the group is empty");
  std::set<int32_t> members;
  for (int32_t member : group)
    if (member < 0 || member >= worldSize || !members.insert(member).second)
      return Status::error(what +
                           ": the group must list distinct ranks of 0.." +
                           std::to_string(worldSize - 1));
  auto self = std::find(group.begin(), group.end(), rank);
  if (self == group.end())
    return Status::error(what + ": this rank is not a member");
  index = size_t(self - group.begin());
  return Status::ok();
}

Status partita::runtime::checkCollectiveShapes(
    const CollectiveCall &call, const Tensor &in, const Tensor &out,
    const Group &group, int32_t rank, int32_t worldSize, size_t &index) {
  std::string what = std::string(collectiveName(call.kind)) + " over group " +
                     groupString(group) + " on rank " + std::to_string(rank);
  PARTITA_RETURN_IF_ERROR(checkGroup(what, group, rank, worldSize, index));
  if (dtypeSize(in.dtype) == 0)
    return Status::error(what + ": unsupported dtype");
  if (out.dtype != in.dtype)
    return Status::error(what + ": the result is " + dtypeName(out.dtype) +
                         ", the operand " + dtypeName(in.dtype));
  for (const Tensor *tensor : {&in, &out})
    for (int64_t dim : tensor->shape)
      if (dim < 0)
        return Status::error(what + ": negative dimension in " +
                             shapeString(tensor->shape));
  int64_t n = int64_t(group.size());
  int64_t rankOf = int64_t(in.shape.size());
  auto checkDim = [&](int64_t dim, const char *name) -> Status {
    if (dim < 0 || dim >= rankOf)
      return Status::error(what + ": " + name + " " + std::to_string(dim) +
                           " is not a dimension of " + shapeString(in.shape));
    return Status::ok();
  };
  auto checkSplit = [&](int64_t dim) -> Status {
    if (in.shape[size_t(dim)] % n != 0)
      return Status::error(what + ": dimension " + std::to_string(dim) +
                           " of " + shapeString(in.shape) +
                           " does not split into " + std::to_string(n));
    return Status::ok();
  };
  std::vector<int64_t> expected = in.shape;
  switch (call.kind) {
  case CollectiveKind::AllReduce:
  case CollectiveKind::CollectivePermute:
    break;
  case CollectiveKind::AllGather:
    PARTITA_RETURN_IF_ERROR(checkDim(call.dim, "dim"));
    expected[size_t(call.dim)] *= n;
    break;
  case CollectiveKind::ReduceScatter:
    PARTITA_RETURN_IF_ERROR(checkDim(call.dim, "dim"));
    PARTITA_RETURN_IF_ERROR(checkSplit(call.dim));
    expected[size_t(call.dim)] /= n;
    break;
  case CollectiveKind::AllToAll:
    PARTITA_RETURN_IF_ERROR(checkDim(call.dim, "split dim"));
    PARTITA_RETURN_IF_ERROR(checkDim(call.concatDim, "concat dim"));
    PARTITA_RETURN_IF_ERROR(checkSplit(call.dim));
    expected[size_t(call.dim)] /= n;
    expected[size_t(call.concatDim)] *= n;
    break;
  case CollectiveKind::Dispatch:
  case CollectiveKind::DispatchReturn:
    // Rows: any number on either side.
    if (in.shape.empty())
      return Status::error(what + ": the operand has no rows");
    if (out.shape.size() == in.shape.size())
      expected[0] = out.shape[0];
    break;
  }
  if (out.shape != expected)
    return Status::error(what + ": the result should be " +
                         shapeString(expected) + ", it is " +
                         shapeString(out.shape));
  return Status::ok();
}

Status partita::runtime::checkDispatchBuffers(
    const CollectiveCall &call, const Tensor &in, const Tensor &out,
    const Tensor &destinations, const Tensor &counts, const Group &group,
    int32_t rank) {
  std::string what = std::string(collectiveName(call.kind)) + " over group " +
                     groupString(group) + " on rank " + std::to_string(rank);
  const Tensor &sent = call.kind == CollectiveKind::Dispatch ? in : out;
  if (destinations.dtype != program::I64 || destinations.shape.size() != 1 ||
      destinations.shape[0] != (sent.shape.empty() ? 0 : sent.shape[0]))
    return Status::error(
        what + ": the destinations should be i64 [" +
        std::to_string(sent.shape.empty() ? 0 : sent.shape[0]) +
        "], one per row, they are " + dtypeName(destinations.dtype) + " " +
        shapeString(destinations.shape));
  if (counts.dtype != program::I64 || counts.shape.size() != 1 ||
      counts.shape[0] != int64_t(group.size()))
    return Status::error(
        what + ": the counts should be i64 [" + std::to_string(group.size()) +
        "], one per member, they are " + dtypeName(counts.dtype) + " " +
        shapeString(counts.shape));
  // Each is read or written while the others are: none may share bytes.
  const Tensor *buffers[] = {&in, &out, &destinations, &counts};
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = i + 1; j < 4; ++j)
      if (overlaps(*buffers[i], *buffers[j]))
        return Status::error(what + ": its rows, result, destinations and "
                                    "counts must not share memory");
  return Status::ok();
}

Status partita::runtime::checkCollective(const CollectiveCall &call,
                                         const Tensor &in, const Tensor &out,
                                         const Group &group, int32_t rank,
                                         int32_t worldSize, size_t &index) {
  PARTITA_RETURN_IF_ERROR(
      checkCollectiveShapes(call, in, out, group, rank, worldSize, index));
  if ((!in.data && in.numElements() > 0) ||
      (!out.data && out.numElements() > 0))
    return Status::error(std::string(collectiveName(call.kind)) +
                         " over group " + groupString(group) + " on rank " +
                         std::to_string(rank) + ": a buffer has no memory");
  return Status::ok();
}
