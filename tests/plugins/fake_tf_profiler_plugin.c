/* A TensorFlow pluggable-profiler plugin in plain C, written from RFC 389: TF_InitProfiler end to
 * end. */
/*
 * Exports only TF_InitProfiler and leaves TensorFlow's TF_SetStatus undefined
 * (as a plugin linked against TensorFlow's C API does): the loader must
 * provide it (libxdl_trace_tf_c.so, loaded RTLD_GLOBAL).
 *
 * Each collect_data_xspace returns a hand-encoded XSpace of what "ran" since
 * the previous collect (or start), spread over that interval:
 *   plane "/device:GPU:0": stream 7 ("Stream #7") with 2 kernels
 *     "fake_tf_kernel" (stats correlation_id, kernel_details), stream 8 with
 *     one "MemcpyH2D" (memcpy_details "... size:4096 ...", correlation_id);
 *   plane "/host:CUPTI": line 42 with a "cuLaunchKernel" / "cuMemcpyHtoDAsync"
 *     API event per device event, with the same correlation_id.
 * The first call (buffer == NULL) snapshots and sizes the XSpace, the second
 * copies it and forgets it; a buffer too small is TF_INVALID_ARGUMENT.
 *
 * Variants (compile-time):
 *   XDL_FAKE_TF_OLDER      an older plugin: TF_ProfilerRegistrationParams.struct_size
 *                          ends at destroy_profiler (no destroy_profiler_fns).
 *   XDL_FAKE_TF_NEWER      a newer plugin: larger structs with trailing fields it
 *                          writes and reports in struct_size.
 *   XDL_FAKE_TF_INIT_FAILS TF_InitProfiler fails with TF_SetStatus(TF_FAILED_PRECONDITION).
 *   XDL_FAKE_TF_START_FAILS start fails with TF_SetStatus(TF_PERMISSION_DENIED).
 *   XDL_FAKE_TF_MALFORMED  collect returns bytes that are not an XSpace.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_proto_writer.h"
#include "xdl_trace/plugin/tf_pluggable_profiler.h"

#define EXPORT __attribute__((visibility("default")))

/* Field numbers of tensorflow.profiler's xplane.proto. */
enum {
  kSpacePlanes = 1,
  kPlaneId = 1,
  kPlaneName = 2,
  kPlaneLines = 3,
  kPlaneEventMetadata = 4,
  kPlaneStatMetadata = 5,
  kLineId = 1,
  kLineName = 2,
  kLineTimestampNs = 3,
  kLineEvents = 4,
  kLineDisplayName = 11,
  kEventMetadataId = 1,
  kEventOffsetPs = 2,
  kEventDurationPs = 3,
  kEventStats = 4,
  kStatMetadataId = 1,
  kStatUint64 = 3,
  kStatStr = 5,
  kMetaId = 1,
  kMetaName = 2,
  kMapKey = 1,
  kMapValue = 2,
};

/* Event and stat metadata ids. */
enum { kKernel = 1, kMemcpy = 2, kLaunch = 3, kCopyCall = 4 };
enum { kCorrelationId = 1, kKernelDetails = 2, kMemcpyDetails = 3 };

typedef struct FakeState {
  int running;
  int64_t since_ns; /* Start of the interval the next collect covers. */
  uint64_t next_correlation;
  Buf snapshot;
  int has_snapshot;
} FakeState;

static FakeState g_state; /* One profiler per plugin, as in TensorFlow. */

static int64_t NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A map<int64, XEventMetadata|XStatMetadata> entry: {key, {id, name}}. */
static void PutMetadata(Buf* plane, uint32_t field, int64_t id, const char* name) {
  Buf meta = {0}, entry = {0};
  PutInt(&meta, kMetaId, (uint64_t)id);
  PutString(&meta, kMetaName, name);
  PutInt(&entry, kMapKey, (uint64_t)id);
  PutMessage(&entry, kMapValue, &meta);
  PutMessage(plane, field, &entry);
  free(meta.p);
  free(entry.p);
}

/* An XEvent at offset_ps with a correlation_id stat and an optional string stat. */
static void PutEvent(Buf* line, int64_t metadata_id, int64_t offset_ps, int64_t duration_ps,
                     uint64_t correlation, int64_t str_stat, const char* str_value) {
  Buf event = {0}, stat = {0};
  PutInt(&event, kEventMetadataId, (uint64_t)metadata_id);
  PutInt(&event, kEventOffsetPs, (uint64_t)offset_ps);
  PutInt(&event, kEventDurationPs, (uint64_t)duration_ps);
  PutInt(&stat, kStatMetadataId, kCorrelationId);
  PutInt(&stat, kStatUint64, correlation);
  PutMessage(&event, kEventStats, &stat);
  if (str_value != NULL) {
    PutInt(&stat, kStatMetadataId, (uint64_t)str_stat);
    PutString(&stat, kStatStr, str_value);
    PutMessage(&event, kEventStats, &stat);
  }
  PutMessage(line, kLineEvents, &event);
  free(event.p);
  free(stat.p);
}

