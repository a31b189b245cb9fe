// What a registered entry's column holds, as the Header's ColumnDescriptor (docs/format.md).
#ifndef XDL_TRACE_SUMMARY_COLUMN_DESCRIPTOR_H_
#define XDL_TRACE_SUMMARY_COLUMN_DESCRIPTOR_H_

#include <vector>

#include "xdl_trace.pb.h"
#include "xdl_trace/registry.h"

namespace xdl_trace {
namespace internal {

// Describes `entry`'s column from what is known at Tracer::Start: the content
// (value, stats, histogram or user summary with its name), the source kind,
// the summary layout version and bin count, and the input tensor's dtype and
// shape when the entry reads registered memory in place (unset otherwise).
xdl::proto::ColumnDescriptor DescribeColumn(const EntrySpec& entry);

// One descriptor per entry, in entry (= Header key) order.
std::vector<xdl::proto::ColumnDescriptor> DescribeColumns(const std::vector<EntrySpec>& entries);

}  // namespace internal
}  // namespace xdl_trace

#endif  // XDL_TRACE_SUMMARY_COLUMN_DESCRIPTOR_H_
