// comment __global__ void no(){}
/* block __global__ void nope() */
#define K __global__
extern "C" __global__ void red(int *o) {
  extern __shared__ int s[];
  s[threadIdx.x] = threadIdx.x; __syncthreads();
  if (threadIdx.x == 0) *o = s[0];
}
template <int N> __global__ void tmpl(int *x) { x[N] = 1; }
const char *str = "__global__ void inside_string() {}";
char c = '{';
