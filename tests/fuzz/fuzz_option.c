/*
 * fuzz_option.c: libFuzzer harness for the compile option allow-list
 * (cp_cc_check_option in src/core/kernel/compile.c): user options
 * reach the system compiler's argument vector, so an accepted option must be
 * one of the documented shapes and nothing else.  Each input is split at
 * NUL bytes into options; each is checked against an independent statement
 * of the allow-list below.  Accepted: it must match.  Refused: the message
 * must say why, naming the option (or its start, when long).
 *
 *   make fuzz-option                      bounded run over tests/fuzz/corpus-option
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kernel/compile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
        i += n + 1;
    }
    EXPECT(cp_cc_check_option(NULL) == CP_ERR_INVALID, "NULL accepted");
    free(buf);
    return 0;
}
