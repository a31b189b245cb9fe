/* The device-profiler plugin C ABI: what a shared library exports to be a device tracer. */
/*
 * Modelled on TensorFlow's pluggable-profiler RFC 389. Pure C, stdint only, so
 * a plugin can be built with any compiler and any C++ runtime (or none).
 *
 * Loading. The core dlopen()s the library and dlsym()s one symbol,
 * XDL_TRACE_PLUGIN_INIT_SYMBOL ("XdlTracePluginInit"), of type
 * XdlTracePluginInitFn. It hands in a zeroed XdlTracePluginRegistration whose
 * struct_size is the core's sizeof; the plugin fills it and returns 0.
 *
 * Versioning. A plugin sets abi_major/minor/patch to the XDL_TRACE_PLUGIN_ABI_*
 * it was compiled against and struct_size to its own sizeof. The core refuses
 * a plugin whose major differs, whose struct_size is below the minimum for its
 * minor (XDL_TRACE_PLUGIN_REGISTRATION_SIZE_V1_0 for 1.0), or that leaves a
 * function pointer null. Minor versions only ever append fields at the end of
 * a struct; the `ext` pointers are reserved (set them to NULL) for extensions
 * that must not change a struct's layout.
 *
 * Threads. create, start, stop and destroy are called by the thread that
 * starts and closes the tracer (the training thread); step_begin and step_end
 * by the training thread, between start and stop. collect is called by one
 * thread at a time: the core's collector thread while tracing (every
 * device_collect_interval_s), the closing thread at start and after stop.
 * Since ABI 1.1 collect may run concurrently with step_begin and step_end
 * (never with create, start, stop, destroy or another collect), so a step
 * never waits for a collect: a plugin reporting abi_minor >= 1 promises that
 * this is safe. The calls of a plugin reporting abi_minor 0 are serialized by
 * the core (its step hooks may then wait for its collect, at most
 * device_fence_timeout_s once: a collect that has not returned by then is
 * taken as hung and the step hooks are skipped until it returns). step_begin
 * and step_end run on the training thread and must return at once (no device
 * synchronization, no waiting on the plugin's other threads). A plugin may run
 * its own threads (CUPTI's buffer callbacks arrive on CUPTI's); it must join
 * them in stop or destroy.
 *
 * Ownership. Every pointer the core passes in is owned by the core and valid
 * only for the duration of the call. The profiler handle is owned by the
 * plugin from create until destroy. Strings the plugin returns in the
 * registration (profiler_type) must stay valid until the library is unloaded
 * (string literals). Error messages are copied by the plugin into the caller's
 * XdlTracePluginError buffer.
 *
 * Errors. Functions return 0 on success and a nonzero XdlTracePluginStatus on
 * failure, with a message in `error`. Nothing may throw or longjmp across the
 * ABI: a C++ plugin catches everything at its boundary.
 *
 * Availability (the RFC's rule). A profiler whose device is absent (no GPU, no
 * driver, library missing) is "unavailable": create succeeds, start and stop
 * succeed and do nothing, collect returns an empty trace whose status says
 * why. Start/stop may alternate any number of times.
 */
#ifndef XDL_TRACE_PLUGIN_PROFILER_PLUGIN_H_
#define XDL_TRACE_PLUGIN_PROFILER_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XDL_TRACE_PLUGIN_ABI_MAJOR 1
#define XDL_TRACE_PLUGIN_ABI_MINOR 1
#define XDL_TRACE_PLUGIN_ABI_PATCH 0

#define XDL_TRACE_PLUGIN_INIT_SYMBOL "XdlTracePluginInit"

/* Status codes (values of the int32_t the functions return). */
typedef enum XdlTracePluginStatus {
  XDL_TRACE_PLUGIN_OK = 0,
  XDL_TRACE_PLUGIN_INVALID_ARGUMENT = 1,    /* e.g. buffer too small in collect. */
  XDL_TRACE_PLUGIN_FAILED_PRECONDITION = 2, /* e.g. collect while running. */
  XDL_TRACE_PLUGIN_PERMISSION_DENIED = 3,   /* e.g. no profiling rights. */
  XDL_TRACE_PLUGIN_INTERNAL = 4,
} XdlTracePluginStatus;

