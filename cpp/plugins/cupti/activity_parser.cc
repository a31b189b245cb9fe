// Turns CUPTI activity records (struct versions of the installed headers) into device events.
#include "activity_parser.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace xdl_trace {
namespace cupti {

// The struct versions this file reads (CUDA 13's cupti_activity.h).
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using PeerMemcpyRecord = CUpti_ActivityMemcpyPtoP4;
using MemsetRecord = CUpti_ActivityMemset4;
using ApiRecord = CUpti_ActivityAPI;
using SyncRecord = CUpti_ActivitySynchronization2;
using OverheadRecord = CUpti_ActivityOverhead3;
using ExternalRecord = CUpti_ActivityExternalCorrelation;
using MarkerRecord = CUpti_ActivityMarker2;
using MemoryRecord = CUpti_ActivityMemory4;
using DeviceRecord = CUpti_ActivityDevice5;

// NVTX ranges open at once (per process); past it the oldest is forgotten.
constexpr size_t kMaxOpenMarkers = 1u << 16;

const std::vector<std::string>& DefaultApiFilter() {
  static const std::vector<std::string> names = {
      "cudaGetDevice",
      "cudaSetDevice",
      "cudaGetDeviceCount",
      "cudaGetLastError",
      "cudaPeekAtLastError",
      "cudaDeviceGetAttribute",
      "cudaGetDeviceProperties",
      "cudaStreamIsCapturing",
      "cudaStreamGetCaptureInfo",
      "cudaPointerGetAttributes",
      "cudaFuncGetAttributes",
      "cudaEventQuery",
  };
  return names;
}

const char* MemcpyKindName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
      return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    default:
      return "unknown";
  }
}

namespace {

const char* SyncTypeName(CUpti_ActivitySynchronizationType type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "cudaDeviceSynchronize";
    default:
      return "synchronization";
  }
}

// "pageable", "pinned", "device", ... for CUpti_ActivityMemoryKind.
const char* MemoryKindName(uint32_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE:
      return "pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED:
      return "pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
      return "device";
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
      return "array";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
      return "managed";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
      return "device_static";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC:
      return "managed_static";
    default:
      return "unknown";
  }
}

// "cudaGetDevice_v3020" -> "cudaGetDevice".
std::string WithoutVersion(const std::string& name) {
  const size_t v = name.rfind("_v");
  if (v == std::string::npos || v + 2 >= name.size()) return name;
  for (size_t i = v + 2; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return name;
  }
  return name.substr(0, v);
}

std::string Dim3(int32_t x, int32_t y, int32_t z) {
  return std::to_string(x) + "x" + std::to_string(y) + "x" + std::to_string(z);
}

// Where a kernel, copy or memset ran: its device and stream, and the API call that launched it.
template <typename Record>
void SetStream(const Record& r, DeviceEventData* event) {
  event->device = static_cast<int32_t>(r.deviceId);
  event->line = r.streamId;
  event->correlation_id = r.correlationId;
}

}  // namespace

ActivityParser::ActivityParser(
    NameTable* names, std::function<std::string(CUpti_CallbackDomain, uint32_t)> callback_name)
    : names_(names), callback_name_(std::move(callback_name)) {
  NameTable& n = *names_;
  stat_ = {n.Intern("grid"),
           n.Intern("block"),
           n.Intern("registers_per_thread"),
           n.Intern("shared_memory_bytes"),
           n.Intern("mangled_name_index"),
           n.Intern("bytes"),
           n.Intern("copy_kind"),
           n.Intern("src_memory"),
           n.Intern("dst_memory"),
           n.Intern("src_device"),
           n.Intern("dst_device"),
           n.Intern("value"),
           n.Intern("cbid"),
           n.Intern("return_value"),
           n.Intern("stream"),
           n.Intern("domain"),
           n.Intern("marker_id"),
           n.Intern("operation"),
           n.Intern("address"),
           n.Intern("memory_kind"),
           n.Intern("active_blocks_per_sm")};
  device_stat_ = {n.Intern("sm_count"), n.Intern("max_threads_per_sm"),
                  n.Intern("registers_per_sm"), n.Intern("shared_memory_per_sm"),
                  n.Intern("compute_capability")};
  memset_name_ = n.Intern("Memset");
  for (const KindEntry& entry : Table()) {
    const size_t kind = static_cast<size_t>(entry.info.kind);
    if (kind >= by_kind_.size()) by_kind_.resize(kind + 1, nullptr);
    by_kind_[kind] = entry.parse;
  }
}

