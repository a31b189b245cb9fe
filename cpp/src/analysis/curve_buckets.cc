// AddCurveRows: the report's per-key curve downsampling, one pass over a chunk's stats rows.
#include "analysis/curve_buckets.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace xdl_trace {
namespace internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Merges neighbouring buckets pairwise: half as many, each twice as wide.
void Halve(CurveBuckets* c) {
  const int64_t half = c->capacity / 2;
  const int64_t w = c->width;
  for (int64_t b = 0; b < half; ++b) {
    c->gstep[b] = c->gstep[2 * b];
    for (int64_t f = 0; f < w; ++f) {
      const int64_t to = b * w + f, a = 2 * b * w + f, z = (2 * b + 1) * w + f;
      c->sum[to] = c->sum[a] + c->sum[z];
      c->valid[to] = c->valid[a] + c->valid[z];
      c->min[to] = std::min(c->min[a], c->min[z]);
      c->max[to] = std::max(c->max[a], c->max[z]);
    }
  }
  const int64_t from = half * w, to = c->capacity * w;
  std::fill(c->sum + from, c->sum + to, 0.0);
  std::fill(c->valid + from, c->valid + to, 0.0);
  std::fill(c->min + from, c->min + to, kInf);
  std::fill(c->max + from, c->max + to, -kInf);
  c->used = half;
  c->span *= 2;
  c->fill = c->span;  // The last merged bucket is full.
}

double Field(const CurveRows& rows, int64_t i, int64_t f) {
  double x;
  std::memcpy(&x, rows.data + i * rows.row_stride + f * rows.field_stride, sizeof(x));
  return x;
}

}  // namespace

void AddCurveRows(const CurveRows& rows, CurveBuckets* c) {
  // The rows of this curve, then runs of them that fill one bucket each: per
  // field, a run accumulates in registers (the same order as row by row).
  std::vector<int64_t> kept;
  kept.reserve(static_cast<size_t>(rows.rows));
  for (int64_t i = 0; i < rows.rows; ++i) {
    if (rows.skip_field < 0 || !std::isnan(Field(rows, i, rows.skip_field))) kept.push_back(i);
  }
  const int64_t w = c->width;
  size_t next = 0;
  while (next < kept.size()) {
    if (c->used == 0 || c->fill == c->span) {
      if (c->used == c->capacity) Halve(c);  // Leaves the last bucket full.
      c->gstep[c->used] = rows.gsteps[kept[next]];
      ++c->used;
      c->fill = 0;
    }
    const size_t run = std::min(kept.size() - next, static_cast<size_t>(c->span - c->fill));
    const int64_t b = (c->used - 1) * w;
    for (int64_t f = 0; f < w; ++f) {
      double sum = c->sum[b + f], valid = c->valid[b + f];
      double low = c->min[b + f], high = c->max[b + f];
      for (size_t r = next; r < next + run; ++r) {
        const double x = Field(rows, kept[r], f);
        if (std::isnan(x)) continue;
        sum += x;
        valid += 1;
        low = std::min(low, x);
        high = std::max(high, x);
      }
      c->sum[b + f] = sum;
      c->valid[b + f] = valid;
      c->min[b + f] = low;
      c->max[b + f] = high;
    }
    c->fill += static_cast<int64_t>(run);
    c->records += static_cast<int64_t>(run);
    next += run;
  }
}

}  // namespace internal
}  // namespace xdl_trace
