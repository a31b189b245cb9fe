/* A device-profiler plugin in plain C emitting synthetic events: the ABI end to end. */
/*
 * Behaviour (config "key=value;..." in XdlTraceProfilerOptions::config):
 *   unavailable=1     no device: start/stop are no-ops, collect returns an
 *                     empty trace whose status says "unavailable: ...".
 *   fail_start=1      start fails (after "enabling" something it rolls back).
 *   events_per_step=N kernels emitted per host step (default 2), plus one memcpy.
 *   max_events=N      events held between collects (default max_buffer_bytes / 40).
 *   lost_buffers=N    reports N activity buffers lost whole per non-empty collect
 *                     (DeviceTrace.dropped_buffers), as CUPTI refusing buffers would.
 *   nvtx=1            also an NVTX range "fake_range" (DEVICE_EVENT_MARKER) per step
 *                     on the API line, spanning the step's launches.
 *   memory=1          also a 1 MiB allocation at the start of each step and its free
 *                     at the end (DEVICE_EVENT_MEMORY on device 0's "memory" line, -4),
 *                     stats "operation" ("alloc"/"free") and "bytes".
 *   announce_bytes=N  collect(NULL) announces N bytes whatever it holds (a plugin whose
 *                     size is not to be trusted, issue 24 #8).
 *   hang_stop=1       stop never returns (a driver call that hangs, issue 36).
 *   hang_collect=N    every collect after the first N never returns (a hung driver
 *                     call on the collector thread); with XDL_FAKE_ABI_1_0 (the plugin
 *                     reports ABI 1.0, whose calls the core serializes) the step hooks
 *                     would wait for it.
 *   hostile=1         what a careless plugin sends and the writer accepts (issue 24 #5):
 *                     the kernel's name is not UTF-8 ("fake_\xff\xfe_kernel") and every
 *                     "bytes" stat is a string ("4096", "1 MiB") instead of a number.
 * Each step_begin/step_end pair produces, on device 0, N kernels on stream 7
 * and a memcpy on stream 8, spread over the step's host interval and tagged
 * with the step's external id, and a "launch" API event on the host line.
 * Events are held up to max_buffer_bytes (40 bytes accounted per event);
 * beyond that they are dropped and counted.
 *
 * Threads (ABI 1.1): collect runs on the core's collector thread while the
 * training thread calls step_begin/step_end; `mu` guards the events, the drop
 * count and the snapshot, which collect(NULL) takes whole (the events leave
 * the list then, so none emitted between the two collect calls is lost).
 *
 * The same file, compiled with one of XDL_FAKE_BAD_MAJOR, XDL_FAKE_BAD_SIZE,
 * XDL_FAKE_NULL_COLLECT, XDL_FAKE_INIT_FAILS or XDL_FAKE_NO_SYMBOL, is a
 * deliberately broken plugin for the loader's validation tests.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_proto_writer.h"
#include "xdl_trace/plugin/profiler_plugin.h"

enum { kEventBytes = 40 };

enum { kMemoryLine = -4, kAllocBytes = 1 << 20 };

typedef struct FakeEvent {
  int32_t name_index; /* 1 kernel, 2 memcpy, 3 launch, 5 range, 6 alloc, 7 free */
  int32_t kind;       /* DeviceEventKind */
  int64_t start_ns, end_ns;
  uint64_t correlation_id, external_id;
  int64_t line; /* stream id, or -1 for the API line */
} FakeEvent;

struct XdlTraceProfiler {
  pthread_mutex_t mu; /* Guards events, n_events, dropped, snapshot, has_snapshot. */
  int hang_stop;
  int hang_collect; /* -1: never; else collects before collect hangs. */
  int collects;     /* Collects begun (size queries). */
  int unavailable, fail_start, events_per_step, running, nvtx, memory, lost_buffers, hostile;
  uint64_t announce_bytes; /* 0: the snapshot's own size. */
  uint64_t max_events;
  FakeEvent* events;
  size_t n_events;
  int64_t dropped;
  uint64_t step_id;
  int64_t step_begin_ns;
  uint64_t next_correlation;
  Buf snapshot; /* Serialized trace between the two collect calls. */
  int has_snapshot;
};

