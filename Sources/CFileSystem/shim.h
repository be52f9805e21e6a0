#ifndef JOBCTL_CFILESYSTEM_SHIM_H
#define JOBCTL_CFILESYSTEM_SHIM_H

// What Glibc's Swift module leaves out: the filesystem type of an open file (`fstatfs(2)`, in
// <sys/vfs.h>). Header-only: nothing is linked beyond libc.

#include <sys/vfs.h>

/// The `f_type` magic number of the filesystem holding `fd` (TMPFS_MAGIC 0x01021994, …), or -1 when
/// `fstatfs` fails.
static inline long jobctl_filesystem_type(int fd) {
    struct statfs info;
    if (fstatfs(fd, &info) != 0) return -1;
    return (long)info.f_type;
}

#endif
