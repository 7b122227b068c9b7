
7/device:GPU:0€€¨±ãŸçË""fusion.1
 	/host:CPUthread1€€¨±ãŸçËthread2€€¨±ãŸçË"

MemoryAllocation"MemoryDeallocation*requested_bytes*allocator_name*bytes_allocated*	tf_op*peak_bytes_in_use*addr*allocation_bytes*22	GPU_0_bfc"host0