static const char* const kNames[] = {"",           "fake_kernel", "fake_memcpy",
                                     "fakeLaunch", "bytes",       "fake_range",
                                     "fake_alloc", "fake_free",   "operation"};

static int64_t NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void SetError(XdlTracePluginError* error, const char* message) {
  if (error == NULL || error->message == NULL || error->capacity == 0) return;
  snprintf(error->message, error->capacity, "%s", message);
}

/* DeviceLine with the events on `line`. */
static void EncodeLine(const XdlTraceProfiler* p, int64_t line, Buf* out) {
  Buf event = {0}, stat = {0};
  char name[32];
  PutIntOmitZero(out, 1, (uint64_t)line);
  if (line == kMemoryLine) {
    snprintf(name, sizeof(name), "memory");
  } else {
    snprintf(name, sizeof(name), line < 0 ? "fake API" : "stream %lld", (long long)line);
  }
  PutString(out, 2, name);
  for (size_t i = 0; i < p->n_events; ++i) {
    const FakeEvent* e = &p->events[i];
    if (e->line != line) continue;
    PutIntOmitZero(&event, 1, (uint64_t)e->name_index);
    PutIntOmitZero(&event, 2, (uint64_t)e->kind);
    PutIntOmitZero(&event, 3, (uint64_t)e->start_ns);
    PutIntOmitZero(&event, 4, (uint64_t)e->end_ns);
    PutIntOmitZero(&event, 5, e->correlation_id);
    PutIntOmitZero(&event, 6, e->external_id);
    if (e->kind == 2) { /* memcpy: bytes stat */
      PutIntOmitZero(&stat, 1, 4);
      if (p->hostile) {
        PutString(&stat, 5, "4096");
      } else {
        PutIntOmitZero(&stat, 2, 4096);
      }
      PutMessage(&event, 7, &stat);
    }
    if (e->kind == 10) { /* memory: operation and bytes */
      PutIntOmitZero(&stat, 1, 8);
      PutString(&stat, 5, e->name_index == 6 ? "alloc" : "free");
      PutMessage(&event, 7, &stat);
      PutIntOmitZero(&stat, 1, 4);
      if (p->hostile) {
        PutString(&stat, 5, "1 MiB");
      } else {
        PutIntOmitZero(&stat, 2, kAllocBytes);
      }
      PutMessage(&event, 7, &stat);
    }
    PutMessage(out, 3, &event);
  }
  free(event.p);
  free(stat.p);
}

static void EncodeTrace(const XdlTraceProfiler* p, Buf* out) {
  Buf device = {0}, line = {0};
  out->n = 0;
  PutString(out, 1, "fake");
  for (size_t i = 0; i < sizeof(kNames) / sizeof(kNames[0]); ++i) {
    PutString(out, 2, p->hostile && i == 1 ? "fake_\xff\xfe_kernel" : kNames[i]);
  }
  if (p->n_events > 0) {
    /* Device 0 with streams 7 and 8. */
    PutString(&device, 2, "fake device 0");
    EncodeLine(p, 7, &line);
    PutMessage(&device, 3, &line);
    EncodeLine(p, 8, &line);
    PutMessage(&device, 3, &line);
    if (p->memory) {
      EncodeLine(p, kMemoryLine, &line);
      PutMessage(&device, 3, &line);
    }
    PutMessage(out, 3, &device);
    /* Host API pseudo device (-1). */
    PutIntOmitZero(&device, 1, (uint64_t)(int64_t)-1);
    PutString(&device, 2, "fake API");
    EncodeLine(p, -1, &line);
    PutMessage(&device, 3, &line);
    PutMessage(out, 3, &device);
  }
  PutIntOmitZero(out, 4, (uint64_t)p->dropped);
  if (p->unavailable) PutString(out, 5, "unavailable: fake device absent (unavailable=1)");
  if (p->n_events > 0) PutIntOmitZero(out, 6, (uint64_t)p->lost_buffers);
  free(device.p);
  free(line.p);
}

