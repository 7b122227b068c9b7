extern __shared__ float a[], b[]; extern  __shared__ __align__(16) double d[];
__global__ void k(float *o) { o[0] = a[0] + (float)d[0]; }
auto raw = R"x(__global__ void not_a_kernel() {})x";
#if 0
__global__ void disabled() {}
#endif
