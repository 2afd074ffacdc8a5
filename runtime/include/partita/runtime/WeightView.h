//===- WeightView.h - a weight described, not copied ------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The compiler never copies a weight: a rank's shard of a weight is a view
// of the model's mapped bytes, recording which tensor it reads, which
// indices of each dimension (a slice, a column permutation such as the
// fused-QKV reordering, or both) and which dtype conversion. Only the
// artifact writer touches bytes, once, when it streams each shard into its
// safetensors file: copyRows() is a strided copy with the conversion fused
// into it.
//
// A view keeps the bytes' owner alive (the input's mapping, or a buffer the
// compiler made), so it stays valid as long as it exists.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_WEIGHTVIEW_H
#define PARTITA_RUNTIME_WEIGHTVIEW_H

#include "partita/runtime/IndexRuns.h"
#include "partita/runtime/Tensor.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace partita::runtime {

/// A row-major tensor whose element at index (i0, ..., ik) is the source's
/// element at (map0(i0), ..., mapk(ik)), converted to dtype(). Each
/// dimension's map is a list of runs: index i of the view along dimension
/// d is the i-th index the runs of d list, in order.
class WeightView {
public:
  WeightView() = default;

  /// All of `bytes` bytes at `data`, a row-major tensor of `dtype` and
  /// `shape`; `owner` keeps `data` alive. Empty (invalid()) when `bytes`
  /// does not match the dtype and shape. The view is file-mapped
  /// (isFileMapped()) when `data` lies in a mapping registered with
  /// registerFileMapping(): a reader may then drop its pages from the
  /// resident set after copying them.
  static WeightView of(const void *data, size_t bytes, DType dtype,
                       std::vector<int64_t> shape,
                       std::shared_ptr<const void> owner);

  /// Indices [start, start + length) of dimension `dim` of this view.
  /// Requires 0 <= start, start + length <= shape()[dim].
  WeightView slice(int64_t dim, int64_t start, int64_t length) const;
  /// Block `block` of `parts` equal blocks of dimension `dim` (what a rank
  /// keeps of a dimension split `parts` ways).
  WeightView block(int64_t dim, int64_t parts, int64_t block) const;
  /// Reorders dimension `dim`: index j of the result is index
  /// `sourceOf[j]` of this view. `sourceOf` is a permutation of
  /// 0..shape()[dim]-1 (stored as runs, so block permutations cost a few
  /// runs, not one entry per index).
  WeightView permute(int64_t dim, const std::vector<int64_t> &sourceOf) const;
  /// Picks indices of dimension `dim`: index j of the result is the j-th
  /// index of this view that `runs` lists (each below shape()[dim]); a
  /// zero run's indices read zeros (padding).
  WeightView select(int64_t dim, const IndexRuns &runs) const;
  /// The same elements as `to`: the identity, or f32 to bf16 or f16
  /// (round to nearest even, as Float16.h). Other conversions are invalid.
  WeightView convert(DType to) const;

  bool valid() const { return data != nullptr || elements() == 0; }
  DType dtype() const { return type; }
  DType sourceDType() const { return sourceType; }
  const std::vector<int64_t> &shape() const { return viewShape; }
  const std::vector<int64_t> &sourceShape() const { return baseShape; }
  /// The runs of dimension `dim`.
  const std::vector<IndexRun> &runs(int64_t dim) const { return index[dim]; }
  const void *sourceData() const { return data; }
  /// Bytes of the source (all of it, whatever the view reads).
  uint64_t sourceBytes() const;
  bool isFileMapped() const { return fileMapped; }
  int64_t elements() const;
  uint64_t byteSize() const;
  /// The rows copyRows() counts: shape()[0], or 1 for a rank-0 view.
  int64_t rows() const;
  /// True when the view is all of its source, unconverted: its bytes are
  /// the source's.
  bool isWhole() const;

  /// Writes rows [first, first + count) of dimension 0 of the view, row
  /// major, into `out` (count * byteSize() / shape()[0] bytes). A rank-0
  /// view has one row.
  void copyRows(int64_t first, int64_t count, void *out) const;
  /// All of it: copyRows(0, rows).
  void copyTo(void *out) const;

  /// Same source bytes, same maps, same dtype: the same tensor.
  bool operator==(const WeightView &other) const;
  bool operator!=(const WeightView &other) const { return !(*this == other); }

private:
  const char *data = nullptr;
  std::shared_ptr<const void> owner;
  bool fileMapped = false;
  DType sourceType = program::DTYPE_UNSPECIFIED;
  DType type = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> baseShape;
  std::vector<int64_t> viewShape;
  std::vector<std::vector<IndexRun>> index;
};

/// Reads views' bytes in order, a piece of whole rows at a time, through one
/// buffer that every piece and every view reuses: memory is one piece,
/// whatever the tensor's size. A view whose bytes are its source's
/// (isWhole()) is read in place, without a copy.
class WeightViewReader {
public:
  /// Pieces of max(1, chunkBytes / rowBytes) rows: two views of the same
  /// dtype and shape are cut at the same rows, so they compare piece by
  /// piece.
  explicit WeightViewReader(size_t chunkBytes = 16u << 20);
  WeightViewReader(const WeightViewReader &) = delete;
  WeightViewReader &operator=(const WeightViewReader &) = delete;

  /// Starts reading `view` (which must outlive the reading) from row 0.
  void reset(const WeightView &view);
  /// The next piece and its size in bytes, valid until the next call; null
  /// once every byte was returned (at once for an empty view).
  const void *next(size_t &bytes);

private:
  size_t chunkBytes;
  const WeightView *view = nullptr;
  int64_t row = 0;
  int64_t rowsPerPiece = 1;
  uint64_t rowBytes = 0;
  bool inPlace = false;
  std::unique_ptr<char[]> buffer;
  size_t capacity = 0;
};

/// The read-only file mappings of this process whose pages may be dropped
/// from its resident set once read (a later read faults them in again from
/// the file): the compiler's mappings of a model and its external data, and
/// the runtime's of an artifact's weights. Whoever maps a file read-only
/// registers [begin, begin + bytes) and unregisters it before unmapping;
/// WeightView::of() consults the registry, so a view of a model's weights
/// is known to be file-backed wherever it was made. Thread-safe.
void registerFileMapping(const void *begin, size_t bytes);
/// Forgets the mapping registered at `begin`.
void unregisterFileMapping(const void *begin);
/// True when all of [data, data + bytes) lies in one registered mapping.
bool isInFileMapping(const void *data, size_t bytes);
/// When all of [data, data + bytes) lies in one registered mapping, sets
/// `begin` and `length` to that mapping's and returns true.
bool fileMappingOf(const void *data, size_t bytes, const void *&begin,
                   size_t &length);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_WEIGHTVIEW_H
