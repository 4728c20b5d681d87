/* cuda_arena.c — device memory of the weights (and, in an arena of its own, of the tensors:
 * KV cache, activations): one reserved address range with physical memory mapped into it as
 * blocks arrive (the driver's virtual memory management).
 *
 * cudaMalloc rounds every allocation up to the 2 MiB page: a Q4_0 Llama-8B's 291 weights (k and
 * v of 2.25 MiB, q and o of 9 MiB, the MLP's of 31.5 MiB) waste 7 MiB a layer, 0.24 GB in all,
 * which is 5% of the model; the KV tensors of a Qwen2.5-0.5B-shape context (33.3 MiB a layer)
 * lose 0.7 MiB each. Here blocks are packed back to back at 256-byte alignment, and the physical
 * memory grows by whole granules at the end of the range: what is mapped exceeds what the blocks
 * hold by less than one granule (plus any holes freed blocks leave).
 *
 * A freed block's bytes become a hole that later blocks may take (first fit); a hole that
 * reaches the end lowers it, and mappings wholly past the end are unmapped and returned. The
 * driver entry points come through cudaGetDriverEntryPointByVersion (no link against libcuda);
 * without them, without VMM support on the device, or with LMC_CUDA_ARENA=0 (a memory
 * checker then sees each weight and tensor as its own allocation), the caller uses cudaMalloc.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define ARENA_ALIGN 256

static size_t aligned(size_t n) { return ((n ? n : 1) + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

typedef CUresult (*fn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_addr_free)(CUdeviceptr, size_t);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*fn_gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
typedef CUresult (*fn_dev_get)(CUdevice *, int);
typedef CUresult (*fn_dev_attr)(int *, CUdevice_attribute, CUdevice);

static struct {
    int ok;
    fn_reserve reserve;
    fn_addr_free addr_free;
    fn_create create;
    fn_release release;
    fn_map map;
    fn_unmap unmap;
    fn_access access;
    fn_gran gran;
    fn_dev_get dev_get;
    fn_dev_attr dev_attr;
} drv;

static int entry(const char *name, void **fn) {
    enum cudaDriverEntryPointQueryResult q;
    return cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
           q == cudaDriverEntryPointSuccess && *fn;
}

static void load_entries(void) {
    drv.ok = entry("cuMemAddressReserve", (void **)&drv.reserve) && entry("cuMemAddressFree", (void **)&drv.addr_free) &&
             entry("cuMemCreate", (void **)&drv.create) && entry("cuMemRelease", (void **)&drv.release) &&
             entry("cuMemMap", (void **)&drv.map) && entry("cuMemUnmap", (void **)&drv.unmap) &&
             entry("cuMemSetAccess", (void **)&drv.access) &&
             entry("cuMemGetAllocationGranularity", (void **)&drv.gran) && entry("cuDeviceGet", (void **)&drv.dev_get) &&
             entry("cuDeviceGetAttribute", (void **)&drv.dev_attr);
    cudaGetLastError();
}

static int driver_entries(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_entries);
    return drv.ok;
}

static CUmemAllocationProp prop_of(int device) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

int lmc_cuda_arena_init(cuda_arena *a, int device) {
    memset(a, 0, sizeof *a);
    a->device = device;
    const char *e = getenv("LMC_CUDA_ARENA");
    if (e && !strcmp(e, "0")) return 0;
    CUdevice d;
    int vmm = 0;
    if (!driver_entries() || drv.dev_get(&d, device) != CUDA_SUCCESS ||
        drv.dev_attr(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d) != CUDA_SUCCESS || !vmm)
        return 0;
    CUmemAllocationProp p = prop_of(device);
    size_t gran = 0, free_b = 0, total = 0;
    if (drv.gran(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !gran ||
        cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    /* the whole device's size: the weights can never need more addresses than that */
    const size_t span = (total + gran - 1) / gran * gran;
    CUdeviceptr base = 0;
    if (drv.reserve(&base, span, gran, 0, 0) != CUDA_SUCCESS) return 0;
    a->base = base;
    a->span = span;
    a->gran = gran;
    a->on = 1;
    return 1;
}

