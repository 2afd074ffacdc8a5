//===- WeightView.cpp - a weight described, not copied --------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/WeightView.h"

#include "partita/runtime/Float16.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

using namespace partita::runtime;
namespace program = partita::program;

namespace {

/// The product of `shape`, or -1 when a dimension is negative or the
/// product overflows.
int64_t checkedProduct(const std::vector<int64_t> &shape) {
  int64_t product = 1;
  for (int64_t dim : shape)
    if (dim < 0 || __builtin_mul_overflow(product, dim, &product))
      return -1;
  return product;
}

/// `n` elements from `in` (of `from`) to `out` (of `to`), converting on the
/// way: the only place a view's bytes are read.
void copyElements(DType from, DType to, const char *in, char *out, size_t n) {
  if (from == to) {
    std::memcpy(out, in, n * dtypeSize(from));
    return;
  }
  if (to == program::BF16) {
    convertFloatsToBf16(in, reinterpret_cast<uint16_t *>(out), n);
    return;
  }
  convertFloatsToF16(in, reinterpret_cast<uint16_t *>(out), n);
}

/// The strided walk of copyRows: dimensions before `last` are visited one
/// index at a time; each run of dimension `last` is one contiguous piece of
/// `length * inner` source elements, since the dimensions after it are
/// whole.
struct RowCopier {
  const char *source = nullptr;
  DType from = program::DTYPE_UNSPECIFIED, to = program::DTYPE_UNSPECIFIED;
  const std::vector<std::vector<IndexRun>> *index = nullptr;
  const std::vector<int64_t> *shape = nullptr;
  /// Source strides, in elements.
  std::vector<int64_t> stride;
  size_t last = 0;
  char *out = nullptr;

  /// Copies view indices [begin, end) of dimension `dim`, the dimensions
  /// before it fixed at source element `offset`.
  void copy(size_t dim, int64_t offset, int64_t begin, int64_t end) {
    int64_t runBegin = 0;
    for (const IndexRun &run : (*index)[dim]) {
      if (runBegin >= end)
        return;
      int64_t runEnd = runBegin + run.length;
      int64_t from = std::max(begin, runBegin);
      int64_t until = std::min(end, runEnd);
      int64_t first = run.start + (from - runBegin);
      runBegin = runEnd;
      if (from >= until)
        continue;
      if (run.isZero()) {
        // Zeros for every element under these indices: the view's
        // dimensions after `dim` (whole ones included) in full.
        int64_t n = until - from;
        for (size_t d = dim + 1; d < shape->size(); ++d)
          n *= (*shape)[d];
        size_t bytes = size_t(n) * dtypeSize(to);
        std::memset(out, 0, bytes);
        out += bytes;
        continue;
      }
      if (dim == last) {
        size_t n = size_t((until - from) * stride[dim]);
        copyElements(this->from, to,
                     source + size_t(offset + first * stride[dim]) *
                                  dtypeSize(this->from),
                     out, n);
        out += n * dtypeSize(to);
        continue;
      }
      for (int64_t i = first; i < first + (until - from); ++i)
        copy(dim + 1, offset + i * stride[dim], 0, (*shape)[dim + 1]);
    }
  }
};

} // namespace

