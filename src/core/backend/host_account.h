/*
 * host_account.h: the host backend's emulated devices and their memory
 * accounts (host_account.c); internal to backend/.
 */
#ifndef CUPOLA_HOST_ACCOUNT_H
#define CUPOLA_HOST_ACCOUNT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* n devices (clamped to 1..CP_MAX_DEVICES), each with total_each bytes when
 * n > 1; called once, before any other function here. */
void cp_host_account_init(int n, size_t total_each);
int cp_host_account_devices(void);
/* dev when it names a device, else 0. */
int cp_host_account_index(int dev);
/* charge refuses (returns 0) what would take dev past its share. */
int cp_host_mem_charge(int dev, size_t bytes);
void cp_host_mem_uncharge(int dev, size_t bytes);
size_t cp_host_mem_used(int dev);
size_t cp_host_mem_total(void); /* each device's share; 0: no limit */

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_HOST_ACCOUNT_H */
