/*
 * backend/nocuda.c: stands in for backend/cuda.c when the module is built
 * without the CUDA Toolkit, so the host backend still loads and
 * CUPOLA_BACKEND=cuda says why it cannot be had.
 */
#include "backend.h"

#include <stdio.h>

const cp_backend cp_backend_cuda = {.name = "cuda"};

int cp_backend_cuda_probe(char *why, size_t whylen)
{
    snprintf(why, whylen, "this build of cupola has no CUDA support (nvcc was not found)");
    return 0;
}
