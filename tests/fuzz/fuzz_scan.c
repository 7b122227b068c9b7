/*
 * fuzz_scan.c: libFuzzer harness for the kernel source scanner
 * (src/core/kernel/scan.c), which reads user CUDA C before any
 * compiler does: the kernels a module defines, nested launches, barriers,
 * and the host backend's `extern __shared__` rewrite.  Every input is
 * scanned with and without the rewrite, from a buffer of exactly its size
 * (no NUL after it, so ASan sees any read past the end).  What must hold:
 * kernel names are identifiers that occur in the source, the launch line is
 * a line of the source, and the rewritten text is as long as it says, with
 * no NUL inside and every line of the source still there (the rewrite only
 * replaces declarations, so the line count cannot shrink).
 *
 *   make fuzz-scan                        bounded run over tests/fuzz/corpus-scan
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifact.h"

#include "error.h"
#include "kernel/scan.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_artifacts_beside(argc, argv);
    return 0;
}

#define EXPECT(cond, ...)                                 \
    do {                                                  \
        if (!(cond)) {                                    \
            fprintf(stderr, "fuzz_scan: " __VA_ARGS__);   \
            fprintf(stderr, " (%s)\n", #cond);            \
            abort();                                      \
        }                                                 \
    } while (0)

static size_t count_lines(const char *s, size_t n)
{
    size_t k = 1;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

static int ident(const char *s)
{
    if (!s || !*s || !(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
        return 0;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

static int occurs(const char *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; k <= n && i <= n - k; i++)
        if (memcmp(hay + i, needle, k) == 0)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *src = malloc(size ? size : 1);
    size_t lines;
    if (!src)
        return 0;
    if (size)
        memcpy(src, data, size);
    lines = count_lines(src, size);
    for (int rewrite = 0; rewrite <= 1; rewrite++) {
        cp_kscan sc;
        cp_status st;
        memset(&sc, 0x5a, sizeof sc);
        st = cp_kscan_source(src, size, rewrite, &sc);
        if (st != CP_OK) {
            /* only out of memory or a refused source: a message, no result */
            EXPECT(cp_error_msg()[0] != '\0', "failure without a message");
            continue;
        }
        EXPECT(sc.launch_line >= 0 && (size_t)sc.launch_line <= lines, "launch line %d of %zu",
               sc.launch_line, lines);
        EXPECT(sc.uses_sync == 0 || sc.uses_sync == 1, "uses_sync %d", sc.uses_sync);
        for (size_t i = 0; i < sc.nkernels; i++) {
            EXPECT(ident(sc.kernels[i]), "kernel %zu is not an identifier", i);
            EXPECT(occurs(src, size, sc.kernels[i]), "kernel '%s' is not in the source",
                   sc.kernels[i]);
        }
        if (rewrite && sc.text) {
            EXPECT(strlen(sc.text) == sc.text_len || memchr(src, 0, size),
                   "text_len %zu, strlen %zu", sc.text_len, strlen(sc.text));
            EXPECT(count_lines(sc.text, sc.text_len) >= lines, "rewrite lost lines: %zu < %zu",
                   count_lines(sc.text, sc.text_len), lines);
        }
        cp_kscan_free(&sc);
    }
    free(src);
    return 0;
}
