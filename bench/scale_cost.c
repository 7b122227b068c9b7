/*
 * scale_cost.c: what a prediction at another size costs where it is
 * slowest (issue 40's aims: a prediction and its advice under 2 s for a
 * 5,000-allocation step, the search for the largest size under 10 s):
 *   - a trace made from events whose labels are long stacks (C++ frames
 *     first, as PyTorch's stacks="all" writes them), every allocation's
 *     label its own pointer or one shared per site;
 *   - cp_trace_scale over two recordings of N allocations of which a share
 *     follow no size law (an affine size), with stacks or without (every
 *     request one key: matched by position), and cp_trace_rescale.
 *
 *   build/bench/scale_cost [N]     (N: allocations a recording, 164000)
 *
 * Prints one line per case: CPU seconds of this process (of the call
 * alone: making the events is not counted).  Built by
 * `make build/bench/scale_cost`; never installed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trace/scale.h"
#include "trace/trace.h"

#define SITES 2000

static double last_events; /* the last cp_trace_from_events's seconds */

static double cpu(void)
{
    return (double)clock() / CLOCKS_PER_SEC;
}

/* A stack as PyTorch's stacks="all" writes it, one frame a line: the
 * allocator's C++ frames, then the site's Python frames. */
static char *stack_of(size_t site)
{
    static const char *cxx[] = {
        "??:0 torch::unwind::unwind()",
        "??:0 torch::CapturedTraceback::gather(bool, bool, bool)",
        "??:0 c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed "
        "char, unsigned long, CUstream_st*)",
        "??:0 c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, "
        "signed char, unsigned long, CUstream_st*)",
        "??:0 at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, "
        "c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)",
        "??:0 at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, "
        "std::optional<c10::Device>, std::optional<c10::MemoryFormat>)",
        "??:0 at::native::empty_cuda(c10::ArrayRef<long>, std::optional<c10::ScalarType>, "
        "std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, "
        "std::optional<c10::MemoryFormat>)",
        "??:0 c10::impl::BoxedKernelWrapper<at::Tensor (c10::ArrayRef<c10::SymInt>, "
        "std::optional<c10::ScalarType>)>::call(c10::BoxedKernel const&, "
        "c10::OperatorHandle const&, c10::DispatchKeySet)",
    };
    size_t n = 0, cap = 8192, i, k;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    for (k = 0; k < 4; k++)
        for (i = 0; i < sizeof cxx / sizeof *cxx; i++)
            n += (size_t)snprintf(s + n, cap - n, "%s\n", cxx[i]);
    n += (size_t)snprintf(s + n, cap - n, "/site-packages/torch/nn/modules/module.py:1751 "
                          "_call_impl\n/home/u/model.py:%zu forward\n/home/u/train.py:%zu step",
                          40 + site % 97, 300 + site);
    return s;
}

/* One recording at size s: allocation i of site i % SITES, freed after the
 * next; its size in proportion to s, or (one in `every`) 5000 + 700 s. */
static cp_status recording(size_t n, uint64_t s, size_t every, char **sites, int shared,
                           cp_trace **out)
{
    cp_trace_event_in *ev = calloc(2 * n, sizeof *ev);
    char **own = shared || !sites ? NULL : calloc(n, sizeof *own);
    size_t i, k = 0;
    cp_status st;
    if (!ev || (!shared && sites && !own))
        return CP_ERR_OOM;
    for (i = 0; i < n; i++) {
        cp_trace_event_in *e = &ev[k++];
        e->pointer = i + 1;
        e->size = every && i % every == every - 1 ? 5000 + 700 * s : 4096 * s * (1 + i % 7);
        e->time_us = (double)k;
        if (sites) {
            if (shared)
                e->label = sites[i % SITES];
            else {
                own[i] = strdup(sites[i % SITES]);
                e->label = own[i];
            }
        }
        if (i) {
            e = &ev[k++];
            e->is_free = 1;
            e->pointer = i;
            e->time_us = (double)k;
        }
    }
    {
        double t0 = cpu();
        st = cp_trace_from_events(s == 2 ? "b2" : "b4", "scaled", ev, k, out);
        last_events = cpu() - t0;
    }
    if (own)
        for (i = 0; i < n; i++)
            free(own[i]);
    free(own);
    free(ev);
    return st;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 164000, i;
    char *sites[SITES];
    static const struct {
        const char *what;
        int stacks;
        size_t every;
    } cases[] = {{"stacks, every size by a law", 1, 0},
                 {"stacks, a quarter by no law", 1, 4},
                 {"no frames, a quarter by no law", 0, 4}};
    for (i = 0; i < SITES; i++)
        if (!(sites[i] = stack_of(i)))
            return 1;
    printf("%zu allocations a recording, %d sites, stacks of %zu bytes\n", n, SITES,
           strlen(sites[0]));
    {
        cp_trace *t = NULL;
        if (recording(n, 2, 0, sites, 1, &t) != CP_OK)
            return 1;
        printf("from_events, one label pointer a site: %.3f s\n", last_events);
        cp_trace_free(t);
        if (recording(n, 2, 0, sites, 0, &t) != CP_OK)
            return 1;
        printf("from_events, one label pointer an allocation: %.3f s\n", last_events);
        cp_trace_free(t);
    }
    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        cp_trace *a = NULL, *b = NULL, *t = NULL, *u = NULL;
        const cp_trace *recs[2];
        uint64_t sizes[2] = {2, 4};
        const cp_scale_info *in;
        double t0;
        if (recording(n, 2, cases[i].every, cases[i].stacks ? sites : NULL, 1, &a) != CP_OK ||
            recording(n, 4, cases[i].every, cases[i].stacks ? sites : NULL, 1, &b) != CP_OK)
            return 1;
        recs[0] = a;
        recs[1] = b;
        t0 = cpu();
        if (cp_trace_scale(recs, sizes, 2, 8, &t) != CP_OK) {
            printf("%s: refused: %s\n", cases[i].what, cp_error_msg());
            return 1;
        }
        in = cp_trace_scale_info(t);
        printf("%s: scale %.3f s (matched %zu, by rule %zu)", cases[i].what, cpu() - t0,
               in->matched, in->by_rule);
        t0 = cpu();
        if (cp_trace_rescale(t, 16, &u) != CP_OK)
            return 1;
        printf(", rescale %.3f s\n", cpu() - t0);
        cp_trace_free(u);
        cp_trace_free(t);
        cp_trace_free(a);
        cp_trace_free(b);
    }
    for (i = 0; i < SITES; i++)
        free(sites[i]);
    return 0;
}