int32_t ActivityParser::Dim3Name(int32_t x, int32_t y, int32_t z) {
  constexpr uint64_t kMask = (1u << 21) - 1;
  const bool packable = x >= 0 && y >= 0 && z >= 0 && static_cast<uint64_t>(x) <= kMask &&
                        static_cast<uint64_t>(y) <= kMask && static_cast<uint64_t>(z) <= kMask;
  const uint64_t key = (static_cast<uint64_t>(x) << 42) | (static_cast<uint64_t>(y) << 21) |
                       static_cast<uint64_t>(z);
  if (packable) {
    if (auto it = dim3_.find(key); it != dim3_.end()) return it->second;
  }
  const int32_t index = names_->Intern(Dim3(x, y, z));
  if (packable) dim3_.emplace(key, index);
  return index;
}

ActivityParser::KernelName ActivityParser::LookupKernel(const char* raw) {
  if (raw == nullptr) return {names_->Intern("<unnamed kernel>"), 0};
  if (auto it = kernels_.find(raw); it != kernels_.end()) {
    const int32_t mangled = it->second.mangled != 0 ? it->second.mangled : it->second.shown;
    if (std::strcmp(names_->name(mangled).c_str(), raw) == 0) return it->second;
  }
  // A name not seen at this address: demangled once per distinct text.
  KernelName out;
  auto known = demangled_.find(raw);
  if (known != demangled_.end()) {
    out = known->second;
  } else {
    int status = -1;
    char* demangled = abi::__cxa_demangle(raw, nullptr, nullptr, &status);
    if (status == 0 && demangled != nullptr && std::strcmp(demangled, raw) != 0) {
      out = {names_->Intern(demangled), names_->Intern(raw)};
    } else {
      out = {names_->Intern(raw), 0};  // Not mangled (sm90_xmma_...): as it is.
    }
    std::free(demangled);
    demangled_.emplace(raw, out);
  }
  kernels_[raw] = out;
  return out;
}

void ActivityParser::set_api_filter(const std::vector<std::string>& names) {
  api_filter_ = names;
  api_names_.clear();
  for (auto& by_cbid : api_by_cbid_) by_cbid.clear();
}

const ActivityParser::ApiName& ActivityParser::LookupApi(CUpti_CallbackDomain domain,
                                                         uint32_t cbid) {
  // Runtime and driver ids are small: a vector each, no hashing per record.
  const int d = domain == CUPTI_CB_DOMAIN_RUNTIME_API  ? 0
                : domain == CUPTI_CB_DOMAIN_DRIVER_API ? 1
                                                       : -1;
  constexpr uint32_t kMaxIndexedCbid = 1u << 14;
  if (d >= 0 && cbid < api_by_cbid_[d].size() && api_by_cbid_[d][cbid].name >= 0) {
    return api_by_cbid_[d][cbid];
  }
  const uint64_t key = (static_cast<uint64_t>(domain) << 32) | cbid;
  auto it = api_names_.find(key);
  if (it == api_names_.end()) it = api_names_.emplace(key, NameApi(domain, cbid)).first;
  if (d < 0 || cbid >= kMaxIndexedCbid) return it->second;
  std::vector<ApiName>& by_cbid = api_by_cbid_[d];
  if (by_cbid.size() <= cbid) by_cbid.resize(cbid + 1, ApiName{-1, false});
  by_cbid[cbid] = it->second;
  return by_cbid[cbid];
}

ActivityParser::ApiName ActivityParser::NameApi(CUpti_CallbackDomain domain, uint32_t cbid) {
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  std::string name = callback_name_ ? callback_name_(domain, cbid) : std::string();
  if (name.empty()) {
    name = std::string(runtime ? "runtime" : "driver") + " API " + std::to_string(cbid);
  }
  const std::string bare = WithoutVersion(name);
  bool filtered = false;
  for (const std::string& f : api_filter_) filtered = filtered || f == bare;
  return ApiName{names_->Intern(name), filtered};
}

bool ActivityParser::SetTimes(uint64_t start, uint64_t end, DeviceEventData* event) {
  if (start == 0 || end == 0) {
    ++counters_.bad_timestamps;
    return false;
  }
  if (end < start) {
    ++counters_.reversed;
    end = start;
  }
  event->start_ns = static_cast<int64_t>(start) + clock_offset_ns_;
  event->end_ns = static_cast<int64_t>(end) + clock_offset_ns_;
  return true;
}

