/* libxdl_trace_tf_c.so: TensorFlow's TF_Status functions for TensorFlow profiler plugins. */
/*
 * A TensorFlow pluggable-profiler plugin is linked against TensorFlow's C API
 * and calls TF_SetStatus (perhaps TF_GetCode, TF_Message, TF_NewStatus,
 * TF_DeleteStatus). The core dlopen()s this library RTLD_NOW | RTLD_GLOBAL
 * before such a plugin (cpp/src/plugin/tf_profiler_plugin.cc) so those
 * references resolve, and calls the same functions itself through
 * dlsym(RTLD_DEFAULT). Only these five symbols are exported; the signatures
 * and TF_Code values are TensorFlow's (xdl_trace/plugin/tf_pluggable_profiler.h).
 */
#include <stdlib.h>
#include <string.h>

#include "xdl_trace/plugin/tf_pluggable_profiler.h"

#define XDL_TF_EXPORT __attribute__((visibility("default")))

struct TF_Status {
  TF_Code code;
  char* message; /* NULL when TF_OK. */
};

XDL_TF_EXPORT TF_Status* TF_NewStatus(void) {
  return (TF_Status*)calloc(1, sizeof(TF_Status)); /* code TF_OK, no message. */
}

XDL_TF_EXPORT void TF_DeleteStatus(TF_Status* status) {
  if (status == NULL) return;
  free(status->message);
  free(status);
}

XDL_TF_EXPORT void TF_SetStatus(TF_Status* s, TF_Code code, const char* msg) {
  if (s == NULL) return;
  free(s->message);
  s->message = NULL;
  s->code = code;
  if (code == TF_OK) return; /* As TensorFlow: an OK status carries no message. */
  if (msg == NULL) msg = "";
  const size_t n = strlen(msg);
  s->message = (char*)malloc(n + 1);
  if (s->message != NULL) memcpy(s->message, msg, n + 1);
}

XDL_TF_EXPORT TF_Code TF_GetCode(const TF_Status* s) { return s == NULL ? TF_OK : s->code; }

XDL_TF_EXPORT const char* TF_Message(const TF_Status* s) {
  return s == NULL || s->message == NULL ? "" : s->message;
}
