/* fp32 matmuls with bf16 products and fp32 accumulation, on oneDNN (the libdnnl.so.3 that Paddle's wheel ships),
 * for `--amp bf16` on CPUs with AVX-512 BF16 or AMX.
 *
 * Paddle 3.3's dygraph has no CPU bf16 matmul; oneDNN's matmul primitive on fp32 memory with the fpmath mode
 * bf16 converts its blocks to bf16 as it packs them and runs AMX or AVX512-BF16 (what torch's
 * fp32_precision = "bf16" does). Tensors stay fp32: weights, gradients and the optimizer's state are fp32 masters.
 *
 * A transpose is a stride swap: no copies. A primitive is built once per shape and layout and kept in a small
 * cache (building one takes longer than running a small one); its memory objects get the call's pointers.
 *
 * The wheel ships libdnnl but not the oneapi/dnnl headers its dnnl.h includes: the few declarations used are
 * below, with oneDNN 3's values (dnnl_common_types.h, dnnl_types.h), stable across its 3.x C API.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef void *dnnl_handle;
typedef int64_t dnnl_dims_t[12];
typedef struct {
  int arg;
  dnnl_handle memory;
} dnnl_exec_arg_t;
enum { DNNL_F32 = 3, DNNL_CPU = 1, DNNL_IN_ORDER = 1, DNNL_FPMATH_BF16 = 1 };
enum { ARG_SRC = 1, ARG_DST = 17, ARG_WEIGHTS = 33, ARG_BIAS = 41 };
int dnnl_engine_create(dnnl_handle *, int, size_t);
int dnnl_stream_create(dnnl_handle *, dnnl_handle, unsigned);
int dnnl_stream_wait(dnnl_handle);
int dnnl_memory_desc_create_with_strides(dnnl_handle *, int, const dnnl_dims_t, int, const dnnl_dims_t);
int dnnl_memory_desc_destroy(dnnl_handle);
int dnnl_primitive_attr_create(dnnl_handle *);
int dnnl_primitive_attr_destroy(dnnl_handle);
int dnnl_primitive_attr_set_fpmath_mode(dnnl_handle, int);
int dnnl_matmul_primitive_desc_create(dnnl_handle *, dnnl_handle, dnnl_handle, dnnl_handle, dnnl_handle,
                                      dnnl_handle, dnnl_handle);
int dnnl_primitive_desc_destroy(dnnl_handle);
int dnnl_primitive_create(dnnl_handle *, dnnl_handle);
int dnnl_primitive_destroy(dnnl_handle);
int dnnl_primitive_execute(dnnl_handle, dnnl_handle, int, const dnnl_exec_arg_t *);
int dnnl_memory_create(dnnl_handle *, dnnl_handle, dnnl_handle, void *);
int dnnl_memory_destroy(dnnl_handle);
int dnnl_memory_set_data_handle(dnnl_handle, void *);

/* A matmul's shape and layout: batch, m, k, n, A's strides (batch, m, k), B's (batch, k, n), bias or not. */
typedef struct { /* int64_t only: no padding, compared with memcmp */
  int64_t dims[4], a_strides[3], b_strides[3], bias;
} key_t_;

typedef struct {
  key_t_ key;
  dnnl_handle primitive, memory[4]; /* src, weights, dst, bias */
} entry_t;

#define CACHE 64 /* medium's Linear and attention shapes, forward and backward, for a few batch lengths */
static entry_t cache[CACHE];
static int cache_used, cache_next;
static dnnl_handle engine, stream;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void drop(entry_t *e) {
  dnnl_primitive_destroy(e->primitive);
  for (int i = 0; i < 4; i++)
    if (e->memory[i]) dnnl_memory_destroy(e->memory[i]);
  memset(e, 0, sizeof *e);
}

