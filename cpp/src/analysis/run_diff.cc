// DiffRuns: two cursors advanced in step by gstep; each pair of records compared key by key in
// place (views of the mappings), a whole column by memcmp first, element by element only when that
// differs.
#include "analysis/run_diff.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/numeric.h"
#include "core/status_macros.h"
#include "summary/digest.h"
#include "summary/summary.h"
#include "xdl_trace/dtype.h"

namespace xdl_trace {
namespace internal {
namespace {

constexpr size_t kMaxGrowthPoints = 64;

// How an element of a column is read: its kind and size (an unknown dtype:
// its bytes, as uint8).
struct ElementType {
  DTypeKind kind = DTypeKind::kUInt;
  size_t size = 1;
};

ElementType TypeOf(const ColumnView& column) {
  if (!column.known_dtype()) return {};
  const DTypeInfo& info = GetDTypeInfo(column.dtype);
  if (info.kind == DTypeKind::kOpaque) return {DTypeKind::kUInt, 1};
  return {info.kind, info.size};
}

uint64_t LoadBits(const char* p, size_t size) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, size);  // Little-endian host (docs/format.md): the low bytes.
  return bits;
}

double ToDouble(uint64_t bits, ElementType type) {
  switch (type.kind) {
    case DTypeKind::kInt: {
      const int shift = 64 - 8 * static_cast<int>(type.size);
      return static_cast<double>(static_cast<int64_t>(bits << shift) >> shift);
    }
    case DTypeKind::kFloat:
      if (type.size == 2) return HalfToFloat(static_cast<uint16_t>(bits));
      if (type.size == 4) {
        float f;
        const auto b = static_cast<uint32_t>(bits);
        std::memcpy(&f, &b, 4);
        return f;
      } else {
        double d;
        std::memcpy(&d, &bits, 8);
        return d;
      }
    case DTypeKind::kBFloat16:
      return BFloat16ToFloat(static_cast<uint16_t>(bits));
    default:
      return static_cast<double>(bits);
  }
}

bool IsFloat(ElementType type) {
  return type.kind == DTypeKind::kFloat || type.kind == DTypeKind::kBFloat16;
}

// A float's bits on a line where neighbours differ by 1 (-0 and +0 both 0).
int64_t Ordered(uint64_t bits, size_t size) {
  const uint64_t sign = uint64_t{1} << (8 * size - 1);
  const auto magnitude = static_cast<int64_t>(bits & (sign - 1));
  return (bits & sign) ? -magnitude : magnitude;
}

void Note(DiffPoint* point, int64_t index, double abs, double rel, uint64_t ulp) {
  if (point->differing++ == 0) point->first_index = index;
  point->max_abs = std::max(point->max_abs, abs);
  point->max_rel = std::max(point->max_rel, rel);
  point->max_ulp = std::max(point->max_ulp, ulp);
}

const char* ContentName(ColumnInfo::Content content) {
  switch (content) {
    case ColumnInfo::Content::kStats:
      return "a stats summary";
    case ColumnInfo::Content::kHistogram:
      return "a histogram summary";
    case ColumnInfo::Content::kUserSummary:
      return "a user summary";
    case ColumnInfo::Content::kDigest:
      return "a digest";
    default:
      return "values";
  }
}

bool IsValue(ColumnInfo::Content content) {
  return content == ColumnInfo::Content::kValue || content == ColumnInfo::Content::kUnknown;
}

std::string ShapeText(const ColumnView& column) {
  return absl::StrCat(column.known_dtype() ? DTypeName(column.dtype) : "unknown-dtype", "[",
                      absl::StrJoin(column.shape, ","), "]");
}

// One side of the comparison: a cursor over one rank, and what the current
// file's columns hold.
struct Side {
  const TraceReader* reader = nullptr;
  // The columns read: its column per compared key, then its norm columns.
  std::vector<std::string> columns;
  std::vector<int> norm;  // Per compared key: its norm column's index in `columns`, or -1.
  std::optional<TraceCursor> cursor;
  bool done = false;
  size_t file = std::numeric_limits<size_t>::max();
  std::vector<ColumnInfo::Content> contents;  // Per column, for `file`.

