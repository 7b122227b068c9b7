/*
 * test_warpsim_knobs.c: test_warpsim's cases on the heap's variants of its
 * slots and claims (alloc_heap.cuh: CPD_HEAP_SLOTS_WIDE, CPD_HEAP_PROBE,
 * CPD_HEAP_SPREAD_REFILL, CPD_HEAP_BULK_DENSE, CPD_HEAP_TAKE_LINE), all at
 * once.
 */
#define CPD_HEAP_SLOTS_WIDE 1
#define CPD_HEAP_PROBE 4
#define CPD_HEAP_SPREAD_REFILL 1
#define CPD_HEAP_BULK_DENSE 1
#define CPD_HEAP_TAKE_LINE 1
#include "test_warpsim.c"
