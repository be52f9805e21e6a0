#ifndef JOBCTL_CCRC32C_SHIM_H
#define JOBCTL_CCRC32C_SHIM_H

// CRC-32C (Castagnoli) with the CPU's own instructions: SSE4.2 `crc32` on x86-64, the ARMv8 CRC
// extension on AArch64. Header-only: the functions are `static inline` and nothing is linked.
// The state is the reflected running CRC (start with 0xFFFFFFFF, invert at the end), exactly as
// the table-driven code in Checksums keeps it, so the two paths can continue each other.

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

// The compiler builtins behind `_mm_crc32_u64` / `_mm_crc32_u8` (<nmmintrin.h>). The intrinsics
// themselves are always-inline functions that Swift's importer does not emit bodies for when they are
// called from another inline function, which leaves undefined references at link time.

/// 1 when this CPU has SSE4.2 (CPUID leaf 1, ECX bit 20), else 0.
static inline int jobctl_crc32c_hardware_available(void) {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    return (ecx & bit_SSE4_2) != 0;
}

/// Continues `crc` over `count` bytes. Only call when `jobctl_crc32c_hardware_available()` is 1.
__attribute__((target("sse4.2")))
static inline uint32_t jobctl_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *next = (const unsigned char *)bytes;
    uint64_t state = crc;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, next, sizeof word);   // unaligned-safe load
        state = __builtin_ia32_crc32di(state, word);
        next += 8;
        count -= 8;
    }
    uint32_t tail = (uint32_t)state;
    while (count > 0) {
        tail = __builtin_ia32_crc32qi(tail, *next);
        next += 1;
        count -= 1;
    }
    return tail;
}

/// Continues three independent CRC states over three consecutive parts of `part` bytes each (`part` a
/// multiple of 8) in one interleaved loop. The `crc32` instruction has a latency of three cycles and a
/// throughput of one, so three chains in flight run about three times as fast as one; the caller
/// combines the three results (CRC32C.combine's shift). Only call when hardware is available.
__attribute__((target("sse4.2")))
static inline void jobctl_crc32c_update3(uint32_t *crcs, const void *bytes, size_t part) {
    const unsigned char *first = (const unsigned char *)bytes;
    const unsigned char *second = first + part;
    const unsigned char *third = second + part;
    uint64_t a = crcs[0], b = crcs[1], c = crcs[2];
    for (size_t offset = 0; offset + 8 <= part; offset += 8) {
        uint64_t wa, wb, wc;
        memcpy(&wa, first + offset, sizeof wa);
        memcpy(&wb, second + offset, sizeof wb);
        memcpy(&wc, third + offset, sizeof wc);
        a = __builtin_ia32_crc32di(a, wa);
        b = __builtin_ia32_crc32di(b, wb);
        c = __builtin_ia32_crc32di(c, wc);
    }
    crcs[0] = (uint32_t)a;
    crcs[1] = (uint32_t)b;
    crcs[2] = (uint32_t)c;
}

#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>

/// 1: the compiler was told the CRC extension is there (`__ARM_FEATURE_CRC32`).
static inline int jobctl_crc32c_hardware_available(void) { return 1; }

/// Continues `crc` over `count` bytes with the ARMv8 `crc32c` instructions.
static inline uint32_t jobctl_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *next = (const unsigned char *)bytes;
    while (count >= 8) {
        uint64_t word;
        memcpy(&word, next, sizeof word);
        crc = __crc32cd(crc, word);
        next += 8;
        count -= 8;
    }
    while (count > 0) {
        crc = __crc32cb(crc, *next);
        next += 1;
        count -= 1;
    }
    return crc;
}

/// Three interleaved chains over three consecutive parts of `part` bytes each, as on x86-64.
static inline void jobctl_crc32c_update3(uint32_t *crcs, const void *bytes, size_t part) {
    const unsigned char *first = (const unsigned char *)bytes;
    crcs[0] = jobctl_crc32c_update(crcs[0], first, part);
    crcs[1] = jobctl_crc32c_update(crcs[1], first + part, part);
    crcs[2] = jobctl_crc32c_update(crcs[2], first + 2 * part, part);
}

#else

/// 0: no CRC32C instructions known on this architecture; the table path is used.
static inline int jobctl_crc32c_hardware_available(void) { return 0; }

/// Never called (the availability check is 0); returns `crc` unchanged.
static inline uint32_t jobctl_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes;
    (void)count;
    return crc;
}

/// Never called (the availability check is 0); leaves the states unchanged.
static inline void jobctl_crc32c_update3(uint32_t *crcs, const void *bytes, size_t part) {
    (void)crcs;
    (void)bytes;
    (void)part;
}

#endif

#endif
