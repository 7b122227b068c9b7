/*
 * test_vmm.c: the vmm pool (pool/vmm.c) when the device's virtual memory
 * calls fail half way through an allocation (TAP output).  The fake backend
 * (fake_backend.h) with virtual memory calls of this file's own: address
 * ranges and handles are only numbers, counted so that a handle or a
 * mapping the pool loses track of shows, and a map can be made to fail.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_backend.h"
#include "pool/resource.h"
#include "tap.h"

#define G (UINT64_C(2) << 20)

static uint64_t vf_next = UINT64_C(0x100000000000);
static uint64_t vf_handles, vf_maps; /* live handles, live mappings */
static int vf_fail_map;               /* the next vm_map fails */

static cp_status vf_granularity(int dev, size_t *out)
{
    (void)dev;
    *out = G;
    return CP_OK;
}

static cp_status vf_reserve(int dev, void **out, size_t bytes)
{
    (void)dev;
    *out = (void *)(uintptr_t)vf_next;
    vf_next += (bytes + G - 1) / G * G + G;
    return CP_OK;
}

static cp_status vf_free_range(int dev, void *p, size_t bytes)
{
    (void)dev, (void)p, (void)bytes;
    return CP_OK;
}

static cp_status vf_create(int dev, uint64_t *handle, size_t bytes)
{
    static uint64_t next;
    (void)dev, (void)bytes;
    *handle = ++next;
    vf_handles++;
    return CP_OK;
}

static cp_status vf_release(int dev, uint64_t handle, size_t bytes)
{
    (void)dev, (void)handle, (void)bytes;
    vf_handles--;
    return CP_OK;
}

static cp_status vf_map(int dev, void *p, size_t bytes, uint64_t handle)
{
    (void)dev, (void)p, (void)bytes, (void)handle;
    if (vf_fail_map) {
        vf_fail_map = 0;
        return cp_error_set(CP_ERR_BACKEND, "vm_map: refused by the test");
    }
    vf_maps++;
    return CP_OK;
}

static cp_status vf_unmap(int dev, void *p, size_t bytes)
{
    (void)dev, (void)p, (void)bytes;
    vf_maps--;
    return CP_OK;
}

static cp_status vf_set_access(int dev, void *p, size_t bytes)
{
    (void)dev, (void)p, (void)bytes;
    return CP_OK;
}

static cp_status vf_get_info(size_t *free_bytes, size_t *total_bytes)
{
    *free_bytes = *total_bytes = (size_t)8 << 30;
    return CP_OK;
}

static cp_backend vf_backend;

static cp_resource *vmm_pool(void)
{
    cp_pool_opts o;
    cp_resource *r = NULL;
    memset(&o, 0, sizeof o);
    o.kind = "vmm";
    o.upstream = CP_UP_DEVICE;
    o.grow = 1;
    o.alignment = 256;
    /* idle pages kept whatever happens: every page the test needs is new */
    o.release_threshold = UINT64_MAX;
    o.release_threshold_set = 1;
    if (cp_pool_create(&r, &o) != CP_OK)
        return NULL;
    return r;
}

/* A block over [unmapped page, idle page, idle page] whose first page's map
 * fails: the block is given back, the two idle pages stay idle once each
 * (they were put back on the idle list a second time: the list looped and
 * the idle count ran over the pages mapped). */
static void test_map_fails_before_idle_pages(void)
{
    cp_resource *r = vmm_pool();
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    cp_stats st;
    cp_status s;

    tap_ok(r != NULL, "a vmm pool over the test's virtual memory");
    if (!r)
        return;
    tap_ok(cp_resource_alloc(r, G, NULL, &a) == CP_OK && cp_resource_alloc(r, 2 * G, NULL, &b) == CP_OK,
           "a block of one page and one of two after it");
    cp_resource_free(r, a, G, NULL);
    cp_resource_trim(r, 0); /* the first page unmapped */
    cp_resource_free(r, b, 2 * G, NULL);
    cp_resource_stats(r, &st);
    tap_ok(st.pages_mapped == 2 && vf_maps == 2, "two idle pages mapped after an unmapped one (%llu)",
           (unsigned long long)st.pages_mapped);
    vf_fail_map = 1;
    s = cp_resource_alloc(r, 3 * G, NULL, &c);
    tap_ok(s == CP_ERR_BACKEND && c == NULL, "a block over the three pages fails with the map");
    cp_resource_stats(r, &st);
    tap_ok(st.pages_mapped == 2 && vf_maps == 2 && st.used == 0,
           "the two idle pages are still mapped, nothing live (%llu mapped)",
           (unsigned long long)st.pages_mapped);
    tap_ok(cp_resource_alloc(r, 3 * G, NULL, &d) == CP_OK, "the same block served once the map works");
    cp_resource_stats(r, &st);
    tap_ok(st.pages_mapped == 3 && vf_maps == 3 && vf_handles == 3,
           "its three pages mapped, two of them the idle ones (%llu)",
           (unsigned long long)st.pages_mapped);
    cp_resource_free(r, d, 3 * G, NULL);
    tap_ok(cp_resource_trim(r, 0) == CP_OK, "trim(0)");
    cp_resource_stats(r, &st);
    tap_ok(st.pages_mapped == 0 && st.reserved == 0 && vf_maps == 0 && vf_handles == 0,
           "every page unmapped and released (%llu mapped, %llu handles)",
           (unsigned long long)st.pages_mapped, (unsigned long long)vf_handles);
    cp_resource_destroy(r);
    tap_ok(vf_maps == 0 && vf_handles == 0, "nothing left on the device after destroy");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    vf_backend = fake_backend;
    vf_backend.mem_get_info = vf_get_info;
    vf_backend.vm_granularity = vf_granularity;
    vf_backend.vm_reserve = vf_reserve;
    vf_backend.vm_free_range = vf_free_range;
    vf_backend.vm_create = vf_create;
    vf_backend.vm_release = vf_release;
    vf_backend.vm_map = vf_map;
    vf_backend.vm_unmap = vf_unmap;
    vf_backend.vm_set_access = vf_set_access;
    cp_be = &vf_backend;
    alarm(60); /* a looping idle list must fail the test, not hang it */
    test_map_fails_before_idle_pages();
    return tap_finish();
}
