#ifndef JOBCTL_CZLIB_SHIM_H
#define JOBCTL_CZLIB_SHIM_H

#include <zlib.h>

/// deflateInit2 and inflateInit2 are macros (they pass the library version and the stream size):
/// typed functions Swift can call.
static inline int jobctl_deflate_init_gzip(z_streamp stream, int level) {
    /* 15 + 16: a 32 KiB window with a gzip header and trailer instead of zlib's. */
    return deflateInit2(stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
}

static inline int jobctl_inflate_init_gzip(z_streamp stream) {
    /* 15 + 16: gzip only (a zlib or raw stream is refused). */
    return inflateInit2(stream, 15 + 16);
}

#endif
