/*
 * host_account.c: the host backend's emulated devices (CUPOLA_HOST_DEVICES)
 * and their memory accounts: what mem_alloc, the native pools' chunks and
 * the vmm handles of each device hold.  With more than one device each gets
 * an equal share of the host's memory and is refused more as out of memory;
 * with one there is no limit but the host's.  Lock-free (atomics): every
 * part of the backend charges it, with or without the scheduler's lock.
 */
#include "host_account.h"

#include "backend.h"

#include <stdatomic.h>

static int ndevices = 1;
static size_t dev_total;                          /* each device's share; 0: no limit */
static _Atomic size_t dev_used[CP_MAX_DEVICES];  /* bytes charged */

void cp_host_account_init(int n, size_t total_each)
{
    ndevices = n < 1 ? 1 : n > CP_MAX_DEVICES ? CP_MAX_DEVICES : n;
    dev_total = ndevices > 1 ? total_each : 0;
}

int cp_host_account_devices(void)
{
    return ndevices;
}

int cp_host_account_index(int dev)
{
    return dev >= 0 && dev < ndevices ? dev : 0;
}

int cp_host_mem_charge(int dev, size_t bytes)
{
    dev = cp_host_account_index(dev);
    if (dev_total) {
        size_t cur = atomic_load(&dev_used[dev]);
        do {
            if (bytes > dev_total || cur > dev_total - bytes)
                return 0;
        } while (!atomic_compare_exchange_weak(&dev_used[dev], &cur, cur + bytes));
        return 1;
    }
    atomic_fetch_add(&dev_used[dev], bytes);
    return 1;
}

void cp_host_mem_uncharge(int dev, size_t bytes)
{
    atomic_fetch_sub(&dev_used[cp_host_account_index(dev)], bytes);
}

size_t cp_host_mem_used(int dev)
{
    return atomic_load(&dev_used[cp_host_account_index(dev)]);
}

size_t cp_host_mem_total(void)
{
    return dev_total;
}
