// bufpool.h: a small pool of device buffers for the units that ZeRO gathers and reduce-scatters
// (llm/parallel/zero.h): acquired, released, reused, so that a training step does not allocate once the pool
// holds its working set; pool_trim frees what the steady state does not need. Its buffers are tagged
// MEM_COMM (communication buffers) in the allocator's counts.
#pragma once
#include "../core/common.h"
#include "../core/device.h"

typedef struct {
    floatX* ptr;
    size_t cap;  // values
    int in_use;
} PoolBuf;

typedef struct {
    PoolBuf* bufs;
    int num, cap;
} BufPool;

// a buffer of at least n values: the smallest free one that fits, else a new one
static floatX* pool_get(BufPool* pl, size_t n) {
    int best = -1;
    for (int i = 0; i < pl->num; i++) {
        if (!pl->bufs[i].in_use && pl->bufs[i].cap >= n && (best < 0 || pl->bufs[i].cap < pl->bufs[best].cap)) best = i;
    }
    if (best < 0) {
        if (pl->num == pl->cap) {
            pl->cap = pl->cap ? 2 * pl->cap : 16;
            PoolBuf* nb = (PoolBuf*)mallocCheck((size_t)pl->cap * sizeof(PoolBuf));
            if (pl->num) memcpy(nb, pl->bufs, (size_t)pl->num * sizeof(PoolBuf));
            free(pl->bufs);
            pl->bufs = nb;
        }
        best = pl->num++;
        pl->bufs[best].ptr = (floatX*)device_malloc(n * sizeof(floatX), MEM_COMM);
        pl->bufs[best].cap = n;
    }
    pl->bufs[best].in_use = 1;
    return pl->bufs[best].ptr;
}

static void pool_put(BufPool* pl, floatX* p) {
    for (int i = 0; i < pl->num; i++) {
        if (pl->bufs[i].ptr == p) {
            if (!pl->bufs[i].in_use) fatal("pool_put: buffer %p released twice", (void*)p);
            pl->bufs[i].in_use = 0;
            return;
        }
    }
    fatal("pool_put: %p is not a pool buffer", (void*)p);
}

// frees free buffers, largest first kept, until at most keep_bytes of free buffers remain
static void pool_trim(BufPool* pl, size_t keep_bytes) {
    size_t kept = 0;
    for (;;) {  // visit free buffers from the largest down
        int pick = -1;
        for (int i = 0; i < pl->num; i++) {
            if (pl->bufs[i].in_use || pl->bufs[i].cap == 0) continue;
            if (pick < 0 || pl->bufs[i].cap > pl->bufs[pick].cap) pick = i;
        }
        if (pick < 0) break;
        size_t b = pl->bufs[pick].cap * sizeof(floatX);
        if (kept + b <= keep_bytes) {
            kept += b;
            pl->bufs[pick].in_use = 2;  // visited (kept), restored below
        } else {
            device_free(pl->bufs[pick].ptr);
            pl->bufs[pick] = pl->bufs[--pl->num];
        }
    }
    for (int i = 0; i < pl->num; i++) if (pl->bufs[i].in_use == 2) pl->bufs[i].in_use = 0;
}

static void pool_free(BufPool* pl) {
    for (int i = 0; i < pl->num; i++) device_free(pl->bufs[i].ptr);
    free(pl->bufs);
    memset(pl, 0, sizeof(*pl));
}
