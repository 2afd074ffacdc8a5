//===- TensorShards.h - global tensors and rank shards ----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// How a global input is cut into what each rank reads, and how what the
// ranks write is put back together, following a manifest's TensorSharding
// (the compiler's #dist.sharding). A dimension split by mesh axes {a, b} is
// cut into size(a) * size(b) equal contiguous blocks, and the rank at
// coordinates (i, j) on (a, b) holds block i * size(b) + j. Mesh axes the
// sharding does not name replicate the tensor.
//
// Messages describe the sharding and the rank, not the tensor: callers
// prefix them with the tensor's name.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TENSORSHARDS_H
#define PARTITA_RUNTIME_TENSORSHARDS_H

#include "partita/runtime/Manifest.h"
#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace partita::runtime {

/// `dims [[dp], [], [tp, sp]], partial []`, for messages.
std::string shardingString(const TensorSharding &sharding);

/// The shape of `rank`'s shard of `spec`. Refuses a sharding that names an
/// unknown mesh axis or splits a dimension into blocks that do not divide
/// it. Partial sums do not change the shape and are accepted.
Status localShape(const TensorSpec &spec, const Manifest &manifest,
                  int32_t rank, std::vector<int64_t> &shape);

/// Which of the `count` distinct shards of a tensor with this sharding
/// `rank` holds (ranks that differ only on replicating axes hold the same
/// one): 0 <= index < count, count 1 when nothing is split.
Status shardIndex(const TensorSharding &sharding, const Manifest &manifest,
                  int32_t rank, int64_t &index, int64_t &count);

/// Copies `rank`'s block of `global` into `local`, freshly allocated.
/// Refuses a sharding with partial sums, which no block of the global
/// tensor describes.
Status extractShard(const Tensor &global, const TensorSharding &sharding,
                    const Manifest &manifest, int32_t rank, HostTensor &local);

/// Writes `local`, `rank`'s shard, into its block of `global`. `local`
/// must have `global`'s dtype and the shard's shape. Refuses a sharding
/// with partial sums: adding them up is the program's job, not the
/// runtime's.
Status insertShard(const Tensor &local, const TensorSharding &sharding,
                   const Manifest &manifest, int32_t rank, Tensor &global);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TENSORSHARDS_H
