
7/device:GPU:0€€¨±ãŸçË""fusion.1
 	/host:CPUthread1€€¨±ãŸçËthread2€€¨±ãŸçË"

MemoryAllocation"MemoryDeallocation*addr*allocator_name*bytes_allocated*peak_bytes_in_use*	tf_op*allocation_bytes*requested_bytes*22	GPU_0_bfc"host0