// Turns CUPTI activity records (struct versions of the installed headers) into device events.
#ifndef XDL_TRACE_PLUGINS_CUPTI_ACTIVITY_PARSER_H_
#define XDL_TRACE_PLUGINS_CUPTI_ACTIVITY_PARSER_H_

#include <cupti.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device_trace_serializer.h"
#include "event_blocks.h"
#include "occupancy.h"

namespace xdl_trace {
namespace cupti {

// The external-correlation kind the tracer pushes per host step (CUSTOM0 and
// CUSTOM1 are PyTorch's/Kineto's).
inline constexpr CUpti_ExternalCorrelationKind kStepCorrelationKind =
    CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;

// Lines of kHostApiDevice that are not host threads.
inline constexpr int64_t kSynchronizationLine = -2;
inline constexpr int64_t kOverheadLine = -3;

struct ParseCounters {
  int64_t records = 0;            // Records seen.
  int64_t events = 0;             // Turned into events.
  int64_t skipped_kinds = 0;      // Valid records of kinds the tracer does not show.
  int64_t bad_timestamps = 0;     // Zero start or end: dropped.
  int64_t reversed = 0;           // end < start: end clamped to start.
  int64_t filtered_api = 0;       // Runtime/driver calls left out by the API filter.
  int64_t unmatched_markers = 0;  // NVTX range ends without their start (or starts evicted).
};

// A runtime/driver API call as the join's time rule needs it (rule 2 with
// other_threads=0, docs/device-tracing.md): the thread that made it, as CUPTI
// reports it, and its CPU start (CLOCK_REALTIME, after the clock offset).
struct ApiLaunch {
  uint32_t correlation = 0;
  uint32_t thread = 0;
  int64_t start_ns = 0;
};

// The last kSlots entries by CUPTI correlation id (`Entry::correlation`, 0 for
// none), direct-mapped by the id's low bits: CUPTI's ids count up, so it holds
// the last 1 Mi of them (16 MiB for a 16-byte entry, allocated at the first
// Put), with no allocation per entry. The parser's API calls and the tracer's
// join (correlation id -> step) are each one.
template <typename Entry>
class CorrelationTable {
 public:
  static constexpr size_t kSlots = 1u << 20;
  void Put(const Entry& entry) {
    if (slots_.empty()) slots_.resize(kSlots);
    slots_[entry.correlation & (kSlots - 1)] = entry;
  }
  // The entry with this correlation id, or null (never put, or overwritten).
  const Entry* Find(uint32_t correlation) const {
    if (slots_.empty() || correlation == 0) return nullptr;
    const Entry& slot = slots_[correlation & (kSlots - 1)];
    return slot.correlation == correlation ? &slot : nullptr;
  }

 private:
  std::vector<Entry> slots_;
};
using LaunchTable = CorrelationTable<ApiLaunch>;

// When the tracer enables an activity kind: always, or when the config key
// of that name is on (CuptiTracerOptions); kParsedOnly kinds are never
// enabled but parsed when a record comes (older CUPTI's KERNEL); kBestEffort
// kinds are always asked for, and a CUPTI that refuses one traces on without
// it (DEVICE: without it kernels carry no occupancy).
enum class KindOption {
  kAlways,
  kBestEffort,
  kNvtx,
  kMemory,
  kDriver,
  kSynchronization,
  kOverhead,
  kParsedOnly
};

// One activity kind the tracer knows: its CUPTI kind, its name in messages
// ("CONCURRENT_KERNEL") and when it is enabled.
struct ActivityKindInfo {
  CUpti_ActivityKind kind;
  const char* name;
  KindOption option;
};

// Runtime API calls left out by default (config api_filter): frequent, cheap
// queries that bury the launches in the timeline, in the spirit of Kineto's
// filtering of noisy calls.
const std::vector<std::string>& DefaultApiFilter();

// Threading: one thread at a time (the collecting thread).
class ActivityParser {
 public:
  // `callback_name` names API records (may return ""); `clock_offset_ns` is
  // added to every timestamp (0 when CUPTI already reports CLOCK_REALTIME).
  ActivityParser(NameTable* names,
                 std::function<std::string(CUpti_CallbackDomain, uint32_t)> callback_name);

  void set_clock_offset_ns(int64_t offset) { clock_offset_ns_ = offset; }
  // Keep every runtime/driver API call (also those the filter leaves out) in
  // launches(), for the join's time rule. Off by default.
  void set_keep_launches(bool keep) { keep_launches_ = keep; }
  const LaunchTable& launches() const { return launches_; }
  // Runtime/driver API calls to leave out, by name without the "_vNNNN"
  // suffix ("cudaGetDevice"). Replaces the previous filter.
  void set_api_filter(const std::vector<std::string>& names);

  // Appends an event for `record` to `events`, or its external correlation
  // (kStepCorrelationKind only) to `external` (correlation id, host step id).
  void Parse(const CUpti_Activity& record, EventBlocks* events,
             std::vector<std::pair<uint32_t, uint64_t>>* external);

  const ParseCounters& counters() const { return counters_; }
  // The limits of each device a DEVICE record described, by device id, in the
  // order met (what the serializer writes as the Device's stats).
  const std::vector<std::pair<int32_t, cudaOccDeviceProp>>& devices() const { return devices_; }
  // Device `id`'s limits from elsewhere (the driver: CUDA started before the tracer, so CUPTI
  // writes no DEVICE record); a DEVICE record replaces them.
  void AddDevice(int32_t id, const cudaOccDeviceProp& limits);
  // The stat names of a Device's limits (DeviceTraceWriter writes them).
  struct DeviceStatNames {
    int32_t sm_count, max_threads_per_sm, registers_per_sm, shared_memory_per_sm,
        compute_capability;
  };
  const DeviceStatNames& device_stat_names() const { return device_stat_; }

