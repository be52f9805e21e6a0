#ifndef JOBCTL_CFILESYSTEM_SHIM_H
#define JOBCTL_CFILESYSTEM_SHIM_H

// What Glibc's Swift module leaves out: the filesystem type of an open file or a path (`fstatfs(2)`,
// `statfs(2)`, in <sys/vfs.h>), a rename that never replaces (`renameat2(2)` with `RENAME_NOREPLACE`), an open file
// description's lock (`F_OFD_SETLK`, a GNU extension, and `fcntl`'s variadic pointer), a shell started
// with `posix_spawn` in a process group of its own, `accept4`, `malloc_trim` (<malloc.h>), and
// `prctl(2)` (variadic in glibc, so not imported).
// Header-only: nothing is linked beyond libc.

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

/// The `f_type` magic number of the filesystem holding `fd` (TMPFS_MAGIC 0x01021994, …), or -1 when
/// `fstatfs` fails.
static inline long jobctl_filesystem_type(int fd) {
    struct statfs info;
    if (fstatfs(fd, &info) != 0) return -1;
    return (long)info.f_type;
}

/// `prctl(PR_SET_DUMPABLE, dumpable)`: 0 turns core dumps (and same-user ptrace) off for this process.
static inline int jobctl_set_dumpable(int dumpable) {
    return prctl(PR_SET_DUMPABLE, (unsigned long)dumpable, 0UL, 0UL, 0UL);
}

/// `jobctl_filesystem_type` of the folder at `path` (`statfs(2)`, links followed), or -1 when it fails.
static inline long jobctl_path_filesystem_type(const char *path) {
    struct statfs info;
    if (statfs(path, &info) != 0) return -1;
    return (long)info.f_type;
}

#ifndef O_PATH
#define O_PATH 010000000
#endif

/// `jobctl_filesystem_type` of the entry `name` in the folder `directory` itself (a link is not
/// followed), opened `O_PATH`: nothing of it is read, and a FIFO or device is not opened; -1 when it fails.
static inline long jobctl_filesystem_type_at(int directory, const char *name) {
    int fd = openat(directory, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    long type = jobctl_filesystem_type(fd);
    close(fd);
    return type;
}

/// `renameat2(directory, from, directory, to, RENAME_NOREPLACE)`: `from` takes the name `to` only while
/// nothing is there, in one step (EEXIST otherwise). Through `syscall(2)`, as glibc before 2.28 had no
/// wrapper; EINVAL where the filesystem cannot refuse a replacement (some network filesystems), ENOSYS
/// on kernels before 3.15. https://man7.org/linux/man-pages/man2/rename.2.html
static inline int jobctl_rename_noreplace(int directory, const char *from, const char *to) {
    return (int)syscall(SYS_renameat2, directory, from, directory, to, 1u /* RENAME_NOREPLACE */);
}

#ifndef F_OFD_SETLK
#define F_OFD_SETLK 37
#endif

/// `fcntl(fd, F_OFD_SETLK)` of `type` (`F_WRLCK`, `F_UNLCK`) on the whole file, however far it grows.
static inline int jobctl_set_open_file_lock(int fd, short type) {
    struct flock lock = {0};
    lock.l_type = type;
    lock.l_whence = SEEK_SET;
    lock.l_start = 0;
    lock.l_len = 0;   // to the end, however far the file grows
    lock.l_pid = 0;   // required for F_OFD_* requests
    return fcntl(fd, F_OFD_SETLK, &lock);
}

/// `fcntl(fd, F_OFD_SETLK)` with an exclusive (write) lock on the whole file, never waiting: 0 when
/// taken (or already held through this open file description), 1 when another open file description
/// holds a lock on the file (EAGAIN, EACCES), -1 with errno otherwise (ENOLCK, EINVAL where the
/// filesystem has no such locks). The lock belongs to the open file description, not to the process:
/// two descriptors a process opened separately conflict, a duplicate (`dup`) shares it, and it goes
/// with the description's last descriptor (a close, or the process's death, however it died).
/// https://man7.org/linux/man-pages/man2/fcntl.2.html ("Open file description locks")
static inline int jobctl_lock_open_file(int fd) {
    if (jobctl_set_open_file_lock(fd, F_WRLCK) == 0) return 0;
    if (errno == EAGAIN || errno == EACCES) return 1;
    return -1;
}

/// Lets go of the lock `jobctl_lock_open_file` took through `fd`'s open file description (`F_OFD_SETLK`
/// with `F_UNLCK`): 0, or -1 with errno. A close lets the lock go only with the description's last
/// descriptor, and a child forked meanwhile by any thread (`posix_spawn`, between its clone and its exec)
/// holds a copy of every descriptor: unlocked first, the lock goes when its holder means it to.
static inline int jobctl_unlock_open_file(int fd) {
    return jobctl_set_open_file_lock(fd, F_UNLCK);
}

/// Glibc's (2.34+), which its Swift module does not show: closes every descriptor from `from` on in the
/// spawned process.
extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *, int);
extern char **environ;
extern int pipe2(int fds[2], int flags);
extern int accept4(int fd, struct sockaddr *address, socklen_t *length, int flags);