  const TraceRecord& record() const { return cursor->record(); }
};

// Moves `side` to its next record (or sets done), noting torn tails.
absl::Status Advance(Side& side, const DiffOptions& options, RunDiffResult* result) {
  while (true) {
    XDL_ASSIGN_OR_RETURN(TraceCursor::Event event, side.cursor->Next());
    if (event == TraceCursor::Event::kTornTail) {
      result->torn_tails.push_back(side.cursor->torn_tail());
      continue;
    }
    if (event == TraceCursor::Event::kEnd) {
      side.done = true;
      return absl::OkStatus();
    }
    if (event != TraceCursor::Event::kRecord || side.record().device_only) continue;
    const TraceRecord& record = side.record();
    if (record.file != side.file) {
      side.file = record.file;
      XDL_ASSIGN_OR_RETURN(std::shared_ptr<TraceFile> file, side.reader->File(record.file));
      side.contents.assign(side.columns.size(), ColumnInfo::Content::kUnknown);
      if (!file->columns().empty()) {
        for (size_t k = 0; k < side.columns.size(); ++k) {
          if (auto index = file->KeyIndex(side.columns[k])) {
            side.contents[k] = file->columns()[*index].content;
          }
        }
      }
    }
    return absl::OkStatus();
  }
}

void AddPoint(KeyDiff& key, const DiffPoint& point) {
  ++key.steps_differing;
  if (!key.first) key.first = point;
  key.last = point;
  if (key.growth.empty() || (key.growth.size() < kMaxGrowthPoints &&
                             Magnitude(point) > 2 * Magnitude(key.growth.back()))) {
    key.growth.push_back(point);
  }
}

// The digest a column holds, or the digest of the values it holds.
uint64_t DigestOf(const ColumnView& column, ColumnInfo::Content content) {
  if (content == ColumnInfo::Content::kDigest) {
    double values[kDigestSize] = {0, 0};
    std::memcpy(values, column.data.data(), std::min(column.data.size(), sizeof(values)));
    return DigestFromValues(values);
  }
  const ElementType type = TypeOf(column);
  return DigestElements(column.data.data(), column.data.size() / type.size, type.size);
}

bool IsDigest(const ColumnView& column, ColumnInfo::Content content) {
  return content == ColumnInfo::Content::kDigest && column.dtype == DType::kFloat64 &&
         column.data.size() == kDigestSize * sizeof(double);
}

// The l2 norm of key k's tensor on a side at its current record: from its norm column's stats,
// or computed from the values it compares (a digest met by values); NaN where neither.
double NormOf(const Side& side, size_t k) {
  const int i = side.norm[k];
  if (i < 0) {
    const ColumnView& values = side.record().view.columns[k];
    if (!IsValue(side.contents[k]) || !values.known_dtype() ||
        GetDTypeInfo(values.dtype).kind == DTypeKind::kOpaque) {
      return kNaN;
    }
    double row[kStatsSize];
    ComputeStats(TensorView{values.dtype, values.shape, values.data.data()}, row);
    return row[kStatsL2];
  }
  if (side.contents[i] != ColumnInfo::Content::kStats) return kNaN;
  const ColumnView& stats = side.record().view.columns[i];
  if (stats.dtype != DType::kFloat64 || stats.data.size() != kStatsSize * sizeof(double)) {
    return kNaN;
  }
  double l2;
  std::memcpy(&l2, stats.data.data() + kStatsL2 * sizeof(double), sizeof(l2));
  return l2;
}

// Values of a dtype with stats on one side, a stats summary of layout 1 (float64[8]) on the
// other, neither empty.
bool StatsOfValues(const ColumnView& ca, ColumnInfo::Content ka, const ColumnView& cb,
                   ColumnInfo::Content kb) {
  const bool a_values = IsValue(ka) && kb == ColumnInfo::Content::kStats;
  const bool b_values = IsValue(kb) && ka == ColumnInfo::Content::kStats;
  if (!a_values && !b_values) return false;
  const ColumnView& values = a_values ? ca : cb;
  const ColumnView& stats = a_values ? cb : ca;
  return !values.empty() && values.known_dtype() &&
         GetDTypeInfo(values.dtype).kind != DTypeKind::kOpaque && stats.dtype == DType::kFloat64 &&
         stats.data.size() == kStatsSize * sizeof(double);
}

// Compares key k of the two current records into `key`.
void CompareKey(const Side& a, const Side& b, size_t k, const DiffOptions& options, KeyDiff& key) {
  const ColumnView& ca = a.record().view.columns[k];
  const ColumnView& cb = b.record().view.columns[k];
  const int64_t gstep = a.record().view.gstep;
  if (ca.empty() && cb.empty()) return;  // trace_once after its first step, on both sides.
  const ColumnInfo::Content ka = a.contents[k], kb = b.contents[k];
  std::string structural;
  const bool digests = (ka == ColumnInfo::Content::kDigest || kb == ColumnInfo::Content::kDigest) &&
                       (IsValue(ka) || ka == ColumnInfo::Content::kDigest) &&
                       (IsValue(kb) || kb == ColumnInfo::Content::kDigest);
  if (digests) {
    if (ca.empty() != cb.empty()) {
      structural = ca.empty() ? "no value vs a value" : "a value vs no value";
    } else if ((ka == ColumnInfo::Content::kDigest && !IsDigest(ca, ka)) ||
               (kb == ColumnInfo::Content::kDigest && !IsDigest(cb, kb))) {
      structural = absl::StrCat("a digest column of ",
                                ShapeText(ka == ColumnInfo::Content::kDigest ? ca : cb),
                                " (float64[2] expected)");
    }
    if (structural.empty()) {
      key.basis = std::max(key.basis, DiffBasis::kDigests);
      ++key.steps_compared;
      if (DigestOf(ca, ka) != DigestOf(cb, kb)) {
        DiffPoint point;
        point.gstep = gstep;
        point.basis = DiffBasis::kDigests;
        point.norm_a = NormOf(a, k);
        point.norm_b = NormOf(b, k);
        AddPoint(key, point);
      }
      return;
    }
  } else if (StatsOfValues(ca, ka, cb, kb)) {
    // Values on one side, their stats summary on the other: the values' stats are computed
    // here (the writer's own ComputeStats on the host) and compared as summaries.
    const bool a_values = IsValue(ka);
    const ColumnView& values = a_values ? ca : cb;
    double row[kStatsSize];
    ComputeStats(TensorView{values.dtype, values.shape, values.data.data()}, row);
    ColumnView computed;
    computed.dtype = DType::kFloat64;
    computed.shape = {kStatsSize};
    computed.data = absl::string_view(reinterpret_cast<const char*>(row), sizeof(row));
    key.basis = std::max(key.basis, DiffBasis::kSummaries);
    ++key.steps_compared;
    DiffPoint point;
    if (DiffColumns(a_values ? computed : ca, a_values ? cb : computed, options, &point)) {
      point.gstep = gstep;
      point.basis = DiffBasis::kSummaries;
      AddPoint(key, point);
    }
    return;
  } else if (IsValue(ka) != IsValue(kb) || (!IsValue(ka) && ka != kb)) {
    structural = absl::StrCat(ContentName(ka), " vs ", ContentName(kb));
  } else if (ca.empty() != cb.empty()) {
    structural = ca.empty() ? "no value vs a value" : "a value vs no value";
  } else if (ca.dtype != cb.dtype || ca.shape != cb.shape || ca.data.size() != cb.data.size()) {
    structural = absl::StrCat(ShapeText(ca), " vs ", ShapeText(cb));
  }
  if (!structural.empty()) {
    if (key.structural.empty()) {
      key.structural = std::move(structural);
      key.structural_gstep = gstep;
    }
    DiffPoint point;
    point.gstep = gstep;
    AddPoint(key, point);
    return;
  }
  const DiffBasis basis = IsValue(ka) ? DiffBasis::kValues : DiffBasis::kSummaries;
  key.basis = std::max(key.basis, basis);
  ++key.steps_compared;
  DiffPoint point;
  if (DiffColumns(ca, cb, options, &point)) {
    point.gstep = gstep;
    point.basis = basis;
    AddPoint(key, point);
  }
}

}  // namespace