const std::vector<ActivityParser::KindEntry>& ActivityParser::Table() {
  using P = ActivityParser;
  static const std::vector<KindEntry> table = {
      // First: a device's limits are known before its kernels come.
      {{CUPTI_ACTIVITY_KIND_DEVICE, "DEVICE", KindOption::kBestEffort}, &P::ParseDevice},
      {{CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, "EXTERNAL_CORRELATION", KindOption::kAlways},
       &P::ParseExternalCorrelation},
      {{CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME", KindOption::kAlways}, &P::ParseApi},
      {{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL", KindOption::kAlways},
       &P::ParseKernel},
      {{CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY", KindOption::kAlways}, &P::ParseMemcpy},
      {{CUPTI_ACTIVITY_KIND_MEMCPY2, "MEMCPY2", KindOption::kAlways}, &P::ParsePeerMemcpy},
      {{CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET", KindOption::kAlways}, &P::ParseMemset},
      {{CUPTI_ACTIVITY_KIND_MARKER, "MARKER", KindOption::kNvtx}, &P::ParseMarker},
      {{CUPTI_ACTIVITY_KIND_MEMORY2, "MEMORY2", KindOption::kMemory}, &P::ParseMemory},
      {{CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER", KindOption::kDriver}, &P::ParseApi},
      {{CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, "SYNCHRONIZATION", KindOption::kSynchronization},
       &P::ParseSynchronization},
      {{CUPTI_ACTIVITY_KIND_OVERHEAD, "OVERHEAD", KindOption::kOverhead}, &P::ParseOverhead},
      {{CUPTI_ACTIVITY_KIND_KERNEL, "KERNEL", KindOption::kParsedOnly}, &P::ParseKernel},
  };
  return table;
}

const std::vector<ActivityKindInfo>& ActivityParser::Kinds() {
  static const std::vector<ActivityKindInfo> kinds = [] {
    std::vector<ActivityKindInfo> out;
    for (const KindEntry& entry : Table()) out.push_back(entry.info);
    return out;
  }();
  return kinds;
}

bool ActivityParser::BestEffort(CUpti_ActivityKind kind) {
  for (const KindEntry& entry : Table()) {
    if (entry.info.kind == kind) return entry.info.option == KindOption::kBestEffort;
  }
  return false;
}

const char* ActivityParser::KindName(CUpti_ActivityKind kind) {
  for (const KindEntry& entry : Table()) {
    if (entry.info.kind == kind) return entry.info.name;
  }
  return "?";
}

void ActivityParser::Parse(const CUpti_Activity& record, EventBlocks* events,
                           std::vector<std::pair<uint32_t, uint64_t>>* external) {
  ++counters_.records;
  const size_t kind = static_cast<size_t>(record.kind);
  const ParseFunction parse = kind < by_kind_.size() ? by_kind_[kind] : nullptr;
  if (parse == nullptr) {
    ++counters_.skipped_kinds;
    return;
  }
  external_ = external;
  // Built in place; taken back when the record makes no event.
  DeviceEventData& e = events->emplace_back();
  if (!(this->*parse)(record, e)) {
    events->pop_back();
    return;
  }
  ++counters_.events;
}

void ActivityParser::AddDevice(int32_t id, const cudaOccDeviceProp& limits) {
  auto known = std::find_if(devices_.begin(), devices_.end(),
                            [id](const auto& device) { return device.first == id; });
  if (known != devices_.end()) {
    known->second = limits;
  } else {
    devices_.emplace_back(id, limits);
  }
}

bool ActivityParser::ParseDevice(const CUpti_Activity& record, DeviceEventData&) {
  const auto& r = reinterpret_cast<const DeviceRecord&>(record);
  AddDevice(static_cast<int32_t>(r.id), DeviceLimits(r));
  return false;  // A device, not an event.
}

bool ActivityParser::ParseKernel(const CUpti_Activity& record, DeviceEventData& e) {
  const auto& r = reinterpret_cast<const KernelRecord&>(record);
  if (!SetTimes(r.start, r.end, &e)) return false;
  e.kind = EventKind::kKernel;
  const KernelName name = LookupKernel(r.name);
  e.name = name.shown;
  SetStream(r, &e);
  e.AddStat(stat_.grid, EventStat::Type::kText, Dim3Name(r.gridX, r.gridY, r.gridZ));
  e.AddStat(stat_.block, EventStat::Type::kText, Dim3Name(r.blockX, r.blockY, r.blockZ));
  Stat(&e, stat_.registers_per_thread, r.registersPerThread);
  Stat(&e, stat_.shared_memory_bytes,
       static_cast<int64_t>(r.staticSharedMemory) + r.dynamicSharedMemory);
  for (const auto& [id, limits] : devices_) {
    if (id != e.device) continue;
    const int64_t threads = int64_t{r.blockX} * r.blockY * r.blockZ;
    Stat(&e, stat_.active_blocks_per_sm,
         ActiveBlocksPerSm(limits, threads, r.registersPerThread,
                           static_cast<size_t>(r.staticSharedMemory),
                           static_cast<size_t>(r.dynamicSharedMemory)));
  }
  // The mangled name, when it differs: an index into the trace's name table.
  if (name.mangled != 0) {
    e.AddStat(stat_.mangled_name_index, EventStat::Type::kNameIndex, name.mangled);
  }
  return true;
}

// Both memcpy record versions.
template <typename Record>
bool ActivityParser::ParseCopy(const Record& r, DeviceEventData& e) {
  if (!SetTimes(r.start, r.end, &e)) return false;
  e.kind = EventKind::kMemcpy;
  e.name = CopyName(r.copyKind);
  SetStream(r, &e);
  Stat(&e, stat_.bytes, static_cast<int64_t>(r.bytes));
  Text(&e, stat_.copy_kind, MemcpyKindName(r.copyKind));
  Text(&e, stat_.src_memory, MemoryKindName(r.srcKind));
  Text(&e, stat_.dst_memory, MemoryKindName(r.dstKind));
  return true;
}

bool ActivityParser::ParseMemcpy(const CUpti_Activity& record, DeviceEventData& e) {
  return ParseCopy(reinterpret_cast<const MemcpyRecord&>(record), e);
}

bool ActivityParser::ParsePeerMemcpy(const CUpti_Activity& record, DeviceEventData& e) {
  const auto& r = reinterpret_cast<const PeerMemcpyRecord&>(record);
  if (!ParseCopy(r, e)) return false;
  Stat(&e, stat_.src_device, r.srcDeviceId);
  Stat(&e, stat_.dst_device, r.dstDeviceId);
  return true;
}

bool ActivityParser::ParseMemset(const CUpti_Activity& record, DeviceEventData& e) {
  const auto& r = reinterpret_cast<const MemsetRecord&>(record);
  if (!SetTimes(r.start, r.end, &e)) return false;
  e.kind = EventKind::kMemset;
  e.name = memset_name_;
  SetStream(r, &e);
  Stat(&e, stat_.bytes, static_cast<int64_t>(r.bytes));
  Stat(&e, stat_.value, r.value);
  return true;
}

// RUNTIME and DRIVER records.
bool ActivityParser::ParseApi(const CUpti_Activity& record, DeviceEventData& e) {
  const auto& r = reinterpret_cast<const ApiRecord&>(record);
  const bool runtime = record.kind == CUPTI_ACTIVITY_KIND_RUNTIME;
  // Before the filter: a filtered call may still have launched device work.
  if (keep_launches_ && r.start != 0) {
    launches_.Put({r.correlationId, r.threadId, static_cast<int64_t>(r.start) + clock_offset_ns_});
  }
  const ApiName& api =
      LookupApi(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, r.cbid);
  if (api.filtered) {
    ++counters_.filtered_api;
    return false;
  }
  if (!SetTimes(r.start, r.end, &e)) return false;
  e.kind = runtime ? EventKind::kRuntimeApi : EventKind::kDriverApi;
  e.name = api.name;
  e.device = kHostApiDevice;
  e.line = r.threadId;
  e.correlation_id = r.correlationId;
  Stat(&e, stat_.cbid, r.cbid);
  if (r.returnValue != 0) Stat(&e, stat_.return_value, r.returnValue);
  return true;
}

bool ActivityParser::ParseSynchronization(const CUpti_Activity& record, DeviceEventData& e) {
  const auto& r = reinterpret_cast<const SyncRecord&>(record);
  if (!SetTimes(r.start, r.end, &e)) return false;
  e.kind = EventKind::kSynchronization;
  e.name = names_->Intern(SyncTypeName(r.type));
  e.device = kHostApiDevice;
  e.line = kSynchronizationLine;
  e.correlation_id = r.correlationId;
  Stat(&e, stat_.stream, r.streamId);
  return true;
}

bool ActivityParser::ParseOverhead(const CUpti_Activity& record, DeviceEventData& e) {
  const auto& r = reinterpret_cast<const OverheadRecord&>(record);
  if (!SetTimes(r.start, r.end, &e)) return false;
  e.kind = EventKind::kOverhead;
  e.name = names_->Intern("CUPTI overhead " + std::to_string(r.overheadKind));
  e.device = kHostApiDevice;
  e.line = kOverheadLine;
  e.correlation_id = r.correlationId;
  return true;
}

// NVTX: a range is a START record and an END record with the same id (the
// name only on the start); an instant is one record.
bool ActivityParser::ParseMarker(const CUpti_Activity& record, DeviceEventData& e) {
  const auto& r = reinterpret_cast<const MarkerRecord&>(record);
  const int64_t at = static_cast<int64_t>(r.timestamp) + clock_offset_ns_;
  const uint32_t thread =
      r.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD || r.objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS
          ? r.objectId.pt.threadId
          : 0;
  if (r.timestamp == 0) {
    ++counters_.bad_timestamps;
    return false;
  }
  if (r.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
    if (open_markers_.size() >= kMaxOpenMarkers) {
      ++counters_.unmatched_markers;
      open_markers_.erase(open_markers_.begin());
    }
    open_markers_[r.id] = {at, names_->Intern(r.name != nullptr ? r.name : "<nvtx range>"),
                           r.domain != nullptr ? names_->Intern(r.domain) : 0, thread};
    return false;
  }
  OpenMarker m{at, names_->Intern(r.name != nullptr ? r.name : "<nvtx mark>"),
               r.domain != nullptr ? names_->Intern(r.domain) : 0, thread};
  if (r.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
    auto it = open_markers_.find(r.id);
    if (it == open_markers_.end()) {
      ++counters_.unmatched_markers;
      return false;
    }
    m = it->second;
    open_markers_.erase(it);
  } else if (!(r.flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS)) {
    ++counters_.skipped_kinds;  // Synchronization markers: not shown.
    return false;
  }
  e.kind = EventKind::kMarker;
  e.name = m.name;
  e.start_ns = m.start_ns;
  e.end_ns = std::max(m.start_ns, at);
  e.device = kHostApiDevice;
  e.line = m.thread;
  if (m.domain != 0) e.AddStat(stat_.domain, EventStat::Type::kText, m.domain);
  Stat(&e, stat_.marker_id, static_cast<int64_t>(r.id));
  return true;
}

bool ActivityParser::ParseMemory(const CUpti_Activity& record, DeviceEventData& e) {
  const auto& r = reinterpret_cast<const MemoryRecord&>(record);
  if (r.timestamp == 0) {
    ++counters_.bad_timestamps;
    return false;
  }
  const bool alloc = r.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  if (!alloc && r.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
    ++counters_.skipped_kinds;
    return false;
  }
  e.kind = EventKind::kMemory;
  e.name = names_->Intern(std::string(alloc ? "alloc " : "free ") + MemoryKindName(r.memoryKind));
  e.start_ns = e.end_ns = static_cast<int64_t>(r.timestamp) + clock_offset_ns_;
  e.device = static_cast<int32_t>(r.deviceId);
  e.line = kMemoryLine;
  e.correlation_id = r.correlationId;
  Text(&e, stat_.operation, alloc ? "alloc" : "free");
  Stat(&e, stat_.bytes, static_cast<int64_t>(r.bytes));
  Stat(&e, stat_.address, static_cast<int64_t>(r.address));
  Text(&e, stat_.memory_kind, MemoryKindName(r.memoryKind));
  Stat(&e, stat_.stream, r.streamId);
  return true;
}

// Joins events to steps; makes no event itself.
bool ActivityParser::ParseExternalCorrelation(const CUpti_Activity& record, DeviceEventData&) {
  const auto& r = reinterpret_cast<const ExternalRecord&>(record);
  if (r.externalKind == kStepCorrelationKind)
    external_->emplace_back(r.correlationId, r.externalId);
  return false;
}

int32_t ActivityParser::CopyName(uint8_t copy_kind) {
  int32_t& name = copy_names_[copy_kind];
  if (name == 0) name = names_->Intern(std::string("Memcpy ") + MemcpyKindName(copy_kind));
  return name;
}

}  // namespace cupti
}  // namespace xdl_trace
