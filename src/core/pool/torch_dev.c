/*
 * pool/torch_dev.c: the devices the torch model (pool/torch.c) takes memory
 * from: cudaMalloc/cudaFree, and for expandable segments an address range
 * with pages mapped into it and unmapped again.
 *
 * Upstream "device": the backend's calls (cp_be): mem_alloc_on/mem_free_on for
 * segments; vm_reserve, vm_create + vm_map + vm_set_access per page,
 * vm_unmap + vm_release, vm_free_range for expandable segments, with one
 * physical handle per page as PyTorch makes them (2 MiB pages for the small
 * pool, 20 MiB for the large).  The device is synchronized before memory is
 * given back, as cudaFree does (PyTorch synchronizes before it unmaps).
 *
 * Upstream "virtual": addresses only, from an address model standing in for
 * the CUDA driver's placement, which decides best-fit ties between blocks of
 * equal size (PyTorch prefers the lower address):
 *   bump    every segment above the last one, 2 MiB aligned, never reused.
 *   driver  what the recorded H100 runs show the driver doing (studied in
 *           bench/results/torch_model.md): sizes are taken in whole 2 MiB
 *           pages; a request goes to the top of the highest free range of
 *           the span already reserved that holds it; when none does, a new
 *           reservation of the request rounded up to 32 MiB is made
 *           directly below the lowest one so far (the driver grows its
 *           address space downwards), and its unused tail stays free for
 *           later requests.  Freed ranges are free again at once and merge
 *           with free neighbours; one at the bottom of the span goes back
 *           to the space never reserved.
 *   Address ranges for expandable segments (1 1/8 of the device's memory
 *   each) come from the same model, above everything else, one after the
 *   other.
 * Over "virtual" a map never fails and costs nothing: the model's own limit
 * (PyTorch's allowed maximum) is the only one.
 */
#include "torch.h"

#include <stdlib.h>
#include <string.h>

#include "ptrmap.h"
#include "resource_impl.h"

#define PAGE2M (UINT64_C(2) << 20)
#define CHUNK32M (UINT64_C(32) << 20)
/* The span the virtual device hands out: segments below TOP, growing down;
 * address ranges for expandable segments from RANGES up. */
#define VIRT_TOP (UINT64_C(0x7f0000000000))
#define VIRT_RANGES (UINT64_C(0x100000000))

typedef struct range {
    uint64_t lo, hi; /* [lo, hi) */
} range;

/* A sorted set of disjoint ranges. */
typedef struct rset {
    range *r;
    size_t n, cap;
} rset;

struct cp_torch_dev {
    cp_upstream_kind up;
    int device;
    cp_torch_addr_model am;
    uint64_t memory;      /* the device's memory (0 over virtual) */
    /* virtual: */
    rset free_;           /* free parts of the reserved span (driver model) */
    uint64_t low;         /* the lowest reservation so far (driver model) */
    uint64_t bump;        /* the next address (bump model) */
    uint64_t ranges_next; /* the next expandable address range */
    /* device: one physical handle per mapped page, by page address */
    cp_ptrmap handles;
};

static int rset_grow(rset *s)
{
    size_t cap = s->cap ? 2 * s->cap : 16;
    range *r = (range *)realloc(s->r, cap * sizeof *r);
    if (!r)
        return -1;
    s->r = r;
    s->cap = cap;
    return 0;
}

/* Adds [lo, hi) (disjoint from what is there), merging with neighbours. */
static int rset_add(rset *s, uint64_t lo, uint64_t hi)
{
    size_t a = 0, b = s->n;
    if (lo >= hi)
        return 0;
    while (a < b) { /* first range with lo > new lo */
        size_t m = (a + b) / 2;
        if (s->r[m].lo < lo)
            a = m + 1;
        else
            b = m;
    }
    if (a > 0 && s->r[a - 1].hi == lo) {
        s->r[a - 1].hi = hi;
        if (a < s->n && s->r[a].lo == hi) {
            s->r[a - 1].hi = s->r[a].hi;
            memmove(&s->r[a], &s->r[a + 1], (s->n - a - 1) * sizeof *s->r);
            s->n--;
        }
        return 0;
    }
    if (a < s->n && s->r[a].lo == hi) {
        s->r[a].lo = lo;
        return 0;
    }
    if (s->n == s->cap && rset_grow(s) != 0)
        return -1;
    memmove(&s->r[a + 1], &s->r[a], (s->n - a) * sizeof *s->r);
    s->r[a].lo = lo;
    s->r[a].hi = hi;
    s->n++;
    return 0;
}