  // Every kind Parse turns into events (or joins), in the order the tracer
  // enables them; one parse function each (Kineto's handle*Activity).
  static const std::vector<ActivityKindInfo>& Kinds();
  // "CONCURRENT_KERNEL"..., "?" for a kind not in Kinds().
  static const char* KindName(CUpti_ActivityKind kind);
  // Whether `kind` is KindOption::kBestEffort.
  static bool BestEffort(CUpti_ActivityKind kind);

 private:
  // A parse function: fills `e` from `record` (of its kind); false when the
  // record makes no event (counted where it is dropped).
  using ParseFunction = bool (ActivityParser::*)(const CUpti_Activity& record, DeviceEventData& e);
  struct KindEntry {
    ActivityKindInfo info;
    ParseFunction parse;
  };
  static const std::vector<KindEntry>& Table();
  bool ParseDevice(const CUpti_Activity& record, DeviceEventData& e);
  bool ParseKernel(const CUpti_Activity& record, DeviceEventData& e);
  bool ParseMemcpy(const CUpti_Activity& record, DeviceEventData& e);
  bool ParsePeerMemcpy(const CUpti_Activity& record, DeviceEventData& e);
  template <typename Record>
  bool ParseCopy(const Record& r, DeviceEventData& e);
  bool ParseMemset(const CUpti_Activity& record, DeviceEventData& e);
  bool ParseApi(const CUpti_Activity& record, DeviceEventData& e);
  bool ParseSynchronization(const CUpti_Activity& record, DeviceEventData& e);
  bool ParseOverhead(const CUpti_Activity& record, DeviceEventData& e);
  bool ParseMarker(const CUpti_Activity& record, DeviceEventData& e);
  bool ParseMemory(const CUpti_Activity& record, DeviceEventData& e);
  bool ParseExternalCorrelation(const CUpti_Activity& record, DeviceEventData& e);

  // Fills start/end (with the offset), counting bad or reversed pairs.
  bool SetTimes(uint64_t start, uint64_t end, DeviceEventData* event);
  void Stat(DeviceEventData* event, int32_t name, int64_t value) {
    event->AddStat(name, EventStat::Type::kInt, value);
  }
  void Text(DeviceEventData* event, int32_t name, std::string_view text) {
    event->AddStat(name, EventStat::Type::kText, names_->Intern(text));
  }
  // "Memcpy HtoD"..., interned once per copy kind.
  int32_t CopyName(uint8_t copy_kind);
  // "128x1x1", interned once per distinct triple.
  int32_t Dim3Name(int32_t x, int32_t y, int32_t z);

  // A kernel's name as users read it (demangled once per distinct name with
  // abi::__cxa_demangle; unmangled names as they are) and, when that differs,
  // the mangled one (else 0). Cached by the pointer CUPTI hands out (shared by
  // every record of one kernel), checked against the text.
  struct KernelName {
    int32_t shown;
    int32_t mangled;
  };
  KernelName LookupKernel(const char* raw);

  // An API call's interned name and whether the filter drops it, per
  // (domain << 32 | cbid): one cuptiGetCallbackName per distinct call.
  struct ApiName {
    int32_t name;
    bool filtered;
  };
  const ApiName& LookupApi(CUpti_CallbackDomain domain, uint32_t cbid);
  ApiName NameApi(CUpti_CallbackDomain domain, uint32_t cbid);  // The slow path, once per call.
  // An NVTX range whose start record was seen, waiting for its end.
  struct OpenMarker {
    int64_t start_ns;
    int32_t name;
    int32_t domain;  // NameTable index; 0 when none.
    uint32_t thread;
  };

  // The parse function of each kind, by kind value (null: not shown).
  std::vector<ParseFunction> by_kind_;
  std::vector<std::pair<uint32_t, uint64_t>>* external_ = nullptr;  // During Parse.
  NameTable* const names_;
  const std::function<std::string(CUpti_CallbackDomain, uint32_t)> callback_name_;
  int64_t clock_offset_ns_ = 0;
  bool keep_launches_ = false;
  LaunchTable launches_;
  ParseCounters counters_;
  std::unordered_map<uint64_t, ApiName> api_names_;
  std::vector<ApiName> api_by_cbid_[2];  // Runtime, driver: by cbid (name -1: not yet).
  std::vector<std::string> api_filter_;
  std::unordered_map<uint32_t, OpenMarker> open_markers_;  // By marker id.
  std::unordered_map<const char*, KernelName> kernels_;    // By CUPTI's name pointer.
  std::unordered_map<std::string, KernelName> demangled_;  // By mangled text.
  std::unordered_map<uint64_t, int32_t> dim3_;             // By x, y, z (21 bits each).
  int32_t copy_names_[256] = {};                           // By copy kind; 0: not yet.
  int32_t memset_name_ = 0;
  std::vector<std::pair<int32_t, cudaOccDeviceProp>> devices_;  // See devices().
  DeviceStatNames device_stat_ = {};
  // Stat names, interned once.
  struct StatNames {
    int32_t grid, block, registers_per_thread, shared_memory_bytes, mangled_name_index, bytes,
        copy_kind, src_memory, dst_memory, src_device, dst_device, value, cbid, return_value,
        stream, domain, marker_id, operation, address, memory_kind, active_blocks_per_sm;
  } stat_;
};

// "HtoD", "DtoH", ... for CUpti_ActivityMemcpyKind.
const char* MemcpyKindName(uint8_t kind);

}  // namespace cupti
}  // namespace xdl_trace

#endif  // XDL_TRACE_PLUGINS_CUPTI_ACTIVITY_PARSER_H_