/* The XSpace of [since_ns, now): three launches on the host, their work on the GPU. */
static void EncodeSpace(FakeState* s, int64_t now_ns, Buf* out) {
  Buf plane = {0}, stream7 = {0}, stream8 = {0}, host = {0};
  const int64_t begin = s->since_ns;
  const int64_t slot_ps = (now_ns - begin) * 1000 / 4; /* Four slots in the interval. */
  out->n = 0;
  PutInt(&stream7, kLineId, 7);
  PutString(&stream7, kLineName, "Stream #7");
  PutInt(&stream7, kLineTimestampNs, (uint64_t)begin);
  PutInt(&stream8, kLineId, 8);
  PutString(&stream8, kLineName, "Stream #8");
  PutString(&stream8, kLineDisplayName, "Stream #8(MemcpyH2D)");
  PutInt(&stream8, kLineTimestampNs, (uint64_t)begin);
  PutInt(&host, kLineId, 42);
  PutString(&host, kLineName, "CUPTI API thread 42");
  PutInt(&host, kLineTimestampNs, (uint64_t)begin);
  for (int i = 0; i < 3; ++i) {
    const uint64_t correlation = s->next_correlation++;
    const int64_t launch_ps = slot_ps * i + 1000;
    const int64_t work_ps = launch_ps + slot_ps / 2;
    const int is_copy = i == 2;
    PutEvent(&host, is_copy ? kCopyCall : kLaunch, launch_ps, slot_ps / 8, correlation, 0, NULL);
    if (is_copy) {
      PutEvent(&stream8, kMemcpy, work_ps, slot_ps / 4, correlation, kMemcpyDetails,
               "kind_src:pageable kind_dst:device size:4096 dest:0 async:1");
    } else {
      PutEvent(&stream7, kKernel, work_ps, slot_ps / 4, correlation, kKernelDetails,
               "regs:32 static_shared:1024 dynamic_shared:256 grid:4,2,1 block:128,1,1");
    }
  }
  /* The GPU plane. */
  PutInt(&plane, kPlaneId, 1);
  PutString(&plane, kPlaneName, "/device:GPU:0");
  PutMessage(&plane, kPlaneLines, &stream7);
  PutMessage(&plane, kPlaneLines, &stream8);
  PutMetadata(&plane, kPlaneEventMetadata, kKernel, "fake_tf_kernel");
  PutMetadata(&plane, kPlaneEventMetadata, kMemcpy, "MemcpyH2D");
  PutMetadata(&plane, kPlaneStatMetadata, kCorrelationId, "correlation_id");
  PutMetadata(&plane, kPlaneStatMetadata, kKernelDetails, "kernel_details");
  PutMetadata(&plane, kPlaneStatMetadata, kMemcpyDetails, "memcpy_details");
  PutMessage(out, kSpacePlanes, &plane);
  /* The host plane with the API calls. */
  PutInt(&plane, kPlaneId, 2);
  PutString(&plane, kPlaneName, "/host:CUPTI");
  PutMessage(&plane, kPlaneLines, &host);
  PutMetadata(&plane, kPlaneEventMetadata, kLaunch, "cuLaunchKernel");
  PutMetadata(&plane, kPlaneEventMetadata, kCopyCall, "cuMemcpyHtoDAsync");
  PutMetadata(&plane, kPlaneStatMetadata, kCorrelationId, "correlation_id");
  PutMessage(out, kSpacePlanes, &plane);
  free(plane.p);
  free(stream7.p);
  free(stream8.p);
  free(host.p);
}

/* ---- TP_ProfilerFns ---- */
static void FakeStart(const TP_Profiler* profiler, TF_Status* status) {
  (void)profiler;
  (void)status;
#ifdef XDL_FAKE_TF_START_FAILS
  TF_SetStatus(status, TF_PERMISSION_DENIED, "fake_tf: no profiling rights (start fails)");
  return;
#endif
  if (g_state.running) return;
  g_state.running = 1;
  g_state.since_ns = NowNs();
}

static void FakeStop(const TP_Profiler* profiler, TF_Status* status) {
  (void)profiler;
  (void)status;
  g_state.running = 0;
}