/// Hands the memory that malloc holds free back to the kernel (`malloc_trim(0)`: the free pages inside
/// every arena, not only at their tops). glibc keeps what a thread's arena once held: a long-running
/// worker's resident size settled near 70 MB for a live heap of 8–11 MB. Returns 1 when some memory was released.
static inline int jobctl_release_free_memory(void) {
    return malloc_trim(0);
}

/// A connection accepted on `listener` that closes on exec and never blocks (`accept4` with
/// `SOCK_CLOEXEC | SOCK_NONBLOCK`: no other thread's spawn can inherit it between two calls).
static inline int jobctl_accept_nonblocking(int listener) {
    return accept4(listener, (struct sockaddr *)0, (socklen_t *)0, SOCK_CLOEXEC | SOCK_NONBLOCK);
}

/// A pipe whose two ends close on exec (`pipe2(O_CLOEXEC)`: no other thread's spawn can inherit them).
static inline int jobctl_pipe_cloexec(int fds[2]) {
    return pipe2(fds, O_CLOEXEC);
}

/// Starts `/bin/sh -c command` as the leader of a process group of its own (so everything it starts can
/// be stopped together), standard input and error on /dev/null, standard output the descriptor `out`,
/// no other descriptor of this process inherited, its signals unblocked and SIGTERM, SIGINT, SIGHUP,
/// SIGPIPE and SIGXFSZ at their default action (a worker blocks the first two and ignores the last two),
/// `environment` (NULL-terminated `NAME=value` strings) its environment.
/// 0 and the pid in `pid`, or an errno.
static inline int jobctl_spawn_shell(const char *command, int out, char *const environment[], pid_t *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int error = posix_spawn_file_actions_init(&actions);
    if (error != 0) return error;
    error = posix_spawnattr_init(&attributes);
    if (error != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return error;
    }
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGHUP);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGXFSZ);
    if ((error = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)) == 0
        && (error = posix_spawn_file_actions_adddup2(&actions, out, 1)) == 0
        && (error = posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)) == 0
        && (error = posix_spawn_file_actions_addclosefrom_np(&actions, 3)) == 0
        && (error = posix_spawnattr_setsigmask(&attributes, &none)) == 0
        && (error = posix_spawnattr_setsigdefault(&attributes, &defaults)) == 0
        && (error = posix_spawnattr_setpgroup(&attributes, 0)) == 0
        && (error = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)) == 0) {
        char *const argv[] = {"sh", "-c", (char *)command, NULL};
        error = posix_spawn(pid, "/bin/sh", &actions, &attributes, argv, environment);
    }
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return error;
}

#endif