/* ---- the ABI ---- */
static int32_t FakeCreate(const XdlTraceProfilerOptions* options, XdlTraceProfiler** out,
                          XdlTracePluginError* error) {
  *out = NULL;
  if (options == NULL || options->struct_size < XDL_TRACE_PROFILER_OPTIONS_STRUCT_SIZE) {
    char message[128];
    snprintf(message, sizeof(message), "fake: options struct_size %zu, need at least %zu",
             options == NULL ? (size_t)0 : options->struct_size,
             (size_t)XDL_TRACE_PROFILER_OPTIONS_STRUCT_SIZE);
    SetError(error, message);
    return XDL_TRACE_PLUGIN_INVALID_ARGUMENT;
  }
  XdlTraceProfiler* p = (XdlTraceProfiler*)calloc(1, sizeof(XdlTraceProfiler));
  if (p == NULL) {
    SetError(error, "fake: out of memory");
    return XDL_TRACE_PLUGIN_INTERNAL;
  }
  pthread_mutex_init(&p->mu, NULL);
  p->events_per_step = 2;
  const char* config = options->config ? options->config : "";
  p->unavailable = strstr(config, "unavailable=1") != NULL;
  p->fail_start = strstr(config, "fail_start=1") != NULL;
  p->hang_stop = strstr(config, "hang_stop=1") != NULL;
  const char* hang_collect = strstr(config, "hang_collect=");
  p->hang_collect = hang_collect ? atoi(hang_collect + strlen("hang_collect=")) : -1;
  p->nvtx = strstr(config, "nvtx=1") != NULL;
  p->memory = strstr(config, "memory=1") != NULL;
  p->hostile = strstr(config, "hostile=1") != NULL;
  const char* announce = strstr(config, "announce_bytes=");
  if (announce != NULL)
    p->announce_bytes = strtoull(announce + strlen("announce_bytes="), NULL, 10);
  const char* lost = strstr(config, "lost_buffers=");
  if (lost != NULL) p->lost_buffers = atoi(lost + strlen("lost_buffers="));
  const char* eps = strstr(config, "events_per_step=");
  if (eps != NULL) p->events_per_step = atoi(eps + strlen("events_per_step="));
  uint64_t cap = options->max_buffer_bytes ? options->max_buffer_bytes : (1u << 20);
  p->max_events = cap / kEventBytes;
  const char* max_events = strstr(config, "max_events=");
  if (max_events != NULL) p->max_events = strtoull(max_events + strlen("max_events="), NULL, 10);
  p->events = (FakeEvent*)malloc((p->max_events ? p->max_events : 1) * sizeof(FakeEvent));
  p->next_correlation = 1;
  *out = p;
  return XDL_TRACE_PLUGIN_OK;
}

static int32_t FakeStart(XdlTraceProfiler* p, XdlTracePluginError* error) {
  if (p->unavailable || p->running) return XDL_TRACE_PLUGIN_OK;
  if (p->fail_start) {
    SetError(error, "fake: start failed as configured (fail_start=1)");
    return XDL_TRACE_PLUGIN_INTERNAL;
  }
  p->running = 1;
  return XDL_TRACE_PLUGIN_OK;
}

static int32_t FakeStop(XdlTraceProfiler* p, XdlTracePluginError* error) {
  (void)error;
  while (p->hang_stop) sleep(1);
  p->running = 0;
  return XDL_TRACE_PLUGIN_OK;
}

static void Emit(XdlTraceProfiler* p, FakeEvent e) {
  pthread_mutex_lock(&p->mu);
  if (p->n_events >= p->max_events) {
    ++p->dropped;
  } else {
    p->events[p->n_events++] = e;
  }
  pthread_mutex_unlock(&p->mu);
}

static int32_t FakeStepBegin(XdlTraceProfiler* p, uint64_t id, XdlTracePluginError* error) {
  (void)error;
  p->step_id = id;
  p->step_begin_ns = NowNs();
  return XDL_TRACE_PLUGIN_OK;
}

