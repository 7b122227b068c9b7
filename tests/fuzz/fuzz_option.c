/*
 * fuzz_option.c: libFuzzer harness for the compile option allow-list
 * (cp_cc_check_option in src/core/kernel/compile.c): user options
 * reach the system compiler's argument vector, so an accepted option must be
 * one of the documented shapes and nothing else.  Each input is split at
 * NUL bytes into options; each is checked against an independent statement
 * of the allow-list below.  Accepted: it must match.  Refused: the message
 * must say why, naming the option (or its start, when long).
 *
 * Each option is also read as a PYTORCH_CUDA_ALLOC_CONF string by the torch
 * model's parser (pool/torch_conf.c), whole and cut at every length: it must
 * not crash, a refusal must say "conf: ...", and an accepted string's
 * canonical form (cp_torch_conf_format) must parse to the same settings.
 *
 *   make fuzz-option                      bounded run over tests/fuzz/corpus-option
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact.h"

#include "error.h"
#include "kernel/compile.h"
#include "pool/torch.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_artifacts_beside(argc, argv);
    return 0;
}

#define EXPECT(cond, ...)                                   \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "fuzz_option: " __VA_ARGS__);   \
            fprintf(stderr, " (%s)\n", #cond);              \
            abort();                                        \
        }                                                   \
    } while (0)

static int in(char c, const char *set)
{
    return c && strchr(set, c) != NULL;
}

#define ALPHA "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
#define DIGIT "0123456789"

/* the allow-list of compile.h, restated */
static int allowed(const char *o)
{
    static const char *const exact[] = {
        "-rdc=true", "-rdc=false", "--relocatable-device-code=true",
        "--relocatable-device-code=false", "--use_fast_math", "-use_fast_math", "-lineinfo",
        "--generate-line-info", "-g", "-G", "--fmad=true", "--fmad=false", "-w", "-O0", "-O1",
        "-O2", "-O3", "-Os"};
    for (const char *p = o; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return 0;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strcmp(o, exact[i]) == 0)
            return 1;
    if (o[0] == '-' && (o[1] == 'D' || o[1] == 'U')) {
        const char *p = o + 2;
        if (!in(*p, ALPHA))
            return 0;
        while (in(*p, ALPHA DIGIT))
            p++;
        return *p == '\0' || (o[1] == 'D' && *p == '=');
    }
    if (o[0] == '-' && o[1] == 'I')
        return o[2] != '\0';
    {
        const char *v = NULL;
        if (strncmp(o, "-std=", 5) == 0)
            v = o + 5;
        else if (strncmp(o, "--std=", 6) == 0)
            v = o + 6;
        if (v) {
            if (*v != 'c' && strncmp(v, "gnu", 3) != 0)
                return 0;
            for (; *v; v++)
                if (!in(*v, "abcdefghijklmnopqrstuvwxyz" DIGIT "+"))
                    return 0;
            return 1;
        }
    }
    {
        const char *v = NULL;
        if (strncmp(o, "-maxrregcount=", 14) == 0)
            v = o + 14;
        else if (strncmp(o, "--maxrregcount=", 15) == 0)
            v = o + 15;
        if (v) {
            size_t n = strlen(v);
            return n >= 1 && n <= 4 && strspn(v, DIGIT) == n;
        }
    }
    return 0;
}

static int same_settings(const cp_torch_conf *a, const cp_torch_conf *b)
{
    return a->max_split_size == b->max_split_size &&
           a->max_non_split_rounding == b->max_non_split_rounding &&
           a->large_segment_size == b->large_segment_size &&
           memcmp(a->roundup_divisions, b->roundup_divisions, sizeof a->roundup_divisions) == 0 &&
           a->gc_threshold == b->gc_threshold && a->memory_fraction == b->memory_fraction &&
           a->expandable_segments == b->expandable_segments &&
           a->release_lock_on_cudamalloc == b->release_lock_on_cudamalloc &&
           a->graph_capture_record_stream_reuse == b->graph_capture_record_stream_reuse &&
           a->pinned_use_host_register == b->pinned_use_host_register &&
           a->pinned_use_background_threads == b->pinned_use_background_threads &&
           a->pinned_num_register_threads == b->pinned_num_register_threads &&
           a->pinned_reserve_segment_size_mb == b->pinned_reserve_segment_size_mb &&
           a->host_keys == b->host_keys;
}

/* A conf string: parsed, and if accepted, its canonical form reparsed. */
static void check_conf(const char *o, size_t n)
{
    cp_torch_conf c, d;
    char canon[1024];
    size_t k;
    if (cp_torch_conf_parse(o, n, &c) != CP_OK) {
        EXPECT(strncmp(cp_error_msg(), "conf: ", 6) == 0, "conf refusal '%s'", cp_error_msg());
        return;
    }
    k = cp_torch_conf_format(&c, canon, sizeof canon);
    EXPECT(k < sizeof canon, "canonical conf of %zu bytes", k);
    EXPECT(cp_torch_conf_parse(canon, k, &d) == CP_OK, "canonical '%s' refused: %s", canon,
           cp_error_msg());
    EXPECT(same_settings(&c, &d), "'%.*s' and its canonical '%s' differ", (int)n, o, canon);
    EXPECT(c.large_segment_size > (UINT64_C(10) << 20), "large_segment_size of 10 MiB or less");
    EXPECT(c.max_split_size >= c.large_segment_size, "max_split_size below large_segment_size");
    EXPECT(c.max_non_split_rounding >= c.large_segment_size,
           "max_non_split_rounding below large_segment_size");
    EXPECT(c.gc_threshold >= 0.0 && c.gc_threshold < 1.0, "gc threshold out of range");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    size_t i = 0;
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    while (i <= size) {
        const char *o = buf + i;
        size_t n = strlen(o);
        cp_status st = cp_cc_check_option(o);
        int want = allowed(o);
        EXPECT((st == CP_OK) == want, "option '%s' %s, the allow-list says %s", o,
               st == CP_OK ? "accepted" : "refused", want ? "allowed" : "not allowed");
        if (st != CP_OK) {
            EXPECT(st == CP_ERR_INVALID, "status %d", (int)st);
            EXPECT(strstr(cp_error_msg(), "option") != NULL, "message '%s'",
                   cp_error_msg());
        }
        check_conf(o, n);
        if (n < 256) {
            size_t cut;
            for (cut = 0; cut < n; cut++)
                check_conf(o, cut);
        }
        i += n + 1;
    }
    EXPECT(cp_cc_check_option(NULL) == CP_ERR_INVALID, "NULL accepted");
    free(buf);
    return 0;
}