double Magnitude(const DiffPoint& point) {
  if (point.basis != DiffBasis::kDigests) return point.max_abs;
  const double apart = std::abs(point.norm_b - point.norm_a);
  return std::isfinite(apart) ? apart : 0.0;
}

bool DiffColumns(const ColumnView& a, const ColumnView& b, const DiffOptions& options,
                 DiffPoint* point) {
  *point = DiffPoint{};
  const ElementType type = TypeOf(a);
  const size_t n = a.data.size() / type.size;
  point->elements = static_cast<int64_t>(n);
  if (a.data.size() == b.data.size() &&
      std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0) {
    return false;
  }
  const bool tolerance = options.rtol > 0 || options.atol > 0;
  const bool is_float = IsFloat(type);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t ba = LoadBits(a.data.data() + i * type.size, type.size);
    const uint64_t bb = LoadBits(b.data.data() + i * type.size, type.size);
    if (ba == bb) continue;
    const double va = ToDouble(ba, type), vb = ToDouble(bb, type);
    const bool nan_a = std::isnan(va), nan_b = std::isnan(vb);
    const double abs = nan_a || nan_b ? (nan_a && nan_b ? 0 : kInf) : std::fabs(vb - va);
    if (tolerance && ((nan_a && nan_b) || abs <= options.atol + options.rtol * std::fabs(va))) {
      continue;
    }
    const double rel = abs == 0 ? 0 : va == 0 ? kInf : abs / std::fabs(va);
    uint64_t ulp = 0;
    if (is_float && !nan_a && !nan_b) {
      const int64_t oa = Ordered(ba, type.size), ob = Ordered(bb, type.size);
      ulp = oa > ob ? static_cast<uint64_t>(oa - ob) : static_cast<uint64_t>(ob - oa);
    }
    Note(point, static_cast<int64_t>(i), abs, rel, ulp);
  }
  return point->differing > 0;
}

