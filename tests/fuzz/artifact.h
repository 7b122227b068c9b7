/*
 * artifact.h: where a fuzz target writes what it finds.  libFuzzer writes a
 * crashing input (crash-<sha1>, leak-, timeout-, oom-, slow-unit-) into the
 * current directory unless told -artifact_prefix; a target run by hand from
 * the repository's root so left one there, and it was committed.  Each
 * harness's LLVMFuzzerInitialize calls fuzz_artifacts_beside(), which adds
 * -artifact_prefix=<the binary's folder>/ (build-fuzz/) unless the command
 * line names an artifact path itself (the Makefile's targets do).
 */
#ifndef CUPOLA_FUZZ_ARTIFACT_H
#define CUPOLA_FUZZ_ARTIFACT_H

#include <stdlib.h>
#include <string.h>

static inline void fuzz_artifacts_beside(int *argc, char ***argv)
{
    static char prefix[4096 + 32];
    static char **args;
    const char *self = (*argv)[0], *slash;
    int i;
    for (i = 1; i < *argc; i++)
        if (!strncmp((*argv)[i], "-artifact_prefix=", 17) ||
            !strncmp((*argv)[i], "-exact_artifact_path=", 21))
            return;
    slash = self ? strrchr(self, '/') : NULL;
    if (!slash || (size_t)(slash - self) + 1 > 4096)
        return; /* run from its own folder: the current directory is it */
    args = malloc(((size_t)*argc + 2) * sizeof *args);
    if (!args)
        return;
    memcpy(prefix, "-artifact_prefix=", 17);
    memcpy(prefix + 17, self, (size_t)(slash - self) + 1);
    prefix[17 + (slash - self) + 1] = '\0';
    /* flags before inputs: libFuzzer reads every "-name=value" wherever it
     * stands, but keeps the program's name first */
    args[0] = (*argv)[0];
    args[1] = prefix;
    for (i = 1; i < *argc; i++)
        args[i + 1] = (*argv)[i];
    args[*argc + 1] = NULL;
    *argc += 1;
    *argv = args;
}

#endif