/* Build the primitive and memory objects of `key` into `e`; 0 or oneDNN's status. */
static int build(entry_t *e, const key_t_ *key) {
  const int64_t batch = key->dims[0], m = key->dims[1], k = key->dims[2], n = key->dims[3];
  dnnl_dims_t a_dims = {batch, m, k}, b_dims = {batch, k, n}, c_dims = {batch, m, n}, c_strides = {m * n, n, 1};
  dnnl_dims_t a_strides = {key->a_strides[0], key->a_strides[1], key->a_strides[2]};
  dnnl_dims_t b_strides = {key->b_strides[0], key->b_strides[1], key->b_strides[2]};
  dnnl_dims_t z_dims = {1, 1, n}, z_strides = {n, n, 1};
  dnnl_handle desc[4] = {0}, attr = 0, pd = 0;
  int status = dnnl_memory_desc_create_with_strides(&desc[0], 3, a_dims, DNNL_F32, a_strides);
  if (!status) status = dnnl_memory_desc_create_with_strides(&desc[1], 3, b_dims, DNNL_F32, b_strides);
  if (!status) status = dnnl_memory_desc_create_with_strides(&desc[2], 3, c_dims, DNNL_F32, c_strides);
  if (!status && key->bias) status = dnnl_memory_desc_create_with_strides(&desc[3], 3, z_dims, DNNL_F32, z_strides);
  if (!status) status = dnnl_primitive_attr_create(&attr);
  if (!status) status = dnnl_primitive_attr_set_fpmath_mode(attr, DNNL_FPMATH_BF16);
  if (!status) status = dnnl_matmul_primitive_desc_create(&pd, engine, desc[0], desc[1], desc[3], desc[2], attr);
  if (!status) status = dnnl_primitive_create(&e->primitive, pd);
  for (int i = 0; i < 4 && !status; i++)
    if (desc[i]) status = dnnl_memory_create(&e->memory[i], desc[i], engine, NULL);
  for (int i = 0; i < 4; i++)
    if (desc[i]) dnnl_memory_desc_destroy(desc[i]);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (status) {
    if (e->primitive) drop(e);
    return status;
  }
  e->key = *key;
  return 0;
}

static entry_t *lookup(const key_t_ *key, int *status) {
  for (int i = 0; i < cache_used; i++)
    if (!memcmp(&cache[i].key, key, sizeof *key)) return &cache[i];
  entry_t *e = &cache[cache_used < CACHE ? cache_used++ : cache_next];
  if (e->primitive) { /* full: replace the entries in turn */
    drop(e);
    cache_next = (cache_next + 1) % CACHE;
  }
  *status = build(e, key);
  return *status ? NULL : e;
}

/* c[b] = a[b] @ b[b] (+ bias) for b < batch: a [batch, m, k] and b [batch, k, n] with the given strides
 * (in elements), c contiguous [batch, m, n], bias [n] or NULL. Returns 0, or oneDNN's status (nothing written). */
int ef_bf16_matmul(int64_t batch, int64_t m, int64_t k, int64_t n, const float *a, int64_t a_sb, int64_t a_sm,
                   int64_t a_sk, const float *b, int64_t b_sb, int64_t b_sk, int64_t b_sn, const float *bias,
                   float *c) {
  const key_t_ key = {{batch, m, k, n}, {a_sb, a_sm, a_sk}, {b_sb, b_sk, b_sn}, bias != NULL};
  int status = 0;
  pthread_mutex_lock(&lock);
  if (!engine && ((status = dnnl_engine_create(&engine, DNNL_CPU, 0)) ||
                  (status = dnnl_stream_create(&stream, engine, DNNL_IN_ORDER)))) {
    pthread_mutex_unlock(&lock);
    return status;
  }
  entry_t *e = lookup(&key, &status);
  if (e) {
    void *pointers[4] = {(void *)a, (void *)b, c, (void *)bias};
    dnnl_exec_arg_t args[4] = {{ARG_SRC, e->memory[0]}, {ARG_WEIGHTS, e->memory[1]}, {ARG_DST, e->memory[2]},
                               {ARG_BIAS, e->memory[3]}};
    for (int i = 0; i < 4 && !status; i++)
      if (e->memory[i]) status = dnnl_memory_set_data_handle(e->memory[i], pointers[i]);
    if (!status) status = dnnl_primitive_execute(e->primitive, stream, bias ? 4 : 3, args);
    if (!status) status = dnnl_stream_wait(stream);
  }
  pthread_mutex_unlock(&lock);
  return status;
}