/* Removes [lo, hi) from the set (it may cover parts of several ranges). */
static int rset_take(rset *s, uint64_t lo, uint64_t hi)
{
    size_t i = 0;
    while (i < s->n) {
        range *r = &s->r[i];
        if (r->hi <= lo || r->lo >= hi) {
            i++;
            continue;
        }
        if (r->lo < lo && r->hi > hi) { /* split in two */
            uint64_t end = r->hi;
            r->hi = lo;
            if (s->n == s->cap && rset_grow(s) != 0)
                return -1;
            memmove(&s->r[i + 2], &s->r[i + 1], (s->n - i - 1) * sizeof *s->r);
            s->r[i + 1].lo = hi;
            s->r[i + 1].hi = end;
            s->n++;
            return 0;
        }
        if (r->lo < lo) {
            r->hi = lo;
            i++;
        } else if (r->hi > hi) {
            r->lo = hi;
            i++;
        } else {
            memmove(&s->r[i], &s->r[i + 1], (s->n - i - 1) * sizeof *s->r);
            s->n--;
        }
    }
    return 0;
}

cp_status cp_torch_dev_create(cp_torch_dev **out, cp_upstream_kind up, int device,
                              cp_torch_addr_model am)
{
    cp_torch_dev *d = (cp_torch_dev *)calloc(1, sizeof *d);
    *out = NULL;
    if (!d)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    d->up = up;
    d->device = device;
    d->am = am;
    d->low = VIRT_TOP;
    d->bump = VIRT_RANGES / 2;
    d->ranges_next = VIRT_RANGES;
    if (up != CP_UP_VIRTUAL) {
        size_t fr = 0, total = 0;
        if (up != CP_UP_DEVICE) {
            free(d);
            return cp_error_set(CP_ERR_INVALID, "a torch pool's upstream is \"device\" or "
                                "\"virtual\", not \"%s\"", cp_upstream_name(up));
        }
        if (!cp_be)
            return free(d), cp_error_set(CP_ERR_INVALID, "no backend selected");
        if (cp_be->mem_get_info_on ? cp_be->mem_get_info_on(device, &fr, &total) == CP_OK
                                   : cp_be->mem_get_info(&fr, &total) == CP_OK)
            d->memory = total;
        if (cp_ptrmap_init(&d->handles, 64) != 0) {
            free(d);
            return cp_error_set(CP_ERR_OOM, "out of host memory");
        }
    }
    *out = d;
    return CP_OK;
}

void cp_torch_dev_destroy(cp_torch_dev *d)
{
    if (!d)
        return;
    free(d->free_.r);
    cp_ptrmap_fini(&d->handles);
    free(d);
}

int cp_torch_dev_is_virtual(const cp_torch_dev *d)
{
    return d->up == CP_UP_VIRTUAL;
}

uint64_t cp_torch_dev_memory(cp_torch_dev *d)
{
    return d->memory;
}

/* v rounded up to a multiple of a; 0 when that passes 2^64 - 1 (callers
 * that round a size refuse it then). */
static uint64_t up_to(uint64_t v, uint64_t a)
{
    uint64_t r = v / a * a;
    return r == v ? r : r + a < r ? 0 : r + a;
}

/* The driver model's placement of n bytes (whole 2 MiB pages): the highest
 * free range that holds them, at its top; else a new reservation below the
 * lowest one. */
static cp_status driver_place(cp_torch_dev *d, uint64_t n, uint64_t *addr)
{
    size_t i;
    uint64_t take = up_to(n, PAGE2M), chunk;
    if (take < n || (chunk = up_to(take, CHUNK32M)) < take)
        return cp_error_set(CP_ERR_OOM, "out of memory: %llu bytes are more than any device "
                            "holds", (unsigned long long)n);
    for (i = d->free_.n; i-- > 0;) {
        range *r = &d->free_.r[i];
        if (r->hi - r->lo >= take) {
            *addr = r->hi - take;
            return rset_take(&d->free_, r->hi - take, r->hi) == 0
                       ? CP_OK
                       : cp_error_set(CP_ERR_OOM, "out of host memory");
        }
    }
    if (chunk > d->low - VIRT_RANGES * 64)
        return cp_error_set(CP_ERR_OOM, "out of memory: the virtual address space is exhausted");
    d->low -= chunk;
    *addr = d->low;
    if (rset_add(&d->free_, d->low + take, d->low + chunk) != 0)
        return cp_error_set(CP_ERR_OOM, "out of host memory");
    return CP_OK;
}

cp_status cp_torch_dev_malloc(cp_torch_dev *d, uint64_t size, uint64_t *addr)
{
    if (d->up == CP_UP_VIRTUAL) {
        if (d->am == CP_TORCH_ADDR_BUMP) {
            uint64_t step = up_to(size, PAGE2M);
            if (step < size || d->bump > VIRT_TOP - step)
                return cp_error_set(CP_ERR_OOM, "out of memory: the virtual address space is "
                                    "exhausted");
            *addr = d->bump;
            d->bump += step;
            return CP_OK;
        }
        return driver_place(d, size, addr);
    }
    {
        void *p = NULL;
        cp_status st = cp_be->mem_alloc_on ? cp_be->mem_alloc_on(d->device, &p, size, CP_MEM_DEVICE)
                                           : cp_be->mem_alloc(&p, size, CP_MEM_DEVICE);
        if (st == CP_OK)
            *addr = (uint64_t)(uintptr_t)p;
        return st;
    }
}

