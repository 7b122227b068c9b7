/*
 * test_rawmap.c: a Pool's map of raw blocks (src/lua/rawmap.h) without
 * libFuzzer: the fuzz harness (tests/fuzz/fuzz_rawmap.c, which checks the
 * map against a model and aborts on a difference) replays every input of
 * tests/fuzz/corpus-rawmap, so the inputs that once failed stay checked on
 * every `make test`, not only where clang's libFuzzer is installed.
 *
 * Regression kept: corpus-rawmap/reset (libFuzzer's crash-5e431853...):
 * sixty blocks put, all reset, then lookups; l_rawmap_find(m, 0) matched an
 * empty slot (0 marks one) and returned it as a block.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/lua/rawmap.h"
#include "../fuzz/fuzz_rawmap.c"
#include "tap.h"

#define CORPUS "tests/fuzz/corpus-rawmap"

static void find_zero(void)
{
    l_rawmap m;
    uint32_t was;
    unsigned i;
    memset(&m, 0, sizeof m);
    tap_ok(l_rawmap_find(&m, 0) == NULL, "find(0) on an empty map");
    for (i = 1; i <= 60; i++) {
        l_rawblock *b;
        if (l_rawmap_reserve(&m) != 0)
            break;
        b = l_rawmap_put(&m, i * 16, 100, (void *)1, &was);
        l_rawmap_mark(&m, b, L_RAW_RESET);
    }
    tap_ok(i > 60, "sixty blocks put");
    tap_ok(l_rawmap_find(&m, 0) == NULL, "find(0) with empty slots among marked ones");
    tap_ok(l_rawmap_containing(&m, 0) == NULL, "containing(0)");
    l_rawmap_fini(&m);
}

static int replay(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;
    if (!f)
        return 0;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return 0;
    }
    buf = malloc(n ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return 0;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n); /* aborts, naming the check, on a difference */
    free(buf);
    return 1;
}

int main(void)
{
    DIR *d;
    struct dirent *e;
    int n = 0, bad = 0, reset = 0;
    find_zero();
    d = opendir(CORPUS);
    if (!d) {
        tap_skip("the corpus replay", CORPUS " is not here: run from the repository's root");
        return tap_finish();
    }
    while ((e = readdir(d)) != NULL) {
        char path[512];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", CORPUS, e->d_name);
        if (replay(path))
            n++;
        else
            bad++;
        reset |= strcmp(e->d_name, "reset") == 0;
    }
    closedir(d);
    tap_ok(bad == 0, "every corpus file read (%d unreadable)", bad);
    tap_ok(reset, "the regression input corpus-rawmap/reset is there");
    tap_ok(n > 0, "%d corpus inputs replayed against the model", n);
    return tap_finish();
}
