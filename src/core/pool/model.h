/*
 * model.h: the registry of pool kinds ("models").
 *
 * A model registers once, as one cp_model row: its name, its constructor,
 * the options it takes beyond the common ones (one descriptor each: name,
 * type, where it is stored, default, what a check of its value says), the
 * common options it refuses, and its traits.  Everything that knows pool
 * kinds reads the rows: cp_pool_create (create.c) finds the constructor,
 * the spec string parser (spec.c, "tlsf,reuse=stream") and cupola.pool{...}
 * (src/lua/pool_opts.c) read options through the same descriptors, the
 * serving policy, the replay and advise read the traits, and Lua sees them
 * all through cupola.pool_kinds().
 *
 * The models cupola ships are the rows of model.c's list (one name each,
 * the model's file defines cp_<name>_model); a model from elsewhere (the
 * tests' tests/c/model_bump.c) calls cp_model_register before any pool is
 * made.  docs/models.md says how to add one.
 *
 * Plain C: never includes lua.h.  Compiles as C and C++.
 */
#ifndef CUPOLA_MODEL_H
#define CUPOLA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "resource.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The types an option's value has.  Each parser reads its own form of
 * them (a Lua value, or the text of a spec) and says so in its messages;
 * the value stored is the same. */
typedef enum cp_opt_type {
    CP_OPT_SIZE = 0, /* uint64_t: bytes (4096, "64KiB", "1.5GiB"), at most 2^63 - 1 */
    CP_OPT_U32,      /* uint64_t: a non-negative integer (a spec's text: 0 to 2^32 - 1) */
    CP_OPT_BOOL,     /* int: 0 or 1 (the default may be -1: the model decides) */
    CP_OPT_NUMBER,   /* double: from min to max */
    CP_OPT_CHOICE,   /* int: the index of one of choice(0), choice(1), ... */
    CP_OPT_STRING    /* const char *: owned by the caller (the option table, the spec's buffer) */
} cp_opt_type;

/* Flags of an option. */
#define CP_OPT_NO_SPEC 0x1u /* cupola.pool{} takes it, a spec string does not */
#define CP_OPT_BINDING 0x2u /* the binding reads it itself (plugin's source, which
                               it compiles into path): the core only knows its name */
#define CP_OPT_MARK 0x4u    /* giving it at all (0 included) sets release_threshold_set */

typedef struct cp_opt {
    const char *name;
    cp_opt_type type;
    size_t offset;         /* in cp_pool_opts (a common option) or in the model's options */
    long long def;         /* default of sizes, counts, booleans and choices */
    double num_def, lo, hi; /* CP_OPT_NUMBER: its default and range */
    const char *(*choice)(int i); /* CP_OPT_CHOICE: the names, NULL past the last */
    const char *what;      /* CP_OPT_STRING: what the string is, for messages
                              ("PYTORCH_CUDA_ALLOC_CONF syntax"); NULL: a plain string */
    /* NULL, or a check of a value given (v points at it, stored as the type
     * says): CP_ERR_INVALID and a message that starts "option '<name>'". */
    cp_status (*check)(const struct cp_opt *d, const void *v);
    unsigned flags;
} cp_opt;

/* Traits of a model. */
#define CP_MODEL_OWN_CLOCK 0x1u   /* replays on its own clock: it decides nothing by the
                                     recording's time (the frameworks' models) */
#define CP_MODEL_RECORDED 0x2u    /* takes a recording's addresses (addresses = "recorded") */
#define CP_MODEL_KEEPS_IDLE 0x4u  /* serving a framework, it keeps every idle chunk unless
                                     the spec gives release_threshold (cp_pool_spec_serve) */
#define CP_MODEL_TOGETHER 0x8u    /* its options are one set (a constructor's arguments):
                                     given to another kind, a message names them all */

typedef struct cp_model {
    const char *name;
    /* Makes the pool; owns up, even on failure.  o's model options are this
     * model's (cp_pool_own), filled with their defaults where not given. */
    cp_status (*create)(cp_resource **out, cp_resource *up, const cp_pool_opts *o);
    const cp_opt *opts;    /* its own options, ended by a row whose name is NULL (NULL: none) */
    size_t opts_size;      /* the size of its options' struct (at most CP_MODEL_OPTS_MAX) */
    const char *const *foreign; /* common options it refuses (NULL-ended; NULL: none) */
    const char *foreign_why;    /* ... and why, said after "does not apply to kind 'x'" */
    /* NULL, or a check across options after a parser read them all:
     * CP_ERR_INVALID and the message ("kind 'torch' takes upstream ..."). */
    cp_status (*check)(const cp_pool_opts *o);
    const char *no_spec;   /* non-NULL: a spec cannot name the kind, and why ("needs a
                              path and a symbol, which a spec does not carry") */
    unsigned traits;       /* CP_MODEL_* */
} cp_model;

/* The i-th model (the shipped ones in model.c's order, then those
 * registered), NULL past the last; a model by name, NULL if none. */
const cp_model *cp_model_at(int i);
const cp_model *cp_model_find(const char *kind);
/* Adds a model (for models outside src/: call it before any pool is made,
 * from one thread).  CP_ERR_INVALID when the row is malformed or its name or
 * one of its options' names is taken by another meaning. */
cp_status cp_model_register(const cp_model *m);

/* The common options (every kind's, stored in cp_pool_opts), ended by a
 * row whose name is NULL. */
const cp_opt *cp_pool_common_opts(void);
/* Model m's option of that name (m NULL: a common one), or NULL. */
const cp_opt *cp_model_opt(const cp_model *m, const char *name);
/* Whether a name is an option of any kind, and the first model whose own
 * option it is (NULL: none, or a common option). */
int cp_pool_opt_known(const char *name);
const cp_model *cp_pool_opt_owner(const char *name);
/* Whether m refuses the common option name (m->foreign). */
int cp_model_refuses(const cp_model *m, const char *name);
/* m's options' struct at own (m->opts_size bytes) set to their defaults. */
void cp_model_defaults(const cp_model *m, void *own);

/* Stores value v (as d's type says: uint64_t, int, double or const char *)
 * as option d of o, a common option or one of o's model's, running d's check:
 * CP_ERR_INVALID and its message.  The parsers call it for every option
 * given. */
cp_status cp_pool_opt_set(cp_pool_opts *o, const cp_opt *d, const void *v);

/* The name of the i-th model (cp_model_at's), NULL past the last. */
const char *cp_model_name(int i);
/* Of name(0), name(1), ... (NULL ends them), the one a misspelt v most
 * likely meant: within two edits of it (a letter added, dropped, changed,
 * or two swapped), fewer than half its letters, and nearer than every
 * other; NULL where none is.  For "did you mean" in refusals. */
const char *cp_nearest_name(const char *v, const char *(*name)(int i));

/* The traits of the model behind r (0 for an adaptor or an upstream). */
unsigned cp_model_traits_of(const cp_resource *r);
/* The names of the models with every trait in `traits`, in order, each in
 * quote (a character), the last two joined by last (" or ", " and "):
 * "\"torch\", \"bfc\" or \"cupy\"".  Returns buf. */
const char *cp_model_names(char *buf, size_t len, unsigned traits, char quote, const char *last);

#ifdef __cplusplus
}
#endif

#endif /* CUPOLA_MODEL_H */