absl::StatusOr<std::vector<RunDiffResult>> DiffRuns(const TraceReader& a, int32_t rank_a,
                                                    const TraceReader& b,
                                                    const std::vector<int32_t>& ranks_b,
                                                    const DiffOptions& options) {
  for (const auto* list : {&options.keys_b, &options.norms_a, &options.norms_b}) {
    if (!list->empty() && list->size() != options.keys.size()) {
      return absl::InvalidArgumentError(absl::StrCat("diff: ", list->size(),
                                                     " columns of a side for ", options.keys.size(),
                                                     " keys (one per key, or none)"));
    }
  }
  const std::vector<std::string>& keys_b = options.keys_b.empty() ? options.keys : options.keys_b;
  auto open = [&](Side& side, const TraceReader& reader, int32_t rank,
                  const std::vector<std::string>& keys, const std::vector<std::string>& norms,
                  RunDiffResult* result) {
    side.columns = keys;
    side.norm.assign(keys.size(), -1);
    for (size_t k = 0; k < norms.size(); ++k) {
      if (norms[k].empty()) continue;
      const auto at = std::find(side.columns.begin(), side.columns.end(), norms[k]);
      side.norm[k] = static_cast<int>(at - side.columns.begin());
      if (at == side.columns.end()) side.columns.push_back(norms[k]);
    }
    ReadOptions read;
    read.keys = side.columns;
    read.steps = options.steps;
    read.ranks = std::vector<int32_t>{rank};
    side.reader = &reader;
    side.cursor.emplace(reader.Read(std::move(read)));
    return Advance(side, options, result);
  };
  // A gstep on one side only: counted, and named while few.
  auto one_sided = [&](int64_t gstep, int64_t& count, std::vector<int64_t>& named) {
    ++count;
    if (named.size() < options.max_named_steps) named.push_back(gstep);
  };
  // B's record, on B's side only; then B's next.
  auto b_only = [&](Side& sb, RunDiffResult& result) {
    one_sided(sb.record().view.gstep, result.only_b, result.only_b_gsteps);
    return Advance(sb, options, &result);
  };
  std::vector<RunDiffResult> results(ranks_b.size());
  for (RunDiffResult& result : results) {
    result.keys.resize(options.keys.size());
    for (size_t k = 0; k < options.keys.size(); ++k) result.keys[k].key = options.keys[k];
  }
  if (results.empty()) return results;
  // Side A's torn tails and bytes go with the first pair's result (A is read once for all).
  RunDiffResult* a_result = &results[0];
  Side sa;
  std::vector<Side> sbs(ranks_b.size());
  XDL_RETURN_IF_ERROR(open(sa, a, rank_a, options.keys, options.norms_a, a_result));
  for (size_t i = 0; i < sbs.size(); ++i) {
    XDL_RETURN_IF_ERROR(open(sbs[i], b, ranks_b[i], keys_b, options.norms_b, &results[i]));
  }
  // Each pair aligned as a merge by gstep would align it: for every record of A, each B's
  // records before its gstep are B's alone, one of the same gstep is compared, else the step is
  // A's alone (a repeated gstep pairs in order).
  while (!sa.done) {
    const int64_t gstep = sa.record().view.gstep;
    for (size_t i = 0; i < sbs.size(); ++i) {
      Side& sb = sbs[i];
      RunDiffResult& result = results[i];
      while (!sb.done && sb.record().view.gstep < gstep) XDL_RETURN_IF_ERROR(b_only(sb, result));
      if (sb.done || sb.record().view.gstep != gstep) {
        one_sided(gstep, result.only_a, result.only_a_gsteps);
        continue;
      }
      ++result.steps_compared;
      for (size_t k = 0; k < options.keys.size(); ++k) {
        CompareKey(sa, sb, k, options, result.keys[k]);
      }
      XDL_RETURN_IF_ERROR(Advance(sb, options, &result));
    }
    XDL_RETURN_IF_ERROR(Advance(sa, options, a_result));
  }
  for (size_t i = 0; i < sbs.size(); ++i) {
    while (!sbs[i].done) XDL_RETURN_IF_ERROR(b_only(sbs[i], results[i]));
    results[i].bytes_read = sbs[i].cursor->bytes_read();
  }
  a_result->bytes_read += sa.cursor->bytes_read();
  return results;
}

}  // namespace internal
}  // namespace xdl_trace
