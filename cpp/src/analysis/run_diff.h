// Where two traces part ways: one rank of each read in step (aligned by gstep) and compared key by
// key, record by record, with memory bounded by the largest record (xdl-trace diff, xdl.diff).
#ifndef XDL_TRACE_ANALYSIS_RUN_DIFF_H_
#define XDL_TRACE_ANALYSIS_RUN_DIFF_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "xdl_trace/reader/errors.h"
#include "xdl_trace/reader/options.h"
#include "xdl_trace/reader/record_view.h"
#include "xdl_trace/reader/trace_reader.h"

namespace xdl_trace {
namespace internal {

struct DiffOptions {
  std::vector<std::string> keys;  // Compared, in this order; each must be on both sides.
  // Side B's column for keys[k] where it has another name (values of K meeting B's
  // companion digest/K); empty: `keys` on both sides. Results are named by `keys`.
  std::vector<std::string> keys_b;
  // Per key (or empty: none), each side's column holding a stats summary of the key's tensor,
  // "" where a side has none (xdl.watch: K's stats beside its compared digest/K). A step where a
  // key differs by digests gets both sides' l2 norms from them (DiffPoint::norm_a/norm_b): how
  // much, which a digest cannot say.
  std::vector<std::string> norms_a, norms_b;
  StepSelection steps;
  // Both 0: exact (bit for bit; a NaN agrees with the same NaN bits only).
  // Else an element agrees when |b - a| <= atol + rtol * |a| (numpy.isclose
  // with side A as the reference), or when both are NaN.
  double rtol = 0;
  double atol = 0;
  size_t max_named_steps = 10;  // One-sided gsteps named (all are counted).
};

// What was compared at a step, strongest first: the tensors themselves; their
// digests (summary/digest.h: exact but for a 2^-64 chance, and a digest that
// differs says nothing of how much; a value column is digested to meet a
// digest column); summaries (stats, histogram, a user summary: summaries that
// agree prove nothing exact; a value column meets a stats column as its stats,
// computed here as the host writer computes them).
enum class DiffBasis { kNone = 0, kValues = 1, kDigests = 2, kSummaries = 3 };

// One step where a key differs.
struct DiffPoint {
  int64_t gstep = 0;
  DiffBasis basis = DiffBasis::kNone;  // Digests: only `gstep` says more than "differs".
  int64_t differing = 0;               // Elements that differ.
  int64_t elements = 0;                // Elements compared.
  int64_t first_index = 0;             // The first differing element (C order).
  double max_abs = 0;  // Max |b - a| over the differing elements (inf: a NaN on one side).
  double max_rel = 0;  // Max |b - a| / |a| (inf where a is 0).
  // Floats: max distance in units in the last place (representable values
  // between a and b); 0 for other dtypes or where a NaN is involved.
  uint64_t max_ulp = 0;
  // Digests: the l2 norm of each side's tensor at this step, from its stats (DiffOptions::
  // norms_a/_b) or computed from the values a side compares; NaN where unknown.
  double norm_a = std::numeric_limits<double>::quiet_NaN();
  double norm_b = std::numeric_limits<double>::quiet_NaN();
};

// How far apart a differing step's sides are, for KeyDiff::growth: its max_abs;
// compared by digests, how far apart their l2 norms are (|norm_b - norm_a|, a
// lower bound of the l2 distance; 0 where either is unknown).
double Magnitude(const DiffPoint& point);

struct KeyDiff {
  std::string key;
  DiffBasis basis = DiffBasis::kNone;  // The weakest basis of any step compared.
  int64_t steps_compared = 0;
  int64_t steps_differing = 0;
  std::optional<DiffPoint> first;  // The first step that differs.
  DiffPoint last;                  // The last (when first is set).
  // How it grows: the first step, then each step whose Magnitude passes twice
  // the previous point's (at most 64 points), so a drift's growth reads at a glance.
  std::vector<DiffPoint> growth;
  // A dtype, shape or content that differs between the sides (first met), and
  // its gstep; those steps count as differing, not compared element-wise.
  std::string structural;
  int64_t structural_gstep = 0;
};

struct RunDiffResult {
  std::vector<KeyDiff> keys;                          // In DiffOptions::keys order.
  int64_t steps_compared = 0;                         // gsteps on both sides.
  int64_t only_a = 0, only_b = 0;                     // gsteps on one side only.
  std::vector<int64_t> only_a_gsteps, only_b_gsteps;  // The first max_named_steps of each.
  uint64_t bytes_read = 0;                            // Frame bytes walked (see DiffRuns).
  std::vector<TornTail> torn_tails;
};

// Compares rank `rank_a` of `a` with each rank of `ranks_b` in `b` (a result
// per rank, in that order), reading `a` once for all (diff --ranks: rank 0
// against every other). Each side's records arrive in gstep order (a rank's
// files in index order); a gstep on one side only is counted, and a gstep
// repeated on a side (a resumed run) is paired in order. Side A's bytes and
// torn tails are counted in the first result. Corruption and a key missing
// from a file are errors naming the file.
absl::StatusOr<std::vector<RunDiffResult>> DiffRuns(const TraceReader& a, int32_t rank_a,
                                                    const TraceReader& b,
                                                    const std::vector<int32_t>& ranks_b,
                                                    const DiffOptions& options);

// Compares two columns of the same dtype and element count (options' tolerance):
// true when they differ, *point filled (but its gstep).
bool DiffColumns(const ColumnView& a, const ColumnView& b, const DiffOptions& options,
                 DiffPoint* point);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_ANALYSIS_RUN_DIFF_H_