/* Caller-owned buffer for an error message; the plugin writes a NUL-terminated
 * message of at most capacity bytes (truncating). */
typedef struct XdlTracePluginError {
  size_t struct_size;
  void* ext;       /* Reserved, NULL. */
  char* message;   /* Caller's buffer. */
  size_t capacity; /* Bytes in message, including the NUL. */
} XdlTracePluginError;

#define XDL_TRACE_PLUGIN_ERROR_STRUCT_SIZE \
  (offsetof(XdlTracePluginError, capacity) + sizeof(size_t))

/* Opaque per-profiler state, owned by the plugin. */
typedef struct XdlTraceProfiler XdlTraceProfiler;

/* Options passed to create. Owned by the core, valid during create only. */
typedef struct XdlTraceProfilerOptions {
  size_t struct_size;
  void* ext;                 /* Reserved, NULL. */
  uint64_t max_buffer_bytes; /* Hard cap on memory the profiler may hold; 0: its default. */
  const char* config;        /* "key=value;key=value" plugin options, or "" (never NULL). */
} XdlTraceProfilerOptions;

#define XDL_TRACE_PROFILER_OPTIONS_STRUCT_SIZE \
  (offsetof(XdlTraceProfilerOptions, config) + sizeof(const char*))

/* Filled by the plugin's init function. */
typedef struct XdlTracePluginRegistration {
  size_t struct_size; /* In: the core's sizeof. Out: the plugin's sizeof. */
  void* ext;          /* Reserved, NULL. */
  uint32_t abi_major;
  uint32_t abi_minor;
  uint32_t abi_patch;
  /* Short name of the tracer ("cupti", "fake"): names it in stats, logs and
   * DeviceTrace.tracer. Static storage. */
  const char* profiler_type;

  /* Creates a profiler. *out is the plugin's; NULL on failure. */
  int32_t (*create)(const XdlTraceProfilerOptions* options, XdlTraceProfiler** out,
                    XdlTracePluginError* error);
  /* Starts recording. Must roll back what it enabled when it fails. A no-op
   * (returning 0) when the device is unavailable or already started. */
  int32_t (*start)(XdlTraceProfiler* profiler, XdlTracePluginError* error);
  /* Stops recording and flushes what the device still holds, so the next
   * collect sees everything up to now. A no-op when not started. */
  int32_t (*stop)(XdlTraceProfiler* profiler, XdlTracePluginError* error);
  /* Two-call protocol. With buffer == NULL: sets *size to the bytes needed to
   * serialize an xdl.proto.DeviceTrace of everything recorded since the last
   * collect (and keeps that snapshot). With a buffer of *size bytes: writes
   * the snapshot, sets *size to the bytes written and forgets the snapshot.
   * Returns INVALID_ARGUMENT (keeping the snapshot) when *size is too small.
   * Allowed while running (periodic collection) and after stop. */
  int32_t (*collect)(XdlTraceProfiler* profiler, uint8_t* buffer, size_t* size,
                     XdlTracePluginError* error);
  /* Marks the start of host step `external_id` on the calling (training)
   * thread: device work launched until step_end is tagged with it. */
  int32_t (*step_begin)(XdlTraceProfiler* profiler, uint64_t external_id,
                        XdlTracePluginError* error);
  int32_t (*step_end)(XdlTraceProfiler* profiler, uint64_t external_id, XdlTracePluginError* error);
  /* Stops if needed and frees the profiler. Never fails. */
  void (*destroy)(XdlTraceProfiler* profiler);
} XdlTracePluginRegistration;

/* Smallest registration a 1.0 (or 1.1) plugin may report: up to and including destroy.
 * 1.1 changed no layout, only the threads collect may be called on (above). */
#define XDL_TRACE_PLUGIN_REGISTRATION_SIZE_V1_0 \
  (offsetof(XdlTracePluginRegistration, destroy) + sizeof(void (*)(XdlTraceProfiler*)))

/* The one exported symbol. Returns 0 when `registration` is filled. */
typedef int32_t (*XdlTracePluginInitFn)(XdlTracePluginRegistration* registration);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* XDL_TRACE_PLUGIN_PROFILER_PLUGIN_H_ */