WeightView WeightView::of(const void *data, size_t bytes, DType dtype,
                          std::vector<int64_t> shape,
                          std::shared_ptr<const void> owner) {
  int64_t elements = checkedProduct(shape);
  size_t elementBytes = dtypeSize(dtype);
  uint64_t expected;
  if (elements < 0 || elementBytes == 0 ||
      __builtin_mul_overflow(uint64_t(elements), uint64_t(elementBytes),
                             &expected) ||
      expected != bytes || (elements > 0 && !data))
    return WeightView();
  WeightView view;
  view.data = static_cast<const char *>(data);
  view.owner = std::move(owner);
  view.fileMapped = isInFileMapping(data, bytes);
  view.sourceType = dtype;
  view.type = dtype;
  view.index.resize(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    appendRun(view.index[d], {0, shape[d]});
  view.baseShape = shape;
  view.viewShape = std::move(shape);
  return view;
}

WeightView WeightView::slice(int64_t dim, int64_t start, int64_t length) const {
  if (!valid() || dim < 0 || dim >= int64_t(viewShape.size()) || start < 0 ||
      length < 0 || start > viewShape[size_t(dim)] - length)
    return WeightView();
  WeightView result = *this;
  result.index[size_t(dim)] =
      composeRuns(index[size_t(dim)], IndexRuns{{start, length}});
  result.viewShape[size_t(dim)] = length;
  return result;
}

WeightView WeightView::block(int64_t dim, int64_t parts, int64_t block) const {
  if (!valid() || dim < 0 || dim >= int64_t(viewShape.size()) || parts <= 0 ||
      block < 0 || block >= parts || viewShape[size_t(dim)] % parts != 0)
    return WeightView();
  int64_t size = viewShape[size_t(dim)] / parts;
  return slice(dim, block * size, size);
}

WeightView WeightView::permute(int64_t dim,
                               const std::vector<int64_t> &sourceOf) const {
  if (!valid() || dim < 0 || dim >= int64_t(viewShape.size()) ||
      int64_t(sourceOf.size()) != viewShape[size_t(dim)])
    return WeightView();
  std::vector<bool> seen(sourceOf.size(), false);
  for (int64_t j : sourceOf) {
    if (j < 0 || j >= int64_t(sourceOf.size()) || seen[size_t(j)])
      return WeightView();
    seen[size_t(j)] = true;
  }
  // Consecutive entries that read consecutive indices are one run, so a
  // block permutation costs one lookup per block.
  WeightView result = *this;
  result.index[size_t(dim)] = composeRuns(index[size_t(dim)], runsOf(sourceOf));
  return result;
}

WeightView WeightView::select(int64_t dim, const IndexRuns &runs) const {
  if (!valid() || dim < 0 || dim >= int64_t(viewShape.size()))
    return WeightView();
  for (const IndexRun &run : runs)
    if (run.length < 0 ||
        (!run.isZero() &&
         (run.start < 0 || run.start > viewShape[size_t(dim)] - run.length)))
      return WeightView();
  WeightView result = *this;
  result.viewShape[size_t(dim)] = runsLength(runs);
  result.index[size_t(dim)] = composeRuns(index[size_t(dim)], runs);
  return result;
}

WeightView WeightView::convert(DType to) const {
  if (!valid())
    return WeightView();
  if (to == type)
    return *this;
  if (sourceType != program::F32 || type != program::F32 ||
      (to != program::BF16 && to != program::F16))
    return WeightView();
  WeightView result = *this;
  result.type = to;
  return result;
}

uint64_t WeightView::sourceBytes() const {
  return uint64_t(std::max<int64_t>(checkedProduct(baseShape), 0)) *
         dtypeSize(sourceType);
}

int64_t WeightView::elements() const { return checkedProduct(viewShape); }

uint64_t WeightView::byteSize() const {
  return uint64_t(std::max<int64_t>(elements(), 0)) * dtypeSize(type);
}

int64_t WeightView::rows() const {
  return viewShape.empty() ? 1 : viewShape[0];
}

bool WeightView::isWhole() const {
  if (!valid() || type != sourceType || viewShape != baseShape)
    return false;
  for (size_t d = 0; d < viewShape.size(); ++d)
    if (viewShape[d] > 0 &&
        (index[d].size() != 1 || !(index[d][0] == IndexRun{0, baseShape[d]})))
      return false;
  return true;
}

void WeightView::copyRows(int64_t first, int64_t count, void *out) const {
  if (!valid() || first < 0 || count <= 0 || first > rows() - count ||
      elements() == 0)
    return;
  size_t rank = viewShape.size();
  std::vector<int64_t> stride(rank);
  int64_t step = 1;
  for (size_t d = rank; d-- > 0;) {
    stride[d] = step;
    step *= baseShape[d];
  }
  // The innermost dimensions that are all of the source's, in order, are
  // contiguous in the source: they are copied as one block, so that a
  // dimension's run is one memcpy (or conversion) call.
  size_t whole = rank;
  while (whole > 0 && viewShape[whole - 1] == baseShape[whole - 1] &&
         index[whole - 1].size() == 1 && index[whole - 1][0].start == 0)
    --whole;
  if (whole == 0) {
    int64_t rowElements = elements() / rows();
    copyElements(sourceType, type,
                 data + size_t(first * rowElements) * dtypeSize(sourceType),
                 static_cast<char *>(out), size_t(count * rowElements));
    return;
  }
  RowCopier copier;
  copier.source = data;
  copier.from = sourceType;
  copier.to = type;
  copier.index = &index;
  copier.shape = &viewShape;
  copier.stride = std::move(stride);
  copier.last = whole - 1;
  copier.out = static_cast<char *>(out);
  copier.copy(0, 0, first, first + count);
}

void WeightView::copyTo(void *out) const { copyRows(0, rows(), out); }

bool WeightView::operator==(const WeightView &other) const {
  return data == other.data && sourceType == other.sourceType &&
         type == other.type && baseShape == other.baseShape &&
         viewShape == other.viewShape && index == other.index;
}

//===----------------------------------------------------------------------===//
// WeightViewReader
//===----------------------------------------------------------------------===//

WeightViewReader::WeightViewReader(size_t chunkBytes)
    : chunkBytes(std::max<size_t>(chunkBytes, 1)) {}

void WeightViewReader::reset(const WeightView &next) {
  view = &next;
  row = 0;
  inPlace = next.isWhole();
  uint64_t bytes = next.byteSize();
  rowBytes = bytes == 0 ? 0 : bytes / uint64_t(next.rows());
  rowsPerPiece =
      rowBytes == 0 ? 1 : std::max<int64_t>(1, int64_t(chunkBytes / rowBytes));
}

const void *WeightViewReader::next(size_t &bytes) {
  bytes = 0;
  if (!view || rowBytes == 0 || row >= view->rows())
    return nullptr;
  int64_t count = std::min(rowsPerPiece, view->rows() - row);
  bytes = size_t(count) * rowBytes;
  int64_t first = row;
  row += count;
  if (inPlace)
    return static_cast<const char *>(view->sourceData()) +
           size_t(first) * rowBytes;
  if (capacity < bytes) {
    // Sized for this view's pieces: a small tensor does not cost a chunk.
    buffer.reset(new char[bytes]);
    capacity = bytes;
  }
  view->copyRows(first, count, buffer.get());
  return buffer.get();
}

namespace {

/// Registered mappings, by first byte: each maps to its end.
struct FileMappings {
  std::mutex mutex;
  std::map<uintptr_t, uintptr_t> endOf;
};

FileMappings &fileMappings() {
  // Never destroyed: a mapping may be unregistered from a static destructor.
  static FileMappings *mappings = new FileMappings();
  return *mappings;
}

} // namespace

void partita::runtime::registerFileMapping(const void *begin, size_t bytes) {
  if (!begin || bytes == 0)
    return;
  FileMappings &mappings = fileMappings();
  std::lock_guard<std::mutex> lock(mappings.mutex);
  uintptr_t start = reinterpret_cast<uintptr_t>(begin);
  mappings.endOf[start] = start + bytes;
}

void partita::runtime::unregisterFileMapping(const void *begin) {
  FileMappings &mappings = fileMappings();
  std::lock_guard<std::mutex> lock(mappings.mutex);
  mappings.endOf.erase(reinterpret_cast<uintptr_t>(begin));
}

bool partita::runtime::isInFileMapping(const void *data, size_t bytes) {
  const void *begin;
  size_t length;
  return fileMappingOf(data, bytes, begin, length);
}

bool partita::runtime::fileMappingOf(const void *data, size_t bytes,
                                     const void *&begin, size_t &length) {
  if (!data || bytes == 0)
    return false;
  uintptr_t start = reinterpret_cast<uintptr_t>(data);
  uintptr_t end;
  if (__builtin_add_overflow(start, bytes, &end))
    return false;
  FileMappings &mappings = fileMappings();
  std::lock_guard<std::mutex> lock(mappings.mutex);
  auto after = mappings.endOf.upper_bound(start);
  if (after == mappings.endOf.begin())
    return false;
  auto mapping = std::prev(after);
  if (end > mapping->second)
    return false;
  begin = reinterpret_cast<const void *>(mapping->first);
  length = mapping->second - mapping->first;
  return true;
}
