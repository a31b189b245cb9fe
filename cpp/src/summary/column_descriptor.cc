// Builds the Header's per-column descriptors from registered entries (generated proto code).
#include "summary/column_descriptor.h"

#include "summary/summary.h"

namespace xdl_trace {
namespace internal {
namespace {

using xdl::proto::ColumnDescriptor;

ColumnDescriptor::Source SourceOf(EntryKind kind) {
  switch (kind) {
    case EntryKind::kTensor:
      return ColumnDescriptor::TENSOR;
    case EntryKind::kVariable:
      return ColumnDescriptor::VARIABLE;
    case EntryKind::kGradient:
      return ColumnDescriptor::GRADIENT;
    case EntryKind::kCallback:
      return ColumnDescriptor::CALLBACK;
    case EntryKind::kOnce:
      return ColumnDescriptor::ONCE;
  }
  return ColumnDescriptor::SOURCE_UNSPECIFIED;
}

}  // namespace

ColumnDescriptor DescribeColumn(const EntrySpec& entry) {
  ColumnDescriptor out;
  out.set_source(SourceOf(entry.kind));
  const Summary& summary = entry.summary;
  if (summary.fn) {  // A user function wins over `builtin` (see Summary).
    out.set_content(ColumnDescriptor::USER_SUMMARY);
    out.set_summary_name(summary.name);
  } else if (summary.builtin == BuiltinSummary::kStats) {
    out.set_content(ColumnDescriptor::STATS);
    out.set_layout_version(kSummaryLayoutVersion);
  } else if (summary.builtin == BuiltinSummary::kHistogram) {
    out.set_content(ColumnDescriptor::HISTOGRAM);
    out.set_layout_version(kSummaryLayoutVersion);
    out.set_histogram_bins(summary.histogram_bins);
  } else if (summary.builtin == BuiltinSummary::kDigest) {
    out.set_content(ColumnDescriptor::DIGEST);
    out.set_layout_version(kSummaryLayoutVersion);
  } else {
    out.set_content(ColumnDescriptor::VALUE);
  }
  // Registered memory (its dtype and shape fixed from now on), or what the registering code
  // declared of a provider's tensor.
  const TensorSpec declared = entry.has_view ? TensorSpec{entry.view.dtype, entry.view.shape}
                                             : entry.declared_input.value_or(TensorSpec{});
  if (entry.has_view || entry.declared_input.has_value()) {
    xdl::proto::TensorSpec* input = out.mutable_input();
    input->set_dtype(static_cast<xdl::proto::Type>(declared.dtype));
    for (int64_t dim : declared.shape) input->add_shape(static_cast<int32_t>(dim));
  }
  return out;
}

std::vector<ColumnDescriptor> DescribeColumns(const std::vector<EntrySpec>& entries) {
  std::vector<ColumnDescriptor> out;
  out.reserve(entries.size());
  for (const EntrySpec& entry : entries) out.push_back(DescribeColumn(entry));
  return out;
}

}  // namespace internal
}  // namespace xdl_trace
