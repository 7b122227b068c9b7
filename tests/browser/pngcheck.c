/*
 * pngcheck.c: counts the drawn pixels of a rectangle of a PNG screenshot,
 * for the headless-browser check of cupola.timeline pages (make
 * test-browser).  Reads 8-bit RGB or RGBA, non-interlaced PNGs (what
 * Chromium's --screenshot writes) with zlib; no other library.
 *
 *   pngcheck shot.png X Y W H    prints "W H drawn distinct" where drawn counts
 *                                the rectangle's pixels that are neither white
 *                                nor the page's band background (#f8f8f8) and
 *                                distinct the colours seen (up to 4096)
 *
 * Exit status 2 on a file it cannot read.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

int main(int argc, char **argv)
{
    FILE *f;
    unsigned char *file, *idat = NULL, *raw;
    long len;
    size_t pos = 8, nidat = 0, rawlen, stride, y, x;
    uint32_t w = 0, h = 0;
    int bpp = 0, depth = 0, ctype = 0, interlace = 0;
    long rx, ry, rw, rh, drawn = 0, ndistinct = 0;
    static uint32_t distinct[4096];
    uLongf outlen;

    if (argc != 6) {
        fprintf(stderr, "usage: pngcheck file.png X Y W H\n");
        return 2;
    }
    rx = atol(argv[2]);
    ry = atol(argv[3]);
    rw = atol(argv[4]);
    rh = atol(argv[5]);
    f = fopen(argv[1], "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 8 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "pngcheck: cannot read %s\n", argv[1]);
        return 2;
    }
    file = malloc((size_t)len);
    if (!file || fread(file, 1, (size_t)len, f) != (size_t)len ||
        memcmp(file, "\x89PNG\r\n\x1a\n", 8) != 0) {
        fprintf(stderr, "pngcheck: %s is not a PNG\n", argv[1]);
        return 2;
    }
    fclose(f);
    while (pos + 12 <= (size_t)len) {
        uint32_t n = be32(file + pos);
        const unsigned char *type = file + pos + 4, *data = file + pos + 8;
        if (pos + 12 + n > (size_t)len)
            break;
        if (memcmp(type, "IHDR", 4) == 0 && n >= 13) {
            w = be32(data);
            h = be32(data + 4);
            depth = data[8];
            ctype = data[9];
            interlace = data[12];
        } else if (memcmp(type, "IDAT", 4) == 0) {
            unsigned char *ni = realloc(idat, nidat + n);
            if (!ni)
                return 2;
            idat = ni;
            memcpy(idat + nidat, data, n);
            nidat += n;
        }
        pos += 12 + n;
    }
    bpp = ctype == 6 ? 4 : ctype == 2 ? 3 : 0;
    if (!w || !h || depth != 8 || !bpp || interlace || w > 20000 || h > 40000) {
        fprintf(stderr, "pngcheck: unsupported PNG (%ux%u, depth %d, colour type %d)\n", w, h,
                depth, ctype);
        return 2;
    }
    stride = (size_t)w * (size_t)bpp;
    rawlen = (stride + 1) * h;
    raw = malloc(rawlen);
    outlen = (uLongf)rawlen;
    if (!raw || uncompress(raw, &outlen, idat, (uLong)nidat) != Z_OK || outlen != rawlen) {
        fprintf(stderr, "pngcheck: corrupt image data\n");
        return 2;
    }
    /* Undo the filters in place, row by row. */
    for (y = 0; y < h; y++) {
        unsigned char *row = raw + y * (stride + 1) + 1, *prev = y ? row - (stride + 1) : NULL;
        int ft = row[-1];
        for (x = 0; x < stride; x++) {
            int a = x >= (size_t)bpp ? row[x - (size_t)bpp] : 0, b = prev ? prev[x] : 0;
            int c = prev && x >= (size_t)bpp ? prev[x - (size_t)bpp] : 0;
            int v = row[x];
            if (ft == 1)
                v += a;
            else if (ft == 2)
                v += b;
            else if (ft == 3)
                v += (a + b) / 2;
            else if (ft == 4)
                v += paeth(a, b, c);
            row[x] = (unsigned char)v;
        }
    }
    for (y = (size_t)(ry < 0 ? 0 : ry); y < h && (long)y < ry + rh; y++) {
        for (x = (size_t)(rx < 0 ? 0 : rx); x < w && (long)x < rx + rw; x++) {
            const unsigned char *p = raw + y * (stride + 1) + 1 + x * (size_t)bpp;
            uint32_t rgb = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
            long k;
            if (rgb == 0xffffff || rgb == 0xf8f8f8)
                continue;
            drawn++;
            for (k = 0; k < ndistinct && distinct[k] != rgb; k++)
                ;
            if (k == ndistinct && ndistinct < 4096)
                distinct[ndistinct++] = rgb;
        }
    }
    printf("%u %u %ld %ld\n", w, h, drawn, ndistinct);
    free(raw);
    free(idat);
    free(file);
    return 0;
}
