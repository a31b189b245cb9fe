/* A tiny protobuf writer for the fake plugins (C, no protobuf library, as a real plugin may be). */
#ifndef XDL_TRACE_TESTS_PLUGINS_FAKE_PROTO_WRITER_H_
#define XDL_TRACE_TESTS_PLUGINS_FAKE_PROTO_WRITER_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A growing byte buffer; {0} is empty. */
typedef struct Buf {
  uint8_t* p;
  size_t n, cap;
} Buf;

static int Reserve(Buf* b, size_t extra) {
  if (b->n + extra <= b->cap) return 1;
  size_t cap = b->cap ? b->cap * 2 : 256;
  while (cap < b->n + extra) cap *= 2;
  uint8_t* p = (uint8_t*)realloc(b->p, cap);
  if (p == NULL) return 0;
  b->p = p;
  b->cap = cap;
  return 1;
}
static void PutVarint(Buf* b, uint64_t v) {
  if (!Reserve(b, 10)) return;
  while (v >= 0x80) {
    b->p[b->n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  b->p[b->n++] = (uint8_t)v;
}
static void PutTag(Buf* b, uint32_t field, uint32_t wire) { PutVarint(b, (field << 3) | wire); }
/* A varint field, written even when 0 (a oneof member must be). */
static void PutInt(Buf* b, uint32_t field, uint64_t v) {
  PutTag(b, field, 0);
  PutVarint(b, v);
}
/* A varint field as proto3 writes it: nothing when 0. */
static void PutIntOmitZero(Buf* b, uint32_t field, uint64_t v) {
  if (v != 0) PutInt(b, field, v);
}
static void PutBytes(Buf* b, uint32_t field, const void* data, size_t n) {
  PutTag(b, field, 2);
  PutVarint(b, n);
  if (!Reserve(b, n)) return;
  memcpy(b->p + b->n, data, n);
  b->n += n;
}
static void PutString(Buf* b, uint32_t field, const char* s) { PutBytes(b, field, s, strlen(s)); }
/* Writes `m` as field `field` of `b` and empties `m`. */
static void PutMessage(Buf* b, uint32_t field, Buf* m) {
  PutBytes(b, field, m->p, m->n);
  m->n = 0;
}

#endif /* XDL_TRACE_TESTS_PLUGINS_FAKE_PROTO_WRITER_H_ */
