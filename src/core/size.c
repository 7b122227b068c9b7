/*
 * size.c: byte counts written as text (size.h).
 */
#include "size.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cp_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        int shift;
    } units[] = {{"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
    char *end;
    double mant;
    size_t i;

    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -1; /* no sign, no hex, no "inf" */
    mant = strtod(s, &end);
    /* strtod also reads hex ("0x10") and exponents ("1e3"): only decimal
     * digits and a point are a size. */
    for (const char *c = s; c < end; c++)
        if (!isdigit((unsigned char)*c) && *c != '.')
            return -1;
    while (isspace((unsigned char)*end))
        end++;
    for (i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) == 0) {
            double v = ldexp(mant, units[i].shift);
            if (!(v >= 0) || v != floor(v) || v >= 18446744073709551616.0)
                return -1;
            *out = (uint64_t)v;
            return 0;
        }
    }
    return -1;
}