static void dev_sync(cp_torch_dev *d)
{
    if (cp_be->device_synchronize_on)
        cp_be->device_synchronize_on(d->device);
    else
        cp_be->device_synchronize();
}

void cp_torch_dev_free(cp_torch_dev *d, uint64_t addr, uint64_t size)
{
    if (d->up == CP_UP_VIRTUAL) {
        if (d->am == CP_TORCH_ADDR_DRIVER) {
            rset_add(&d->free_, addr, addr + up_to(size, PAGE2M));
            /* a free range at the bottom joins the space never reserved */
            if (d->free_.n && d->free_.r[0].lo == d->low) {
                d->low = d->free_.r[0].hi;
                memmove(&d->free_.r[0], &d->free_.r[1], (d->free_.n - 1) * sizeof *d->free_.r);
                d->free_.n--;
            }
        }
        return;
    }
    dev_sync(d);
    if (cp_be->mem_free_on)
        cp_be->mem_free_on(d->device, (void *)(uintptr_t)addr, CP_MEM_DEVICE);
    else
        cp_be->mem_free((void *)(uintptr_t)addr, CP_MEM_DEVICE);
}

void cp_torch_dev_claim(cp_torch_dev *d, uint64_t addr, uint64_t size)
{
    uint64_t end;
    if (d->up != CP_UP_VIRTUAL)
        return;
    end = addr + up_to(size, PAGE2M);
    if (d->am == CP_TORCH_ADDR_BUMP) {
        if (end > d->bump && end <= VIRT_TOP)
            d->bump = end;
        return;
    }
    /* Recorded addresses lie wherever the driver put them: the model's own
     * span starts below the lowest, and what was given is not free. */
    rset_take(&d->free_, addr, end);
    if (addr < d->low && addr > VIRT_RANGES * 64)
        d->low = addr & ~(CHUNK32M - 1);
}

cp_status cp_torch_dev_reserve(cp_torch_dev *d, uint64_t size, uint64_t page, uint64_t *addr)
{
    if (d->up == CP_UP_VIRTUAL) {
        uint64_t a = up_to(d->ranges_next, page);
        if (a + size < a || a + size > VIRT_TOP / 2)
            return cp_error_set(CP_ERR_OOM, "out of memory: the virtual address space is "
                                "exhausted");
        *addr = a;
        d->ranges_next = a + size;
        return CP_OK;
    }
    {
        void *p = NULL;
        cp_status st;
        if (!cp_be->vm_reserve)
            return cp_error_set(CP_ERR_UNSUPPORTED, "expandable segments need the driver's "
                                "virtual memory management, which this backend lacks");
        st = cp_be->vm_reserve(d->device, &p, size);
        if (st == CP_OK)
            *addr = (uint64_t)(uintptr_t)p;
        return st;
    }
}

void cp_torch_dev_unreserve(cp_torch_dev *d, uint64_t addr, uint64_t size)
{
    if (d->up == CP_UP_VIRTUAL)
        return;
    cp_be->vm_free_range(d->device, (void *)(uintptr_t)addr, size);
}

cp_status cp_torch_dev_map(cp_torch_dev *d, uint64_t addr, uint64_t size, uint64_t page)
{
    uint64_t off;
    cp_status st = CP_OK;
    if (d->up == CP_UP_VIRTUAL)
        return CP_OK;
    for (off = 0; off < size && st == CP_OK; off += page) {
        uint64_t h = 0;
        void *p = (void *)(uintptr_t)(addr + off);
        st = cp_be->vm_create(d->device, &h, page);
        if (st != CP_OK)
            break;
        st = cp_be->vm_map(d->device, p, page, h);
        if (st != CP_OK) {
            cp_be->vm_release(d->device, h, page);
            break;
        }
        if (cp_ptrmap_put(&d->handles, addr + off, (void *)(uintptr_t)(h + 1)) != 0) {
            cp_be->vm_unmap(d->device, p, page);
            cp_be->vm_release(d->device, h, page);
            st = cp_error_set(CP_ERR_OOM, "out of host memory");
            break;
        }
    }
    if (st == CP_OK)
        st = cp_be->vm_set_access(d->device, (void *)(uintptr_t)addr, size);
    if (st != CP_OK) {
        /* Give back what this call mapped: PyTorch releases the handles it
         * made when the device refuses one (and maps nothing). */
        cp_torch_dev_unmap(d, addr, off, page);
        if (st != CP_ERR_OOM)
            return st;
        return cp_error_set(CP_ERR_OOM, "out of memory: the device refused a page");
    }
    return CP_OK;
}

void cp_torch_dev_unmap(cp_torch_dev *d, uint64_t addr, uint64_t size, uint64_t page)
{
    uint64_t off;
    if (d->up == CP_UP_VIRTUAL)
        return;
    dev_sync(d);
    for (off = 0; off < size; off += page) {
        void *v = cp_ptrmap_del(&d->handles, addr + off);
        if (!v)
            continue;
        cp_be->vm_unmap(d->device, (void *)(uintptr_t)(addr + off), page);
        cp_be->vm_release(d->device, (uint64_t)(uintptr_t)v - 1, page);
    }
}