/* Map granules until [0, need) is backed; 0 when the device has no more memory. */
static int grow(cuda_arena *a, size_t need) {
    if (need <= a->mapped) return 1;
    if (need > a->span) return 0;
    if (a->n_maps == a->cap_maps) {
        int cap = a->cap_maps ? 2 * a->cap_maps : 64;
        cuda_arena_map *m = realloc(a->maps, (size_t)cap * sizeof *m);
        if (!m) return 0;
        a->maps = m;
        a->cap_maps = cap;
    }
    const size_t n = (need - a->mapped + a->gran - 1) / a->gran * a->gran;
    CUmemAllocationProp p = prop_of(a->device);
    CUmemGenericAllocationHandle h;
    if (drv.create(&h, n, &p, 0) != CUDA_SUCCESS) return 0;
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location = p.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (drv.map(a->base + a->mapped, n, 0, h, 0) != CUDA_SUCCESS) {
        drv.release(h);
        return 0;
    }
    if (drv.access(a->base + a->mapped, n, &acc, 1) != CUDA_SUCCESS) {
        drv.unmap(a->base + a->mapped, n);
        drv.release(h);
        return 0;
    }
    a->maps[a->n_maps++] = (cuda_arena_map){h, a->mapped, n};
    a->mapped += n;
    return 1;
}

void *lmc_cuda_arena_alloc(cuda_arena *a, size_t n) {
    if (!a->on) return NULL;
    n = aligned(n);
    for (int i = 0; i < a->n_holes; i++) { /* first fit */
        cuda_arena_hole *h = &a->holes[i];
        if (h->size < n) continue;
        const size_t off = h->off;
        h->off += n;
        h->size -= n;
        if (!h->size) a->holes[i] = a->holes[--a->n_holes];
        a->used += n;
        return (void *)(uintptr_t)(a->base + off);
    }
    if (n > a->span - a->top || !grow(a, a->top + n)) return NULL;
    const size_t off = a->top;
    a->top += n;
    a->used += n;
    return (void *)(uintptr_t)(a->base + off);
}

/* Unmap the granules wholly past the end (nothing in flight may use them: the caller synced). */
static void trim(cuda_arena *a) {
    while (a->n_maps > 0 && a->maps[a->n_maps - 1].off >= a->top) {
        cuda_arena_map *m = &a->maps[--a->n_maps];
        drv.unmap(a->base + m->off, m->size);
        drv.release(m->h);
        a->mapped = m->off;
    }
}

int lmc_cuda_arena_owns(const cuda_arena *a, const void *p) {
    const uintptr_t u = (uintptr_t)p;
    return a->on && u >= a->base && u < a->base + a->span;
}

void lmc_cuda_arena_free(cuda_arena *a, void *p, size_t n) {
    if (!lmc_cuda_arena_owns(a, p)) return;
    n = aligned(n);
    size_t off = (uintptr_t)p - a->base;
    a->used -= n;
    /* merge with the holes on either side */
    for (int i = 0; i < a->n_holes;) {
        cuda_arena_hole *h = &a->holes[i];
        if (h->off + h->size == off || off + n == h->off) {
            if (h->off < off) off = h->off;
            n += h->size;
            a->holes[i] = a->holes[--a->n_holes];
        } else {
            i++;
        }
    }
    if (off + n == a->top) {
        a->top = off;
        cudaDeviceSynchronize(); /* as cudaFree: no kernel may still read what is unmapped */
        trim(a);
        return;
    }
    if (a->n_holes == a->cap_holes) {
        int cap = a->cap_holes ? 2 * a->cap_holes : 32;
        cuda_arena_hole *h = realloc(a->holes, (size_t)cap * sizeof *h);
        if (!h) return; /* the bytes stay unused until the arena is freed */
        a->holes = h;
        a->cap_holes = cap;
    }
    a->holes[a->n_holes++] = (cuda_arena_hole){off, n};
}

void lmc_cuda_arena_release(cuda_arena *a) {
    if (!a->on) return;
    a->top = 0;
    trim(a);
    drv.addr_free(a->base, a->span);
    free(a->maps);
    free(a->holes);
    memset(a, 0, sizeof *a);
}
