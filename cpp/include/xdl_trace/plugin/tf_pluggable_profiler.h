/* TensorFlow's pluggable-profiler C API (RFC 389), the second plugin entry point xdl_trace loads.
 */
/*
 * The declarations of TensorFlow's tensorflow/c/experimental/pluggable_profiler/
 * pluggable_profiler.h, tensorflow/c/tf_status.h (the status functions a
 * profiler plugin calls) and TF_OFFSET_OF_END from tensorflow/c/c_api_macros.h,
 * with TensorFlow's names, layouts and TF_Code values, so a plugin written for
 * TensorFlow builds against this header unchanged and a plugin built against
 * TensorFlow's headers loads into xdl_trace unchanged.
 *
 * Loading. A `device_tracers` entry that is a library exporting
 * `TF_InitProfiler` (and not `XdlTracePluginInit`) is a TensorFlow plugin. The
 * core passes zeroed registration params whose struct_size fields are the
 * TF_*_STRUCT_SIZE values below and major/minor/patch TP_MAJOR/TP_MINOR/
 * TP_PATCH; the plugin fills TP_Profiler, TP_ProfilerFns and the two destroy
 * functions, and reports failure with TF_SetStatus. docs/device-tracing.md,
 * "TensorFlow pluggable-profiler plugins", has the rules (struct_size, the
 * XSpace conversion, threads).
 *
 * Status functions. TF_NewStatus, TF_DeleteStatus, TF_SetStatus, TF_GetCode
 * and TF_Message are exported by libxdl_trace_tf_c.so, which the core loads
 * RTLD_GLOBAL before a TensorFlow plugin (unless TensorFlow's own are already
 * global in the process), so a plugin that leaves them undefined resolves them.
 */
#ifndef XDL_TRACE_PLUGIN_TF_PLUGGABLE_PROFILER_H_
#define XDL_TRACE_PLUGIN_TF_PLUGGABLE_PROFILER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tensorflow/c/c_api_macros.h: the unpadded size of a struct up to MEMBER. */
#ifndef TF_OFFSET_OF_END
#define TF_OFFSET_OF_END(TYPE, MEMBER) (offsetof(TYPE, MEMBER) + sizeof(((TYPE*)0)->MEMBER))
#endif

/* tensorflow/c/tf_status.h (the values of error_codes.proto). */
typedef enum TF_Code {
  TF_OK = 0,
  TF_CANCELLED = 1,
  TF_UNKNOWN = 2,
  TF_INVALID_ARGUMENT = 3,
  TF_DEADLINE_EXCEEDED = 4,
  TF_NOT_FOUND = 5,
  TF_ALREADY_EXISTS = 6,
  TF_PERMISSION_DENIED = 7,
  TF_UNAUTHENTICATED = 16,
  TF_RESOURCE_EXHAUSTED = 8,
  TF_FAILED_PRECONDITION = 9,
  TF_ABORTED = 10,
  TF_OUT_OF_RANGE = 11,
  TF_UNIMPLEMENTED = 12,
  TF_INTERNAL = 13,
  TF_UNAVAILABLE = 14,
  TF_DATA_LOSS = 15,
} TF_Code;

/* An error code and message; opaque. */
typedef struct TF_Status TF_Status;

/* A new status, TF_OK. */
TF_Status* TF_NewStatus(void);
/* Frees a status (NULL is fine). */
void TF_DeleteStatus(TF_Status* status);
/* Records <code, msg>; any previous information is lost. TF_OK clears the message. */
void TF_SetStatus(TF_Status* s, TF_Code code, const char* msg);
TF_Code TF_GetCode(const TF_Status* s);
/* The message ("" when TF_OK); valid until the status changes or is deleted. */
const char* TF_Message(const TF_Status* s);

/* tensorflow/c/experimental/pluggable_profiler/pluggable_profiler.h */
#define TP_MAJOR 0
#define TP_MINOR 0
#define TP_PATCH 1

/* Filled by the plugin: the device type it profiles ("GPU", "XPU"). */
typedef struct TP_Profiler {
  size_t struct_size;
  void* ext; /* Free-form data set by the plugin. */
  const char* type;
} TP_Profiler;

#define TP_PROFILER_STRUCT_SIZE TF_OFFSET_OF_END(TP_Profiler, type)

/* Filled by the plugin. Called by the thread that starts and closes the
 * tracer (the training thread), never concurrently. */
typedef struct TP_ProfilerFns {
  size_t struct_size;
  void* ext; /* Reserved. */
  void (*start)(const TP_Profiler* profiler, TF_Status* status);
  void (*stop)(const TP_Profiler* profiler, TF_Status* status);
  /* Two calls: buffer == NULL sets *size_in_bytes to the size of the
   * serialized XSpace (tensorflow.profiler.XSpace) of what was collected; then
   * a buffer of that size receives it. */
  void (*collect_data_xspace)(const TP_Profiler* profiler, uint8_t* buffer, size_t* size_in_bytes,
                              TF_Status* status);
} TP_ProfilerFns;

#define TP_PROFILER_FNS_STRUCT_SIZE TF_OFFSET_OF_END(TP_ProfilerFns, collect_data_xspace)

/* Set by the core (the TF_ prefix), except what is marked [out]. The memory of
 * *profiler and *profiler_fns is the core's; the plugin fills it in. */
typedef struct TF_ProfilerRegistrationParams {
  size_t struct_size;
  void* ext; /* Reserved. */
  int32_t major_version;
  int32_t minor_version;
  int32_t patch_version;
  TP_Profiler* profiler;        /* [in/out] */
  TP_ProfilerFns* profiler_fns; /* [in/out] */
  /* [out] Frees what the plugin allocated inside *profiler (not profiler). */
  void (*destroy_profiler)(TP_Profiler* profiler);
  /* [out] Frees what the plugin allocated inside *profiler_fns. */
  void (*destroy_profiler_fns)(TP_ProfilerFns* profiler_fns);
} TF_ProfilerRegistrationParams;

#define TF_PROFILER_REGISTRATION_PARAMS_STRUCT_SIZE \
  TF_OFFSET_OF_END(TF_ProfilerRegistrationParams, destroy_profiler_fns)

/* The symbol a TensorFlow profiler plugin exports. */
#define XDL_TRACE_TF_INIT_PROFILER_SYMBOL "TF_InitProfiler"
typedef void (*TF_InitProfilerFn)(TF_ProfilerRegistrationParams* params, TF_Status* status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* XDL_TRACE_PLUGIN_TF_PLUGGABLE_PROFILER_H_ */
