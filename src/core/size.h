/*
 * size.h: byte counts written as text ("4MiB", "1.5 GiB", "256B", "4096"),
 * read the same way by the Lua binding (cupola.bytes, every size option) and
 * by C entry points that take strings (the PyTorch allocator's pool spec).
 *
 * Plain C: never includes lua.h.
 */
#ifndef CUPOLA_SIZE_H
#define CUPOLA_SIZE_H

#include <stdint.h>

/* Binary units only (1 KiB = 1024 B): B, KiB, MiB, GiB, TiB, or none; a
 * decimal mantissa (digits and one point), blanks around it allowed.  No
 * sign, hex, exponent, "inf" or "nan".  Returns 0 and *out, or -1 when s is
 * not such a size or the value is not a whole number of bytes below 2^64. */
int cp_parse_size(const char *s, uint64_t *out);

#endif /* CUPOLA_SIZE_H */