static int32_t FakeStepEnd(XdlTraceProfiler* p, uint64_t id, XdlTracePluginError* error) {
  (void)error;
  if (!p->running || id != p->step_id) return XDL_TRACE_PLUGIN_OK;
  const int64_t begin = p->step_begin_ns, end = NowNs();
  const int64_t slot = (end - begin) / (p->events_per_step + 2) + 1;
  if (p->nvtx) {
    FakeEvent range = {5, 9, begin, end, 0, id, -1};
    Emit(p, range);
  }
  if (p->memory) {
    FakeEvent alloc = {6, 10, begin, begin, 0, id, kMemoryLine};
    FakeEvent release = {7, 10, end, end, 0, id, kMemoryLine};
    Emit(p, alloc);
    Emit(p, release);
  }
  for (int i = 0; i < p->events_per_step + 1; ++i) {
    const uint64_t correlation = p->next_correlation++;
    const int64_t at = begin + slot * i;
    FakeEvent launch = {3, 4, at, at + slot / 4, correlation, id, -1};
    Emit(p, launch);
    const int is_copy = i == p->events_per_step;
    FakeEvent work = {is_copy ? 2 : 1, is_copy ? 2 : 1, at + slot / 2, at + slot, correlation, id,
                      is_copy ? 8 : 7};
    Emit(p, work);
  }
  return XDL_TRACE_PLUGIN_OK;
}

static int32_t FakeCollect(XdlTraceProfiler* p, uint8_t* buffer, size_t* size,
                           XdlTracePluginError* error) {
  int32_t rc = XDL_TRACE_PLUGIN_OK;
  if (buffer == NULL && p->hang_collect >= 0 && p->collects++ >= p->hang_collect) {
    for (;;) sleep(1);
  }
  pthread_mutex_lock(&p->mu);
  if (buffer == NULL) {
    if (!p->has_snapshot) {
      EncodeTrace(p, &p->snapshot);
      p->has_snapshot = 1;
      p->n_events = 0;
      p->dropped = 0;
    }
    *size = p->announce_bytes != 0 ? (size_t)p->announce_bytes : p->snapshot.n;
  } else if (!p->has_snapshot) {
    SetError(error, "fake: collect with a buffer before asking the size");
    rc = XDL_TRACE_PLUGIN_FAILED_PRECONDITION;
  } else if (*size < p->snapshot.n) {
    SetError(error, "fake: collect buffer too small");
    rc = XDL_TRACE_PLUGIN_INVALID_ARGUMENT;
  } else {
    memcpy(buffer, p->snapshot.p, p->snapshot.n);
    *size = p->snapshot.n;
    p->has_snapshot = 0;
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

static void FakeDestroy(XdlTraceProfiler* p) {
  if (p == NULL) return;
  pthread_mutex_destroy(&p->mu);
  free(p->events);
  free(p->snapshot.p);
  free(p);
}

#ifndef XDL_FAKE_NO_SYMBOL
__attribute__((visibility("default"))) int32_t XdlTracePluginInit(XdlTracePluginRegistration* r) {
#ifdef XDL_FAKE_INIT_FAILS
  (void)r;
  return XDL_TRACE_PLUGIN_INTERNAL;
#endif
  r->struct_size = sizeof(*r);
  r->abi_major = XDL_TRACE_PLUGIN_ABI_MAJOR;
  r->abi_minor = XDL_TRACE_PLUGIN_ABI_MINOR;
  r->abi_patch = XDL_TRACE_PLUGIN_ABI_PATCH;
  r->profiler_type = "fake";
  r->create = FakeCreate;
  r->start = FakeStart;
  r->stop = FakeStop;
  r->collect = FakeCollect;
  r->step_begin = FakeStepBegin;
  r->step_end = FakeStepEnd;
  r->destroy = FakeDestroy;
#ifdef XDL_FAKE_ABI_1_0
  r->abi_minor = 0;
#endif
#ifdef XDL_FAKE_BAD_MAJOR
  r->abi_major = XDL_TRACE_PLUGIN_ABI_MAJOR + 1;
#endif
#ifdef XDL_FAKE_BAD_SIZE
  r->struct_size = offsetof(XdlTracePluginRegistration, collect);
#endif
#ifdef XDL_FAKE_NULL_COLLECT
  r->collect = NULL;
#endif
  return XDL_TRACE_PLUGIN_OK;
}
#endif