static void FakeCollect(const TP_Profiler* profiler, uint8_t* buffer, size_t* size_in_bytes,
                        TF_Status* status) {
  (void)profiler;
  FakeState* s = &g_state;
  if (buffer == NULL) {
    s->snapshot.n = 0;
    const int64_t now = NowNs();
    if (s->since_ns != 0 && now > s->since_ns) {
#ifdef XDL_FAKE_TF_MALFORMED
      static const uint8_t kGarbage[] = {0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02};
      if (Reserve(&s->snapshot, sizeof(kGarbage))) {
        memcpy(s->snapshot.p, kGarbage, sizeof(kGarbage));
        s->snapshot.n = sizeof(kGarbage);
      }
#else
      EncodeSpace(s, now, &s->snapshot);
#endif
      s->since_ns = s->running ? now : 0;
    }
    s->has_snapshot = 1;
    *size_in_bytes = s->snapshot.n;
    return;
  }
  if (!s->has_snapshot) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION, "fake_tf: collect with a buffer before its size");
    return;
  }
  if (*size_in_bytes < s->snapshot.n) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "fake_tf: collect buffer too small");
    return;
  }
  memcpy(buffer, s->snapshot.p, s->snapshot.n);
  *size_in_bytes = s->snapshot.n;
  s->snapshot.n = 0;
  s->has_snapshot = 0;
}

/* ---- registration ---- */
static int g_destroyed_profiler, g_destroyed_fns;

static void FakeDestroyProfiler(TP_Profiler* profiler) {
  (void)profiler;
  ++g_destroyed_profiler;
  free(g_state.snapshot.p);
  memset(&g_state, 0, sizeof(g_state));
}

static void FakeDestroyProfilerFns(TP_ProfilerFns* fns) {
  (void)fns;
  ++g_destroyed_fns;
}

/* How often the destroy functions ran (for the loader tests). */
EXPORT int XdlFakeTfDestroyCount(int which) {
  return which == 0 ? g_destroyed_profiler : g_destroyed_fns;
}

#ifdef XDL_FAKE_TF_NEWER
/* The structs as a future header might declare them: trailing fields appended. */
typedef struct NewerProfilerFns {
  TP_ProfilerFns base;
  void (*step_marker)(const TP_Profiler* profiler, uint64_t step, TF_Status* status);
  uint64_t flags;
} NewerProfilerFns;
typedef struct NewerParams {
  TF_ProfilerRegistrationParams base;
  void* future_extension;
  int64_t future_version;
} NewerParams;
static void FakeStepMarker(const TP_Profiler* profiler, uint64_t step, TF_Status* status) {
  (void)profiler;
  (void)step;
  (void)status;
}
#endif

EXPORT void TF_InitProfiler(TF_ProfilerRegistrationParams* params, TF_Status* status) {
#ifdef XDL_FAKE_TF_INIT_FAILS
  (void)params;
  TF_SetStatus(status, TF_FAILED_PRECONDITION, "fake_tf: no fake device present (init fails)");
  return;
#else
  (void)status;
  if (params->major_version != TP_MAJOR) {
    TF_SetStatus(status, TF_FAILED_PRECONDITION, "fake_tf: unsupported profiler C API version");
    return;
  }
  memset(&g_state, 0, sizeof(g_state));
  g_state.next_correlation = 1;
  params->struct_size = TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->profiler->struct_size = TP_PROFILER_STRUCT_SIZE;
  params->profiler_fns->struct_size = TP_PROFILER_FNS_STRUCT_SIZE;
  params->profiler->type = "fake_tf";
  params->profiler_fns->start = FakeStart;
  params->profiler_fns->stop = FakeStop;
  params->profiler_fns->collect_data_xspace = FakeCollect;
  params->destroy_profiler = FakeDestroyProfiler;
  params->destroy_profiler_fns = FakeDestroyProfilerFns;
#ifdef XDL_FAKE_TF_OLDER
  /* Built against a header whose params ended at destroy_profiler. */
  params->destroy_profiler_fns = NULL;
  params->struct_size = TF_OFFSET_OF_END(TF_ProfilerRegistrationParams, destroy_profiler);
#endif
#ifdef XDL_FAKE_TF_NEWER
  /* Writes its trailing fields whatever the core's struct_size said (a careless
   * newer plugin) and reports its larger sizes. */
  NewerProfilerFns* fns = (NewerProfilerFns*)params->profiler_fns;
  fns->step_marker = FakeStepMarker;
  fns->flags = ~(uint64_t)0;
  fns->base.struct_size = TF_OFFSET_OF_END(NewerProfilerFns, flags);
  NewerParams* newer = (NewerParams*)params;
  newer->future_extension = (void*)params;
  newer->future_version = 7;
  newer->base.struct_size = TF_OFFSET_OF_END(NewerParams, future_version);
  params->profiler->struct_size = TP_PROFILER_STRUCT_SIZE + 16;
#endif
#endif
}
