/*
 * test_warpsim_stream.c: test_warpsim's cases on the heap's stream variant
 * (alloc_heap_stream.cuh: CPD_HEAP_STREAM), with its event counters on.
 */
#define CPD_HEAP_STREAM 1
#define CPD_HEAP_COUNTERS 1
#include "test_warpsim.c"
